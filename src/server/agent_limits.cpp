#include "server/agent_limits.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace gpupool::server {

namespace {

std::string Num(double v) { return std::to_string(static_cast<int64_t>(std::llround(v))); }

std::string MiB(double bytes) { return Num(bytes / (1 << 20)) + " MiB"; }

}  // namespace

void TokenBucket::Refill(int64_t now_ms) {
  if (now_ms > last_ms_) {
    tokens_ = std::min(burst_, tokens_ + rate_ * static_cast<double>(now_ms - last_ms_) / 1000.0);
    last_ms_ = now_ms;
  }
}

int64_t TokenBucket::Take(double n, int64_t now_ms) {
  Refill(now_ms);
  tokens_ -= n;
  if (tokens_ >= 0) return 0;
  if (rate_ <= 0) return INT64_MAX;
  return static_cast<int64_t>(std::ceil(-tokens_ * 1000.0 / rate_));
}

ChannelBudget::ChannelBudget(const ChannelLimits& limits, int64_t now_ms)
    : limits_(limits),
      messages_(limits.messages_per_s, limits.message_burst, now_ms),
      frames_(limits.frames_per_s, limits.frame_burst, now_ms),
      text_bytes_(limits.text_bytes_per_s, limits.text_byte_burst, now_ms) {}

ChannelBudget::Verdict ChannelBudget::OnText(size_t bytes, int64_t now_ms) {
  Verdict v;
  if (bytes > limits_.max_text_bytes) {
    v.refuse = "message of " + std::to_string(bytes) +
               " bytes is over the agent channel's limit of " +
               std::to_string(limits_.max_text_bytes);
    return v;
  }
  if (messages_.Take(1, now_ms) > 0) {
    v.refuse = "flooding: more than " + Num(limits_.messages_per_s) + " messages a second (burst " +
               Num(limits_.message_burst) + ")";
    return v;
  }
  v.pause_ms = text_bytes_.Take(static_cast<double>(bytes), now_ms);
  return v;
}

ChannelBudget::Verdict ChannelBudget::OnBinary(size_t bytes, int64_t now_ms) {
  Verdict v;
  if (bytes > limits_.max_binary_bytes) {
    v.refuse = "tunnel frame of " + std::to_string(bytes) +
               " bytes is over the agent channel's limit of " +
               std::to_string(limits_.max_binary_bytes);
    return v;
  }
  if (frames_.Take(1, now_ms) > 0) {
    v.refuse = "flooding: more than " + Num(limits_.frames_per_s) +
               " tunnel frames a second (burst " + Num(limits_.frame_burst) + ")";
  }
  return v;
}

Status CheckHelloClaims(const proto::Hello& h, const NodeClaimLimits& limits) {
  auto bad = [](const std::string& field, const std::string& why) {
    return Status::InvalidArgument(field + ": " + why);
  };
  if (h.gpus.size() > limits.max_gpus) {
    return bad("gpus", std::to_string(h.gpus.size()) + " GPUs on one node; at most " +
                           std::to_string(limits.max_gpus) + " are believed");
  }
  if (h.cpu_milli > limits.max_cpu_milli) {
    return bad("cpu_milli", std::to_string(h.cpu_milli / 1000) + " CPUs; at most " +
                                std::to_string(limits.max_cpu_milli / 1000) + " are believed");
  }
  if (h.memory_mib > limits.max_memory_mib) {
    return bad("memory_mib",
               MiB(static_cast<double>(h.memory_mib) * (1 << 20)) + " of memory; at most " +
                   MiB(static_cast<double>(limits.max_memory_mib) * (1 << 20)) + " is believed");
  }
  std::set<std::string> uuids;
  // Each index is one physical GPU: a whole GPU's own, or shared by the MIG
  // instances of one parent (the value: its UUID, or its parent's).
  std::map<int32_t, std::string> indexes;
  for (size_t i = 0; i < h.gpus.size(); ++i) {
    const GpuInfo& g = h.gpus[i];
    const std::string at = "gpus[" + std::to_string(i) + "]";
    if (!uuids.insert(g.uuid).second) return bad(at + ".uuid", g.uuid + " is listed twice");
    const std::string& physical = g.IsMig() ? g.parent_uuid : g.uuid;
    if (auto [it, fresh] = indexes.emplace(g.index, physical); !fresh && it->second != physical)
      return bad(at + ".index", std::to_string(g.index) + " is listed twice");
    if (g.IsMig() && g.parent_uuid == g.uuid) {
      return bad(at + ".parent_uuid", "a MIG instance cannot be its own parent");
    }
    if (g.memory_mib > limits.max_gpu_memory_mib) {
      return bad(at + ".memory_mib", std::to_string(g.memory_mib) + " MiB on one GPU; at most " +
                                         std::to_string(limits.max_gpu_memory_mib) +
                                         " are believed");
    }
  }
  // A GPU in MIG mode is offered only as its instances, never also whole.
  for (size_t i = 0; i < h.gpus.size(); ++i) {
    const GpuInfo& g = h.gpus[i];
    if (g.IsMig() && uuids.count(g.parent_uuid) > 0) {
      return bad("gpus[" + std::to_string(i) + "].parent_uuid",
                 g.parent_uuid + " is listed as a whole GPU as well as in MIG mode");
    }
  }
  return Status::Ok();
}

void GpuOwners::Reset(const std::map<std::string, std::vector<std::string>>& by_node) {
  owner_.clear();
  held_ = by_node;
  for (const auto& [node, uuids] : held_) {
    for (const std::string& u : uuids) owner_.emplace(u, node);  // the first node keeps it
  }
}

std::optional<std::pair<size_t, std::string>> GpuOwners::Conflict(
    const std::string& node, const std::vector<GpuInfo>& gpus) const {
  for (size_t i = 0; i < gpus.size(); ++i) {
    auto it = owner_.find(gpus[i].uuid);
    if (it != owner_.end() && it->second != node) return std::make_pair(i, it->second);
  }
  return std::nullopt;
}

void GpuOwners::Claim(const std::string& node, const std::vector<GpuInfo>& gpus) {
  for (const std::string& u : held_[node]) {
    if (auto it = owner_.find(u); it != owner_.end() && it->second == node) owner_.erase(it);
  }
  std::vector<std::string>& mine = held_[node];
  mine.clear();
  for (const GpuInfo& g : gpus) {
    mine.push_back(g.uuid);
    owner_.emplace(g.uuid, node);
  }
}

}  // namespace gpupool::server
