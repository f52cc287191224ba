// SchedulerConfig::score_all_nodes and RunContext: a reused context (its
// score cache warm from earlier passes) decides exactly as a fresh one, and
// a pass without a context as one with it; the server's default is off.
#include <gtest/gtest.h>

#include "sched/scheduler.h"

namespace gpupool::sched {
namespace {

const char* kModels[] = {"T4", "V100", "A100"};

Snapshot RandomSnapshot(Rng& rng, int jobs) {
  Snapshot s;
  for (int i = 0; i < 24; ++i) {
    NodeView n;
    n.id = "node-" + std::to_string(10 + i);
    n.name = n.id;
    n.cpu_milli_total = 64000;
    n.cpu_milli_free = 4000 * static_cast<int64_t>(rng.Uniform(17));
    n.memory_mib_total = 262144;
    n.memory_mib_free = 16384 * static_cast<int64_t>(rng.Uniform(17));
    const int gpus = static_cast<int>(rng.Uniform(9));
    for (int g = 0; g < gpus; ++g) {
      GpuView v;
      v.uuid = n.id + "-" + std::to_string(g);
      v.model = kModels[i % 3];
      v.memory_mib = 16384;
      v.free_memory_mib = 16384;
      // Mostly whole or equal amounts, so that many candidates tie.
      const int32_t frees[] = {1000, 1000, 1000, 500, 0, 300, 800};
      v.free_milli = frees[rng.Uniform(7)];
      n.gpus.push_back(v);
    }
    s.nodes.push_back(n);
  }
  for (int j = 0; j < jobs; ++j) {
    PendingJob p;
    p.job_id = j + 1;
    p.submit_ms = j;
    const uint64_t kind = rng.Uniform(4);
    if (kind == 0) p.request.gpus = 1 + static_cast<int32_t>(rng.Uniform(4));
    if (kind == 1 || kind == 2)
      p.request.gpu_milli = 100 * (1 + static_cast<int32_t>(rng.Uniform(9)));
    if (rng.Uniform(6) == 0 && kind < 3) p.request.gpu_models = {"T4"};
    p.request.cpu_milli = 2000 * static_cast<int64_t>(1 + rng.Uniform(6));
    p.request.memory_mib = 8192;
    s.pending.push_back(p);
  }
  return s;
}

std::vector<TaskType> Workload() {
  std::vector<TaskType> w(3);
  w[0].request = TaskRequest{4000, 0, 1, 500, {}};
  w[0].weight = 0.5;
  w[1].request = TaskRequest{8000, 0, 2, 1000, {"T4"}};
  w[1].weight = 0.3;
  w[2].request = TaskRequest{2000, 0, 0, 0, {}};
  w[2].weight = 0.2;
  return w;
}

TEST(ScoreAllNodes, ReusedContextDecidesAsAFreshOne) {
  for (const std::string& policy : PolicyNames()) {
    SchedulerConfig c;
    c.placement = PlacementScore{policy};
    c.tie_break = TieBreak::kLowestIndex;
    c.score_all_nodes = true;
    c.workload = Workload();
    c.max_reservations = 0;
    c.preemption = false;
    Scheduler sched(c);
    Rng world(7);
    Rng reused_rng(11);
    RunContext reused(reused_rng);
    int placed = 0;
    for (int pass = 0; pass < 40; ++pass) {
      // Each pass a new random cluster (most nodes' state changes, the
      // cache is invalidated), decided twice (the second time from a warm
      // cache, every node unchanged).
      const Snapshot snap = RandomSnapshot(world, 1 + pass % 4);
      for (int twice = 0; twice < 2; ++twice) {
        Rng fresh_rng = reused_rng;  // the same generator state
        RunContext fresh(fresh_rng);
        auto a = sched.Decide(snap, reused);
        auto b = sched.Decide(snap, fresh);
        ASSERT_TRUE(a.ok()) << a.status().ToString();
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        EXPECT_EQ(a->placements, b->placements) << policy << " pass " << pass;
        EXPECT_EQ(a->waiting, b->waiting) << policy << " pass " << pass;
        EXPECT_EQ(reused_rng.Next(), fresh_rng.Next()) << policy << " pass " << pass;
        if (policy != "random") {
          auto plain = sched.Decide(snap);  // no context: no cache
          ASSERT_TRUE(plain.ok());
          EXPECT_EQ(plain->placements, a->placements) << policy << " pass " << pass;
        }
        placed += static_cast<int>(a->placements.size());
      }
    }
    EXPECT_GT(placed, 20) << policy;
  }
}

TEST(ScoreAllNodes, OffByDefaultAndScoresEveryNodeWhenOn) {
  EXPECT_FALSE(SchedulerConfig{}.score_all_nodes);
  EXPECT_TRUE(SchedulerConfig{}.workload.empty());
  // A share on a node whose second GPU is the tightest fit: the index
  // offers the tightest GPU; with score_all_nodes the scorer chooses, and
  // first-fit takes the first GPU that fits (as MakePolicy's first-fit).
  Snapshot s;
  NodeView n;
  n.id = "a";
  n.cpu_milli_total = n.cpu_milli_free = 64000;
  n.memory_mib_total = n.memory_mib_free = 65536;
  for (int g = 0; g < 2; ++g) {
    GpuView v;
    v.uuid = "a-" + std::to_string(g);
    v.model = "T4";
    v.memory_mib = v.free_memory_mib = 16384;
    v.free_milli = g == 0 ? 1000 : 600;
    n.gpus.push_back(v);
  }
  s.nodes.push_back(n);
  PendingJob p;
  p.job_id = 1;
  p.request.gpu_milli = 500;
  p.request.cpu_milli = 1000;
  s.pending.push_back(p);
  SchedulerConfig c;
  c.placement = PlacementScore::kFirstFit;
  auto index = Scheduler(c).Decide(s);
  c.score_all_nodes = true;
  auto all = Scheduler(c).Decide(s);
  ASSERT_TRUE(index.ok() && all.ok());
  ASSERT_EQ(index->placements.size(), 1u);
  ASSERT_EQ(all->placements.size(), 1u);
  EXPECT_EQ(index->placements[0].nodes[0].gpu_uuids, std::vector<std::string>{"a-1"});
  EXPECT_EQ(all->placements[0].nodes[0].gpu_uuids, std::vector<std::string>{"a-0"});
}

}  // namespace
}  // namespace gpupool::sched
