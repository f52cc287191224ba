#include "sched/policies.h"

#include <gtest/gtest.h>

namespace gpupool::sched {
namespace {

NodeCapacity Node(int64_t cpu, std::vector<int> gpus, std::string model = "V100") {
  return NodeCapacity{cpu, 1 << 20, std::move(model), std::move(gpus)};
}

TaskRequest Share(int milli, int64_t cpu = 1000) { return TaskRequest{cpu, 1024, 1, milli, {}}; }
TaskRequest Whole(int n, int64_t cpu = 1000) { return TaskRequest{cpu, 1024, n, 1000, {}}; }

TEST(Placement, FitsChecksEveryDimension) {
  NodeCapacity n = Node(4000, {1000, 300});
  EXPECT_TRUE(Fits(n, Share(300)));
  EXPECT_TRUE(Fits(n, Whole(1)));
  EXPECT_FALSE(Fits(n, Whole(2)));          // the second GPU is partly used
  EXPECT_FALSE(Fits(n, Share(500, 5000)));  // CPU
  TaskRequest mem = Share(100);
  mem.memory_mib = int64_t{1} << 21;
  EXPECT_FALSE(Fits(n, mem));
  TaskRequest model = Share(100);
  model.gpu_models = {"T4", "A10"};
  EXPECT_FALSE(Fits(n, model));
  model.gpu_models.push_back("V100");
  EXPECT_TRUE(Fits(n, model));
}

TEST(Placement, AllocateNeverOvercommitsAndReleaseUndoes) {
  NodeCapacity n = Node(4000, {1000, 300});
  EXPECT_FALSE(Allocate(n, Share(500), {1}));  // 300 free only
  EXPECT_FALSE(Allocate(n, Whole(1), {1}));
  EXPECT_FALSE(Allocate(n, Whole(2), {0, 0}));
  NodeCapacity before = n;
  ASSERT_TRUE(Allocate(n, Share(500), {0}));
  EXPECT_EQ(n.gpus, (std::vector<int>{500, 300}));
  EXPECT_EQ(n.cpu_milli, 3000);
  Release(n, Share(500), {0});
  EXPECT_EQ(n.gpus, before.gpus);
  EXPECT_EQ(n.cpu_milli, before.cpu_milli);
}

TEST(Policies, FirstFitTakesFirstFeasibleNodeAndGpu) {
  auto s = ClusterState::FromCapacity({Node(500, {1000}), Node(8000, {200, 1000, 1000})});
  auto p = MakePolicy("first-fit");
  Rng rng(1);
  auto c = p->Place(s, Share(500), rng);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node, 1);  // node 0 lacks CPU
  EXPECT_EQ(c->gpus, std::vector<int>{1});
  auto w = p->Place(s, Whole(2), rng);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->gpus, (std::vector<int>{1, 2}));
  EXPECT_FALSE(p->Place(s, Whole(3), rng));
}

TEST(Policies, BestFitPrefersTheFullestNodeAndTightestGpu) {
  auto s = ClusterState::FromCapacity({Node(64000, std::vector<int>(8, 1000)),
                                       Node(64000, {1000, 1000}), Node(64000, {1000, 600})});
  s.free[2].gpus = {1000, 600};
  auto p = MakePolicy("best-fit");
  Rng rng(1);
  auto c = p->Place(s, Share(500), rng);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node, 2);                    // least left after placement
  EXPECT_EQ(c->gpus, std::vector<int>{1});  // the GPU with 600 free, not 1000
}

TEST(Policies, FgdPacksAShareOntoAPartlyUsedGpu) {
  // The workload is all whole-GPU tasks: splitting a free GPU fragments it,
  // packing onto the partly used GPU does not.
  std::vector<TaskType> types = {{Whole(1), 1.0}};
  auto s = ClusterState::FromCapacity({Node(64000, {1000, 1000}), Node(64000, {1000, 1000})});
  s.free[1].gpus = {1000, 500};
  auto p = MakePolicy("fgd", types);
  Rng rng(7);
  auto c = p->Place(s, Share(300), rng);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node, 1);
  EXPECT_EQ(c->gpus, std::vector<int>{1});
}

TEST(Policies, FragmentationCountsWhatTheWorkloadCannotUse) {
  std::vector<TaskType> types = {{Whole(1), 0.5}, {Share(500), 0.5}};
  NodeCapacity n = Node(64000, {1000, 400});
  // Whole tasks cannot use the 400; shares of 500 cannot either.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, types), 400);
  n.cpu_milli = 0;  // nothing fits: all free GPU milli is fragment
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, types), 1400);
  TaskType t4{Share(100), 1.0};
  t4.request.gpu_models = {"T4"};
  EXPECT_DOUBLE_EQ(NodeFragmentation(Node(64000, {1000}), {t4}), 1000);
}

TEST(Policies, TypicalTypesCoverThresholdAndNormalise) {
  std::vector<TaskRequest> tasks(6, Whole(1));
  for (int i = 0; i < 3; ++i) tasks.push_back(Share(500));
  tasks.push_back(Share(200));
  tasks.push_back(TaskRequest{1000, 10, 0, 0, {}});  // CPU-only
  // Without CPU tasks (the artifact's code default): 10 GPU tasks counted.
  auto types = TypicalTaskTypes(tasks, 60, 1, false);
  ASSERT_EQ(types.size(), 1u);
  EXPECT_DOUBLE_EQ(types[0].weight, 1.0);
  types = TypicalTaskTypes(tasks, 100, 10, false);
  ASSERT_EQ(types.size(), 3u);
  EXPECT_DOUBLE_EQ(types[0].weight, 0.6);
  EXPECT_EQ(types[0].request.num_gpu, 1);
  EXPECT_EQ(types[0].request.gpu_milli, 1000);
}

TEST(Policies, TypicalTypesDefaultToTheArtifactExperiment) {
  // 95%, step 1, CPU tasks counted: 11 tasks, 95% of them is 10.45, so the
  // walk takes whole (6), share 500 (3), then one of the two singletons.
  std::vector<TaskRequest> tasks(6, Whole(1));
  for (int i = 0; i < 3; ++i) tasks.push_back(Share(500));
  tasks.push_back(Share(200));
  tasks.push_back(TaskRequest{1000, 10, 0, 0, {}});
  auto types = TypicalTaskTypes(tasks);
  ASSERT_EQ(types.size(), 4u);
  EXPECT_DOUBLE_EQ(types[0].weight, 6.0 / 11);
  EXPECT_DOUBLE_EQ(types[1].weight, 3.0 / 11);
  // Equal counts: the larger (cpu, per-GPU milli, num, models) key first, as
  // the artifact sorts: same CPU, and the share's 200 milli beats the CPU
  // task's 0.
  EXPECT_EQ(types[2].request.gpu_milli, 200);
  EXPECT_EQ(types[3].request.num_gpu, 0);
  EXPECT_EQ(types[3].request.gpu_milli, 0);
  EXPECT_EQ(types[3].request.cpu_milli, 1000);
  types = TypicalTaskTypes(tasks, 90);  // 9.9: the first three suffice
  ASSERT_EQ(types.size(), 3u);
  EXPECT_DOUBLE_EQ(types[2].weight, 1.0 / 10);
}

TEST(Policies, CpuTypesCountAllFreeGpuMilliAsFragment) {
  TaskType cpu{TaskRequest{1000, 10, 0, 0, {}}, 0.5};
  TaskType whole{Whole(1), 0.5};
  NodeCapacity n = Node(64000, {1000, 400});
  // A CPU-only type can use none of the 1400 free milli; whole GPUs strand 400.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n, {cpu, whole}), 0.5 * 1400 + 0.5 * 400);
  EXPECT_DOUBLE_EQ(NodeFragmentation(Node(64000, {0, 0}), {cpu, whole}), 0);
}

TEST(Policies, FgdWithCpuTypesStillPrefersThePackingGpu) {
  // One node with a half-used GPU and a free one: a 500-milli share should
  // go on the half-used GPU whatever share of the workload is CPU-only.
  auto s = ClusterState::FromCapacity({Node(64000, {1000, 1000})});
  s.free[0].gpus = {1000, 500};
  for (double cpu_share : {0.0, 0.3, 0.6}) {
    auto p = MakePolicy("fgd", {{TaskRequest{1000, 10, 0, 0, {}}, cpu_share},
                                {Whole(1), (1 - cpu_share) / 2},
                                {Share(500), (1 - cpu_share) / 2}});
    Rng rng(1);
    auto c = p->Place(s, Share(500), rng);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->gpus, std::vector<int>{1}) << cpu_share;
  }
}

TEST(Policies, LowestIndexTieBreakKeepsTheFirstBestNode) {
  // Four identical empty nodes tie for every scoring policy: with the
  // artifact's tie break the first one wins whatever the seed; with random
  // ties some seed picks another.
  auto s = ClusterState::FromCapacity(std::vector<NodeCapacity>(4, Node(32000, {1000, 1000})));
  std::vector<TaskType> w = {{Whole(1), 0.5}, {Share(300), 0.5}};
  for (const std::string name : {"best-fit", "dot-product", "fgd"}) {
    bool other = false;
    for (uint64_t seed = 0; seed < 16; ++seed) {
      Rng r1(seed), r2(seed);
      auto c = MakePolicy(name, w, TieBreak::kLowestIndex)->Place(s, Share(300), r1);
      ASSERT_TRUE(c) << name;
      EXPECT_EQ(c->node, 0) << name;
      other |= MakePolicy(name, w, TieBreak::kRandom)->Place(s, Share(300), r2)->node != 0;
    }
    EXPECT_TRUE(other) << name;
  }
}

TEST(Policies, EveryPolicyReturnsValidChoicesAndIsDeterministic) {
  for (const auto& name : PolicyNames()) {
    auto run = [&](uint64_t seed) {
      std::vector<NodeCapacity> nodes;
      for (int i = 0; i < 20; ++i) nodes.push_back(Node(32000, std::vector<int>(1 + i % 8, 1000)));
      auto s = ClusterState::FromCapacity(nodes);
      auto p = MakePolicy(name, {{Whole(1), 0.5}, {Share(300), 0.5}});
      Rng rng(seed);
      std::vector<int> placed;
      for (int k = 0; k < 200; ++k) {
        TaskRequest t = k % 3 == 0 ? Whole(1 + k % 2) : Share(100 + (k * 37) % 800);
        auto c = p->Place(s, t, rng);
        if (!c) {
          for (const auto& f : s.free) EXPECT_FALSE(Fits(f, t)) << name;
          placed.push_back(-1);
          continue;
        }
        EXPECT_TRUE(Allocate(s.free[c->node], t, c->gpus)) << name;
        placed.push_back(c->node);
      }
      return placed;
    };
    EXPECT_EQ(run(3), run(3)) << name;
  }
  EXPECT_EQ(MakePolicy("nope"), nullptr);
}

// One vocabulary: every policy the openb replay runs (MakePolicy, with its
// caches and fast paths) places exactly as its scorer alone does
// (MakeScoredPolicy over MakeScorer, which sched::Scheduler::Decide ranks
// with), on a mixed cluster filling up with shares, whole GPUs, CPU-only
// tasks and model constraints, for both tie rules and several seeds.
TEST(Policies, EveryPolicyPlacesAsItsScorer) {
  std::vector<std::string> names = PolicyNames();
  names.push_back("gpupool/q=0,p=0");
  names.push_back("gpupool/q=1,p=5");
  for (const std::string& name : names) {
    ASSERT_NE(MakeScorer(name), nullptr) << name;
    EXPECT_EQ(MakeScorer(name)->Name(), MakePolicy(name)->Name());
    for (TieBreak tb : {TieBreak::kLowestIndex, TieBreak::kRandom}) {
      for (uint64_t seed : {1u, 7u, 42u}) {
        std::vector<NodeCapacity> nodes;
        for (int i = 0; i < 24; ++i) {
          nodes.push_back(Node(8000 + 4000 * (i % 5),
                               std::vector<int>(i % 7 == 6 ? 0 : 1 + i % 8, 1000),
                               i % 3 == 0 ? "T4" : "V100"));
        }
        std::vector<TaskType> w = {{Whole(1, 4000), 0.3},
                                   {Share(300, 2000), 0.3},
                                   {Share(700, 6000), 0.2},
                                   {TaskRequest{3000, 10, 0, 0, {}}, 0.2}};
        auto fast_state = ClusterState::FromCapacity(nodes);
        auto ref_state = fast_state;
        auto fast = MakePolicy(name, w, tb);
        auto ref = MakeScoredPolicy(MakeScorer(name), w, tb);
        Rng r1(seed), r2(seed);
        for (int k = 0; k < 300; ++k) {
          TaskRequest t;
          switch (k % 5) {
            case 0:
              t = Whole(1 + k % 3, 1000 + 500 * (k % 7));
              break;
            case 1:
              t = TaskRequest{4000 + 1000 * (k % 4), 64, 0, 0, {}};
              break;
            case 2:
              t = Share(100 + (k * 37) % 850, 1000 * (k % 9));
              t.gpu_models = {"T4"};
              break;
            default:
              t = Share(100 + (k * 53) % 850, 500 * (k % 11));
              break;
          }
          auto a = fast->Place(fast_state, t, r1);
          auto b = ref->Place(ref_state, t, r2);
          ASSERT_EQ(a.has_value(), b.has_value()) << name << " task " << k;
          if (!a) continue;
          ASSERT_EQ(a->node, b->node) << name << " task " << k << " seed " << seed;
          ASSERT_EQ(a->gpus, b->gpus) << name << " task " << k;
          ASSERT_TRUE(Allocate(fast_state.free[a->node], t, a->gpus));
          ASSERT_TRUE(Allocate(ref_state.free[b->node], t, b->gpus));
        }
      }
    }
  }
  EXPECT_EQ(MakeScorer("tetris"), nullptr);
}

}  // namespace
}  // namespace gpupool::sched
