// `gpupool`: our placement policy for the fractional GPU model, built on FGD
// (Fragmentation Gradient Descent, Weng et al., ATC '23; see policies.h).
//
// Idea: FGD scores a placement by sigmoid(-delta/1000)*100 truncated to an
// integer, where delta is the increase of the node's expected fragmentation
// under the target workload (NodeFragmentation). Most candidates tie on that
// coarse score (a placement that changes nothing scores 50, every bad one 0),
// and FGD gives the tie to the lowest node index. We keep FGD's score and
// break its ties by packing: a node already in use (some GPU or CPU taken)
// before an untouched one, then the lowest index; a share goes on the GPU
// with the least free milli among the equally scored ones; and a CPU-only
// task, which ties almost everywhere, goes to the used node with the least
// free GPU milli, so that it does not take the CPU that free GPUs need.
// Untouched nodes stay whole for the multi-GPU and whole-node tasks,
// including the rare types the 95% target workload leaves out (FGD sees no
// cost in breaking them), small tasks fill the holes already made, and
// CPU-only tasks do not strand GPUs.
// Ablations (docs/evaluation.md): without the CPU-only rule (pack 2, the
// default until the openb replay ordered its nodes as the artifact does)
// the margin over FGD is smaller on four of the five traces and negative on
// multigpu20. Ranking by the exact change instead of the sigmoid is clearly
// worse (it loses the saturation that packs the bad cases first-fit).
// Adding best-fit's "least resources left" after "in use" (pack 5) fills the
// scarce GPU models early, as best-fit does: at 100% arrived it is 4.8
// points under FGD on gpuspec20, so it is not the default.
// See docs/evaluation.md, "Our policy", for the measurements.
//
// Contract: as PlacementPolicy in policies.h: Place() is deterministic given
// (state, task, generator state), reads nothing else, and returns a valid
// Choice for state.free or nullopt. The object keeps a private per-node
// cache, so one object must not be used from two threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sched/policies.h"

namespace gpupool::sched {

// Knobs of the policy; the defaults are `gpupool`. Other settings exist for
// ablations and are reachable by name (MakeGpupoolPolicy).
struct GpupoolOptions {
  // Fragmentation change is compared after integer division by this many
  // milli-GPU (1 = exact to the milli). 0 selects FGD's truncated sigmoid.
  int quantum_milli = 0;
  // Tie-break after the fragmentation key: 0 = lowest index only (FGD),
  // 1 = least free GPU milli left on the node, 2 = prefer nodes already in use,
  // 3 = nodes in use first, then the least free GPU milli left, 4 = least
  // CPU/16 + GPU milli left (best-fit's weights), 5 = in use first, then as 4,
  // 6 = as 2, but a CPU-only task as 3, 7 = as 5, but a CPU-only task as 2.
  // A share always goes on the GPU with the least free milli among equally
  // ranked ones when pack != 0.
  int pack = 6;
};

// Builds the policy for `name`: "gpupool" (the defaults), or
// "gpupool/q=<quantum>,p=<pack>" for an ablation ("gpupool/q=0,p=0" is FGD).
// Only "gpupool" is in PolicyNames (and so accepted by `gpupool sim`).
// Returns nullptr for any other name. `workload` is FGD's target workload (TypicalTaskTypes).
std::unique_ptr<PlacementPolicy> MakeGpupoolPolicy(const std::string& name,
                                                   std::vector<TaskType> workload,
                                                   TieBreak tie_break);

// The policy's rank of a placement on a node with capacity `cap` and free
// resources `free` (before placing `t`), whose fragmentation goes from
// `before` to `after`: {fragmentation key, packing key}, larger is better.
ScoreKey GpupoolKey(const GpupoolOptions& options, const NodeCapacity& cap,
                    const NodeCapacity& free, const TaskRequest& t, double before, double after);

// Parses a policy name as MakeGpupoolPolicy does; false when it is not one.
bool ParseGpupoolName(const std::string& name, GpupoolOptions& options);

std::unique_ptr<PlacementPolicy> MakeGpupoolPolicy(GpupoolOptions options,
                                                   std::vector<TaskType> workload,
                                                   TieBreak tie_break);

}  // namespace gpupool::sched
