// The PostgreSQL store: the conformance suite on a real PostgreSQL (one
// server per test binary, a schema per test), and what only this backend
// has: its schema versions, its connection errors, fencing and a server
// that restarts under it.
#include "store/pg_store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "store/pg_leader.h"
#include "store/pg_migrate.h"
#include "store/pg_test_server.h"
#include "store/sqlite_store.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

// SQL on the shared server, outside any store (setting up and checking).
std::string Admin(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  std::string out;
  if (PQstatus(c) != CONNECTION_OK) {
    out = std::string("connect: ") + PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, sql.c_str());
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      out = std::string("error: ") + PQresultErrorMessage(r);
    }
    PQclear(r);
  }
  PQfinish(c);
  return out;
}

testing::PgTestServer& Server() {
  auto server = testing::SharedPgTestServer();
  if (!server.ok()) {
    ADD_FAILURE() << "no PostgreSQL for the tests: " << server.status().ToString();
    std::abort();  // every test here needs it: fail loudly, never skip
  }
  return **server;
}

// A schema (namespace) of its own for `name`, and a URL whose connections use it.
std::string SchemaUrl(const std::string& name) {
  std::string schema = "s_" + std::to_string(std::hash<std::string>{}(name));
  if (Admin(Server().url(), "SELECT count(*) FROM pg_namespace WHERE nspname = '" + schema + "'") ==
      "0") {
    Admin(Server().url(), "CREATE SCHEMA " + schema);
  }
  return Server().url() + "?options=-csearch_path%3D" + schema;
}

}  // namespace

StoreBackend PgBackend() {
  return {"postgres", [](const std::string& dir) -> Result<std::unique_ptr<Store>> {
            GP_ASSIGN_OR_RETURN(auto store, PgStore::Open(SchemaUrl(dir)));
            return std::unique_ptr<Store>(std::move(store));
          }};
}
GPUPOOL_STORE_CONFORMANCE_SUITE(Postgres, PgBackend());

namespace {

using conformance::StatusOf;

Job AJob(const std::string& owner) {
  Job j;
  j.owner = owner;
  j.spec.name = "j";
  j.spec.command = {"true"};
  return j;
}

Result<int64_t> CountJobs(Store& s) {
  int64_t n = -1;
  GP_RETURN_IF_ERROR(s.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(n, tx.CountJobs(JobQuery{}));
    return Status::Ok();
  }));
  return n;
}

TEST(PgStoreTest, ConformanceSuiteIsLinked) {
  const auto* unit = ::testing::UnitTest::GetInstance();
  int conformance = 0;
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    if (std::string(unit->GetTestSuite(i)->name()) == "Postgres/StoreConformanceTest") {
      conformance = unit->GetTestSuite(i)->total_test_count();
    }
  }
  EXPECT_GT(conformance, 50);
}

TEST(PgStoreTest, ADatabaseOfANewerSchemaIsRefusedAndLeftAlone) {
  const std::string url = SchemaUrl("newer");
  {
    auto store = PgStore::Open(url);
    CONF_ASSERT_OK(store.status());
    CONF_ASSERT_OK((*store)->Transact([](Tx& tx) { return tx.InsertJob(AJob("ann")).status(); }));
  }
  const std::string schema = url.substr(url.find("%3D") + 3);
  Admin(Server().url(), "UPDATE " + schema + ".gpupool_schema SET version = 99");
  auto again = PgStore::Open(url);
  ASSERT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  EXPECT_NE(again.status().message().find("version 99"), std::string::npos);
  EXPECT_EQ(Admin(Server().url(), "SELECT version FROM " + schema + ".gpupool_schema"), "99");
  EXPECT_EQ(Admin(Server().url(), "SELECT count(*) FROM " + schema + ".jobs"), "1");
}

TEST(PgStoreTest, TwoStoresOpeningAnEmptySchemaAtOnceCreateItOnce) {
  const std::string url = SchemaUrl("together");
  Result<std::unique_ptr<PgStore>> a = Status::Internal("unset"), b = Status::Internal("unset");
  std::thread ta([&] { a = PgStore::Open(url); });
  std::thread tb([&] { b = PgStore::Open(url); });
  ta.join();
  tb.join();
  CONF_ASSERT_OK(a.status());
  CONF_ASSERT_OK(b.status());
  CONF_ASSERT_OK((*a)->Transact([](Tx& tx) { return tx.InsertJob(AJob("ann")).status(); }));
  auto n = CountJobs(**b);
  CONF_ASSERT_OK(n.status());
  EXPECT_EQ(*n, 1);
}

TEST(PgStoreTest, AnUnreachableServerOrABadUrlIsAClearError) {
  auto down = PgStore::Open("postgresql://gpupool:s3cret@127.0.0.1:1/postgres");
  ASSERT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("cannot connect to PostgreSQL at"), std::string::npos);
  EXPECT_EQ(down.status().message().find("s3cret"), std::string::npos) << down.status().message();
  auto garbage = PgStore::Open("postgresql://[::1");
  EXPECT_FALSE(garbage.ok());
  EXPECT_EQ(PgStore::Redacted("postgresql://u:pw@h:5/db"), "postgresql://u:***@h:5/db");
  EXPECT_EQ(PgStore::Redacted("host=h password=pw dbname=d"), "host=h password=*** dbname=d");
}

// Fencing: the leader row's epoch decides whose transactions land.
TEST(PgStoreTest, ADeposedLeaderCannotWrite) {
  const std::string url = SchemaUrl("fenced");
  const std::string schema = url.substr(url.find("%3D") + 3);
  std::atomic<int64_t> mine{0};
  PgOptions options;
  options.fence_epoch = [&] { return mine.load(); };
  auto store = PgStore::Open(url, options);
  CONF_ASSERT_OK(store.status());
  Admin(Server().url(), "UPDATE " + schema + ".gpupool_leader SET epoch = 1");
  mine = 1;
  CONF_ASSERT_OK((*store)->Transact([](Tx& tx) { return tx.InsertJob(AJob("ann")).status(); }));

  // Another server takes over (epoch 2) while this one is inside a
  // transaction: the takeover waits for it, so its write lands first...
  std::atomic<bool> took_over{false};
  std::thread other;
  CONF_ASSERT_OK((*store)->Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.InsertJob(AJob("bob")).status());
    other = std::thread([&] {
      Admin(Server().url(), "UPDATE " + schema + ".gpupool_leader SET epoch = 2");
      took_over = true;
    });
    // ... as the other server's UPDATE is seen waiting for our lock.
    while (Admin(Server().url(),
                 "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                 "query LIKE 'UPDATE " +
                     schema + ".gpupool_leader%'") != "1") {
      std::this_thread::yield();
    }
    EXPECT_FALSE(took_over.load());
    return Status::Ok();
  }));
  other.join();
  EXPECT_TRUE(took_over.load());
  // ... and after it, nothing this server does lands.
  Status late = (*store)->Transact([](Tx& tx) { return tx.InsertJob(AJob("eve")).status(); });
  ASSERT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_NE(late.message().find("deposed"), std::string::npos);
  EXPECT_EQ(
      Admin(Server().url(), "SELECT string_agg(owner, ',' ORDER BY id) FROM " + schema + ".jobs"),
      "ann,bob");
}

Result<std::unique_ptr<PgLeader>> Leader(const std::string& url, const std::string& id) {
  return PgLeader::Connect({.url = url,
                            .id = id,
                            .address = "https://" + id + ":8470",
                            .version = "0.1.0-" + id,
                            .lease_ms = 1000});
}

TEST(PgLeaderTest, OneLeadsAtATimeAndEveryChangeOfLeaderIsANewEpoch) {
  const std::string url = SchemaUrl("leaders");
  CONF_ASSERT_OK(PgStore::Open(url).status());  // the tables
  CONF_ASSERT_OK_AND_ASSIGN(auto a, Leader(url, "a"));
  CONF_ASSERT_OK_AND_ASSIGN(auto b, Leader(url, "b"));
  CONF_ASSERT_OK_AND_ASSIGN(LeaderView va, a->Tick());
  EXPECT_TRUE(va.leading);
  EXPECT_EQ(va.epoch, 1);
  CONF_ASSERT_OK_AND_ASSIGN(LeaderView vb, b->Tick());
  EXPECT_FALSE(vb.leading);
  EXPECT_EQ(vb.leader_id, "a");
  EXPECT_EQ(vb.leader_address, "https://a:8470");
  CONF_ASSERT_OK_AND_ASSIGN(va, a->Tick());  // a renewal keeps the epoch
  EXPECT_TRUE(va.leading);
  EXPECT_EQ(va.epoch, 1);
  // a stops renewing (it died): b takes over once a's lease has ended.
  do {
    CONF_ASSERT_OK_AND_ASSIGN(vb, b->Tick());
  } while (!vb.leading);
  EXPECT_EQ(vb.epoch, 2);
  CONF_ASSERT_OK_AND_ASSIGN(va, a->Tick());  // a, back, is a standby now
  EXPECT_FALSE(va.leading);
  EXPECT_EQ(va.leader_id, "b");
  // A clean shutdown hands over at once.
  CONF_ASSERT_OK(b->Resign());
  CONF_ASSERT_OK_AND_ASSIGN(va, a->Tick());
  EXPECT_TRUE(va.leading);
  EXPECT_EQ(va.epoch, 3);
}

TEST(PgLeaderTest, EveryServerThatTicksIsListedUntilItResigns) {
  const std::string url = SchemaUrl("server_list");
  CONF_ASSERT_OK(PgStore::Open(url).status());
  CONF_ASSERT_OK_AND_ASSIGN(auto a, Leader(url, "a"));
  CONF_ASSERT_OK_AND_ASSIGN(auto b, Leader(url, "b"));
  int64_t epoch = -1;
  CONF_ASSERT_OK_AND_ASSIGN(auto none, a->Servers(&epoch));
  EXPECT_TRUE(none.empty());  // nobody has ticked yet
  CONF_ASSERT_OK(a->Tick().status());
  CONF_ASSERT_OK(b->Tick().status());
  CONF_ASSERT_OK_AND_ASSIGN(auto both, b->Servers(&epoch));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(epoch, 1);
  EXPECT_EQ(both[0].id, "a");
  EXPECT_TRUE(both[0].leading);
  EXPECT_EQ(both[0].address, "https://a:8470");
  EXPECT_EQ(both[0].version, "0.1.0-a");
  EXPECT_EQ(both[1].id, "b");
  EXPECT_FALSE(both[1].leading);
  EXPECT_GT(both[1].started_ms, 1'700'000'000'000);  // the database's clock, Unix ms
  // The leader leaves cleanly: off the list, and b leads at its next tick.
  CONF_ASSERT_OK(a->Resign());
  CONF_ASSERT_OK(b->Tick().status());
  CONF_ASSERT_OK_AND_ASSIGN(auto left, b->Servers(&epoch));
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].id, "b");
  EXPECT_TRUE(left[0].leading);
  EXPECT_EQ(epoch, 2);
}

// A populated SQLite pool: jobs (with inputs, one ended), attempts,
// checkpoints, logs (compressed chunks), nodes, tokens, the ledger.
Status Populate(Store& s) {
  return s.Transact([](Tx& tx) -> Status {
    JobSpec with_inputs = conformance::RunSpec();
    with_inputs.group = "vision";
    with_inputs.inputs = std::string(64, 'a');
    for (int i = 0; i < 30; ++i) {
      Job j = conformance::MakeJob(i % 2 ? "alice" : "bob", with_inputs,
                                   i % 3 ? JobState::kRunning : JobState::kSucceeded);
      GP_ASSIGN_OR_RETURN(j.id, tx.InsertJob(j));
      GP_RETURN_IF_ERROR(
          tx.PutAttempt(conformance::MakeAttempt(j.id, 1, "n-1", AttemptState::kRunning)));
      std::vector<LogLine> lines;
      for (int l = 0; l < 50; ++l) {
        lines.push_back(
            conformance::Line(MakeAttemptId(j.id, 1), l * 10, "line " + std::to_string(l)));
      }
      GP_RETURN_IF_ERROR(tx.AppendLogs(j.id, lines));
      Checkpoint c;
      c.job_id = j.id;
      c.attempt_id = MakeAttemptId(j.id, 1);
      c.manifest = std::string(64, 'c');
      c.bytes = 1000 + i;
      c.files = 3;
      GP_RETURN_IF_ERROR(tx.AddCheckpoint(c).status());
      accounting::LedgerEntry e;
      e.key = "charge:" + std::to_string(j.id);
      e.kind = accounting::EntryKind::kCharge;
      e.debit = "group:vision";
      e.credit = "pool";
      e.amount = 1000 * (i + 1);
      e.job_id = j.id;
      e.attempt_id = MakeAttemptId(j.id, 1);
      e.user = j.owner;
      e.group = "vision";
      e.from_ms = 1'795'651'200'000 + i * 3'600'000;
      e.at_ms = e.from_ms + 3'600'000;
      GP_RETURN_IF_ERROR(tx.PostEntry(e).status());
    }
    GP_RETURN_IF_ERROR(tx.PutNode(conformance::MakeNode("n-1", "box")));
    return tx.PutToken({"h1", "alice", "member", 1, 0, false, "laptop", "*"});
  });
}

TEST(PgMigrateTest, APopulatedSqlitePoolMovesToPostgresAndReadsTheSame) {
  char tmpl[] = "/tmp/pg-migrate-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string db = std::string(tmpl) + "/state.db";
  {
    CONF_ASSERT_OK_AND_ASSIGN(auto sqlite, SqliteStore::Open(db));
    CONF_ASSERT_OK(Populate(*sqlite));
  }
  const std::string url = SchemaUrl("migrated");
  CONF_ASSERT_OK_AND_ASSIGN(auto moved, MigrateSqliteToPostgres(db, url));
  int64_t rows = 0;
  for (const MigratedTable& t : moved) rows += t.rows;
  EXPECT_GT(rows, 30 * 4);

  // The same answers from both stores.
  CONF_ASSERT_OK_AND_ASSIGN(auto sqlite, SqliteStore::Open(db));
  CONF_ASSERT_OK_AND_ASSIGN(auto pg, PgStore::Open(url));
  auto read = [](Store& s) {
    std::string out;
    Status st = s.Transact([&](Tx& tx) -> Status {
      GP_ASSIGN_OR_RETURN(auto jobs, tx.ListJobs(JobQuery{}));
      for (const Job& j : jobs)
        out += std::to_string(j.id) + std::string(JobStateName(j.state)) + j.owner + ";";
      GP_ASSIGN_OR_RETURN(auto logs, tx.ReadLogs(7, 0, 1000));
      for (const LogLine& l : logs) out += l.text + "@" + std::to_string(l.cursor) + ";";
      GP_ASSIGN_OR_RETURN(auto balances, tx.ListBalances());
      for (const auto& b : balances) out += b.account + std::to_string(b.balance) + ";";
      GP_ASSIGN_OR_RETURN(auto used, tx.ListStorageUsage());
      for (const auto& u : used) out += u.holder.name + std::to_string(u.bytes) + ";";
      GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
      out += std::to_string(nodes.size());
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  };
  EXPECT_EQ(read(*pg), read(*sqlite));
  // New ids go on after the moved ones.
  int64_t next = 0;
  CONF_ASSERT_OK(pg->Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(next, tx.InsertJob(AJob("new")));
    return Status::Ok();
  }));
  EXPECT_EQ(next, 31);

  // Into a database that holds a pool: refused, nothing changed.
  auto again = MigrateSqliteToPostgres(db, url);
  ASSERT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status().ToString();
  auto n = CountJobs(*pg);
  CONF_ASSERT_OK(n.status());
  EXPECT_EQ(*n, 31);
  std::filesystem::remove_all(tmpl);
}

TEST(PgStoreTest, AServerThatRestartsLosesNothingCommittedAndTheStoreReconnects) {
  auto own = testing::PgTestServer::Start();
  CONF_ASSERT_OK(own.status());
  auto store = PgStore::Open((*own)->url());
  CONF_ASSERT_OK(store.status());
  CONF_ASSERT_OK((*store)->Transact([](Tx& tx) { return tx.InsertJob(AJob("ann")).status(); }));
  CONF_ASSERT_OK((*own)->Kill());
  Status during = (*store)->Transact([](Tx& tx) { return tx.InsertJob(AJob("bob")).status(); });
  EXPECT_EQ(during.code(), StatusCode::kUnavailable) << during.ToString();
  CONF_ASSERT_OK((*own)->Restart());
  auto n = CountJobs(**store);
  CONF_ASSERT_OK(n.status());
  EXPECT_EQ(*n, 1);  // ann's committed insert survived the crash; bob's never committed
  CONF_ASSERT_OK((*store)->Transact([](Tx& tx) { return tx.InsertJob(AJob("cy")).status(); }));
}

}  // namespace
}  // namespace gpupool
