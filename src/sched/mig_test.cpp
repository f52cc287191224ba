// MIG in the scheduler (sched/mig.h): MIG requests take one whole instance
// that meets their profile, the smallest on the node; other requests never
// take an instance and MIG requests never take a whole GPU.
#include "sched/mig.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace gpupool::sched {
namespace {

constexpr const char* kA100 = "NVIDIA A100-SXM4-80GB";

GpuView Instance(const std::string& uuid, int32_t slices, int32_t gb, int64_t mib) {
  GpuView g;
  g.uuid = uuid;
  g.model = kA100;
  g.memory_mib = mib;
  g.compute_capability = 80;
  g.free_memory_mib = mib;
  g.mig_slices = slices;
  g.mig_memory_gb = gb;
  return g;
}

GpuView Whole(const std::string& uuid) {
  GpuView g;
  g.uuid = uuid;
  g.model = kA100;
  g.memory_mib = g.free_memory_mib = 81920;
  g.compute_capability = 80;
  return g;
}

NodeView Node(const std::string& id, std::vector<GpuView> gpus) {
  NodeView n;
  n.id = n.name = id;
  n.gpus = std::move(gpus);
  n.cpu_milli_total = n.cpu_milli_free = 64000;
  n.memory_mib_total = n.memory_mib_free = 256 * 1024;
  return n;
}

PendingJob Job(int64_t id) {
  PendingJob j;
  j.job_id = id;
  j.group = "a";
  j.submit_ms = id;
  return j;
}

PendingJob Mig(int64_t id, int32_t slices, int32_t gb) {
  PendingJob j = Job(id);
  j.request.gpus = 1;
  j.request.mig_slices = slices;
  j.request.mig_memory_gb = gb;
  return j;
}

Decisions Schedule(const Snapshot& s) {
  Scheduler sched(SchedulerConfig{});
  auto d = sched.Decide(s);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? *d : Decisions{};
}

std::string PlacedOn(const Decisions& d, int64_t job) {
  for (const Placement& p : d.placements) {
    if (p.job_id == job && p.nodes.size() == 1 && p.nodes[0].gpu_uuids.size() == 1) {
      return p.nodes[0].gpu_uuids[0];
    }
  }
  return "";
}

const Waiting* FindWaiting(const Decisions& d, int64_t id) {
  for (const Waiting& w : d.waiting) {
    if (w.job_id == id) return &w;
  }
  return nullptr;
}

// An A100 split 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb, listed largest first.
NodeView MigNode() {
  return Node("m", {Instance("MIG-3g", 3, 40, 40192), Instance("MIG-2g", 2, 20, 19968),
                    Instance("MIG-1g-a", 1, 10, 9728), Instance("MIG-1g-b", 1, 10, 9728)});
}

TEST(MigSchedulingTest, TheSmallestInstanceThatFitsIsTaken) {
  Snapshot s;
  s.nodes = {MigNode()};
  s.pending = {Mig(1, 1, 10)};
  Decisions d = Schedule(s);
  EXPECT_EQ(PlacedOn(d, 1), "MIG-1g-a");
  s.pending = {Mig(1, 2, 15)};  // 2g.20gb is the smallest with 2 slices and 15 GB
  EXPECT_EQ(PlacedOn(Schedule(s), 1), "MIG-2g");
}

TEST(MigSchedulingTest, EachJobGetsAnInstanceOfItsOwn) {
  Snapshot s;
  s.nodes = {MigNode()};
  s.pending = {Mig(1, 1, 10), Mig(2, 1, 10), Mig(3, 3, 40), Mig(4, 1, 10), Mig(5, 1, 10)};
  Decisions d = Schedule(s);
  EXPECT_EQ(PlacedOn(d, 1), "MIG-1g-a");
  EXPECT_EQ(PlacedOn(d, 2), "MIG-1g-b");
  EXPECT_EQ(PlacedOn(d, 3), "MIG-3g");
  EXPECT_EQ(PlacedOn(d, 4), "MIG-2g");  // the 1g ones are taken: the next that fits
  ASSERT_EQ(d.placements.size(), 4u);
  const Waiting* w = FindWaiting(d, 5);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(WaitReasonText(w->reason), "waiting for a free MIG instance of at least 1g.10gb");
  EXPECT_FALSE(w->unsatisfiable);
}

TEST(MigSchedulingTest, AnInstanceHeldByARunningJobIsNotGivenAgain) {
  Snapshot s;
  s.nodes = {Node("m", {Instance("MIG-1g", 1, 10, 9728), Instance("MIG-3g", 3, 40, 40192)})};
  s.nodes[0].gpus[0].free_milli = 0;
  s.nodes[0].gpus[0].free_memory_mib = 0;
  RunningJob r;
  r.job_id = 100;
  r.attempt_id = "100.1";
  r.group = "a";
  r.holdings.push_back({"m", {"MIG-1g"}, 1000, 0, 0, 0});
  s.running = {r};
  s.pending = {Mig(1, 1, 10)};
  EXPECT_EQ(PlacedOn(Schedule(s), 1), "MIG-3g");
}

TEST(MigSchedulingTest, BothSlicesAndMemoryMustBeEnough) {
  Snapshot s;
  s.nodes = {Node("m", {Instance("MIG-4g", 4, 20, 19968), Instance("MIG-2g", 2, 40, 40192)})};
  s.pending = {Mig(1, 3, 40)};
  Decisions d = Schedule(s);
  EXPECT_TRUE(d.placements.empty());
  const Waiting* w = FindWaiting(d, 1);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(WaitReasonText(w->reason), "no node has a MIG instance of at least 3g.40gb");
  EXPECT_TRUE(w->unsatisfiable);
}

TEST(MigSchedulingTest, WholeGpuAndShareRequestsNeverTakeAnInstance) {
  Snapshot s;
  s.nodes = {MigNode()};
  PendingJob whole = Job(1);
  whole.request.gpus = 1;
  PendingJob share = Job(2);
  share.request.gpu_milli = 500;
  s.pending = {whole, share};
  Decisions d = Schedule(s);
  EXPECT_TRUE(d.placements.empty());
  ASSERT_NE(FindWaiting(d, 1), nullptr);
  EXPECT_TRUE(FindWaiting(d, 1)->unsatisfiable);
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 1)->reason), "no node has a GPU");
  ASSERT_NE(FindWaiting(d, 2), nullptr);
  EXPECT_TRUE(FindWaiting(d, 2)->unsatisfiable);
}

TEST(MigSchedulingTest, AMigRequestNeverTakesAWholeGpu) {
  Snapshot s;
  s.nodes = {Node("w", {Whole("GPU-w")}), MigNode()};
  s.pending = {Mig(1, 7, 80)};  // larger than every instance; the whole GPU is not one
  Decisions d = Schedule(s);
  EXPECT_TRUE(d.placements.empty());
  ASSERT_NE(FindWaiting(d, 1), nullptr);
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 1)->reason),
            "no node has a MIG instance of at least 7g.80gb");
  // And the whole GPU still serves a whole-GPU job next to MIG ones.
  PendingJob whole = Job(2);
  whole.request.gpus = 1;
  s.pending = {Mig(1, 1, 10), whole};
  d = Schedule(s);
  EXPECT_EQ(PlacedOn(d, 1), "MIG-1g-a");
  EXPECT_EQ(PlacedOn(d, 2), "GPU-w");
}

TEST(MigSchedulingTest, ModelAndComputeCapabilityStillApply) {
  Snapshot s;
  s.nodes = {MigNode()};
  PendingJob j = Mig(1, 1, 10);
  j.request.gpu_models = {"H100"};
  s.pending = {j};
  Decisions d = Schedule(s);
  ASSERT_NE(FindWaiting(d, 1), nullptr);
  EXPECT_EQ(WaitReasonText(FindWaiting(d, 1)->reason),
            "no node has a MIG instance of at least 1g.10gb of model H100");
  j.request.gpu_models = {"A100"};
  s.pending = {j};
  EXPECT_EQ(PlacedOn(Schedule(s), 1), "MIG-1g-a");
}

TEST(MigSchedulingTest, PreemptionMakesRoomOnlyForARequestTheInstanceMeets) {
  Snapshot s;
  s.nodes = {Node("m", {Instance("MIG-1g", 1, 10, 9728)})};
  s.nodes[0].gpus[0].free_milli = 0;
  s.nodes[0].gpus[0].free_memory_mib = 0;
  RunningJob victim;
  victim.job_id = 100;
  victim.attempt_id = "100.1";
  victim.group = "guest";
  victim.priority = PriorityClass::kOpportunistic;
  victim.preemptible = true;
  victim.holdings.push_back({"m", {"MIG-1g"}, 1000, 0, 0, 0});
  s.running = {victim};
  // An interactive whole-GPU job could not use the instance: nobody is
  // preempted for it.
  PendingJob whole = Job(1);
  whole.request.gpus = 1;
  whole.priority = PriorityClass::kInteractive;
  s.pending = {whole};
  EXPECT_TRUE(Schedule(s).preemptions.empty());
  // An interactive MIG job that fits it: the instance is made free for it.
  PendingJob mig = Mig(2, 1, 10);
  mig.priority = PriorityClass::kInteractive;
  s.pending = {mig};
  Decisions d = Schedule(s);
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].attempt_id, "100.1");
  EXPECT_EQ(d.preemptions[0].for_job_id, 2);
}

TEST(MigSchedulingTest, MalformedMigRequestsAreRefused) {
  Request r;
  r.gpus = 2;
  r.mig_slices = 1;
  r.mig_memory_gb = 10;
  EXPECT_FALSE(ValidateRequest(r).ok());
  r.gpus = 1;
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.mig_slices = 0;  // memory without slices
  EXPECT_FALSE(ValidateRequest(r).ok());
}

}  // namespace
}  // namespace gpupool::sched
