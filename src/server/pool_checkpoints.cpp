// Pool: checkpoint records (adding one of the live attempt, retention,
// listing, deleting, what blob garbage collection must keep).
#include "server/pool.h"

#include <algorithm>

#include "common/log.h"
#include "server/pool_rules.h"

namespace gpupool::server {

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
    if (IsStopping(attempt.state) || leaving_.count(attempt.id)) return Status::Ok();
    return StageAhead(tx, *job, attempt.node_id);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  if (out.created) {
    fx_.jobs.insert(r.job_id);
    fx_.log_lines.push_back("job " + std::to_string(r.job_id) + ": checkpoint " +
                            std::to_string(out.checkpoint.number) + " from attempt " +
                            r.attempt_id + " (" + std::to_string(r.files) + " files, " +
                            std::to_string(r.bytes) + " bytes)");
    ++fx_.counts.checkpoints;
    fx_.counts.checkpoint_bytes += r.bytes;
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
    fx_.jobs.insert(job_id);
    fx_.log_lines.push_back("job " + std::to_string(job_id) + ": " +
                            std::to_string(deleted.size()) + " checkpoints deleted by their user");
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

}  // namespace gpupool::server
