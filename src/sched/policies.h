// Placement policies for one task on the fractional GPU model, behind one
// interface, plus the seeded generator they draw from.
//
// Contract: Place() is deterministic given (state, task, generator state): it
// reads nothing else (no clock, no I/O, no globals) and returns a Choice that
// is valid for state.free (Fits and ValidChoice hold), or nullopt when no node
// can host the task. Ties between equally scored nodes are broken as the
// TieBreak given to MakePolicy says: uniformly at random through the passed
// generator (upstream kube-scheduler), or the lowest node index (the FGD
// artifact, which patches kube-scheduler to keep the smallest node name; the
// openb replay orders its nodes as the artifact names them, sim/openb.h).
// A policy object may keep a private cache (FGD memoises per-node
// fragmentation), so one object must not be used from two threads at once;
// distinct objects share nothing.
//
// Policies (names accepted by MakePolicy):
//   random      - a uniformly random feasible node; a share goes on a uniformly
//                 random GPU that fits (the artifact's RandomScore with
//                 gpuSelMethod "random"); whole GPUs: the first free ones.
//   first-fit   - the first feasible node in index order; first GPU(s) that fit.
//   best-fit    - the node with the least resources left after placement:
//                 score = 0.5*(cpu_left-cpu_req)/128000 + 0.5*(gpu_left-gpu_req)/8000
//                 (the FGD artifact's baseline, scored on its 0..100 integer
//                 scale); a share goes on the fitting GPU with least free milli.
//   dot-product - Tetris-style alignment: minimises the dot product of the
//                 request <cpu, GPU milli> and the node's free <cpu, GPU milli
//                 left in all>, both normalised by the artifact's maxima
//                 (128000 milli-CPU, 8000 milli-GPU), as its DotProd runs
//                 (dimExtMethod "merge", normMethod "max"); a share goes on
//                 the fitting GPU with least free milli (gpuSelMethod "best").
//   fgd         - Fragmentation Gradient Descent (Weng et al., ATC '23): picks
//                 the node and GPU whose placement least increases the node's
//                 expected GPU fragmentation under the target workload (the
//                 popularity of task types), scored sigmoid(-delta/1000)*100 in
//                 integers as in the authors' artifact.
//   gpupool     - ours (policy_gpupool.h): FGD's fragmentation measure, ranked
//                 by its exact change, ties broken by packing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "sched/placement.h"

namespace gpupool::sched {

// A seeded generator whose draws are the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform integer in [0, n); n must be > 0.
  uint64_t Uniform(uint64_t n);
  uint64_t Next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// One task type of the target workload and its share of all typical tasks.
struct TaskType {
  TaskRequest request;  // cpu_milli, num_gpu, gpu_milli, gpu_models matter
  double weight = 0;    // popularity in [0, 1]; the weights sum to 1
};

// The target workload FGD measures fragmentation against: task types grouped
// by (cpu, per-GPU milli, num_gpu, models), most popular first (equal counts:
// the larger key first, as the artifact sorts), taken in steps of `step`
// types until they cover `threshold_pct` percent of the counted tasks, then
// renormalised. CPU-only tasks are counted (as type num_gpu = 0) when
// `include_cpu` is set. The defaults are what the artifact's FGD experiment
// runs with (scripts/generate_config_and_run.py: isInvolvedCpuPods=true,
// podPopularityThreshold=95, podIncreaseStep=1); its code defaults, used when
// no config is given, are 60%, step 10, without CPU tasks. The artifact
// builds this from the original trace, before it is inflated.
std::vector<TaskType> TypicalTaskTypes(const std::vector<TaskRequest>& tasks,
                                       double threshold_pct = 95, int step = 1,
                                       bool include_cpu = true);

// Expected GPU fragmentation of a node (milli-GPU) under the workload: for
// each type, the free GPU milli that type could not use on this node (all of
// it if the type cannot fit at all, and always all of it for a CPU-only type),
// weighted by popularity.
double NodeFragmentation(const NodeCapacity& free, const std::vector<TaskType>& types);

// FGD's score of a placement that takes a node's fragmentation from `before`
// to `after`: sigmoid(-(after - before) / 1000) * 100, truncated (0..100,
// higher is better), as in the authors' artifact.
int64_t FgdScore(double before, double after);

// How ties between equally scored nodes end, for the scoring policies
// (best-fit, dot-product, fgd, gpupool); first-fit and random ignore it.
enum class TieBreak {
  kRandom,       // uniformly among the best (upstream kube-scheduler)
  kLowestIndex,  // the best node with the lowest index (the FGD artifact)
  // The node with the least free GPU milli left after placing, then the
  // lowest index: packs ties (the server's default, SchedulerConfig).
  kLeastGpuLeft,
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string Name() const = 0;
  virtual std::optional<Choice> Place(const ClusterState& state, const TaskRequest& task,
                                      Rng& rng) = 0;
};

// The policy names MakePolicy and MakeScorer accept, in a stable order. The
// server's scheduler (SchedulerConfig::placement, `--scheduler-config`'s
// "placement") and `gpupool sim` (`--policy`) resolve the same names.
std::vector<std::string> PolicyNames();

// ---------------------------------------------------------------------------
// The placement vocabulary: one scorer per policy, ranking one candidate
// placement (a node and the GPUs it would take) for one task. The openb
// policies above (MakePolicy) scan the cluster with these scores (their fast
// paths compute the same numbers through the same functions, tested equal by
// MakeScoredPolicy); sched::Scheduler::Decide ranks its candidates with them.

// A candidate's rank: larger is better, compared lexicographically.
struct ScoreKey {
  int64_t score = 0;  // the policy's score (the artifact's 0..100 integers)
  int64_t tie = 0;    // the policy's own tie-break (gpupool's packing), else 0
  friend auto operator<=>(const ScoreKey&, const ScoreKey&) = default;
};

// Contract: a scorer is immutable and pure: Score() reads only its arguments,
// so one scorer may be shared by threads. Ties left by the key go to the
// lowest node index (the artifact's patched kube-scheduler), or are drawn
// uniformly when RandomChoice() (or TieBreak::kRandom) says so.
class PlacementScorer {
 public:
  virtual ~PlacementScorer() = default;
  virtual std::string Name() const = 0;
  // Every feasible node ties and one is drawn uniformly (`random`).
  virtual bool RandomChoice() const { return false; }
  // False when every candidate ties by design (first-fit, random): the
  // TieBreak option does not apply to them.
  virtual bool Scores() const { return true; }
  // FGD-style scorers measure fragmentation under a target workload.
  virtual bool UsesWorkload() const { return false; }
  // Among a node's GPUs that tie for a share, the one with the least free
  // milli (else the first).
  virtual bool TightestGpuFirst() const { return false; }
  // A per-node value computed before placing (the node's fragmentation for
  // FGD-style scorers; 0 otherwise). Callers may cache it until the node's
  // free resources change and pass it to Score as `before`.
  virtual double Before(const NodeCapacity& free, const std::vector<TaskType>& workload) const;
  // The rank of placing `t` on a node with capacity `cap` and free resources
  // `free` (t fits there), taking `gpus` (indices into free.gpus).
  virtual ScoreKey Score(const NodeCapacity& cap, const NodeCapacity& free, double before,
                         const TaskRequest& t, const std::vector<int>& gpus,
                         const std::vector<TaskType>& workload) const = 0;
};

// The scorer of a policy name (PolicyNames(), or a gpupool ablation
// "gpupool/q=..,p=.."); nullptr for an unknown name.
std::unique_ptr<PlacementScorer> MakeScorer(const std::string& name);

// The reference placement policy of a scorer: every node that Fits, every
// choice of GPUs (a share: each fitting GPU; whole GPUs: the first free
// ones), the best key, ties as `tie_break` or RandomChoice(). Slow (no
// caches); MakePolicy's policies are its fast equivalents.
std::unique_ptr<PlacementPolicy> MakeScoredPolicy(std::unique_ptr<PlacementScorer> scorer,
                                                  std::vector<TaskType> workload,
                                                  TieBreak tie_break);

// The artifact's scores, shared by the fast policies and the scorers.
// best-fit: 0.5*(cpu_free-cpu)/128000 + 0.5*(gpu_free-gpu)/8000 resources
// left (gpu_free: the node's free GPU milli), as (1 - left) * 100 truncated.
int64_t BestFitScore(int64_t cpu_free, int64_t gpu_free, const TaskRequest& t);
// dot-product: (1 - <cpu_free, gpu_free>.<cpu, gpu> / 2) * 100 truncated,
// each vector normalised by (128000, 8000); gpu_free is the node's free GPU
// milli in all, gpu the task's GPU milli in all.
int64_t DotProductScore(int64_t cpu_free, int64_t gpu_free, const TaskRequest& t);
// The GPUs `random` takes on a node the task fits: a share goes on a GPU
// drawn uniformly among the fitting ones (one draw), whole GPUs are the
// first free ones, a CPU task takes none.
std::vector<int> RandomGpus(const NodeCapacity& free, const TaskRequest& task, Rng& rng);

// Builds a policy by name; `workload` is used by fgd and gpupool only,
// `tie_break` by the scoring policies (best-fit, dot-product, fgd, gpupool;
// with kLeastGpuLeft they are MakeScoredPolicy's, without the fast paths).
// Returns nullptr for an unknown name.
std::unique_ptr<PlacementPolicy> MakePolicy(const std::string& name,
                                            std::vector<TaskType> workload = {},
                                            TieBreak tie_break = TieBreak::kRandom);

}  // namespace gpupool::sched
