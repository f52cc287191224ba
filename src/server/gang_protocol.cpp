#include "server/gang_protocol.h"

#include <algorithm>
#include <iterator>

#include "model/attempt_state.h"

namespace gpupool::server::gang {
namespace {

// How a gang rank ended, from its final report.
AttemptState RankEndState(const proto::TaskReport& r) {
  switch (r.state) {
    case proto::TaskState::kExited:
      return r.exit_code == 0 && r.signal == 0 ? AttemptState::kSucceeded : AttemptState::kFailed;
    case proto::TaskState::kVacated:
      return AttemptState::kVacated;
    case proto::TaskState::kRefused:
      return AttemptState::kRefused;
    case proto::TaskState::kLost:
      return AttemptState::kLost;
    case proto::TaskState::kStarting:
    case proto::TaskState::kRunning:
    case proto::TaskState::kFailed:
      break;
  }
  return AttemptState::kFailed;
}

bool AnyRank(const Attempt& a, AttemptState s) {
  return std::any_of(a.ranks.begin(), a.ranks.end(),
                     [&](const AttemptRank& x) { return x.state == s; });
}

void StopInto(Outcome& out, const Job& job, Attempt& attempt, int32_t cause_rank,
              const std::string& why, int64_t now) {
  // Not when it is already leaving (preempted, or stopping for another rank).
  if (!OrderStop(attempt, AttemptEvent::kGangStop, now).accepted) return;
  attempt.gang_stop_rank = cause_rank;
  attempt.reason = why;
  out.store_attempt = true;
  // Every other rank gets the checkpoint signal first (rank 0 writes the
  // checkpoint the requeued gang resumes from). The cause has ended, or is
  // being vacated by its own agent.
  StopOrder stop{"gang stopped: " + why, PreemptGraceMs(job.spec), /*requeue=*/true};
  for (const AttemptRank& r : attempt.ranks) {
    if (r.rank == cause_rank || !IsLive(r.state) || StartHeldBack(job, attempt, r)) continue;
    out.stops.emplace_back(r.node_id, stop);
  }
  EndHeldBackRanks(job, attempt, attempt.gang_stop_ms);
  out.log_lines.push_back("job " + std::to_string(job.id) + ": stopping every rank of attempt " +
                          attempt.id + ": " + why);
}

// Every rank has ended: how the gang ended, as one attempt would have.
void CloseInto(Outcome& out, const Job& job, const Attempt& attempt, int64_t now) {
  // The cause the job reports: the rank whose end stopped the gang, else
  // the first to end badly.
  const AttemptRank* first_bad = nullptr;
  for (const AttemptRank& x : attempt.ranks) {
    if (x.state == AttemptState::kSucceeded) continue;
    if (x.rank == attempt.gang_stop_rank) {
      first_bad = &x;
      break;
    }
    if (!first_bad || x.finished_ms < first_bad->finished_ms) first_bad = &x;
  }
  // The ways a rank is displaced, in the order they name the cause.
  struct Displaced {
    AttemptState rank_state;
    AttemptEvent event;
    proto::TaskState report;
  };
  constexpr Displaced kDisplaced[] = {
      {AttemptState::kLost, AttemptEvent::kLost, proto::TaskState::kLost},
      {AttemptState::kVacated, AttemptEvent::kVacated, proto::TaskState::kVacated},
      {AttemptState::kRefused, AttemptEvent::kRefused, proto::TaskState::kRefused}};
  const auto* displaced =
      std::find_if(std::begin(kDisplaced), std::end(kDisplaced),
                   [&](const Displaced& d) { return AnyRank(attempt, d.rank_state); });
  proto::TaskReport summary;
  summary.attempt_id = attempt.id;
  summary.ts_ms = now;
  AttemptEvent ended;
  if (first_bad == nullptr) {
    ended = AttemptEvent::kExitedClean;
    summary.state = proto::TaskState::kExited;
    summary.exit_code = attempt.ranks[0].exit_code.value_or(0);
  } else if (displaced != std::end(kDisplaced)) {
    // Displaced through no fault of its own: a rank's node was lost or its
    // provider took the GPU back; whatever the others did followed from it.
    ended = displaced->event;
    summary.state = displaced->report;
    summary.reason = attempt.reason;
  } else {
    ended = first_bad->exit_code ? AttemptEvent::kExitedError : AttemptEvent::kFailed;
    summary.state = first_bad->exit_code ? proto::TaskState::kExited : proto::TaskState::kFailed;
    summary.exit_code = first_bad->exit_code.value_or(0);
    summary.reason = "rank " + std::to_string(first_bad->rank) + ": " +
                     (first_bad->reason.empty() ? "failed" : first_bad->reason);
  }
  // What that means for the job depends on the attempt's state (the
  // attempt table): a preempting gang that did not finish was preempted.
  AttemptTransition t = StepAttempt(attempt.state, ended);
  if (!t.accepted || !t.job_event) {
    out.store_attempt = false;  // as the Pool always did: nothing to apply, nothing stored
    return;
  }
  out.job_event = RetryIfAllowed(job, *t.job_event);
  // A preempted attempt keeps the server's message as its reason, and no
  // exit code: no report.
  if (*out.job_event != JobEvent::kPreempted) out.report = std::move(summary);
}

// A report that the rank runs (or, for rank 0, where it meets the others).
void ActiveInto(Outcome& out, const Job& job, Attempt& attempt, AttemptRank& rank,
                const proto::TaskReport& r) {
  if (rank.rank == 0 && r.master_port > 0 && attempt.master_port == 0 &&
      job.spec.distributed == Distributed::kTorch) {
    attempt.master_addr = r.master_addr;
    attempt.master_port = r.master_port;
    out.log_lines.push_back("job " + std::to_string(job.id) + ": attempt " + attempt.id +
                            " rendezvous at " + attempt.MasterEndpoint());
    // The rest of the gang starts now (ranks the gang gave up when it
    // stopped before this are no longer live).
    for (const AttemptRank& other : attempt.ranks) {
      if (other.rank > 0 && IsLive(other.state)) out.start_ranks.push_back(other.rank);
    }
  }
  if (r.state == proto::TaskState::kRunning) rank.state = AttemptState::kRunning;
  out.store_attempt = true;
  bool all_running =
      std::all_of(attempt.ranks.begin(), attempt.ranks.end(),
                  [](const AttemptRank& x) { return x.state == AttemptState::kRunning; });
  if (all_running && job.state == JobState::kScheduled) {
    out.job_event = JobEvent::kStarted;  // the job runs once every rank does
    out.report = r;
  }
}

}  // namespace

Outcome Stop(const Job& job, Attempt& attempt, int32_t cause_rank, const std::string& why,
             int64_t now) {
  Outcome out;
  StopInto(out, job, attempt, cause_rank, why, now);
  return out;
}

Outcome OnRankReport(const Job& job, Attempt& attempt, const std::string& node_id,
                     std::string_view node_name, const proto::TaskReport& r, int64_t now) {
  Outcome out;
  AttemptRank& rank = *attempt.RankOn(node_id);
  if (!IsLive(rank.state)) {
    // This rank already ended (or was given up as lost): a copy still
    // running there is stale.
    if (proto::IsActive(r.state)) out.stops.emplace_back(node_id, StopOrder{"stale attempt"});
    return out;
  }
  if (proto::IsActive(r.state)) {
    ActiveInto(out, job, attempt, rank, r);
    return out;
  }
  rank.state = RankEndState(r);
  if (r.state == proto::TaskState::kExited) rank.exit_code = r.exit_code;
  rank.reason = ExitReason(r);
  rank.finished_ms = now;  // the server's order of events, whatever the agents' clocks say
  out.store_attempt = true;
  if (rank.state == AttemptState::kRefused && job.state == JobState::kScheduled) {
    out.refused_node = node_id;
  }
  // A torch gang cannot go on without any rank; replicas go on without a
  // failed one, but a lost, vacated or refused rank requeues them all.
  bool ended_badly = rank.state != AttemptState::kSucceeded;
  bool displaced = rank.state == AttemptState::kLost || rank.state == AttemptState::kVacated ||
                   rank.state == AttemptState::kRefused;
  if (ended_badly && (displaced || job.spec.distributed == Distributed::kTorch)) {
    std::string why = "rank " + std::to_string(rank.rank) + " on " + std::string(node_name) + " " +
                      std::string(AttemptStateName(rank.state)) +
                      (rank.reason.empty() ? "" : " (" + rank.reason + ")");
    StopInto(out, job, attempt, rank.rank, why, now);
  }
  if (std::none_of(attempt.ranks.begin(), attempt.ranks.end(),
                   [](const AttemptRank& x) { return IsLive(x.state); })) {
    CloseInto(out, job, attempt, now);
  }
  return out;
}

}  // namespace gpupool::server::gang
