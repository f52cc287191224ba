#include "sched/policy_gpupool.h"

#include <gtest/gtest.h>

namespace gpupool::sched {
namespace {

NodeCapacity Node(int64_t cpu, std::vector<int> gpus, std::string model = "V100") {
  return NodeCapacity{cpu, 1 << 20, std::move(model), std::move(gpus)};
}
TaskRequest Share(int milli, int64_t cpu = 1000) { return TaskRequest{cpu, 1024, 1, milli, {}}; }
TaskRequest Whole(int n, int64_t cpu = 1000) { return TaskRequest{cpu, 1024, n, 1000, {}}; }

std::vector<TaskType> Workload() {
  TaskType one{Whole(1), 0.5};
  TaskType half{Share(500), 0.5};
  return {one, half};
}

TEST(Gpupool, NamesAndAblations) {
  EXPECT_EQ(MakeGpupoolPolicy("gpupool", Workload(), TieBreak::kLowestIndex)->Name(), "gpupool");
  auto a = MakeGpupoolPolicy("gpupool/q=0,p=0", Workload(), TieBreak::kLowestIndex);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->Name(), "gpupool/q=0,p=0");
  EXPECT_EQ(MakeGpupoolPolicy("gpupool/x=1", Workload(), TieBreak::kLowestIndex), nullptr);
  EXPECT_EQ(MakeGpupoolPolicy("gpupool/p=9", Workload(), TieBreak::kLowestIndex), nullptr);
  EXPECT_EQ(MakeGpupoolPolicy("fgd", Workload(), TieBreak::kLowestIndex), nullptr);
  auto p = MakePolicy("gpupool", Workload(), TieBreak::kLowestIndex);
  ASSERT_NE(p, nullptr);
  bool listed = false;
  for (const auto& n : PolicyNames()) listed |= n == "gpupool";
  EXPECT_TRUE(listed);
}

TEST(Gpupool, NothingFitsGivesNullopt) {
  ClusterState s = ClusterState::FromCapacity({Node(4000, {1000}), Node(4000, {})});
  Rng rng(1);
  auto p = MakeGpupoolPolicy("gpupool", Workload(), TieBreak::kLowestIndex);
  EXPECT_FALSE(p->Place(s, Whole(2), rng).has_value());
  EXPECT_FALSE(p->Place(s, Share(100, 5000), rng).has_value());
}

TEST(Gpupool, ShareGoesOnThePartlyUsedGpu) {
  // A 500 share on a GPU with 500 free leaves no fragment; on a whole GPU it
  // breaks a GPU the whole-GPU type needs.
  ClusterState s = ClusterState::FromCapacity({Node(8000, {1000, 1000}), Node(8000, {1000, 1000})});
  s.free[1].gpus = {1000, 500};
  Rng rng(1);
  auto p = MakeGpupoolPolicy("gpupool", Workload(), TieBreak::kLowestIndex);
  auto c = p->Place(s, Share(500), rng);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->node, 1);
  EXPECT_EQ(c->gpus, std::vector<int>{1});
}

TEST(Gpupool, EqualFragmentationPacksOntoTheFullerNode) {
  // Whole GPUs on identical-fragmentation nodes: the node left with less free
  // GPU wins although it has the higher index.
  ClusterState s = ClusterState::FromCapacity(
      {Node(8000, {1000, 1000, 1000, 1000}), Node(8000, {1000, 1000, 1000, 1000})});
  s.free[1].gpus = {0, 0, 1000, 1000};
  Rng rng(1);
  auto p = MakeGpupoolPolicy("gpupool", {TaskType{Whole(1), 1.0}}, TieBreak::kLowestIndex);
  auto c = p->Place(s, Whole(1), rng);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->node, 1);
  auto fgd_like =
      MakeGpupoolPolicy("gpupool/q=0,p=0", {TaskType{Whole(1), 1.0}}, TieBreak::kLowestIndex);
  EXPECT_EQ(fgd_like->Place(s, Whole(1), rng)->node, 0);
}

TEST(Gpupool, CpuOnlyTaskGoesWhereTheGpusAreTaken) {
  // A CPU-only task changes no node's fragmentation, so every node ties on
  // FGD's score. It goes to the used node with the least free GPU (node 2,
  // whose GPUs are all taken), not next to free GPUs whose CPU later GPU tasks
  // need: FGD (p=0) takes node 0, the old in-use-first rule (p=2) node 1.
  ClusterState s = ClusterState::FromCapacity(
      {Node(8000, {1000, 1000}), Node(8000, {1000, 1000}), Node(8000, {1000, 1000})});
  s.free[1].gpus = {500, 1000};
  s.free[2].gpus = {0, 0};
  const TaskRequest cpu_only{2000, 1024, 0, 0, {}};
  Rng rng(1);
  EXPECT_EQ(MakeGpupoolPolicy("gpupool", Workload(), TieBreak::kLowestIndex)
                ->Place(s, cpu_only, rng)
                ->node,
            2);
  EXPECT_EQ(MakeGpupoolPolicy("gpupool/q=0,p=2", Workload(), TieBreak::kLowestIndex)
                ->Place(s, cpu_only, rng)
                ->node,
            1);
  EXPECT_EQ(MakeGpupoolPolicy("gpupool/q=0,p=0", Workload(), TieBreak::kLowestIndex)
                ->Place(s, cpu_only, rng)
                ->node,
            0);
}

TEST(Gpupool, ChoicesAreValidAndDeterministic) {
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < 6; ++i)
    nodes.push_back(Node(16000, {1000, 1000, 1000, 1000}, i % 2 ? "A" : "B"));
  std::vector<TaskRequest> tasks = {Share(300), Whole(2),   Share(700),
                                    Whole(1),   Share(250), TaskRequest{2000, 1024, 0, 0, {}},
                                    Whole(4)};
  tasks[3].gpu_models = {"A"};
  auto run = [&] {
    ClusterState s = ClusterState::FromCapacity(nodes);
    Rng rng(7);
    auto p = MakeGpupoolPolicy("gpupool", Workload(), TieBreak::kRandom);
    std::vector<int> out;
    for (int round = 0; round < 4; ++round) {
      for (const TaskRequest& t : tasks) {
        auto c = p->Place(s, t, rng);
        if (!c) {
          out.push_back(-1);
          continue;
        }
        EXPECT_TRUE(ValidChoice(s.free[c->node], t, c->gpus));
        EXPECT_TRUE(Allocate(s.free[c->node], t, c->gpus));
        out.push_back(c->node);
      }
    }
    return out;
  };
  EXPECT_EQ(run(), run());
}

TEST(Gpupool, AblationWithoutTieBreakIsFgd) {
  // "gpupool/q=0,p=0" is FGD's score with FGD's lowest-index ties: the same
  // choices as MakePolicy("fgd") on a mixed sequence.
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < 8; ++i) {
    nodes.push_back(
        Node(8000 + 4000 * (i % 3), std::vector<int>(2 + 2 * (i % 3), 1000), i % 2 ? "A" : "B"));
  }
  std::vector<TaskRequest> tasks = {Share(300), Whole(2),        Share(700, 3000),
                                    Whole(1),   Share(250, 500), Whole(4),
                                    Share(500), Whole(1, 6000),  TaskRequest{2000, 1024, 0, 0, {}}};
  tasks[3].gpu_models = {"A"};
  std::vector<TaskType> w = Workload();
  w.push_back(TaskType{Whole(4), 0.1});
  auto run = [&](std::unique_ptr<PlacementPolicy> p) {
    ClusterState s = ClusterState::FromCapacity(nodes);
    Rng rng(3);
    std::vector<std::pair<int, std::vector<int>>> out;
    for (int round = 0; round < 5; ++round) {
      for (const TaskRequest& t : tasks) {
        auto c = p->Place(s, t, rng);
        if (!c) {
          out.push_back({-1, {}});
          continue;
        }
        EXPECT_TRUE(Allocate(s.free[c->node], t, c->gpus));
        out.push_back({c->node, c->gpus});
      }
    }
    return out;
  };
  EXPECT_EQ(run(MakeGpupoolPolicy("gpupool/q=0,p=0", w, TieBreak::kLowestIndex)),
            run(MakePolicy("fgd", w, TieBreak::kLowestIndex)));
}

}  // namespace
}  // namespace gpupool::sched
