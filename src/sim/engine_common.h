// What the campus simulator's two engines (des.h, the DES; pool_sim.h,
// through the server's Pool) share, so that both check a trace, configure
// the scheduler and write their records the same way. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/scheduler.h"
#include "sim/des.h"
#include "sim/trace.h"

namespace gpupool::sim {

// What a trace built in code may get wrong (ParseTrace checks it too): a
// node owned by or a job of an unknown group, a node or job twice, a
// provider event for an unknown node.
Status CheckTraceRefs(const Trace& trace);

// The scheduler's settings of each partition: pooled, one with every
// group; per-lab, one per group, in the trace's order.
std::vector<sched::SchedulerConfig> PartitionConfigs(const Trace& trace, const SimOptions& options);

// A job's record before it runs.
JobRecord NewJobRecord(const TraceJob& spec);

// Records `job`'s attempt `r` starting at `now` (the caller sets its id,
// nodes, speed and backfill flag; this the job's fields): it migrated when
// it runs on none of `displaced_from`, which is then cleared; the job's
// record counts it. Returns its index in result.attempts.
size_t RecordStart(SimResult& result, size_t job, const TraceJob& spec, AttemptRecord r,
                   std::vector<std::string>& displaced_from, int64_t now);

// When a run with `remaining_ms` of work at `speed` ends, from `now` (at
// least 1 ms later).
int64_t RunEnd(int64_t now, int64_t remaining_ms, double speed);

// The state after an instant: nodes present (`present`, `spec->gpus`) and
// partitions (`pending.size()`, `waiting`) of either engine.
template <typename Nodes, typename Parts>
StateSample SampleOf(int64_t now, const Nodes& nodes, int64_t allocated_milli, const Parts& parts) {
  StateSample s;
  s.t_ms = now;
  for (const auto& n : nodes) {
    if (n.present) s.capacity_milli += int64_t{n.spec->gpus} * 1000;
  }
  s.allocated_milli = allocated_milli;
  for (const auto& p : parts) {
    s.pending_jobs += static_cast<int64_t>(p.pending.size());
    s.waiting_jobs += p.waiting;
  }
  return s;
}

}  // namespace gpupool::sim
