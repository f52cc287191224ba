// Placement policies for one task on the fractional GPU model, behind one
// interface, plus the seeded generator they draw from.
//
// Contract: Place() is deterministic given (state, task, generator state): it
// reads nothing else (no clock, no I/O, no globals) and returns a Choice that
// is valid for state.free (Fits and ValidChoice hold), or nullopt when no node
// can host the task. Ties between equally scored nodes are broken as the
// TieBreak given to MakePolicy says: uniformly at random through the passed
// generator (upstream kube-scheduler), or the lowest node index (the FGD
// artifact, which patches kube-scheduler to keep the smallest node name). A policy object
// may keep a private cache (FGD memoises per-node fragmentation), so one
// object must not be used from two threads at once; distinct objects share
// nothing.
//
// Policies (names accepted by MakePolicy):
//   random      - a uniformly random feasible node; first GPU(s) that fit.
//   first-fit   - the first feasible node in index order; first GPU(s) that fit.
//   best-fit    - the node with the least resources left after placement:
//                 score = 0.5*(cpu_left-cpu_req)/128000 + 0.5*(gpu_left-gpu_req)/8000
//                 (the FGD artifact's baseline, scored on its 0..100 integer
//                 scale); a share goes on the fitting GPU with least free milli.
//   dot-product - Tetris-style alignment: minimises the dot product of the
//                 request and the free vector, both normalised by the node's
//                 capacity (per GPU for a share), as the artifact does.
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

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string Name() const = 0;
  virtual std::optional<Choice> Place(const ClusterState& state, const TaskRequest& task,
                                      Rng& rng) = 0;
};

// The policy names MakePolicy accepts, in a stable order.
std::vector<std::string> PolicyNames();

enum class TieBreak {
  kRandom,       // uniformly among the best (upstream kube-scheduler)
  kLowestIndex,  // the best node with the lowest index (the FGD artifact)
};

// Builds a policy by name; `workload` is used by fgd only, `tie_break` by the
// scoring policies (best-fit, dot-product, fgd). Returns nullptr for an
// unknown name.
std::unique_ptr<PlacementPolicy> MakePolicy(const std::string& name,
                                            std::vector<TaskType> workload = {},
                                            TieBreak tie_break = TieBreak::kRandom);

}  // namespace gpupool::sched
