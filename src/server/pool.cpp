#include "server/pool.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "common/ids.h"
#include "common/log.h"
#include "model/job_spec.h"
#include "model/job_state.h"
#include "sched/scheduler.h"

namespace gpupool::server {
namespace {

std::string AgentSeqKey(const std::string& node_id) { return "agent_seq/" + node_id; }

static_assert(static_cast<int>(JobPriority::kInteractive) ==
              static_cast<int>(sched::PriorityClass::kInteractive));
static_assert(static_cast<int>(JobPriority::kNormal) ==
              static_cast<int>(sched::PriorityClass::kNormal));
static_assert(static_cast<int>(JobPriority::kOpportunistic) ==
              static_cast<int>(sched::PriorityClass::kOpportunistic));

sched::PriorityClass ClassOf(JobPriority p) { return static_cast<sched::PriorityClass>(p); }

// What a job asks the scheduler for (per node; a gang asks for `nodes`).
sched::Request RequestFor(const JobSpec& spec) {
  const Resources& r = spec.resources;
  sched::Request q;
  q.nodes = std::max(r.nodes, 1);
  q.gpus = r.gpus;
  q.gpu_milli = r.gpus > 0 ? 0 : r.gpu_milli;
  q.gpu_memory_mib = r.gpu_memory_mib;
  q.min_compute_capability = r.min_compute_capability;
  q.gpu_models = r.gpu_models;
  q.preferred_models = r.preferred_models;
  q.prefer_wait_ms = r.prefer_wait_ms;
  q.node_labels = r.node_labels;
  // Only nodes that can run it the way it asks (labels their agents set).
  if (!spec.executor.empty()) q.node_labels[ExecutorLabel(spec.executor)] = "true";
  if (!spec.image.empty() && (spec.executor.empty() || spec.executor == "sandbox")) {
    q.node_labels[kImagesLabel] = "true";
  }
  q.cpu_milli = r.cpu_milli;
  q.memory_mib = r.memory_mib;
  q.mig_slices = r.mig.slices;
  q.mig_memory_gb = r.mig.memory_gb;
  return q;
}

// The GPU milli an attempt holds on each of its GPUs. Attempts stored before
// GPU shares existed have 0 and held whole GPUs.
int32_t MilliPerGpu(const Attempt& a) {
  return a.gpu_milli > 0 ? a.gpu_milli : (a.gpu_uuids.empty() ? 0 : 1000);
}
int64_t TotalMilli(const Attempt& a) {
  return int64_t{MilliPerGpu(a)} * static_cast<int64_t>(a.gpu_uuids.size()) * a.NodeCount();
}

// Where an attempt holds GPUs: each rank's node and GPUs, or its one node's.
struct NodeHolding {
  const std::string& node_id;
  const std::vector<std::string>& gpu_uuids;
};
std::vector<NodeHolding> HoldingsOf(const Attempt& a) {
  if (a.ranks.empty()) return {{a.node_id, a.gpu_uuids}};
  std::vector<NodeHolding> out;
  for (const AttemptRank& r : a.ranks) out.push_back({r.node_id, r.gpu_uuids});
  return out;
}

proto::TaskReport LostReport(const std::string& attempt_id, std::string reason, int64_t now) {
  proto::TaskReport r;
  r.attempt_id = attempt_id;
  r.state = "lost";
  r.reason = std::move(reason);
  r.ts_ms = now;
  return r;
}

// A failure becomes a retry while the job has restarts left.
JobEvent RetryIfAllowed(const Job& job, JobEvent event) {
  bool failure = event == JobEvent::kExitedError || event == JobEvent::kAttemptFailed;
  return failure && job.restarts < job.spec.max_restarts ? JobEvent::kRetry : event;
}

// How a gang rank ended, from its final report.
AttemptState RankEndState(const proto::TaskReport& r) {
  if (r.state == "exited") {
    return r.exit_code == 0 && r.signal == 0 ? AttemptState::kSucceeded : AttemptState::kFailed;
  }
  if (r.state == "vacated") return AttemptState::kVacated;
  if (r.state == "refused") return AttemptState::kRefused;
  if (r.state == "lost") return AttemptState::kLost;
  return AttemptState::kFailed;
}

// The rank's start order is not sent yet: a torch gang's ranks after 0
// wait for rank 0's rendezvous.
bool StartHeldBack(const Job& job, const Attempt& a, const AttemptRank& r) {
  return r.rank > 0 && job.spec.distributed == Distributed::kTorch && a.master_port == 0;
}

// The gang is stopping before its rendezvous: the ranks still held back
// will never start, so they end now (cancelled). Returns whether any did.
bool EndHeldBackRanks(const Job& job, Attempt& a, int64_t now) {
  bool changed = false;
  for (AttemptRank& r : a.ranks) {
    if (!IsLive(r.state) || !StartHeldBack(job, a, r)) continue;
    r.state = AttemptState::kCancelled;
    r.reason = "never started: the gang stopped first";
    r.finished_ms = now;
    changed = true;
  }
  return changed;
}

// A preempted job gets this long between SIGTERM and SIGKILL.
int64_t PreemptGraceMs(const JobSpec& spec) {
  return spec.checkpoint ? spec.checkpoint->grace_ms : kDefaultStopGraceMs;
}

// Whether a report about an attempt that was ordered to stop for preemption
// means the job finished anyway: it exited cleanly before the stop reached
// it (the shim records "stopped: ..." as the reason of anything it stopped).
bool FinishedBeforePreemption(const proto::TaskReport& r) {
  return r.state == "exited" && r.exit_code == 0 && r.signal == 0 && r.reason.empty();
}

// Text a user reads for an attempt that ended without a clean exit.
std::string ExitReason(const proto::TaskReport& r) {
  if (!r.reason.empty()) return r.reason;
  if (r.signal > 0) return "killed by signal " + std::to_string(r.signal);
  if (r.state == "exited" && r.exit_code != 0)
    return "exited with code " + std::to_string(r.exit_code);
  return "";
}

}  // namespace

namespace {
sched::SchedulerConfig SchedulerConfigOf(const PoolOptions& options) {
  sched::SchedulerConfig c = options.scheduler;
  c.max_placements = options.max_placements_per_pass;
  return c;
}
}  // namespace

Pool::Pool(Store& store, const Clock& clock, PoolOptions options, PoolHooks hooks)
    : store_(store),
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
  std::set<std::string> nodes;
  std::set<int64_t> jobs;
  nodes.swap(touched_nodes_);
  jobs.swap(touched_jobs_);
  const int64_t until = clock_.NowMs() + options_.refusal_avoid_ms;
  for (const auto& [job, node] : new_refusals_) refused_[job][node] = until;
  new_refusals_.clear();
  for (const std::string& line : log_lines_) GP_LOG(kInfo) << line;
  log_lines_.clear();
  if (hooks_.outbox_ready) {
    for (const auto& n : nodes) hooks_.outbox_ready(n);
  }
  if (hooks_.job_changed) {
    for (int64_t j : jobs) hooks_.job_changed(j);
  }
  if (want_schedule_ && hooks_.schedule_needed) hooks_.schedule_needed();
  want_schedule_ = false;
}

void Pool::Discard() {
  touched_nodes_.clear();
  touched_jobs_.clear();
  new_refusals_.clear();
  log_lines_.clear();
  want_schedule_ = false;
}

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

// ---------------------------------------------------------------- user side

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
  GP_RETURN_IF_ERROR(ValidateJobSpec(spec));
  GP_RETURN_IF_ERROR(sched::ValidateRequest(RequestFor(spec)).WithContext("resources"));
  GP_RETURN_IF_ERROR(CheckInputs(spec));
  Job job;
  job.owner = owner;
  job.spec = spec;
  job.state = JobState::kPending;
  job.reason = "waiting for the scheduler";
  job.created_ms = job.updated_ms = clock_.NowMs();
  job.input_bytes = spec.inputs.empty() ? 0 : input_bytes;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
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
      return Status::Ok();
    };
    if (job.input_bytes == 0 || !hooks_.within_quota) return insert();
    return hooks_.within_quota(tx, owner, spec.group, "the inputs of this job", insert);
  }));
  touched_jobs_.insert(job.id);
  want_schedule_ = true;
  Notify();
  return job;
}

Result<JobDetail> Pool::GetJob(int64_t id) {
  JobDetail d;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(id));
    if (!job) return Status::NotFound("job " + std::to_string(id) + " does not exist");
    d.job = *std::move(job);
    AttemptQuery q;
    q.job_id = id;
    GP_ASSIGN_OR_RETURN(d.attempts, tx.ListAttempts(q));
    GP_ASSIGN_OR_RETURN(d.output, SummarizeJobOutput(tx, id));
    return Status::Ok();
  }));
  if (d.job.state == JobState::kPending) d.queue = QueueInfoFor(id);
  return d;
}

std::optional<QueueInfo> Pool::QueueInfoFor(int64_t job_id) const {
  auto it = queue_.find(job_id);
  if (it == queue_.end()) return std::nullopt;
  return it->second;
}

Result<std::vector<QueuedJob>> Pool::Queue(const std::optional<std::string>& owner) {
  std::vector<Job> pending;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    JobQuery q;
    q.owner = owner;
    q.states = {JobState::kPending};
    q.limit = 1'000'000;
    GP_ASSIGN_OR_RETURN(pending, tx.ListJobs(q));
    return Status::Ok();
  }));
  std::vector<QueuedJob> out;
  out.reserve(pending.size());
  for (Job& j : pending) {
    QueuedJob e;
    e.queue = QueueInfoFor(j.id);
    e.job = std::move(j);
    out.push_back(std::move(e));
  }
  // Scheduler order; jobs not ordered yet go last, by id (submission).
  std::stable_sort(out.begin(), out.end(), [](const QueuedJob& a, const QueuedJob& b) {
    int64_t pa = a.queue ? a.queue->position : INT64_MAX;
    int64_t pb = b.queue ? b.queue->position : INT64_MAX;
    return pa < pb;
  });
  return out;
}

Result<std::vector<GroupStatus>> Pool::Groups() {
  int64_t now = clock_.NowMs();
  PoolView view;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(view, ReadView(tx, true));
    return Status::Ok();
  }));
  std::map<std::string, GroupStatus> groups;
  auto group = [&](const std::string& name) -> GroupStatus& {
    GroupStatus& g = groups[name];
    g.name = name;
    return g;
  };
  for (const sched::GroupConfig& c : options_.scheduler.groups) {
    GroupStatus& g = group(c.name);
    g.configured = true;
    g.weight = c.weight;
    g.guaranteed_milli = c.guaranteed_milli;
  }
  for (const auto& [name, u] : UsageNow(view, now)) group(name).usage_milli_ms = u.milli_ms;
  std::map<int64_t, const Job*> live_by_id;
  for (const Job& j : view.live_jobs) {
    live_by_id[j.id] = &j;
    ++group(j.spec.group).running_jobs;
  }
  for (const Job& j : view.pending) ++group(j.spec.group).pending_jobs;
  for (const Attempt& a : view.live_attempts) {
    auto j = live_by_id.find(a.job_id);
    if (j != live_by_id.end()) group(j->second->spec.group).allocated_milli += TotalMilli(a);
  }
  double total_usage = 0, total_weight = 0;
  for (const auto& [name, g] : groups) {
    total_usage += static_cast<double>(g.usage_milli_ms);
    total_weight += static_cast<double>(g.weight);
  }
  std::vector<GroupStatus> out;
  for (auto& [name, g] : groups) {
    g.usage_fraction = total_usage > 0 ? static_cast<double>(g.usage_milli_ms) / total_usage : 0;
    g.share_fraction = total_weight > 0 ? static_cast<double>(g.weight) / total_weight : 0;
    g.fair_share_factor =
        g.share_fraction > 0 ? std::exp2(-g.usage_fraction / g.share_fraction) : 0;
    out.push_back(g);
  }
  return out;
}

Result<std::vector<Job>> Pool::ListJobs(const JobQuery& q) {
  std::vector<Job> jobs;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(jobs, tx.ListJobs(q));
    return Status::Ok();
  }));
  return jobs;
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
    if (checkpoint_first && job.spec.preemptible() && !attempt.id.empty() &&
        attempt.ranks.empty() && IsLive(attempt.state) && attempt.preempt_ms == 0) {
      // Stopped like a preemption, so that its checkpoint is taken and
      // stored under the live attempt; it ends (kEnded) once it has left.
      attempt.preempt_ms = clock_.NowMs();
      attempt.preempt_for_job = Attempt::kStoppedForGood;
      attempt.reason = reason;
      GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
      StopOrder stop{reason, PreemptGraceMs(job.spec), /*requeue=*/true};
      return ApplyEvent(tx, job, attempt, JobEvent::kPreempt, nullptr, &stop);
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

// -------------------------------------------------------------- checkpoints

Result<Attempt> Pool::LiveAttempt(Tx& tx, const Job& job, const std::string& attempt_id) {
  // Aborted, not FailedPrecondition: the agent stops an attempt told so.
  auto fenced = Status::Aborted("attempt " + attempt_id + " is not the live attempt of job " +
                                std::to_string(job.id));
  if (job.current_attempt != attempt_id) return fenced;
  GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(attempt_id));
  if (!attempt || attempt->job_id != job.id || !IsLive(attempt->state)) return fenced;
  return *std::move(attempt);
}

Status Pool::ApplyRetention(Tx& tx, int64_t job_id) {
  const size_t keep = static_cast<size_t>(std::max(options_.checkpoint_keep, 1));
  GP_ASSIGN_OR_RETURN(auto all, tx.ListCheckpoints(job_id));
  for (size_t i = 0; i + keep < all.size(); ++i) {
    GP_RETURN_IF_ERROR(tx.DeleteCheckpoint(job_id, all[i].number));
  }
  return Status::Ok();
}

Result<CheckpointAdded> Pool::AddCheckpoint(const CheckpointRequest& r) {
  if (!hooks_.manifest_stored || !hooks_.manifest_stored(r.manifest)) {
    return Status::FailedPrecondition("manifest " + r.manifest +
                                      " is not stored: PUT /v1/blobs/manifests/" + r.manifest +
                                      " first");
  }
  const int64_t now = clock_.NowMs();
  CheckpointAdded out;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(r.job_id));
    if (!job) return Status::NotFound("job " + std::to_string(r.job_id) + " does not exist");
    // A retry of the last post (its answer was lost) changes nothing, so it
    // needs no fencing.
    GP_ASSIGN_OR_RETURN(auto newest, tx.LatestCheckpoint(r.job_id));
    if (newest && newest->attempt_id == r.attempt_id && newest->manifest == r.manifest) {
      out.checkpoint = *std::move(newest);
      return Status::Ok();
    }
    GP_ASSIGN_OR_RETURN(Attempt attempt, LiveAttempt(tx, *job, r.attempt_id));
    Checkpoint c;
    c.job_id = r.job_id;
    c.attempt_id = r.attempt_id;
    c.manifest = r.manifest;
    c.created_ms = now;
    c.bytes = r.bytes;
    c.files = r.files;
    // Retention frees what the oldest kept checkpoint held before the new
    // one is measured against the quotas.
    auto add = [&]() -> Status {
      GP_ASSIGN_OR_RETURN(out.checkpoint, tx.AddCheckpoint(c));
      return ApplyRetention(tx, r.job_id);
    };
    if (hooks_.within_quota) {
      GP_RETURN_IF_ERROR(hooks_.within_quota(tx, job->owner, job->spec.group,
                                             "checkpoint of attempt " + r.attempt_id, add));
    } else {
      GP_RETURN_IF_ERROR(add());
    }
    out.created = true;
    attempt.last_checkpoint_ms = now;  // lost work counts from here (LostWorkMs)
    GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
    if (!job->spec.checkpoint || !job->spec.checkpoint->standby) return Status::Ok();
    // A leaving attempt's last checkpoint goes straight into its next start
    // order, which restores it over what is staged: staging it too would
    // only make that restore wait.
    if (attempt.preempt_ms > 0 || leaving_.count(attempt.id)) return Status::Ok();
    return StageAhead(tx, *job, attempt.node_id);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  if (out.created) {
    touched_jobs_.insert(r.job_id);
    log_lines_.push_back("job " + std::to_string(r.job_id) + ": checkpoint " +
                         std::to_string(out.checkpoint.number) + " from attempt " + r.attempt_id +
                         " (" + std::to_string(r.files) + " files, " + std::to_string(r.bytes) +
                         " bytes)");
  }
  Notify();
  return out;
}

Result<std::vector<Checkpoint>> Pool::ListCheckpoints(int64_t job_id) {
  std::vector<Checkpoint> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(job_id));
    if (!job) return Status::NotFound("job " + std::to_string(job_id) + " does not exist");
    GP_ASSIGN_OR_RETURN(out, tx.ListCheckpoints(job_id));
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<Checkpoint>> Pool::DeleteCheckpoints(int64_t job_id, int64_t number) {
  std::vector<Checkpoint> deleted;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(job_id));
    if (!job) return Status::NotFound("job " + std::to_string(job_id) + " does not exist");
    if (!IsTerminal(job->state)) {
      return Status::FailedPrecondition(
          "job " + std::to_string(job_id) + " is " + std::string(JobStateName(job->state)) +
          ": it keeps its newest checkpoints while it may run; delete them once it has finished "
          "(or cancel it)");
    }
    GP_ASSIGN_OR_RETURN(auto all, tx.ListCheckpoints(job_id));
    for (const Checkpoint& c : all) {
      if (number != 0 && c.number != number) continue;
      GP_RETURN_IF_ERROR(tx.DeleteCheckpoint(job_id, c.number));
      deleted.push_back(c);
    }
    if (number != 0 && deleted.empty()) {
      return Status::NotFound("job " + std::to_string(job_id) + " has no checkpoint " +
                              std::to_string(number));
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  if (!deleted.empty()) {
    touched_jobs_.insert(job_id);
    log_lines_.push_back("job " + std::to_string(job_id) + ": " + std::to_string(deleted.size()) +
                         " checkpoints deleted by their user");
  }
  Notify();
  return deleted;
}

Result<Checkpoint> Pool::GetCheckpoint(int64_t job_id, int64_t number) {
  std::optional<Checkpoint> found;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    if (number == 0) {
      GP_ASSIGN_OR_RETURN(found, tx.LatestCheckpoint(job_id));
    } else {
      GP_ASSIGN_OR_RETURN(found, tx.GetCheckpoint(job_id, number));
    }
    return Status::Ok();
  }));
  if (!found) {
    return Status::NotFound(number == 0 ? "job " + std::to_string(job_id) + " has no checkpoint"
                                        : "job " + std::to_string(job_id) + " has no checkpoint " +
                                              std::to_string(number));
  }
  return *std::move(found);
}

Result<std::set<std::string>> Pool::ReachableManifests() {
  std::set<std::string> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto checkpoints, tx.ListCheckpointManifests());
    GP_ASSIGN_OR_RETURN(auto inputs, tx.ListActiveJobInputs());
    out.insert(checkpoints.begin(), checkpoints.end());
    out.insert(inputs.begin(), inputs.end());
    return Status::Ok();
  }));
  return out;
}

Result<LogPage> Pool::ReadLogs(int64_t job_id, int64_t after_cursor, int32_t limit) {
  LogPage page;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(page, ReadLogPage(tx, job_id, after_cursor, limit));
    return Status::Ok();
  }));
  return page;
}

Result<std::vector<NodeStatus>> Pool::ListNodes() {
  std::vector<NodeStatus> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    AttemptQuery q;
    q.live_only = true;
    GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts(q));
    std::map<std::string, std::map<std::string, std::vector<std::string>>> used;
    std::map<std::string, std::map<std::string, int32_t>> milli;
    for (const Attempt& a : attempts) {
      for (const NodeHolding& where : HoldingsOf(a)) {
        for (const auto& g : where.gpu_uuids) {
          used[where.node_id][g].push_back(a.id);
          milli[where.node_id][g] += MilliPerGpu(a);
        }
      }
    }
    for (Node& n : nodes) {
      NodeStatus st;
      auto it = live_.find(n.id);
      st.connected = it != live_.end();
      st.gpu_attempts = used[n.id];
      if (st.connected) {
        st.telemetry = it->second.telemetry;
        st.running_tasks = it->second.running_tasks;
        for (const ShareUse& s : it->second.shares) {
          const auto& on_gpu = st.gpu_attempts[s.gpu_uuid];
          if (std::find(on_gpu.begin(), on_gpu.end(), s.attempt_id) != on_gpu.end()) {
            st.shares.push_back(s);
          }
        }
      }
      st.gpu_used_milli = milli[n.id];
      // A lent GPU is free while some of it is: a share may still fit.
      bool free_lent = false;
      for (const GpuInfo& g : n.gpus) {
        if (n.lending && !n.lending->gpus.count(g.uuid)) continue;
        auto m = st.gpu_used_milli.find(g.uuid);
        free_lent |= m == st.gpu_used_milli.end() || m->second < 1000;
      }
      st.status = NodeStatusName(n.state, st.connected, n.lending ? &*n.lending : nullptr,
                                 free_lent, !n.gpus.empty());
      st.node = std::move(n);
      out.push_back(std::move(st));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<NodeEventEntry>> Pool::NodeEvents(const std::string& node,
                                                     const std::string& kind, int64_t after_id,
                                                     int32_t limit) {
  if (!kind.empty() && std::find(std::begin(kNodeEventKinds), std::end(kNodeEventKinds), kind) ==
                           std::end(kNodeEventKinds)) {
    return Status::InvalidArgument("kind: must be one of reclaim, pause, resume, leave, policy");
  }
  std::vector<NodeEventEntry> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    std::string node_id;
    if (!node.empty()) {
      GP_ASSIGN_OR_RETURN(auto found, tx.GetNodeByName(node));
      if (!found) {
        GP_ASSIGN_OR_RETURN(found, tx.GetNode(node));
      }
      if (!found) return Status::NotFound("node " + node + " does not exist");
      node_id = found->id;
    }
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    std::map<std::string, std::string> names;
    for (const Node& n : nodes) names[n.id] = n.name;
    // Pages of the log until `limit` events of the kind are found.
    int64_t after = after_id;
    while (static_cast<int32_t>(out.size()) < limit) {
      GP_ASSIGN_OR_RETURN(auto page, tx.ListNodeEvents(node_id, after, limit));
      for (NodeEvent& e : page) {
        after = e.id;
        if (static_cast<int32_t>(out.size()) >= limit) break;
        if (!kind.empty() && e.kind != kind) continue;
        std::string name = names.count(e.node_id) ? names[e.node_id] : e.node_id;
        out.push_back({std::move(e), std::move(name)});
      }
      if (static_cast<int32_t>(page.size()) < limit) break;
    }
    return Status::Ok();
  }));
  return out;
}

// --------------------------------------------------------------- transitions

Status Pool::PushStop(Tx& tx, const std::string& node_id, const std::string& attempt_id,
                      const StopOrder& order) {
  proto::StopTask stop{attempt_id, order.reason, order.grace_ms, order.requeue};
  GP_ASSIGN_OR_RETURN(int64_t seq,
                      tx.PushOutbox(node_id, std::string(proto::kStop), proto::Encode(stop)));
  (void)seq;
  touched_nodes_.insert(node_id);
  return Status::Ok();
}

Status Pool::ChargeUsage(Tx& tx, const std::string& group, int64_t gpu_milli, int64_t from_ms,
                         int64_t to_ms) {
  if (gpu_milli <= 0) return Status::Ok();
  GP_ASSIGN_OR_RETURN(auto stored, tx.GetGroupUsage(group));
  sched::DecayedUsage u;
  if (stored) u = {stored->milli_ms, stored->as_of_ms};
  u = sched::Charge(u, gpu_milli, from_ms, to_ms, options_.scheduler.half_life_ms);
  return tx.PutGroupUsage(GroupUsage{group, u.milli_ms, u.as_of_ms});
}

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
        attempt.state = AttemptState::kRunning;
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
        if (report && report->state == "exited") attempt.exit_code = report->exit_code;
        // A preempted attempt, or one the server ended, keeps the server's
        // message as its reason.
        if (report && action.close_as != AttemptState::kPreempted && event != JobEvent::kEnded) {
          attempt.reason = ExitReason(*report);
        }
        GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        // Its group is charged for the time the attempt held its GPUs.
        GP_RETURN_IF_ERROR(
            ChargeUsage(tx, job.spec.group, TotalMilli(attempt), attempt.created_ms, now));
        job.current_attempt.clear();
        want_schedule_ = true;  // its GPUs are free again
        break;
    }
  }
  job.state = t.next;
  job.updated_ms = now;
  if (IsTerminal(job.state)) {
    job.finished_ms = now;
    job.exit_code = attempt.exit_code;
    job.reason = job.state == JobState::kSucceeded ? ""
                 : event == JobEvent::kEnded       ? attempt.reason
                 : report                          ? ExitReason(*report)
                                                   : "";
  } else if (event == JobEvent::kPreempted) {
    job.reason = "requeued: attempt " + attempt.id + " was " + attempt.reason;
  } else if (event == JobEvent::kPreempt) {
    job.last_preempted_ms = now;
    job.reason = "being " + attempt.reason;
  } else if (event == JobEvent::kVacated) {
    job.reason =
        "vacated: " + (attempt.reason.empty() ? "the provider took its GPU back" : attempt.reason) +
        "; requeued";
    job.front = true;  // displaced through no fault of its own
  } else if (event == JobEvent::kRetry) {
    ++job.restarts;
    job.reason = "requeued: attempt " + attempt.id + " failed" +
                 (attempt.reason.empty() ? "" : " (" + attempt.reason + ")") + "; restart " +
                 std::to_string(job.restarts) + " of " + std::to_string(job.spec.max_restarts);
  } else if (event == JobEvent::kRefused) {
    job.reason = "requeued: attempt " + attempt.id + " was refused" +
                 (attempt.reason.empty() ? "" : " (" + attempt.reason + ")");
    job.front = true;
  } else if (job.state == JobState::kPending) {
    job.reason = "requeued: attempt " + attempt.id + " was lost" +
                 (report && !report->reason.empty() ? " (" + report->reason + ")" : "");
    job.front = true;  // displaced through no fault of its own
  } else if (job.state == JobState::kRunning && attempt.preempt_ms > 0) {
    // A late "started" report of an attempt that is being preempted.
  } else {
    job.reason.clear();
  }
  GP_RETURN_IF_ERROR(tx.UpdateJob(job));
  touched_jobs_.insert(job.id);
  return Status::Ok();
}

Status Pool::ApplyTaskReport(Tx& tx, const std::string& node_id, const proto::TaskReport& r) {
  if (r.state != "running") leaving_.erase(r.attempt_id);
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
    GP_RETURN_IF_ERROR(RefuseForeign(tx, node_id, *attempt, "a task report (" + r.state + ")"));
  }
  if (!current) {
    if (r.state == "running" || r.state == "starting")
      return PushStop(tx, node_id, r.attempt_id, {"stale attempt"});
    return Status::Ok();
  }
  if (!attempt->ranks.empty()) return ApplyRankReport(tx, *job, *attempt, node_id, r);
  if (r.state == "starting") return Status::Ok();
  JobEvent event;
  if (r.state == "running")
    event = JobEvent::kStarted;
  else if (r.state == "vacated")
    event = JobEvent::kVacated;
  else if (r.state == "refused")
    event = JobEvent::kRefused;
  else if (attempt->preempt_ms > 0 && !FinishedBeforePreemption(r))
    // However it ended: the job goes back to the queue, or ends if the
    // server stopped it for good.
    event = attempt->preempt_for_job == Attempt::kStoppedForGood ? JobEvent::kEnded
                                                                 : JobEvent::kPreempted;
  else if (r.state == "exited")
    event = ExitEvent(r.exit_code);
  else if (r.state == "failed")
    event = JobEvent::kAttemptFailed;
  else
    event = JobEvent::kLost;
  if (event == JobEvent::kRefused && job->state == JobState::kScheduled) {
    new_refusals_.emplace_back(job->id, node_id);
  }
  event = RetryIfAllowed(*job, event);
  return ApplyEvent(tx, *job, *attempt, event, &r);
}

// -------------------------------------------------------------------- gangs

Result<proto::StartTask> Pool::MakeStart(Tx& tx, const Job& job, const Attempt& a,
                                         const AttemptRank* rank) {
  proto::StartTask start;
  start.attempt_id = a.id;
  start.job_id = job.id;
  start.owner = job.owner;
  start.spec = job.spec;
  start.gpu_uuids = rank ? rank->gpu_uuids : a.gpu_uuids;
  start.gpu_milli = a.gpu_milli;
  start.gpu_memory_mib = a.gpu_memory_mib;
  start.max_output_bytes = options_.logs.max_job_output_bytes;
  if (rank) {
    proto::GangRank g;
    g.rank = rank->rank;
    g.nodes = a.NodeCount();
    g.mode = job.spec.distributed;
    // Rank 0's agent chooses the port; the others are told it.
    if (rank->rank > 0) {
      g.master_addr = a.master_addr;
      g.master_port = a.master_port;
    }
    start.gang = std::move(g);
  }
  // Every rank restores the job's newest checkpoint.
  GP_ASSIGN_OR_RETURN(auto newest, tx.LatestCheckpoint(job.id));
  if (newest) {
    start.restore_checkpoint = newest->number;
    start.restore_manifest = newest->manifest;
  }
  return start;
}

Status Pool::PushStart(Tx& tx, const Job& job, const Attempt& a, const AttemptRank* rank) {
  GP_ASSIGN_OR_RETURN(proto::StartTask start, MakeStart(tx, job, a, rank));
  const std::string& node = rank ? rank->node_id : a.node_id;
  GP_RETURN_IF_ERROR(
      tx.PushOutbox(node, std::string(proto::kStart), proto::Encode(start)).status());
  touched_nodes_.insert(node);
  return Status::Ok();
}

Status Pool::StopGang(Tx& tx, const Job& job, Attempt& attempt, int32_t cause_rank,
                      const std::string& why) {
  if (attempt.gang_stop_ms > 0 || attempt.preempt_ms > 0) return Status::Ok();  // already leaving
  attempt.gang_stop_ms = clock_.NowMs();
  attempt.gang_stop_rank = cause_rank;
  attempt.reason = why;
  // Every other rank gets the checkpoint signal first (rank 0 writes the
  // checkpoint the requeued gang resumes from). The cause has ended, or is
  // being vacated by its own agent.
  StopOrder stop{"gang stopped: " + why, PreemptGraceMs(job.spec), /*requeue=*/true};
  for (const AttemptRank& r : attempt.ranks) {
    if (r.rank == cause_rank || !IsLive(r.state) || StartHeldBack(job, attempt, r)) continue;
    GP_RETURN_IF_ERROR(PushStop(tx, r.node_id, attempt.id, stop));
  }
  EndHeldBackRanks(job, attempt, attempt.gang_stop_ms);
  log_lines_.push_back("job " + std::to_string(job.id) + ": stopping every rank of attempt " +
                       attempt.id + ": " + why);
  return Status::Ok();
}

Status Pool::ApplyRankReport(Tx& tx, Job& job, Attempt& attempt, const std::string& node_id,
                             const proto::TaskReport& r) {
  AttemptRank& rank = *attempt.RankOn(node_id);
  if (!IsLive(rank.state)) {
    // This rank already ended (or was given up as lost): a copy still
    // running there is stale.
    if (r.state == "running" || r.state == "starting")
      return PushStop(tx, node_id, attempt.id, {"stale attempt"});
    return Status::Ok();
  }
  const int64_t now = clock_.NowMs();
  if (r.state == "starting" || r.state == "running") {
    if (rank.rank == 0 && r.master_port > 0 && attempt.master_port == 0 &&
        job.spec.distributed == Distributed::kTorch) {
      attempt.master_addr = r.master_addr;
      attempt.master_port = r.master_port;
      log_lines_.push_back("job " + std::to_string(job.id) + ": attempt " + attempt.id +
                           " rendezvous at " + attempt.MasterEndpoint());
      // The rest of the gang starts now (ranks the gang gave up when it
      // stopped before this are no longer live).
      for (const AttemptRank& other : attempt.ranks) {
        if (other.rank > 0 && IsLive(other.state))
          GP_RETURN_IF_ERROR(PushStart(tx, job, attempt, &other));
      }
    }
    if (r.state == "running") rank.state = AttemptState::kRunning;
    bool all_running =
        std::all_of(attempt.ranks.begin(), attempt.ranks.end(),
                    [](const AttemptRank& x) { return x.state == AttemptState::kRunning; });
    if (all_running && attempt.state == AttemptState::kScheduled) {
      // The job runs once every rank does; ApplyEvent stores the attempt.
      return ApplyEvent(tx, job, attempt, JobEvent::kStarted, &r);
    }
    return tx.PutAttempt(attempt);
  }
  rank.state = RankEndState(r);
  if (r.state == "exited") rank.exit_code = r.exit_code;
  rank.reason = ExitReason(r);
  rank.finished_ms = now;  // the server's order of events, whatever the agents' clocks say
  if (rank.state == AttemptState::kRefused && job.state == JobState::kScheduled) {
    new_refusals_.emplace_back(job.id, node_id);
  }
  // A torch gang cannot go on without any rank; replicas go on without a
  // failed one, but a lost, vacated or refused rank requeues them all.
  bool ended_badly = rank.state != AttemptState::kSucceeded;
  bool displaced = rank.state == AttemptState::kLost || rank.state == AttemptState::kVacated ||
                   rank.state == AttemptState::kRefused;
  if (ended_badly && (displaced || job.spec.distributed == Distributed::kTorch)) {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
    std::string why = "rank " + std::to_string(rank.rank) + " on " + (node ? node->name : node_id) +
                      " " + std::string(AttemptStateName(rank.state)) +
                      (rank.reason.empty() ? "" : " (" + rank.reason + ")");
    GP_RETURN_IF_ERROR(StopGang(tx, job, attempt, rank.rank, why));
  }
  bool all_ended = std::none_of(attempt.ranks.begin(), attempt.ranks.end(),
                                [](const AttemptRank& x) { return IsLive(x.state); });
  if (!all_ended) return tx.PutAttempt(attempt);
  return CloseGang(tx, job, attempt);
}

Status Pool::CloseGang(Tx& tx, Job& job, Attempt& attempt) {
  auto any = [&](AttemptState s) {
    return std::any_of(attempt.ranks.begin(), attempt.ranks.end(),
                       [&](const AttemptRank& x) { return x.state == s; });
  };
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
  constexpr std::pair<AttemptState, JobEvent> kDisplaced[] = {
      {AttemptState::kLost, JobEvent::kLost},
      {AttemptState::kVacated, JobEvent::kVacated},
      {AttemptState::kRefused, JobEvent::kRefused}};
  const auto* displaced = std::find_if(std::begin(kDisplaced), std::end(kDisplaced),
                                       [&](const auto& d) { return any(d.first); });
  proto::TaskReport summary;
  summary.attempt_id = attempt.id;
  summary.ts_ms = clock_.NowMs();
  JobEvent event;
  if (first_bad == nullptr) {
    summary.state = "exited";
    summary.exit_code = attempt.ranks[0].exit_code.value_or(0);
    event = JobEvent::kExitedOk;
  } else if (attempt.preempt_ms > 0) {
    event = JobEvent::kPreempted;
    summary.state = "preempted";
  } else if (displaced != std::end(kDisplaced)) {
    // Displaced through no fault of its own: a rank's node was lost or its
    // provider took the GPU back; whatever the others did followed from it.
    event = displaced->second;
    summary.state = AttemptStateName(displaced->first);
    summary.reason = attempt.reason;
  } else {
    summary.state = first_bad->exit_code ? "exited" : "failed";
    summary.exit_code = first_bad->exit_code.value_or(0);
    summary.reason = "rank " + std::to_string(first_bad->rank) + ": " +
                     (first_bad->reason.empty() ? "failed" : first_bad->reason);
    event = RetryIfAllowed(
        job, first_bad->exit_code ? JobEvent::kExitedError : JobEvent::kAttemptFailed);
  }
  return ApplyEvent(tx, job, attempt, event, &summary);
}

// --------------------------------------------------------------- agent side

Result<std::pair<std::string, int64_t>> Pool::GetAgentSeq(Tx& tx, const std::string& node_id) {
  GP_ASSIGN_OR_RETURN(auto v, tx.GetMeta(AgentSeqKey(node_id)));
  if (!v) return std::make_pair(std::string(), int64_t{0});
  auto space = v->find(' ');
  if (space == std::string::npos) return Status::Internal("corrupt " + AgentSeqKey(node_id));
  int64_t seq = 0;
  auto [end, ec] = std::from_chars(v->data() + space + 1, v->data() + v->size(), seq);
  if (ec != std::errc() || end != v->data() + v->size())
    return Status::Internal("corrupt " + AgentSeqKey(node_id));
  return std::make_pair(v->substr(0, space), seq);
}

Status Pool::SetAgentSeq(Tx& tx, const std::string& node_id, const std::string& instance,
                         int64_t seq) {
  return tx.PutMeta(AgentSeqKey(node_id), instance + " " + std::to_string(seq));
}

Result<proto::Welcome> Pool::AgentHello(const proto::Hello& hello) {
  proto::Welcome welcome;
  welcome.heartbeat_ms = options_.heartbeat_ms;
  // The hello renews the agent's leases (node_liveness.h); the welcome says
  // how long each renewal lasts.
  welcome.attempt_lease_ms = options_.attempt_lease_ms;
  welcome.log_records = true;  // compact logs messages are welcome (proto::LogChunk)
  int64_t now = clock_.NowMs();
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto existing, tx.GetNodeByName(hello.node_name));
    Node node;
    if (existing) {
      node = *std::move(existing);
    } else {
      node.id = NewId("n");
      node.registered_ms = now;
    }
    node.name = hello.node_name;
    node.state = NodeState::kReady;  // a node that left may rejoin
    node.gpus = hello.gpus;
    node.cpu_milli = hello.cpu_milli;
    node.memory_mib = hello.memory_mib;
    node.driver_version = hello.driver_version;
    node.cuda_version = hello.cuda_version;
    node.agent_version = hello.agent_version;
    node.labels = hello.labels;
    node.owner_group = hello.owner_group;
    node.lending = hello.lending;
    node.last_seen_ms = now;
    GP_RETURN_IF_ERROR(tx.PutNode(node));
    welcome.node_id = node.id;

    // Sequence numbers restart with every agent process.
    GP_ASSIGN_OR_RETURN(auto seq, GetAgentSeq(tx, node.id));
    welcome.last_agent_seq = seq.first == hello.agent_instance ? seq.second : 0;
    GP_RETURN_IF_ERROR(SetAgentSeq(tx, node.id, hello.agent_instance, welcome.last_agent_seq));

    // Orders the agent has applied need not be resent.
    GP_RETURN_IF_ERROR(tx.AckOutbox(node.id, hello.last_server_seq));

    std::set<std::string> held;
    for (const proto::TaskReport& r : hello.tasks) {
      held.insert(r.attempt_id);
      GP_RETURN_IF_ERROR(ApplyTaskReport(tx, node.id, r));
    }
    // Starts still in the outbox will reach the agent; other live attempts
    // the agent does not hold are lost.
    GP_ASSIGN_OR_RETURN(auto unsent, tx.ListOutbox(node.id, hello.last_server_seq));
    std::set<std::string> on_the_way;
    for (const OutboxMessage& m : unsent) {
      if (m.type != proto::kStart) continue;
      auto start = proto::DecodeStartTask(m.body);
      if (start.ok()) on_the_way.insert(start->attempt_id);
    }
    AttemptQuery q;
    q.node_id = node.id;
    q.live_only = true;
    GP_ASSIGN_OR_RETURN(auto live, tx.ListAttempts(q));
    for (Attempt& a : live) {
      if (held.count(a.id) || on_the_way.count(a.id)) continue;
      GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(a.job_id));
      if (!job || job->current_attempt != a.id) continue;
      const AttemptRank* rank = a.RankOn(node.id);
      // A rank that ended, or was never sent its start (it waits for the
      // rendezvous), is not missing.
      if (rank && (!IsLive(rank->state) || StartHeldBack(*job, a, *rank))) continue;
      proto::TaskReport lost =
          LostReport(a.id, "the agent on " + node.name + " no longer has it", now);
      GP_RETURN_IF_ERROR(LoseAttemptOn(tx, *job, a, node.id, lost));
    }
    // Where each attempt's output resumes: the log of the rank on this node.
    auto offset_of = [&](const std::string& id) -> Status {
      GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(id));
      const AttemptRank* rank = a ? a->RankOn(node.id) : nullptr;
      GP_ASSIGN_OR_RETURN(welcome.log_offsets[id], tx.LastLogOffset(id, rank ? rank->rank : 0));
      return Status::Ok();
    };
    GP_ASSIGN_OR_RETURN(live, tx.ListAttempts(q));
    for (const Attempt& a : live) GP_RETURN_IF_ERROR(offset_of(a.id));
    for (const std::string& id : held) {
      if (!welcome.log_offsets.count(id)) GP_RETURN_IF_ERROR(offset_of(id));
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  live_[welcome.node_id] = LiveNode{hello.agent_instance, {}, 0, {}};
  liveness_.LeaseRequested(welcome.node_id);
  liveness_.Connected(welcome.node_id);
  awaiting_expiry_.erase(welcome.node_id);
  touched_nodes_.insert(welcome.node_id);
  want_schedule_ = true;
  Notify();
  return welcome;
}

Status Pool::AgentMessage(const std::string& node_id, int64_t seq, const std::string& type,
                          const std::string& body) {
  auto live = live_.find(node_id);
  if (live == live_.end())
    return Status::FailedPrecondition("node " + node_id + " is not connected");
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto last, GetAgentSeq(tx, node_id));
    if (last.first == live->second.instance && seq <= last.second)
      return Status::Ok();  // duplicate
    if (type == proto::kTaskStatus) {
      GP_ASSIGN_OR_RETURN(auto report, proto::DecodeTaskReport(body));
      GP_RETURN_IF_ERROR(ApplyTaskReport(tx, node_id, report));
    } else if (type == proto::kLogs) {
      GP_ASSIGN_OR_RETURN(auto chunk, proto::DecodeLogChunk(body));
      GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(chunk.attempt_id));
      // Output of attempts the server never made or made elsewhere is
      // refused (and audited); output of an attempt it declared lost
      // (stale: its job may run elsewhere now, so what it prints is not the
      // job's) is dropped. An attempt that ended by its agent's own report
      // may still send lines: an agent back from a restart reports the end
      // in its hello, then ships the rest.
      const AttemptRank* rank = attempt ? attempt->RankOn(node_id) : nullptr;
      const bool stale = attempt && (rank ? rank->state : attempt->state) == AttemptState::kLost;
      if (attempt && !attempt->RunsOn(node_id)) {
        GP_RETURN_IF_ERROR(RefuseForeign(tx, node_id, *attempt, "output"));
      } else if (attempt && !stale && !chunk.lines.empty()) {
        const int32_t rank_no = rank ? rank->rank : 0;
        std::vector<LogLine> lines;
        lines.reserve(chunk.lines.size());
        for (auto& l : chunk.lines) {
          lines.push_back(
              {chunk.attempt_id, l.offset, l.stream, l.ts_ms, std::move(l.text), 0, rank_no});
        }
        // The output limit holds whatever the agent sends (server/job_logs.h).
        GP_ASSIGN_OR_RETURN(
            lines, TakeLogLines(tx, options_.logs, attempt->job_id, chunk.attempt_id, rank_no,
                                std::move(lines), clock_.NowMs()));
        touched_jobs_.insert(attempt->job_id);
        // While a job starts, its latest event says what it waits for
        // ("pulling image 3/7 layers").
        auto last_event = std::find_if(lines.rbegin(), lines.rend(),
                                       [](const LogLine& l) { return l.stream == "event"; });
        if (last_event != lines.rend()) {
          GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(attempt->job_id));
          if (job && job->state == JobState::kScheduled &&
              job->current_attempt == chunk.attempt_id) {
            job->reason = last_event->text;
            GP_RETURN_IF_ERROR(tx.UpdateJob(*job));
          }
        }
      }
    } else if (type == proto::kLending) {
      GP_ASSIGN_OR_RETURN(auto lending, proto::DecodeLending(body));
      GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
      if (node) {
        node->lending = std::move(lending);
        GP_RETURN_IF_ERROR(tx.PutNode(*node));
      }
      want_schedule_ = true;  // room may have appeared
    } else if (type == proto::kNodeEvent) {
      GP_ASSIGN_OR_RETURN(auto event, proto::DecodeNodeEvent(body));
      event.node_id = node_id;
      // A node speaks only for its own attempts.
      std::vector<std::string> own;
      for (const std::string& a : event.attempts) {
        GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(a));
        if (attempt && !attempt->RunsOn(node_id)) {
          GP_RETURN_IF_ERROR(
              RefuseForeign(tx, node_id, *attempt, "a node event (" + event.kind + ")"));
          continue;
        }
        own.push_back(a);
      }
      event.attempts = std::move(own);
      GP_ASSIGN_OR_RETURN(event.id, tx.AppendNodeEvent(event));
      GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
      std::string line = "node " + (node ? node->name : node_id) + ": " + event.kind;
      for (const std::string& g : event.gpus) line += " " + g;
      if (!event.reason.empty()) line += " (" + event.reason + ")";
      for (const std::string& a : event.attempts) line += "; vacated " + a;
      // What providers do to lent GPUs is security-relevant: it ends others' work.
      std::string detail = event.reason;
      for (const std::string& a : event.attempts)
        detail += (detail.empty() ? "" : "; ") + ("vacated " + a);
      GP_RETURN_IF_ERROR(
          tx.AppendAudit({0, clock_.NowMs(), "node:" + (node ? node->name : node_id),
                          "node." + event.kind, node ? node->name : node_id, detail, "", true})
              .status());
      log_lines_.push_back(std::move(line));
      // The vacated jobs will want their checkpoints elsewhere soon.
      for (const std::string& a : event.attempts) {
        GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(a));
        if (!attempt) continue;
        GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(attempt->job_id));
        if (!job || job->current_attempt != a || !IsLive(attempt->state)) continue;
        if (const AttemptRank* rank = attempt->RankOn(node_id)) {
          // One rank leaves: the whole gang stops now, checkpointing first.
          GP_RETURN_IF_ERROR(StopGang(
              tx, *job, *attempt, rank->rank,
              "the provider of rank " + std::to_string(rank->rank) + "'s node took its GPU back"));
          GP_RETURN_IF_ERROR(tx.PutAttempt(*attempt));
        }
        if (!job->spec.preemptible()) continue;
        leaving_.insert(a);
        GP_RETURN_IF_ERROR(StageAhead(tx, *job, node_id));
      }
    } else if (type == proto::kLeave) {
      GP_ASSIGN_OR_RETURN(auto leave, proto::DecodeLeave(body));
      GP_RETURN_IF_ERROR(LeaveNode(tx, node_id, leave.reason));
    } else {
      return Status::InvalidArgument("type: unknown reliable message type \"" + type + "\"");
    }
    return SetAgentSeq(tx, node_id, live->second.instance, seq);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return Status::Ok();
}

Status Pool::LeaveNode(Tx& tx, const std::string& node_id, const std::string& reason) {
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  if (!node) return Status::Ok();
  node->state = NodeState::kLeft;
  node->last_seen_ms = clock_.NowMs();
  GP_RETURN_IF_ERROR(tx.PutNode(*node));
  log_lines_.push_back("node " + node->name + " left the pool" +
                       (reason.empty() ? "" : " (" + reason + ")"));
  // The agent drains before it leaves; anything still live is requeued
  // once its lease has expired (CheckNodes).
  awaiting_expiry_[node_id] = "the node left the pool";
  return Status::Ok();
}

Status Pool::RefuseForeign(Tx& tx, const std::string& node_id, const Attempt& attempt,
                           const std::string& what) {
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  GP_ASSIGN_OR_RETURN(auto owner, tx.GetNode(attempt.node_id));
  const std::string name = node ? node->name : node_id;
  const std::string detail = what + " about attempt " + attempt.id + ", which runs on node " +
                             (owner ? owner->name : attempt.node_id) + ": refused";
  log_lines_.push_back("node " + name + " sent " + detail);
  return tx
      .AppendAudit({0, clock_.NowMs(), "node:" + name, "agent.foreign_attempt", attempt.id, detail,
                    "", false})
      .status();
}

Result<std::string> Pool::AttemptNodeName(const std::string& attempt_id) {
  std::string name;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(attempt_id));
    if (!a) return Status::NotFound("attempt " + attempt_id + " does not exist");
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(a->node_id));
    if (node) name = node->name;
    return Status::Ok();
  }));
  return name;
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

Status Pool::RevokeNode(const std::string& node_name, const std::string& reason) {
  std::string node_id;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNodeByName(node_name));
    if (!node) return Status::Ok();  // enrolled but never connected
    node_id = node->id;
    node->state = NodeState::kLost;
    node->last_seen_ms = clock_.NowMs();
    GP_RETURN_IF_ERROR(tx.PutNode(*node));
    log_lines_.push_back("node " + node_name + " was revoked (" + reason +
                         "); its running jobs are requeued once their leases expire");
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  if (!node_id.empty()) {
    // Its agent may still run the attempts, until their leases end.
    live_.erase(node_id);
    liveness_.Disconnected(node_id);
    awaiting_expiry_[node_id] = "node " + node_name + " was revoked: " + reason;
  }
  Notify();
  return Status::Ok();
}

void Pool::AgentHeartbeat(const std::string& node_id, const proto::Heartbeat& hb) {
  auto it = live_.find(node_id);
  if (it == live_.end()) return;
  it->second.telemetry = hb.telemetry;
  it->second.running_tasks = hb.running_tasks;
  it->second.shares = hb.shares;
}

std::optional<ShareUse> Pool::ShareUseOf(const std::string& node_id,
                                         const std::string& attempt_id) const {
  auto it = live_.find(node_id);
  if (it == live_.end()) return std::nullopt;
  for (const ShareUse& s : it->second.shares) {
    if (s.attempt_id == attempt_id) return s;
  }
  return std::nullopt;
}

void Pool::AgentLeaseRequested(const std::string& node_id) {
  if (live_.count(node_id)) liveness_.LeaseRequested(node_id);
}

Status Pool::AgentDisconnected(const std::string& node_id) {
  live_.erase(node_id);
  liveness_.Disconnected(node_id);
  int64_t now = clock_.NowMs();
  return store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
    if (!node || node->state != NodeState::kReady) return Status::Ok();
    node->state = NodeState::kOffline;
    node->last_seen_ms = now;
    return tx.PutNode(*node);
  });
}

Status Pool::AgentAcked(const std::string& node_id, int64_t seq) {
  return store_.Transact([&](Tx& tx) { return tx.AckOutbox(node_id, seq); });
}

Result<std::vector<OutboxMessage>> Pool::PendingOrders(const std::string& node_id,
                                                       int64_t after_seq) {
  std::vector<OutboxMessage> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(out, tx.ListOutbox(node_id, after_seq));
    return Status::Ok();
  }));
  return out;
}

// ------------------------------------------------------------ periodic work

Status Pool::CheckNodes() {
  std::vector<std::string> requeued;  // leave awaiting_expiry_ once committed
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    for (Node& n : nodes) {
      if (live_.count(n.id)) continue;
      if (n.state == NodeState::kOffline) {
        if (!liveness_.LostNow(n.id)) continue;
        n.state = NodeState::kLost;
        GP_RETURN_IF_ERROR(tx.PutNode(n));
        GP_RETURN_IF_ERROR(LoseLiveAttempts(tx, n.id, "node " + n.name + " stopped answering"));
        continue;
      }
      auto awaiting = awaiting_expiry_.find(n.id);
      if (awaiting == awaiting_expiry_.end() || !liveness_.LeasesExpired(n.id)) continue;
      GP_RETURN_IF_ERROR(LoseLiveAttempts(tx, n.id, awaiting->second));
      requeued.push_back(n.id);
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  for (const std::string& id : requeued) awaiting_expiry_.erase(id);
  Notify();
  return Status::Ok();
}

Result<Pool::PoolView> Pool::ReadView(Tx& tx, bool with_pending) {
  PoolView v;
  if (with_pending) {
    JobQuery pending_q;
    pending_q.states = {JobState::kPending};
    pending_q.limit = 1'000'000;
    GP_ASSIGN_OR_RETURN(v.pending, tx.ListJobs(pending_q));
  }
  JobQuery live_q;
  live_q.states = {JobState::kScheduled, JobState::kRunning};
  live_q.limit = 1'000'000;
  GP_ASSIGN_OR_RETURN(v.live_jobs, tx.ListJobs(live_q));
  AttemptQuery aq;
  aq.live_only = true;
  GP_ASSIGN_OR_RETURN(v.live_attempts, tx.ListAttempts(aq));
  GP_ASSIGN_OR_RETURN(v.nodes, tx.ListNodes());
  GP_ASSIGN_OR_RETURN(v.usage, tx.ListGroupUsage());
  return v;
}

std::map<std::string, sched::DecayedUsage> Pool::UsageNow(const PoolView& view, int64_t now) const {
  const int64_t half_life = options_.scheduler.half_life_ms;
  std::map<std::string, sched::DecayedUsage> usage;
  for (const GroupUsage& u : view.usage) {
    usage[u.group] = sched::Decay({u.milli_ms, u.as_of_ms}, now, half_life);
  }
  std::map<int64_t, const Job*> live_by_id;
  for (const Job& j : view.live_jobs) live_by_id[j.id] = &j;
  for (const Attempt& a : view.live_attempts) {
    auto j = live_by_id.find(a.job_id);
    if (j == live_by_id.end()) continue;
    // Added virtually: the charge is written when the attempt ends.
    sched::DecayedUsage& u = usage[j->second->spec.group];
    u = sched::Charge(u, TotalMilli(a), a.created_ms, now, half_life);
  }
  return usage;
}

Pool::PassInput Pool::MakeSnapshot(const PoolView& view, int64_t now) const {
  PassInput in;
  sched::Snapshot& snap = in.snapshot;
  snap.now_ms = now;
  std::map<std::string, size_t> node_at;
  // Ready nodes whose lending admits only some jobs (users, groups, runtime,
  // whole GPUs only); every pending job is checked against these alone.
  std::vector<const Node*> restricted;
  // Ready nodes whose policy refuses `network: host`: checked only for the
  // jobs that ask for it.
  std::vector<const Node*> no_host_network;
  for (const Node& n : view.nodes) {
    const NodeLending* lending = n.lending ? &*n.lending : nullptr;
    sched::NodeView v;
    v.id = n.id;
    v.name = n.name;
    v.ready = n.state == NodeState::kReady && live_.count(n.id) > 0 &&
              (lending == nullptr || lending->mode == "lending");
    v.owner_group = n.owner_group;
    v.labels = n.labels;
    for (const GpuInfo& g : n.gpus) {
      sched::GpuView gv;
      gv.uuid = g.uuid;
      gv.model = g.name;
      gv.memory_mib = std::max<int64_t>(g.memory_mib, 0);
      gv.compute_capability = g.cc_major * 10 + g.cc_minor;
      gv.free_milli = 1000;
      if (g.IsMig()) {  // a MIG instance: only MIG requests that it meets (sched/mig.h)
        std::optional<Resources::Mig> profile = MigProfileOf(g.mig_profile);
        if (!profile || g.mig_slices <= 0) continue;  // never from a valid hello
        gv.mig_slices = g.mig_slices;
        gv.mig_memory_gb = profile->memory_gb;
      }
      if (lending != nullptr) {
        auto lent = lending->gpus.find(g.uuid);
        if (lent == lending->gpus.end()) continue;  // not lent now: not offered
        // Only part of its memory is lent, and the agent then takes shares
        // only (LendingAdmits). The scheduler knows no such GPU, so it is
        // offered as a GPU of the lent memory that is never wholly free
        // (999 milli): whole-GPU requests need 1000 and pass it by, shares
        // fit within the memory lent.
        if (lent->second < gv.memory_mib) {
          gv.memory_mib = std::max<int64_t>(lent->second, 0);
          gv.free_milli = 999;
        }
      }
      gv.free_memory_mib = gv.memory_mib;
      // One MPS server serves one user at a time: the scheduler co-locates
      // one user's shares only (mps_user is filled from the holdings below).
      gv.mps = lending != nullptr && lending->sharing == GpuSharing::kMps;
      v.gpus.push_back(std::move(gv));
    }
    if (v.ready && lending != nullptr &&
        (lending->sharing == GpuSharing::kNone || !lending->allow_users.empty() ||
         !lending->deny_users.empty() || !lending->allow_groups.empty() ||
         !lending->deny_groups.empty() || lending->max_runtime_ms > 0)) {
      restricted.push_back(&n);
    } else if (v.ready && lending != nullptr && !lending->host_network) {
      no_host_network.push_back(&n);
    }
    v.cpu_milli_total = v.cpu_milli_free = n.cpu_milli;
    v.memory_mib_total = v.memory_mib_free = n.memory_mib;
    node_at[n.id] = snap.nodes.size();
    snap.nodes.push_back(std::move(v));
  }

  std::map<int64_t, const Job*> live_by_id;
  for (const Job& j : view.live_jobs) live_by_id[j.id] = &j;
  for (const Attempt& a : view.live_attempts) {
    auto j = live_by_id.find(a.job_id);
    const Job* job = j == live_by_id.end() ? nullptr : j->second;
    std::vector<sched::Holding> holdings;
    for (const NodeHolding& where : HoldingsOf(a)) {
      auto n = node_at.find(where.node_id);
      if (n == node_at.end()) continue;  // a node the store no longer has
      sched::NodeView& node = snap.nodes[n->second];
      sched::Holding h;
      h.node_id = where.node_id;
      h.gpu_milli = MilliPerGpu(a);
      bool share = h.gpu_milli < 1000;
      h.gpu_memory_mib = share ? a.gpu_memory_mib : 0;
      // The amounts are clamped so that a node that came back with fewer or
      // smaller GPUs never makes the snapshot inconsistent.
      for (const std::string& uuid : where.gpu_uuids) {
        auto g = std::find_if(node.gpus.begin(), node.gpus.end(),
                              [&](const sched::GpuView& x) { return x.uuid == uuid; });
        if (g == node.gpus.end()) continue;
        g->free_milli = std::max(0, g->free_milli - h.gpu_milli);
        g->free_memory_mib =
            share ? std::max<int64_t>(0, g->free_memory_mib - h.gpu_memory_mib) : 0;
        if (g->mps && share && job != nullptr) g->mps_user = job->owner;
        h.gpu_uuids.push_back(uuid);
      }
      if (job != nullptr) {
        h.cpu_milli = job->spec.resources.cpu_milli;
        h.memory_mib = job->spec.resources.memory_mib;
        node.cpu_milli_free = std::max<int64_t>(0, node.cpu_milli_free - h.cpu_milli);
        node.memory_mib_free = std::max<int64_t>(0, node.memory_mib_free - h.memory_mib);
      }
      holdings.push_back(std::move(h));
    }
    if (holdings.empty()) continue;
    if (job == nullptr || job->current_attempt != a.id) continue;  // stale: holds, never runs
    sched::RunningJob r;
    r.job_id = job->id;
    r.attempt_id = a.id;
    r.group = job->spec.group;
    r.priority = ClassOf(job->spec.priority);
    r.holdings = std::move(holdings);
    r.started_ms = a.started_ms > 0 ? a.started_ms : a.created_ms;
    // Checkpoints are not reported yet: all work since the start is at stake.
    r.last_checkpoint_ms = r.started_ms;
    // An attempt already ordered to stop is leaving: it is not preempted twice.
    r.preemptible = job->spec.preemptible() && a.preempt_ms == 0;
    r.last_preempted_ms = job->last_preempted_ms;
    r.expected_end_ms = job->spec.max_runtime_ms > 0 ? r.started_ms + job->spec.max_runtime_ms : 0;
    snap.running.push_back(std::move(r));
  }

  // Nodes a job must avoid, and why: their provider's policy refuses it, or
  // they refused its start lately.
  auto exclude = [&](const Job& j, sched::Request& q) {
    std::vector<std::pair<std::string, std::string>> why;  // node name, reason
    const bool share = q.gpus == 0 && q.gpu_milli > 0;
    LendingRequest who;  // no GPUs: who asks, for how long, and whether a share
    who.user = j.owner;
    who.group = j.spec.group;
    who.max_runtime_ms = j.spec.max_runtime_ms;
    who.gpu_milli = share ? q.gpu_milli : 1000;
    who.host_network = j.spec.network == NetworkMode::kHost;
    auto check = [&](const Node* n) {
      Status admits = LendingAdmits(*n->lending, who, {});
      if (admits.ok()) return;
      q.excluded_nodes.push_back(n->id);
      why.emplace_back(n->name, admits.message());
    };
    for (const Node* n : restricted) check(n);
    if (who.host_network) {
      for (const Node* n : no_host_network) check(n);
    }
    if (auto r = refused_.find(j.id); r != refused_.end()) {
      for (const auto& [node_id, until] : r->second) {
        if (until <= now) continue;
        q.excluded_nodes.push_back(node_id);
        auto n = std::find_if(view.nodes.begin(), view.nodes.end(),
                              [&](const Node& x) { return x.id == node_id; });
        why.emplace_back(n == view.nodes.end() ? node_id : n->name, "it refused the job lately");
      }
    }
    if (why.empty()) return;
    std::sort(q.excluded_nodes.begin(), q.excluded_nodes.end());
    q.excluded_nodes.erase(std::unique(q.excluded_nodes.begin(), q.excluded_nodes.end()),
                           q.excluded_nodes.end());
    std::string text = "not placed on ";
    for (size_t i = 0; i < why.size() && i < 3; ++i) {
      text += (i == 0 ? "" : ", ") + why[i].first + " (" + why[i].second + ")";
    }
    if (why.size() > 3) text += " and " + std::to_string(why.size() - 3) + " more nodes";
    in.exclusions[j.id] = std::move(text);
  };

  for (const Job& j : view.pending) {
    sched::PendingJob p;
    p.job_id = j.id;
    p.group = j.spec.group;
    p.priority = ClassOf(j.spec.priority);
    p.submit_ms = j.created_ms;
    p.request = RequestFor(j.spec);
    p.request.user = j.owner;
    p.runtime_limit_ms = j.spec.max_runtime_ms;
    p.front = j.front;
    if (Status st = sched::ValidateRequest(p.request); !st.ok()) {
      // One bad record must not stop every other job from being scheduled.
      in.skipped[j.id] = "cannot be scheduled: " + st.message();
      continue;
    }
    exclude(j, p.request);
    snap.pending.push_back(std::move(p));
  }
  snap.usage = UsageNow(view, now);
  return in;
}

Status Pool::StageAhead(Tx& tx, const Job& job, const std::string& leaving_node) {
  GP_ASSIGN_OR_RETURN(auto newest, tx.LatestCheckpoint(job.id));
  if (!newest) return Status::Ok();
  // The scheduler's pass as it would run once the job is back in the queue
  // (first in its class, as a displaced job is) and off `leaving_node`.
  const int64_t now = clock_.NowMs();
  GP_ASSIGN_OR_RETURN(PoolView view, ReadView(tx, true));
  std::erase_if(view.live_attempts, [&](const Attempt& a) { return a.job_id == job.id; });
  Job requeued = job;
  requeued.front = true;
  view.pending.push_back(requeued);
  PassInput in = MakeSnapshot(view, now);
  for (sched::PendingJob& p : in.snapshot.pending) {
    if (p.job_id != job.id) continue;
    auto& excluded = p.request.excluded_nodes;
    excluded.insert(std::lower_bound(excluded.begin(), excluded.end(), leaving_node), leaving_node);
    excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  }
  GP_ASSIGN_OR_RETURN(sched::Decisions d, scheduler_.Decide(in.snapshot));
  for (const sched::Placement& p : d.placements) {
    if (p.job_id != job.id) continue;
    // Every rank of a gang restores the checkpoint.
    for (const sched::NodeAssignment& where : p.nodes) {
      const std::string& node = where.node_id;
      proto::StageCheckpoint order{job.id, newest->number, newest->manifest};
      GP_RETURN_IF_ERROR(
          tx.PushOutbox(node, std::string(proto::kStage), proto::Encode(order)).status());
      touched_nodes_.insert(node);
      log_lines_.push_back("job " + std::to_string(job.id) + ": staging checkpoint " +
                           std::to_string(newest->number) + " on node " + node +
                           ", where it would run next");
    }
  }
  return Status::Ok();
}

Result<int> Pool::Schedule() {
  int placed = 0;
  int64_t now = clock_.NowMs();
  std::map<int64_t, QueueInfo> queue;
  for (auto it = refused_.begin(); it != refused_.end();) {
    std::erase_if(it->second, [&](const auto& e) { return e.second <= now; });
    it = it->second.empty() ? refused_.erase(it) : std::next(it);
  }
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(PoolView view, ReadView(tx, true));
    if (view.pending.empty()) return Status::Ok();
    PassInput in = MakeSnapshot(view, now);
    GP_ASSIGN_OR_RETURN(sched::Decisions d, scheduler_.Decide(in.snapshot));

    std::map<int64_t, Job*> pending_by_id;
    for (Job& j : view.pending) pending_by_id[j.id] = &j;
    std::map<std::string, Attempt*> attempt_by_id;
    // Jobs that already wait for victims to leave, and who those are.
    std::map<int64_t, std::vector<int64_t>> leaving_for;
    for (Attempt& a : view.live_attempts) {
      attempt_by_id[a.id] = &a;
      if (a.preempt_ms > 0) leaving_for[a.preempt_for_job].push_back(a.job_id);
    }

    for (const sched::Placement& p : d.placements) {
      auto it = pending_by_id.find(p.job_id);
      if (it == pending_by_id.end() || p.nodes.empty()) continue;
      Job& job = *it->second;
      JobTransition t = Step(job.state, JobEvent::kSchedule);
      if (!t.accepted) continue;
      const sched::NodeAssignment& where = p.nodes[0];  // rank 0 of a gang
      Attempt a;
      a.number = job.attempts + 1;
      a.id = MakeAttemptId(job.id, a.number);
      a.job_id = job.id;
      a.node_id = where.node_id;
      a.gpu_uuids = where.gpu_uuids;
      a.gpu_milli = where.gpu_uuids.empty() ? 0 : where.gpu_milli;
      a.gpu_memory_mib = where.gpu_milli < 1000 ? where.gpu_memory_mib : 0;
      a.state = AttemptState::kScheduled;
      a.created_ms = now;
      if (job.spec.gang()) {
        for (size_t i = 0; i < p.nodes.size(); ++i) {
          AttemptRank r;
          r.rank = static_cast<int32_t>(i);
          r.node_id = p.nodes[i].node_id;
          r.gpu_uuids = p.nodes[i].gpu_uuids;
          a.ranks.push_back(std::move(r));
        }
      }
      GP_RETURN_IF_ERROR(tx.PutAttempt(a));
      if (a.ranks.empty()) GP_RETURN_IF_ERROR(PushStart(tx, job, a, nullptr));
      // A torch gang starts with rank 0, whose agent chooses the rendezvous
      // port; the other ranks follow once it is known (ApplyRankReport).
      for (const AttemptRank& r : a.ranks) {
        if (!StartHeldBack(job, a, r)) GP_RETURN_IF_ERROR(PushStart(tx, job, a, &r));
      }
      job.attempts = a.number;
      job.current_attempt = a.id;
      job.state = t.next;
      job.reason.clear();
      job.front = false;
      job.updated_ms = now;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      touched_jobs_.insert(job.id);
      ++placed;
    }

    // Preemptions: each victim is ordered to stop (its checkpoint grace) and
    // its job requeued when the attempt ends. A job that already waits for
    // victims gets no more until they have left, so passes that run while
    // they leave do not preempt again.
    std::map<int64_t, std::vector<int64_t>> newly_leaving;
    for (const sched::Preemption& pr : d.preemptions) {
      if (leaving_for.count(pr.for_job_id)) continue;
      auto a = attempt_by_id.find(pr.attempt_id);
      if (a == attempt_by_id.end() || a->second->preempt_ms > 0) continue;
      Attempt& attempt = *a->second;
      GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(attempt.job_id));
      if (!job || job->current_attempt != attempt.id || !job->spec.preemptible()) continue;
      attempt.preempt_ms = now;
      attempt.preempt_for_job = pr.for_job_id;
      attempt.reason =
          pr.message.empty() ? "preempted for job " + std::to_string(pr.for_job_id) : pr.message;
      GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
      StopOrder stop{attempt.reason, PreemptGraceMs(job->spec), /*requeue=*/true};
      GP_RETURN_IF_ERROR(ApplyEvent(tx, *job, attempt, JobEvent::kPreempt, nullptr, &stop));
      GP_RETURN_IF_ERROR(StageAhead(tx, *job, attempt.node_id));
      newly_leaving[pr.for_job_id].push_back(job->id);
    }
    for (auto& [for_job, victims] : newly_leaving) {
      auto& all = leaving_for[for_job];
      all.insert(all.end(), victims.begin(), victims.end());
      // The preemptor goes first in its class until it starts, so that the
      // room its victims leave is not taken by the next job in line (often
      // the victim itself, requeued).
      if (auto p = pending_by_id.find(for_job); p != pending_by_id.end() && !p->second->front) {
        p->second->front = true;
        GP_RETURN_IF_ERROR(tx.UpdateJob(*p->second));
        touched_jobs_.insert(for_job);
      }
    }

    auto set_reason = [&](Job& job, const std::string& reason) -> Status {
      // Written only when it changes: most passes leave most reasons alone.
      if (job.reason == reason) return Status::Ok();
      job.reason = reason;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      touched_jobs_.insert(job.id);
      return Status::Ok();
    };
    for (const sched::Waiting& w : d.waiting) {
      auto it = pending_by_id.find(w.job_id);
      if (it == pending_by_id.end()) continue;
      std::string reason = w.reason;
      if (auto l = leaving_for.find(w.job_id); l != leaving_for.end()) {
        std::string ids;
        for (int64_t v : l->second) ids += (ids.empty() ? "" : ", ") + std::to_string(v);
        reason = "waiting for job" + std::string(l->second.size() > 1 ? "s " : " ") + ids +
                 " to leave (preempted for it: checkpoint and requeue)";
      } else if (auto e = in.exclusions.find(w.job_id);
                 w.unsatisfiable && e != in.exclusions.end()) {
        reason += "; " + e->second;
      }
      queue[w.job_id] = QueueInfo{w.position, w.explanation, w.unsatisfiable, w.reserved_start_ms};
      GP_RETURN_IF_ERROR(set_reason(*it->second, reason));
    }
    for (const auto& [id, why] : in.skipped)
      GP_RETURN_IF_ERROR(set_reason(*pending_by_id.at(id), why));
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  queue_ = std::move(queue);
  Notify();
  return placed;
}

}  // namespace gpupool::server
