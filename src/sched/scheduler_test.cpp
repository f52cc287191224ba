#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace gpupool::sched {
namespace {

constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 60 * kMin;

// A node of `count` GPUs of one model; everything free.
NodeView MakeNode(const std::string& id, int count,
                  const std::string& model = "NVIDIA A100-SXM4-80GB", int64_t gpu_mem = 81920,
                  int32_t cc = 80) {
  NodeView n;
  n.id = id;
  n.name = id;
  for (int i = 0; i < count; ++i) {
    n.gpus.push_back({id + "-g" + std::to_string(i), model, gpu_mem, cc, 1000, gpu_mem});
  }
  n.cpu_milli_total = n.cpu_milli_free = 64000;
  n.memory_mib_total = n.memory_mib_free = 256 * 1024;
  return n;
}

PendingJob Whole(int64_t id, int gpus, const std::string& group = "a") {
  PendingJob j;
  j.job_id = id;
  j.group = group;
  j.submit_ms = id;
  j.request.gpus = gpus;
  return j;
}

PendingJob Share(int64_t id, int milli, int64_t mem = 0) {
  PendingJob j = Whole(id, 0);
  j.request.gpu_milli = milli;
  j.request.gpu_memory_mib = mem;
  return j;
}

// Marks GPUs of node `n` as held by a running job and returns that job.
RunningJob Occupy(NodeView& n, std::vector<int> gpus, int64_t job_id, const std::string& group) {
  RunningJob r;
  r.job_id = job_id;
  r.attempt_id = std::to_string(job_id) + ".1";
  r.group = group;
  Holding h;
  h.node_id = n.id;
  h.gpu_milli = 1000;
  for (int g : gpus) {
    n.gpus[static_cast<size_t>(g)].free_milli = 0;
    n.gpus[static_cast<size_t>(g)].free_memory_mib = 0;
    h.gpu_uuids.push_back(n.gpus[static_cast<size_t>(g)].uuid);
  }
  r.holdings.push_back(h);
  return r;
}

SchedulerConfig TwoGroups();

Decisions Schedule(const Snapshot& s, SchedulerConfig config = {}) {
  Scheduler sched(std::move(config));
  auto d = sched.Decide(s);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? *d : Decisions{};
}

const Waiting* FindWaiting(const Decisions& d, int64_t id) {
  for (const Waiting& w : d.waiting) {
    if (w.job_id == id) return &w;
  }
  return nullptr;
}

TEST(SchedulerTest, WholeGpusPackOntoNodesAlreadyInUse) {
  Snapshot s;
  s.nodes = {MakeNode("a", 4), MakeNode("b", 4)};
  s.running.push_back(Occupy(s.nodes[1], {0}, 100, "a"));
  s.pending = {Whole(1, 1)};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].nodes[0].node_id, "b");  // keeps node a whole
  EXPECT_EQ(d.placements[0].nodes[0].gpu_uuids, std::vector<std::string>{"b-g1"});
}

TEST(SchedulerTest, PlacementScoreIsPluggable) {
  Snapshot s;
  s.nodes = {MakeNode("a", 4), MakeNode("b", 4), MakeNode("c", 4)};
  s.running.push_back(Occupy(s.nodes[1], {0}, 100, "x"));
  s.running.push_back(Occupy(s.nodes[2], {0, 1}, 101, "x"));
  s.pending = {Whole(1, 1)};
  std::map<PlacementScore, std::string> where;
  for (PlacementScore p :
       {PlacementScore::kGpupool, PlacementScore::kBestFit, PlacementScore::kFirstFit}) {
    SchedulerConfig c;
    c.placement = p;
    Decisions d = Schedule(s, c);
    ASSERT_EQ(d.placements.size(), 1u);
    where[p] = d.placements[0].nodes[0].node_id;
  }
  EXPECT_EQ(where[PlacementScore::kFirstFit], "a");  // lowest id with room
  EXPECT_EQ(where[PlacementScore::kBestFit], "c");   // least left after
  EXPECT_EQ(where[PlacementScore::kGpupool], "c");
  EXPECT_EQ(*ParsePlacementScore("best-fit"), PlacementScore::kBestFit);
  // Every policy name `gpupool sim --policy` takes is a placement too
  // (issue 21); an unknown one is still an error that lists the known ones.
  for (const std::string& name : PolicyNames()) {
    auto p = ParsePlacementScore(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(PlacementScoreName(*p), name);
  }
  auto bad = ParsePlacementScore("tetris");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dot-product"), std::string::npos);
}

PendingJob ShareOf(int64_t id, int milli, const std::string& user) {
  PendingJob j = Share(id, milli, 1000);
  j.request.user = user;
  return j;
}

TEST(SchedulerTest, AnMpsGpuTakesTheSharesOfOneUserOnly) {
  // One MPS GPU: alice's two shares stack on it in one pass; bob's, though
  // it fits in milli and memory, waits.
  Snapshot s;
  s.nodes = {MakeNode("a", 1, "NVIDIA T4", 16384, 75)};
  s.nodes[0].gpus[0].mps = true;
  s.pending = {ShareOf(1, 300, "alice"), ShareOf(2, 200, "bob"), ShareOf(3, 500, "alice")};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.placements[0].job_id, 1);
  EXPECT_EQ(d.placements[1].job_id, 3);
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_EQ(d.waiting[0].job_id, 2);

  // The same without MPS: bob's share goes on the GPU too.
  s.nodes[0].gpus[0].mps = false;
  EXPECT_EQ(Schedule(s).placements.size(), 3u);

  // A GPU held by bob's running share (the server says so in mps_user)
  // refuses alice, and a second MPS GPU on the node takes her instead.
  s.nodes = {MakeNode("a", 2, "NVIDIA T4", 16384, 75)};
  for (GpuView& g : s.nodes[0].gpus) g.mps = true;
  s.nodes[0].gpus[0].mps_user = "bob";
  s.nodes[0].gpus[0].free_milli = 700;
  s.nodes[0].gpus[0].free_memory_mib = 15384;
  s.pending = {ShareOf(4, 300, "alice"), ShareOf(5, 300, "bob")};
  d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 2u);
  std::map<int64_t, std::string> gpu;
  for (const Placement& p : d.placements) gpu[p.job_id] = p.nodes[0].gpu_uuids.at(0);
  EXPECT_EQ(gpu[4], "a-g1");
  EXPECT_EQ(gpu[5], "a-g0");  // bob's stacks on his own (the fuller GPU)

  // With only bob's GPU, alice waits (not forever: bob's share may end).
  s.nodes = {MakeNode("a", 1, "NVIDIA T4", 16384, 75)};
  s.nodes[0].gpus[0].mps = true;
  s.nodes[0].gpus[0].mps_user = "bob";
  s.nodes[0].gpus[0].free_milli = 700;
  s.nodes[0].gpus[0].free_memory_mib = 15384;
  s.pending = {ShareOf(6, 300, "alice")};
  d = Schedule(s);
  EXPECT_TRUE(d.placements.empty());
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_FALSE(d.waiting[0].unsatisfiable);
}

TEST(SchedulerTest, SharesStackOnOneGpuWithinMilliAndMemory) {
  Snapshot s;
  s.nodes = {MakeNode("a", 1, "NVIDIA T4", 16384, 75)};
  s.pending = {Share(1, 500, 6000), Share(2, 500, 6000), Share(3, 250, 1000)};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.placements[0].nodes[0].gpu_uuids, d.placements[1].nodes[0].gpu_uuids);
  EXPECT_EQ(d.placements[0].nodes[0].gpu_milli, 500);
  EXPECT_EQ(d.placements[0].nodes[0].gpu_memory_mib, 6000);
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_EQ(WaitReasonText(d.waiting[0].reason), "waiting for a 0.25 GPU share with 1000 MiB free");
  EXPECT_FALSE(d.waiting[0].unsatisfiable);

  // Memory, not milli, is what runs out here.
  s.pending = {Share(1, 250, 10000), Share(2, 250, 10000)};
  d = Schedule(s);
  EXPECT_EQ(d.placements.size(), 1u);
}

TEST(SchedulerTest, ConstraintsAreHonouredAndExplained) {
  Snapshot s;
  s.nodes = {MakeNode("t4", 2, "NVIDIA T4", 16384, 75), MakeNode("a100", 2)};
  s.nodes[1].labels["rack"] = "r2";
  PendingJob cc = Whole(1, 1);
  cc.request.min_compute_capability = 80;
  PendingJob model = Whole(2, 1);
  model.request.gpu_models = {"T4"};
  PendingJob label = Whole(3, 1);
  label.request.node_labels["rack"] = "r2";
  PendingJob big = Whole(4, 1);
  big.request.gpu_memory_mib = 200000;
  PendingJob h100 = Whole(5, 1);
  h100.request.gpu_models = {"H100"};
  PendingJob old_cc = Whole(6, 1);
  old_cc.request.min_compute_capability = 90;
  s.pending = {cc, model, label, big, h100, old_cc};
  Decisions d = Schedule(s);
  std::map<int64_t, std::string> where;
  for (const Placement& p : d.placements) where[p.job_id] = p.nodes[0].node_id;
  EXPECT_EQ(where[1], "a100");
  EXPECT_EQ(where[2], "t4");
  EXPECT_EQ(where[3], "a100");
  ASSERT_EQ(d.waiting.size(), 3u);
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 4)->reason), "no node has a GPU with 195.3 GiB");
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 5)->reason), "no node has a GPU of model H100");
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 6)->reason),
            "no node has a GPU with compute capability >= 9.0");
  EXPECT_TRUE(FindWaiting(d, 6)->unsatisfiable);
}

TEST(SchedulerTest, NodesThatAreNotReadyGetNothing) {
  Snapshot s;
  s.nodes = {MakeNode("a", 2)};
  s.nodes[0].ready = false;
  s.pending = {Whole(1, 1)};
  Decisions d = Schedule(s);
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(WaitReasonText(d.waiting[0].reason), "no node is ready");
}

TEST(SchedulerTest, ExcludedNodesAreNeverUsed) {
  Snapshot s;
  s.now_ms = 10 * kHour;
  s.nodes = {MakeNode("a", 1), MakeNode("b", 1), MakeNode("c", 2)};
  // "a" would be the first fit; an exclusion sends the job elsewhere, and
  // the same request without one still takes "a".
  PendingJob avoids_a = Whole(1, 1);
  avoids_a.request.excluded_nodes = {"a"};
  PendingJob plain = Whole(2, 1);
  PendingJob avoids_all = Whole(3, 1);
  avoids_all.request.excluded_nodes = {"a", "b", "c"};
  PendingJob gang = Whole(4, 1);
  gang.request.nodes = 2;
  gang.request.excluded_nodes = {"b"};
  s.pending = {avoids_a, plain, avoids_all, gang};
  SchedulerConfig first_fit;
  first_fit.placement = PlacementScore::kFirstFit;
  Decisions d = Schedule(s, first_fit);
  std::map<int64_t, std::vector<std::string>> where;
  for (const Placement& p : d.placements) {
    for (const NodeAssignment& a : p.nodes) where[p.job_id].push_back(a.node_id);
  }
  EXPECT_EQ(where[1], std::vector<std::string>{"b"});
  EXPECT_EQ(where[2], std::vector<std::string>{"a"});
  EXPECT_EQ(where.count(3), 0u);
  const Waiting* w = FindWaiting(d, 3);
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->unsatisfiable);
  EXPECT_EQ(WaitReasonText(w->reason),
            "no node it may use can host it; 3 nodes that could are excluded for it");
  // The gang needs a and c; a is taken, b excluded: it waits, holding nothing.
  EXPECT_EQ(where.count(4), 0u);

  // Preemption never makes room on an excluded node.
  s.nodes = {MakeNode("a", 1)};
  RunningJob victim = Occupy(s.nodes[0], {0}, 100, "guest");
  victim.preemptible = true;
  s.running = {victim};
  PendingJob session = Whole(5, 1, "owner");
  session.priority = PriorityClass::kInteractive;
  session.request.excluded_nodes = {"a"};
  s.pending = {session};
  d = Schedule(s, TwoGroups());
  EXPECT_TRUE(d.preemptions.empty());
  s.pending[0].request.excluded_nodes.clear();
  d = Schedule(s, TwoGroups());
  EXPECT_EQ(d.preemptions.size(), 1u);

  // The list must be sorted and unique.
  s.pending[0].request.excluded_nodes = {"b", "a"};
  Scheduler sched({});
  auto bad = sched.Decide(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("excluded_nodes"), std::string::npos);
}

TEST(SchedulerTest, GangIsPlacedWholeOnDistinctNodesOrNotAtAll) {
  Snapshot s;
  s.nodes = {MakeNode("a", 4), MakeNode("b", 4), MakeNode("c", 2)};
  PendingJob gang = Whole(1, 2);
  gang.request.nodes = 3;
  s.pending = {gang};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 1u);
  std::set<std::string> nodes;
  for (const NodeAssignment& a : d.placements[0].nodes) {
    nodes.insert(a.node_id);
    EXPECT_EQ(a.gpu_uuids.size(), 2u);
  }
  EXPECT_EQ(nodes.size(), 3u);

  // Only two nodes have 3 GPUs: nothing is placed, and nothing is held.
  gang.request.gpus = 3;
  PendingJob small = Whole(2, 1);
  s.pending = {gang, small};
  d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, 2);
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 1)->reason),
            "the gang needs 3 nodes that can each host one rank; 2 can");
}

TEST(SchedulerTest, InteractiveGoesFirstThenTheLessUsedGroup) {
  Snapshot s;
  s.now_ms = 10 * kHour;
  s.nodes = {MakeNode("a", 2)};
  PendingJob heavy = Whole(1, 1, "heavy");
  PendingJob light = Whole(2, 1, "light");
  PendingJob session = Whole(3, 1, "heavy");
  session.priority = PriorityClass::kInteractive;
  session.submit_ms = 99;
  s.pending = {heavy, light, session};
  s.usage["heavy"] = {1000 * kHour, s.now_ms};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.placements[0].job_id, 3);
  EXPECT_EQ(d.placements[1].job_id, 2);
  EXPECT_EQ(d.waiting[0].job_id, 1);
  EXPECT_EQ(d.waiting[0].position, 1);  // the two placed ones are out of line
  EXPECT_EQ(ExplanationText(d.waiting[0].position, d.waiting[0].queue)
                .rfind("position 1 (normal): group heavy", 0),
            0u)
      << ExplanationText(d.waiting[0].position, d.waiting[0].queue);
}

TEST(SchedulerTest, DisplacedJobsGoFirstInTheirClass) {
  Snapshot s;
  s.nodes = {MakeNode("a", 1)};
  PendingJob first = Whole(1, 1);
  PendingJob displaced = Whole(2, 1);
  displaced.front = true;
  s.pending = {first, displaced};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, 2);
}

TEST(SchedulerTest, BackfillRunsShortJobsAheadButNeverDelaysTheReservation) {
  Snapshot s;
  s.now_ms = kHour;
  s.nodes = {MakeNode("a", 4)};
  RunningJob r = Occupy(s.nodes[0], {0, 1}, 100, "a");
  r.expected_end_ms = s.now_ms + kHour;
  s.running = {r};
  PendingJob big = Whole(1, 4);
  PendingJob short_job = Whole(2, 1);
  short_job.runtime_limit_ms = 30 * kMin;
  PendingJob long_job = Whole(3, 1);
  long_job.runtime_limit_ms = 2 * kHour;
  PendingJob unknown = Whole(4, 1);
  s.pending = {big, short_job, long_job, unknown};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, 2);
  EXPECT_TRUE(d.placements[0].backfilled);
  const Waiting* w = FindWaiting(d, 1);
  EXPECT_EQ(w->reserved_start_ms, s.now_ms + kHour);
  EXPECT_EQ(WaitReasonText(w->reason),
            "waiting for 4 free GPUs; reserved: expected to start in 1h");
  EXPECT_TRUE(FindWaiting(d, 3) != nullptr);
  EXPECT_TRUE(FindWaiting(d, 4) != nullptr);

  // Without backfill reservations the long jobs take the free GPUs.
  SchedulerConfig no_backfill;
  no_backfill.max_reservations = 0;
  d = Schedule(s, no_backfill);
  EXPECT_EQ(d.placements.size(), 2u);
}

SchedulerConfig TwoGroups() {
  SchedulerConfig c;
  c.groups = {{"owner", 1, 2000}, {"guest", 1, 0}};
  return c;
}

TEST(SchedulerTest, InteractivePreemptsTheBorrowedAttemptThatLosesLeastWork) {
  Snapshot s;
  s.now_ms = 10 * kHour;
  s.nodes = {MakeNode("a", 2)};
  RunningJob old_ckpt = Occupy(s.nodes[0], {0}, 100, "guest");
  old_ckpt.preemptible = true;
  old_ckpt.started_ms = kHour;
  old_ckpt.last_checkpoint_ms = 2 * kHour;  // 8 h of work would be lost
  RunningJob fresh = Occupy(s.nodes[0], {1}, 101, "guest");
  fresh.preemptible = true;
  fresh.started_ms = kHour;
  fresh.last_checkpoint_ms = s.now_ms - 5 * kMin;
  s.running = {old_ckpt, fresh};
  PendingJob session = Whole(1, 1, "owner");
  session.priority = PriorityClass::kInteractive;
  s.pending = {session};
  Decisions d = Schedule(s, TwoGroups());
  EXPECT_TRUE(d.placements.empty());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].attempt_id, "101.1");
  EXPECT_EQ(d.preemptions[0].reason, PreemptReason::kInteractive);
  EXPECT_EQ(d.preemptions[0].lost_work_ms, 5 * kMin);
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 1)->reason),
            "waiting for 1 preempted attempt to checkpoint and leave node a");

  // Within the anti-thrash window it is spared; the other one goes.
  s.running[1].last_preempted_ms = s.now_ms - 10 * kMin;
  d = Schedule(s, TwoGroups());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].attempt_id, "100.1");

  // Attempts that do not checkpoint are never preempted.
  s.running[0].preemptible = false;
  d = Schedule(s, TwoGroups());
  EXPECT_TRUE(d.preemptions.empty());
}

TEST(SchedulerTest, WorkWithinItsGuaranteeIsNotPreemptedExceptByTheOwner) {
  Snapshot s;
  s.now_ms = 10 * kHour;
  s.nodes = {MakeNode("a", 1)};
  SchedulerConfig c;
  c.groups = {{"owner", 1, 1000}, {"guest", 1, 1000}};
  RunningJob guest = Occupy(s.nodes[0], {0}, 100, "guest");
  guest.preemptible = true;
  s.running = {guest};
  PendingJob session = Whole(1, 1, "owner");
  session.priority = PriorityClass::kInteractive;
  s.pending = {session};
  EXPECT_TRUE(Schedule(s, c).preemptions.empty());  // guest is within its guarantee

  s.nodes[0].owner_group = "owner";
  Decisions d = Schedule(s, c);
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, PreemptReason::kOwner);

  // An owner's opportunistic job too, but only on its own machine.
  s.pending[0].priority = PriorityClass::kOpportunistic;
  EXPECT_EQ(Schedule(s, c).preemptions.size(), 1u);
  s.nodes[0].owner_group.clear();
  EXPECT_TRUE(Schedule(s, c).preemptions.empty());
}

TEST(SchedulerTest, WorkOnItsOwnersNodeIsSafeAndSessionsMayDisplaceTheirOwnBatch) {
  Snapshot s;
  s.now_ms = 10 * kHour;
  s.nodes = {MakeNode("a", 1)};
  RunningJob guest = Occupy(s.nodes[0], {0}, 100, "guest");
  guest.preemptible = true;
  s.running = {guest};
  PendingJob session = Whole(1, 1, "owner");
  session.priority = PriorityClass::kInteractive;
  s.pending = {session};
  s.nodes[0].owner_group = "guest";  // the guest runs on its own machine
  EXPECT_TRUE(Schedule(s, TwoGroups()).preemptions.empty());

  s.pending[0].group = "guest";  // its own session displaces its own batch job
  Decisions d = Schedule(s, TwoGroups());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, PreemptReason::kInteractive);

  s.pending[0].priority = PriorityClass::kNormal;  // but not a batch job of its own
  EXPECT_TRUE(Schedule(s, TwoGroups()).preemptions.empty());
}

TEST(SchedulerTest, AGroupReclaimsItsGuaranteeFromBorrowers) {
  Snapshot s;
  s.now_ms = 10 * kHour;
  s.nodes = {MakeNode("a", 2)};
  RunningJob b1 = Occupy(s.nodes[0], {0}, 100, "guest");
  RunningJob b2 = Occupy(s.nodes[0], {1}, 101, "guest");
  b1.preemptible = b2.preemptible = true;
  s.running = {b1, b2};
  s.pending = {Whole(1, 1, "owner")};
  Decisions d = Schedule(s, TwoGroups());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, PreemptReason::kGuarantee);

  // A normal job beyond its group's guarantee only waits.
  s.pending = {Whole(1, 1, "guest2")};
  EXPECT_TRUE(Schedule(s, TwoGroups()).preemptions.empty());
}

TEST(SchedulerTest, PreferredModelsFirstThenTheFastestFallback) {
  Snapshot s;
  s.now_ms = 10 * kMin;
  s.nodes = {MakeNode("t4", 1, "NVIDIA T4", 16384, 75),
             MakeNode("v100", 1, "Tesla V100-SXM2-32GB", 32768, 70), MakeNode("a100", 1)};
  s.running.push_back(Occupy(s.nodes[2], {0}, 100, "x"));
  PendingJob j = Whole(1, 1);
  j.submit_ms = 0;
  j.request.preferred_models = {"A100"};
  j.request.prefer_wait_ms = 15 * kMin;
  s.pending = {j};
  SchedulerConfig c;
  c.model_speed = {{"A100", 3.0}, {"V100", 1.0}, {"T4", 0.5}};
  Decisions d = Schedule(s, c);
  EXPECT_TRUE(d.placements.empty());
  EXPECT_NE(WaitReasonText(d.waiting[0].reason).find("preferring A100 for 5m more"),
            std::string::npos)
      << WaitReasonText(d.waiting[0].reason);

  s.now_ms = 20 * kMin;
  d = Schedule(s, c);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].nodes[0].node_id, "v100");
}

TEST(SchedulerTest, PlacementLimitStopsThePass) {
  Snapshot s;
  s.nodes = {MakeNode("a", 8)};
  for (int i = 1; i <= 5; ++i) s.pending.push_back(Whole(i, 1));
  SchedulerConfig c;
  c.max_placements = 2;
  Decisions d = Schedule(s, c);
  EXPECT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.waiting.size(), 3u);
  EXPECT_NE(WaitReasonText(d.waiting[0].reason).find("placement limit"), std::string::npos);
}

TEST(SchedulerTest, BadSnapshotsAreRejectedWithTheItem) {
  Snapshot s;
  s.nodes = {MakeNode("a", 1), MakeNode("a", 1)};
  Scheduler sched({});
  auto d = sched.Decide(s);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("duplicate node id"), std::string::npos);

  s.nodes.pop_back();
  PendingJob j = Share(1, 1000);
  s.pending = {j};
  d = sched.Decide(s);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("pending[0] (job 1).request.gpu_milli"), std::string::npos)
      << d.status().message();

  s.pending.clear();
  RunningJob r;
  r.attempt_id = "9.1";
  r.holdings.push_back({"nowhere", {}, 1000, 0, 0, 0});
  s.running = {r};
  d = sched.Decide(s);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("unknown node nowhere"), std::string::npos);
}

TEST(SchedulerTest, SameSnapshotSameDecisions) {
  Snapshot s;
  s.now_ms = kHour;
  for (int i = 0; i < 6; ++i) s.nodes.push_back(MakeNode("n" + std::to_string(i), 4));
  for (int i = 1; i <= 30; ++i) {
    s.pending.push_back(i % 3 == 0 ? Share(i, 300, 1000) : Whole(i, 1 + i % 4));
  }
  Decisions a = Schedule(s), b = Schedule(s);
  EXPECT_EQ(a.placements, b.placements);
  EXPECT_EQ(a.waiting, b.waiting);
}

// Two groups with endless backlogs of 10-minute 1-GPU jobs share 6 GPUs for
// two days. Decayed-usage ordering must converge to the weights (2:1), and
// a group that arrives late must catch up rather than be locked out.
TEST(FairShareConvergenceTest, GpuTimeFollowsTheWeights) {
  SchedulerConfig config;
  config.groups = {{"a", 2, 0}, {"b", 1, 0}};
  config.half_life_ms = kHour;
  Scheduler sched(config);
  Snapshot s;
  for (int i = 0; i < 3; ++i) s.nodes.push_back(MakeNode("n" + std::to_string(i), 2));
  struct Run {
    int64_t job;
    std::string group;
    int node, gpu;
    int64_t end;
  };
  std::vector<Run> running;
  std::map<std::string, int64_t> late_gpu_ms;
  int64_t next_id = 1;
  for (int64_t t = 0; t < 48 * kHour; t += kMin) {
    s.now_ms = t;
    // Charge the minute that just passed, release what ended.
    for (const Run& r : running) {
      s.usage[r.group] = Charge(s.usage[r.group], 1000, t - kMin, t, config.half_life_ms);
      if (t >= 24 * kHour) late_gpu_ms[r.group] += kMin;
    }
    std::erase_if(running, [&](const Run& r) {
      if (r.end > t) return false;
      auto& gpu = s.nodes[static_cast<size_t>(r.node)].gpus[static_cast<size_t>(r.gpu)];
      gpu.free_milli = 1000;
      gpu.free_memory_mib = gpu.memory_mib;
      return true;
    });
    s.pending.clear();
    for (const char* g : {"a", "b"}) {
      if (std::string(g) == "b" && t < 6 * kHour) continue;  // b arrives late
      for (int k = 0; k < 8; ++k) {
        PendingJob j = Whole(next_id++, 1, g);
        j.submit_ms = t;
        s.pending.push_back(j);
      }
    }
    auto d = sched.Decide(s);
    ASSERT_TRUE(d.ok());
    for (const Placement& p : d->placements) {
      const PendingJob* job = nullptr;
      for (const PendingJob& j : s.pending) job = j.job_id == p.job_id ? &j : job;
      const NodeAssignment& a = p.nodes[0];
      const int node = a.node_id[1] - '0';
      const int gpu = a.gpu_uuids[0].back() - '0';
      auto& g = s.nodes[static_cast<size_t>(node)].gpus[static_cast<size_t>(gpu)];
      g.free_milli = 0;
      g.free_memory_mib = 0;
      running.push_back({p.job_id, job->group, node, gpu, t + 10 * kMin});
    }
  }
  const double a = static_cast<double>(late_gpu_ms["a"]);
  const double b = static_cast<double>(late_gpu_ms["b"]);
  EXPECT_NEAR(a / (a + b), 2.0 / 3.0, 0.04) << a << " " << b;
}

// Interactive sessions keep arriving on a pool full of preemptible batch
// work. Every preemption must respect the anti-thrash window for its job,
// every session is eventually served, and batch work keeps running.
TEST(PreemptionTest, NoJobIsPreemptedTwiceWithinTheWindow) {
  SchedulerConfig config;
  config.groups = {{"batch", 1, 0}, {"people", 1, 0}};
  config.anti_thrash_window_ms = 30 * kMin;
  Scheduler sched(config);
  Snapshot s;
  s.nodes = {MakeNode("n0", 4)};
  struct Job {
    PendingJob spec;
    bool batch = false;
    std::optional<int64_t> last_preempted;
    int attempts = 0;
    int gpu = -1;  // while running
    int64_t started = 0, ends = 0;
  };
  std::map<int64_t, Job> jobs;
  for (int64_t id = 1; id <= 6; ++id) {
    Job j;
    j.spec = Whole(id, 1, "batch");
    j.batch = true;
    jobs[id] = j;
  }
  std::map<int64_t, std::vector<int64_t>> preempted_at;
  int64_t next = 100;
  int sessions = 0, served = 0;
  for (int64_t t = 0; t < 4 * kHour; t += kMin) {
    s.now_ms = t;
    if (t % (7 * kMin) == 0) {  // a 5-minute session every 7 minutes
      Job j;
      j.spec = Whole(next++, 1, "people");
      j.spec.priority = PriorityClass::kInteractive;
      j.spec.submit_ms = t;
      jobs[j.spec.job_id] = j;
      ++sessions;
    }
    for (auto& [id, j] : jobs) {  // sessions end
      if (j.gpu >= 0 && !j.batch && j.ends <= t) {
        s.nodes[0].gpus[static_cast<size_t>(j.gpu)].free_milli = 1000;
        j.gpu = -2;  // done
      }
    }
    s.pending.clear();
    s.running.clear();
    for (auto& [id, j] : jobs) {
      if (j.gpu == -1) s.pending.push_back(j.spec);
      if (j.gpu >= 0) {
        RunningJob r = Occupy(s.nodes[0], {j.gpu}, id, j.spec.group);
        r.attempt_id = std::to_string(id) + "." + std::to_string(j.attempts);
        r.priority = j.spec.priority;
        r.preemptible = j.batch;
        r.started_ms = j.started;
        r.last_preempted_ms = j.last_preempted;
        s.running.push_back(r);
      }
    }
    auto d = sched.Decide(s);
    ASSERT_TRUE(d.ok());
    for (const Preemption& p : d->preemptions) {
      Job& v = jobs.at(p.job_id);
      preempted_at[p.job_id].push_back(t);
      s.nodes[0].gpus[static_cast<size_t>(v.gpu)].free_milli = 1000;  // it leaves at once
      v.gpu = -1;
      v.last_preempted = t;
    }
    for (const Placement& p : d->placements) {
      Job& j = jobs.at(p.job_id);
      j.gpu = p.nodes[0].gpu_uuids[0].back() - '0';
      s.nodes[0].gpus[static_cast<size_t>(j.gpu)].free_milli = 0;
      ++j.attempts;
      j.started = t;
      j.ends = t + 5 * kMin;
      if (!j.batch) ++served;
    }
  }
  int preemptions = 0;
  for (const auto& [id, times] : preempted_at) {
    EXPECT_TRUE(jobs.at(id).batch);
    for (size_t i = 1; i < times.size(); ++i) {
      EXPECT_GE(times[i] - times[i - 1], 30 * kMin) << "job " << id;
    }
    preemptions += static_cast<int>(times.size());
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GE(served, sessions - 1);  // the last one may still be waiting
}

}  // namespace
}  // namespace gpupool::sched
