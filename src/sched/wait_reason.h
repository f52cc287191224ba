// Why a job waits, as data (WaitReason: a kind and its parameters), and the
// one place that renders it and a queue entry's explanation: to the texts
// users read (a job's `reason` and `explanation`) and to the API's JSON.
//
// Contract: the scheduler (Decide) and the server build WaitReasons; nothing
// but this unit turns them into text. Rendering is pure: the same value gives
// the same text, reading no clock (durations travel as parameters), safe
// from any thread; a WaitTextMemo is one caller's at a time. The texts are
// the ones users have always read; tests and scripts match them, so a change
// to one is a change to the product.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sched/fairshare.h"

namespace gpupool::sched {

enum class WaitKind {
  // It could run once capacity frees: "waiting for 2 free GPUs of model A100"
  // (with the preference window and the backfill reservation, if any).
  kResources,
  // The pass's placement limit was reached before its turn.
  kPlacementLimit,
  // It preempted attempts and waits for them to leave a node (the scheduler's
  // view, in the pass that preempts).
  kPreempting,
  // The server's view of the same: the preempted jobs still leaving.
  kVictimsLeaving,
  // No ready node could ever host it (Waiting::unsatisfiable):
  kExcludedNodes,    // only nodes it may not use could
  kNoReadyNode,      // no node is ready
  kNoLabelledNode,   // no ready node has its labels
  kNoMigInstance,    // no MIG instance of its profile (and model, capability)
  kNoGpuModel,       // no GPU of its models
  kNoGpuMemory,      // no GPU of its models with its GPU memory
  kNoGpuCapability,  // no GPU of its models with its compute capability
  kTooFewGpus,       // no node with as many such GPUs as it asks for
  kNoCpu,            // no node with its CPUs
  kNoMemory,         // no node with its memory
  kGangTooFewNodes,  // fewer nodes than its ranks can each host one
  kNoSingleNode,     // no node with all of it at once
};

// "resources", "placement_limit", "preempting", "victims_leaving",
// "excluded_nodes", "no_ready_node", ... (docs/api.md lists them).
std::string_view WaitKindName(WaitKind kind);
// True for the kinds that mean no ready node could ever host the job.
bool WaitKindUnsatisfiable(WaitKind kind);

// What a job asks for, per node, as far as a waiting reason describes it.
struct WaitRequest {
  int32_t nodes = 1;
  int32_t gpus = 0;
  int32_t gpu_milli = 0;
  int64_t gpu_memory_mib = 0;  // whole GPUs: each GPU's; a share: free on its GPU
  int32_t min_compute_capability = 0;
  int32_t mig_slices = 0;
  int32_t mig_memory_gb = 0;
  std::vector<std::string> gpu_models;
  std::map<std::string, std::string> node_labels;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  friend bool operator==(const WaitRequest&, const WaitRequest&) = default;
};

struct WaitReason {
  WaitKind kind = WaitKind::kResources;
  WaitRequest request;  // for the kinds that name what it asks for
  // kExcludedNodes: the excluded nodes that could host it; kTooFewGpus: the
  // most such GPUs on one node; kGangTooFewNodes: the nodes that can host a
  // rank; kPreempting: the attempts preempted for it.
  int64_t count = 0;
  std::string node;           // kPreempting: the name of the node they leave
  std::vector<int64_t> jobs;  // kVictimsLeaving: the jobs preempted for it
  // kResources: while it waits for its preferred models, those and the time
  // left; and its backfill reservation's expected start, from now (0: none).
  std::vector<std::string> preferred_models;
  int64_t prefer_left_ms = 0;
  int64_t reserved_in_ms = 0;
  // Appended after "; " (the server's word on why nodes are excluded).
  std::string note;
  friend bool operator==(const WaitReason&, const WaitReason&) = default;
};

// The job's `reason` text, e.g. "waiting for 2 free GPUs of model A100" or
// "no node has a GPU with compute capability >= 9.0".
std::string WaitReasonText(const WaitReason& reason);

// WaitReasonText for the many waiting jobs of one pass, rendering each of
// the last kSize distinct reasons once: alike requests wait for alike
// things, so most jobs of a pass repeat a reason rendered just before.
class WaitTextMemo {
 public:
  static constexpr size_t kSize = 16;
  // Valid until the next call.
  const std::string& Text(const WaitReason& reason);

 private:
  std::vector<std::pair<WaitReason, std::string>> recent_;  // at most kSize
  size_t next_ = 0;                                         // the slot replaced next
};

// The job's `explanation`: "position 3 (normal): group vision: 31% of recent
// use, fair share 25%; within its guarantee (2.000 of 4.000 GPUs with the
// jobs ahead of it)", `position` being its place among the jobs still
// waiting (which may differ from entry.position, its place in the whole
// queue).
std::string ExplanationText(int64_t position, const QueueEntry& entry);

// The API's structured form of both, a job's "wait" (docs/api.md):
// {"kind": WaitKindName, "unsatisfiable": bool, "request": {...}, the
// parameters of the kind, "queue": {the explanation's figures}}.
nlohmann::json WaitingToJson(const WaitReason& reason, const QueueEntry& entry);

}  // namespace gpupool::sched
