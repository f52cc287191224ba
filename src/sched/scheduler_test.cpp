#include "sched/scheduler.h"

#include <gtest/gtest.h>

namespace gpupool::sched {
namespace {

NodeView MakeNode(std::string id, std::vector<std::pair<std::string, int64_t>> gpus,
                  int64_t cpu_milli = 16000, int64_t mem_mib = 65536) {
  NodeView n;
  n.id = id;
  n.name = id;
  int i = 0;
  for (auto& [name, mem] : gpus)
    n.gpus.push_back({id + "-gpu" + std::to_string(i++), name, mem, true});
  n.cpu_milli_total = n.cpu_milli_free = cpu_milli;
  n.memory_mib_total = n.memory_mib_free = mem_mib;
  return n;
}

PendingJob Job(int64_t id, int gpus, int64_t gpu_mem = 0, std::vector<std::string> models = {}) {
  PendingJob j;
  j.job_id = id;
  j.resources.gpus = gpus;
  j.resources.gpu_memory_mib = gpu_mem;
  j.resources.gpu_models = std::move(models);
  return j;
}

TEST(SchedulerTest, FirstFitFillsNodesInOrder) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"T4", 16384}, {"T4", 16384}}), MakeNode("b", {{"A100", 81920}})};
  s.queue = {Job(1, 1), Job(2, 1), Job(3, 1), Job(4, 1)};
  Decisions d = Decide(s, {});
  ASSERT_EQ(d.placements.size(), 3u);
  EXPECT_EQ(d.placements[0], (Placement{1, "a", {"a-gpu0"}}));
  EXPECT_EQ(d.placements[1], (Placement{2, "a", {"a-gpu1"}}));
  EXPECT_EQ(d.placements[2], (Placement{3, "b", {"b-gpu0"}}));
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_EQ(d.waiting[0].job_id, 4);
  EXPECT_FALSE(d.waiting[0].unsatisfiable);
  EXPECT_EQ(d.waiting[0].reason, "waiting for 1 free GPU");
}

TEST(SchedulerTest, MemoryAndModelConstraints) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"NVIDIA T4", 16384}}),
             MakeNode("b", {{"NVIDIA A100-SXM4-80GB", 81920}})};
  s.queue = {Job(1, 1, 40960), Job(2, 1, 0, {"T4"})};
  Decisions d = Decide(s, {});
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.placements[0].node_id, "b");
  EXPECT_EQ(d.placements[1].node_id, "a");
}

TEST(SchedulerTest, UsedGpusAreSkipped) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"T4", 16384}, {"T4", 16384}})};
  s.nodes[0].gpus[0].free = false;
  s.queue = {Job(1, 2), Job(2, 1)};
  Decisions d = Decide(s, {});
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0], (Placement{2, "a", {"a-gpu1"}}));
  EXPECT_EQ(d.waiting[0].reason, "waiting for 2 free GPUs");
}

TEST(SchedulerTest, UnsatisfiableReasons) {
  std::vector<NodeView> nodes = {MakeNode("a", {{"T4", 16384}, {"T4", 16384}}, 8000, 32768)};
  Resources r;
  r.gpus = 1;
  r.gpu_memory_mib = 81920;
  EXPECT_EQ(UnsatisfiableReason(nodes, r), "no node has a GPU with 80 GiB");
  r.gpu_memory_mib = 0;
  r.gpu_models = {"A100", "H100"};
  EXPECT_EQ(UnsatisfiableReason(nodes, r), "no node has a GPU of model A100 or H100");
  r.gpu_models = {};
  r.gpus = 4;
  EXPECT_EQ(UnsatisfiableReason(nodes, r), "no node has 4 GPUs (the most on one node is 2)");
  r.gpus = 1;
  r.cpu_milli = 16000;
  EXPECT_EQ(UnsatisfiableReason(nodes, r), "no node has 16 CPUs");
  r.cpu_milli = 0;
  r.memory_mib = 65536;
  EXPECT_EQ(UnsatisfiableReason(nodes, r), "no node has 64 GiB of memory");
  r.memory_mib = 0;
  EXPECT_EQ(UnsatisfiableReason(nodes, r), "");
  EXPECT_EQ(UnsatisfiableReason({}, r), "no node is ready");
}

TEST(SchedulerTest, UnsatisfiableJobIsMarkedAndDoesNotBlockOthers) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"T4", 16384}})};
  s.queue = {Job(1, 1, 81920), Job(2, 1)};
  Decisions d = Decide(s, {});
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, 2);
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_TRUE(d.waiting[0].unsatisfiable);
  EXPECT_EQ(d.waiting[0].reason, "no node has a GPU with 80 GiB");
}

TEST(SchedulerTest, CpuAndMemoryAreConsumed) {
  Snapshot s;
  s.nodes = {MakeNode("a", {}, 4000, 8192)};
  PendingJob j1;
  j1.job_id = 1;
  j1.resources.cpu_milli = 3000;
  PendingJob j2 = j1;
  j2.job_id = 2;
  s.queue = {j1, j2};
  Decisions d = Decide(s, {});
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.waiting[0].reason, "waiting for free CPU or memory");
}

TEST(SchedulerTest, NodesNotReadyAreSkipped) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"T4", 16384}})};
  s.nodes[0].ready = false;
  s.queue = {Job(1, 1)};
  Decisions d = Decide(s, {});
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(d.waiting[0].reason, "no node is ready");
}

TEST(SchedulerTest, MaxPlacementsLimitsOnePass) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"T4", 1}, {"T4", 1}, {"T4", 1}})};
  s.queue = {Job(1, 1), Job(2, 1), Job(3, 1)};
  Decisions d = Decide(s, {.max_placements = 2});
  EXPECT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.waiting.size(), 1u);
}

TEST(SchedulerTest, DeterministicForSameInput) {
  Snapshot s;
  s.nodes = {MakeNode("a", {{"T4", 16384}, {"T4", 16384}}), MakeNode("b", {{"A100", 81920}})};
  for (int i = 1; i <= 10; ++i) s.queue.push_back(Job(i, 1 + i % 2));
  Decisions a = Decide(s, {}), b = Decide(s, {});
  EXPECT_EQ(a.placements, b.placements);
  EXPECT_EQ(a.waiting, b.waiting);
}

}  // namespace
}  // namespace gpupool::sched
