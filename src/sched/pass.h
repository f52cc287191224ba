// One scheduling pass: the state Scheduler::Decide builds from a snapshot
// and the units that work on it. Internal to gpupool_sched; nothing outside
// src/sched includes this.
//
// Contract: a Pass lives for one Decide call and is used by one thread. Its
// units are free functions that take the Pass explicitly, one file per
// responsibility:
//   pass_build.cpp     checks and indexes the snapshot; orders the queue
//   pass_index.cpp     the free-capacity ledger: the index by GPU shape and
//                      free capacity, taking, holding, saving and restoring
//   pass_place.cpp     placing one job: shape tiers, fit on a node,
//                      candidates, scoring; a gang's ranks all or nothing
//   pass_score.cpp     SchedulerConfig::score_all_nodes: every feasible node
//                      scored, the scorer choosing the GPUs; RunContext's cache
//   pass_backfill.cpp  backfill reservations from running work's expected ends
//   pass_preempt.cpp   preemption: victims per node, the preemptor's hold
//   pass_wait.cpp      why a job waits, as data (wait_reason.h renders it)
//   scheduler.cpp      Decide: the walk of the queue that calls the above
// Resources are tracked twice: `free` is what is really free now (after
// this pass's placements), `phantom` the part of it held for a reservation
// (backfill or a preemptor). `avail` = free - phantom is what a job that
// would still run when the reservation starts may use, and what the index
// shows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/units.h"
#include "model/resources.h"
#include "sched/fairshare.h"
#include "sched/mig.h"
#include "sched/policies.h"
#include "sched/scheduler.h"

namespace gpupool::sched::detail {

constexpr int32_t kFull = static_cast<int32_t>(kMilliPerGpu);

// --- matching a request against a node or GPU, as if idle -------------------

inline bool ModelOk(const std::string& model, const std::vector<std::string>& wanted) {
  return wanted.empty() || std::any_of(wanted.begin(), wanted.end(), [&](const std::string& w) {
           return GpuModelMatches(model, w);
         });
}

inline bool LabelsOk(const NodeView& node, const std::map<std::string, std::string>& wanted) {
  for (const auto& [k, v] : wanted) {
    auto it = node.labels.find(k);
    if (it == node.labels.end() || it->second != v) return false;
  }
  return true;
}

inline bool WantsGpu(const Request& r) { return r.gpus > 0 || r.gpu_milli > 0; }

inline bool Excluded(const Request& r, const std::string& node_id) {
  return !r.excluded_nodes.empty() &&
         std::binary_search(r.excluded_nodes.begin(), r.excluded_nodes.end(), node_id);
}

// Static fit of one GPU (as if idle) for the request: model, memory, cc.
inline bool GpuStaticOk(const GpuView& g, const Request& r,
                        const std::vector<std::string>& models) {
  return ModelOk(g.model, models) && g.memory_mib >= r.gpu_memory_mib &&
         g.compute_capability >= r.min_compute_capability &&
         MigOk(g.mig_slices, g.mig_memory_gb, r);
}

inline std::string GroupName(const std::string& g) { return g.empty() ? "default" : g; }

// --- the pass's state ---------------------------------------------------------

// What makes GPUs interchangeable: model, memory, compute capability and
// MIG profile (slices, GB).
using ShapeKey = std::tuple<std::string, int64_t, int32_t, int32_t, int32_t>;

struct Shape {
  std::string model;
  int64_t memory_mib;
  int32_t cc;
  double speed;
  int32_t mig_slices;  // a MIG instance's profile; 0 for whole GPUs
  int32_t mig_gb;
};

struct GpuS {
  int32_t free_milli = 0;
  int64_t free_mem = 0;
  int32_t phantom_milli = 0;
  int64_t phantom_mem = 0;
  int shape = 0;
  bool claimed = false;        // promised to a reservation's future
  bool mps = false;            // GpuView::mps
  int mps_user = -1;           // Pass::user_index of the user whose shares hold it; -1: none
  int32_t indexed_milli = -1;  // key in Pass::partial while indexed, -1 when not
  int32_t AvailMilli() const { return free_milli - phantom_milli; }
  int64_t AvailMem() const { return free_mem - phantom_mem; }
};
struct NodeS {
  const NodeView* view = nullptr;
  int64_t cpu_free = 0, mem_free = 0;
  int64_t phantom_cpu = 0, phantom_mem = 0;
  int gpu_begin = 0, gpu_end = 0;
  bool mixed = false;  // GPUs of more than one shape
  bool reserved = false;
  std::vector<std::pair<int, int>> indexed;  // (shape, whole-free count) in Pass::whole
};
// A candidate placement on one node.
struct Choice {
  int node = -1;
  std::vector<int> gpus;  // global GPU indices
  bool actual = false;    // may use phantom (reserved) resources
};
// Per request, which shapes it may use, in tiers tried in order.
struct Tiers {
  std::vector<std::vector<char>> allowed;  // per tier, by shape
};
// Running work's expected end, replayed by backfill reservations.
struct Event {
  int64_t at;
  int64_t job_id;
  int node;
  const Holding* holding;
};
// Saved state of nodes touched by a tentative gang placement.
struct Saved {
  int node;
  NodeS state;
  std::vector<GpuS> gpus;
};
// Jobs whose requests are alike share one id per pass: what failed for
// one fails for all (free capacity only shrinks within a pass).
struct RequestKey {
  const Request* r;
  uint8_t flags;  // 1: may use reserved capacity, 2: preference window open
};
struct RequestKeyHash {
  size_t operator()(const RequestKey& k) const {
    const Request& r = *k.r;
    size_t h = std::hash<int64_t>()(r.nodes * 1'000'003LL + r.gpus * 1'009LL + r.gpu_milli);
    auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    mix(std::hash<int64_t>()(r.gpu_memory_mib));
    mix(std::hash<int64_t>()(r.cpu_milli * 31 + r.memory_mib));
    mix(static_cast<size_t>(r.min_compute_capability) * 7 + k.flags);
    mix(static_cast<size_t>(r.mig_slices) * 4099 + static_cast<size_t>(r.mig_memory_gb));
    for (const auto& m : r.gpu_models) mix(std::hash<std::string>()(m));
    for (const auto& m : r.preferred_models) mix(std::hash<std::string>()(m) * 3);
    for (const auto& [a, b] : r.node_labels) mix(std::hash<std::string>()(a + "=" + b));
    for (const auto& n : r.excluded_nodes) mix(std::hash<std::string>()(n) * 5);
    return h;
  }
};
struct RequestKeyEq {
  bool operator()(const RequestKey& x, const RequestKey& y) const {
    const Request& a = *x.r;
    const Request& b = *y.r;
    return x.flags == y.flags && a.nodes == b.nodes && a.gpus == b.gpus &&
           a.gpu_milli == b.gpu_milli && a.gpu_memory_mib == b.gpu_memory_mib &&
           a.min_compute_capability == b.min_compute_capability && a.cpu_milli == b.cpu_milli &&
           a.memory_mib == b.memory_mib && a.gpu_models == b.gpu_models &&
           a.preferred_models == b.preferred_models && a.node_labels == b.node_labels &&
           a.excluded_nodes == b.excluded_nodes && a.mig_slices == b.mig_slices &&
           a.mig_memory_gb == b.mig_memory_gb;
  }
};
using RequestIds = std::unordered_map<RequestKey, size_t, RequestKeyHash, RequestKeyEq>;

// Scorer results across passes (RunContext, pass_score.cpp).
struct ScoreCache;

struct Pass {
  Pass(const SchedulerConfig& c, const Snapshot& s, Rng* run_rng = nullptr,
       ScoreCache* run_cache = nullptr)
      : config(c), snap(s), own_rng(c.seed), rng(run_rng ? *run_rng : own_rng), cache(run_cache) {}

  const SchedulerConfig& config;
  const Snapshot& snap;
  Decisions out;

  std::vector<Shape> shapes;
  std::vector<NodeS> nodes;  // in node id order
  std::vector<GpuS> gpus;    // every node's GPUs, node by node
  std::unordered_map<std::string, int> node_index;
  // Per shape and number of fully free GPUs (avail), the nodes in order.
  std::vector<std::vector<std::vector<int>>> whole;
  // Per shape, GPUs partly taken: (avail milli, node, gpu).
  std::vector<std::set<std::tuple<int, int, int>>> partial;
  // False: `whole` and `partial` stay empty (score_all_nodes without
  // backfill, which alone would read them).
  bool indexed = true;
  int last_shape = 0;
  std::vector<int> mixed;
  std::vector<int> seen;
  int stamp = 0;
  std::vector<int> exclude;

  std::unordered_map<int64_t, const PendingJob*> pending_by_id;
  std::map<int, std::vector<size_t>> running_on_node;
  std::map<std::string, int64_t> allocated;
  // Users whose shares hold MPS GPUs (GpuS::mps_user), interned.
  std::map<std::string, int, std::less<>> user_index;
  std::map<std::string, GroupState> group_state;
  std::vector<TaskType> workload;
  std::unique_ptr<PlacementScorer> scorer;
  Rng own_rng;                      // seeded from config.seed each pass
  Rng& rng;                         // own_rng, or the RunContext's
  ScoreCache* cache;                // RunContext's, or null
  std::vector<double> frag_before;  // per node: the scorer's Before(), NaN when stale
  NodeCapacity scratch_free, scratch_cap;
  TaskRequest scratch_task;
  std::vector<int> scratch_gpus;
  RequestIds placing_ids;                                // by request and flags
  std::vector<char> failed;                              // by placing id
  std::vector<std::optional<Tiers>> tiers;               // by placing id
  RequestIds static_ids;                                 // by request alone
  std::vector<std::optional<WaitReason>> unsatisfiable;  // by static id, once known
  std::vector<char> unsatisfiable_known;                 // by static id
  std::vector<std::optional<WaitReason>> wait_reason;    // by static id
  std::vector<Event> events;
  std::deque<Holding> placed_holdings;  // this pass's placements, for events
  std::vector<int> exclude_order;

  std::vector<int> reserved_nodes;
  int64_t earliest_reservation_ms = INT64_MAX;
  int reservations_made = 0;

  std::set<std::string> victims;
  std::map<std::string, int64_t> taken;
  int preemptors = 0;
};

inline bool Ready(const Pass& pass, int n) {
  return pass.nodes[static_cast<size_t>(n)].view->ready;
}

inline int InternUser(Pass& pass, const std::string& user) {
  return pass.user_index.emplace(user, static_cast<int>(pass.user_index.size())).first->second;
}
// -2 (no GPU's) for a user not interned.
inline int UserIndex(const Pass& pass, const std::string& user) {
  auto it = pass.user_index.find(user);
  return it == pass.user_index.end() ? -2 : it->second;
}

// Global index of the GPU `uuid` on node n, or -1.
inline int GpuIndex(const Pass& pass, int n, const std::string& uuid) {
  const NodeS& node = pass.nodes[static_cast<size_t>(n)];
  for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
    if (node.view->gpus[static_cast<size_t>(g - node.gpu_begin)].uuid == uuid) return g;
  }
  return -1;
}

// The id of request `r` (with `flags`) among `ids`: alike requests share one.
inline size_t RequestId(RequestIds& ids, const Request& r, uint8_t flags) {
  return ids.try_emplace(RequestKey{&r, flags}, ids.size()).first->second;
}

// --- the units (see the top of this file) -----------------------------------

// pass_build.cpp
// Checks the snapshot and builds the nodes, GPUs, shapes and index;
// InvalidArgument naming the item for an inconsistent one.
Status Build(Pass& pass);
// The pending queue in order, positions and explanations filled.
Result<std::vector<QueueEntry>> OrderJobs(Pass& pass);
// FGD's target workload from the queued requests.
void BuildWorkload(Pass& pass);

// pass_index.cpp
void Index(Pass& pass, int n);
void Unindex(Pass& pass, int n);
// Takes `r` on node n (GPUs `gpus`). `actual`: take reserved resources
// first (the job ends before the reservation starts).
void Take(Pass& pass, int n, const Request& r, const std::vector<int>& gpus, bool actual);
Saved Save(const Pass& pass, int n);
void Restore(Pass& pass, const Saved& s);
// Holds what is avail now of the GPUs `picked` on node n (and CPU and
// memory) for a job that will start there at `at_ms`.
void HoldFor(Pass& pass, int n, const Request& r, const std::vector<int>& picked, int64_t at_ms);

// pass_place.cpp
bool PreferenceActive(const Pass& pass, const PendingJob& job);
Tiers TiersFor(const Pass& pass, const PendingJob& job);
// Every shape any tier of `job` allows.
std::vector<char> AllowedShapes(const Pass& pass, const PendingJob& job);
std::optional<std::vector<int>> FitOnState(const Pass& pass, const NodeS& node, const GpuS* gpus,
                                           const Request& r, const std::vector<char>& allowed,
                                           bool actual);
void Candidates(Pass& pass, const Request& r, const std::vector<char>& allowed,
                bool may_use_reserved, std::vector<Choice>* out);
// Places `job` (every rank of a gang, or none) and records the placement.
bool TryPlace(Pass& pass, const PendingJob& job);

// pass_score.cpp (SchedulerConfig::score_all_nodes)
// The best placement of one rank of `r` among every node it fits on, the
// scorer choosing the GPUs; nullopt when it fits nowhere.
// The cache in `slot`, made on first use.
ScoreCache* EnsureScoreCache(std::unique_ptr<ScoreCache>& slot);
std::optional<Choice> ChooseAmongAll(Pass& pass, const Request& r, const std::vector<char>& allowed,
                                     bool may_use_reserved);

// pass_backfill.cpp
// The earliest time the running work's expected ends leave room for `job`
// (all ranks), holding that room; 0 when no such time is known.
int64_t Reserve(Pass& pass, const PendingJob& job);

// pass_preempt.cpp
// Chooses victims to make room for `job` now and records the preemptions;
// `reason` becomes WaitKind::kPreempting. False (and `reason` untouched)
// when it may not or cannot.
bool TryPreempt(Pass& pass, const PendingJob& job, const QueueEntry& entry, WaitReason* reason);

// pass_wait.cpp
// What a job asking `r` waits for when it could run once capacity frees
// (WaitKind::kResources), built once per request shape in a pass.
const WaitReason& CachedWaitReason(Pass& pass, const Request& r);
// UnsatisfiableReason for `r`, computed once per request shape in a pass.
const std::optional<WaitReason>& Unsatisfiable(Pass& pass, const Request& r);

}  // namespace gpupool::sched::detail
