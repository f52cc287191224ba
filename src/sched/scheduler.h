// The scheduler: a pure function from a snapshot of the pool to decisions.
//
// Decide() reads nothing but its arguments: no clock, no I/O, no globals, so
// the server, the simulator and the benchmarks run the same code and get the
// same answer for the same input. The caller builds the snapshot (free GPUs,
// free CPU and memory per node, the queue in priority order) and applies the
// decisions in one transaction.
//
// Policy (for now): first fit in queue order. Each job takes the first ready
// node with enough free matching GPUs, CPU and memory; a job that cannot be
// placed does not block the ones behind it. A job that no node could host
// even when idle gets a reason naming the constraint nobody meets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/resources.h"

namespace gpupool::sched {

struct GpuSlot {
  std::string uuid;
  std::string name;  // model name as reported, e.g. "NVIDIA A100-SXM4-80GB"
  int64_t memory_mib = 0;
  bool free = true;  // not assigned to any live attempt
};

struct NodeView {
  std::string id;
  std::string name;
  bool ready = true;  // false: known but not accepting work now
  std::vector<GpuSlot> gpus;
  int64_t cpu_milli_total = 0;
  int64_t cpu_milli_free = 0;
  int64_t memory_mib_total = 0;
  int64_t memory_mib_free = 0;
};

struct PendingJob {
  int64_t job_id = 0;
  Resources resources;
};

struct Snapshot {
  std::vector<NodeView> nodes;
  std::vector<PendingJob> queue;  // in the order jobs should be considered
};

struct Options {
  // At most this many placements per call (0 = no limit); keeps one pass short.
  int32_t max_placements = 0;
};

struct Placement {
  int64_t job_id = 0;
  std::string node_id;
  std::vector<std::string> gpu_uuids;
  friend bool operator==(const Placement&, const Placement&) = default;
};

struct Waiting {
  int64_t job_id = 0;
  // "no node has a GPU with 80 GiB" when nothing could ever host the job;
  // otherwise why it waits now ("waiting for 2 free GPUs").
  std::string reason;
  bool unsatisfiable = false;  // true: no ready node could host it even when idle
  friend bool operator==(const Waiting&, const Waiting&) = default;
};

struct Decisions {
  std::vector<Placement> placements;
  std::vector<Waiting> waiting;  // every queued job not placed, in queue order
};

Decisions Decide(const Snapshot& snapshot, const Options& options);

// Why no node of `nodes` could host `request` even if every GPU were free,
// or empty when some ready node could.
std::string UnsatisfiableReason(const std::vector<NodeView>& nodes, const Resources& request);

}  // namespace gpupool::sched
