#include "model/node.h"

#include <algorithm>

#include "common/json_reader.h"
#include "common/units.h"
#include "model/yaml.h"

namespace gpupool {

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kReady:
      return "ready";
    case NodeState::kOffline:
      return "offline";
    case NodeState::kLost:
      return "lost";
    case NodeState::kLeft:
      return "left";
  }
  return "unknown";
}

Result<NodeState> ParseNodeState(std::string_view name) {
  if (name == "ready") return NodeState::kReady;
  if (name == "offline") return NodeState::kOffline;
  if (name == "lost") return NodeState::kLost;
  if (name == "left") return NodeState::kLeft;
  return Status::InvalidArgument("unknown node state \"" + std::string(name) + "\"");
}

std::string_view GpuSharingName(GpuSharing s) {
  switch (s) {
    case GpuSharing::kNone:
      return "none";
    case GpuSharing::kInterposer:
      return "interposer";
    case GpuSharing::kMps:
      return "mps";
  }
  return "none";
}

Result<GpuSharing> ParseGpuSharing(std::string_view name) {
  if (name == "none") return GpuSharing::kNone;
  if (name == "interposer") return GpuSharing::kInterposer;
  if (name == "mps") return GpuSharing::kMps;
  return Status::InvalidArgument("must be none, interposer or mps, got " +
                                 QuoteForError(std::string(name)));
}

namespace {

std::string Join(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

bool Admits(const std::set<std::string>& allow, const std::set<std::string>& deny,
            const std::string& who) {
  return !deny.count(who) && (allow.empty() || allow.count(who));
}

}  // namespace

nlohmann::json NodeLendingToJson(const NodeLending& l) {
  return {{"mode", l.mode},
          {"gpus", l.gpus},
          {"not_lent", l.not_lent},
          {"sharing", GpuSharingName(l.sharing)},
          {"fractional", l.sharing != GpuSharing::kNone},
          {"allow_users", l.allow_users},
          {"deny_users", l.deny_users},
          {"allow_groups", l.allow_groups},
          {"deny_groups", l.deny_groups},
          {"max_runtime_ms", l.max_runtime_ms},
          {"host_network", l.host_network},
          {"next_change_ms", l.next_change_ms}};
}

Result<NodeLending> NodeLendingFromJson(const nlohmann::json& j, const std::string& path) {
  // Bounds on what an agent may report: far above real nodes and policies.
  constexpr size_t kMaxGpus = 256;
  constexpr size_t kMaxNames = 4096;  // users or groups in one list
  constexpr int64_t kMaxMib = int64_t{1} << 40;
  constexpr int64_t kMaxMs = int64_t{1} << 50;  // durations and timestamps
  if (!j.is_object()) return Status::InvalidArgument(path + ": must be an object");
  JsonReader r(j, path);
  NodeLending l;
  l.mode = r.Str("mode");
  l.gpus = r.IntMap("gpus", false, kMaxGpus);
  l.not_lent = r.StrMap("not_lent", false, kMaxGpus);
  // "sharing" wins; an older record has only "fractional".
  const bool fractional = r.Bool("fractional", false, true);
  const std::string sharing = r.Str("sharing", false);
  if (!sharing.empty()) {
    if (auto parsed = ParseGpuSharing(sharing); parsed.ok()) {
      l.sharing = *parsed;
    } else {
      r.Fail("sharing", parsed.status().message());
    }
  } else {
    l.sharing = fractional ? GpuSharing::kInterposer : GpuSharing::kNone;
  }
  auto set = [&](const char* key) {
    auto v = r.StrList(key, false, kMaxNames);
    return std::set<std::string>(v.begin(), v.end());
  };
  l.allow_users = set("allow_users");
  l.deny_users = set("deny_users");
  l.allow_groups = set("allow_groups");
  l.deny_groups = set("deny_groups");
  l.max_runtime_ms = r.IntIn("max_runtime_ms", 0, kMaxMs, false);
  l.host_network = r.Bool("host_network", false, false);
  l.next_change_ms = r.IntIn("next_change_ms", 0, kMaxMs, false);
  if (r.ok() && l.mode != "lending" && l.mode != "paused" && l.mode != "leaving" &&
      l.mode != "closed") {
    r.Fail("mode", "must be one of lending, paused, leaving, closed");
  }
  for (const auto& [uuid, mib] : l.gpus) {
    if (r.ok() && (mib < 0 || mib > kMaxMib)) {
      r.Fail("gpus",
             "lent memory must be from 0 to " + std::to_string(kMaxMib) + " MiB (" + uuid + ")");
    }
  }
  GP_RETURN_IF_ERROR(r.Finish(false));
  return l;
}

Status LendingAdmits(const NodeLending& lending, const LendingRequest& request,
                     const std::vector<GpuInfo>& gpus) {
  auto refuse = [](const std::string& why) {
    return Status::FailedPrecondition("refused by the provider's policy: " + why);
  };
  if (lending.mode == "paused") return refuse("the provider paused lending");
  if (lending.mode == "leaving") return refuse("the node is leaving the pool");
  if (lending.mode == "closed") return refuse("outside its availability windows");
  if (!Admits(lending.allow_users, lending.deny_users, request.user)) {
    return refuse(
        "it does not lend to user " + QuoteForError(request.user) +
        (lending.allow_users.empty() ? "" : " (lends to: " + Join(lending.allow_users) + ")"));
  }
  if (!Admits(lending.allow_groups, lending.deny_groups, request.group)) {
    return refuse(
        "it does not lend to group " + QuoteForError(request.group) +
        (lending.allow_groups.empty() ? "" : " (lends to: " + Join(lending.allow_groups) + ")"));
  }
  if (lending.max_runtime_ms > 0 &&
      (request.max_runtime_ms == 0 || request.max_runtime_ms > lending.max_runtime_ms)) {
    return refuse("it accepts jobs with max_runtime at most " +
                  FormatDurationMs(lending.max_runtime_ms) +
                  (request.max_runtime_ms == 0
                       ? " (the job gives none)"
                       : " (the job asks " + FormatDurationMs(request.max_runtime_ms) + ")"));
  }
  if (request.host_network && !lending.host_network) {
    return refuse("it does not allow network: host (its policy's allow_host_network is off)");
  }
  bool share = request.gpu_milli > 0 && request.gpu_milli < 1000;
  if (share && lending.sharing == GpuSharing::kNone) {
    return refuse("it lends whole GPUs only (its policy's sharing is none)");
  }
  for (const std::string& uuid : request.gpu_uuids) {
    auto gpu =
        std::find_if(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return g.uuid == uuid; });
    if (gpu == gpus.end()) return refuse("there is no GPU " + uuid + " here");
    auto lent = lending.gpus.find(uuid);
    if (lent == lending.gpus.end()) {
      auto why = lending.not_lent.find(uuid);
      return refuse("GPU " + uuid + " is not lent" +
                    (why == lending.not_lent.end() ? "" : " (" + why->second + ")"));
    }
    if (!share && lent->second < gpu->memory_mib) {
      return refuse("it lends only " + FormatMebibytes(lent->second) + " of GPU " + uuid +
                    ": shares only");
    }
    if (share && request.gpu_memory_mib > lent->second) {
      return refuse("the share asks " + FormatMebibytes(request.gpu_memory_mib) +
                    " of GPU memory; " + FormatMebibytes(lent->second) + " is lent");
    }
  }
  return Status::Ok();
}

std::string_view NodeStatusName(NodeState state, bool connected, const NodeLending* lending,
                                bool has_free_lent_gpu, bool has_gpus) {
  if (state == NodeState::kLeft) return "left";
  if (state == NodeState::kLost) return "lost";
  if (!connected || state != NodeState::kReady) return "offline";
  if (lending != nullptr) {
    if (lending->mode == "paused") return "paused";
    if (lending->mode == "leaving") return "draining";
    if (lending->mode == "closed") return "reclaimed";
    if (has_gpus && lending->gpus.empty()) return "reclaimed";
  }
  return has_gpus && !has_free_lent_gpu ? "busy" : "available";
}

}  // namespace gpupool
