#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "model/job_spec.h"
#include "store/sqlite_files.h"
#include "store/sqlite_logs.h"
#include "store/sqlite_query.h"

namespace gpupool {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------
// Schema. Each migration moves the database from version N-1 to N and runs in
// its own transaction together with the user_version bump. Never edit a
// released migration: append a new one (e.g. "ALTER TABLE jobs ADD COLUMN
// priority INTEGER NOT NULL DEFAULT 0") and raise SqliteStore::kSchemaVersion.

constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE jobs (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  owner           TEXT NOT NULL,
  name            TEXT NOT NULL,
  state           TEXT NOT NULL,
  reason          TEXT NOT NULL,
  exit_code       INTEGER,
  attempts        INTEGER NOT NULL,
  current_attempt TEXT NOT NULL,
  created_ms      INTEGER NOT NULL,
  updated_ms      INTEGER NOT NULL,
  started_ms      INTEGER NOT NULL,
  finished_ms     INTEGER NOT NULL,
  spec            TEXT NOT NULL
);
CREATE INDEX jobs_state_id ON jobs(state, id);
CREATE INDEX jobs_owner_id ON jobs(owner, id);

CREATE TABLE attempts (
  id          TEXT PRIMARY KEY,
  job_id      INTEGER NOT NULL REFERENCES jobs(id),
  number      INTEGER NOT NULL,
  node_id     TEXT NOT NULL,
  gpu_uuids   TEXT NOT NULL,
  state       TEXT NOT NULL,
  exit_code   INTEGER,
  reason      TEXT NOT NULL,
  created_ms  INTEGER NOT NULL,
  started_ms  INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX attempts_job_number ON attempts(job_id, number);
CREATE INDEX attempts_node_state ON attempts(node_id, state);
-- Scheduling passes read the live (scheduled, running) attempts of the pool.
CREATE INDEX attempts_state ON attempts(state);

CREATE TABLE nodes (
  id             TEXT PRIMARY KEY,
  name           TEXT NOT NULL UNIQUE,
  state          TEXT NOT NULL,
  gpus           TEXT NOT NULL,
  cpu_milli      INTEGER NOT NULL,
  memory_mib     INTEGER NOT NULL,
  driver_version TEXT NOT NULL,
  cuda_version   TEXT NOT NULL,
  agent_version  TEXT NOT NULL,
  labels         TEXT NOT NULL,
  registered_ms  INTEGER NOT NULL,
  last_seen_ms   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE logs (
  cursor     INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  attempt_id TEXT NOT NULL,
  "offset"   INTEGER NOT NULL,
  stream     TEXT NOT NULL,
  ts_ms      INTEGER NOT NULL,
  text       TEXT NOT NULL,
  UNIQUE (attempt_id, "offset")
);
CREATE INDEX logs_job_cursor ON logs(job_id, cursor);

CREATE TABLE outbox (
  node_id TEXT NOT NULL,
  seq     INTEGER NOT NULL,
  type    TEXT NOT NULL,
  body    TEXT NOT NULL,
  PRIMARY KEY (node_id, seq)
) WITHOUT ROWID;
-- The last seq handed out per node; outlives AckOutbox's deletes so a seq is
-- never handed out twice.
CREATE TABLE outbox_seq (
  node_id  TEXT PRIMARY KEY,
  last_seq INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE tokens (
  hash       TEXT PRIMARY KEY,
  subject    TEXT NOT NULL,
  role       TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  revoked    INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

// Version 2: the scheduler's fields (GPU shares, preemption, node owners)
// and per-group fair-share usage. Attempts written before it held whole GPUs.
constexpr const char* kSchemaV2 = R"sql(
ALTER TABLE jobs ADD COLUMN last_preempted_ms INTEGER;
ALTER TABLE jobs ADD COLUMN front INTEGER NOT NULL DEFAULT 0;

ALTER TABLE attempts ADD COLUMN gpu_milli INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN gpu_memory_mib INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN preempt_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN preempt_for_job INTEGER NOT NULL DEFAULT 0;
UPDATE attempts SET gpu_milli = 1000 WHERE gpu_uuids <> '[]';

ALTER TABLE nodes ADD COLUMN owner_group TEXT NOT NULL DEFAULT '';

CREATE TABLE group_usage (
  grp      TEXT PRIMARY KEY,
  milli_ms INTEGER NOT NULL,
  as_of_ms INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

// Version 3: provider policies. A node's lending as its agent last reported
// it (NodeLending JSON; '' = absent: an agent that lends everything), and
// the log of what providers did to their nodes.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE nodes ADD COLUMN lending TEXT NOT NULL DEFAULT '';

CREATE TABLE node_events (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  node_id  TEXT NOT NULL,
  ts_ms    INTEGER NOT NULL,
  kind     TEXT NOT NULL,
  reason   TEXT NOT NULL,
  gpus     TEXT NOT NULL,
  attempts TEXT NOT NULL
);
CREATE INDEX node_events_node_id ON node_events(node_id, id);
)sql";

// Version 4: the blob store's checkpoints, and when each attempt last
// checkpointed (lost-work accounting). checkpoint_seq keeps the last number
// handed out per job, so retention's deletes never let a number come back.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE attempts ADD COLUMN last_checkpoint_ms INTEGER NOT NULL DEFAULT 0;

CREATE TABLE checkpoints (
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  number     INTEGER NOT NULL,
  attempt_id TEXT NOT NULL,
  manifest   TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  bytes      INTEGER NOT NULL,
  files      INTEGER NOT NULL,
  PRIMARY KEY (job_id, number)
) WITHOUT ROWID;
CREATE TABLE checkpoint_seq (
  job_id      INTEGER PRIMARY KEY,
  last_number INTEGER NOT NULL
);
)sql";

// Version 5: identities. Users, groups (labs) and their members, token
// names and scopes, the audit log, and the agents' enrollment credentials.
constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN scopes TEXT NOT NULL DEFAULT '*';
CREATE INDEX tokens_subject ON tokens(subject, created_ms);

CREATE TABLE users (
  name          TEXT PRIMARY KEY,
  role          TEXT NOT NULL,
  password_hash TEXT NOT NULL,
  disabled      INTEGER NOT NULL,
  created_ms    INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE user_groups (
  name        TEXT PRIMARY KEY,
  members     TEXT NOT NULL,
  shared_jobs INTEGER NOT NULL,
  created_ms  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE audit (
  id     INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms  INTEGER NOT NULL,
  actor  TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  detail TEXT NOT NULL,
  peer   TEXT NOT NULL,
  ok     INTEGER NOT NULL
);

CREATE TABLE agent_credentials (
  node_name        TEXT PRIMARY KEY,
  token_hash       TEXT NOT NULL,
  cert_serial      TEXT NOT NULL,
  cert_fingerprint TEXT NOT NULL,
  owner            TEXT NOT NULL,
  enrolled_ms      INTEGER NOT NULL,
  revoked          INTEGER NOT NULL,
  revoked_ms       INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

// Version 6: multi-node jobs, and restarts of failed jobs (jobs.restarts,
// counted against the spec's max_restarts). A gang attempt keeps its ranks, rendezvous and
// teardown as JSON in `gang`; attempt_nodes lists every node a gang runs on
// (ListAttempts by node); log lines carry their rank, and a line is unique
// per (attempt, rank, offset). SQLite cannot change a table's UNIQUE
// constraint, so logs is rebuilt.
constexpr const char* kSchemaV6 = R"sql(
ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN gang TEXT NOT NULL DEFAULT '';
CREATE TABLE attempt_nodes (
  node_id    TEXT NOT NULL,
  attempt_id TEXT NOT NULL REFERENCES attempts(id),
  PRIMARY KEY (node_id, attempt_id)
) WITHOUT ROWID;

CREATE TABLE logs_v6 (
  cursor     INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  attempt_id TEXT NOT NULL,
  rank       INTEGER NOT NULL DEFAULT 0,
  "offset"   INTEGER NOT NULL,
  stream     TEXT NOT NULL,
  ts_ms      INTEGER NOT NULL,
  text       TEXT NOT NULL,
  UNIQUE (attempt_id, rank, "offset")
);
INSERT INTO logs_v6 (cursor, job_id, attempt_id, rank, "offset", stream, ts_ms, text)
  SELECT cursor, job_id, attempt_id, 0, "offset", stream, ts_ms, text FROM logs;
DROP TABLE logs;
ALTER TABLE logs_v6 RENAME TO logs;
CREATE INDEX logs_job_cursor ON logs(job_id, cursor);
)sql";

// Version 8: limits. Jobs record their inputs' size (Job::input_bytes); a
// user's pending jobs are counted by (owner, state); operators' storage
// quotas; and storage_refs, what each user and group stores (Tx::
// StorageUsed): per distinct manifest its bytes and how many references
// (inputs of jobs not terminal, kept checkpoints) name it. The triggers
// keep storage_refs exact whichever statement changes jobs or checkpoints.
// Existing checkpoints are counted; the inputs of jobs submitted before
// this version count 0 bytes (their size was not recorded).
constexpr const char* kSchemaV8 = R"sql(
ALTER TABLE jobs ADD COLUMN input_bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_owner_state ON jobs(owner, state);

CREATE TABLE storage_quotas (
  kind   TEXT NOT NULL,
  name   TEXT NOT NULL,
  bytes  INTEGER NOT NULL,
  set_ms INTEGER NOT NULL,
  PRIMARY KEY (kind, name)
) WITHOUT ROWID;

CREATE TABLE storage_refs (
  kind     TEXT NOT NULL,
  name     TEXT NOT NULL,
  manifest TEXT NOT NULL,
  bytes    INTEGER NOT NULL,
  refs     INTEGER NOT NULL,
  PRIMARY KEY (kind, name, manifest)
) WITHOUT ROWID;

INSERT INTO storage_refs (kind, name, manifest, bytes, refs)
  SELECT 'user', j.owner, c.manifest, MAX(c.bytes), COUNT(*)
  FROM checkpoints c JOIN jobs j ON j.id = c.job_id GROUP BY j.owner, c.manifest;
INSERT INTO storage_refs (kind, name, manifest, bytes, refs)
  SELECT 'group', COALESCE(json_extract(j.spec, '$.group'), 'default'), c.manifest,
         MAX(c.bytes), COUNT(*)
  FROM checkpoints c JOIN jobs j ON j.id = c.job_id
  GROUP BY COALESCE(json_extract(j.spec, '$.group'), 'default'), c.manifest;
INSERT INTO storage_refs (kind, name, manifest, bytes, refs)
  SELECT 'user', owner, json_extract(spec, '$.inputs'), 0, COUNT(*) FROM jobs
  WHERE COALESCE(json_extract(spec, '$.inputs'), '') <> ''
    AND state NOT IN ('succeeded', 'failed', 'cancelled')
  GROUP BY owner, json_extract(spec, '$.inputs')
  ON CONFLICT (kind, name, manifest) DO UPDATE SET refs = refs + excluded.refs;
INSERT INTO storage_refs (kind, name, manifest, bytes, refs)
  SELECT 'group', COALESCE(json_extract(spec, '$.group'), 'default'),
         json_extract(spec, '$.inputs'), 0, COUNT(*) FROM jobs
  WHERE COALESCE(json_extract(spec, '$.inputs'), '') <> ''
    AND state NOT IN ('succeeded', 'failed', 'cancelled')
  GROUP BY COALESCE(json_extract(spec, '$.group'), 'default'), json_extract(spec, '$.inputs')
  ON CONFLICT (kind, name, manifest) DO UPDATE SET refs = refs + excluded.refs;

-- A job's inputs count while it is not terminal.
CREATE TRIGGER storage_inputs_insert AFTER INSERT ON jobs
WHEN COALESCE(json_extract(NEW.spec, '$.inputs'), '') <> ''
  AND NEW.state NOT IN ('succeeded', 'failed', 'cancelled')
BEGIN
  INSERT INTO storage_refs (kind, name, manifest, bytes, refs) VALUES
    ('user', NEW.owner, json_extract(NEW.spec, '$.inputs'), NEW.input_bytes, 1),
    ('group', COALESCE(json_extract(NEW.spec, '$.group'), 'default'),
     json_extract(NEW.spec, '$.inputs'), NEW.input_bytes, 1)
  ON CONFLICT (kind, name, manifest)
    DO UPDATE SET refs = refs + 1, bytes = MAX(bytes, excluded.bytes);
END;

CREATE TRIGGER storage_inputs_end AFTER UPDATE OF state ON jobs
WHEN COALESCE(json_extract(OLD.spec, '$.inputs'), '') <> ''
  AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled')
  AND NEW.state IN ('succeeded', 'failed', 'cancelled')
BEGIN
  UPDATE storage_refs SET refs = refs - 1
    WHERE kind = 'user' AND name = OLD.owner AND manifest = json_extract(OLD.spec, '$.inputs');
  UPDATE storage_refs SET refs = refs - 1
    WHERE kind = 'group' AND name = COALESCE(json_extract(OLD.spec, '$.group'), 'default')
      AND manifest = json_extract(OLD.spec, '$.inputs');
  DELETE FROM storage_refs
    WHERE kind = 'user' AND name = OLD.owner AND manifest = json_extract(OLD.spec, '$.inputs')
      AND refs <= 0;
  DELETE FROM storage_refs
    WHERE kind = 'group' AND name = COALESCE(json_extract(OLD.spec, '$.group'), 'default')
      AND manifest = json_extract(OLD.spec, '$.inputs') AND refs <= 0;
END;

-- Kept checkpoints count, also after their job ended.
CREATE TRIGGER storage_checkpoint_insert AFTER INSERT ON checkpoints
BEGIN
  INSERT INTO storage_refs (kind, name, manifest, bytes, refs)
    SELECT 'user', owner, NEW.manifest, NEW.bytes, 1 FROM jobs WHERE id = NEW.job_id
  ON CONFLICT (kind, name, manifest)
    DO UPDATE SET refs = refs + 1, bytes = MAX(bytes, excluded.bytes);
  INSERT INTO storage_refs (kind, name, manifest, bytes, refs)
    SELECT 'group', COALESCE(json_extract(spec, '$.group'), 'default'), NEW.manifest, NEW.bytes, 1
    FROM jobs WHERE id = NEW.job_id
  ON CONFLICT (kind, name, manifest)
    DO UPDATE SET refs = refs + 1, bytes = MAX(bytes, excluded.bytes);
END;

CREATE TRIGGER storage_checkpoint_delete AFTER DELETE ON checkpoints
BEGIN
  UPDATE storage_refs SET refs = refs - 1
    WHERE kind = 'user' AND manifest = OLD.manifest
      AND name = (SELECT owner FROM jobs WHERE id = OLD.job_id);
  UPDATE storage_refs SET refs = refs - 1
    WHERE kind = 'group' AND manifest = OLD.manifest
      AND name = (SELECT COALESCE(json_extract(spec, '$.group'), 'default') FROM jobs
                  WHERE id = OLD.job_id);
  DELETE FROM storage_refs
    WHERE kind = 'user' AND manifest = OLD.manifest AND refs <= 0
      AND name = (SELECT owner FROM jobs WHERE id = OLD.job_id);
  DELETE FROM storage_refs
    WHERE kind = 'group' AND manifest = OLD.manifest AND refs <= 0
      AND name = (SELECT COALESCE(json_extract(spec, '$.group'), 'default') FROM jobs
                  WHERE id = OLD.job_id);
END;
)sql";

// Version 7 (before version 8 above in history): logs in chunks
// (store/sqlite_logs.h); the v6 rows are packed into chunks by
// MigrateLogsToChunks, which then drops the logs table.

constexpr SchemaMigration kMigrations[] = {
    {1, kSchemaV1},
    {2, kSchemaV2},
    {3, kSchemaV3},
    {4, kSchemaV4},
    {5, kSchemaV5},
    {6, kSchemaV6},
    {7, kLogSchemaV7, MigrateLogsToChunks},
    {8, kSchemaV8},
};
static_assert(std::size(kMigrations) == SqliteStore::kSchemaVersion,
              "every schema version needs a migration");

// JSON text for a column. Invalid UTF-8 (possible in user-supplied env values
// or labels) is replaced rather than thrown on.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Parses a JSON column; a failure names the table, key and column.
Result<json> ParseColumn(const std::string& text, std::string_view where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Internal(std::string(where) + ": invalid JSON");
  return j;
}

std::string RowName(std::string_view table, std::string_view key) {
  return std::string(table) + " row " + std::string(key);
}

json GpusToJson(const std::vector<GpuInfo>& gpus) {
  json a = json::array();
  for (const GpuInfo& g : gpus) {
    a.push_back({{"index", g.index},
                 {"uuid", g.uuid},
                 {"name", g.name},
                 {"memory_mib", g.memory_mib},
                 {"cc_major", g.cc_major},
                 {"cc_minor", g.cc_minor},
                 {"simulated", g.simulated},
                 {"minor_number", g.minor_number}});
    if (g.IsMig()) {
      a.back()["parent_uuid"] = g.parent_uuid;
      a.back()["mig_profile"] = g.mig_profile;
      a.back()["mig_slices"] = g.mig_slices;
      a.back()["mig_gpu_instance"] = g.mig_gpu_instance;
      a.back()["mig_compute_instance"] = g.mig_compute_instance;
    }
  }
  return a;
}

// Throws json::exception on a wrong shape; the caller converts.
std::vector<GpuInfo> GpusFromJson(const json& a) {
  std::vector<GpuInfo> gpus;
  for (const json& g : a.get_ref<const json::array_t&>()) {
    GpuInfo info;
    info.index = g.at("index").get<int32_t>();
    info.uuid = g.at("uuid").get<std::string>();
    info.name = g.at("name").get<std::string>();
    info.memory_mib = g.at("memory_mib").get<int64_t>();
    info.cc_major = g.at("cc_major").get<int32_t>();
    info.cc_minor = g.at("cc_minor").get<int32_t>();
    info.simulated = g.at("simulated").get<bool>();
    info.minor_number = g.value("minor_number", int32_t{-1});  // absent in older rows
    // MIG instances only; absent for whole GPUs and in older rows.
    info.parent_uuid = g.value("parent_uuid", std::string());
    info.mig_profile = g.value("mig_profile", std::string());
    info.mig_slices = g.value("mig_slices", int32_t{0});
    info.mig_gpu_instance = g.value("mig_gpu_instance", int32_t{-1});
    info.mig_compute_instance = g.value("mig_compute_instance", int32_t{-1});
    gpus.push_back(std::move(info));
  }
  return gpus;
}

// Decodes a JSON column with `fn`, turning shape errors into Internal.
template <typename T, typename Fn>
Result<T> DecodeColumn(const std::string& text, const std::string& where, Fn fn) {
  GP_ASSIGN_OR_RETURN(json j, ParseColumn(text, where));
  try {
    return fn(j);
  } catch (const json::exception& e) {
    return Status::Internal(where + ": " + e.what());
  }
}

// Transparent hashing so the statement cache is probed without allocating.
struct SqlHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

// ---------------------------------------------------------------------------

struct SqliteStore::Impl : SqliteConn {
  DbPtr db;
  // Declared after db so statements are finalized before the connection closes.
  std::unordered_map<std::string, StmtPtr, SqlHash, std::equal_to<>> cache;
  bool in_tx = false;

  Result<Query> Prepare(std::string_view sql) override {
    auto it = cache.find(sql);
    if (it == cache.end()) {
      sqlite3_stmt* raw = nullptr;
      int rc = sqlite3_prepare_v3(db.get(), sql.data(), static_cast<int>(sql.size()),
                                  SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
      if (rc != SQLITE_OK) {
        sqlite3_finalize(raw);
        return SqliteError(db.get(), rc, "prepare " + std::string(sql));
      }
      it = cache.emplace(std::string(sql), StmtPtr(raw)).first;
    }
    return Query(db.get(), it->second.get());
  }

  sqlite3* handle() override { return db.get(); }

  Status Run(std::string_view sql) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare(sql));
    return q.Run();
  }

  // Rolls back if a transaction is still open (SQLite rolls back by itself on
  // some errors, e.g. SQLITE_FULL or an I/O error).
  Status RollbackIfActive() {
    if (sqlite3_get_autocommit(db.get()) != 0) return Status::Ok();
    return Run("ROLLBACK");
  }

  // Multi-statement SQL, unprepared (schema setup only).
  Status ExecScript(const char* sql, std::string_view what) {
    char* err = nullptr;
    int rc = sqlite3_exec(db.get(), sql, nullptr, nullptr, &err);
    if (rc == SQLITE_OK) return Status::Ok();
    std::string msg =
        "sqlite: " + std::string(what) + ": " + (err != nullptr ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    int primary = rc & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Status::Unavailable(msg);
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return Status::DataLoss(msg);
    return Status::Internal(msg);
  }

  Result<std::string> PragmaText(const char* sql) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare(sql));
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return Status::Internal(std::string("sqlite: ") + sql + ": no result");
    return q.Text(0);
  }

  // Brings the schema to the last version of `migrations`, all steps in one
  // transaction (see the header's contract).
  Status Migrate(std::span<const SchemaMigration> migrations, const std::string& path,
                 bool backup_first) {
    for (size_t i = 0; i < migrations.size(); ++i) {
      if (migrations[i].version != static_cast<int>(i) + 1) {
        return Status::Internal("schema migrations must be versions 1.." +
                                std::to_string(migrations.size()) + " in order");
      }
    }
    const int target = static_cast<int>(migrations.size());
    GP_ASSIGN_OR_RETURN(std::string v, PragmaText("PRAGMA user_version"));
    const int current = std::stoi(v);
    if (current > target) {
      return Status::FailedPrecondition("database schema version " + std::to_string(current) +
                                        " is newer than this binary supports (" +
                                        std::to_string(target) + "); upgrade gpupool");
    }
    if (current == target) return Status::Ok();
    if (backup_first && current > 0) {
      std::string aside = path + ".schema-v" + std::to_string(current) + ".bak";
      auto copied = BackupSqliteConnection(db.get(), aside);
      if (!copied.ok()) {
        return copied.status().WithContext("copying the database aside to " + aside +
                                           " before migrating it (nothing was migrated)");
      }
    }
    GP_RETURN_IF_ERROR(ExecScript("BEGIN IMMEDIATE", "migrating the schema"));
    Status st;
    for (const SchemaMigration& m : migrations) {
      if (m.version <= current) continue;
      std::string what = "migrating the schema to version " + std::to_string(m.version);
      st = ExecScript(m.sql, what);
      if (st.ok() && m.then != nullptr) st = m.then(*this).WithContext(what);
      if (!st.ok()) break;
    }
    if (st.ok()) {
      st = ExecScript(("PRAGMA user_version = " + std::to_string(target)).c_str(),
                      "migrating the schema");
    }
    if (st.ok()) st = ExecScript("COMMIT", "migrating the schema");
    if (!st.ok()) {
      (void)RollbackIfActive();
      return Status(st.code(), st.message() + " (the database is left at version " +
                                   std::to_string(current) + ", unchanged)");
    }
    return Status::Ok();
  }

  // PRAGMA quick_check; DataLoss listing what it found.
  Status QuickCheck(const std::string& path) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare("PRAGMA quick_check(10)"));
    std::string problems;
    while (true) {
      auto row = q.Step();
      // Damage bad enough stops the check itself (SQLITE_CORRUPT): the same
      // verdict.
      if (!row.ok() && row.status().code() == StatusCode::kDataLoss) {
        return Status::DataLoss(path +
                                " is damaged (PRAGMA quick_check): " + row.status().message());
      }
      if (!row.ok()) return row.status();
      if (!*row) break;
      std::string line = q.Text(0);
      if (line != "ok") problems += "\n  " + line;
    }
    if (problems.empty()) return Status::Ok();
    return Status::DataLoss(path + " is damaged (PRAGMA quick_check):" + problems);
  }
};

namespace {

constexpr std::string_view kJobColumns =
    "id, owner, state, reason, exit_code, attempts, current_attempt, created_ms, updated_ms, "
    "started_ms, finished_ms, spec, last_preempted_ms, front, restarts, input_bytes";

Result<Job> ReadJob(const Query& q) {
  Job job;
  job.id = q.Int(0);
  std::string row = RowName("jobs", std::to_string(job.id));
  job.owner = q.Text(1);
  auto state = ParseJobState(q.Text(2));
  if (!state.ok()) return Status::Internal(row + ": state: " + state.status().message());
  job.state = *state;
  job.reason = q.Text(3);
  job.exit_code = q.OptInt32(4);
  job.attempts = static_cast<int32_t>(q.Int(5));
  job.current_attempt = q.Text(6);
  job.created_ms = q.Int(7);
  job.updated_ms = q.Int(8);
  job.started_ms = q.Int(9);
  job.finished_ms = q.Int(10);
  std::string where = row + ": spec";
  GP_ASSIGN_OR_RETURN(json spec_json, ParseColumn(q.Text(11), where));
  Result<JobSpec> spec = [&]() -> Result<JobSpec> {
    try {
      // Stored jobs were accepted under their release's limits: load them
      // under the most generous, so a tightened limit never loses a job.
      return JobSpecFromJson(spec_json, kStoredLimits);
    } catch (const json::exception& e) {
      return Status::Internal(e.what());
    }
  }();
  if (!spec.ok()) return Status::Internal(where + ": " + spec.status().message());
  job.spec = std::move(spec).value();
  if (!q.IsNull(12)) job.last_preempted_ms = q.Int(12);
  job.front = q.Int(13) != 0;
  job.restarts = static_cast<int32_t>(q.Int(14));
  job.input_bytes = q.Int(15);
  return job;
}

constexpr std::string_view kAttemptColumns =
    "id, job_id, number, node_id, gpu_uuids, state, exit_code, reason, created_ms, started_ms, "
    "finished_ms, gpu_milli, gpu_memory_mib, preempt_ms, preempt_for_job, last_checkpoint_ms, "
    "gang";

// A gang attempt's ranks, rendezvous and teardown (the `gang` column); ""
// for every other attempt.
std::string GangColumn(const Attempt& a) {
  if (a.ranks.empty() && a.master_port == 0 && a.gang_stop_ms == 0) return "";
  json ranks = json::array();
  for (const AttemptRank& r : a.ranks) {
    json j = {{"rank", r.rank},           {"node_id", r.node_id},
              {"gpu_uuids", r.gpu_uuids}, {"state", AttemptStateName(r.state)},
              {"reason", r.reason},       {"finished_ms", r.finished_ms}};
    if (r.exit_code) j["exit_code"] = *r.exit_code;
    ranks.push_back(std::move(j));
  }
  return Dump(json{{"ranks", std::move(ranks)},
                   {"master_addr", a.master_addr},
                   {"master_port", a.master_port},
                   {"stop_ms", a.gang_stop_ms},
                   {"stop_rank", a.gang_stop_rank}});
}

Status ReadGangColumn(const std::string& text, const std::string& row, Attempt& a) {
  if (text.empty()) return Status::Ok();
  GP_ASSIGN_OR_RETURN(json j,
                      DecodeColumn<json>(text, row + ": gang", [](const json& v) { return v; }));
  try {
    for (const json& r : j.at("ranks")) {
      AttemptRank rank;
      rank.rank = r.at("rank").get<int32_t>();
      rank.node_id = r.at("node_id").get<std::string>();
      rank.gpu_uuids = r.at("gpu_uuids").get<std::vector<std::string>>();
      auto state = ParseAttemptState(r.at("state").get<std::string>());
      if (!state.ok()) return Status::Internal(row + ": gang: " + state.status().message());
      rank.state = *state;
      if (r.contains("exit_code")) rank.exit_code = r.at("exit_code").get<int32_t>();
      rank.reason = r.at("reason").get<std::string>();
      rank.finished_ms = r.at("finished_ms").get<int64_t>();
      a.ranks.push_back(std::move(rank));
    }
    a.master_addr = j.at("master_addr").get<std::string>();
    a.master_port = j.at("master_port").get<int32_t>();
    a.gang_stop_ms = j.at("stop_ms").get<int64_t>();
    a.gang_stop_rank = j.at("stop_rank").get<int32_t>();
  } catch (const json::exception& e) {
    return Status::Internal(row + ": gang: " + e.what());
  }
  return Status::Ok();
}

Result<Attempt> ReadAttempt(const Query& q) {
  Attempt a;
  a.id = q.Text(0);
  std::string row = RowName("attempts", a.id);
  a.job_id = q.Int(1);
  a.number = static_cast<int32_t>(q.Int(2));
  a.node_id = q.Text(3);
  GP_ASSIGN_OR_RETURN(a.gpu_uuids, DecodeColumn<std::vector<std::string>>(
                                       q.Text(4), row + ": gpu_uuids", [](const json& j) {
                                         return j.get<std::vector<std::string>>();
                                       }));
  auto state = ParseAttemptState(q.Text(5));
  if (!state.ok()) return Status::Internal(row + ": state: " + state.status().message());
  a.state = *state;
  a.exit_code = q.OptInt32(6);
  a.reason = q.Text(7);
  a.created_ms = q.Int(8);
  a.started_ms = q.Int(9);
  a.finished_ms = q.Int(10);
  a.gpu_milli = static_cast<int32_t>(q.Int(11));
  a.gpu_memory_mib = q.Int(12);
  a.preempt_ms = q.Int(13);
  a.preempt_for_job = q.Int(14);
  a.last_checkpoint_ms = q.Int(15);
  GP_RETURN_IF_ERROR(ReadGangColumn(q.Text(16), row, a));
  return a;
}

constexpr std::string_view kCheckpointColumns =
    "job_id, number, attempt_id, manifest, created_ms, bytes, files";

Result<Checkpoint> ReadCheckpoint(const Query& q) {
  Checkpoint c;
  c.job_id = q.Int(0);
  c.number = q.Int(1);
  c.attempt_id = q.Text(2);
  c.manifest = q.Text(3);
  c.created_ms = q.Int(4);
  c.bytes = q.Int(5);
  c.files = q.Int(6);
  return c;
}

constexpr std::string_view kNodeColumns =
    "id, name, state, gpus, cpu_milli, memory_mib, driver_version, cuda_version, agent_version, "
    "labels, registered_ms, last_seen_ms, owner_group, lending";

Result<Node> ReadNode(const Query& q) {
  Node n;
  n.id = q.Text(0);
  std::string row = RowName("nodes", n.id);
  n.name = q.Text(1);
  auto state = ParseNodeState(q.Text(2));
  if (!state.ok()) return Status::Internal(row + ": state: " + state.status().message());
  n.state = *state;
  GP_ASSIGN_OR_RETURN(n.gpus,
                      DecodeColumn<std::vector<GpuInfo>>(q.Text(3), row + ": gpus", GpusFromJson));
  n.cpu_milli = q.Int(4);
  n.memory_mib = q.Int(5);
  n.driver_version = q.Text(6);
  n.cuda_version = q.Text(7);
  n.agent_version = q.Text(8);
  using Labels = std::map<std::string, std::string>;
  GP_ASSIGN_OR_RETURN(n.labels,
                      DecodeColumn<Labels>(q.Text(9), row + ": labels",
                                           [](const json& j) { return j.get<Labels>(); }));
  n.registered_ms = q.Int(10);
  n.last_seen_ms = q.Int(11);
  n.owner_group = q.Text(12);
  if (std::string lending = q.Text(13); !lending.empty()) {
    GP_ASSIGN_OR_RETURN(json j, ParseColumn(lending, row + ": lending"));
    auto l = NodeLendingFromJson(j, "lending");
    if (!l.ok()) return Status::Internal(row + ": " + l.status().message());
    n.lending = *std::move(l);
  }
  return n;
}

Result<TokenRecord> ReadToken(const Query& q) {
  return TokenRecord{q.Text(0), q.Text(1),     q.Text(2), q.Int(3),
                     q.Int(4),  q.Int(5) != 0, q.Text(6), q.Text(7)};
}

Result<UserRecord> ReadUser(const Query& q) {
  return UserRecord{q.Text(0), q.Text(1), q.Text(2), q.Int(3) != 0, q.Int(4)};
}

Result<GroupRecord> ReadGroup(const Query& q) {
  GroupRecord g;
  g.name = q.Text(0);
  using Strings = std::vector<std::string>;
  auto strings = [](const json& j) { return j.get<Strings>(); };
  GP_ASSIGN_OR_RETURN(
      g.members,
      DecodeColumn<Strings>(q.Text(1), RowName("user_groups", g.name) + ": members", strings));
  g.shared_jobs = q.Int(2) != 0;
  g.created_ms = q.Int(3);
  return g;
}

Result<AuditEntry> ReadAudit(const Query& q) {
  return AuditEntry{q.Int(0),  q.Int(1),  q.Text(2), q.Text(3),
                    q.Text(4), q.Text(5), q.Text(6), q.Int(7) != 0};
}

Result<AgentCredential> ReadAgentCredential(const Query& q) {
  return AgentCredential{q.Text(0), q.Text(1), q.Text(2),     q.Text(3),
                         q.Text(4), q.Int(5),  q.Int(6) != 0, q.Int(7)};
}

Result<StorageHolderKind> ReadHolderKind(const std::string& text, std::string_view table) {
  auto kind = ParseStorageHolderKind(text);
  if (!kind.ok()) return Status::Internal(std::string(table) + ": " + kind.status().message());
  return *kind;
}

Result<StorageQuota> ReadStorageQuota(const Query& q) {
  StorageQuota out;
  GP_ASSIGN_OR_RETURN(out.holder.kind, ReadHolderKind(q.Text(0), "storage_quotas"));
  out.holder.name = q.Text(1);
  out.bytes = q.Int(2);
  out.set_ms = q.Int(3);
  return out;
}

Result<NodeEvent> ReadNodeEvent(const Query& q) {
  NodeEvent e;
  e.id = q.Int(0);
  std::string row = RowName("node_events", std::to_string(e.id));
  e.node_id = q.Text(1);
  e.ts_ms = q.Int(2);
  e.kind = q.Text(3);
  e.reason = q.Text(4);
  using Strings = std::vector<std::string>;
  auto strings = [](const json& j) { return j.get<Strings>(); };
  GP_ASSIGN_OR_RETURN(e.gpus, DecodeColumn<Strings>(q.Text(5), row + ": gpus", strings));
  GP_ASSIGN_OR_RETURN(e.attempts, DecodeColumn<Strings>(q.Text(6), row + ": attempts", strings));
  return e;
}

template <typename T>
using Reader = Result<T> (*)(const Query&);

// Steps `q` to the end, decoding every row.
template <typename T>
Result<std::vector<T>> ReadAll(Query& q, Reader<T> read) {
  std::vector<T> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    GP_ASSIGN_OR_RETURN(T item, read(q));
    out.push_back(std::move(item));
  }
  return out;
}

// Steps `q` once, decoding the row if there is one.
template <typename T>
Result<std::optional<T>> ReadOne(Query& q, Reader<T> read) {
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<T>();
  GP_ASSIGN_OR_RETURN(T item, read(q));
  return std::optional<T>(std::move(item));
}

class SqliteTx : public Tx {
 public:
  explicit SqliteTx(SqliteStore::Impl& impl) : impl_(impl), logs_(impl) {}

  // ---- jobs

  Result<int64_t> InsertJob(const Job& job) override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("INSERT INTO jobs (owner, name, state, reason, exit_code, "
                               "attempts, current_attempt, created_ms, updated_ms, "
                               "started_ms, finished_ms, spec, last_preempted_ms, front, "
                               "restarts, input_bytes) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?14, "
                               "?15, ?16, ?17)"));
    BindJob(q, job);
    GP_RETURN_IF_ERROR(q.Run());
    return static_cast<int64_t>(sqlite3_last_insert_rowid(impl_.db.get()));
  }

  Status UpdateJob(const Job& job) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("UPDATE jobs SET owner = ?1, name = ?2, state = ?3, "
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
    if (sqlite3_changes(impl_.db.get()) == 0) {
      return Status::NotFound("job " + std::to_string(job.id) + " does not exist");
    }
    return Status::Ok();
  }

  Result<std::optional<Job>> GetJob(int64_t id) override {
    static const std::string sql =
        "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id = ?1";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, id);
    return ReadOne<Job>(q, ReadJob);
  }

  Result<std::vector<Job>> ListJobs(const JobQuery& jq) override {
    if (jq.limit <= 0) return std::vector<Job>();
    // The SQL text varies only with the shape of the query (owner or not, the
    // number of states, the order), so the variants stay few and cached.
    int next = 2;
    std::string sql =
        "SELECT " + std::string(kJobColumns) + " FROM jobs WHERE id > ?1" + JobFilter(jq, next);
    sql += jq.newest_first ? " ORDER BY id DESC" : " ORDER BY id";
    sql += " LIMIT ?" + std::to_string(next);
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, jq.after_id);
    int i = BindJobFilter(q, jq, 2);
    q.Bind(i, static_cast<int64_t>(jq.limit));
    return ReadAll<Job>(q, ReadJob);
  }

  Result<int64_t> CountJobs(const JobQuery& jq) override {
    int next = 1;
    std::string sql = "SELECT count(*) FROM jobs WHERE 1" + JobFilter(jq, next);
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    BindJobFilter(q, jq, 1);
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    return row ? q.Int(0) : 0;
  }

  // ---- attempts

  Status PutAttempt(const Attempt& a) override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("INSERT INTO attempts (id, job_id, number, node_id, gpu_uuids, "
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
    if (!st.ok() && IsForeignKeyError(q.extended_error())) {
      return Status::NotFound("attempt " + a.id + ": job " + std::to_string(a.job_id) +
                              " does not exist");
    }
    GP_RETURN_IF_ERROR(st);
    // A gang's nodes never change after its placement: indexed once.
    if (a.ranks.empty()) return Status::Ok();
    for (const AttemptRank& r : a.ranks) {
      GP_ASSIGN_OR_RETURN(Query n, impl_.Prepare("INSERT INTO attempt_nodes (node_id, attempt_id) "
                                                 "VALUES (?1, ?2) ON CONFLICT DO NOTHING"));
      n.Bind(1, r.node_id).Bind(2, a.id);
      GP_RETURN_IF_ERROR(n.Run());
    }
    return Status::Ok();
  }

  Result<std::optional<Attempt>> GetAttempt(const std::string& id) override {
    static const std::string sql =
        "SELECT " + std::string(kAttemptColumns) + " FROM attempts WHERE id = ?1";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, id);
    return ReadOne<Attempt>(q, ReadAttempt);
  }

  Result<std::vector<Attempt>> ListAttempts(const AttemptQuery& aq) override {
    std::string sql = "SELECT " + std::string(kAttemptColumns) + " FROM attempts WHERE 1";
    int next = 1;
    if (aq.job_id) sql += " AND job_id = ?" + std::to_string(next++);
    if (aq.node_id) {
      std::string n = "?" + std::to_string(next++);
      sql += " AND (node_id = " + n + " OR id IN (SELECT attempt_id FROM attempt_nodes WHERE " +
             "node_id = " + n + "))";
    }
    if (aq.live_only) {
      sql += " AND state IN (?" + std::to_string(next) + ", ?" + std::to_string(next + 1) + ")";
    }
    sql += " ORDER BY job_id, number";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    int i = 1;
    if (aq.job_id) q.Bind(i++, *aq.job_id);
    if (aq.node_id) q.Bind(i++, *aq.node_id);
    if (aq.live_only) {
      q.Bind(i, AttemptStateName(AttemptState::kScheduled));
      q.Bind(i + 1, AttemptStateName(AttemptState::kRunning));
    }
    return ReadAll<Attempt>(q, ReadAttempt);
  }

  // ---- nodes

  Status PutNode(const Node& n) override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("INSERT INTO nodes (id, name, state, gpus, cpu_milli, memory_mib, "
                               "driver_version, cuda_version, agent_version, labels, "
                               "registered_ms, last_seen_ms, owner_group, lending) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                               "?14) "
                               "ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                               "state = excluded.state, gpus = excluded.gpus, "
                               "cpu_milli = excluded.cpu_milli, memory_mib = excluded.memory_mib, "
                               "driver_version = excluded.driver_version, "
                               "cuda_version = excluded.cuda_version, "
                               "agent_version = excluded.agent_version, labels = excluded.labels, "
                               "registered_ms = excluded.registered_ms, "
                               "last_seen_ms = excluded.last_seen_ms, "
                               "owner_group = excluded.owner_group, "
                               "lending = excluded.lending"));
    q.Bind(1, n.id)
        .Bind(2, n.name)
        .Bind(3, NodeStateName(n.state))
        .Bind(4, Dump(GpusToJson(n.gpus)))
        .Bind(5, n.cpu_milli)
        .Bind(6, n.memory_mib)
        .Bind(7, n.driver_version)
        .Bind(8, n.cuda_version)
        .Bind(9, n.agent_version)
        .Bind(10, Dump(json(n.labels)))
        .Bind(11, n.registered_ms)
        .Bind(12, n.last_seen_ms)
        .Bind(13, n.owner_group)
        .Bind(14, n.lending ? Dump(NodeLendingToJson(*n.lending)) : std::string());
    Status st = q.Run();
    // The id conflict is resolved by the upsert, so a unique violation can
    // only be the name.
    if (!st.ok() && q.extended_error() == SQLITE_CONSTRAINT_UNIQUE) {
      return Status::AlreadyExists("node name \"" + n.name + "\" is already used by another node");
    }
    return st;
  }

  Result<std::optional<Node>> GetNode(const std::string& id) override {
    static const std::string sql =
        "SELECT " + std::string(kNodeColumns) + " FROM nodes WHERE id = ?1";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, id);
    return ReadOne<Node>(q, ReadNode);
  }

  Result<std::optional<Node>> GetNodeByName(const std::string& name) override {
    static const std::string sql =
        "SELECT " + std::string(kNodeColumns) + " FROM nodes WHERE name = ?1";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, name);
    return ReadOne<Node>(q, ReadNode);
  }

  Result<std::vector<Node>> ListNodes() override {
    static const std::string sql =
        "SELECT " + std::string(kNodeColumns) + " FROM nodes ORDER BY name";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    return ReadAll<Node>(q, ReadNode);
  }

  // ---- node events

  Result<int64_t> AppendNodeEvent(const NodeEvent& e) override {
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("INSERT INTO node_events (node_id, ts_ms, kind, reason, "
                                      "gpus, attempts) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
    q.Bind(1, e.node_id).Bind(2, e.ts_ms).Bind(3, e.kind).Bind(4, e.reason);
    q.Bind(5, Dump(json(e.gpus))).Bind(6, Dump(json(e.attempts)));
    GP_RETURN_IF_ERROR(q.Run());
    return static_cast<int64_t>(sqlite3_last_insert_rowid(impl_.db.get()));
  }

  Result<std::vector<NodeEvent>> ListNodeEvents(const std::string& node_id, int64_t after_id,
                                                int32_t limit) override {
    if (limit <= 0) return std::vector<NodeEvent>();
    // ?1 = '' lists every node's events.
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("SELECT id, node_id, ts_ms, kind, reason, gpus, attempts "
                               "FROM node_events WHERE (?1 = '' OR node_id = ?1) AND id > ?2 "
                               "ORDER BY id LIMIT ?3"));
    q.Bind(1, node_id).Bind(2, after_id).Bind(3, static_cast<int64_t>(limit));
    return ReadAll<NodeEvent>(q, ReadNodeEvent);
  }

  // ---- logs (store/sqlite_logs.h)

  Status AppendLogs(int64_t job_id, const std::vector<LogLine>& lines) override {
    return logs_.Append(job_id, lines);
  }
  Result<std::vector<LogLine>> ReadLogs(int64_t job_id, int64_t after_cursor,
                                        int32_t limit) override {
    return logs_.Read(job_id, after_cursor, limit);
  }
  Result<int64_t> LastLogOffset(const std::string& attempt_id, int32_t rank) override {
    return logs_.LastOffset(attempt_id, rank);
  }
  Result<std::optional<LogStream>> GetLogStream(const std::string& attempt_id,
                                                int32_t rank) override {
    return logs_.GetStream(attempt_id, rank);
  }
  Result<std::vector<LogStream>> ListLogStreams(int64_t job_id) override {
    return logs_.ListStreams(job_id);
  }
  Status SkipLogs(const LogSkip& skip) override { return logs_.Skip(skip); }
  Result<LogTotals> GetLogTotals() override { return logs_.Totals(); }
  Result<std::vector<JobLogSize>> ListEndedJobLogs(int32_t limit) override {
    return logs_.ListEnded(limit);
  }
  Status RemoveJobLogs(int64_t job_id, int64_t now_ms, const std::string& reason) override {
    return logs_.Remove(job_id, now_ms, reason);
  }
  Result<std::optional<LogRemoval>> GetLogRemoval(int64_t job_id) override {
    return logs_.GetRemoval(job_id);
  }
  Result<int64_t> DeleteRemovedLogChunks(int64_t max_chunks) override {
    return logs_.DeleteRemovedChunks(max_chunks);
  }

  // ---- outbox

  Result<int64_t> PushOutbox(const std::string& node_id, const std::string& type,
                             const std::string& body) override {
    int64_t seq = 0;
    {
      GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT INTO outbox_seq (node_id, last_seq) "
                                                 "VALUES (?1, 1) ON CONFLICT (node_id) DO UPDATE "
                                                 "SET last_seq = last_seq + 1 RETURNING last_seq"));
      q.Bind(1, node_id);
      GP_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return Status::Internal("sqlite: outbox_seq: no seq returned");
      seq = q.Int(0);
      // Finish the statement so its effect is complete before the next one.
      GP_ASSIGN_OR_RETURN(bool more, q.Step());
      (void)more;
    }
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT INTO outbox (node_id, seq, type, body) "
                                               "VALUES (?1, ?2, ?3, ?4)"));
    q.Bind(1, node_id).Bind(2, seq).Bind(3, type).Bind(4, body);
    GP_RETURN_IF_ERROR(q.Run());
    return seq;
  }

  Result<std::vector<OutboxMessage>> ListOutbox(const std::string& node_id,
                                                int64_t after_seq) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT seq, type, body FROM outbox WHERE "
                                               "node_id = ?1 AND seq > ?2 ORDER BY seq"));
    q.Bind(1, node_id).Bind(2, after_seq);
    std::vector<OutboxMessage> out;
    while (true) {
      GP_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back(OutboxMessage{node_id, q.Int(0), q.Text(1), q.Text(2)});
    }
    return out;
  }

  Status AckOutbox(const std::string& node_id, int64_t upto_seq) override {
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("DELETE FROM outbox WHERE node_id = ?1 AND seq <= ?2"));
    q.Bind(1, node_id).Bind(2, upto_seq);
    return q.Run();
  }

  // ---- meta

  Result<std::optional<std::string>> GetMeta(const std::string& key) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT value FROM meta WHERE key = ?1"));
    q.Bind(1, key);
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(q.Text(0));
  }

  Status PutMeta(const std::string& key, const std::string& value) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT INTO meta (key, value) VALUES (?1, ?2) "
                                               "ON CONFLICT (key) DO UPDATE SET value = "
                                               "excluded.value"));
    q.Bind(1, key).Bind(2, value);
    return q.Run();
  }

  // ---- group usage

  Status PutGroupUsage(const GroupUsage& u) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT INTO group_usage (grp, milli_ms, as_of_ms) "
                                               "VALUES (?1, ?2, ?3) ON CONFLICT (grp) DO UPDATE "
                                               "SET milli_ms = excluded.milli_ms, "
                                               "as_of_ms = excluded.as_of_ms"));
    q.Bind(1, u.group).Bind(2, u.milli_ms).Bind(3, u.as_of_ms);
    return q.Run();
  }

  Result<std::optional<GroupUsage>> GetGroupUsage(const std::string& group) override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("SELECT grp, milli_ms, as_of_ms FROM group_usage WHERE grp = ?1"));
    q.Bind(1, group);
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<GroupUsage>();
    return std::optional<GroupUsage>(GroupUsage{q.Text(0), q.Int(1), q.Int(2)});
  }

  Result<std::vector<GroupUsage>> ListGroupUsage() override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("SELECT grp, milli_ms, as_of_ms FROM group_usage ORDER BY grp"));
    std::vector<GroupUsage> out;
    while (true) {
      GP_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back(GroupUsage{q.Text(0), q.Int(1), q.Int(2)});
    }
    return out;
  }

  // ---- tokens

  static constexpr const char* kTokenColumns =
      "hash, subject, role, created_ms, expires_ms, revoked, name, scopes";

  Status PutToken(const TokenRecord& t) override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("INSERT OR REPLACE INTO tokens (" + std::string(kTokenColumns) +
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    q.Bind(1, t.hash).Bind(2, t.subject).Bind(3, t.role).Bind(4, t.created_ms);
    q.Bind(5, t.expires_ms).Bind(6, int64_t{t.revoked ? 1 : 0}).Bind(7, t.name).Bind(8, t.scopes);
    return q.Run();
  }

  Result<std::optional<TokenRecord>> GetToken(const std::string& hash) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kTokenColumns) +
                                               " FROM tokens WHERE hash = ?1"));
    q.Bind(1, hash);
    return ReadOne<TokenRecord>(q, ReadToken);
  }

  Result<std::vector<TokenRecord>> ListTokens(const std::string& subject) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kTokenColumns) +
                                               " FROM tokens WHERE (?1 = '' OR subject = ?1) "
                                               "ORDER BY created_ms, hash"));
    q.Bind(1, subject);
    return ReadAll<TokenRecord>(q, ReadToken);
  }

  // ---- users and groups

  static constexpr const char* kUserColumns = "name, role, password_hash, disabled, created_ms";
  static constexpr const char* kGroupColumns = "name, members, shared_jobs, created_ms";

  Status PutUser(const UserRecord& u) override {
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("INSERT OR REPLACE INTO users (" + std::string(kUserColumns) +
                                      ") VALUES (?1, ?2, ?3, ?4, ?5)"));
    q.Bind(1, u.name).Bind(2, u.role).Bind(3, u.password_hash);
    q.Bind(4, int64_t{u.disabled ? 1 : 0}).Bind(5, u.created_ms);
    return q.Run();
  }

  Result<std::optional<UserRecord>> GetUser(const std::string& name) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kUserColumns) +
                                               " FROM users WHERE name = ?1"));
    q.Bind(1, name);
    return ReadOne<UserRecord>(q, ReadUser);
  }

  Result<std::vector<UserRecord>> ListUsers() override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kUserColumns) +
                                               " FROM users ORDER BY name"));
    return ReadAll<UserRecord>(q, ReadUser);
  }

  Status PutGroup(const GroupRecord& g) override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("INSERT OR REPLACE INTO user_groups (" + std::string(kGroupColumns) +
                               ") VALUES (?1, ?2, ?3, ?4)"));
    q.Bind(1, g.name).Bind(2, Dump(json(g.members))).Bind(3, int64_t{g.shared_jobs ? 1 : 0});
    q.Bind(4, g.created_ms);
    return q.Run();
  }

  Result<std::optional<GroupRecord>> GetGroup(const std::string& name) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kGroupColumns) +
                                               " FROM user_groups WHERE name = ?1"));
    q.Bind(1, name);
    return ReadOne<GroupRecord>(q, ReadGroup);
  }

  Result<std::vector<GroupRecord>> ListGroups() override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kGroupColumns) +
                                               " FROM user_groups ORDER BY name"));
    return ReadAll<GroupRecord>(q, ReadGroup);
  }

  // ---- audit

  Result<int64_t> AppendAudit(const AuditEntry& e) override {
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("INSERT INTO audit (ts_ms, actor, action, target, detail, "
                                      "peer, ok) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    q.Bind(1, e.ts_ms).Bind(2, e.actor).Bind(3, e.action).Bind(4, e.target).Bind(5, e.detail);
    q.Bind(6, e.peer).Bind(7, int64_t{e.ok ? 1 : 0});
    GP_RETURN_IF_ERROR(q.Run());
    return static_cast<int64_t>(sqlite3_last_insert_rowid(impl_.db.get()));
  }

  Result<std::vector<AuditEntry>> ListAudit(int64_t after_id, int32_t limit) override {
    if (limit <= 0) return std::vector<AuditEntry>();
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("SELECT id, ts_ms, actor, action, target, detail, peer, ok "
                                      "FROM audit WHERE id > ?1 ORDER BY id LIMIT ?2"));
    q.Bind(1, after_id).Bind(2, static_cast<int64_t>(limit));
    return ReadAll<AuditEntry>(q, ReadAudit);
  }

  // ---- agent credentials

  static constexpr const char* kCredentialColumns =
      "node_name, token_hash, cert_serial, cert_fingerprint, owner, enrolled_ms, revoked, "
      "revoked_ms";

  Status PutAgentCredential(const AgentCredential& c) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT OR REPLACE INTO agent_credentials (" +
                                               std::string(kCredentialColumns) +
                                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    q.Bind(1, c.node_name).Bind(2, c.token_hash).Bind(3, c.cert_serial).Bind(4, c.cert_fingerprint);
    q.Bind(5, c.owner).Bind(6, c.enrolled_ms).Bind(7, int64_t{c.revoked ? 1 : 0});
    q.Bind(8, c.revoked_ms);
    return q.Run();
  }

  Result<std::optional<AgentCredential>> GetAgentCredential(const std::string& node) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kCredentialColumns) +
                                               " FROM agent_credentials WHERE node_name = ?1"));
    q.Bind(1, node);
    return ReadOne<AgentCredential>(q, ReadAgentCredential);
  }

  Result<std::vector<AgentCredential>> ListAgentCredentials() override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT " + std::string(kCredentialColumns) +
                                               " FROM agent_credentials ORDER BY node_name"));
    return ReadAll<AgentCredential>(q, ReadAgentCredential);
  }

  // ---- checkpoints

  Result<Checkpoint> AddCheckpoint(const Checkpoint& c) override {
    GP_ASSIGN_OR_RETURN(auto job, GetJob(c.job_id));
    if (!job) return Status::NotFound("job " + std::to_string(c.job_id) + " does not exist");
    Checkpoint out = c;
    GP_ASSIGN_OR_RETURN(out.number, NextCheckpointNumber(c.job_id));
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT INTO checkpoints (job_id, number, "
                                               "attempt_id, manifest, created_ms, bytes, files) "
                                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    q.Bind(1, out.job_id).Bind(2, out.number).Bind(3, out.attempt_id).Bind(4, out.manifest);
    q.Bind(5, out.created_ms).Bind(6, out.bytes).Bind(7, out.files);
    GP_RETURN_IF_ERROR(q.Run());
    return out;
  }

  Result<std::vector<Checkpoint>> ListCheckpoints(int64_t job_id) override {
    static const std::string sql = "SELECT " + std::string(kCheckpointColumns) +
                                   " FROM checkpoints WHERE job_id = ?1 ORDER BY number";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, job_id);
    return ReadAll<Checkpoint>(q, ReadCheckpoint);
  }

  Result<std::optional<Checkpoint>> GetCheckpoint(int64_t job_id, int64_t number) override {
    static const std::string sql = "SELECT " + std::string(kCheckpointColumns) +
                                   " FROM checkpoints WHERE job_id = ?1 AND number = ?2";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, job_id).Bind(2, number);
    return ReadOne<Checkpoint>(q, ReadCheckpoint);
  }

  Result<std::optional<Checkpoint>> LatestCheckpoint(int64_t job_id) override {
    static const std::string sql =
        "SELECT " + std::string(kCheckpointColumns) +
        " FROM checkpoints WHERE job_id = ?1 ORDER BY number DESC LIMIT 1";
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare(sql));
    q.Bind(1, job_id);
    return ReadOne<Checkpoint>(q, ReadCheckpoint);
  }

  Status DeleteCheckpoint(int64_t job_id, int64_t number) override {
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("DELETE FROM checkpoints WHERE job_id = ?1 AND number = ?2"));
    q.Bind(1, job_id).Bind(2, number);
    return q.Run();
  }

  Result<std::vector<std::string>> ListCheckpointManifests() override {
    GP_ASSIGN_OR_RETURN(
        Query q, impl_.Prepare("SELECT DISTINCT manifest FROM checkpoints ORDER BY manifest"));
    return ReadStrings(q);
  }

  Result<std::vector<std::string>> ListActiveJobInputs() override {
    // Non-terminal states are few and small; the inputs live in the spec.
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("SELECT DISTINCT json_extract(spec, '$.inputs') AS inputs "
                                      "FROM jobs WHERE state IN (?1, ?2, ?3) "
                                      "AND inputs IS NOT NULL AND inputs <> '' ORDER BY inputs"));
    q.Bind(1, JobStateName(JobState::kPending));
    q.Bind(2, JobStateName(JobState::kScheduled));
    q.Bind(3, JobStateName(JobState::kRunning));
    return ReadStrings(q);
  }

  // ---- storage accounting and quotas

  Result<StorageUsage> StorageUsed(const StorageHolder& h) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT coalesce(sum(bytes), 0), count(*) FROM "
                                               "storage_refs WHERE kind = ?1 AND name = ?2"));
    q.Bind(1, StorageHolderKindName(h.kind)).Bind(2, h.name);
    StorageUsage u;
    u.holder = h;
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) {
      u.bytes = q.Int(0);
      u.manifests = q.Int(1);
    }
    return u;
  }

  Result<std::vector<StorageUsage>> ListStorageUsage() override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT kind, name, sum(bytes), count(*) FROM "
                                               "storage_refs GROUP BY kind, name "
                                               "ORDER BY kind DESC, name"));
    std::vector<StorageUsage> out;
    while (true) {
      GP_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      StorageUsage u;
      GP_ASSIGN_OR_RETURN(u.holder.kind, ReadHolderKind(q.Text(0), "storage_refs"));
      u.holder.name = q.Text(1);
      u.bytes = q.Int(2);
      u.manifests = q.Int(3);
      out.push_back(std::move(u));
    }
    return out;
  }

  Status PutStorageQuota(const StorageQuota& quota) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT OR REPLACE INTO storage_quotas (kind, "
                                               "name, bytes, set_ms) VALUES (?1, ?2, ?3, ?4)"));
    q.Bind(1, StorageHolderKindName(quota.holder.kind)).Bind(2, quota.holder.name);
    q.Bind(3, quota.bytes).Bind(4, quota.set_ms);
    return q.Run();
  }

  Status DeleteStorageQuota(const StorageHolder& h) override {
    GP_ASSIGN_OR_RETURN(Query q,
                        impl_.Prepare("DELETE FROM storage_quotas WHERE kind = ?1 AND name = ?2"));
    q.Bind(1, StorageHolderKindName(h.kind)).Bind(2, h.name);
    return q.Run();
  }

  Result<std::optional<StorageQuota>> GetStorageQuota(const StorageHolder& h) override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT kind, name, bytes, set_ms FROM "
                                               "storage_quotas WHERE kind = ?1 AND name = ?2"));
    q.Bind(1, StorageHolderKindName(h.kind)).Bind(2, h.name);
    return ReadOne<StorageQuota>(q, ReadStorageQuota);
  }

  Result<std::vector<StorageQuota>> ListStorageQuotas() override {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("SELECT kind, name, bytes, set_ms FROM "
                                               "storage_quotas ORDER BY kind DESC, name"));
    return ReadAll<StorageQuota>(q, ReadStorageQuota);
  }

 private:
  Result<int64_t> NextCheckpointNumber(int64_t job_id) {
    GP_ASSIGN_OR_RETURN(Query q, impl_.Prepare("INSERT INTO checkpoint_seq (job_id, last_number) "
                                               "VALUES (?1, 1) ON CONFLICT (job_id) DO UPDATE "
                                               "SET last_number = last_number + 1 "
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

  static Result<std::vector<std::string>> ReadStrings(Query& q) {
    std::vector<std::string> out;
    while (true) {
      GP_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back(q.Text(0));
    }
    return out;
  }

  // Binds parameters 1..12, 14 and 15 of the INSERT and UPDATE statements
  // (13 is the id in UPDATE).
  // The WHERE conditions of a JobQuery (owner, groups, states) after a
  // first condition, numbering parameters from `next` (advanced past them).
  static std::string JobFilter(const JobQuery& jq, int& next) {
    std::string sql;
    if (jq.owner) {
      sql += " AND (owner = ?" + std::to_string(next++);
      for (size_t i = 0; i < jq.or_groups.size(); ++i) {
        sql +=
            (i == 0 ? " OR json_extract(spec, '$.group') IN (?" : ", ?") + std::to_string(next++);
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
  static int BindJobFilter(Query& q, const JobQuery& jq, int i) {
    if (jq.owner) {
      q.Bind(i++, *jq.owner);
      for (const std::string& g : jq.or_groups) q.Bind(i++, g);
    }
    for (JobState s : jq.states) q.Bind(i++, JobStateName(s));
    return i;
  }

  static void BindJob(Query& q, const Job& job) {
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

  SqliteStore::Impl& impl_;
  SqliteLogs logs_;
};

}  // namespace

// ---------------------------------------------------------------------------

std::span<const SchemaMigration> SqliteStore::Migrations() { return kMigrations; }

SqliteStore::SqliteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteStore::~SqliteStore() = default;

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                       const SqliteOptions& options) {
  const bool in_memory = path == ":memory:";
  if (!in_memory) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) {
        return Status::Unavailable("cannot create directory " + parent.string() + ": " +
                                   ec.message());
      }
    }
  }

  auto impl = std::make_unique<Impl>();
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  impl->db.reset(raw);  // closed on every path, even when the open failed
  if (rc != SQLITE_OK) return SqliteError(raw, rc, "open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);

  std::string what = "configuring " + path;
  if (options.check_integrity) GP_RETURN_IF_ERROR(impl->QuickCheck(path));
  if (!in_memory) {
    GP_ASSIGN_OR_RETURN(std::string mode, impl->PragmaText("PRAGMA journal_mode = WAL"));
    if (mode != "wal") {
      return Status::Internal("sqlite: " + path + ": cannot enable WAL mode (journal_mode is " +
                              mode + ")");
    }
  }
  GP_RETURN_IF_ERROR(impl->ExecScript(
      options.fsync_every_commit ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
      what));
  GP_RETURN_IF_ERROR(impl->ExecScript("PRAGMA foreign_keys = ON", what));
  GP_RETURN_IF_ERROR(impl->ExecScript("PRAGMA temp_store = MEMORY", what));
  // Truncate the WAL back to 64 MiB after a checkpoint following a burst.
  GP_RETURN_IF_ERROR(impl->ExecScript("PRAGMA journal_size_limit = 67108864", what));
  GP_RETURN_IF_ERROR(impl->Migrate(options.migrations.empty() ? Migrations() : options.migrations,
                                   path, options.backup_before_migrating && !in_memory)
                         .WithContext(path));
  return std::unique_ptr<SqliteStore>(new SqliteStore(std::move(impl)));
}

Status SqliteStore::Transact(const std::function<Status(Tx&)>& fn) {
  if (impl_->in_tx) {
    return Status::FailedPrecondition(
        "Store::Transact called inside another transaction (nested transactions are not "
        "supported)");
  }
  GP_RETURN_IF_ERROR(impl_->Run("BEGIN IMMEDIATE"));
  impl_->in_tx = true;
  SqliteTx tx(*impl_);
  Status st;
  try {
    st = fn(tx);
  } catch (...) {
    impl_->in_tx = false;
    (void)impl_->RollbackIfActive();
    throw;
  }
  impl_->in_tx = false;
  if (!st.ok()) {
    Status rb = impl_->RollbackIfActive();
    if (!rb.ok()) {
      return Status::Internal("rollback failed (" + rb.message() + ") after: " + st.ToString());
    }
    return st;
  }
  Status commit = impl_->Run("COMMIT");
  if (!commit.ok()) {
    (void)impl_->RollbackIfActive();
    return commit.WithContext("commit");
  }
  return Status::Ok();
}

}  // namespace gpupool
