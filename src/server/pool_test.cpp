// Pool tests on a real SQLite store in a temporary directory and a fake clock.
#include "server/pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "server/pool_testing.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

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

  ASSERT_TRUE(
      Report(node->node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}).ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
  ASSERT_TRUE(
      Report(node->node_id, 2, {"1.1", proto::TaskState::kExited, 0, 0, "", clock_.NowMs()}).ok());
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
  EXPECT_EQ(pool_->ReadLogs(1, 0, 100)->lines.size(), 1u);
}

TEST_F(PoolTest, FailedExitAndMaxRuntimeFailure) {
  auto node = *pool_->AgentHello(MakeHello("a", 2));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 2);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kExited, 3, 0, "", 0}).ok());
  ASSERT_TRUE(Report(node.node_id, 2,
                     {"2.1", proto::TaskState::kFailed, 143, 15, "exceeded max_runtime of 1s", 0})
                  .ok());
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
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  auto job = pool_->Cancel(1);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kCancelled);
  auto orders = *pool_->PendingOrders(node.node_id, 0);
  ASSERT_EQ(orders.back().type, proto::kStop);
  EXPECT_EQ(proto::DecodeStopTask(orders.back().body)->attempt_id, "1.1");
  ASSERT_TRUE(Report(node.node_id, 2, {"1.1", proto::TaskState::kExited, 143, 15, "", 0}).ok());
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
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
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
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  proto::LogChunk c{"1.1", {{0, "stdout", 1, "abc"}}};
  ASSERT_TRUE(
      pool_->AgentMessage(node.node_id, 2, std::string(proto::kLogs), proto::Encode(c)).ok());
  ASSERT_TRUE(pool_->AgentDisconnected(node.node_id).ok());
  proto::Hello h = MakeHello("a", 1, "same");
  h.last_server_seq = 1;
  h.tasks = {{"1.1", proto::TaskState::kRunning, 0, 0, "", 0}};
  auto w = *pool_->AgentHello(h);
  EXPECT_EQ(w.last_agent_seq, 2);
  EXPECT_EQ(w.log_offsets.at("1.1"), 0);  // the last line it has starts at 0
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
}

TEST_F(PoolTest, StaleAttemptIsFencedAndStopped) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  proto::Hello h = MakeHello("a", 1);
  h.tasks = {{"99.1", proto::TaskState::kRunning, 0, 0, "", 0}};
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
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
}

TEST_F(PoolTest, InvalidSpecIsRejectedAndNothingStored) {
  JobSpec s;  // neither run nor command
  EXPECT_EQ(pool_->Submit(s, "u").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool_->ListJobs({})->empty());
}

TEST_F(PoolTest, TwoHalfSharesLandOnOneGpuAndAThirdWaits) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec half = Spec(0);
  half.resources.gpu_milli = 500;
  half.resources.gpu_memory_mib = 10240;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool_->Submit(half, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 2);
  auto starts = Starts(node.node_id);
  ASSERT_EQ(starts.size(), 2u);
  for (const auto& s : starts) {
    EXPECT_EQ(s.gpu_uuids, std::vector<std::string>{"a-gpu0"});
    EXPECT_EQ(s.gpu_milli, 500);
    EXPECT_EQ(s.gpu_memory_mib, 10240);
  }
  auto d = *pool_->GetJob(1);
  ASSERT_EQ(d.attempts.size(), 1u);
  EXPECT_EQ(d.attempts[0].gpu_milli, 500);
  EXPECT_EQ(d.attempts[0].gpu_memory_mib, 10240);
  auto third = *pool_->GetJob(3);
  EXPECT_EQ(third.job.state, JobState::kPending);
  EXPECT_FALSE(third.job.reason.empty());
  EXPECT_NE(third.job.reason, "waiting for the scheduler");
  ASSERT_TRUE(third.queue.has_value());
  // First among the jobs still waiting: the two placed shares left the line.
  EXPECT_EQ(third.queue->position, 1);
  EXPECT_FALSE(third.queue->explanation.empty());
  // When one share ends, the third takes its place on the same GPU.
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kExited, 0, 0, "", 0}).ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(3)->attempts.at(0).gpu_uuids, std::vector<std::string>{"a-gpu0"});
  EXPECT_FALSE(pool_->GetJob(3)->queue.has_value());
}

TEST_F(PoolTest, ConstraintsReachTheScheduler) {
  proto::Hello h = MakeHello("a", 1);
  h.labels = {{"zone", "eu-1"}};
  h.owner_group = "vision";
  auto node = *pool_->AgentHello(h);
  auto n = (*pool_->ListNodes())[0].node;
  EXPECT_EQ(n.owner_group, "vision");
  EXPECT_EQ(n.labels, (std::map<std::string, std::string>{{"zone", "eu-1"}}));
  JobSpec cc = Spec(1);
  cc.resources.min_compute_capability = 90;  // the A100s are 8.0
  JobSpec label = Spec(1);
  label.resources.node_labels = {{"zone", "us-2"}};
  JobSpec fits = Spec(1);
  fits.resources.node_labels = {{"zone", "eu-1"}};
  fits.resources.min_compute_capability = 80;
  ASSERT_TRUE(pool_->Submit(cc, "u").ok());
  ASSERT_TRUE(pool_->Submit(label, "u").ok());
  ASSERT_TRUE(pool_->Submit(fits, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(Starts(node.node_id).at(0).attempt_id, "3.1");
  auto j1 = *pool_->GetJob(1);
  EXPECT_THAT(j1.job.reason, HasSubstr("compute capability"));
  EXPECT_TRUE(j1.queue->unsatisfiable);
  EXPECT_THAT(pool_->GetJob(2)->job.reason, HasSubstr("zone=us-2"));
}

TEST_F(PoolTest, QueueIsInClassOrderWithPositions) {
  (void)*pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());  // takes the only GPU
  ASSERT_EQ(*pool_->Schedule(), 1);
  JobSpec opp = Spec(1), normal = Spec(1), inter = Spec(1);
  opp.priority = JobPriority::kOpportunistic;
  inter.priority = JobPriority::kInteractive;
  ASSERT_TRUE(pool_->Submit(opp, "u").ok());     // 2
  ASSERT_TRUE(pool_->Submit(normal, "v").ok());  // 3
  ASSERT_TRUE(pool_->Submit(inter, "u").ok());   // 4
  ASSERT_EQ(*pool_->Schedule(), 0);              // job 1 is not preemptible
  auto q = *pool_->Queue(std::nullopt);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].job.id, 4);
  EXPECT_EQ(q[1].job.id, 3);
  EXPECT_EQ(q[2].job.id, 2);
  for (size_t i = 0; i < q.size(); ++i) {
    ASSERT_TRUE(q[i].queue.has_value());
    EXPECT_EQ(q[i].queue->position, static_cast<int64_t>(i + 1));
  }
  EXPECT_THAT(q[0].queue->explanation, HasSubstr("interactive"));
  // One user's view keeps the places in the whole queue.
  auto mine = *pool_->Queue(std::string("v"));
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].queue->position, 2);
  // A job submitted after the pass is listed last, without a place yet.
  ASSERT_TRUE(pool_->Submit(inter, "u").ok());
  q = *pool_->Queue(std::nullopt);
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[3].job.id, 5);
  EXPECT_FALSE(q[3].queue.has_value());
}

TEST_F(PoolTest, PreemptionStopsTheVictimWithItsGraceAndRequeuesIt) {
  PoolOptions o;
  o.scheduler.groups = {{"lab-a", 1, 0}, {"lab-b", 1, 0}};
  UseOptions(o);
  auto node = *pool_->AgentHello(MakeHello("a", 2));
  JobSpec victim = Spec(1);
  victim.group = "lab-a";
  victim.checkpoint = CheckpointSpec{0, 5'000, "SIGUSR1"};
  JobSpec keeper = Spec(1);  // no checkpoint section: never preempted
  keeper.group = "lab-a";
  ASSERT_TRUE(pool_->Submit(keeper, "u").ok());  // 1
  ASSERT_TRUE(pool_->Submit(victim, "u").ok());  // 2
  ASSERT_EQ(*pool_->Schedule(), 2);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(Report(node.node_id, 2, {"2.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  clock_.AdvanceMs(60'000);

  JobSpec inter = Spec(1);
  inter.group = "lab-b";
  inter.priority = JobPriority::kInteractive;
  ASSERT_TRUE(pool_->Submit(inter, "w").ok());  // 3
  EXPECT_EQ(*pool_->Schedule(), 0);
  auto stops = Stops(node.node_id);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].attempt_id, "2.1");
  EXPECT_EQ(stops[0].grace_ms, 5'000);
  EXPECT_THAT(stops[0].reason, HasSubstr("job 3"));
  auto v = *pool_->GetJob(2);
  EXPECT_EQ(v.job.state, JobState::kRunning);  // until the attempt has left
  EXPECT_EQ(v.job.last_preempted_ms, clock_.NowMs());
  EXPECT_THAT(v.job.reason, HasSubstr("being preempted"));
  EXPECT_EQ(v.attempts[0].preempt_for_job, 3);
  EXPECT_THAT(pool_->GetJob(3)->job.reason, HasSubstr("waiting for job 2 to leave"));

  // Passes while the victim leaves order nothing more.
  clock_.AdvanceMs(1000);
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_EQ(Stops(node.node_id).size(), 1u);

  // The agent reports the stopped job (it may exit however it likes).
  ASSERT_TRUE(Report(node.node_id, 3,
                     {"2.1", proto::TaskState::kExited, 143, 15, "stopped: " + stops[0].reason,
                      clock_.NowMs()})
                  .ok());
  v = *pool_->GetJob(2);
  EXPECT_EQ(v.job.state, JobState::kPending);
  EXPECT_THAT(v.job.reason, HasSubstr("requeued: attempt 2.1 was preempted for"));
  EXPECT_EQ(v.attempts[0].state, AttemptState::kPreempted);
  EXPECT_THAT(v.attempts[0].reason, HasSubstr("preempted for"));
  EXPECT_FALSE(v.job.exit_code.has_value());
  EXPECT_FALSE(v.job.front);
  // The interactive job takes the GPU; the keeper was never touched.
  ASSERT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(3)->job.state, JobState::kScheduled);
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
  EXPECT_EQ(pool_->GetJob(1)->attempts.size(), 1u);

  // A second interactive job finds no preemptible work (the keeper has no
  // checkpoint section, the victim is pending): it waits.
  JobSpec inter2 = inter;
  ASSERT_TRUE(pool_->Submit(inter2, "w").ok());  // 4
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_EQ(Stops(node.node_id).size(), 1u);

  // When the interactive jobs end, the victim runs again as attempt 2.
  ASSERT_TRUE(Report(node.node_id, 4, {"3.1", proto::TaskState::kExited, 0, 0, "", 0}).ok());
  ASSERT_EQ(*pool_->Schedule(), 1);  // job 4 (interactive) first
  EXPECT_EQ(pool_->GetJob(4)->job.state, JobState::kScheduled);
  ASSERT_TRUE(Report(node.node_id, 5, {"4.1", proto::TaskState::kExited, 0, 0, "", 0}).ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  v = *pool_->GetJob(2);
  EXPECT_EQ(v.job.current_attempt, "2.2");
  EXPECT_EQ(v.job.attempts, 2);
  // The anti-thrash window survives the new attempt.
  EXPECT_TRUE(v.job.last_preempted_ms.has_value());
}

TEST_F(PoolTest, AnAttemptThatFinishedBeforeItsStopSucceeds) {
  PoolOptions o;
  o.scheduler.groups = {{"lab-a", 1, 0}};
  UseOptions(o);
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec victim = Spec(1);
  victim.group = "lab-a";
  victim.checkpoint = CheckpointSpec{};
  ASSERT_TRUE(pool_->Submit(victim, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  JobSpec inter = Spec(1);
  inter.priority = JobPriority::kInteractive;
  ASSERT_TRUE(pool_->Submit(inter, "w").ok());
  EXPECT_EQ(*pool_->Schedule(), 0);
  auto stops = Stops(node.node_id);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].grace_ms, kDefaultStopGraceMs);
  // It exited cleanly on its own before the stop reached it.
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kExited, 0, 0, "", 0}).ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kSucceeded);
  EXPECT_EQ(d.attempts[0].state, AttemptState::kSucceeded);
}

TEST_F(PoolTest, UsageIsChargedWhenAttemptsEndAndSurvivesARestart) {
  PoolOptions o;
  o.scheduler.half_life_ms = 0;  // no decay: exact numbers
  UseOptions(o);
  auto node = *pool_->AgentHello(MakeHello("a", 2));
  JobSpec two = Spec(2);
  two.group = "vision";
  ASSERT_TRUE(pool_->Submit(two, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  clock_.AdvanceMs(10'000);
  // While it runs, the usage is counted but not written.
  EXPECT_FALSE(StoredUsage("vision").has_value());
  auto groups = *pool_->Groups();
  auto vision = std::find_if(groups.begin(), groups.end(),
                             [](const GroupStatus& g) { return g.name == "vision"; });
  ASSERT_NE(vision, groups.end());
  EXPECT_EQ(vision->usage_milli_ms, 2000 * 10'000);
  EXPECT_EQ(vision->allocated_milli, 2000);
  EXPECT_EQ(vision->running_jobs, 1);
  EXPECT_FALSE(vision->configured);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kExited, 0, 0, "", 0}).ok());
  auto stored = StoredUsage("vision");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->milli_ms, 2000 * 10'000);
  EXPECT_EQ(stored->as_of_ms, clock_.NowMs());

  Restart();
  clock_.AdvanceMs(5'000);
  groups = *pool_->Groups();
  vision = std::find_if(groups.begin(), groups.end(),
                        [](const GroupStatus& g) { return g.name == "vision"; });
  ASSERT_NE(vision, groups.end());
  EXPECT_EQ(vision->usage_milli_ms, 2000 * 10'000);
  EXPECT_EQ(vision->allocated_milli, 0);
  EXPECT_DOUBLE_EQ(vision->usage_fraction, 1.0);
}

TEST_F(PoolTest, UsageDecaysWithTheHalfLife) {
  PoolOptions o;
  o.scheduler.half_life_ms = 3'600'000;
  o.scheduler.groups = {{"nlp", 3, 2000}};
  UseOptions(o);
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec s = Spec(1);
  s.group = "nlp";
  ASSERT_TRUE(pool_->Submit(s, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  clock_.AdvanceMs(60'000);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kExited, 0, 0, "", 0}).ok());
  int64_t charged = StoredUsage("nlp")->milli_ms;
  EXPECT_GT(charged, 0);
  EXPECT_LT(charged, 1000 * 60'000);  // integrated decay charges a little less
  clock_.AdvanceMs(3'600'000);
  auto groups = *pool_->Groups();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_TRUE(groups[0].configured);
  EXPECT_EQ(groups[0].weight, 3);
  EXPECT_EQ(groups[0].guaranteed_milli, 2000);
  EXPECT_NEAR(static_cast<double>(groups[0].usage_milli_ms), charged / 2.0, 2.0);
}

TEST_F(PoolTest, LostNodeRequeuesTheJobToTheFrontOfItsClass) {
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(pool_->AgentDisconnected(a.node_id).ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());  // 2, submitted later
  clock_.AdvanceMs(PoolOptions{}.node_lost_after_ms + 1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_TRUE(pool_->GetJob(1)->job.front);
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto starts = Starts(b.node_id);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].attempt_id, "1.2");
  EXPECT_FALSE(pool_->GetJob(1)->job.front);  // placed: no longer displaced
}

// ---- provider policies

TEST_F(PoolTest, VacatedJobIsRequeuedAtTheFrontAndRunsElsewhere) {
  PoolOptions o;
  o.scheduler.half_life_ms = 0;  // exact usage
  UseOptions(o);
  proto::Hello ha = MakeHello("a", 1);
  ha.lending = LendsAll(ha);
  auto a = *pool_->AgentHello(ha);
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());  // 1
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(a.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "bob").ok());  // 2, waits
  EXPECT_EQ(*pool_->Schedule(), 0);
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  clock_.AdvanceMs(60'000);

  // The owner takes the GPU back: the agent stops the job and says so.
  NodeLending reclaimed;
  reclaimed.not_lent = {{"a-gpu0", "reclaimed by the owner"}};
  ASSERT_TRUE(SendLending(a.node_id, 2, reclaimed).ok());
  ASSERT_TRUE(
      Report(a.node_id, 3,
             {"1.1", proto::TaskState::kVacated, 0, 15, "reclaimed by the owner", clock_.NowMs()})
          .ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kPending);
  EXPECT_TRUE(d.job.front);
  EXPECT_EQ(d.job.reason, "vacated: reclaimed by the owner; requeued");
  EXPECT_FALSE(d.job.exit_code.has_value());
  EXPECT_EQ(d.attempts[0].state, AttemptState::kVacated);
  ASSERT_TRUE(StoredUsage("default").has_value());
  EXPECT_EQ(StoredUsage("default")->milli_ms, 1000 * 60'000);
  EXPECT_EQ(NodeNamed("a").status, "reclaimed");

  // It goes before job 2, on the other node.
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto starts = Starts(b.node_id);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].attempt_id, "1.2");
  EXPECT_EQ(starts[0].owner, "alice");
  EXPECT_EQ(pool_->GetJob(2)->job.state, JobState::kPending);
}

TEST_F(PoolTest, RefusedJobIsRequeuedAndAvoidsTheNodeForAWhile) {
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  std::string why = "refused by the provider's policy: outside its availability windows";
  ASSERT_TRUE(Report(a.node_id, 1, {"1.1", proto::TaskState::kRefused, 0, 0, why, 0}).ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kPending);
  EXPECT_TRUE(d.job.front);
  EXPECT_EQ(d.job.reason, "requeued: attempt 1.1 was refused (" + why + ")");
  EXPECT_EQ(d.attempts[0].state, AttemptState::kRefused);

  // The next passes leave node a alone, and say why.
  EXPECT_EQ(*pool_->Schedule(), 0);
  d = *pool_->GetJob(1);
  EXPECT_THAT(d.job.reason, HasSubstr("excluded for it"));
  EXPECT_THAT(d.job.reason, HasSubstr("a (it refused the job lately)"));
  EXPECT_TRUE(d.queue->unsatisfiable);
  // Other jobs still go there.
  ASSERT_TRUE(pool_->Submit(Spec(0), "bob").ok());
  EXPECT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(2)->job.state, JobState::kScheduled);
  // After a while it is tried there again.
  clock_.AdvanceMs(PoolOptions{}.refusal_avoid_ms);
  ASSERT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(1)->job.current_attempt, "1.2");
}

TEST_F(PoolTest, NodesThatDoNotLendNowGetNothing) {
  proto::Hello h = MakeHello("a", 1);
  NodeLending l = LendsAll(h);
  l.mode = "paused";
  h.lending = l;
  auto a = *pool_->AgentHello(h);
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_EQ(NodeNamed("a").status, "paused");
  l.mode = "closed";
  ASSERT_TRUE(SendLending(a.node_id, 1, l).ok());
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_EQ(NodeNamed("a").status, "reclaimed");
  ASSERT_TRUE(NodeNamed("a").node.lending.has_value());
  EXPECT_EQ(NodeNamed("a").node.lending->mode, "closed");
  int before = schedule_requests_;
  l.mode = "lending";
  ASSERT_TRUE(SendLending(a.node_id, 2, l).ok());
  EXPECT_GT(schedule_requests_, before);  // room may have appeared
  EXPECT_EQ(NodeNamed("a").status, "available");
  EXPECT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(NodeNamed("a").status, "busy");
}

TEST_F(PoolTest, OnlyLentGpusArePlaced) {
  proto::Hello h = MakeHello("a", 2);
  h.lending = NodeLending{};
  h.lending->gpus = {{"a-gpu1", 81920}};
  h.lending->not_lent = {{"a-gpu0", "not lent by the policy"}};
  auto a = *pool_->AgentHello(h);
  ASSERT_TRUE(pool_->Submit(Spec(2), "u").ok());  // 1: two GPUs, only one lent
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());  // 2
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());  // 3
  EXPECT_EQ(*pool_->Schedule(), 1);
  auto starts = Starts(a.node_id);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].gpu_uuids, std::vector<std::string>{"a-gpu1"});
  EXPECT_EQ(pool_->GetJob(3)->job.state, JobState::kPending);
  EXPECT_EQ(NodeNamed("a").status, "busy");
}

TEST_F(PoolTest, AGpuLentInPartTakesSharesOnly) {
  proto::Hello h = MakeHello("a", 1);
  h.lending = NodeLending{};
  h.lending->gpus = {{"a-gpu0", 40960}};  // half of its 80 GiB
  auto a = *pool_->AgentHello(h);
  JobSpec share = Spec(0);
  share.resources.gpu_milli = 500;
  share.resources.gpu_memory_mib = 20480;
  JobSpec too_big = share;
  too_big.resources.gpu_memory_mib = 50 * 1024;
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());  // 1: the whole GPU
  ASSERT_TRUE(pool_->Submit(too_big, "u").ok());  // 2: more memory than lent
  ASSERT_TRUE(pool_->Submit(share, "u").ok());    // 3
  EXPECT_EQ(*pool_->Schedule(), 1);
  auto starts = Starts(a.node_id);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].attempt_id, "3.1");
  EXPECT_EQ(starts[0].gpu_milli, 500);
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kPending);
  EXPECT_EQ(pool_->GetJob(2)->job.state, JobState::kPending);
  EXPECT_EQ(NodeNamed("a").status, "available");  // half a GPU is still free
}

TEST_F(PoolTest, WholeGpuOnlyNodesTakeNoShares) {
  proto::Hello h = MakeHello("a", 1);
  h.lending = LendsAll(h);
  h.lending->sharing = GpuSharing::kNone;
  (void)*pool_->AgentHello(h);
  JobSpec share = Spec(0);
  share.resources.gpu_milli = 500;
  ASSERT_TRUE(pool_->Submit(share, "u").ok());    // 1
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());  // 2
  EXPECT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(2)->job.state, JobState::kScheduled);
  auto one = *pool_->GetJob(1);
  EXPECT_EQ(one.job.state, JobState::kPending);
  EXPECT_THAT(one.job.reason, HasSubstr("whole GPUs only (its policy's sharing is none)"));
}

TEST_F(PoolTest, AnMpsGpuHoldsTheSharesOfOneUserAtATime) {
  proto::Hello h = MakeHello("a", 2);
  h.lending = LendsAll(h);
  h.lending->sharing = GpuSharing::kMps;
  auto a = *pool_->AgentHello(h);
  JobSpec share = Spec(0);
  share.resources.gpu_milli = 300;
  ASSERT_TRUE(pool_->Submit(share, "alice").ok());  // 1
  EXPECT_EQ(*pool_->Schedule(), 1);
  // Across passes: bob's share goes on the other GPU, not on alice's.
  ASSERT_TRUE(pool_->Submit(share, "bob").ok());    // 2
  ASSERT_TRUE(pool_->Submit(share, "alice").ok());  // 3
  EXPECT_EQ(*pool_->Schedule(), 2);
  std::map<int64_t, std::string> gpu;
  for (const proto::StartTask& s : Starts(a.node_id)) gpu[s.job_id] = s.gpu_uuids.at(0);
  ASSERT_EQ(gpu.size(), 3u);
  EXPECT_EQ(gpu[3], gpu[1]);  // alice's stack
  EXPECT_NE(gpu[2], gpu[1]);
  // Both GPUs are held now, by one user each: carol's share waits.
  ASSERT_TRUE(pool_->Submit(share, "carol").ok());  // 4
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_EQ(pool_->GetJob(4)->job.state, JobState::kPending);
  // The same on a node that shares through the interposer: carol fits.
  h.lending->sharing = GpuSharing::kInterposer;
  ASSERT_TRUE(SendLending(a.node_id, 1, *h.lending).ok());
  EXPECT_EQ(*pool_->Schedule(), 1);
}

TEST_F(PoolTest, AllowedUsersAndMaxRuntimeKeepOtherJobsAway) {
  proto::Hello h = MakeHello("a", 4);
  h.lending = LendsAll(h);
  h.lending->allow_users = {"alice"};
  h.lending->max_runtime_ms = 3'600'000;
  (void)*pool_->AgentHello(h);
  JobSpec short_job = Spec(1);
  short_job.max_runtime_ms = 1'800'000;
  JobSpec long_job = Spec(1);
  long_job.max_runtime_ms = 2 * 3'600'000;
  ASSERT_TRUE(pool_->Submit(short_job, "bob").ok());    // 1: not lent to bob
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());    // 2: no max_runtime
  ASSERT_TRUE(pool_->Submit(long_job, "alice").ok());   // 3: too long
  ASSERT_TRUE(pool_->Submit(short_job, "alice").ok());  // 4
  EXPECT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(4)->job.state, JobState::kScheduled);
  auto bob = pool_->GetJob(1)->job;
  EXPECT_EQ(bob.state, JobState::kPending);
  EXPECT_THAT(bob.reason, HasSubstr("does not lend to user \"bob\" (lends to: alice)"));
  EXPECT_THAT(pool_->GetJob(2)->job.reason, HasSubstr("the job gives none"));
  EXPECT_THAT(pool_->GetJob(3)->job.reason, HasSubstr("max_runtime at most"));
}

TEST_F(PoolTest, NodeEventsAreStoredAndListed) {
  auto a = *pool_->AgentHello(MakeHello("a", 2));
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  NodeEvent reclaim;
  reclaim.ts_ms = 1000;
  reclaim.kind = "reclaim";
  reclaim.reason = "reclaimed by the owner";
  reclaim.gpus = {"a-gpu0"};
  reclaim.attempts = {"7.1"};
  NodeEvent pause;
  pause.ts_ms = 2000;
  pause.kind = "pause";
  auto send = [&](const std::string& node, int64_t seq, const NodeEvent& e) {
    return pool_->AgentMessage(node, seq, std::string(proto::kNodeEvent), proto::Encode(e));
  };
  ASSERT_TRUE(send(a.node_id, 1, reclaim).ok());
  ASSERT_TRUE(send(a.node_id, 1, reclaim).ok());  // a resend is applied once
  ASSERT_TRUE(send(b.node_id, 1, pause).ok());
  ASSERT_TRUE(send(a.node_id, 2, pause).ok());

  auto all = *pool_->NodeEvents("", "", 0, 0, 100);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].node_name, "a");
  EXPECT_EQ(all[0].event.node_id, a.node_id);
  EXPECT_EQ(all[0].event.kind, "reclaim");
  EXPECT_EQ(all[0].event.reason, "reclaimed by the owner");
  EXPECT_EQ(all[0].event.gpus, std::vector<std::string>{"a-gpu0"});
  EXPECT_EQ(all[0].event.attempts, std::vector<std::string>{"7.1"});
  EXPECT_EQ(all[1].node_name, "b");
  auto of_a = *pool_->NodeEvents("a", "", 0, 0, 100);
  ASSERT_EQ(of_a.size(), 2u);
  EXPECT_EQ(of_a[1].event.kind, "pause");
  EXPECT_EQ(pool_->NodeEvents(a.node_id, "", 0, 0, 100)->size(), 2u);  // by id too
  EXPECT_EQ(pool_->NodeEvents("a", "", of_a[0].event.id, 0, 100)->size(), 1u);
  auto reclaims = *pool_->NodeEvents("", "reclaim", 0, 0, 100);
  ASSERT_EQ(reclaims.size(), 1u);
  EXPECT_EQ(reclaims[0].event.id, all[0].event.id);
  // A kind filter fills its page across the log.
  auto pauses = *pool_->NodeEvents("", "pause", 0, 0, 1);
  ASSERT_EQ(pauses.size(), 1u);
  EXPECT_EQ(pauses[0].node_name, "b");
  // Newest first, a kind filter filling its page downwards.
  auto newest = *pool_->NodeEvents("", "", 0, INT64_MAX, 2);
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0].event.id, all[2].event.id);
  EXPECT_EQ(newest[1].event.id, all[1].event.id);
  auto last_pause = *pool_->NodeEvents("", "pause", 0, INT64_MAX, 1);
  ASSERT_EQ(last_pause.size(), 1u);
  EXPECT_EQ(last_pause[0].node_name, "a");
  auto older = *pool_->NodeEvents("", "pause", 0, last_pause[0].event.id, 100);
  ASSERT_EQ(older.size(), 1u);
  EXPECT_EQ(older[0].node_name, "b");
  EXPECT_EQ(pool_->NodeEvents("nope", "", 0, 0, 100).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(pool_->NodeEvents("", "nap", 0, 0, 100).status().code(), StatusCode::kInvalidArgument);
  // Each event is in the audit log too, once.
  std::vector<AuditEntry> audit;
  ASSERT_TRUE(store_
                  ->Transact([&](Tx& tx) -> Status {
                    GP_ASSIGN_OR_RETURN(audit, tx.ListAudit(0, 0, 100));
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_EQ(audit.size(), 3u);
  EXPECT_EQ(audit[0].actor, "node:a");
  EXPECT_EQ(audit[0].action, "node.reclaim");
  EXPECT_EQ(audit[0].detail, "reclaimed by the owner; vacated 7.1");
  EXPECT_EQ(audit[1].action, "node.pause");
}

TEST_F(PoolTest, ANodeThatLeftGetsNothingUntilItsAgentReturns) {
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(a.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  // A leave with work still there (the drain was cut short) requeues it,
  // once the attempt's lease has certainly ended.
  proto::Leave leave{"the owner ran gpupool agent leave"};
  ASSERT_TRUE(
      pool_->AgentMessage(a.node_id, 2, std::string(proto::kLeave), proto::Encode(leave)).ok());
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kLeft);
  EXPECT_EQ(NodeNamed("a").status, "left");
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning);
  EXPECT_EQ(*pool_->Schedule(), 0);
  // The agent exits; the node stays left, never lost.
  ASSERT_TRUE(pool_->AgentDisconnected(a.node_id).ok());
  ASSERT_TRUE(pool_->CheckNodes().ok());
  EXPECT_EQ(pool_->GetJob(1)->job.state, JobState::kRunning) << "its lease has not ended";
  clock_.AdvanceMs(PoolOptions{}.node_lost_after_ms + 1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  auto d = *pool_->GetJob(1);
  EXPECT_EQ(d.job.state, JobState::kPending);
  EXPECT_TRUE(d.job.front);
  EXPECT_EQ(d.attempts[0].reason, "the node left the pool");
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kLeft);
  Restart();
  ASSERT_TRUE(pool_->Recover().ok());
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kLeft);
  // The provider rejoins.
  auto again = *pool_->AgentHello(MakeHello("a", 1, "i2"));
  EXPECT_EQ(again.node_id, a.node_id);
  EXPECT_EQ(NodeNamed("a").node.state, NodeState::kReady);
  ASSERT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(pool_->GetJob(1)->job.current_attempt, "1.2");
}

// ------------------------------------------------------------- checkpoints

std::string ManifestId(char digit) { return std::string(64, digit); }

CheckpointRequest Ckpt(int64_t job, const std::string& attempt, char manifest) {
  CheckpointRequest r;
  r.job_id = job;
  r.attempt_id = attempt;
  r.manifest = ManifestId(manifest);
  r.bytes = 100;
  r.files = 2;
  return r;
}

std::vector<int64_t> CheckpointNumbers(const std::vector<Checkpoint>& cs) {
  std::vector<int64_t> out;
  for (const Checkpoint& c : cs) out.push_back(c.number);
  return out;
}

TEST_F(PoolTest, CheckpointOfTheLiveAttemptIsNumberedAndStored) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  manifests_ = {ManifestId('a'), ManifestId('b')};
  auto first = pool_->AddCheckpoint(Ckpt(1, "1.1", 'a'));  // scheduled counts as live
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->checkpoint.number, 1);
  EXPECT_EQ(first->checkpoint.attempt_id, "1.1");
  EXPECT_EQ(first->checkpoint.created_ms, clock_.NowMs());
  EXPECT_EQ(first->checkpoint.bytes, 100);
  EXPECT_EQ(first->checkpoint.files, 2);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  auto second = pool_->AddCheckpoint(Ckpt(1, "1.1", 'b'));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->checkpoint.number, 2);
  EXPECT_EQ(CheckpointNumbers(*pool_->ListCheckpoints(1)), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(pool_->GetCheckpoint(1, 0)->number, 2);  // latest
  EXPECT_EQ(pool_->GetCheckpoint(1, 1)->manifest, ManifestId('a'));
  EXPECT_EQ(pool_->GetCheckpoint(1, 3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(pool_->ListCheckpoints(9).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(pool_->GetJob(1)->attempts[0].last_checkpoint_ms, clock_.NowMs());
}

TEST_F(PoolTest, CheckpointRetryOfTheNewestIsIdempotent) {
  ASSERT_TRUE(pool_->AgentHello(MakeHello("a", 1)).ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  manifests_ = {ManifestId('a'), ManifestId('b')};
  auto first = *pool_->AddCheckpoint(Ckpt(1, "1.1", 'a'));
  clock_.AdvanceMs(1000);
  auto again = pool_->AddCheckpoint(Ckpt(1, "1.1", 'a'));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->checkpoint, first.checkpoint);
  // Not the newest any more: the same manifest again is a new checkpoint.
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'b')).ok());
  auto third = *pool_->AddCheckpoint(Ckpt(1, "1.1", 'a'));
  EXPECT_TRUE(third.created);
  EXPECT_EQ(third.checkpoint.number, 3);
}

TEST_F(PoolTest, CheckpointOfAStaleAttemptIsFencedOff) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "bob").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  manifests_ = {ManifestId('a')};
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(
      Report(node.node_id, 2, {"1.1", proto::TaskState::kVacated, 0, 15, "reclaimed", 0}).ok());
  ASSERT_EQ(*pool_->Schedule(), 1);  // 1.2
  ASSERT_EQ(pool_->GetJob(1)->job.current_attempt, "1.2");
  auto stale = pool_->AddCheckpoint(Ckpt(1, "1.1", 'a'));
  EXPECT_EQ(stale.status().code(), StatusCode::kAborted);
  EXPECT_EQ(stale.status().message(), "attempt 1.1 is not the live attempt of job 1");
  // Not yet created, of another job, of a job with no attempt.
  EXPECT_EQ(pool_->AddCheckpoint(Ckpt(1, "1.3", 'a')).status().code(), StatusCode::kAborted);
  EXPECT_EQ(pool_->AddCheckpoint(Ckpt(2, "1.2", 'a')).status().code(), StatusCode::kAborted);
  EXPECT_EQ(pool_->AddCheckpoint(Ckpt(99, "99.1", 'a')).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(pool_->ListCheckpoints(1)->empty());
  EXPECT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.2", 'a')).ok());
  // A finished job takes no more.
  ASSERT_TRUE(pool_->Cancel(1).ok());
  manifests_.insert(ManifestId('b'));
  EXPECT_EQ(pool_->AddCheckpoint(Ckpt(1, "1.2", 'b')).status().code(), StatusCode::kAborted);
}

TEST_F(PoolTest, CheckpointNamingAManifestNotStoredIsRefused) {
  ASSERT_TRUE(pool_->AgentHello(MakeHello("a", 1)).ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto r = pool_->AddCheckpoint(Ckpt(1, "1.1", 'a'));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("is not stored"));
  EXPECT_TRUE(pool_->ListCheckpoints(1)->empty());
}

TEST_F(PoolTest, RetentionKeepsTheNewestCheckpoints) {
  PoolOptions o;
  o.checkpoint_keep = 2;
  UseOptions(o);
  ASSERT_TRUE(pool_->AgentHello(MakeHello("a", 1)).ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  for (char c : {'a', 'b', 'c', 'd'}) {
    manifests_.insert(ManifestId(c));
    ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", c)).ok());
  }
  auto kept = *pool_->ListCheckpoints(1);
  EXPECT_EQ(CheckpointNumbers(kept), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(kept[0].manifest, ManifestId('c'));
  // Deleted ones leave the reachable set; the job's inputs stay in it.
  EXPECT_EQ(*pool_->ReachableManifests(),
            (std::set<std::string>{ManifestId('c'), ManifestId('d')}));
}

TEST_F(PoolTest, NewAttemptRestoresTheNewestCheckpoint) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec spec = Spec(1);
  spec.checkpoint = CheckpointSpec{};
  ASSERT_TRUE(pool_->Submit(spec, "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto first = Starts(node.node_id);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].restore_checkpoint, 0);  // starts afresh
  EXPECT_EQ(first[0].restore_manifest, "");
  manifests_ = {ManifestId('a'), ManifestId('b')};
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'a')).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'b')).ok());
  ASSERT_TRUE(
      Report(node.node_id, 2, {"1.1", proto::TaskState::kVacated, 0, 15, "reclaimed", 0}).ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto starts = Starts(node.node_id);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[1].attempt_id, "1.2");
  EXPECT_EQ(starts[1].restore_checkpoint, 2);
  EXPECT_EQ(starts[1].restore_manifest, ManifestId('b'));
}

std::vector<proto::StageCheckpoint> Stages(Pool& pool, const std::string& node) {
  std::vector<proto::StageCheckpoint> out;
  for (const auto& m : *pool.PendingOrders(node, 0)) {
    if (m.type == proto::kStage) out.push_back(*proto::DecodeStageCheckpoint(m.body));
  }
  return out;
}

TEST_F(PoolTest, AVacatingJobsCheckpointIsStagedWhereItWouldRunNext) {
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec spec = Spec(1);
  spec.checkpoint = CheckpointSpec{};
  ASSERT_TRUE(pool_->Submit(spec, "alice").ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "bob").ok());  // no checkpoints
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  auto c = *pool_->AgentHello(MakeHello("c", 2));
  ASSERT_EQ(*pool_->Schedule(), 1);  // job 2 takes b, the tightest fit
  manifests_ = {ManifestId('a'), ManifestId('b')};
  ASSERT_TRUE(Report(a.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'a')).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'b')).ok());

  NodeEvent reclaim;
  reclaim.ts_ms = 1000;
  reclaim.kind = "reclaim";
  reclaim.reason = "reclaimed by the owner";
  reclaim.attempts = {"1.1"};
  ASSERT_TRUE(
      pool_->AgentMessage(a.node_id, 2, std::string(proto::kNodeEvent), proto::Encode(reclaim))
          .ok());
  // a is leaving and b is taken: c is where the job goes next.
  auto staged = Stages(*pool_, c.node_id);
  ASSERT_EQ(staged.size(), 1u);
  EXPECT_EQ(staged[0], (proto::StageCheckpoint{1, 2, ManifestId('b')}));
  EXPECT_TRUE(Stages(*pool_, a.node_id).empty());
  EXPECT_TRUE(Stages(*pool_, b.node_id).empty());
  // The dry run placed nothing: the job still runs on a.
  EXPECT_EQ(pool_->GetJob(1)->job.current_attempt, "1.1");
  EXPECT_TRUE(Starts(c.node_id).empty());

  // A vacated job without checkpoints stages nothing.
  reclaim.attempts = {"2.1"};
  ASSERT_TRUE(
      pool_->AgentMessage(b.node_id, 1, std::string(proto::kNodeEvent), proto::Encode(reclaim))
          .ok());
  EXPECT_EQ(Stages(*pool_, c.node_id).size(), 1u);
  EXPECT_TRUE(Stages(*pool_, a.node_id).empty());
}

TEST_F(PoolTest, AStandbyNodeGetsEveryNewCheckpointOfAJobThatAsks) {
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec spec = Spec(1);
  spec.checkpoint = CheckpointSpec{};
  spec.checkpoint->standby = true;
  ASSERT_TRUE(pool_->Submit(spec, "alice").ok());
  ASSERT_TRUE(pool_->Submit(Spec(1), "bob").ok());  // no standby: stages nothing
  ASSERT_EQ(*pool_->Schedule(), 1);
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  ASSERT_EQ(*pool_->Schedule(), 1);
  manifests_ = {ManifestId('a'), ManifestId('b'), ManifestId('c')};
  ASSERT_TRUE(Report(b.node_id, 1, {"2.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(2, "2.1", 'c')).ok());
  auto c = *pool_->AgentHello(MakeHello("c", 1));
  EXPECT_TRUE(Stages(*pool_, a.node_id).empty());
  ASSERT_TRUE(Report(a.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'a')).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'b')).ok());
  auto staged = Stages(*pool_, c.node_id);  // the only free node
  ASSERT_EQ(staged.size(), 2u);
  EXPECT_EQ(staged[0], (proto::StageCheckpoint{1, 1, ManifestId('a')}));
  EXPECT_EQ(staged[1], (proto::StageCheckpoint{1, 2, ManifestId('b')}));
  EXPECT_TRUE(Stages(*pool_, b.node_id).empty());

  // Vacating: staged again at once (nothing new); its last checkpoint is
  // left to the start order.
  NodeEvent reclaim;
  reclaim.ts_ms = 1000;
  reclaim.kind = "reclaim";
  reclaim.attempts = {"1.1"};
  ASSERT_TRUE(
      pool_->AgentMessage(a.node_id, 2, std::string(proto::kNodeEvent), proto::Encode(reclaim))
          .ok());
  EXPECT_EQ(Stages(*pool_, c.node_id).size(), 3u);
  manifests_.insert(ManifestId('d'));
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'd')).ok());
  EXPECT_EQ(Stages(*pool_, c.node_id).size(), 3u);
}

TEST_F(PoolTest, LostWorkCountsFromTheLastCheckpoint) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  ASSERT_TRUE(pool_->Submit(Spec(1), "alice").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  manifests_ = {ManifestId('a')};
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  clock_.AdvanceMs(600'000);
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, "1.1", 'a')).ok());
  clock_.AdvanceMs(300'000);
  ASSERT_TRUE(
      Report(node.node_id, 2, {"1.1", proto::TaskState::kVacated, 0, 15, "reclaimed", 0}).ok());
  auto attempt = pool_->GetJob(1)->attempts.at(0);
  EXPECT_EQ(attempt.state, AttemptState::kVacated);
  EXPECT_EQ(LostWorkMs(attempt), 300'000);  // not the 900 s it ran
}

TEST_F(PoolTest, SubmitChecksInputs) {
  JobSpec workdir_only = Spec(0);
  workdir_only.workdir = "/home/alice/proj";
  auto r = pool_->Submit(workdir_only, "alice");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("workdir: the gpupool CLI uploads the directory"));

  JobSpec with_inputs = Spec(0);
  with_inputs.workdir = "/home/alice/proj";
  with_inputs.inputs = ManifestId('c');
  r = pool_->Submit(with_inputs, "alice");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "inputs: manifest cccccccccccc... is not uploaded");
  EXPECT_TRUE(pool_->ListJobs({})->empty());

  manifests_ = {ManifestId('c')};
  ASSERT_TRUE(pool_->Submit(with_inputs, "alice").ok());
  EXPECT_EQ(*pool_->ReachableManifests(), std::set<std::string>{ManifestId('c')});
  ASSERT_TRUE(pool_->Cancel(1).ok());  // terminal: its inputs are collectable
  EXPECT_TRUE(pool_->ReachableManifests()->empty());
}

// ---- multi-node jobs (gangs)

class GangTest : public PoolTest {
 protected:
  JobSpec GangSpec(int nodes, Distributed mode = Distributed::kTorch) {
    JobSpec s = Spec(1, "python3 train.py");
    s.resources.nodes = nodes;
    s.distributed = mode;
    return s;
  }
  std::string Hello(const std::string& name) {
    auto w = pool_->AgentHello(MakeHello(name, 1));
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    ids_[name] = w->node_id;
    return w->node_id;
  }
  Attempt CurrentAttempt(int64_t job) {
    auto d = pool_->GetJob(job);
    EXPECT_TRUE(d.ok());
    for (const Attempt& a : d->attempts) {
      if (a.id == d->job.current_attempt) return a;
    }
    ADD_FAILURE() << "job " << job << " has no current attempt";
    return {};
  }
  JobState StateOf(int64_t job) { return pool_->GetJob(job)->job.state; }
  // Reports rank 0's rendezvous and both ranks running.
  void StartGang(const Attempt& a) {
    proto::TaskReport starting(a.id, proto::TaskState::kStarting);
    starting.master_addr = "127.0.0.1";
    starting.master_port = 29533;
    ASSERT_TRUE(Report(a.ranks[0].node_id, Seq(a.ranks[0].node_id), starting).ok());
    for (const AttemptRank& r : a.ranks) {
      ASSERT_TRUE(Report(r.node_id, Seq(r.node_id), {a.id, proto::TaskState::kRunning}).ok());
    }
  }
  std::map<std::string, std::string> ids_;
  std::map<std::string, int64_t> seq_ = {};
  int64_t Seq(const std::string& node) { return ++seq_[node]; }
};

TEST_F(GangTest, TorchGangStartsRankZeroThenTheOthersWithItsRendezvous) {
  for (const char* n : {"a", "b", "c"}) Hello(n);
  auto job = pool_->Submit(GangSpec(2), "alice");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_EQ(a.node_id, a.ranks[0].node_id);
  EXPECT_NE(a.ranks[0].node_id, a.ranks[1].node_id);
  // Rank 0 alone, with no rendezvous yet: its agent chooses the port.
  auto first = Starts(a.ranks[0].node_id);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0].gang.has_value());
  EXPECT_EQ(first[0].gang->rank, 0);
  EXPECT_EQ(first[0].gang->nodes, 2);
  EXPECT_EQ(first[0].gang->master_port, 0);
  EXPECT_TRUE(Starts(a.ranks[1].node_id).empty());

  proto::TaskReport starting(a.id, proto::TaskState::kStarting);
  starting.master_addr = "10.1.2.3";
  starting.master_port = 29533;
  ASSERT_TRUE(Report(a.ranks[0].node_id, Seq(a.ranks[0].node_id), starting).ok());
  auto second = Starts(a.ranks[1].node_id);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].gang->rank, 1);
  EXPECT_EQ(second[0].gang->master_addr, "10.1.2.3");
  EXPECT_EQ(second[0].gang->master_port, 29533);
  EXPECT_EQ(CurrentAttempt(job->id).MasterEndpoint(), "10.1.2.3:29533");

  // Running only once every rank runs.
  ASSERT_TRUE(
      Report(a.ranks[0].node_id, Seq(a.ranks[0].node_id), {a.id, proto::TaskState::kRunning}).ok());
  EXPECT_EQ(StateOf(job->id), JobState::kScheduled);
  ASSERT_TRUE(
      Report(a.ranks[1].node_id, Seq(a.ranks[1].node_id), {a.id, proto::TaskState::kRunning}).ok());
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);

  // Succeeded once every rank exited 0.
  ASSERT_TRUE(
      Report(a.ranks[1].node_id, Seq(a.ranks[1].node_id), {a.id, proto::TaskState::kExited, 0})
          .ok());
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);
  ASSERT_TRUE(
      Report(a.ranks[0].node_id, Seq(a.ranks[0].node_id), {a.id, proto::TaskState::kExited, 0})
          .ok());
  EXPECT_EQ(StateOf(job->id), JobState::kSucceeded);
  // Its group paid for both nodes.
  auto usage = StoredUsage("default");
  ASSERT_TRUE(usage.has_value());
}

TEST_F(GangTest, AGangThatCannotBePlacedWholeStartsNothing) {
  std::string a = Hello("a"), b = Hello("b");
  auto job = pool_->Submit(GangSpec(3), "alice");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_TRUE(Starts(a).empty());
  EXPECT_TRUE(Starts(b).empty());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kPending);
  EXPECT_TRUE(d->attempts.empty());
  EXPECT_FALSE(d->job.reason.empty());
  // A third node makes it placeable.
  Hello("c");
  EXPECT_EQ(*pool_->Schedule(), 1);
  EXPECT_EQ(CurrentAttempt(job->id).ranks.size(), 3u);
}

TEST_F(GangTest, ALostRankStopsTheGangWhichRequeuesOnlyOnceEveryRankEnded) {
  for (const char* n : {"a", "b", "c"}) Hello(n);
  JobSpec spec = GangSpec(2);
  spec.checkpoint = CheckpointSpec{};
  auto job = pool_->Submit(spec, "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  StartGang(a);
  ASSERT_EQ(StateOf(job->id), JobState::kRunning);
  const std::string master = a.ranks[0].node_id, lost = a.ranks[1].node_id;

  // Rank 1's node goes silent and is declared lost.
  ASSERT_TRUE(pool_->AgentDisconnected(lost).ok());
  clock_.AdvanceMs(PoolOptions{}.node_lost_after_ms + 1);
  ASSERT_TRUE(pool_->CheckNodes().ok());
  // Rank 0 is told to checkpoint and stop; the job keeps its attempt (and
  // nothing new starts) until rank 0 has ended: fencing.
  auto stops = Stops(master);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_TRUE(stops[0].requeue);
  EXPECT_THAT(stops[0].reason, HasSubstr("rank 1"));
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);
  EXPECT_EQ(*pool_->Schedule(), 0);

  // Rank 0 fails (its peer is gone): the gang is requeued, not failed.
  ASSERT_TRUE(Report(master, Seq(master), {a.id, proto::TaskState::kExited, 1}).ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kPending);
  EXPECT_TRUE(d->job.front);
  EXPECT_EQ(d->attempts[0].state, AttemptState::kLost);
  EXPECT_EQ(d->attempts[0].ranks[1].state, AttemptState::kLost);
  EXPECT_EQ(d->attempts[0].ranks[0].state, AttemptState::kFailed);

  // The next attempt goes to the two nodes still there.
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt next = CurrentAttempt(job->id);
  EXPECT_EQ(next.number, 2);
  for (const AttemptRank& r : next.ranks) EXPECT_NE(r.node_id, lost);
}

TEST_F(GangTest, ARankThatFailsOnItsOwnFailsTheJob) {
  for (const char* n : {"a", "b"}) Hello(n);
  auto job = pool_->Submit(GangSpec(2), "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  StartGang(a);
  const std::string r0 = a.ranks[0].node_id, r1 = a.ranks[1].node_id;
  ASSERT_TRUE(Report(r1, Seq(r1), {a.id, proto::TaskState::kExited, 2}).ok());
  ASSERT_EQ(Stops(r0).size(), 1u);  // the other rank is stopped
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);
  ASSERT_TRUE(
      Report(r0, Seq(r0), {a.id, proto::TaskState::kExited, 143, 15, "stopped: gang stopped"})
          .ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kFailed);
  EXPECT_EQ(d->job.exit_code, 2);
  EXPECT_THAT(d->job.reason, HasSubstr("rank 1"));
}

TEST_F(GangTest, EachRankKeepsItsOwnLog) {
  for (const char* n : {"a", "b"}) Hello(n);
  auto job = pool_->Submit(GangSpec(2), "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  StartGang(a);
  for (const AttemptRank& r : a.ranks) {
    proto::LogChunk chunk{a.id, {{0, "stdout", 1, "hello from " + std::to_string(r.rank)}}};
    ASSERT_TRUE(pool_
                    ->AgentMessage(r.node_id, Seq(r.node_id), std::string(proto::kLogs),
                                   proto::Encode(chunk))
                    .ok());
  }
  auto lines = pool_->ReadLogs(job->id, 0, 100);
  ASSERT_TRUE(lines.ok());
  ASSERT_EQ(lines->lines.size(), 2u);  // the same offset, once per rank
  std::map<int32_t, std::string> by_rank;
  for (const LogLine& l : lines->lines) by_rank[l.rank] = l.text;
  EXPECT_EQ(by_rank[0], "hello from 0");
  EXPECT_EQ(by_rank[1], "hello from 1");
  // A reconnecting agent resumes its own rank's log.
  auto w = pool_->AgentHello(MakeHello(ids_.count("a") ? "b" : "b", 1, "i2"));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->log_offsets.at(a.id), 0);
  EXPECT_EQ(w->attempt_lease_ms, PoolOptions{}.attempt_lease_ms);
}

TEST_F(GangTest, ARankWaitingForTheRendezvousIsNotLostWhenItsAgentReconnects) {
  for (const char* n : {"a", "b"}) Hello(n);
  auto job = pool_->Submit(GangSpec(2), "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  std::string name1 = a.ranks[1].node_id == ids_["a"] ? "a" : "b";
  ASSERT_TRUE(pool_->AgentHello(MakeHello(name1, 1, "i2")).ok());
  EXPECT_EQ(StateOf(job->id), JobState::kScheduled);
  EXPECT_EQ(CurrentAttempt(job->id).ranks[1].state, AttemptState::kScheduled);
}

TEST_F(GangTest, CancelStopsEveryRankAndGivesUpTheOnesNotStarted) {
  for (const char* n : {"a", "b", "c"}) Hello(n);
  auto job = pool_->Submit(GangSpec(3), "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  ASSERT_TRUE(pool_->Cancel(job->id).ok());
  EXPECT_EQ(Stops(a.ranks[0].node_id).size(), 1u);
  EXPECT_TRUE(Stops(a.ranks[1].node_id).empty());  // never started
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kCancelled);
  for (const AttemptRank& r : d->attempts[0].ranks) EXPECT_EQ(r.state, AttemptState::kCancelled);
  // A late rendezvous starts nobody.
  proto::TaskReport starting(a.id, proto::TaskState::kStarting);
  starting.master_addr = "127.0.0.1";
  starting.master_port = 29533;
  ASSERT_TRUE(Report(a.ranks[0].node_id, Seq(a.ranks[0].node_id), starting).ok());
  EXPECT_TRUE(Starts(a.ranks[1].node_id).empty());
}

TEST_F(GangTest, AVacatedRankStopsTheOthersWithTheCheckpointSignalAndRequeuesTheGang) {
  for (const char* n : {"a", "b"}) Hello(n);
  JobSpec spec = GangSpec(2);
  spec.checkpoint = CheckpointSpec{};
  auto job = pool_->Submit(spec, "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  StartGang(a);
  const std::string r0 = a.ranks[0].node_id, r1 = a.ranks[1].node_id;
  // Rank 1's provider takes its GPU back; its agent vacates it.
  NodeEvent reclaim;
  reclaim.ts_ms = 1000;
  reclaim.kind = "reclaim";
  reclaim.reason = "reclaimed by the owner";
  reclaim.attempts = {a.id};
  ASSERT_TRUE(
      pool_->AgentMessage(r1, Seq(r1), std::string(proto::kNodeEvent), proto::Encode(reclaim))
          .ok());
  auto stops = Stops(r0);
  ASSERT_EQ(stops.size(), 1u);  // rank 0 checkpoints, then stops
  EXPECT_TRUE(stops[0].requeue);
  EXPECT_TRUE(Stops(r1).empty());  // its own agent is vacating it already
  ASSERT_TRUE(
      Report(r1, Seq(r1), {a.id, proto::TaskState::kVacated, 0, 0, "reclaimed by the owner"}).ok());
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);  // until rank 0 has ended too
  ASSERT_TRUE(
      Report(r0, Seq(r0), {a.id, proto::TaskState::kExited, 0, 0, "stopped: gang stopped"}).ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kPending);
  EXPECT_TRUE(d->job.front);
  EXPECT_EQ(d->attempts[0].state, AttemptState::kVacated);
  EXPECT_THAT(d->job.reason, HasSubstr("vacated"));
}

TEST_F(GangTest, APreemptedGangStopsEveryRankAndIsRequeuedOnceAllLeft) {
  PoolOptions o;
  o.scheduler.groups = {{"lab-a", 1, 0}, {"lab-b", 1, 0}};
  UseOptions(o);
  for (const char* n : {"a", "b"}) Hello(n);
  JobSpec gang = GangSpec(2);
  gang.group = "lab-a";
  gang.checkpoint = CheckpointSpec{0, 5'000, "SIGUSR1"};
  auto job = pool_->Submit(gang, "u");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  StartGang(a);
  clock_.AdvanceMs(60'000);
  JobSpec inter = Spec(1);
  inter.group = "lab-b";
  inter.priority = JobPriority::kInteractive;
  auto urgent = pool_->Submit(inter, "w");
  EXPECT_EQ(*pool_->Schedule(), 0);
  for (const AttemptRank& r : a.ranks) {
    auto stops = Stops(r.node_id);
    ASSERT_EQ(stops.size(), 1u) << "rank " << r.rank;
    EXPECT_TRUE(stops[0].requeue);
    EXPECT_EQ(stops[0].grace_ms, 5'000);
  }
  // One rank gone is not enough: the gang leaves whole.
  ASSERT_TRUE(
      Report(a.ranks[1].node_id, Seq(a.ranks[1].node_id), {a.id, proto::TaskState::kExited, 0})
          .ok());
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);
  EXPECT_EQ(*pool_->Schedule(), 0);
  ASSERT_TRUE(Report(a.ranks[0].node_id, Seq(a.ranks[0].node_id),
                     {a.id, proto::TaskState::kExited, 143, 15})
                  .ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kPending);
  EXPECT_EQ(d->attempts[0].state, AttemptState::kPreempted);
  EXPECT_EQ(*pool_->Schedule(), 1);  // the interactive job, on a freed node
  EXPECT_EQ(StateOf(urgent->id), JobState::kScheduled);
}

TEST_F(GangTest, MaxRestartsRequeuesAFailedGangThenFailsIt) {
  for (const char* n : {"a", "b"}) Hello(n);
  JobSpec spec = GangSpec(2);
  spec.max_restarts = 1;
  auto job = pool_->Submit(spec, "alice");
  for (int attempt = 1; attempt <= 2; ++attempt) {
    ASSERT_EQ(*pool_->Schedule(), 1) << attempt;
    Attempt a = CurrentAttempt(job->id);
    EXPECT_EQ(a.number, attempt);
    StartGang(a);
    const std::string r0 = a.ranks[0].node_id, r1 = a.ranks[1].node_id;
    ASSERT_TRUE(Report(r1, Seq(r1), {a.id, proto::TaskState::kExited, 2}).ok());
    ASSERT_TRUE(
        Report(r0, Seq(r0), {a.id, proto::TaskState::kExited, 143, 15, "stopped: gang stopped"})
            .ok());
  }
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kFailed);  // the one restart is spent
  EXPECT_EQ(d->job.restarts, 1);
  EXPECT_EQ(d->job.exit_code, 2);
  EXPECT_EQ(d->attempts[0].state, AttemptState::kFailed);
  ASSERT_EQ(d->attempts.size(), 2u);
}

TEST_F(PoolTest, MaxRestartsRequeuesAFailedJobAtTheBackOfItsClass) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec spec = Spec(1);
  spec.max_restarts = 2;
  auto job = pool_->Submit(spec, "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kExited, 3}).ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kPending);
  EXPECT_FALSE(d->job.front);  // its own failure: no place at the front
  EXPECT_EQ(d->job.restarts, 1);
  EXPECT_THAT(d->job.reason, HasSubstr("restart 1 of 2"));
  EXPECT_EQ(d->attempts[0].state, AttemptState::kFailed);
  EXPECT_EQ(d->attempts[0].exit_code, 3);
  // Restarts survive a server restart.
  Restart();
  EXPECT_EQ(pool_->GetJob(job->id)->job.restarts, 1);
}

TEST_F(GangTest, ReplicasStartTogetherAndRunToTheirOwnEnds) {
  for (const char* n : {"a", "b"}) Hello(n);
  auto job = pool_->Submit(GangSpec(2, Distributed::kNone), "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  for (const AttemptRank& r : a.ranks) {
    auto starts = Starts(r.node_id);
    ASSERT_EQ(starts.size(), 1u);
    EXPECT_EQ(starts[0].gang->mode, Distributed::kNone);
    EXPECT_EQ(starts[0].gang->rank, r.rank);
  }
  for (const AttemptRank& r : a.ranks)
    ASSERT_TRUE(Report(r.node_id, Seq(r.node_id), {a.id, proto::TaskState::kRunning}).ok());
  const std::string r0 = a.ranks[0].node_id, r1 = a.ranks[1].node_id;
  ASSERT_TRUE(Report(r0, Seq(r0), {a.id, proto::TaskState::kExited, 3}).ok());
  EXPECT_TRUE(Stops(r1).empty());  // a replica's failure stops no other
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);
  ASSERT_TRUE(Report(r1, Seq(r1), {a.id, proto::TaskState::kExited, 0}).ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kFailed);
  EXPECT_EQ(d->job.exit_code, 3);
}

// ---- stopping attempts: their state says so (model/attempt_state.h)

TEST_F(PoolTest, APreemptedAttemptIsPreemptingUntilItHasLeft) {
  PoolOptions o;
  o.scheduler.groups = {{"lab-a", 1, 0}, {"lab-b", 1, 0}};
  UseOptions(o);
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec victim = Spec(1);
  victim.group = "lab-a";
  victim.checkpoint = CheckpointSpec{0, 5'000, "SIGUSR1"};
  ASSERT_TRUE(pool_->Submit(victim, "u").ok());  // 1
  ASSERT_EQ(*pool_->Schedule(), 1);
  // Ordered to stop before its "running" report arrived.
  clock_.AdvanceMs(60'000);
  JobSpec inter = Spec(1);
  inter.group = "lab-b";
  inter.priority = JobPriority::kInteractive;
  ASSERT_TRUE(pool_->Submit(inter, "w").ok());  // 2
  EXPECT_EQ(*pool_->Schedule(), 0);
  auto v = *pool_->GetJob(1);
  ASSERT_EQ(v.attempts.size(), 1u);
  EXPECT_EQ(v.attempts[0].state, AttemptState::kPreempting);
  EXPECT_EQ(v.attempts[0].preempt_ms, clock_.NowMs());
  EXPECT_EQ(v.attempts[0].preempt_for_job, 2);
  EXPECT_EQ(v.job.state, JobState::kScheduled);
  // A late "running": the job runs (its GPUs are busy) and the attempt is
  // still leaving; it is not preempted again.
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  v = *pool_->GetJob(1);
  EXPECT_EQ(v.job.state, JobState::kRunning);
  EXPECT_EQ(v.attempts[0].state, AttemptState::kPreempting);
  EXPECT_GT(v.attempts[0].started_ms, 0);
  EXPECT_THAT(v.job.reason, HasSubstr("being preempted"));
  clock_.AdvanceMs(1000);
  EXPECT_EQ(*pool_->Schedule(), 0);
  EXPECT_EQ(Stops(node.node_id).size(), 1u);
  // Stopped with exit 0 and the shim's reason: preempted, not succeeded.
  ASSERT_TRUE(
      Report(node.node_id, 2, {"1.1", proto::TaskState::kExited, 0, 0, "stopped: preempted", 0})
          .ok());
  v = *pool_->GetJob(1);
  EXPECT_EQ(v.job.state, JobState::kPending);
  EXPECT_EQ(v.attempts[0].state, AttemptState::kPreempted);
  EXPECT_EQ(v.attempts[0].preempt_for_job, 2);
}

TEST_F(PoolTest, AJobStoppedForGoodIsStoppingThenCancelledAndNotStoppedTwice) {
  auto node = *pool_->AgentHello(MakeHello("a", 1));
  JobSpec spec = Spec(1);
  spec.checkpoint = CheckpointSpec{0, 5'000, "SIGUSR1"};
  ASSERT_TRUE(pool_->Submit(spec, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(Report(node.node_id, 1, {"1.1", proto::TaskState::kRunning, 0, 0, "", 0}).ok());
  clock_.AdvanceMs(1000);
  ASSERT_TRUE(pool_->StopForGood(1, "stopped: idle for 30m", true).ok());
  auto v = *pool_->GetJob(1);
  EXPECT_EQ(v.job.state, JobState::kRunning);
  EXPECT_EQ(v.attempts[0].state, AttemptState::kStoppingForGood);
  EXPECT_EQ(v.attempts[0].preempt_ms, clock_.NowMs());
  EXPECT_EQ(v.attempts[0].preempt_for_job, 0);  // no job: no sentinel either
  auto stops = Stops(node.node_id);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_TRUE(stops[0].requeue);  // the checkpoint signal first
  // It leaves (killed after its grace): the job ends, cancelled, and the
  // attempt keeps the server's reason.
  ASSERT_TRUE(
      Report(node.node_id, 2, {"1.1", proto::TaskState::kExited, 137, 9, "stopped: idle", 0}).ok());
  v = *pool_->GetJob(1);
  EXPECT_EQ(v.job.state, JobState::kCancelled);
  EXPECT_EQ(v.attempts[0].state, AttemptState::kCancelled);
  EXPECT_EQ(v.attempts[0].reason, "stopped: idle for 30m");

  // A second stop of an attempt already stopping cancels the job outright.
  ASSERT_TRUE(pool_->Submit(spec, "u").ok());  // 2
  ASSERT_EQ(*pool_->Schedule(), 1);
  ASSERT_TRUE(pool_->StopForGood(2, "stopped: idle for 30m", true).ok());
  EXPECT_EQ(pool_->GetJob(2)->attempts[0].state, AttemptState::kStoppingForGood);
  ASSERT_TRUE(pool_->StopForGood(2, "cancelled by the user", true).ok());
  v = *pool_->GetJob(2);
  EXPECT_EQ(v.job.state, JobState::kCancelled);
  EXPECT_EQ(v.attempts[0].state, AttemptState::kCancelled);
}

TEST_F(GangTest, AGangWhoseRankFailedIsGangStoppingUntilEveryRankEnded) {
  for (const char* n : {"a", "b"}) Hello(n);
  auto job = pool_->Submit(GangSpec(2), "alice");
  ASSERT_EQ(*pool_->Schedule(), 1);
  Attempt a = CurrentAttempt(job->id);
  StartGang(a);
  const std::string r0 = a.ranks[0].node_id, r1 = a.ranks[1].node_id;
  clock_.AdvanceMs(500);
  ASSERT_TRUE(Report(r1, Seq(r1), {a.id, proto::TaskState::kExited, 2}).ok());
  Attempt stopping = CurrentAttempt(job->id);
  EXPECT_EQ(stopping.state, AttemptState::kGangStopping);
  EXPECT_EQ(stopping.gang_stop_ms, clock_.NowMs());
  EXPECT_EQ(stopping.gang_stop_rank, 1);
  EXPECT_EQ(StateOf(job->id), JobState::kRunning);
  ASSERT_EQ(Stops(r0).size(), 1u);
  // Rank 0 fails too, as it loses its peer: no second stop, and the gang
  // ends as the rank that stopped it did.
  clock_.AdvanceMs(500);
  ASSERT_TRUE(Report(r0, Seq(r0), {a.id, proto::TaskState::kExited, 1}).ok());
  auto d = pool_->GetJob(job->id);
  EXPECT_EQ(d->job.state, JobState::kFailed);
  EXPECT_EQ(d->attempts[0].state, AttemptState::kFailed);
  EXPECT_EQ(d->attempts[0].gang_stop_rank, 1);
  EXPECT_EQ(d->job.exit_code, std::optional<int32_t>(2));
  EXPECT_EQ(Stops(r0).size(), 1u);
}

}  // namespace
}  // namespace gpupool::server
