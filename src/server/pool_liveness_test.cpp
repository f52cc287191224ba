// The Pool and attempt leases (server/node_liveness.h): work of a node that
// went silent, was revoked or left starts elsewhere only once its leases
// have certainly ended; what the stale attempt says afterwards is refused;
// and a wall clock stepped by hours requeues, loses and charges nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/pool_testing.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHourMs = 3'600'000;

class PoolLivenessTest : public PoolTest {
 protected:
  // The lease ends lease + margin after the last renewal the server heard.
  static int64_t LeaseEndsAfter(const PoolOptions& o) {
    return o.attempt_lease_ms + LeaseMarginMs(o.attempt_lease_ms);
  }
  // Runs job 1 on node `name` (which says hello) and returns the node id.
  std::string RunJobOn(const std::string& name) {
    auto node = *pool_->AgentHello(MakeHello(name, 1));
    EXPECT_TRUE(pool_->Submit(Spec(1), "alice").ok());
    EXPECT_EQ(*pool_->Schedule(), 1);
    EXPECT_TRUE(
        Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()})
            .ok());
    EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
    return node.node_id;
  }
  JobState StateOf1() { return pool_->GetJob(1)->job.state; }
};

TEST_F(PoolLivenessTest, ASilentNodesJobStartsElsewhereOnlyOnceItsLeaseEnded) {
  PoolOptions o;
  o.node_lost_after_ms = 1'000;  // far shorter than the lease
  UseOptions(o);
  const std::string a = RunJobOn("a");
  clock_.AdvanceMs(10'000);
  pool_->AgentLeaseRequested(a);  // the agent's last renewal request
  const int64_t heard = clock_.MonoMs();
  clock_.AdvanceMs(5'000);
  ASSERT_TRUE(pool_->AgentDisconnected(a).ok());  // then silence
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  // Offline far longer than node_lost_after, but the shim on a may run the
  // job until the lease it was granted ends.
  clock_.AdvanceMs(heard + LeaseEndsAfter(o) - 1 - clock_.MonoMs());
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(StateOf1(), JobState::kRunning);
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kOffline);
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_TRUE(Starts(b.node_id).empty());
  clock_.AdvanceMs(1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(StateOf1(), JobState::kPending);
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kLost);
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_EQ(Starts(b.node_id).size(), 1u);
  EXPECT_EQ(Starts(b.node_id)[0].attempt_id, "1.2");
}

TEST_F(PoolLivenessTest, ARevokedNodesJobsAreRequeuedOnceTheirLeasesEnd) {
  const std::string a = RunJobOn("a");
  const int64_t heard = clock_.MonoMs();  // its hello
  ASSERT_TRUE(pool_->RevokeNode("a", "stolen laptop").ok());
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kLost);
  EXPECT_FALSE(pool_->connected(a));
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(StateOf1(), JobState::kRunning) << "the revoked agent may still run it";
  clock_.AdvanceMs(heard + LeaseEndsAfter(PoolOptions{}) - 1 - clock_.MonoMs());
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(StateOf1(), JobState::kRunning);
  clock_.AdvanceMs(1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kPending);
  EXPECT_THAT(d.attempts[0].reason, HasSubstr("was revoked: stolen laptop"));
}

TEST_F(PoolLivenessTest, ARestartedServerWaitsAWholeLeaseForEveryNode) {
  const std::string a = RunJobOn("a");
  ASSERT_TRUE(pool_->RevokeNode("a", "gone").ok());
  clock_.AdvanceMs(20'000);
  Restart();  // the lease the agent may hold counts from the restart now
  ASSERT_TRUE(pool_->Recover().ok());
  clock_.AdvanceMs(LeaseEndsAfter(PoolOptions{}) - 1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(StateOf1(), JobState::kRunning);
  clock_.AdvanceMs(1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(StateOf1(), JobState::kPending);
  EXPECT_THAT(pool_->GetJob(1)->attempts[0].reason, HasSubstr("node a is lost"));
}

// What the stale attempt says once its replacement started (success,
// output, a checkpoint) is refused, and it is told to stop.
TEST_F(PoolLivenessTest, AStaleAttemptsSuccessOutputAndCheckpointAreRefused) {
  const std::string a = RunJobOn("a");
  manifests_ = {std::string(64, 'c')};
  ASSERT_TRUE(pool_->AgentDisconnected(a).ok());
  clock_.AdvanceMs(PoolOptions{}.node_lost_after_ms + LeaseEndsAfter(PoolOptions{}));
  ASSERT_TRUE(pool_->CheckNodes().ok());
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(
      Report(b.node_id, 1, {"1.2", proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}).ok());

  // Agent a comes back, still holding 1.1, which ended well meanwhile.
  proto::Hello back = MakeHello("a", 1, "i2");
  back.tasks = {{"1.1", proto::TaskState::kExited, 0, 0, "", clock_.NowMs()}};
  ASSERT_TRUE(pool_->AgentHello(back).ok());
  proto::LogChunk chunk;
  chunk.attempt_id = "1.1";
  chunk.lines = {{0, "stdout", clock_.NowMs(), "RESULT from the stale attempt"}};
  ASSERT_TRUE(pool_->AgentMessage(a, 1, std::string(proto::kLogs), proto::Encode(chunk)).ok());
  ASSERT_TRUE(Report(a, 2, {"1.1", proto::TaskState::kExited, 0, 0, "", clock_.NowMs()}).ok());
  CheckpointRequest ckpt;
  ckpt.job_id = 1;
  ckpt.attempt_id = "1.1";
  ckpt.manifest = std::string(64, 'c');
  auto added = pool_->AddCheckpoint(ckpt);
  EXPECT_EQ(added.status().code(), StatusCode::kAborted);

  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kRunning);
  EXPECT_EQ(d.job.current_attempt, "1.2");
  EXPECT_EQ(d.attempts[0].state, AttemptState::kLost);
  auto page = pool_->ReadLogs(1, 0, 100);
  ASSERT_TRUE(page.ok());
  for (const LogLine& l : page->lines) {
    EXPECT_NE(l.text, "RESULT from the stale attempt");
  }
  EXPECT_TRUE(pool_->ListCheckpoints(1)->empty());
}

// Issue 19, hole 11: the server runs on a SteadyWallClock (common/clock.h),
// so an operator or NTP stepping the system clock by hours, either way,
// neither loses a node, nor requeues a job, nor charges for the jump.
TEST_F(PoolLivenessTest, WallClockJumpsRequeueLoseAndChargeNothing) {
  SteadyWallClock server_clock(clock_);
  PoolOptions o;
  o.scheduler.half_life_ms = 0;  // no decay: exact numbers
  pool_ = std::make_unique<Pool>(*store_, server_clock, o, hooks_);
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  JobSpec spec = Spec(1);
  spec.group = "vision";
  ASSERT_TRUE(pool_->Submit(spec, "alice").ok());
  ASSERT_TRUE(pool_->Submit(spec, "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 2);
  // Job 1 or 2 runs on b; b's agent disconnects (it will be back soon).
  const std::string on_b = Starts(b.node_id).at(0).attempt_id;
  const std::string on_a = Starts(a.node_id).at(0).attempt_id;
  ASSERT_TRUE(
      Report(a.node_id, 1, {on_a, proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}).ok());
  ASSERT_TRUE(
      Report(b.node_id, 1, {on_b, proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}).ok());
  ASSERT_TRUE(pool_->AgentDisconnected(b.node_id).ok());

  clock_.AdvanceMs(5'000);
  clock_.JumpWallMs(6 * kHourMs);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  ASSERT_TRUE(pool_->Schedule().ok());
  clock_.AdvanceMs(5'000);
  clock_.JumpWallMs(-12 * kHourMs);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  ASSERT_TRUE(pool_->Schedule().ok());
  EXPECT_EQ(NodeNamed("b").node.state, NodeState::kOffline);
  for (int64_t job : {1, 2}) EXPECT_EQ(pool_->GetJob(job)->job.state, JobState::kRunning);

  // b returns; the job on a ends 10 s after it started: 10 s are charged.
  proto::Hello b_back = MakeHello("b", 1, "i2");
  b_back.tasks = {{on_b, proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}};
  ASSERT_TRUE(pool_->AgentHello(b_back).ok());
  for (int64_t job : {1, 2}) EXPECT_EQ(pool_->GetJob(job)->job.state, JobState::kRunning);
  ASSERT_TRUE(
      Report(a.node_id, 2, {on_a, proto::TaskState::kExited, 0, 0, "", clock_.NowMs()}).ok());
  auto usage = StoredUsage("vision");
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ(usage->milli_ms, 1000 * 10'000);
  auto attempts = pool_->GetJob(std::stoll(on_a.substr(0, on_a.find('.'))))->attempts;
  EXPECT_EQ(attempts[0].finished_ms - attempts[0].created_ms, 10'000);
}

}  // namespace
}  // namespace gpupool::server
