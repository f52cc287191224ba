// Placement policies for one task on the fractional GPU model, behind one
// interface, plus the seeded generator they draw from.
//
// Contract: Place() is deterministic given (state, task, generator state): it
// reads nothing else (no clock, no I/O, no globals) and returns a Choice that
// is valid for state.free (Fits and ValidChoice hold), or nullopt when no node
// can host the task. Ties between equally scored nodes are broken uniformly at
// random through the passed generator, as kube-scheduler does. A policy object
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
// by (cpu, num_gpu, gpu_milli, models), most popular first (ties by key),
// taken in steps of `step` until they cover `threshold_pct` percent of the
// GPU tasks, then renormalised (the artifact's defaults: 60%, step 10).
// CPU-only tasks are left out, as in the artifact.
std::vector<TaskType> TypicalTaskTypes(const std::vector<TaskRequest>& tasks,
                                       double threshold_pct = 60, int step = 10);

// Expected GPU fragmentation of a node (milli-GPU) under the workload: for
// each type, the free GPU milli that type could not use on this node (all of
// it if the type cannot fit at all), weighted by popularity.
double NodeFragmentation(const NodeCapacity& free, const std::vector<TaskType>& types);

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string Name() const = 0;
  virtual std::optional<Choice> Place(const ClusterState& state, const TaskRequest& task,
                                      Rng& rng) = 0;
};

// The policy names MakePolicy accepts, in a stable order.
std::vector<std::string> PolicyNames();

// Builds a policy by name; `workload` is used by fgd only. Returns nullptr for
// an unknown name.
std::unique_ptr<PlacementPolicy> MakePolicy(const std::string& name,
                                            std::vector<TaskType> workload = {});

}  // namespace gpupool::sched
