// SqlTx's jobs facet (store/sql_tx.h): jobs, attempts, checkpoints,
// the groups' fair-share usage.

#include <string>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/sql_rows.h"
#include "store/sql_tx.h"

namespace gpupool {
namespace {

using namespace ::gpupool::sql_rows;  // NOLINT: the store's row codecs

// The WHERE conditions of a JobQuery (owner, groups, states) after a
// first condition, numbering parameters from `next` (advanced past them).
std::string JobFilter(SqlDialect d, const JobQuery& jq, int& next) {
  std::string sql;
  if (jq.owner) {
    sql += " AND (owner = ?" + std::to_string(next++);
    for (size_t i = 0; i < jq.or_groups.size(); ++i) {
      sql += (i == 0 ? " OR " + SqlJsonText(d, "spec", "group") + " IN (?" : std::string(", ?")) +
             std::to_string(next++);
    }
    sql += jq.or_groups.empty() ? ")" : "))";
  }
  if (!jq.states.empty()) {
    sql += " AND state IN (";
    for (size_t i = 0; i < jq.states.size(); ++i) {
      if (i > 0) sql += ", ";
      sql += "?" + std::to_string(next++);
    }
    sql += ")";
  }
  return sql;
}

// Binds JobFilter's parameters from `i`; returns the next index.
int BindJobFilter(Query& q, const JobQuery& jq, int i) {
  if (jq.owner) {
    q.Bind(i++, *jq.owner);
    for (const std::string& g : jq.or_groups) q.Bind(i++, g);
  }
  for (JobState s : jq.states) q.Bind(i++, JobStateName(s));
  return i;
}

// Binds parameters 1..12, 14 and 15 of the INSERT and UPDATE statements
// (13 is the id in UPDATE).
void BindJob(Query& q, const Job& job) {
  if (job.last_preempted_ms) {
    q.Bind(14, *job.last_preempted_ms);
  } else {
    q.BindNull(14);
  }
  q.Bind(15, int64_t{job.front ? 1 : 0});
  q.Bind(16, static_cast<int64_t>(job.restarts));
  q.Bind(17, job.input_bytes);
  q.Bind(1, job.owner)
      .Bind(2, job.spec.name)
      .Bind(3, JobStateName(job.state))
      .Bind(4, job.reason)
      .Bind(5, job.exit_code)
      .Bind(6, static_cast<int64_t>(job.attempts))
      .Bind(7, job.current_attempt)
      .Bind(8, job.created_ms)
      .Bind(9, job.updated_ms)
      .Bind(10, job.started_ms)
      .Bind(11, job.finished_ms)
      .Bind(12, Dump(JobSpecToJson(job.spec)));
}

}  // namespace

Result<int64_t> SqlTx::InsertJob(const Job& job) {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("INSERT INTO jobs (owner, name, state, reason, exit_code, "
                             "attempts, current_attempt, created_ms, updated_ms, "
                             "started_ms, finished_ms, spec, last_preempted_ms, front, "
                             "restarts, input_bytes) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?14, "
                             "?15, ?16, ?17) RETURNING id"));
  BindJob(q, job);
  return RunReturningId(q);
}

Status SqlTx::UpdateJob(const Job& job) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("UPDATE jobs SET owner = ?1, name = ?2, state = ?3, "
                                             "reason = ?4, exit_code = ?5, attempts = ?6, "
                                             "current_attempt = ?7, created_ms = ?8, "
                                             "updated_ms = ?9, started_ms = ?10, "
                                             "finished_ms = ?11, spec = ?12, "
                                             "last_preempted_ms = ?14, front = ?15, "
                                             "restarts = ?16, input_bytes = ?17 "
                                             "WHERE id = ?13"));
  BindJob(q, job);
  q.Bind(13, job.id);
  GP_RETURN_IF_ERROR(q.Run());
  if (conn_.Changes() == 0) {
    return Status::NotFound("job " + std::to_string(job.id) + " does not exist");
  }
  return Status::Ok();
}

Result<std::optional<int64_t>> SqlTx::FindSubmitKey(const std::string& owner,
                                                    const std::string& key) {
  GP_ASSIGN_OR_RETURN(
      Query q,
      conn_.Prepare("SELECT job_id FROM submit_keys WHERE owner = ?1 AND submit_key = ?2"));
  q.Bind(1, owner).Bind(2, key);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<int64_t>();
  return std::optional<int64_t>(q.Int(0));
}

Status SqlTx::PutSubmitKey(const std::string& owner, const std::string& key, int64_t job_id) {
  // DO NOTHING rather than a unique violation, which would end a
  // PostgreSQL transaction.
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO submit_keys (owner, submit_key, job_id) "
                                             "VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"));
  q.Bind(1, owner).Bind(2, key).Bind(3, job_id);
  Status st = q.Run();
  if (!st.ok() && q.violated() == SqlConstraint::kForeignKey) {
    return Status::NotFound("job " + std::to_string(job_id) + " does not exist");
  }
  GP_RETURN_IF_ERROR(st);
  if (conn_.Changes() == 0) {
    return Status::AlreadyExists("submission key " + key + " of user " + owner +
                                 " is in use already");
  }
  return Status::Ok();
}

Result<std::optional<Job>> SqlTx::GetJob(int64_t id) {
  static const std::string sql = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id = ?1";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, id);
  return ReadOne<Job>(q, ReadJob);
}

Result<std::vector<Job>> SqlTx::ListJobs(const JobQuery& jq) {
  if (jq.limit <= 0) return std::vector<Job>();
  // The SQL text varies only with the shape of the query (owner or not, the
  // number of states, the order), so the variants stay few and cached.
  int next = 3;
  std::string sql = "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id > ?1 AND id < ?2" +
                    JobFilter(conn_.dialect(), jq, next);
  sql += jq.newest_first ? " ORDER BY id DESC" : " ORDER BY id";
  sql += " LIMIT ?" + std::to_string(next);
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, jq.after_id);
  q.Bind(2, jq.before_id > 0 ? jq.before_id : INT64_MAX);
  int i = BindJobFilter(q, jq, 3);
  q.Bind(i, static_cast<int64_t>(jq.limit));
  return ReadAll<Job>(q, ReadJob);
}

Result<int64_t> SqlTx::CountJobs(const JobQuery& jq) {
  int next = 1;
  std::string sql = "SELECT count(*) FROM jobs WHERE 1 = 1" + JobFilter(conn_.dialect(), jq, next);
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  BindJobFilter(q, jq, 1);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

Status SqlTx::PutAttempt(const Attempt& a) {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("INSERT INTO attempts (id, job_id, number, node_id, gpu_uuids, "
                             "state, exit_code, reason, created_ms, started_ms, finished_ms, "
                             "gpu_milli, gpu_memory_mib, preempt_ms, preempt_for_job, "
                             "last_checkpoint_ms, gang) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                             "?14, ?15, ?16, ?17) "
                             "ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, "
                             "number = excluded.number, node_id = excluded.node_id, "
                             "gpu_uuids = excluded.gpu_uuids, state = excluded.state, "
                             "exit_code = excluded.exit_code, reason = excluded.reason, "
                             "created_ms = excluded.created_ms, "
                             "started_ms = excluded.started_ms, "
                             "finished_ms = excluded.finished_ms, "
                             "gpu_milli = excluded.gpu_milli, "
                             "gpu_memory_mib = excluded.gpu_memory_mib, "
                             "preempt_ms = excluded.preempt_ms, "
                             "preempt_for_job = excluded.preempt_for_job, "
                             "last_checkpoint_ms = excluded.last_checkpoint_ms, "
                             "gang = excluded.gang"));
  q.Bind(1, a.id)
      .Bind(2, a.job_id)
      .Bind(3, static_cast<int64_t>(a.number))
      .Bind(4, a.node_id)
      .Bind(5, Dump(json(a.gpu_uuids)))
      .Bind(6, AttemptStateName(a.state))
      .Bind(7, a.exit_code)
      .Bind(8, a.reason)
      .Bind(9, a.created_ms)
      .Bind(10, a.started_ms)
      .Bind(11, a.finished_ms)
      .Bind(12, static_cast<int64_t>(a.gpu_milli))
      .Bind(13, a.gpu_memory_mib)
      .Bind(14, a.preempt_ms)
      .Bind(15, a.preempt_for_job)
      .Bind(16, a.last_checkpoint_ms)
      .Bind(17, GangColumn(a));
  Status st = q.Run();
  if (!st.ok() && q.violated() == SqlConstraint::kForeignKey) {
    return Status::NotFound("attempt " + a.id + ": job " + std::to_string(a.job_id) +
                            " does not exist");
  }
  GP_RETURN_IF_ERROR(st);
  // A gang's nodes never change after its placement: indexed once.
  if (a.ranks.empty()) return Status::Ok();
  for (const AttemptRank& r : a.ranks) {
    GP_ASSIGN_OR_RETURN(Query n, conn_.Prepare("INSERT INTO attempt_nodes (node_id, attempt_id) "
                                               "VALUES (?1, ?2) ON CONFLICT DO NOTHING"));
    n.Bind(1, r.node_id).Bind(2, a.id);
    GP_RETURN_IF_ERROR(n.Run());
  }
  return Status::Ok();
}

Result<std::optional<Attempt>> SqlTx::GetAttempt(const std::string& id) {
  static const std::string sql =
      "SELECT " + std::string(kAttemptColumns) + " FROM attempts WHERE id = ?1";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, id);
  return ReadOne<Attempt>(q, ReadAttempt);
}

Result<std::vector<Attempt>> SqlTx::ListAttempts(const AttemptQuery& aq) {
  std::string sql = "SELECT " + std::string(kAttemptColumns) + " FROM attempts WHERE 1 = 1";
  int next = 1;
  if (aq.job_id) sql += " AND job_id = ?" + std::to_string(next++);
  if (aq.node_id) {
    std::string n = "?" + std::to_string(next++);
    sql += " AND (node_id = " + n + " OR id IN (SELECT attempt_id FROM attempt_nodes WHERE " +
           "node_id = " + n + "))";
  }
  // The live states by name (model/job.h: scheduled, running and the
  // stopping states), bound from `next` on.
  std::vector<std::string_view> live;
  if (aq.live_only) {
    for (AttemptState s : kAllAttemptStates) {
      if (IsLive(s)) live.push_back(AttemptStateName(s));
    }
    sql += " AND state IN (";
    for (size_t k = 0; k < live.size(); ++k) {
      sql += (k ? ", ?" : "?") + std::to_string(next + static_cast<int>(k));
    }
    sql += ")";
  }
  sql += " ORDER BY job_id, number";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  int i = 1;
  if (aq.job_id) q.Bind(i++, *aq.job_id);
  if (aq.node_id) q.Bind(i++, *aq.node_id);
  for (std::string_view name : live) q.Bind(i++, name);
  return ReadAll<Attempt>(q, ReadAttempt);
}

Result<Checkpoint> SqlTx::AddCheckpoint(const Checkpoint& c) {
  GP_ASSIGN_OR_RETURN(auto job, GetJob(c.job_id));
  if (!job) return Status::NotFound("job " + std::to_string(c.job_id) + " does not exist");
  Checkpoint out = c;
  GP_ASSIGN_OR_RETURN(out.number, NextCheckpointNumber(c.job_id));
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO checkpoints (job_id, number, "
                                             "attempt_id, manifest, created_ms, bytes, files) "
                                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  q.Bind(1, out.job_id).Bind(2, out.number).Bind(3, out.attempt_id).Bind(4, out.manifest);
  q.Bind(5, out.created_ms).Bind(6, out.bytes).Bind(7, out.files);
  GP_RETURN_IF_ERROR(q.Run());
  return out;
}

Result<std::vector<Checkpoint>> SqlTx::ListCheckpoints(int64_t job_id) {
  static const std::string sql = "SELECT " + std::string(kCheckpointColumns) +
                                 " FROM checkpoints WHERE job_id = ?1 ORDER BY number";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, job_id);
  return ReadAll<Checkpoint>(q, ReadCheckpoint);
}

Result<std::optional<Checkpoint>> SqlTx::GetCheckpoint(int64_t job_id, int64_t number) {
  static const std::string sql = "SELECT " + std::string(kCheckpointColumns) +
                                 " FROM checkpoints WHERE job_id = ?1 AND number = ?2";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, job_id).Bind(2, number);
  return ReadOne<Checkpoint>(q, ReadCheckpoint);
}

Result<std::optional<Checkpoint>> SqlTx::LatestCheckpoint(int64_t job_id) {
  static const std::string sql = "SELECT " + std::string(kCheckpointColumns) +
                                 " FROM checkpoints WHERE job_id = ?1 ORDER BY number DESC LIMIT 1";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, job_id);
  return ReadOne<Checkpoint>(q, ReadCheckpoint);
}

Status SqlTx::DeleteCheckpoint(int64_t job_id, int64_t number) {
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare("DELETE FROM checkpoints WHERE job_id = ?1 AND number = ?2"));
  q.Bind(1, job_id).Bind(2, number);
  return q.Run();
}

Status SqlTx::PutGroupUsage(const GroupUsage& u) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO group_usage (grp, milli_ms, as_of_ms) "
                                             "VALUES (?1, ?2, ?3) ON CONFLICT (grp) DO UPDATE "
                                             "SET milli_ms = excluded.milli_ms, "
                                             "as_of_ms = excluded.as_of_ms"));
  q.Bind(1, u.group).Bind(2, u.milli_ms).Bind(3, u.as_of_ms);
  return q.Run();
}

Result<std::optional<GroupUsage>> SqlTx::GetGroupUsage(const std::string& group) {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("SELECT grp, milli_ms, as_of_ms FROM group_usage WHERE grp = ?1"));
  q.Bind(1, group);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<GroupUsage>();
  return std::optional<GroupUsage>(GroupUsage{q.Text(0), q.Int(1), q.Int(2)});
}

Result<std::vector<GroupUsage>> SqlTx::ListGroupUsage() {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("SELECT grp, milli_ms, as_of_ms FROM group_usage ORDER BY grp"));
  std::vector<GroupUsage> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(GroupUsage{q.Text(0), q.Int(1), q.Int(2)});
  }
  return out;
}

Result<int64_t> SqlTx::NextCheckpointNumber(int64_t job_id) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO checkpoint_seq (job_id, last_number) "
                                             "VALUES (?1, 1) ON CONFLICT (job_id) DO UPDATE "
                                             "SET last_number = checkpoint_seq.last_number + 1 "
                                             "RETURNING last_number"));
  q.Bind(1, job_id);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Status::Internal("sqlite: checkpoint_seq: no number returned");
  int64_t number = q.Int(0);
  // Finish the statement so its effect is complete before the next one.
  GP_ASSIGN_OR_RETURN(bool more, q.Step());
  (void)more;
  return number;
}

}  // namespace gpupool
