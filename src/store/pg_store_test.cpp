// The PostgreSQL store: the conformance suite on a real PostgreSQL (one
// server per test binary, a schema per test), and what only this backend
// has: its schema versions, its connection errors, fencing and a server
// that restarts under it.
#include "store/pg_store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "store/pg_leader.h"
#include "store/pg_test_server.h"
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
  return PgLeader::Connect(
      {.url = url, .id = id, .address = "https://" + id + ":8470", .lease_ms = 1000});
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
