#include "store/sqlite_store.h"
#include "store/sqlite_testing.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>

#include "store/store_conformance.h"

namespace gpupool {

StoreBackend SqliteBackend() {
  return {"sqlite", [](const std::string& dir) -> Result<std::unique_ptr<Store>> {
            auto s = SqliteStore::Open(dir + "/state.db");
            if (!s.ok()) return s.status();
            return std::unique_ptr<Store>(std::move(s).value());
          }};
}
GPUPOOL_STORE_CONFORMANCE_SUITE(Sqlite, SqliteBackend());

namespace {

using sqlite_testing::MustOpen;
using sqlite_testing::RawDb;
using sqlite_testing::TempDir;

Job SimpleJob(const std::string& name) {
  Job j;
  j.owner = "alice";
  j.spec.name = name;
  j.spec.run = "true";
  j.created_ms = 1;
  j.updated_ms = 1;
  return j;
}

JobQuery AllJobs() {
  JobQuery q;
  q.limit = 1'000'000;
  return q;
}

JobQuery PendingJobs(int32_t limit) {
  JobQuery q;
  q.states = {JobState::kPending};
  q.limit = limit;
  return q;
}

Result<int64_t> InsertJob(Store& store, const Job& job) {
  int64_t id = 0;
  Status st = store.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(id, tx.InsertJob(job));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return id;
}

TEST(SqliteStoreTest, ConformanceSuiteIsLinked) {
  // A static library's tests vanish silently if nothing pulls them in.
  const auto* unit = ::testing::UnitTest::GetInstance();
  int conformance = 0;
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    if (std::string(unit->GetTestSuite(i)->name()) == "Sqlite/StoreConformanceTest") {
      conformance = unit->GetTestSuite(i)->total_test_count();
    }
  }
  EXPECT_GE(conformance, 15);
}

TEST(SqliteStoreTest, CreatesParentDirectoriesWalModeAndSchemaVersion) {
  TempDir dir;
  std::string path = dir.path() + "/a/b/state.db";
  auto store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(InsertJob(*store, SimpleJob("x")).ok());
  RawDb raw(path);
  EXPECT_EQ(raw.Scalar("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Scalar("PRAGMA user_version"), std::to_string(SqliteStore::kSchemaVersion));
  EXPECT_EQ(raw.Scalar("SELECT count(*) FROM jobs"), "1");
}

TEST(SqliteStoreTest, ReopenDoesNotRerunMigrations) {
  TempDir dir;
  {
    auto store = MustOpen(dir.db());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(InsertJob(*store, SimpleJob("x")).ok());
  }
  SqliteOptions opt;
  opt.fsync_every_commit = true;
  auto store = MustOpen(dir.db(), opt);
  ASSERT_NE(store, nullptr);
  auto id = InsertJob(*store, SimpleJob("y"));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 2);
}

// The schema exactly as version 1 of the binary created it.
constexpr const char* kSchemaV1ForTest = R"sql(
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

TEST(SqliteStoreTest, MigratesAVersion1DatabaseKeepingItsRows) {
  TempDir dir;
  {
    RawDb raw(dir.db());
    raw.Exec(kSchemaV1ForTest);
    raw.Exec(
        R"(INSERT INTO jobs VALUES (1, 'alice', 'old', 'running', '', NULL, 1, '1.1', 10, 11, 12, 0,
                '{"name":"old","run":"true","resources":{"gpus":2}}'))");
    raw.Exec(R"(INSERT INTO jobs VALUES (2, 'bob', 'cpu', 'succeeded', '', 0, 1, '', 10, 11, 12, 13,
                '{"name":"cpu","run":"true","resources":{"gpus":0}}'))");
    raw.Exec(R"(INSERT INTO attempts VALUES ('1.1', 1, 1, 'n-1', '["GPU-a","GPU-b"]', 'running',
                NULL, '', 10, 12, 0))");
    raw.Exec(R"(INSERT INTO attempts VALUES ('2.1', 2, 1, 'n-1', '[]', 'succeeded', 0, '', 10, 12,
                13))");
    raw.Exec(R"(INSERT INTO nodes VALUES ('n-1', 'alpha', 'ready', '[]', 8000, 1024, '', '', '',
                '{}', 1, 2))");
    raw.Exec("INSERT INTO tokens VALUES ('abc', 'admin', 'admin', 5, 0, 0)");
    raw.Exec("PRAGMA user_version = 1");
  }
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA user_version"),
            std::to_string(SqliteStore::kSchemaVersion));
  ASSERT_TRUE(store
                  ->Transact([](Tx& tx) -> Status {
                    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(1));
                    EXPECT_TRUE(job.has_value());
                    if (!job) return Status::Ok();
                    EXPECT_EQ(job->spec.resources.gpus, 2);
                    EXPECT_EQ(job->spec.priority, JobPriority::kNormal);
                    EXPECT_EQ(job->spec.group, "default");
                    EXPECT_FALSE(job->last_preempted_ms.has_value());
                    EXPECT_FALSE(job->front);
                    // Attempts from before shares held whole GPUs.
                    GP_ASSIGN_OR_RETURN(auto gpu, tx.GetAttempt("1.1"));
                    GP_ASSIGN_OR_RETURN(auto cpu, tx.GetAttempt("2.1"));
                    EXPECT_EQ(gpu->gpu_milli, 1000);
                    EXPECT_EQ(gpu->TotalGpuMilli(), 2000);
                    EXPECT_EQ(cpu->gpu_milli, 0);
                    EXPECT_EQ(gpu->preempt_ms, 0);
                    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode("n-1"));
                    EXPECT_EQ(node->owner_group, "");
                    // Tokens from before scopes may do all their role may.
                    GP_ASSIGN_OR_RETURN(auto token, tx.GetToken("abc"));
                    EXPECT_EQ(token, std::optional<TokenRecord>(TokenRecord{"abc", "admin", "admin",
                                                                            5, 0, false, "", "*"}));
                    GP_ASSIGN_OR_RETURN(auto usage, tx.ListGroupUsage());
                    EXPECT_TRUE(usage.empty());
                    return tx.PutGroupUsage(GroupUsage{"vision", 1, 2});
                  })
                  .ok());
}

// The version 2 migration exactly as it was released.
constexpr const char* kSchemaV2ForTest = R"sql(
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

TEST(SqliteStoreTest, MigratesAVersion2DatabaseKeepingItsNodes) {
  TempDir dir;
  {
    RawDb raw(dir.db());
    raw.Exec(kSchemaV1ForTest);
    raw.Exec(kSchemaV2ForTest);
    raw.Exec(R"(INSERT INTO nodes VALUES ('n-1', 'alpha', 'offline',
                '[{"index":0,"uuid":"GPU-a","name":"A100","memory_mib":81920,"cc_major":8,
                   "cc_minor":0,"simulated":true}]', 8000, 1024, '', '', '', '{}', 1, 2, 'vision'))");
    raw.Exec("PRAGMA user_version = 2");
  }
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA user_version"),
            std::to_string(SqliteStore::kSchemaVersion));
  Status st = store->Transact([](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode("n-1"));
    EXPECT_TRUE(node.has_value());
    if (!node) return Status::Ok();
    EXPECT_EQ(node->owner_group, "vision");
    EXPECT_EQ(node->gpus.size(), 1u);
    EXPECT_FALSE(node->lending.has_value());  // older agents lend everything
    // The node may now leave and carry a lending; its events have a log.
    node->state = NodeState::kLeft;
    node->lending = NodeLending{};
    GP_RETURN_IF_ERROR(tx.PutNode(*node));
    NodeEvent e;
    e.node_id = "n-1";
    e.kind = "leave";
    GP_ASSIGN_OR_RETURN(int64_t id, tx.AppendNodeEvent(e));
    EXPECT_EQ(id, 1);
    GP_ASSIGN_OR_RETURN(auto events, tx.ListNodeEvents("n-1", 0, 0, 10));
    EXPECT_EQ(events.size(), 1u);
    GP_ASSIGN_OR_RETURN(auto again, tx.GetNode("n-1"));
    EXPECT_EQ(again, node);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// The version 3 migration exactly as it was released.
constexpr const char* kSchemaV3ForTest = R"sql(
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

TEST(SqliteStoreTest, MigratesAVersion3DatabaseAddingCheckpoints) {
  TempDir dir;
  const std::string inputs(64, 'a');
  {
    RawDb raw(dir.db());
    raw.Exec(kSchemaV1ForTest);
    raw.Exec(kSchemaV2ForTest);
    raw.Exec(kSchemaV3ForTest);
    raw.Exec(
        R"(INSERT INTO jobs VALUES (1, 'alice', 'old', 'running', '', NULL, 1, '1.1', 10, 11, 12, 0,
                '{"name":"old","run":"true","resources":{"gpus":1},"inputs":")" +
        inputs + R"("}', NULL, 0))");
    raw.Exec(R"(INSERT INTO attempts VALUES ('1.1', 1, 1, 'n-1', '["GPU-a"]', 'running',
                NULL, '', 10, 12, 0, 1000, 0, 0, 0))");
    raw.Exec("PRAGMA user_version = 3");
  }
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA user_version"),
            std::to_string(SqliteStore::kSchemaVersion));
  Status st = store->Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt("1.1"));
    EXPECT_TRUE(attempt.has_value());
    if (!attempt) return Status::Ok();
    EXPECT_EQ(attempt->last_checkpoint_ms, 0);  // none before checkpoints existed
    EXPECT_EQ(attempt->gpu_milli, 1000);
    GP_ASSIGN_OR_RETURN(auto inputs_now, tx.ListActiveJobInputs());
    EXPECT_EQ(inputs_now, std::vector<std::string>{inputs});
    GP_ASSIGN_OR_RETURN(auto none, tx.ListCheckpoints(1));
    EXPECT_TRUE(none.empty());
    Checkpoint c;
    c.job_id = 1;
    c.attempt_id = "1.1";
    c.manifest = std::string(64, 'b');
    GP_ASSIGN_OR_RETURN(Checkpoint added, tx.AddCheckpoint(c));
    EXPECT_EQ(added.number, 1);
    attempt->last_checkpoint_ms = 13;
    GP_RETURN_IF_ERROR(tx.PutAttempt(*attempt));
    GP_ASSIGN_OR_RETURN(auto again, tx.GetAttempt("1.1"));
    EXPECT_EQ(again, attempt);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// A lending column that does not decode is an Internal error naming the row.
TEST(SqliteStoreTest, CorruptLendingIsAnInternalErrorNamingTheNode) {
  TempDir dir;
  {
    auto store = MustOpen(dir.db());
    ASSERT_NE(store, nullptr);
    Status st = store->Transact([](Tx& tx) -> Status {
      Node n;
      n.id = "n-bad";
      n.name = "bad";
      n.lending = NodeLending{};
      return tx.PutNode(n);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  RawDb(dir.db()).Exec(R"(UPDATE nodes SET lending = '{"mode":"sleeping"}')");
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  Status st = store->Transact([](Tx& tx) { return tx.GetNode("n-bad").status(); });
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("nodes row n-bad"), std::string::npos) << st.ToString();
}

TEST(SqliteStoreTest, NewerSchemaIsRefused) {
  TempDir dir;
  { ASSERT_NE(MustOpen(dir.db()), nullptr); }
  RawDb(dir.db()).Exec("PRAGMA user_version = 99");
  auto s = SqliteStore::Open(dir.db());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("99"), std::string::npos) << s.status().ToString();
}

TEST(SqliteStoreTest, UnopenablePathIsAnError) {
  TempDir dir;
  std::string file = dir.path() + "/file";
  RawDb(file).Exec("CREATE TABLE t(x)");  // a regular file where a directory is needed
  auto s = SqliteStore::Open(file + "/sub/state.db");
  EXPECT_FALSE(s.ok());
}

TEST(SqliteStoreTest, InMemoryDatabaseWorks) {
  auto store = MustOpen(":memory:");
  ASSERT_NE(store, nullptr);
  auto id = InsertJob(*store, SimpleJob("x"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, 1);
}

// Corrupt rows become Internal errors naming the table and key.
TEST(SqliteStoreTest, CorruptRowsAreInternalErrorsNamingTheRow) {
  TempDir dir;
  {
    auto store = MustOpen(dir.db());
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(InsertJob(*store, SimpleJob("j")).ok());
    Status st = store->Transact([](Tx& tx) -> Status {
      Node n;
      n.id = "n-bad";
      n.name = "bad";
      GP_RETURN_IF_ERROR(tx.PutNode(n));
      Attempt a;
      a.id = "1.1";
      a.job_id = 1;
      a.number = 1;
      return tx.PutAttempt(a);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  {
    RawDb raw(dir.db());
    raw.Exec("UPDATE jobs SET spec = '{not json' WHERE id = 2");
    raw.Exec("UPDATE jobs SET spec = '{\"bogus\": 1}' WHERE id = 3");
    raw.Exec("UPDATE jobs SET state = 'exploded' WHERE id = 4");
    raw.Exec("UPDATE nodes SET gpus = '[{\"index\": \"zero\"}]' WHERE id = 'n-bad'");
    raw.Exec("UPDATE attempts SET gpu_uuids = '{' WHERE id = '1.1'");
  }
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  auto expect_internal = [&](auto fn, const std::string& table, const std::string& key) {
    Status st = store->Transact([&](Tx& tx) -> Status { return fn(tx).status(); });
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
    EXPECT_NE(st.message().find(table + " row " + key), std::string::npos) << st.ToString();
  };
  expect_internal([](Tx& tx) { return tx.GetJob(2); }, "jobs", "2");
  expect_internal([](Tx& tx) { return tx.GetJob(3); }, "jobs", "3");
  expect_internal([](Tx& tx) { return tx.GetJob(4); }, "jobs", "4");
  expect_internal([](Tx& tx) { return tx.ListJobs({}); }, "jobs", "2");
  expect_internal([](Tx& tx) { return tx.GetNode("n-bad"); }, "nodes", "n-bad");
  expect_internal([](Tx& tx) { return tx.ListNodes(); }, "nodes", "n-bad");
  expect_internal([](Tx& tx) { return tx.GetAttempt("1.1"); }, "attempts", "1.1");
  // Healthy rows stay readable.
  Status st = store->Transact([](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto j, tx.GetJob(1));
    EXPECT_TRUE(j.has_value());
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(SqliteStoreTest, WriteLockHeldElsewhereIsUnavailable) {
  TempDir dir;
  SqliteOptions opt;
  opt.busy_timeout_ms = 50;
  auto store = MustOpen(dir.db(), opt);
  ASSERT_NE(store, nullptr);
  RawDb other(dir.db());
  other.Exec("BEGIN IMMEDIATE");
  Status st = store->Transact([](Tx&) { return Status::Ok(); });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  other.Exec("ROLLBACK");
  EXPECT_TRUE(InsertJob(*store, SimpleJob("x")).ok());
}

// ---------------------------------------------------------------------------
// Crash durability: a child commits transactions and acknowledges each one on
// a pipe once Transact returned OK; the parent kills it with SIGKILL at a
// random point, reopens the database and checks every acknowledged
// transaction is there.

constexpr int kMaxPerRound = 5000;

// Runs in the child: never returns.
[[noreturn]] void CrashChild(const std::string& path, SqliteOptions opt, int first, int ack_fd) {
  auto s = SqliteStore::Open(path, opt);
  if (!s.ok()) _exit(2);
  Store& store = **s;
  for (int k = first; k < first + kMaxPerRound; ++k) {
    Status st = store.Transact([&](Tx& tx) -> Status {
      GP_ASSIGN_OR_RETURN(int64_t id, tx.InsertJob(SimpleJob("job-" + std::to_string(k))));
      GP_RETURN_IF_ERROR(tx.PushOutbox("n-1", "assign", std::to_string(k)).status());
      GP_RETURN_IF_ERROR(tx.AppendLogs(
          id, {LogLine{MakeAttemptId(id, 1), 0, "stdout", k, "line " + std::to_string(k), 0}}));
      return tx.PutMeta("last", std::to_string(k));
    });
    if (!st.ok()) _exit(3);
    std::string ack = std::to_string(k) + "\n";
    if (write(ack_fd, ack.data(), ack.size()) != static_cast<ssize_t>(ack.size())) _exit(4);
  }
  _exit(0);
}

// One round; returns the highest acknowledged k (first - 1 if none).
int CrashRound(const std::string& path, SqliteOptions opt, int first, std::mt19937& rng) {
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe";
    return first - 1;
  }
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    CrashChild(path, opt, first, fds[1]);
  }
  close(fds[1]);
  const int kill_after = std::uniform_int_distribution<int>(1, 400)(rng);
  const int extra_us = std::uniform_int_distribution<int>(0, 3000)(rng);
  int acked = first - 1;
  int seen = 0;
  bool killed = false;
  std::string buf;
  char chunk[512];
  while (true) {
    ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      acked = std::stoi(buf.substr(0, nl));
      buf.erase(0, nl + 1);
      ++seen;
    }
    if (!killed && seen >= kill_after) {
      usleep(static_cast<useconds_t>(extra_us));  // land anywhere in a transaction
      kill(pid, SIGKILL);
      killed = true;  // keep reading: acks already in the pipe count
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child did not die by SIGKILL; status " << status;
  return acked;
}

class SqliteCrashTest : public ::testing::TestWithParam<bool> {};

TEST_P(SqliteCrashTest, AcknowledgedTransactionsSurviveSigkill) {
  SqliteOptions opt;
  opt.fsync_every_commit = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  int next = 1;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int acked = CrashRound(dir.db(), opt, next, rng);
    ASSERT_GE(acked, next) << "the child acknowledged nothing";

    auto store = MustOpen(dir.db(), opt);
    ASSERT_NE(store, nullptr);
    std::vector<Job> jobs;
    std::vector<OutboxMessage> outbox;
    std::optional<std::string> last;
    Status st = store->Transact([&](Tx& tx) -> Status {
      GP_ASSIGN_OR_RETURN(jobs, tx.ListJobs(AllJobs()));
      GP_ASSIGN_OR_RETURN(outbox, tx.ListOutbox("n-1", 0));
      GP_ASSIGN_OR_RETURN(last, tx.GetMeta("last"));
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    // Every acknowledged transaction is there, whole, and at most the one in
    // flight when the child died is there unacknowledged.
    std::printf("[ crash    ] round %d: %d acknowledged, %zu present\n", round, acked, jobs.size());
    ASSERT_GE(static_cast<int>(jobs.size()), acked);
    ASSERT_LE(static_cast<int>(jobs.size()), acked + 1);
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(jobs[i].id, static_cast<int64_t>(i + 1));
      EXPECT_EQ(jobs[i].spec.name, "job-" + std::to_string(i + 1));
    }
    ASSERT_EQ(outbox.size(), jobs.size());
    for (size_t i = 0; i < outbox.size(); ++i) {
      EXPECT_EQ(outbox[i].seq, static_cast<int64_t>(i + 1));
      EXPECT_EQ(outbox[i].body, std::to_string(i + 1));
    }
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(*last, std::to_string(jobs.size()));
    auto logs = [&] {
      std::vector<LogLine> out;
      Status s = store->Transact([&](Tx& tx) -> Status {
        GP_ASSIGN_OR_RETURN(out, tx.ReadLogs(static_cast<int64_t>(jobs.size()), 0, 10));
        return Status::Ok();
      });
      EXPECT_TRUE(s.ok()) << s.ToString();
      return out;
    }();
    EXPECT_EQ(logs.size(), 1u);
    store.reset();
    EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA integrity_check"), "ok");
    next = static_cast<int>(jobs.size()) + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Sync, SqliteCrashTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Full") : std::string("Normal");
                         });

// A job's whole lifecycle in small transactions, 500 times (how fast:
// bench/pool_bench.cpp).
TEST(SqliteStoreTest, ManyLifecyclesInSmallTransactions) {
  TempDir dir;
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 20; ++i) {
    Node n;
    n.id = "n-" + std::to_string(i);
    n.name = "node" + std::to_string(i);
    n.state = NodeState::kReady;
    ASSERT_TRUE(store->Transact([&](Tx& tx) { return tx.PutNode(n); }).ok());
  }
  constexpr int kJobs = 500;
  for (int i = 0; i < kJobs; ++i) {
    Job job = SimpleJob("bench");
    auto id = InsertJob(*store, job);  // submit
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    job.id = *id;
    std::string node = "n-" + std::to_string(i % 20);
    Status st = store->Transact([&](Tx& tx) -> Status {  // schedule
      GP_ASSIGN_OR_RETURN(auto pending, tx.ListJobs(PendingJobs(10)));
      Attempt a;
      a.id = MakeAttemptId(job.id, 1);
      a.job_id = job.id;
      a.number = 1;
      a.node_id = node;
      GP_RETURN_IF_ERROR(tx.PutAttempt(a));
      job.state = JobState::kScheduled;
      job.current_attempt = a.id;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      return tx.PushOutbox(node, "assign", "{\"attempt\":\"" + a.id + "\"}").status();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = store->Transact([&](Tx& tx) -> Status {  // running, logs, heartbeat
      GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(job.current_attempt));
      if (!a) return Status::Internal("attempt vanished");
      a->state = AttemptState::kRunning;
      GP_RETURN_IF_ERROR(tx.PutAttempt(*a));
      GP_RETURN_IF_ERROR(tx.AppendLogs(job.id, {LogLine{a->id, 0, "stdout", 1, "hello", 0}}));
      GP_ASSIGN_OR_RETURN(auto n, tx.GetNode(node));
      n->last_seen_ms = i;
      return tx.PutNode(*n);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = store->Transact([&](Tx& tx) -> Status {  // finished
      GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(job.current_attempt));
      a->state = AttemptState::kSucceeded;
      a->exit_code = 0;
      GP_RETURN_IF_ERROR(tx.PutAttempt(*a));
      job.state = JobState::kSucceeded;
      job.exit_code = 0;
      job.current_attempt.clear();
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      GP_ASSIGN_OR_RETURN(auto msgs, tx.ListOutbox(node, 0));
      return tx.AckOutbox(node, msgs.empty() ? 0 : msgs.back().seq);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  ASSERT_EQ(store
                ->Transact([&](Tx& tx) -> Status {
                  GP_ASSIGN_OR_RETURN(auto pending, tx.ListJobs(PendingJobs(10)));
                  EXPECT_TRUE(pending.empty());
                  for (int i = 0; i < 20; ++i) {
                    GP_ASSIGN_OR_RETURN(auto msgs, tx.ListOutbox("n-" + std::to_string(i), 0));
                    EXPECT_TRUE(msgs.empty()) << "n-" << i;
                  }
                  GP_ASSIGN_OR_RETURN(auto last, tx.GetJob(kJobs));
                  EXPECT_TRUE(last.has_value() && last->state == JobState::kSucceeded);
                  return Status::Ok();
                })
                .ok(),
            true);
}

}  // namespace
}  // namespace gpupool
