#include "store/store_conformance.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/store_conformance_testing.h"

namespace gpupool {

std::string StoreBackendName(const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param.name;
}

void StoreConformanceTest::SetUp() {
  std::string tmpl = ::testing::TempDir() + "gpupool-store-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
  dir_ = tmpl;
  auto s = GetParam().open(dir_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(s).value();
}

void StoreConformanceTest::TearDown() {
  store_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void StoreConformanceTest::Reopen() {
  store_.reset();
  auto s = GetParam().open(dir_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(s).value();
}

namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

}  // namespace

// ---------------------------------------------------------------------------
// Transactions (every facet's changes together)

TEST_P(StoreConformanceTest, ErrorRollsBackEverything) {
  CONF_ASSERT_OK_AND_ASSIGN(Job kept, Insert(store(), MakeJob("alice", RunSpec())));
  int64_t rolled_back_id = 0;
  const Status boom = Status::FailedPrecondition("stop here");
  Status st = store().Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(rolled_back_id, tx.InsertJob(MakeJob("bob", CommandSpec())));
    Job upd = kept;
    upd.state = JobState::kCancelled;
    GP_RETURN_IF_ERROR(tx.UpdateJob(upd));
    GP_RETURN_IF_ERROR(
        tx.PutAttempt(MakeAttempt(rolled_back_id, 1, "n-1", AttemptState::kScheduled)));
    GP_RETURN_IF_ERROR(tx.PutNode(MakeNode("n-1", "alpha")));
    GP_RETURN_IF_ERROR(tx.AppendLogs(rolled_back_id, {Line("2.1", 0, "x")}));
    GP_RETURN_IF_ERROR(tx.PushOutbox("n-1", "assign", "{}").status());
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v"));
    GP_RETURN_IF_ERROR(tx.PutToken(TokenRecord{"h", "bob", "admin", 1, 0, false, "", "*"}));
    return boom;
  });
  EXPECT_EQ(st, boom);  // the callback's error, unchanged
  EXPECT_GT(rolled_back_id, kept.id);

  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto jobs, tx.ListJobs({}));
    EXPECT_EQ(jobs, std::vector<Job>{kept});
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(rolled_back_id));
    EXPECT_FALSE(job.has_value());
    GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts({}));
    EXPECT_TRUE(attempts.empty());
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    EXPECT_TRUE(nodes.empty());
    GP_ASSIGN_OR_RETURN(auto logs, tx.ReadLogs(rolled_back_id, 0, 100));
    EXPECT_TRUE(logs.empty());
    GP_ASSIGN_OR_RETURN(auto end, tx.LastLogOffset("2.1", 0));
    EXPECT_EQ(end, -1);
    GP_ASSIGN_OR_RETURN(auto outbox, tx.ListOutbox("n-1", 0));
    EXPECT_TRUE(outbox.empty());
    GP_ASSIGN_OR_RETURN(auto meta, tx.GetMeta("k"));
    EXPECT_FALSE(meta.has_value());
    GP_ASSIGN_OR_RETURN(auto token, tx.GetToken("h"));
    EXPECT_FALSE(token.has_value());
    return Status::Ok();
  }));

  // The next id is still unique (a backend may or may not reuse the rolled
  // back one, which nobody outside the transaction saw).
  CONF_ASSERT_OK_AND_ASSIGN(Job next, Insert(store(), MakeJob("carol", RunSpec())));
  EXPECT_GT(next.id, kept.id);
  CONF_ASSERT_OK_AND_ASSIGN(auto jobs, InTx(store(), [](Tx& tx) { return tx.ListJobs({}); }));
  EXPECT_EQ(Ids(jobs), (std::vector<int64_t>{kept.id, next.id}));
}

TEST_P(StoreConformanceTest, ExceptionRollsBackAndPropagates) {
  EXPECT_THROW((void)store().Transact([](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.InsertJob(MakeJob("alice", RunSpec())).status());
    throw std::runtime_error("callback bug");
  }),
               std::runtime_error);
  CONF_ASSERT_OK_AND_ASSIGN(auto jobs, InTx(store(), [](Tx& tx) { return tx.ListJobs({}); }));
  EXPECT_TRUE(jobs.empty());
  CONF_EXPECT_OK(Insert(store(), MakeJob("alice", RunSpec())));
}

TEST_P(StoreConformanceTest, NestedTransactIsFailedPrecondition) {
  bool inner_ran = false;
  Status inner;
  CONF_ASSERT_OK(store().Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutMeta("outer", "1"));
    inner = store().Transact([&](Tx&) {
      inner_ran = true;
      return Status::Ok();
    });
    return tx.PutMeta("outer2", "2");
  }));
  EXPECT_EQ(inner.code(), StatusCode::kFailedPrecondition) << inner.ToString();
  EXPECT_FALSE(inner_ran);
  CONF_ASSERT_OK_AND_ASSIGN(auto v, InTx(store(), [](Tx& tx) { return tx.GetMeta("outer2"); }));
  EXPECT_EQ(v, std::optional<std::string>("2"));
}

TEST_P(StoreConformanceTest, ReopenSeesEverythingCommitted) {
  Job job = MakeJob("alice", RunSpec(), JobState::kRunning);
  job.exit_code = std::nullopt;
  job.current_attempt = "1.1";
  job.attempts = 1;
  Attempt attempt = MakeAttempt(1, 1, "n-1", AttemptState::kRunning);
  attempt.gpu_uuids = {"GPU-x"};
  Node node = MakeNode("n-1", "alpha");
  node.gpus = {GpuInfo{0, "GPU-x", "NVIDIA H100", 81920, 9, 0, false}};
  node.labels = {{"k", "v"}};
  TokenRecord token{"hash1", "alice", "admin", 1, 2, false, "x", "jobs:read"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(job.id, tx.InsertJob(job));
    GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
    GP_RETURN_IF_ERROR(tx.PutNode(node));
    GP_RETURN_IF_ERROR(tx.AppendLogs(job.id, {Line("1.1", 0, "a"), Line("1.1", 2, "b")}));
    GP_RETURN_IF_ERROR(tx.PushOutbox("n-1", "assign", "{}").status());
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v"));
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(MakeCheckpoint(job.id, "1.1", 'c', 3)).status());
    return tx.PutToken(token);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto logs_before,
                            InTx(store(), [](Tx& tx) { return tx.ReadLogs(1, 0, 10); }));
  ASSERT_EQ(logs_before.size(), 2u);

  Reopen();

  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto j, tx.GetJob(job.id));
    EXPECT_EQ(j, std::optional<Job>(job));
    GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt("1.1"));
    EXPECT_EQ(a, std::optional<Attempt>(attempt));
    GP_ASSIGN_OR_RETURN(auto n, tx.GetNodeByName("alpha"));
    EXPECT_EQ(n, std::optional<Node>(node));
    GP_ASSIGN_OR_RETURN(auto logs, tx.ReadLogs(job.id, 0, 10));
    EXPECT_EQ(logs, logs_before);
    GP_ASSIGN_OR_RETURN(auto end, tx.LastLogOffset("1.1", 0));
    EXPECT_EQ(end, 2);  // the line stored at offset 2
    GP_ASSIGN_OR_RETURN(auto outbox, tx.ListOutbox("n-1", 0));
    EXPECT_EQ(outbox, (std::vector<OutboxMessage>{{"n-1", 1, "assign", "{}"}}));
    GP_ASSIGN_OR_RETURN(auto meta, tx.GetMeta("k"));
    EXPECT_EQ(meta, std::optional<std::string>("v"));
    GP_ASSIGN_OR_RETURN(auto t, tx.GetToken("hash1"));
    EXPECT_EQ(t, std::optional<TokenRecord>(token));
    GP_ASSIGN_OR_RETURN(auto c, tx.LatestCheckpoint(job.id));
    EXPECT_TRUE(c.has_value() && c->number == 1 && c->manifest == std::string(64, 'c'));
    return Status::Ok();
  }));

  // Counters continue after a reopen: ids, log cursors, outbox seqs.
  CONF_ASSERT_OK_AND_ASSIGN(Job next, Insert(store(), MakeJob("bob", CommandSpec())));
  EXPECT_GT(next.id, job.id);
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AppendLogs(1, {Line("1.1", 4, "c")}); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto logs_after, InTx(store(), [&](Tx& tx) {
                              return tx.ReadLogs(1, logs_before.back().cursor, 10);
                            }));
  ASSERT_EQ(logs_after.size(), 1u);
  EXPECT_GT(logs_after[0].cursor, logs_before.back().cursor);
  CONF_ASSERT_OK_AND_ASSIGN(
      int64_t seq, InTx(store(), [](Tx& tx) { return tx.PushOutbox("n-1", "assign", "{}"); }));
  EXPECT_EQ(seq, 2);
}

}  // namespace gpupool
