#include "sim/des.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "sim/campus.h"
#include "sim/campus_command.h"
#include "sim/campus_testing.h"

namespace gpupool::sim {
namespace {

using namespace campus_testing;  // NOLINT: the campus tests' helpers

TEST(Des, AJobRunsExactlyItsDurationAtSpeedOne) {
  const Trace t =
      Parse(kLab + Node("n1", 1, 1.0) +
            Job(1, R"("submit":"10m","gpus":1,"duration":"1h","cpus":2,"memory":"4GiB")"));
  const SimResult r = Des(t);
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_EQ(r.jobs[0].first_start_ms, 10 * kMin);
  EXPECT_EQ(r.jobs[0].end_ms, 10 * kMin + kHour);
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].end, AttemptEnd::kCompleted);
  EXPECT_EQ(r.attempts[0].nodes, std::vector<std::string>{"n1"});
  EXPECT_TRUE(r.drained);
}

TEST(Des, FasterGpusFinishSoonerAndAGangRunsAtItsSlowestNode) {
  const Trace t = Parse(kLab + Node("fast", 2, 2.0) + Node("slow", 2, 0.5) +
                        Job(1, R"("submit":0,"gpus":2,"gpu_models":["A100"],"duration":"1h")") +
                        Job(2, R"("submit":"1h","gpus":2,"nodes":2,"duration":"1h")") +
                        Job(3, R"("submit":"10h","class":"interactive","gpus":1,"duration":"1h")"));
  // Job 1 asks for a model no node has: it waits, unsatisfiable.
  const SimResult r = Des(t);
  EXPECT_EQ(r.jobs[0].first_start_ms, -1);
  EXPECT_FALSE(r.jobs[0].waiting_reason.empty());
  EXPECT_FALSE(r.drained);
  // The gang spans both nodes and runs at 0.5: 2 h.
  EXPECT_EQ(r.jobs[1].first_start_ms, kHour);
  EXPECT_EQ(r.jobs[1].end_ms, 3 * kHour);
  auto gang = AttemptsOf(r, 2);
  ASSERT_EQ(gang.size(), 1u);
  EXPECT_EQ(gang[0]->nodes.size(), 2u);
  EXPECT_DOUBLE_EQ(gang[0]->speed, 0.5);
  // A session lasts its duration whatever the GPU.
  EXPECT_EQ(r.jobs[2].end_ms - r.jobs[2].first_start_ms, kHour);

  const Trace fast =
      Parse(kLab + Node("fast", 2, 2.0) + Job(1, R"("submit":0,"gpus":1,"duration":"1h")"));
  EXPECT_EQ(Des(fast).jobs[0].end_ms, 30 * kMin);
}

TEST(Des, ANodeLeavingRequeuesAndTheJobFinishesElsewhereLosingOnlySinceItsCheckpoint) {
  // b is away at first, so the job starts on a; a leaves at 2.5 h, after the
  // checkpoint at 2 h; the job resumes on b and has 8 h of work left.
  const Trace t =
      Parse(kLab + Node("a", 1, 1.0) + Node("b", 1, 1.0) +
            Job(1, R"("submit":0,"gpus":1,"duration":"10h","checkpoint_interval":"1h")") +
            R"({"type":"node_leave","node":"b","at":0})"
            "\n"
            R"({"type":"node_return","node":"b","at":"1h"})"
            "\n"
            R"({"type":"node_leave","node":"a","at":"2h30m"})"
            "\n");
  const SimResult r = Des(t);
  auto att = AttemptsOf(r, 1);
  ASSERT_EQ(att.size(), 2u);
  EXPECT_EQ(att[0]->nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(att[0]->end, AttemptEnd::kNodeLeft);
  EXPECT_EQ(att[0]->end_ms, 150 * kMin);
  EXPECT_EQ(att[0]->useful_end_ms, 2 * kHour);
  EXPECT_EQ(att[0]->lost_work_ms, 30 * kMin);
  EXPECT_EQ(att[1]->nodes, std::vector<std::string>{"b"});
  EXPECT_TRUE(att[1]->migrated);
  EXPECT_EQ(att[1]->start_ms, 150 * kMin);
  EXPECT_EQ(att[1]->end, AttemptEnd::kCompleted);
  EXPECT_EQ(r.jobs[0].end_ms, 150 * kMin + 8 * kHour);
  EXPECT_EQ(r.jobs[0].displacements, 1);
  EXPECT_EQ(r.jobs[0].migrations, 1);
  EXPECT_EQ(r.jobs[0].attempts, 2);

  // Without checkpoints everything is lost; back on the same node is no migration.
  const Trace same =
      Parse(kLab + Node("a", 1, 1.0) + Job(1, R"("submit":0,"gpus":1,"duration":"1h")") +
            R"({"type":"node_leave","node":"a","at":"30m"})"
            "\n"
            R"({"type":"node_return","node":"a","at":"40m"})"
            "\n");
  const SimResult s = Des(same);
  auto att2 = AttemptsOf(s, 1);
  ASSERT_EQ(att2.size(), 2u);
  EXPECT_EQ(att2[0]->lost_work_ms, 30 * kMin);
  EXPECT_EQ(att2[0]->useful_end_ms, 0);
  EXPECT_FALSE(att2[1]->migrated);
  EXPECT_EQ(s.jobs[0].end_ms, 40 * kMin + kHour);
}

TEST(Des, AnOwnersSessionPreemptsABorrowedCheckpointingJob) {
  // The guest owns nothing: its job borrows the lab's GPU until the lab wants it.
  const Trace t =
      Parse(kLab + R"({"type":"group","name":"guest"})" + "\n" + Node("n1", 1, 1.0) +
            Job(1, R"("submit":0,"gpus":1,"duration":"5h","checkpoint_interval":"10m")", "guest") +
            Job(2, R"("submit":"25m","class":"interactive","gpus":1,"duration":"10m")"));
  const SimResult r = Des(t);
  auto batch = AttemptsOf(r, 1);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->end, AttemptEnd::kPreempted);
  EXPECT_EQ(batch[0]->useful_end_ms, 20 * kMin);
  EXPECT_EQ(batch[0]->lost_work_ms, 5 * kMin);
  EXPECT_EQ(batch[0]->end_ms, 25 * kMin + 30 * 1000);  // vacated after the grace
  EXPECT_EQ(r.jobs[0].preemptions, 1);
  // The session starts once the victim has vacated, and the job resumes after
  // it with 20 minutes of work kept.
  EXPECT_EQ(r.jobs[1].first_start_ms, 25 * kMin + 30 * 1000);
  EXPECT_EQ(batch[1]->start_ms, r.jobs[1].end_ms);
  EXPECT_EQ(r.jobs[0].end_ms, batch[1]->start_ms + 5 * kHour - 20 * kMin);
}

const std::string kTwoLabs = R"({"type":"group","name":"busy"})"
                             "\n"
                             R"({"type":"group","name":"idle"})"
                             "\n" +
                             Node("busy-1", 1, 1.0, "busy") + Node("idle-1", 2, 1.0, "idle") +
                             Node("idle-2", 2, 1.0, "idle");

TEST(Des, PerLabModeNeverUsesAnotherLabsNodes) {
  std::string jobs;
  for (int i = 1; i <= 6; ++i) {
    jobs += Job(i, R"("submit":)" + std::to_string(i) + R"(,"gpus":1,"duration":"1h")", "busy");
  }
  jobs += Job(7, R"("submit":0,"gpus":1,"duration":"30m")", "idle");
  const Trace t = Parse(kTwoLabs + jobs);
  std::map<std::string, std::string> owner;
  for (const auto& n : t.nodes) owner[n.name] = n.owner_group;

  const SimResult lab = Des(t, SimMode::kPerLab);
  ASSERT_EQ(lab.attempts.size(), 7u);
  for (const auto& a : lab.attempts) {
    for (const auto& n : a.nodes) EXPECT_EQ(owner[n], a.group) << a.attempt_id << " on " << n;
  }
  // One GPU for six one-hour jobs (the first submitted at 1 s): the last
  // starts five hours after the first.
  EXPECT_EQ(lab.jobs[5].first_start_ms, 5 * kHour + 1000);

  const SimResult pooled = Des(t, SimMode::kPooled);
  int borrowed = 0;
  for (const auto& a : pooled.attempts) {
    for (const auto& n : a.nodes) borrowed += owner[n] != a.group ? 1 : 0;
  }
  EXPECT_GE(borrowed, 4);
  int64_t last = 0;
  for (const auto& j : pooled.jobs) last = std::max(last, j.first_start_ms);
  EXPECT_LT(last, lab.jobs[5].first_start_ms);
}

TEST(Des, RejectsATraceWithDanglingNames) {
  Trace t = Parse(kLab + Node("n1", 1, 1.0) + Job(1, R"("submit":0,"gpus":1,"duration":"1h")"));
  t.jobs[0].group = "nobody";
  auto r = Simulate(t, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "job 1: unknown group nobody");
  t = Parse(kLab + Node("n1", 1, 1.0));
  t.events.push_back({NodeEventKind::kLeave, "n9", 0});
  EXPECT_FALSE(Simulate(t, SimOptions{}).ok());
}

TEST(Des, SameSeedGivesTheSameSummary) {
  CampusOptions o;
  o.seed = 99;
  o.labs = 3;
  o.days = 1;
  auto a = GenerateCampus(o);
  auto b = GenerateCampus(o);
  ASSERT_TRUE(a.ok() && b.ok());
  SimOptions so;
  const auto modes = std::vector<SimMode>{SimMode::kPooled, SimMode::kPerLab};
  auto ra = RunCampusModes(*a, modes, so);
  auto rb = RunCampusModes(*b, modes, so);
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  const std::string sa = SummaryJson(*a, *ra, "campus", -1).dump();
  EXPECT_EQ(sa, SummaryJson(*b, *rb, "campus", -1).dump());
  EXPECT_NE(sa.find("\"seed\":99"), std::string::npos);
  EXPECT_GT((*ra)[0].result.attempts.size(), 50u);
  o.seed = 100;
  auto c = GenerateCampus(o);
  ASSERT_TRUE(c.ok());
  auto rc = RunCampusModes(*c, modes, so);
  ASSERT_TRUE(rc.ok());
  EXPECT_NE(sa, SummaryJson(*c, *rc, "campus", -1).dump());
}

TEST(Des, InvariantsHoldOnAGeneratedCampus) {
  CampusOptions o;
  o.seed = 7;
  o.labs = 5;
  o.days = 2;
  o.leave_per_node_day = 1;
  auto t = GenerateCampus(o);
  ASSERT_TRUE(t.ok());
  std::map<std::string, const TraceNode*> nodes;
  for (const auto& n : t->nodes) nodes[n.name] = &n;
  for (SimMode mode : {SimMode::kPooled, SimMode::kPerLab}) {
    const SimResult r = Des(*t, mode);
    // Never more GPUs allocated than present.
    for (const auto& s : r.samples) EXPECT_LE(s.allocated_milli, s.capacity_milli + 0);
    // Every completed job did exactly its work: the kept progress of its
    // attempts adds up to its duration.
    std::map<int64_t, double> kept;
    for (const auto& a : r.attempts) {
      EXPECT_LE(a.start_ms, a.useful_end_ms);
      EXPECT_LE(a.useful_end_ms, a.end_ms);
      if (a.priority != sched::PriorityClass::kInteractive) {
        kept[a.job_id] += static_cast<double>(a.useful_end_ms - a.start_ms) * a.speed;
      }
      if (mode == SimMode::kPerLab) {
        for (const auto& n : a.nodes) EXPECT_EQ(nodes[n]->owner_group, a.group);
      }
    }
    int completed = 0;
    for (size_t i = 0; i < r.jobs.size(); ++i) {
      const auto& j = r.jobs[i];
      if (j.end_ms < 0 || j.priority == sched::PriorityClass::kInteractive) continue;
      ++completed;
      // Rounding: each attempt's checkpoint and end times are rounded up to the ms.
      EXPECT_NEAR(kept[j.job_id], static_cast<double>(j.work_ms), 4.0 * (j.attempts + 1))
          << "job " << j.job_id;
    }
    EXPECT_GT(completed, 100);
    // The paths that lose work were taken.
    auto ended = [&](AttemptEnd e) {
      return std::count_if(r.attempts.begin(), r.attempts.end(),
                           [&](const AttemptRecord& a) { return a.end == e; });
    };
    EXPECT_GT(ended(AttemptEnd::kNodeLeft), 0);
    if (mode == SimMode::kPooled) {
      EXPECT_GT(ended(AttemptEnd::kPreempted), 0);
    }
  }
}

}  // namespace
}  // namespace gpupool::sim
