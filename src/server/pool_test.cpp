// Pool tests on a real SQLite store in a temporary directory and a fake clock.
#include "server/pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pool_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store_ = *SqliteStore::Open((dir_ / "state.db").string());
    PoolHooks hooks;
    hooks.outbox_ready = [this](const std::string& n) { outbox_nodes_.push_back(n); };
    hooks.job_changed = [this](int64_t j) { changed_jobs_.push_back(j); };
    hooks.schedule_needed = [this] { ++schedule_requests_; };
    pool_ = std::make_unique<Pool>(*store_, clock_, PoolOptions{}, hooks);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  proto::Hello MakeHello(const std::string& name, int gpus, const std::string& instance = "i1") {
    proto::Hello h;
    h.node_name = name;
    h.agent_instance = instance;
    h.cpu_milli = 8000;
    h.memory_mib = 32768;
    for (int i = 0; i < gpus; ++i) {
      h.gpus.push_back({i, name + "-gpu" + std::to_string(i), "A100", 81920, 8, 0, true});
    }
    return h;
  }

  JobSpec Spec(int gpus, const std::string& run = "true") {
    JobSpec s;
    s.name = "j";
    s.run = run;
    s.resources.gpus = gpus;
    return s;
  }

  std::vector<proto::StartTask> Starts(const std::string& node, int64_t after = 0) {
    std::vector<proto::StartTask> out;
    for (const auto& m : *pool_->PendingOrders(node, after)) {
      if (m.type == proto::kStart) out.push_back(*proto::DecodeStartTask(m.body));
    }
    return out;
  }

  Status Report(const std::string& node, int64_t seq, const proto::TaskReport& r) {
    return pool_->AgentMessage(node, seq, std::string(proto::kTaskStatus), proto::Encode(r));
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Pool> pool_;
  std::vector<std::string> outbox_nodes_;
  std::vector<int64_t> changed_jobs_;
  int schedule_requests_ = 0;
};

TEST_F(PoolTest, SubmitScheduleRunSucceed) {
  auto node = pool_->AgentHello(MakeHello("a", 2));
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto job = pool_->Submit(Spec(1), "alice");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->id, 1);
  EXPECT_GT(schedule_requests_, 0);
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto starts = Starts(node->node_id);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].attempt_id, "1.1");
  EXPECT_EQ(starts[0].gpu_uuids, std::vector<std::string>{"a-gpu0"});
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kScheduled);

  ASSERT_TRUE(Report(node->node_id, 1, {"1.1", "running", 0, 0, "", clock_.NowMs()}).ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
  ASSERT_TRUE(Report(node->node_id, 2, {"1.1", "exited", 0, 0, "", clock_.NowMs()}).ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kSucceeded);
  EXPECT_EQ(d.job.exit_code, 0);
  ASSERT_EQ(d.attempts.size(), 1u);
  EXPECT_EQ(d.attempts[0].state, AttemptState::kSucceeded);
}

TEST_F(PoolTest, DuplicateAgentMessagesAreAppliedOnce) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  proto::LogChunk c{"1.1", {{0, "stdout", 1, "line one"}}};
  ASSERT_TRUE(
      pool_->AgentMessage(node.node_id, 1, std::string(proto::kLogs), proto::Encode(c)).ok());
  // The same seq again (a resend after a reconnect) changes nothing.
  ASSERT_TRUE(
      pool_->AgentMessage(node.node_id, 1, std::string(proto::kLogs), proto::Encode(c)).ok());
  // The same line under a new seq (agent restart) is deduplicated by offset.
  ASSERT_TRUE(
      pool_->AgentMessage(node.node_id, 2, std::string(proto::kLogs), proto::Encode(c)).ok());
  EXPECT_EQ(pool_->ReadLogs(1, 0, 100)->size(), 1u);
}

TEST_F(PoolTest, FailedExitAndMaxRuntimeFailure) {
  auto node = *pool_->AgentHello(MakeHello("a", 2));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 2);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", "exited", 3, 0, "", 0}).ok());
  ASSERT_TRUE(
      Report(node.node_id, 2, {"2.1", "failed", 143, 15, "exceeded max_runtime of 1s", 0}).ok());
  auto j1 = pool_->GetJob(1)->job, j2 = pool_->GetJob(2)->job;
  EXPECT_EQ(j1.state, JobState::kFailed);
  EXPECT_EQ(j1.exit_code, 3);
  EXPECT_EQ(j1.reason, "exited with code 3");
  EXPECT_EQ(j2.state, JobState::kFailed);
  EXPECT_EQ(j2.reason, "exceeded max_runtime of 1s");
}

TEST_F(PoolTest, CancelRunningJobOrdersAStopAndIgnoresLateReports) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", "running", 0, 0, "", 0}).ok());
  auto job = pool_->Cancel(1);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kCancelled);
  auto orders = *pool_->PendingOrders(node.node_id, 0);
  ASSERT_EQ(orders.back().type, proto::kStop);
  EXPECT_EQ(proto::DecodeStopTask(orders.back().body)->attempt_id, "1.1");
  ASSERT_TRUE(Report(node.node_id, 2, {"1.1", "exited", 143, 15, "", 0}).ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kCancelled);
  // The GPU is free for the next job.
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  EXPECT_EQ(*pool_->Schedule(), 1);
}

TEST_F(PoolTest, UnsatisfiableJobWaitsWithAReason) {
  (void)*pool_->AgentHello(MakeHello("a", 1));
  JobSpec s = Spec(1);
  s.resources.gpu_memory_mib = 200 * 1024;
  ASSERT_TRUE(pool_->Submit(s, "u").ok());
  EXPECT_EQ(*pool_->Schedule(), 0);
  auto job = pool_->GetJob(1)->job;
  EXPECT_EQ(job.state, JobState::kPending);
  EXPECT_EQ(job.reason, "no node has a GPU with 200 GiB");
}

TEST_F(PoolTest, AgentRestartWithoutTheTaskRequeuesIt) {
  auto node = *pool_->AgentHello(MakeHello("a", 1, "first"));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", "running", 0, 0, "", 0}).ok());
  ASSERT_TRUE(pool_->AgentDisconnected(node.node_id).ok());
  // A new agent process that applied the start order but has no such task.
  proto::Hello h = MakeHello("a", 1, "second");
  h.last_server_seq = 1;
  auto again = pool_->AgentHello(h);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->node_id, node.node_id);
  EXPECT_EQ(again->last_agent_seq, 0);  // new instance: sequence restarts
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kPending);
  EXPECT_EQ(d.attempts[0].state, AttemptState::kLost);
  // It runs again as attempt 2.
  ASSERT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(1)->job.current_attempt, "1.2");
}

TEST_F(PoolTest, ReconnectKeepsRunningTaskAndResumesSequence) {
  auto node = *pool_->AgentHello(MakeHello("a", 1, "same"));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", "running", 0, 0, "", 0}).ok());
  proto::LogChunk c{"1.1", {{0, "stdout", 1, "abc"}}};
  ASSERT_TRUE(
      pool_->AgentMessage(node.node_id, 2, std::string(proto::kLogs), proto::Encode(c)).ok());
  ASSERT_TRUE(pool_->AgentDisconnected(node.node_id).ok());
  proto::Hello h = MakeHello("a", 1, "same");
  h.last_server_seq = 1;
  h.tasks = {{"1.1", "running", 0, 0, "", 0}};
  auto w = *pool_->AgentHello(h);
  EXPECT_EQ(w.last_agent_seq, 2);
  EXPECT_EQ(w.log_offsets.at("1.1"), 0);  // the last line it has starts at 0
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
}

TEST_F(PoolTest, StaleAttemptIsFencedAndStopped) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  proto::Hello h = MakeHello("a", 1);
  h.tasks = {{"99.1", "running", 0, 0, "", 0}};
  auto w = pool_->AgentHello(h);
  ASSERT_TRUE(w.ok());
  auto orders = *pool_->PendingOrders(node.node_id, 0);
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].type, proto::kStop);
  EXPECT_EQ(proto::DecodeStopTask(orders[0].body)->reason, "stale attempt");
}

TEST_F(PoolTest, LostNodeRequeuesItsJobsAfterTheGracePeriod) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(pool_->AgentDisconnected(node.node_id).ok());
  clock_.AdvanceMs(PoolOptions{}.node_lost_after_ms - 1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kScheduled);
  clock_.AdvanceMs(2);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kPending);
  EXPECT_THAT(d.attempts[0].reason, HasSubstr("stopped answering"));
  EXPECT_EQ((*pool_->ListNodes())[0].node.state, NodeState::kLost);
}

TEST_F(PoolTest, MalformedAgentMessageIsRejectedAndChangesNothing) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  Status s = pool_->AgentMessage(node.node_id, 1, std::string(proto::kTaskStatus),
                                 R"({"attempt_id":"x"})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  // The seq was not consumed: a valid message with the same seq still applies.
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", "running", 0, 0, "", 0}).ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
}

TEST_F(PoolTest, InvalidSpecIsRejectedAndNothingStored) {
  JobSpec s;  // neither run nor command
  EXPECT_EQ(pool_->Submit(s, "u").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool_->ListJobs({})->empty());
}

}  // namespace
}  // namespace gpupool::server
