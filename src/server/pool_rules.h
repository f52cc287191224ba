// Small rules the Pool's parts share (server/pool*.cpp): what a job asks
// the scheduler for, what an attempt holds, how reports read. Pure functions
// of their arguments; internal to the server.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "accounting/prices.h"
#include "model/attempt_state.h"
#include "model/job.h"
#include "model/job_state.h"
#include "proto/messages.h"
#include "sched/scheduler.h"

namespace gpupool::server {

// What a job asks the scheduler for (per node; a gang asks for `nodes`).
sched::Request RequestFor(const JobSpec& spec);

// The GPU milli an attempt holds on each of its GPUs. Attempts stored before
// GPU shares existed have 0 and held whole GPUs.
int32_t MilliPerGpu(const Attempt& a);
// The GPU milli the attempt holds in all, every rank included.
int64_t TotalMilli(const Attempt& a);
// What the attempt's GPUs count in fair share per ms: each GPU's milli
// times its price weight (accounting::PriceBook::UsageWeightMilli) at
// `at_ms`; TotalMilli without a price book. `gpus_of(node_id)` gives a
// node's GPUs (nullptr for one not known: its GPUs weigh 1).
int64_t WeightedMilli(
    const Attempt& a, const accounting::PriceBook* prices, int64_t at_ms,
    const std::function<const std::vector<GpuInfo>*(const std::string&)>& gpus_of);

// Where an attempt holds GPUs: each rank's node and GPUs, or its one node's.
struct NodeHolding {
  const std::string& node_id;
  const std::vector<std::string>& gpu_uuids;
};

std::vector<NodeHolding> HoldingsOf(const Attempt& a);

// The report the server writes for an attempt it declares lost.
proto::TaskReport LostReport(const std::string& attempt_id, std::string reason, int64_t now);

// What a task report says happened to its attempt (model/attempt_state.h);
// none for "starting", which only carries a gang's rendezvous.
std::optional<AttemptEvent> AttemptEventOf(const proto::TaskReport& r);

// Orders `a` to leave (`order`: kPreempt, kStopForGood or kGangStop) as the
// attempt table says: when accepted, its state becomes the stopping state
// and the order's time is recorded (preempt_ms, or gang_stop_ms for a gang
// stop); what the stop is for (preempt_for_job, gang_stop_rank, reason) is
// the caller's to set. Not accepted (already leaving, or ended): nothing
// changes. The transition's job_event is what the caller applies to the job.
AttemptTransition OrderStop(Attempt& a, AttemptEvent order, int64_t now);

// A failure becomes a retry while the job has restarts left.
JobEvent RetryIfAllowed(const Job& job, JobEvent event);

// The rank's start order is not sent yet: a torch gang's ranks after 0
// wait for rank 0's rendezvous.
bool StartHeldBack(const Job& job, const Attempt& a, const AttemptRank& r);

// The gang is stopping before its rendezvous: the ranks still held back
// will never start, so they end now (cancelled). Returns whether any did.
bool EndHeldBackRanks(const Job& job, Attempt& a, int64_t now);

// What a stop order says (kStopAttempt): why, and the SIGTERM-to-SIGKILL
// grace (0 = the agent's default). Without one, the Pool's stops say
// "cancelled".
struct StopOrder {
  std::string reason = "cancelled";
  int64_t grace_ms = 0;
  bool requeue = false;  // the job goes back to the queue (proto::StopTask::requeue)
};

// A preempted job gets this long between SIGTERM and SIGKILL.
int64_t PreemptGraceMs(const JobSpec& spec);

// Text a user reads for an attempt that ended without a clean exit.
std::string ExitReason(const proto::TaskReport& r);

}  // namespace gpupool::server
