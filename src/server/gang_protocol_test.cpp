// The gang protocol's steps on values: no store, no clock.
#include "server/gang_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::server::gang {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

constexpr int64_t kNow = 1'000'000;

class GangProtocolTest : public ::testing::Test {
 protected:
  // A scheduled gang of `ranks` ranks on nodes n0, n1, ...
  void MakeGang(int ranks, Distributed distributed) {
    job_.id = 7;
    job_.state = JobState::kScheduled;
    job_.spec.distributed = distributed;
    attempt_.id = "7.1";
    attempt_.job_id = 7;
    attempt_.state = AttemptState::kScheduled;
    for (int i = 0; i < ranks; ++i) {
      AttemptRank r;
      r.rank = i;
      r.node_id = "n" + std::to_string(i);
      attempt_.ranks.push_back(r);
    }
    attempt_.node_id = "n0";
  }
  static proto::TaskReport Report(proto::TaskState state, int exit_code = 0) {
    proto::TaskReport r;
    r.attempt_id = "7.1";
    r.state = state;
    r.exit_code = exit_code;
    return r;
  }
  Outcome On(int rank, const proto::TaskReport& r, int64_t now = kNow) {
    const std::string node = "n" + std::to_string(rank);
    return OnRankReport(job_, attempt_, node, "node-" + std::to_string(rank), r, now);
  }
  // Rank 0 of a torch gang meets the others at this endpoint.
  Outcome Rendezvous() {
    proto::TaskReport r = Report(proto::TaskState::kStarting);
    r.master_addr = "10.0.0.1";
    r.master_port = 29500;
    return On(0, r);
  }
  Job job_;
  Attempt attempt_;
};

TEST_F(GangProtocolTest, RankZerosRendezvousStartsTheOthersAndTheJobRunsOnceAllDo) {
  MakeGang(3, Distributed::kTorch);
  Outcome meet = Rendezvous();
  EXPECT_THAT(meet.start_ranks, ElementsAre(1, 2));
  EXPECT_EQ(attempt_.master_port, 29500);
  EXPECT_EQ(meet.job_event, std::nullopt);
  EXPECT_TRUE(meet.store_attempt);
  ASSERT_EQ(meet.log_lines.size(), 1u);
  EXPECT_THAT(meet.log_lines[0], ::testing::HasSubstr("rendezvous at 10.0.0.1:29500"));
  // A second report with the endpoint does not start them again.
  EXPECT_TRUE(Rendezvous().start_ranks.empty());

  EXPECT_EQ(On(0, Report(proto::TaskState::kRunning)).job_event, std::nullopt);
  EXPECT_EQ(On(1, Report(proto::TaskState::kRunning)).job_event, std::nullopt);
  Outcome last = On(2, Report(proto::TaskState::kRunning));
  EXPECT_EQ(last.job_event, JobEvent::kStarted);
  ASSERT_TRUE(last.report.has_value());
  EXPECT_EQ(last.report->state, proto::TaskState::kRunning);
}

TEST_F(GangProtocolTest, ReplicasStartTogetherWithoutARendezvous) {
  MakeGang(2, Distributed::kNone);
  proto::TaskReport r = Report(proto::TaskState::kStarting);
  r.master_port = 29500;  // ignored: replicas do not meet
  EXPECT_TRUE(On(0, r).start_ranks.empty());
  EXPECT_EQ(attempt_.master_port, 0);
}

TEST_F(GangProtocolTest, AFailedTorchRankStopsTheOthersWithTheCheckpointGraceAndFailsTheJob) {
  MakeGang(3, Distributed::kTorch);
  Rendezvous();
  for (int i = 0; i < 3; ++i) On(i, Report(proto::TaskState::kRunning));
  job_.state = JobState::kRunning;

  Outcome failed = On(1, Report(proto::TaskState::kExited, 3));
  EXPECT_EQ(attempt_.state, AttemptState::kGangStopping);
  EXPECT_EQ(attempt_.gang_stop_rank, 1);
  EXPECT_EQ(attempt_.gang_stop_ms, kNow);
  ASSERT_EQ(failed.stops.size(), 2u);
  EXPECT_EQ(failed.stops[0].first, "n0");
  EXPECT_EQ(failed.stops[1].first, "n2");
  for (const auto& [node, order] : failed.stops) {
    EXPECT_EQ(order.reason, "gang stopped: rank 1 on node-1 failed (exited with code 3)");
    EXPECT_EQ(order.grace_ms, PreemptGraceMs(job_.spec));
    EXPECT_TRUE(order.requeue);
  }
  EXPECT_EQ(failed.job_event, std::nullopt);  // the others are still there
  EXPECT_TRUE(failed.store_attempt);

  // The others end as the stop made them; the cause is rank 1's failure.
  On(0, Report(proto::TaskState::kExited, 143), kNow + 10);
  Outcome closed = On(2, Report(proto::TaskState::kExited, 143), kNow + 20);
  EXPECT_TRUE(closed.stops.empty());  // already stopping: no second round
  EXPECT_EQ(closed.job_event, JobEvent::kExitedError);
  ASSERT_TRUE(closed.report.has_value());
  EXPECT_EQ(closed.report->exit_code, 3);
  EXPECT_EQ(closed.report->reason, "rank 1: exited with code 3");
}

TEST_F(GangProtocolTest, AFailedTorchRankIsRetriedWhileTheJobHasRestartsLeft) {
  MakeGang(2, Distributed::kTorch);
  job_.spec.max_restarts = 1;
  Rendezvous();
  On(0, Report(proto::TaskState::kRunning));
  On(1, Report(proto::TaskState::kRunning));
  job_.state = JobState::kRunning;
  On(0, Report(proto::TaskState::kExited, 1));
  EXPECT_EQ(On(1, Report(proto::TaskState::kExited, 143)).job_event, JobEvent::kRetry);
}

TEST_F(GangProtocolTest, ReplicasGoOnWithoutAFailedRank) {
  MakeGang(2, Distributed::kNone);
  On(0, Report(proto::TaskState::kRunning));
  On(1, Report(proto::TaskState::kRunning));
  job_.state = JobState::kRunning;
  Outcome failed = On(1, Report(proto::TaskState::kExited, 1));
  EXPECT_TRUE(failed.stops.empty());
  EXPECT_NE(attempt_.state, AttemptState::kGangStopping);  // not stopped
  Outcome done = On(0, Report(proto::TaskState::kExited, 0));
  EXPECT_EQ(done.job_event, JobEvent::kExitedError);  // rank 1 failed
  EXPECT_EQ(done.report->reason, "rank 1: exited with code 1");
}

TEST_F(GangProtocolTest, AllRanksSucceededIsTheJobSucceeding) {
  MakeGang(2, Distributed::kNone);
  On(0, Report(proto::TaskState::kRunning));
  On(1, Report(proto::TaskState::kRunning));
  job_.state = JobState::kRunning;
  EXPECT_EQ(On(1, Report(proto::TaskState::kExited, 0)).job_event, std::nullopt);
  Outcome done = On(0, Report(proto::TaskState::kExited, 0));
  EXPECT_EQ(done.job_event, JobEvent::kExitedOk);
  EXPECT_EQ(done.report->state, proto::TaskState::kExited);
}

TEST_F(GangProtocolTest, ALostRankRequeuesEvenReplicasAndNamesTheCause) {
  MakeGang(2, Distributed::kNone);
  On(0, Report(proto::TaskState::kRunning));
  On(1, Report(proto::TaskState::kRunning));
  job_.state = JobState::kRunning;
  proto::TaskReport lost = Report(proto::TaskState::kLost);
  lost.reason = "node lost";
  Outcome l = On(1, lost);
  ASSERT_EQ(l.stops.size(), 1u);
  EXPECT_EQ(l.stops[0].first, "n0");
  Outcome closed = On(0, Report(proto::TaskState::kExited, 143), kNow + 5);
  EXPECT_EQ(closed.job_event, JobEvent::kLost);
  EXPECT_EQ(closed.report->state, proto::TaskState::kLost);
  EXPECT_EQ(closed.report->reason, attempt_.reason);
  EXPECT_THAT(attempt_.reason, ::testing::HasSubstr("rank 1 on node-1 lost"));
}

TEST_F(GangProtocolTest, ARefusedRankBeforeTheStartIsARefusalOfThatNode) {
  MakeGang(2, Distributed::kNone);
  Outcome refused = On(1, Report(proto::TaskState::kRefused));
  EXPECT_EQ(refused.refused_node, "n1");
  ASSERT_EQ(refused.stops.size(), 1u);
  Outcome closed = On(0, Report(proto::TaskState::kExited, 143));
  EXPECT_EQ(closed.job_event, JobEvent::kRefused);
}

TEST_F(GangProtocolTest, StoppingBeforeTheRendezvousEndsTheRanksHeldBack) {
  MakeGang(3, Distributed::kTorch);
  Outcome stop = Stop(job_, attempt_, 0, "the provider took its GPU back", kNow);
  EXPECT_TRUE(stop.stops.empty());  // ranks 1 and 2 never started: nothing to stop
  EXPECT_EQ(attempt_.ranks[1].state, AttemptState::kCancelled);
  EXPECT_EQ(attempt_.ranks[2].state, AttemptState::kCancelled);
  EXPECT_TRUE(stop.store_attempt);
  // A second stop while it is leaving does nothing.
  Outcome again = Stop(job_, attempt_, 1, "again", kNow + 1);
  EXPECT_TRUE(again.stops.empty());
  EXPECT_FALSE(again.store_attempt);
  EXPECT_TRUE(again.log_lines.empty());
  EXPECT_EQ(attempt_.reason, "the provider took its GPU back");
}

TEST_F(GangProtocolTest, AReportFromARankThatEndedGetsAStaleStop) {
  MakeGang(2, Distributed::kNone);
  On(1, Report(proto::TaskState::kExited, 0));
  Outcome stale = On(1, Report(proto::TaskState::kRunning));
  EXPECT_THAT(stale.stops,
              ElementsAre(Pair("n1", ::testing::Field(&StopOrder::reason, "stale attempt"))));
  EXPECT_FALSE(stale.store_attempt);
  EXPECT_EQ(stale.job_event, std::nullopt);
  // Its end said again changes nothing.
  Outcome again = On(1, Report(proto::TaskState::kExited, 0));
  EXPECT_TRUE(again.stops.empty());
  EXPECT_FALSE(again.store_attempt);
}

}  // namespace
}  // namespace gpupool::server::gang
