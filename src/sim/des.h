// The campus simulator: a discrete-event simulation that replays a Trace
// (trace.h) against the pool's own scheduler (sched::Scheduler) in simulated
// time.
//
// Contract: Simulate is a pure function of the trace and the options: no
// I/O, no clock, no globals, no randomness of its own, so the same trace and
// options give the same result, bit for bit. Safe from any thread on
// caller-owned values; simulations in one process share nothing.
//
// The model:
//  - Events: job arrivals, job ends, provider departures (node_leave) and
//    returns, the end of a preemption (the victim has vacated), and a
//    periodic scheduler pass (`tick_ms`) while jobs wait. All events at one
//    instant are applied first (ends and vacates, then departures and
//    returns, then arrivals), then the scheduler decides once for each
//    partition the events touched (on a tick, for each partition where a
//    job that could run waits while something runs or the last pass acted),
//    on a snapshot of the simulated state. A partition with no waiting job
//    is not asked (preemption only ever serves a waiting job).
//  - Placements start at once. A job does `duration` of work at speed 1.0;
//    on GPUs of speed s (the slowest node of a gang) it runs duration / s.
//    Interactive sessions last `duration` whatever the GPU (a person uses
//    them). A job with a checkpoint interval C checkpoints each time its
//    progress passes a multiple of C.
//  - Preemptions: the victim stops at once, holds its GPUs for
//    `preempt_grace_ms` (checkpointing and vacating), then is requeued; it
//    resumes from its last checkpoint, so the work since then is lost. As in
//    the server (server/pool.cpp), a job already waiting for victims to
//    leave gets no further preemptions until they have left.
//  - A provider leaving kills every attempt on that machine (a whole gang
//    if one of its nodes leaves); the job goes back to the queue in front of
//    its class and resumes from its last checkpoint. When it next runs
//    elsewhere, that is a migration.
//  - Usage is charged to the groups with fairshare.h's Charge at every event
//    time, for the GPU milli each holds (vacating attempts included).
//  - Modes: `pooled` is one scheduler over every node; groups get the
//    trace's guarantees (by default, the GPUs they own). `per-lab` (the
//    status quo) runs one scheduler per group over the nodes that group
//    owns; a group's jobs never see another group's nodes, and nodes owned
//    by no group are not used.
//  - The run ends when nothing is left to happen: no event is due and no
//    waiting job could ever start (every one is unsatisfiable, or nothing
//    runs and the last pass did nothing), or `drain_ms` after the trace's
//    last event, whichever comes first; jobs still waiting or running then
//    are reported as unfinished.
//  - Providers' lending policies are not modelled: a trace whose nodes have
//    one (TraceNode::allow_groups, deny_groups) is InvalidArgument (the
//    pool engine, pool_sim.h, runs it).
//  - Every scheduler decision is checked against the simulated state (a
//    placement on a missing GPU or over capacity, a preemption of an attempt
//    that is not running) and reported as an Internal error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/scheduler.h"
#include "sim/trace.h"

namespace gpupool::sim {

enum class SimMode { kPooled, kPerLab };
std::string_view SimModeName(SimMode mode);  // "pooled", "per-lab"
Result<SimMode> ParseSimMode(std::string_view text);

// Which engine simulates (RunCampusModes, campus_command.h): this DES, or
// the server's own core over a MemoryStore (pool_sim.h; `gpupool sim`'s
// default). Simulate ignores it.
enum class SimEngine { kDes, kPool };
std::string_view SimEngineName(SimEngine engine);  // "des", "pool"
Result<SimEngine> ParseSimEngine(std::string_view text);

struct SimOptions {
  SimMode mode = SimMode::kPooled;
  SimEngine engine = SimEngine::kDes;
  int64_t tick_ms = 5LL * 60 * 1000;           // periodic pass while jobs wait
  int64_t preempt_grace_ms = 30LL * 1000;      // a victim holds its GPUs this long
  int64_t drain_ms = 60LL * 24 * 3600 * 1000;  // after the trace's last event
  // Scheduler settings (sched::SchedulerConfig); groups and model speeds come
  // from the trace.
  int64_t half_life_ms = 7LL * 24 * 3600 * 1000;
  int64_t anti_thrash_window_ms = 30LL * 60 * 1000;
  int32_t candidates = 8;
  sched::PlacementScore placement = sched::PlacementScore::kGpupool;
  int32_t max_reservations = 8;
  bool preemption = true;
  // Whether per-lab runs preempt too (a lab's sessions displacing its own
  // checkpointing batch work). Off (the default) is the status quo: labs
  // run their own machines without a preempting scheduler.
  bool per_lab_preemption = false;
};

enum class AttemptEnd {
  kCompleted,
  kPreempted,  // by the scheduler; the GPUs are released preempt_grace_ms later
  kNodeLeft,   // a provider took a machine of the attempt away
  kUnfinished  // still running when the run ended
};
std::string_view AttemptEndName(AttemptEnd end);

struct AttemptRecord {
  int64_t job_id = 0;
  std::string attempt_id;  // "JOB.N", N from 1
  std::string group;
  sched::PriorityClass priority = sched::PriorityClass::kNormal;
  std::vector<std::string> nodes;  // node names, gang rank order
  int64_t gpu_milli = 0;           // held in all (every node)
  double speed = 1.0;              // work per ms of this attempt
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // when its GPUs were released
  // GPU time in [useful_end_ms, end_ms) was lost (work since the last
  // checkpoint, and vacating); == end_ms for completed attempts.
  int64_t useful_end_ms = 0;
  AttemptEnd end = AttemptEnd::kUnfinished;
  int64_t lost_work_ms = 0;      // progress at speed 1 thrown away
  std::string preempted_for;     // kPreempted: "interactive", "guarantee" or "owner"
  int64_t preemptor_job_id = 0;  // kPreempted: the job the room was made for
  bool migrated = false;         // started on other nodes than the ones it was displaced from
  bool backfilled = false;
};

struct JobRecord {
  int64_t job_id = 0;
  std::string group;
  sched::PriorityClass priority = sched::PriorityClass::kNormal;
  int64_t submit_ms = 0;
  int64_t gpu_milli = 0;        // asked for, in all
  int64_t work_ms = 0;          // duration at speed 1
  int64_t first_start_ms = -1;  // -1: never started
  int64_t end_ms = -1;          // completion; -1: unfinished
  int32_t attempts = 0;
  int32_t preemptions = 0;
  int32_t displacements = 0;  // attempts killed by a provider leaving
  int32_t migrations = 0;
  std::string waiting_reason;  // the scheduler's last reason, when it never finished
};

// The simulated pool after each instant with events (after the decisions).
struct StateSample {
  int64_t t_ms = 0;
  int64_t capacity_milli = 0;   // GPUs of the nodes present
  int64_t allocated_milli = 0;  // held by attempts (vacating ones included)
  int64_t pending_jobs = 0;
  int64_t waiting_jobs = 0;  // pending and not unsatisfiable (could run in this pool)
};

struct SimResult {
  SimMode mode = SimMode::kPooled;
  std::optional<uint64_t> seed;  // the trace's
  int64_t last_submit_ms = 0;
  int64_t last_trace_event_ms = 0;
  int64_t end_ms = 0;                   // the last instant simulated
  bool drained = true;                  // every job finished
  int64_t decide_calls = 0;             // scheduler passes
  int64_t event_times = 0;              // distinct instants with events
  std::vector<AttemptRecord> attempts;  // in start order
  std::vector<JobRecord> jobs;          // in trace order
  std::vector<StateSample> samples;     // in time order
};

Result<SimResult> Simulate(const Trace& trace, const SimOptions& options);

}  // namespace gpupool::sim
