// Pool: construction, the transaction's effects, recovery at start-up and
// the user's side of the lifecycle (submit, cancel, stop for good).
#include "server/pool.h"

#include <algorithm>

#include "common/ids.h"
#include "common/log.h"
#include "model/job_spec.h"
#include "server/pool_rules.h"

namespace gpupool::server {

namespace {
sched::SchedulerConfig SchedulerConfigOf(const PoolOptions& options) {
  sched::SchedulerConfig c = options.scheduler;
  c.max_placements = options.max_placements_per_pass;
  return c;
}
}  // namespace

Pool::Pool(Store& store, const Clock& clock, PoolOptions options, PoolHooks hooks)
    : store_(store, options.queue_check),
      clock_(clock),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      scheduler_(SchedulerConfigOf(options_)),
      liveness_(clock, LivenessOptions{options_.attempt_lease_ms, options_.node_lost_after_ms}) {}

void Pool::SetSchedulerConfig(sched::SchedulerConfig config) {
  options_.scheduler = std::move(config);
  scheduler_ = sched::Scheduler(SchedulerConfigOf(options_));
}

void Pool::Notify() {
  // Taken out first: the hooks may call back into the pool.
  PoolEffects fx = std::move(fx_);
  fx_.Clear();
  const int64_t until = clock_.NowMs() + options_.refusal_avoid_ms;
  for (const auto& [job, node] : fx.refusals) refused_[job][node] = until;
  for (const std::string& line : fx.log_lines) GP_LOG(kInfo) << line;
  if (hooks_.outbox_ready) {
    for (const auto& n : fx.nodes) hooks_.outbox_ready(n);
  }
  if (hooks_.job_changed) {
    for (int64_t j : fx.jobs) hooks_.job_changed(j);
  }
  if (fx.schedule && hooks_.schedule_needed) hooks_.schedule_needed();
  if (hooks_.counted && !fx.counts.empty()) hooks_.counted(fx.counts);
}

void Pool::Discard() { fx_.Clear(); }

Status Pool::Recover() {
  int64_t now = clock_.NowMs();
  std::map<std::string, std::string> awaiting;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    for (Node& n : nodes) {
      // Work still live on a node revoked or left before the restart is
      // requeued once the leases it may hold have expired.
      if (n.state == NodeState::kLost || n.state == NodeState::kLeft)
        awaiting[n.id] = "node " + n.name + " is " + std::string(NodeStateName(n.state));
      if (n.state != NodeState::kReady) continue;
      n.state = NodeState::kOffline;
      n.last_seen_ms = now;
      GP_RETURN_IF_ERROR(tx.PutNode(n));
    }
    return Status::Ok();
  });
  if (s.ok()) awaiting_expiry_ = std::move(awaiting);
  return s;
}

Status Pool::CheckInputs(const JobSpec& spec) const {
  if (!spec.workdir.empty() && spec.inputs.empty()) {
    return Status::InvalidArgument(
        "workdir: the gpupool CLI uploads the directory; the API takes inputs, the manifest id "
        "of the upload");
  }
  if (spec.inputs.empty()) return Status::Ok();
  if (!hooks_.manifest_stored || !hooks_.manifest_stored(spec.inputs)) {
    return Status::InvalidArgument("inputs: manifest " + spec.inputs.substr(0, 12) +
                                   "... is not uploaded");
  }
  return Status::Ok();
}

Result<Job> Pool::Submit(const JobSpec& spec, const std::string& owner, int64_t input_bytes) {
  return Submit(spec, owner, {.input_bytes = input_bytes, .key = ""}, nullptr);
}

namespace {

// Whether a repeated submission asks for the job that its key made: the
// same spec, but for the Jupyter token, which the API draws anew for
// every request that has none.
bool SameSubmission(JobSpec stored, const JobSpec& asked) {
  if (stored.session && asked.session) stored.session->jupyter_token = asked.session->jupyter_token;
  return stored == asked;
}

}  // namespace

Result<Job> Pool::Submit(const JobSpec& spec, const std::string& owner, const Submission& how,
                         bool* replayed) {
  GP_RETURN_IF_ERROR(ValidateJobSpec(spec));
  GP_RETURN_IF_ERROR(sched::ValidateRequest(RequestFor(spec)).WithContext("resources"));
  GP_RETURN_IF_ERROR(CheckInputs(spec));
  Job job;
  job.owner = owner;
  job.spec = spec;
  job.state = JobState::kPending;
  job.reason = "waiting for the scheduler";
  job.created_ms = job.updated_ms = clock_.NowMs();
  job.input_bytes = spec.inputs.empty() ? 0 : how.input_bytes;
  bool again = false;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    if (!how.key.empty()) {
      GP_ASSIGN_OR_RETURN(std::optional<int64_t> first, tx.FindSubmitKey(owner, how.key));
      if (first) {
        GP_ASSIGN_OR_RETURN(std::optional<Job> made, tx.GetJob(*first));
        if (!made) return Status::Internal("the job of submission key " + how.key + " is gone");
        if (!SameSubmission(made->spec, spec)) {
          return Status::AlreadyExists("idempotency key " + how.key + " was already used for job " +
                                       std::to_string(*first) + " with another spec");
        }
        job = *std::move(made);
        again = true;
        return Status::Ok();
      }
    }
    if (int64_t max = options_.max_pending_jobs_per_user; max > 0) {
      JobQuery q;
      q.owner = owner;
      q.states = {JobState::kPending};
      GP_ASSIGN_OR_RETURN(int64_t pending, tx.CountJobs(q));
      if (pending >= max) {
        return Status::ResourceExhausted(
            "user " + owner + " has " + std::to_string(pending) +
            " pending jobs, the limit (--max-pending-jobs-per-user); wait for some to start "
            "or cancel some");
      }
    }
    auto insert = [&]() -> Status {
      GP_ASSIGN_OR_RETURN(job.id, tx.InsertJob(job));
      if (!how.key.empty()) GP_RETURN_IF_ERROR(tx.PutSubmitKey(owner, how.key, job.id));
      return Status::Ok();
    };
    if (job.input_bytes == 0 || !hooks_.within_quota) return insert();
    return hooks_.within_quota(tx, owner, spec.group, "the inputs of this job", insert);
  }));
  if (replayed) *replayed = again;
  if (again) return job;
  fx_.jobs.insert(job.id);
  fx_.schedule = true;
  Notify();
  return job;
}

Result<Job> Pool::Cancel(int64_t id) { return StopForGood(id, "cancelled by the user", false); }

Result<Job> Pool::StopForGood(int64_t id, const std::string& reason, bool checkpoint_first) {
  Job job;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto found, tx.GetJob(id));
    if (!found) return Status::NotFound("job " + std::to_string(id) + " does not exist");
    job = *std::move(found);
    if (IsTerminal(job.state)) return Status::Ok();  // cancelling a finished job is a no-op
    Attempt attempt;
    if (!job.current_attempt.empty()) {
      GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(job.current_attempt));
      if (a) attempt = *std::move(a);
    }
    // Stopped like a preemption, so that its checkpoint is taken and stored
    // under the live attempt; it ends (kEnded) once it has left. Not a gang,
    // nor an attempt already leaving (the attempt table refuses): those are
    // cancelled.
    if (checkpoint_first && job.spec.preemptible() && !attempt.id.empty() &&
        attempt.ranks.empty()) {
      AttemptTransition order = OrderStop(attempt, AttemptEvent::kStopForGood, clock_.NowMs());
      if (order.accepted) {
        attempt.reason = reason;
        GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        StopOrder stop{reason, PreemptGraceMs(job.spec), /*requeue=*/true};
        return ApplyEvent(tx, job, attempt, *order.job_event, nullptr, &stop);
      }
    }
    proto::TaskReport why;
    why.reason = reason;
    StopOrder stop{reason};
    return ApplyEvent(tx, job, attempt, JobEvent::kCancel, &why, &stop);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return job;
}

Result<bool> Pool::StopAndRequeue(int64_t id, const std::string& reason) {
  bool stopped = false;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(id));
    if (!job) return Status::NotFound("job " + std::to_string(id) + " does not exist");
    if (IsTerminal(job->state) || job->current_attempt.empty()) return Status::Ok();
    GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(job->current_attempt));
    if (!attempt) return Status::Ok();
    // The preemption path: its checkpoint signal and grace, then requeued.
    AttemptTransition order = OrderStop(*attempt, AttemptEvent::kPreempt, clock_.NowMs());
    if (!order.accepted) return Status::Ok();  // already leaving
    attempt->reason = reason;
    GP_RETURN_IF_ERROR(tx.PutAttempt(*attempt));
    StopOrder stop{reason, PreemptGraceMs(job->spec), /*requeue=*/true};
    GP_RETURN_IF_ERROR(ApplyEvent(tx, *job, *attempt, *order.job_event, nullptr, &stop));
    stopped = true;
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return stopped;
}

Status Pool::AddPoolEvent(int64_t id, const std::string& text) {
  Status s = store_.Transact(
      [&](Tx& tx) -> Status { return AppendPoolEvent(tx, id, text, clock_.NowMs()); });
  if (!s.ok()) {
    Discard();
    return s;
  }
  fx_.jobs.insert(id);
  Notify();
  return Status::Ok();
}

}  // namespace gpupool::server
