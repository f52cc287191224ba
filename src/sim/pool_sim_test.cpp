// The pool engine (pool_sim.h) against the DES (des.h) on small traces:
// the same attempts and job records where the server behaves as the DES
// models it, the server's own behaviour where it deliberately differs, and
// what only the server can do (a provider's lending policy).
#include "sim/pool_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "sim/campus.h"
#include "sim/campus_command.h"
#include "sim/campus_testing.h"

namespace gpupool::sim {
namespace {

using namespace campus_testing;  // NOLINT: the campus tests' helpers

SimResult ViaPool(const Trace& t, SimMode mode = SimMode::kPooled,
                  const PoolSimOptions& extra = {}) {
  SimOptions o;
  o.mode = mode;
  auto r = SimulateThroughPool(t, o, extra);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SimResult{};
}

std::string Describe(const AttemptRecord& a) {
  std::ostringstream s;
  s << a.attempt_id << " [";
  for (const auto& n : a.nodes) s << n << " ";
  s << "] start=" << a.start_ms << " end=" << a.end_ms << " useful_end=" << a.useful_end_ms << " "
    << AttemptEndName(a.end) << " lost=" << a.lost_work_ms << " speed=" << a.speed
    << " for=" << a.preempted_for << "/" << a.preemptor_job_id << " migrated=" << a.migrated;
  return s.str();
}

std::string Describe(const JobRecord& j) {
  std::ostringstream s;
  s << "job " << j.job_id << " first_start=" << j.first_start_ms << " end=" << j.end_ms
    << " attempts=" << j.attempts << " preemptions=" << j.preemptions
    << " displacements=" << j.displacements << " migrations=" << j.migrations;
  return s.str();
}

// The attempts in start order (those started at one instant in a fixed
// order: the engines list them in different orders) and the job records, as
// both engines give them; the backfill flag and the waiting texts are each
// engine's.
std::vector<std::string> InStartOrder(const SimResult& r) {
  std::vector<const AttemptRecord*> sorted;
  for (const auto& x : r.attempts) sorted.push_back(&x);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* x, const auto* y) {
    return x->start_ms != y->start_ms ? x->start_ms < y->start_ms : x->attempt_id < y->attempt_id;
  });
  std::vector<std::string> out;
  for (const auto* x : sorted) out.push_back(Describe(*x));
  return out;
}

void ExpectSameRecords(const SimResult& des, const SimResult& pool) {
  EXPECT_EQ(InStartOrder(des), InStartOrder(pool));
  std::vector<std::string> a, b;
  for (const auto& x : des.jobs) a.push_back(Describe(x));
  for (const auto& x : pool.jobs) b.push_back(Describe(x));
  EXPECT_EQ(a, b);
  EXPECT_EQ(des.drained, pool.drained);
  EXPECT_EQ(des.end_ms, pool.end_ms);
}

std::string Event(const std::string& kind, const std::string& node, const std::string& at) {
  return R"({"type":")" + kind + R"(","node":")" + node + R"(","at":)" + at + "}\n";
}

TEST(PoolSim, ArrivalsAndCompletionsMatchTheDes) {
  // Speeds, a queue on a full node, shares of a GPU, a model nobody has.
  const Trace t =
      Parse(kLab + Node("fast", 2, 2.0) + Node("slow", 1, 0.5) +
            Job(10, R"("submit":0,"gpus":2,"duration":"2h","cpus":2,"memory":"4GiB")") +
            Job(11, R"("submit":"1m","gpus":1,"duration":"1h")") +
            Job(12, R"("submit":"2m","gpus":1,"duration":"1h")") +
            Job(13, R"("submit":"3m","gpus":0.25,"gpu_memory":"4GiB","duration":"30m")") +
            Job(14, R"("submit":"4m","gpus":0.5,"gpu_memory":"4GiB","duration":"30m")") +
            Job(15, R"("submit":"5m","gpus":1,"gpu_models":["H100"],"duration":"1h")"));
  const SimResult des = Des(t);
  const SimResult pool = ViaPool(t);
  ExpectSameRecords(des, pool);
  // The records say something: the pool engine ran every job it could.
  ASSERT_EQ(pool.jobs.size(), 6u);
  EXPECT_EQ(pool.jobs[0].end_ms, kHour);  // 2 h of work at speed 2
  EXPECT_EQ(pool.jobs[5].first_start_ms, -1);
  EXPECT_FALSE(pool.jobs[5].waiting_reason.empty());
  EXPECT_FALSE(pool.drained);
  EXPECT_GT(pool.decide_calls, 0);
  EXPECT_EQ(pool.samples.size(), des.samples.size());
}

TEST(PoolSim, AnInteractivePreemptionMatchesTheDes) {
  // The guest's checkpointing job borrows the lab's GPU until the lab's
  // session wants it: preempted, vacated after the grace, resumed after.
  const Trace t =
      Parse(kLab + R"({"type":"group","name":"guest"})" + "\n" + Node("n1", 1, 1.0) +
            Job(1, R"("submit":0,"gpus":1,"duration":"5h","checkpoint_interval":"10m")", "guest") +
            Job(2, R"("submit":"25m","class":"interactive","gpus":1,"duration":"10m")"));
  const SimResult des = Des(t);
  const SimResult pool = ViaPool(t);
  ExpectSameRecords(des, pool);
  auto batch = AttemptsOf(pool, 1);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->end, AttemptEnd::kPreempted);
  EXPECT_EQ(batch[0]->preempted_for, "owner");  // the lab's session on the lab's node
  EXPECT_EQ(batch[0]->preemptor_job_id, 2);
  EXPECT_EQ(batch[0]->useful_end_ms, 20 * kMin);
  EXPECT_EQ(batch[0]->lost_work_ms, 5 * kMin);
  EXPECT_EQ(batch[0]->end_ms, 25 * kMin + 30 * 1000);
  EXPECT_EQ(pool.jobs[1].first_start_ms, 25 * kMin + 30 * 1000);
  EXPECT_EQ(pool.jobs[0].end_ms, batch[1]->start_ms + 5 * kHour - 20 * kMin);

  // On a machine no lab owns, the session preempts borrowed work as a
  // session, not as an owner.
  const Trace shared =
      Parse(kLab + R"({"type":"group","name":"guest"})" + "\n" + Node("n1", 1, 1.0, "") +
            Node("lab-1", 1, 1.0) + Job(3, R"("submit":0,"gpus":1,"duration":"1h")") +
            Job(1, R"("submit":1,"gpus":1,"duration":"5h","checkpoint_interval":"10m")", "guest") +
            Job(2, R"("submit":"25m","class":"interactive","gpus":1,"duration":"10m")"));
  const SimResult s = ViaPool(shared);
  ExpectSameRecords(Des(shared), s);
  auto guest = AttemptsOf(s, 1);
  ASSERT_EQ(guest.size(), 2u);
  EXPECT_EQ(guest[0]->nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(guest[0]->end, AttemptEnd::kPreempted);
  EXPECT_EQ(guest[0]->preempted_for, "interactive");
  EXPECT_EQ(guest[0]->preemptor_job_id, 2);
}

TEST(PoolSim, ANodeLeavingAndReturningMatchesTheDes) {
  // b is away at first; a leaves at 2.5 h after the 2 h checkpoint; the job
  // resumes on b (a migration) with 8 h of work left.
  const Trace t =
      Parse(kLab + Node("a", 1, 1.0) + Node("b", 1, 1.0) +
            Job(1, R"("submit":0,"gpus":1,"duration":"10h","checkpoint_interval":"1h")") +
            Event("node_leave", "b", "0") + Event("node_return", "b", "\"1h\"") +
            Event("node_leave", "a", "\"2h30m\""));
  const SimResult des = Des(t);
  const SimResult pool = ViaPool(t);
  ExpectSameRecords(des, pool);
  auto att = AttemptsOf(pool, 1);
  ASSERT_EQ(att.size(), 2u);
  EXPECT_EQ(att[0]->end, AttemptEnd::kNodeLeft);
  EXPECT_EQ(att[0]->end_ms, 150 * kMin);
  EXPECT_TRUE(att[1]->migrated);
  EXPECT_EQ(pool.jobs[0].end_ms, 150 * kMin + 8 * kHour);

  // Back on the same node after it returns: no migration, all work lost.
  const Trace same =
      Parse(kLab + Node("a", 1, 1.0) + Job(1, R"("submit":0,"gpus":1,"duration":"1h")") +
            Event("node_leave", "a", "\"30m\"") + Event("node_return", "a", "\"40m\""));
  const SimResult s = ViaPool(same);
  ExpectSameRecords(Des(same), s);
  auto att2 = AttemptsOf(s, 1);
  ASSERT_EQ(att2.size(), 2u);
  EXPECT_FALSE(att2[1]->migrated);
  EXPECT_EQ(s.jobs[0].end_ms, 40 * kMin + kHour);
}

TEST(PoolSim, AGangMatchesTheDesAndStopsItsOtherRanksWhenANodeLeaves) {
  // A torch gang over two nodes runs at its slowest node's speed, started
  // through the server's rendezvous.
  const Trace t = Parse(kLab + Node("fast", 2, 2.0) + Node("slow", 2, 0.5) +
                        Job(2, R"("submit":"1h","gpus":2,"nodes":2,"duration":"1h")"));
  const SimResult des = Des(t);
  const SimResult pool = ViaPool(t);
  ExpectSameRecords(des, pool);
  ASSERT_EQ(pool.attempts.size(), 1u);
  EXPECT_EQ(pool.attempts[0].nodes.size(), 2u);
  EXPECT_DOUBLE_EQ(pool.attempts[0].speed, 0.5);
  EXPECT_EQ(pool.jobs[0].end_ms, 3 * kHour);

  // One rank's node leaves: the DES kills the whole gang at once; the server
  // loses that rank and orders the other to stop (checkpoint signal and
  // grace), so the attempt, and the GPUs of the rank that stays, are freed
  // a grace later. The work kept is the same.
  const Trace leave =
      Parse(kLab + Node("a", 1, 1.0) + Node("b", 1, 1.0) + Node("c", 1, 1.0) +
            Job(1, R"("submit":0,"gpus":1,"nodes":2,"duration":"4h","checkpoint_interval":"1h")") +
            Event("node_leave", "a", "\"90m\""));
  const SimResult d = Des(leave);
  const SimResult p = ViaPool(leave);
  auto da = AttemptsOf(d, 1);
  auto pa = AttemptsOf(p, 1);
  ASSERT_EQ(da.size(), 2u);
  ASSERT_EQ(pa.size(), 2u);
  EXPECT_EQ(da[0]->end_ms, 90 * kMin);
  EXPECT_EQ(pa[0]->end, AttemptEnd::kNodeLeft);
  EXPECT_EQ(pa[0]->end_ms, 90 * kMin + 30 * 1000);
  EXPECT_EQ(pa[0]->useful_end_ms, da[0]->useful_end_ms);
  EXPECT_EQ(pa[0]->lost_work_ms, da[0]->lost_work_ms);
  EXPECT_EQ(pa[0]->useful_end_ms, kHour);
  // It restarts on the two nodes left, once the stopped rank's GPU is free.
  EXPECT_EQ(pa[1]->start_ms, 90 * kMin + 30 * 1000);
  std::vector<std::string> again = pa[1]->nodes;
  std::sort(again.begin(), again.end());
  EXPECT_EQ(again, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(p.jobs[0].end_ms, pa[1]->start_ms + 3 * kHour);
  EXPECT_EQ(p.jobs[0].displacements, 1);
}

TEST(PoolSim, ANodeWhoseLendingRefusesAGroupIsNotUsedForItsJobs) {
  // Two labs; the only idle GPUs are on "open" and "closed"; closed's
  // provider lends to everyone but the guest lab.
  const std::string groups = R"({"type":"group","name":"lab"})"
                             "\n"
                             R"({"type":"group","name":"guest"})"
                             "\n";
  std::string jobs;
  for (int i = 1; i <= 4; ++i) {
    jobs += Job(i, R"("submit":)" + std::to_string(i) + R"(,"gpus":1,"duration":"1h")", "guest");
  }
  jobs += Job(5, R"("submit":10,"gpus":1,"duration":"1h")", "lab");
  const Trace t = Parse(groups + Node("closed", 2, 1.0) + Node("open", 2, 1.0) + jobs);
  // The DES cannot say it: it uses both nodes for the guest's jobs.
  const SimResult des = Des(t);
  int des_on_closed = 0;
  for (const auto& a : des.attempts) {
    if (a.group == "guest" && a.nodes[0] == "closed") ++des_on_closed;
  }
  EXPECT_GT(des_on_closed, 0);

  PoolSimOptions extra;
  NodeLending l;
  l.gpus = {{"GPU-SIM-closed-0", 32768}, {"GPU-SIM-closed-1", 32768}};
  l.deny_groups = {"guest"};
  extra.lending["closed"] = l;
  const SimResult pool = ViaPool(t, SimMode::kPooled, extra);
  ASSERT_EQ(pool.jobs.size(), 5u);
  for (const auto& a : pool.attempts) {
    if (a.group == "guest") {
      EXPECT_EQ(a.nodes[0], "open") << Describe(a);
    }
  }
  // The guest's jobs queue for "open" (two at a time) instead; the lab's
  // own job runs on "closed" at once.
  EXPECT_EQ(pool.jobs[2].first_start_ms, kHour + 1000);
  EXPECT_EQ(pool.jobs[3].first_start_ms, kHour + 2000);
  EXPECT_EQ(pool.jobs[4].first_start_ms, 10 * 1000);
  EXPECT_EQ(AttemptsOf(pool, 5)[0]->nodes[0], "closed");
  EXPECT_TRUE(pool.drained);

  // A lending for a node the trace does not have is an error, not ignored.
  PoolSimOptions bad;
  bad.lending["nowhere"] = l;
  auto r = SimulateThroughPool(t, SimOptions{}, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "lending: unknown node nowhere");
}

TEST(PoolSim, ATracesLendingPolicyRunsThroughThePoolAndTheDesRefusesIt) {
  const std::string groups = R"({"type":"group","name":"lab"})"
                             "\n"
                             R"({"type":"group","name":"guest"})"
                             "\n";
  const std::string closed =
      R"({"type":"node","name":"closed","owner_group":"lab","gpus":2,"gpu_model":"V100",)"
      R"("gpu_memory":"32GiB","cpus":64,"memory":"256GiB","deny_groups":["guest"]})"
      "\n";
  std::string jobs;
  for (int i = 1; i <= 4; ++i) {
    jobs += Job(i, R"("submit":)" + std::to_string(i) + R"(,"gpus":1,"duration":"1h")", "guest");
  }
  const Trace t = Parse(groups + closed + Node("open", 2, 1.0) + jobs);
  ASSERT_EQ(t.nodes[0].deny_groups, std::vector<std::string>{"guest"});
  // It survives a write and a read.
  auto again = ParseTrace("again.jsonl", FormatTrace(t));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, t);

  const SimResult pool = ViaPool(t);
  ASSERT_EQ(pool.attempts.size(), 4u);
  for (const auto& a : pool.attempts) EXPECT_EQ(a.nodes[0], "open") << Describe(a);
  EXPECT_EQ(pool.jobs[2].first_start_ms, kHour + 1000);

  // allow_groups: only those.
  Trace only = t;
  only.nodes[0].deny_groups.clear();
  only.nodes[0].allow_groups = {"lab"};
  for (const auto& a : ViaPool(only).attempts) EXPECT_EQ(a.nodes[0], "open") << Describe(a);
  only.nodes[0].allow_groups = {"guest"};
  int on_closed = 0;
  for (const auto& a : ViaPool(only).attempts) on_closed += a.nodes[0] == "closed" ? 1 : 0;
  EXPECT_EQ(on_closed, 2);

  // The DES cannot run it: an error, not numbers without the policy.
  auto des = Simulate(t, SimOptions{});
  ASSERT_FALSE(des.ok());
  EXPECT_EQ(des.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(des.status().message().find("node closed: a lending policy"), std::string::npos)
      << des.status().message();

  // A policy naming an undeclared group is a parse error.
  auto bad =
      ParseTrace("bad.jsonl", groups + R"({"type":"node","name":"n","gpus":1,)"
                                       R"("gpu_model":"V100","gpu_memory":"32GiB",)"
                                       R"("cpus":8,"memory":"64GiB","allow_groups":["nobody"]})"
                                       "\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "bad.jsonl:3: allow_groups: unknown group 'nobody' (declare it on an earlier line)");
}

TEST(PoolSim, PerLabModeIsOnePoolPerLab) {
  const std::string two_labs = R"({"type":"group","name":"busy"})"
                               "\n"
                               R"({"type":"group","name":"idle"})"
                               "\n" +
                               Node("busy-1", 1, 1.0, "busy") + Node("idle-1", 2, 1.0, "idle") +
                               Node("free", 2, 1.0, "");
  std::string jobs;
  for (int i = 1; i <= 4; ++i) {
    jobs += Job(i, R"("submit":)" + std::to_string(i) + R"(,"gpus":1,"duration":"1h")", "busy");
  }
  jobs += Job(7, R"("submit":0,"gpus":1,"duration":"30m")", "idle");
  const Trace t = Parse(two_labs + jobs);
  const SimResult des = Des(t, SimMode::kPerLab);
  const SimResult pool = ViaPool(t, SimMode::kPerLab);
  ExpectSameRecords(des, pool);
  for (const auto& a : pool.attempts) {
    EXPECT_EQ(a.nodes[0], a.group == "busy" ? "busy-1" : "idle-1") << Describe(a);
  }
  EXPECT_EQ(pool.jobs[3].first_start_ms, 3 * kHour + 1000);
}

TEST(PoolSim, RejectsWhatTheDesRejects) {
  Trace t = Parse(kLab + Node("n1", 1, 1.0) + Job(1, R"("submit":0,"gpus":1,"duration":"1h")"));
  t.jobs[0].group = "nobody";
  auto r = SimulateThroughPool(t, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "job 1: unknown group nobody");
  t = Parse(kLab + Node("n1", 1, 1.0));
  t.events.push_back({NodeEventKind::kLeave, "n9", 0});
  EXPECT_FALSE(SimulateThroughPool(t, SimOptions{}).ok());
}

TEST(PoolSim, AJobTheServerWouldRefuseIsAnErrorNotASkippedJob) {
  // The DES takes any runtime bound; the server refuses one over a year.
  const Trace t =
      Parse(kLab + Node("n1", 1, 1.0) + Job(1, R"("submit":0,"gpus":1,"duration":"1h")") +
            Job(7, R"("submit":0,"gpus":1,"duration":"1h","runtime_limit":"9000h")"));
  EXPECT_TRUE(Simulate(t, SimOptions{}).ok());
  auto r = SimulateThroughPool(t, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("job 7: max_runtime: ", 0), 0u) << r.status().message();
  // A checkpoint interval below the server's minimum is the simulator's
  // business only: it runs, and its checkpoints count.
  const Trace fine =
      Parse(kLab + R"({"type":"group","name":"guest"})" + "\n" + Node("n1", 1, 1.0) +
            Job(1, R"("submit":0,"gpus":1,"duration":"1h","checkpoint_interval":"1s")", "guest") +
            Job(2, R"("submit":"25m","class":"interactive","gpus":1,"duration":"10m")"));
  const SimResult p = ViaPool(fine);
  ExpectSameRecords(Des(fine), p);
  auto batch = AttemptsOf(p, 1);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->end, AttemptEnd::kPreempted);
  EXPECT_EQ(batch[0]->lost_work_ms, 0);
  // Nor is the grace: 0 (vacate at once) is outside the server's bounds for
  // a spec's grace, and runs.
  SimOptions at_once;
  at_once.preempt_grace_ms = 0;
  auto q = SimulateThroughPool(fine, at_once);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto d = Simulate(fine, at_once);
  ASSERT_TRUE(d.ok());
  ExpectSameRecords(*d, *q);
  EXPECT_EQ(AttemptsOf(*q, 1)[0]->end_ms, 25 * kMin);
}

TEST(PoolSim, TheCampusCommandRunsTheEngineItIsGiven) {
  EXPECT_EQ(*ParseSimEngine("pool"), SimEngine::kPool);
  EXPECT_EQ(*ParseSimEngine("des"), SimEngine::kDes);
  EXPECT_FALSE(ParseSimEngine("fast").ok());
  CampusOptions o;
  o.seed = 3;
  o.labs = 3;
  o.days = 1;
  o.leave_per_node_day = 0;
  o.gang_fraction = 0;
  auto t = GenerateCampus(o);
  ASSERT_TRUE(t.ok());
  const auto modes = std::vector<SimMode>{SimMode::kPooled, SimMode::kPerLab};
  SimOptions des_options;
  SimOptions pool_options;
  pool_options.engine = SimEngine::kPool;
  auto des = RunCampusModes(*t, modes, des_options);
  auto pool = RunCampusModes(*t, modes, pool_options);
  ASSERT_TRUE(des.ok()) << des.status().ToString();
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const auto sd = SummaryJson(*t, *des, "campus", -1);
  const auto sp = SummaryJson(*t, *pool, "campus", -1);
  EXPECT_EQ(sd["modes"]["pooled"]["options"]["engine"], "des");
  EXPECT_EQ(sp["modes"]["pooled"]["options"]["engine"], "pool");
  // Per lab, without departures or gangs, the server does what the DES
  // models: the same records, so the same metrics.
  ExpectSameRecords((*des)[1].result, (*pool)[1].result);
  auto metrics = [](nlohmann::ordered_json m) {
    m.erase("options");
    return m.dump();
  };
  EXPECT_EQ(metrics(sd["modes"]["per-lab"]), metrics(sp["modes"]["per-lab"]));
  EXPECT_GT((*pool)[1].result.attempts.size(), 50u);
}

TEST(PoolSim, AGeneratedCampusRunsThroughThePoolTheSameTwice) {
  CampusOptions o;
  o.seed = 7;
  o.labs = 4;
  o.days = 1;
  o.leave_per_node_day = 1;
  auto t = GenerateCampus(o);
  ASSERT_TRUE(t.ok());
  std::map<std::string, const TraceNode*> nodes;
  for (const auto& n : t->nodes) nodes[n.name] = &n;
  for (SimMode mode : {SimMode::kPooled, SimMode::kPerLab}) {
    const SimResult r = ViaPool(*t, mode);
    const SimResult again = ViaPool(*t, mode);
    ExpectSameRecords(r, again);
    for (const auto& s : r.samples) EXPECT_LE(s.allocated_milli, s.capacity_milli);
    std::map<int64_t, double> kept;
    for (const auto& a : r.attempts) {
      EXPECT_LE(a.start_ms, a.useful_end_ms) << Describe(a);
      EXPECT_LE(a.useful_end_ms, a.end_ms) << Describe(a);
      if (a.priority != sched::PriorityClass::kInteractive) {
        kept[a.job_id] += static_cast<double>(a.useful_end_ms - a.start_ms) * a.speed;
      }
      if (mode == SimMode::kPerLab) {
        for (const auto& n : a.nodes) EXPECT_EQ(nodes[n]->owner_group, a.group);
      }
    }
    int completed = 0;
    for (const auto& j : r.jobs) {
      if (j.end_ms < 0 || j.priority == sched::PriorityClass::kInteractive) continue;
      ++completed;
      EXPECT_NEAR(kept[j.job_id], static_cast<double>(j.work_ms), 4.0 * (j.attempts + 1))
          << "job " << j.job_id;
    }
    EXPECT_GT(completed, 30);
    EXPECT_GT(std::count_if(r.attempts.begin(), r.attempts.end(),
                            [](const AttemptRecord& a) { return a.end == AttemptEnd::kNodeLeft; }),
              0);
  }
}

}  // namespace
}  // namespace gpupool::sim
