// The openb trace (Alibaba cluster-trace-gpu-v2023) and the FGD paper's
// experiment on it, as the authors' artifact runs it.
//
// Contract: ParseOpenbNodes/ParseOpenbTasks and RunOpenb are pure functions
// (no I/O, no clock, no globals): the same text, policy and seed always give
// the same result. Parse errors name "file:line" and the column at fault.
// ReadFile and WriteOpenbOutputs are the only functions touching the file
// system; the command driver (RunOpenbCommand) also reads the wall clock.
// Everything here may be called from any thread on caller-owned values.
//
// The experiment (docs/evaluation.md): all tasks taken, creation times
// ignored, nothing departs. The list is brought to 130% of the cluster's GPU
// milli, in the artifact's order (pkg/simulator/core.go, Simulate): the
// trace is shuffled with the seed, then padded at its end with copies of
// tasks drawn uniformly at random until a drawn task's per-GPU milli would
// take the total past 130% (its whole demand is added otherwise, so a
// multi-GPU task may end the list a little over 130%, as the artifact's
// tuneUpPods does; no GPU task: no padding), or trimmed by removing random
// tasks until it fits. Then the nodes get their random order (OpenbNodeOrder).
// Tasks arrive one at a time, in list order, and are tried once; one that
// fits nowhere fails. The allocation ratio (allocated GPU milli / total GPU
// milli) is recorded at every 1% of arrived GPU demand.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/placement.h"
#include "sched/policies.h"

namespace gpupool::sim {

struct OpenbNode {
  std::string name;
  sched::NodeCapacity capacity;
};

struct OpenbTask {
  std::string name;
  sched::TaskRequest request;
};

// `source` names the file in error messages; `text` is its whole content.
Result<std::vector<OpenbNode>> ParseOpenbNodes(const std::string& source, const std::string& text);
Result<std::vector<OpenbTask>> ParseOpenbTasks(const std::string& source, const std::string& text);

Result<std::string> ReadFile(const std::string& path);

enum class OpenbNodeOrder { kRandomNames, kName };

struct OpenbOptions {
  std::string policy = "fgd";
  uint64_t seed = 42;
  int inflate_pct = 130;  // target GPU demand, percent of capacity
  // FGD's target workload (sched::TypicalTaskTypes), built from the trace as
  // read, before inflation, as the artifact does; defaults are the artifact
  // experiment's: the most popular types covering 95% of all tasks, CPU-only
  // tasks included, one type at a time.
  double typical_threshold_pct = 95;
  int typical_step = 1;
  bool typical_include_cpu = true;
  // Ties between equally scored nodes: the artifact's patched kube-scheduler
  // keeps the smallest node name, and its simulator renames every node
  // "%04d-<name>" with a random permutation drawn after the task list
  // (pkg/simulator/simulator.go, syncClusterResourceList), so a tie goes to
  // the first node of a random order, fixed for the run. kRandomNames does
  // that (the nodes are visited in that order); kName visits them in name
  // order (the trace's own order), for comparison.
  OpenbNodeOrder node_order = OpenbNodeOrder::kRandomNames;
  sched::TieBreak tie_break = sched::TieBreak::kLowestIndex;
  // Place through sched::Scheduler::Decide, one arrival per pass (the
  // default; SchedulerConfig::score_all_nodes), or, false (`--via policy`),
  // through MakePolicy's fast policies: the same curve, byte for byte
  // (bench/openb_compare_via.sh, sim_test), about 20 times faster.
  bool via_decide = true;
};

// Brings the list to `target_milli` GPU demand as the artifact does (see the
// file comment): copies go at the end, removals keep the order of the rest.
// Deterministic in the generator's state.
std::vector<sched::TaskRequest> InflateTasks(const std::vector<sched::TaskRequest>& tasks,
                                             int64_t target_milli, sched::Rng& rng);

// The arrivals as the artifact's Simulate builds them (pkg/simulator/core.go):
// the trace shuffled, then brought to `target_milli` by InflateTasks (copies
// appended at the end, so the first arrivals are the trace itself, in a
// random order).
std::vector<sched::TaskRequest> OpenbArrivals(std::vector<sched::TaskRequest> tasks,
                                              int64_t target_milli, sched::Rng& rng);

// The order in which the replay visits the nodes, as indices into `nodes`:
// by name, then, for kRandomNames, a random permutation (drawn after the
// arrivals, as the artifact renames its nodes after building its pod list).
// With TieBreak::kLowestIndex the first node of this order wins a tie.
std::vector<size_t> OpenbVisitOrder(const std::vector<OpenbNode>& nodes, OpenbNodeOrder order,
                                    sched::Rng& rng);

struct CurvePoint {
  int arrived_pct = 0;        // arrived GPU demand, percent of capacity
  double allocation_pct = 0;  // allocated GPU milli, percent of capacity
};

struct OpenbResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t gpus_total = 0;
  int64_t gpu_milli_total = 0;
  int64_t tasks_arrived = 0;
  int64_t tasks_failed = 0;
  int64_t arrived_gpu_milli = 0;
  int64_t allocated_gpu_milli = 0;
  double allocation_rate_at_100 = 0;
  double allocation_rate_at_end = 0;
  double unallocated_gpus_at_end = 0;
  std::vector<CurvePoint> curve;  // 0%, 1%, ... up to the arrived demand
};

// Places one arrival on the cluster (state.free as it is now); nullopt when
// it fits nowhere. The state changes only by the caller's Allocate of the
// choice returned.
using OpenbPlacer = std::function<Result<std::optional<sched::Choice>>(
    const sched::ClusterState& state, const sched::TaskRequest& task)>;

// A placer that runs sched::Scheduler::Decide (openb_decide.cpp): node i of
// `state` is node id "n" + i zero-padded, so node id order is index order;
// one pending job per pass; `rng` is the run's generator (random draws).
// InvalidArgument for a tie break Decide does not draw (kRandom).
Result<OpenbPlacer> MakeDecidePlacer(const sched::ClusterState& state,
                                     std::vector<sched::TaskType> workload,
                                     const OpenbOptions& options, sched::Rng& rng);

Result<OpenbResult> RunOpenb(const std::vector<OpenbNode>& nodes,
                             const std::vector<OpenbTask>& tasks, const OpenbOptions& options);

// Writes DIR/summary.json and DIR/curve.csv (creating DIR).
Status WriteOpenbOutputs(const std::string& dir, const OpenbResult& result, double wall_seconds);

struct OpenbCommand {
  std::string nodes_path;
  std::string tasks_path;
  std::string out_dir;
  OpenbOptions options;
};

// `gpupool sim openb`: load, run, write, print a one-line summary. Returns the
// process exit code (0 ok, 1 error, printed to stderr).
int RunOpenbCommand(const OpenbCommand& cmd);

}  // namespace gpupool::sim
