// The SQLite store's schema: every migration, version 1 to
// SqliteStore::kSchemaVersion (store/sqlite_store.h says how they run).
#include <iterator>
#include <span>

#include "store/sql_logs.h"
#include "store/sqlite_store.h"

namespace gpupool {
namespace {

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

// Version 9: an attempt that is being stopped says so in its state
// (model/job.h) instead of through its timestamps: a live attempt ordered
// to stop to make room for a job (preempt_ms > 0, preempt_for_job > 0)
// becomes 'preempting'; one the server stops to end its job
// (preempt_for_job was -1) becomes 'stopping'; a gang whose ranks are being
// stopped (its gang JSON's stop_ms > 0) becomes 'gang-stopping', unless it
// was also preempting, which took precedence. The -1 sentinel goes:
// preempt_for_job is a job id or 0. The live-attempt index (attempts_state)
// covers the new names as it did the old.
constexpr const char* kSchemaV9 = R"sql(
UPDATE attempts SET state = 'stopping'
  WHERE state IN ('scheduled', 'running') AND preempt_ms > 0 AND preempt_for_job = -1;
UPDATE attempts SET state = 'preempting'
  WHERE state IN ('scheduled', 'running') AND preempt_ms > 0;
UPDATE attempts SET state = 'gang-stopping'
  WHERE state IN ('scheduled', 'running') AND gang <> ''
    AND COALESCE(json_extract(gang, '$.stop_ms'), 0) > 0;
UPDATE attempts SET preempt_for_job = 0 WHERE preempt_for_job = -1;
)sql";

// Version 10: money (store/store.h AccountingTx). Price versions are only
// added; the ledger is append-only, one row per double-entry entry, unique
// by key (posting is idempotent); balances are kept with each posting.
// ledger_span finds where an attempt's charges end; ledger_charges_from
// serves usage reports by time; ledger_job a job's spend (max_cost).
// Budgets per account.
constexpr const char* kSchemaV10 = R"sql(
CREATE TABLE prices (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  resource   TEXT NOT NULL,
  gpu_class  TEXT NOT NULL,
  per_unit   INTEGER NOT NULL,
  from_ms    INTEGER NOT NULL,
  set_by     TEXT NOT NULL
);
CREATE TABLE ledger (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  key            TEXT NOT NULL UNIQUE,
  kind           TEXT NOT NULL,
  debit          TEXT NOT NULL,
  credit         TEXT NOT NULL,
  amount         INTEGER NOT NULL,
  at_ms          INTEGER NOT NULL,
  attempt_id     TEXT NOT NULL,
  rank           INTEGER NOT NULL,
  job_id         INTEGER NOT NULL,
  user           TEXT NOT NULL,
  grp            TEXT NOT NULL,
  node_id        TEXT NOT NULL,
  provider_group TEXT NOT NULL,
  gpu_class      TEXT NOT NULL,
  from_ms        INTEGER NOT NULL,
  gpu_milli      INTEGER NOT NULL,
  cpu_milli      INTEGER NOT NULL,
  memory_mib     INTEGER NOT NULL,
  actor          TEXT NOT NULL,
  note           TEXT NOT NULL
);
CREATE INDEX ledger_span ON ledger(attempt_id, rank, at_ms) WHERE kind = 'charge';
CREATE INDEX ledger_debit ON ledger(debit, id);
CREATE INDEX ledger_credit ON ledger(credit, id);
CREATE INDEX ledger_charges_from ON ledger(from_ms) WHERE kind = 'charge';
CREATE INDEX ledger_job ON ledger(job_id) WHERE kind = 'charge';
CREATE TABLE balances (
  account TEXT PRIMARY KEY,
  balance INTEGER NOT NULL,
  entries INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE budgets (
  account TEXT PRIMARY KEY,
  monthly INTEGER NOT NULL,
  action  TEXT NOT NULL,
  set_ms  INTEGER NOT NULL,
  set_by  TEXT NOT NULL
) WITHOUT ROWID;
)sql";

// Version 11: usage rollups, as slurmdbd keeps its daily and monthly usage
// tables: each charge is also added, in the transaction that posts it, to
// four sums per UTC day and month, one by who used (user, group, account,
// GPU class; node_id '') and one by where (node, GPU class; user, group
// and account ''). Reports over whole days or months read these instead
// of the ledger (store/sql_tx_accounting.cpp). Filled from the ledger.
constexpr const char* kSchemaV11 = R"sql(
CREATE TABLE usage_rollup (
  grain        TEXT NOT NULL,
  start_ms     INTEGER NOT NULL,
  user         TEXT NOT NULL,
  grp          TEXT NOT NULL,
  debit        TEXT NOT NULL,
  node_id      TEXT NOT NULL,
  gpu_class    TEXT NOT NULL,
  gpu_milli_ms INTEGER NOT NULL,
  cpu_milli_ms INTEGER NOT NULL,
  cost         INTEGER NOT NULL,
  charges      INTEGER NOT NULL,
  PRIMARY KEY (grain, start_ms, user, grp, debit, node_id, gpu_class)
) WITHOUT ROWID;
INSERT INTO usage_rollup
  SELECT 'who-day', from_ms - from_ms % 86400000, user, grp, debit, '', gpu_class,
         sum(gpu_milli * (at_ms - from_ms)), sum(cpu_milli * (at_ms - from_ms)),
         sum(amount), count(*)
    FROM ledger WHERE kind = 'charge' GROUP BY 2, 3, 4, 5, 7;
INSERT INTO usage_rollup
  SELECT 'node-day', from_ms - from_ms % 86400000, '', '', '', node_id, gpu_class,
         sum(gpu_milli * (at_ms - from_ms)), sum(cpu_milli * (at_ms - from_ms)),
         sum(amount), count(*)
    FROM ledger WHERE kind = 'charge' GROUP BY 2, 6, 7;
INSERT INTO usage_rollup
  SELECT 'who-month', CAST(strftime('%s', start_ms / 1000, 'unixepoch', 'start of month')
                           AS INTEGER) * 1000,
         user, grp, debit, node_id, gpu_class, sum(gpu_milli_ms), sum(cpu_milli_ms),
         sum(cost), sum(charges)
    FROM usage_rollup WHERE grain = 'who-day' GROUP BY 2, 3, 4, 5, 6, 7;
INSERT INTO usage_rollup
  SELECT 'node-month', CAST(strftime('%s', start_ms / 1000, 'unixepoch', 'start of month')
                            AS INTEGER) * 1000,
         user, grp, debit, node_id, gpu_class, sum(gpu_milli_ms), sum(cpu_milli_ms),
         sum(cost), sum(charges)
    FROM usage_rollup WHERE grain = 'node-day' GROUP BY 2, 3, 4, 5, 6, 7;
)sql";

// Version 12: submission keys (POST /v1/jobs's Idempotency-Key): the job
// each (user, key) was first used for.
constexpr const char* kSchemaV12 = R"sql(
CREATE TABLE submit_keys (
  owner      TEXT NOT NULL,
  submit_key TEXT NOT NULL,
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  PRIMARY KEY (owner, submit_key)
) WITHOUT ROWID;
)sql";

// Version 7 (before version 8 above in history): logs in chunks
// (store/sql_logs.h); the v6 rows are packed into chunks by
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
    {9, kSchemaV9},
    {10, kSchemaV10},
    {11, kSchemaV11},
    {12, kSchemaV12},
};
static_assert(std::size(kMigrations) == SqliteStore::kSchemaVersion,
              "every schema version needs a migration");

}  // namespace

std::span<const SchemaMigration> SqliteStore::Migrations() { return kMigrations; }

}  // namespace gpupool
