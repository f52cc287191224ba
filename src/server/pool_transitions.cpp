// Pool: the job lifecycle applied (model/job_state.h's table and the
// effects of each transition) and single-node task reports.
#include "server/pool.h"

#include <algorithm>

#include "common/log.h"
#include "server/pool_rules.h"

namespace gpupool::server {

Status Pool::PushStop(Tx& tx, const std::string& node_id, const std::string& attempt_id,
                      const StopOrder& order) {
  proto::StopTask stop{attempt_id, order.reason, order.grace_ms, order.requeue};
  GP_ASSIGN_OR_RETURN(int64_t seq,
                      tx.PushOutbox(node_id, std::string(proto::kStop), proto::Encode(stop)));
  (void)seq;
  fx_.nodes.insert(node_id);
  return Status::Ok();
}

Status Pool::ChargeUsage(Tx& tx, const std::string& group, const Attempt& attempt, int64_t to_ms) {
  // Weighted by the prices of the GPUs it held, when the pool has prices.
  const accounting::PriceBook* prices = hooks_.usage_prices ? hooks_.usage_prices() : nullptr;
  std::map<std::string, std::optional<Node>> nodes;
  Status read = Status::Ok();
  auto gpus_of = [&](const std::string& id) -> const std::vector<GpuInfo>* {
    auto it = nodes.find(id);
    if (it == nodes.end()) {
      auto node = tx.GetNode(id);
      if (!node.ok()) read = node.status();
      it = nodes.emplace(id, node.ok() ? *node : std::nullopt).first;
    }
    return it->second ? &it->second->gpus : nullptr;
  };
  const int64_t gpu_milli = WeightedMilli(attempt, prices, to_ms, gpus_of);
  GP_RETURN_IF_ERROR(read);
  const int64_t from_ms = attempt.created_ms;
  if (gpu_milli <= 0) return Status::Ok();
  GP_ASSIGN_OR_RETURN(auto stored, tx.GetGroupUsage(group));
  sched::DecayedUsage u;
  if (stored) u = {stored->milli_ms, stored->as_of_ms};
  u = sched::Charge(u, gpu_milli, from_ms, to_ms, options_.scheduler.half_life_ms);
  return tx.PutGroupUsage(GroupUsage{group, u.milli_ms, u.as_of_ms});
}

namespace {

// The text users read for a transition's JobReason; nullopt keeps the
// job's reason as it is.
std::optional<std::string> JobReasonText(JobReason kind, const Job& job, const Attempt& attempt,
                                         const proto::TaskReport* report) {
  auto in_parens = [](const std::string& s) { return s.empty() ? "" : " (" + s + ")"; };
  switch (kind) {
    case JobReason::kClear:
      return "";
    case JobReason::kClearUnlessStopping:
      if (IsStopping(attempt.state)) return std::nullopt;
      return "";
    case JobReason::kExit:
      return report ? ExitReason(*report) : "";
    case JobReason::kAttemptReason:
      return attempt.reason;
    case JobReason::kBeingPreempted:
      return "being " + attempt.reason;
    case JobReason::kRequeuedPreempted:
      return "requeued: attempt " + attempt.id + " was " + attempt.reason;
    case JobReason::kRequeuedVacated:
      return "vacated: " +
             (attempt.reason.empty() ? "the provider took its GPU back" : attempt.reason) +
             "; requeued";
    case JobReason::kRequeuedRetry:
      return "requeued: attempt " + attempt.id + " failed" + in_parens(attempt.reason) +
             "; restart " + std::to_string(job.restarts) + " of " +
             std::to_string(job.spec.max_restarts);
    case JobReason::kRequeuedRefused:
      return "requeued: attempt " + attempt.id + " was refused" + in_parens(attempt.reason);
    case JobReason::kRequeuedLost:
      return "requeued: attempt " + attempt.id + " was lost" +
             in_parens(report ? report->reason : "");
  }
  return std::nullopt;
}

}  // namespace

Status Pool::ApplyEvent(Tx& tx, Job& job, Attempt& attempt, JobEvent event,
                        const proto::TaskReport* report, const StopOrder* stop) {
  JobTransition t = Step(job.state, event);
  if (!t.accepted) return Status::Ok();  // stale or duplicate event: nothing to do
  int64_t now = clock_.NowMs();
  for (const JobAction& action : t.actions) {
    switch (action.type) {
      case JobActionType::kStartAttempt:
        // Placement-specific; Schedule() creates the attempt itself.
        break;
      case JobActionType::kMarkAttemptRunning:
        // Running, or still stopping if it was ordered to before it started.
        attempt.state = StepAttempt(attempt.state, AttemptEvent::kStarted).next;
        attempt.started_ms = report && report->ts_ms ? report->ts_ms : now;
        if (job.started_ms == 0) job.started_ms = attempt.started_ms;
        GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        break;
      case JobActionType::kStopAttempt:
        if (attempt.ranks.empty()) {
          GP_RETURN_IF_ERROR(PushStop(tx, attempt.node_id, attempt.id, stop ? *stop : StopOrder{}));
        }
        for (const AttemptRank& r : attempt.ranks) {
          if (!IsLive(r.state) || StartHeldBack(job, attempt, r)) continue;
          GP_RETURN_IF_ERROR(PushStop(tx, r.node_id, attempt.id, stop ? *stop : StopOrder{}));
        }
        if (EndHeldBackRanks(job, attempt, now)) GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        break;
      case JobActionType::kCloseAttempt:
        attempt.state = action.close_as;
        attempt.finished_ms = now;
        for (AttemptRank& r : attempt.ranks) {
          if (!IsLive(r.state)) continue;
          r.state = action.close_as;
          r.finished_ms = now;
        }
        if (report && report->state == proto::TaskState::kExited)
          attempt.exit_code = report->exit_code;
        // A preempted attempt, or one the server ended, keeps the server's
        // message as its reason.
        if (report && action.close_as != AttemptState::kPreempted && event != JobEvent::kEnded) {
          attempt.reason = ExitReason(*report);
        }
        GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        // Its group is charged for the time the attempt held its GPUs.
        GP_RETURN_IF_ERROR(ChargeUsage(tx, job.spec.group, attempt, now));
        if (hooks_.attempt_closed) GP_RETURN_IF_ERROR(hooks_.attempt_closed(tx, job, attempt));
        job.current_attempt.clear();
        fx_.schedule = true;  // its GPUs are free again
        break;
    }
  }
  job.state = t.next;
  job.updated_ms = now;
  if (IsTerminal(job.state)) {
    job.finished_ms = now;
    job.exit_code = attempt.exit_code;
  }
  if (t.effect.mark_preempted) job.last_preempted_ms = now;
  if (t.effect.count_restart) ++job.restarts;
  if (t.effect.requeue_front) job.front = true;
  if (std::optional<std::string> reason = JobReasonText(t.effect.reason, job, attempt, report)) {
    job.reason = std::move(*reason);
  }
  GP_RETURN_IF_ERROR(tx.UpdateJob(job));
  fx_.jobs.insert(job.id);
  return Status::Ok();
}

Status Pool::ApplyTaskReport(Tx& tx, const std::string& node_id, const proto::TaskReport& r) {
  if (r.state != proto::TaskState::kRunning) leaving_.erase(r.attempt_id);
  GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(r.attempt_id));
  std::optional<Job> job;
  if (attempt) {
    GP_ASSIGN_OR_RETURN(job, tx.GetJob(attempt->job_id));
  }
  // Fencing: only the job's live attempt, on the node it was placed on, may
  // change the job. Anything else still running there is told to stop.
  bool current = attempt && job && attempt->RunsOn(node_id) && IsLive(attempt->state) &&
                 job->current_attempt == attempt->id;
  if (attempt && !attempt->RunsOn(node_id)) {
    GP_RETURN_IF_ERROR(
        RefuseForeign(tx, node_id, *attempt,
                      "a task report (" + std::string(proto::TaskStateName(r.state)) + ")"));
  }
  if (!current) {
    if (proto::IsActive(r.state)) return PushStop(tx, node_id, r.attempt_id, {"stale attempt"});
    return Status::Ok();
  }
  if (!attempt->ranks.empty()) return ApplyRankReport(tx, *job, *attempt, node_id, r);
  // What the report means for the job depends on the attempt's state (the
  // attempt table): the end of a preempting attempt is its preemption.
  std::optional<AttemptEvent> happened = AttemptEventOf(r);
  if (!happened) return Status::Ok();
  AttemptTransition t = StepAttempt(attempt->state, *happened);
  if (!t.accepted || !t.job_event) return Status::Ok();
  JobEvent event = *t.job_event;
  if (event == JobEvent::kRefused && job->state == JobState::kScheduled) {
    fx_.refusals.emplace_back(job->id, node_id);
  }
  event = RetryIfAllowed(*job, event);
  return ApplyEvent(tx, *job, *attempt, event, &r);
}

Status Pool::LoseLiveAttempts(Tx& tx, const std::string& node_id, const std::string& reason) {
  AttemptQuery q;
  q.node_id = node_id;
  q.live_only = true;
  GP_ASSIGN_OR_RETURN(auto live, tx.ListAttempts(q));
  for (Attempt& a : live) {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(a.job_id));
    if (!job || job->current_attempt != a.id) continue;
    proto::TaskReport lost = LostReport(a.id, reason, clock_.NowMs());
    GP_RETURN_IF_ERROR(LoseAttemptOn(tx, *job, a, node_id, lost));
  }
  return Status::Ok();
}

Status Pool::LoseAttemptOn(Tx& tx, Job& job, Attempt& a, const std::string& node_id,
                           const proto::TaskReport& lost) {
  if (a.ranks.empty()) return ApplyEvent(tx, job, a, JobEvent::kLost, &lost);
  // Only the rank there is lost; the rest of the gang is stopped and the
  // attempt closes once every rank has ended.
  const AttemptRank* rank = a.RankOn(node_id);
  if (rank == nullptr || !IsLive(rank->state)) return Status::Ok();
  return ApplyRankReport(tx, job, a, node_id, lost);
}

}  // namespace gpupool::server
