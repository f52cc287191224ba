// The pool's scheduler: a pure function from a snapshot of the pool to
// decisions. The server, the campus simulator and the benchmarks run this
// same code.
//
// Contract: Scheduler::Decide() reads nothing but its arguments and the
// Scheduler's configuration: no clock (the snapshot carries `now_ms`), no
// I/O, no globals, no randomness but the seeded draws of the `random`
// placement (SchedulerConfig::seed; every other tie ends in node id or job
// order), so the same snapshot gives the same decisions, bit for bit,
// whatever the order of its vectors. A Scheduler holds no state between
// calls; one object may be used from one thread at a time (it reuses scratch
// buffers), distinct objects share nothing. A caller that replays many
// passes (`gpupool sim openb`) may pass a RunContext: `random` then draws
// from the caller's generator, and scores are cached across calls (the
// same decisions as without the cache).
//
// What one pass does, in order:
//  1. Orders the pending queue: priority class (interactive > normal >
//     opportunistic), then fair share among groups by decayed usage / weight,
//     then submit time, then job id (fairshare.h, OrderQueue). A job that was
//     displaced (`front`) goes before the others of its class.
//  2. Walks the queue placing jobs. Candidate nodes come from an index by GPU
//     shape (model, memory, compute capability) and free capacity, never from
//     a scan of every node: whole-GPU requests look up nodes by their number
//     of fully free GPUs, shares by the GPU with the least sufficient free
//     milli. The best `candidates` nodes are then ranked by the placement
//     scorer SchedulerConfig::placement names (policies.h; the default,
//     gpupool: how little the placement fragments the node for the queued
//     workload, FGD's measure, then nodes in use), ties by
//     SchedulerConfig::tie_break. A gang (nodes > 1) is placed on
//     distinct nodes all or nothing. A request shape that failed once in a
//     pass is not tried again in that pass. A request's excluded nodes are
//     never used, for placement, reservation or preemption.
//  3. Backfill: the first `max_reservations` jobs that cannot start get a
//     reservation: the earliest time the running work's expected ends free
//     enough room, and the GPUs it would take then. A later job may use those
//     GPUs now only when it is expected to end before the reservation starts;
//     otherwise it must fit around them. Jobs without a known runtime bound
//     never end "before" anything.
//  4. Preemption, only of preemptible (checkpointing) attempts, only to serve
//     (a) an interactive job, (b) a group reclaiming its guarantee, or (c) an
//     owner's job (of any class, opportunistic included) on a node its group
//     owns. Victims are chosen per node: the
//     node where the fewest minutes of work since the last checkpoint are lost,
//     never an attempt preempted within `anti_thrash_window_ms`, never
//     interactive work, never a group's work on a node that group owns, and
//     never work within its group's guarantee, except that an owner on its
//     own node takes any other group's work and an interactive job may take
//     its own group's batch work. The preemptor waits for the victims to
//     leave; the caller checkpoints and requeues them, and should mark the
//     preemptor `front` until it starts, so that the room it made is not
//     taken by the next job in line (often the victim itself).
//
// Amounts are integers: milli-CPU, MiB, milli-GPU (1000 = one GPU), ms.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sched/fairshare.h"
#include "sched/policies.h"
#include "sched/wait_reason.h"

namespace gpupool::sched {

// ---------------------------------------------------------------------------
// Snapshot.

struct GpuView {
  std::string uuid;
  std::string model;  // as reported ("NVIDIA A100-SXM4-80GB"); matched by GpuModelMatches
  int64_t memory_mib = 0;
  int32_t compute_capability = 0;  // major * 10 + minor, e.g. 80 for 8.0; 0 = unknown
  // Free now: 1000 and memory_mib when nothing runs on it.
  int32_t free_milli = 1000;
  int64_t free_memory_mib = 0;
  // A MIG instance: its profile's compute slices and nominal GB ("3g.40gb":
  // 3 and 40). 0 for a whole GPU. See sched/mig.h for who may use which.
  int32_t mig_slices = 0;
  int32_t mig_memory_gb = 0;
  // An MPS GPU (its node shares GPUs through NVIDIA MPS): one MPS server
  // serves one Linux user at a time, so shares of one pool user only.
  // `mps_user`: the user whose shares hold it now; empty: none does, and a
  // share of any user may take it (then only that user's until they leave).
  bool mps = false;
  std::string mps_user = {};
};

struct NodeView {
  std::string id;
  std::string name;
  bool ready = true;        // false: known but not accepting work now
  std::string owner_group;  // the group (lab) that owns the machine; may be empty
  std::map<std::string, std::string> labels;
  std::vector<GpuView> gpus;
  int64_t cpu_milli_total = 0;
  int64_t cpu_milli_free = 0;
  int64_t memory_mib_total = 0;
  int64_t memory_mib_free = 0;
};

// What one job asks for. Per node: a gang of `nodes` nodes asks for all of
// this on each of them.
struct Request {
  int32_t nodes = 1;      // >= 1; > 1 is a gang placed all or nothing
  int32_t gpus = 0;       // whole GPUs per node
  int32_t gpu_milli = 0;  // a share of one GPU (1..999) when gpus == 0; 0 = none
  // Whole GPUs: the minimum memory of each GPU. A share: the GPU memory the
  // share takes (and so needs free on its GPU).
  int64_t gpu_memory_mib = 0;
  int32_t min_compute_capability = 0;  // as GpuView::compute_capability; 0 = any
  // Who asks: a share goes on an MPS GPU (GpuView::mps) only when no other
  // user's shares hold it.
  std::string user = {};
  std::vector<std::string> gpu_models;  // allowed models; empty = any
  // Preferred models: only these are used until `prefer_wait_ms` after
  // submission, then any allowed model (the fastest that fits first; a gang
  // that fits in no single speed tier may then mix them).
  std::vector<std::string> preferred_models;
  int64_t prefer_wait_ms = 0;
  std::map<std::string, std::string> node_labels;  // every one must match the node's
  int64_t cpu_milli = 0;                           // per node
  int64_t memory_mib = 0;                          // per node
  // One MIG instance of at least this profile per node (with gpus == 1);
  // 0 = not a MIG request. See sched/mig.h.
  int32_t mig_slices = 0;
  int32_t mig_memory_gb = 0;
  // Node ids it must not be placed on (nor make room on by preemption),
  // sorted and unique: e.g. nodes whose provider's policy does not admit the
  // job, or that just refused it.
  std::vector<std::string> excluded_nodes;

  // GPU milli per node and in all.
  int64_t GpuMilliPerNode() const { return gpus > 0 ? int64_t{gpus} * 1000 : gpu_milli; }
  int64_t GpuMilli() const { return GpuMilliPerNode() * nodes; }
};

struct PendingJob {
  int64_t job_id = 0;
  std::string group;
  PriorityClass priority = PriorityClass::kNormal;
  int64_t submit_ms = 0;
  Request request;
  // Upper bound of its runtime (max_runtime), used by backfill; 0 = unknown.
  int64_t runtime_limit_ms = 0;
  // Goes first in its class: displaced by a provider, or waiting for the
  // victims it preempted to leave.
  bool front = false;
};

// What a running attempt holds on one node.
struct Holding {
  std::string node_id;
  std::vector<std::string> gpu_uuids;
  int32_t gpu_milli = 0;       // per GPU: 1000 for whole GPUs, less for a share
  int64_t gpu_memory_mib = 0;  // per GPU, for a share; whole GPUs hold all of theirs
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

struct RunningJob {
  int64_t job_id = 0;
  std::string attempt_id;
  std::string group;
  PriorityClass priority = PriorityClass::kNormal;
  std::vector<Holding> holdings;  // one per node (several for a gang)
  int64_t started_ms = 0;
  int64_t last_checkpoint_ms = 0;  // before started_ms (e.g. 0) = never
  bool preemptible = false;
  std::optional<int64_t> last_preempted_ms;  // of this job, by any attempt
  int64_t expected_end_ms = 0;               // started + runtime limit; 0 = unknown
};

struct GroupConfig {
  std::string name;
  int64_t weight = 1;
  int64_t guaranteed_milli = 0;
};

// How the candidates the index yields are ranked (the index itself always
// offers the tightest fits first): a placement scorer by name, one of
// PolicyNames() (policies.h: random, first-fit, best-fit, dot-product, fgd,
// gpupool), the same names `gpupool sim --policy` takes. The candidates are
// ranked by the scorer's key, then as SchedulerConfig::tie_break says, then
// the lowest node id (`random`: drawn with SchedulerConfig::seed). FGD-style scorers (fgd, gpupool)
// measure fragmentation under the queued workload.
struct PlacementScore {
  std::string name = "gpupool";
  // The names the server's configs used before every policy was accepted.
  static const PlacementScore kGpupool, kBestFit, kFirstFit;
  friend auto operator<=>(const PlacementScore&, const PlacementScore&) = default;
};
inline const PlacementScore PlacementScore::kGpupool{"gpupool"};
inline const PlacementScore PlacementScore::kBestFit{"best-fit"};
inline const PlacementScore PlacementScore::kFirstFit{"first-fit"};
std::string_view PlacementScoreName(const PlacementScore& s);
// InvalidArgument naming the known names for a name MakeScorer does not know.
Result<PlacementScore> ParsePlacementScore(std::string_view name);

struct SchedulerConfig {
  std::vector<GroupConfig> groups;  // jobs of groups not listed get weight 1, no guarantee
  int64_t half_life_ms = 7LL * 24 * 3600 * 1000;
  int64_t anti_thrash_window_ms = 30LL * 60 * 1000;
  // GPU speed relative to 1.0, by model name as matched by GpuModelMatches;
  // unlisted models are 1.0. Used to order fallbacks (fastest first).
  std::map<std::string, double> model_speed;
  PlacementScore placement = PlacementScore::kGpupool;
  // Ties of the scoring placements: the least GPU left after placing, then
  // node id (packs ties; the default), or node id alone (kLowestIndex, the
  // FGD artifact's rule, which `gpupool sim openb` uses).
  TieBreak tie_break = TieBreak::kLeastGpuLeft;
  // Seeds the draws of the `random` placement: the same snapshot and seed
  // give the same decisions.
  uint64_t seed = 0;
  int32_t candidates = 8;        // nodes scored per placement (after the index)
  int32_t max_reservations = 8;  // backfill reservations per pass; 0 = no backfill
  bool preemption = true;
  int32_t max_placements = 0;  // per pass; 0 = no limit
  // Off for the server. On (`gpupool sim openb`): every ready node a job
  // fits on is scored, not only the index's best `candidates`, and the
  // scorer chooses the GPUs as the openb policies do (a share: each fitting
  // GPU is scored, the first best kept, the tightest of equals for scorers
  // that pack; `random` draws a node among the feasible ones in node order,
  // then a fitting GPU, always drawing, as MakePolicy's random does). The
  // scorer then sees the node's GPU model (its first GPU's), which FGD's
  // measure needs for model-constrained task types.
  bool score_all_nodes = false;
  // FGD's target workload, fixed for the whole run (openb: the trace's
  // typical tasks); empty: built from the queued requests on every pass.
  std::vector<TaskType> workload;
};

struct Snapshot {
  int64_t now_ms = 0;
  std::vector<NodeView> nodes;
  std::vector<PendingJob> pending;  // any order
  std::vector<RunningJob> running;
  std::map<std::string, DecayedUsage> usage;  // by group; missing = none
};

// ---------------------------------------------------------------------------
// Decisions.

struct NodeAssignment {
  std::string node_id;
  std::vector<std::string> gpu_uuids;
  int32_t gpu_milli = 0;       // per GPU
  int64_t gpu_memory_mib = 0;  // per GPU for a share; 0 for whole GPUs
  friend bool operator==(const NodeAssignment&, const NodeAssignment&) = default;
};

struct Placement {
  int64_t job_id = 0;
  std::vector<NodeAssignment> nodes;  // rank order: nodes[0] is rank 0 (the gang master)
  bool backfilled = false;            // ran ahead of a reserved job
  friend bool operator==(const Placement&, const Placement&) = default;
};

struct Waiting {
  int64_t job_id = 0;
  int64_t position = 0;  // 1-based place among the jobs still waiting, in queue order
  // The constraint that keeps it waiting, as a kind and its parameters;
  // WaitReasonText renders it: "no node has a GPU with 80 GiB"
  // (unsatisfiable) or "waiting for 2 free GPUs of model A100".
  WaitReason reason;
  // Its entry in the ordered queue: class, group, the group's share and
  // guarantee; ExplanationText(position, queue) renders it. queue.position is
  // its place in the whole queue, placed jobs included.
  QueueEntry queue;
  bool unsatisfiable = false;     // no ready node could host it even when idle
  int64_t reserved_start_ms = 0;  // backfill reservation: expected start; 0 = none
  friend bool operator==(const Waiting&, const Waiting&) = default;
};

enum class PreemptReason { kInteractive, kGuarantee, kOwner };
std::string_view PreemptReasonName(PreemptReason r);  // "interactive", "guarantee", "owner"

struct Preemption {
  std::string attempt_id;
  int64_t job_id = 0;
  int64_t for_job_id = 0;  // the job the room is made for
  PreemptReason reason = PreemptReason::kGuarantee;
  int64_t lost_work_ms = 0;  // now - last checkpoint (or start)
  std::string message;       // "preempted for interactive job 12 (checkpoint and requeue)"
  friend bool operator==(const Preemption&, const Preemption&) = default;
};

struct Decisions {
  std::vector<Placement> placements;
  std::vector<Waiting> waiting;  // every pending job not placed, in queue order
  std::vector<Preemption> preemptions;
};

namespace detail {
struct ScoreCache;
}

// State a caller may carry from one Decide call to the next (`gpupool sim
// openb` replays one arrival per pass): the generator the `random` placement
// draws from instead of one seeded from SchedulerConfig::seed per pass, and,
// with SchedulerConfig::score_all_nodes, a cache of the scorer's results
// keyed by what the scorer sees of each node (its capacity and free
// resources, by node id), so that an unchanged node is not scored again.
// The cache holds only pure functions of their key, so a reused context
// decides as a fresh one (scheduler_test: ScoreAllCacheDecidesAsFresh).
// Use one context with one Scheduler (its placement, tie break and
// workload), from one thread at a time.
class RunContext {
 public:
  explicit RunContext(Rng& rng);
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;
  Rng& rng;
  std::unique_ptr<detail::ScoreCache> cache;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);
  // Errors: InvalidArgument for an unknown placement name, or an inconsistent snapshot (a duplicate
  // node or job id, a holding on an unknown node or GPU, a request with nodes < 1, a share >= 1000
  // milli, both gpus and gpu_milli set, or excluded_nodes not sorted and unique), naming the item.
  Result<Decisions> Decide(const Snapshot& snapshot);
  // The same, drawing from and caching in `run` (see RunContext).
  Result<Decisions> Decide(const Snapshot& snapshot, RunContext& run);
  const SchedulerConfig& config() const { return config_; }

 private:
  SchedulerConfig config_;
};

// Checks one request on its own (the API validates submissions with it).
Status ValidateRequest(const Request& request);

// Why no ready node of `nodes` could host `request` even if all were free
// (one of the kinds WaitKindUnsatisfiable accepts; WaitReasonText renders
// it: "no node has a GPU with 80 GiB of model A100"), or nullopt when some
// could. Nodes the request excludes host nothing; when only they could, the
// reason says so (kExcludedNodes).
std::optional<WaitReason> UnsatisfiableReason(const std::vector<NodeView>& nodes,
                                              const Request& request);

// The parts of `request` a waiting reason describes.
WaitRequest WaitRequestOf(const Request& request);

}  // namespace gpupool::sched
