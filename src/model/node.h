// A provider node as the server records it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace gpupool {

// The node's registration, as stored. ready: connected; offline: not
// connected but within the grace period (its attempts are kept); lost: gone
// past the grace period (its attempts were requeued); left: its agent
// drained and deregistered (`gpupool agent leave`). What people see
// (available, busy, paused, ...) is NodeStatusName, from this and the
// agent's lending.
enum class NodeState { kReady, kOffline, kLost, kLeft };
std::string_view NodeStateName(NodeState s);
Result<NodeState> ParseNodeState(std::string_view name);

// Labels an agent sets itself, describing how it runs jobs (a provider's
// own --label may not start with "gpupool/"):
//   gpupool/executor.<name>: "true"   each executor it offers and that works
//   gpupool/images: "true"            its sandbox runs images (skopeo, umoci)
// The server turns a job's `executor` and `image` into these requirements
// (an image job that names no executor, or the sandbox, needs
// gpupool/images; docker and podman pull docker:// images themselves).
inline constexpr std::string_view kReservedLabelPrefix = "gpupool/";
inline constexpr const char* kImagesLabel = "gpupool/images";
inline std::string ExecutorLabel(std::string_view executor) {
  return "gpupool/executor." + std::string(executor);
}

// How a node shares a GPU between tasks that hold a share of it (the
// provider's `policy.sharing`, agent/policy.h): not at all (whole GPUs
// only); through libgpushare.so (src/gpushare: memory cap and compute
// share); or through NVIDIA MPS with the interposer's memory cap on top
// (agent/mps.h; one pool user per GPU at a time).
enum class GpuSharing { kNone, kInterposer, kMps };
std::string_view GpuSharingName(GpuSharing s);  // "none", "interposer", "mps"
// InvalidArgument naming the three for anything else.
Result<GpuSharing> ParseGpuSharing(std::string_view name);

// What a provider lends right now, as its agent reports it (in its hello
// and whenever it changes) from the provider's policy (agent/policy.h), the
// time of day, the owner's own GPU use and the owner's commands. The server
// places only work this admits (LendingAdmits); the agent checks the same
// function before it starts anything, so the two agree but for the moments
// a change is in flight.
struct NodeLending {
  // "lending"; "paused" (takes no new work; running work goes on);
  // "leaving" (draining before it deregisters); "closed" (outside the
  // availability windows: lends nothing).
  std::string mode = "lending";
  std::map<std::string, int64_t> gpus;  // lent now: GPU uuid -> MiB of it lent
  // GPUs not lent now, and why ("not lent by the policy", "outside the
  // availability windows", "its owner runs process 4242 on it", "reclaimed
  // by the owner", "busy (utilization 80% > 10%)").
  std::map<std::string, std::string> not_lent;
  // How shares of a GPU are held here; kNone: whole GPUs only. On the wire
  // and in the store as "sharing"; records from before it have only
  // "fractional" (true: interposer), which is still written beside it for
  // servers that predate it.
  GpuSharing sharing = GpuSharing::kInterposer;
  std::set<std::string> allow_users, deny_users;
  std::set<std::string> allow_groups, deny_groups;
  int64_t max_runtime_ms = 0;  // 0: any; else a job must say it ends within this
  bool host_network = false;   // jobs may ask for `network: host`
  int64_t next_change_ms = 0;  // when the windows next open or close; 0: never
  friend bool operator==(const NodeLending&, const NodeLending&) = default;
};

// JSON for the wire, the store and the API, and back (strict: errors name
// the field under `path`; a mode other than the four is an error).
nlohmann::json NodeLendingToJson(const NodeLending& l);
Result<NodeLending> NodeLendingFromJson(const nlohmann::json& j, const std::string& path);

// Something a provider did to its node, kept by the server in the node's
// event log: "reclaim" (GPUs taken back: by command, a window closing or
// the owner's own GPU work; `reason` says which), "pause", "resume",
// "leave", "policy" (a new policy came into force).
struct NodeEvent {
  int64_t id = 0;  // assigned by the store, ascending
  std::string node_id;
  int64_t ts_ms = 0;  // when the agent acted
  std::string kind;
  std::string reason;
  std::vector<std::string> gpus;      // the GPUs it concerns; empty: the node
  std::vector<std::string> attempts;  // the attempts it vacated
  friend bool operator==(const NodeEvent&, const NodeEvent&) = default;
};
// "refused": an owner's command sent through the server that the agent refused.
inline constexpr std::string_view kNodeEventKinds[] = {"reclaim", "pause",  "resume",
                                                       "leave",   "policy", "refused"};

// What a start order asks of a node, as far as its lending cares.
struct LendingRequest {
  std::string user;
  std::string group;
  int64_t max_runtime_ms = 0;  // 0: none given
  std::vector<std::string> gpu_uuids;
  int32_t gpu_milli = 1000;    // per GPU; < 1000 is a share
  int64_t gpu_memory_mib = 0;  // per GPU, for a share
  bool host_network = false;   // the job asks for `network: host`
};

// Why `lending` refuses `request` (FailedPrecondition "refused by the
// provider's policy: ..."), or OK. `gpus` are the node's GPUs; a GPU of
// which only part of the memory is lent takes shares only. With no GPUs in
// the request only the mode, users, groups, runtime, shares and the
// network are checked.
Status LendingAdmits(const NodeLending& lending, const LendingRequest& request,
                     const std::vector<GpuInfo>& gpus);

// The state people see: "available" (lends and has room), "busy" (lends,
// every lent GPU is taken), "paused", "draining", "reclaimed" (the owner
// took back every GPU, or the windows are closed), "offline", "lost",
// "left". `lending` absent: an agent that lends everything.
std::string_view NodeStatusName(NodeState state, bool connected, const NodeLending* lending,
                                bool has_free_lent_gpu, bool has_gpus);

struct Node {
  std::string id;    // "n-3f9a0c1b2d4e", assigned by the server at first registration
  std::string name;  // unique, chosen by the provider (--name)
  NodeState state = NodeState::kOffline;
  std::vector<GpuInfo> gpus;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string driver_version;  // empty when unknown
  std::string cuda_version;    // e.g. "12.4"
  std::string agent_version;
  std::map<std::string, std::string> labels;
  std::string owner_group;  // the group (lab) that owns the machine; empty = none
  // As the agent last reported it; absent from agents that predate policies
  // (they lend everything).
  std::optional<NodeLending> lending;
  int64_t registered_ms = 0;
  int64_t last_seen_ms = 0;

  friend bool operator==(const Node&, const Node&) = default;
};

}  // namespace gpupool
