#include "sim/openb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace gpupool::sim {
namespace {

const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,64000,262144,2,P100\n"
    "n1,96000,786432,8,G2\n";

const char* kTaskHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(OpenbCsv, ParsesNodesAndTasks) {
  auto nodes = ParseOpenbNodes("nodes.csv", kNodes);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[1].capacity.gpus.size(), 8u);
  EXPECT_EQ((*nodes)[1].capacity.model, "G2");
  auto tasks =
      ParseOpenbTasks("tasks.csv", std::string(kTaskHeader) +
                                       "t0,12000,16384,1,460,V100M16|A10,LS,Running,0,5,0\r\n"
                                       "t1,4000,100,0,0,,BE,Succeeded,1,2,1\n");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].request.gpu_milli, 460);
  EXPECT_EQ((*tasks)[0].request.gpu_models, (std::vector<std::string>{"V100M16", "A10"}));
  EXPECT_TRUE((*tasks)[0].request.IsFractional());
}

TEST(OpenbCsv, TasksWithoutGpuSpecAskForAnyModel) {
  // The multigpu20 file has only the request columns.
  auto tasks = ParseOpenbTasks("t.csv",
                               "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                               "t0,12000,16384,8,1000\nt1,6000,12288,1,460\n");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].request.num_gpu, 8);
  EXPECT_TRUE((*tasks)[1].request.gpu_models.empty());
  EXPECT_FALSE(ParseOpenbTasks("t.csv", "name,cpu_milli,num_gpu,gpu_milli\n").ok());
}

TEST(OpenbCsv, ErrorsNameFileLineAndColumn) {
  auto bad_int = ParseOpenbNodes("nodes.csv", std::string(kNodes) + "n2,abc,1,1,T4\n");
  ASSERT_FALSE(bad_int.ok());
  EXPECT_NE(bad_int.status().message().find("nodes.csv:4: column cpu_milli"), std::string::npos)
      << bad_int.status().message();
  auto short_row = ParseOpenbTasks("tasks.csv", std::string(kTaskHeader) + "t0,1,2\n");
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("tasks.csv:2: expected 11 fields"),
            std::string::npos);
  auto range =
      ParseOpenbTasks("tasks.csv", std::string(kTaskHeader) + "t0,1,2,1,1500,,LS,Running,0,0,0\n");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("tasks.csv:2: column gpu_milli"), std::string::npos);
  auto header = ParseOpenbNodes("nodes.csv", "sn,cpu_milli,gpu,model\n");
  ASSERT_FALSE(header.ok());
  EXPECT_NE(header.status().message().find("memory_mib"), std::string::npos);
  EXPECT_FALSE(ParseOpenbNodes("nodes.csv", "").ok());
}

sched::TaskRequest Req(int n, int milli) { return sched::TaskRequest{1000, 100, n, milli, {}}; }

TEST(OpenbInflate, PadsUntilOneMoreWouldPassTheTarget) {
  std::vector<sched::TaskRequest> tasks = {Req(1, 1000), Req(1, 500), Req(2, 1000)};
  sched::Rng rng(42);
  auto out = InflateTasks(tasks, 13000, rng);
  int64_t demand = 0;
  for (const auto& t : out) demand += t.GpuDemand();
  EXPECT_LE(demand, 13000);
  EXPECT_GT(demand, 13000 - 2000);  // stopped by a draw that would pass
  EXPECT_GT(out.size(), tasks.size());
}

// The artifact's tuneUpPods stops on the drawn pod's per-GPU milli but adds
// all of its GPUs: an 8-GPU task (per-GPU 1000) drawn 5000 under the target
// is still added, and the list ends 3000 over.
TEST(OpenbInflate, StopsOnPerGpuMilliAsTheArtifact) {
  std::vector<sched::TaskRequest> tasks = {Req(8, 1000)};
  sched::Rng rng(42);
  auto out = InflateTasks(tasks, 13000, rng);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].GpuDemand() + out[1].GpuDemand(), 16000);
}

// No GPU task can end the padding: the list is left as it is (the
// artifact would loop forever; it refuses a workload without GPU demand).
TEST(OpenbInflate, CpuOnlyListIsNotPadded) {
  std::vector<sched::TaskRequest> tasks = {Req(0, 0), Req(0, 0)};
  sched::Rng rng(42);
  EXPECT_EQ(InflateTasks(tasks, 13000, rng).size(), 2u);
}

TEST(OpenbInflate, TrimsWhenOverTheTarget) {
  std::vector<sched::TaskRequest> tasks(20, Req(1, 1000));
  sched::Rng rng(42);
  auto out = InflateTasks(tasks, 13000, rng);
  EXPECT_EQ(out.size(), 13u);
}

// The artifact's tuneDownPods removes a random pod by index: the others keep
// their order (the arrivals are the shuffled trace, so order matters).
TEST(OpenbInflate, TrimmingKeepsTheOrderOfTheRest) {
  std::vector<sched::TaskRequest> tasks;
  for (int i = 0; i < 20; ++i) tasks.push_back({1000 + i, 100, 1, 1000, {}});  // cpu = id
  sched::Rng rng(7);
  auto out = InflateTasks(tasks, 13000, rng);
  ASSERT_EQ(out.size(), 13u);
  for (size_t k = 1; k < out.size(); ++k) EXPECT_LT(out[k - 1].cpu_milli, out[k].cpu_milli);
}

// As the artifact's Simulate: the trace is shuffled first and the copies go
// after it, so the first arrivals are the whole trace in a random order.
TEST(OpenbArrivals, TheShuffledTraceThenTheCopies) {
  std::vector<sched::TaskRequest> tasks;
  for (int i = 0; i < 12; ++i) tasks.push_back({1000 + i, 100, 1, 1000, {}});  // cpu = id
  auto ids = [](auto first, auto last) {
    std::vector<int64_t> v;
    for (auto it = first; it != last; ++it) v.push_back(it->cpu_milli);
    return v;
  };
  std::set<std::vector<int64_t>> orders;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    sched::Rng rng(seed);
    auto out = OpenbArrivals(tasks, 30000, rng);
    ASSERT_EQ(out.size(), 30u);
    auto head = ids(out.begin(), out.begin() + 12);
    orders.insert(head);
    std::sort(head.begin(), head.end());
    EXPECT_EQ(head, ids(tasks.begin(), tasks.end())) << "seed " << seed;
    for (int64_t id : ids(out.begin() + 12, out.end())) {
      EXPECT_TRUE(id >= 1000 && id < 1012) << id;  // copies of trace tasks
    }
  }
  EXPECT_GT(orders.size(), 1u);  // the order depends on the seed
}

// The artifact renames every node "%04d-<name>" with a random permutation,
// and ties go to the smallest name: the replay visits the nodes in a random
// order drawn per seed. By name with kName; never by file order.
TEST(OpenbVisitOrder, ARandomPermutationPerSeedOrByName) {
  auto nodes = ParseOpenbNodes("n.csv",
                               "sn,cpu_milli,memory_mib,gpu,model\n"
                               "c,1000,1,1,T4\na,1000,1,1,T4\nd,1000,1,1,T4\nb,1000,1,1,T4\n");
  ASSERT_TRUE(nodes.ok());
  sched::Rng unused(1);
  EXPECT_EQ(OpenbVisitOrder(*nodes, OpenbNodeOrder::kName, unused),
            (std::vector<size_t>{1, 3, 0, 2}));
  std::set<size_t> firsts;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    sched::Rng r1(seed), r2(seed);
    auto order = OpenbVisitOrder(*nodes, OpenbNodeOrder::kRandomNames, r1);
    EXPECT_EQ(order, OpenbVisitOrder(*nodes, OpenbNodeOrder::kRandomNames, r2));
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<size_t>{0, 1, 2, 3}));
    firsts.insert(order[0]);
  }
  EXPECT_EQ(firsts.size(), 4u);  // every node wins the ties for some seed
}

std::vector<OpenbNode> SmallCluster() {
  std::vector<OpenbNode> nodes;
  for (int i = 0; i < 30; ++i) {
    OpenbNode n;
    n.name = "n" + std::to_string(i);
    n.capacity = {64000, 262144, i % 3 == 0 ? "T4" : "V100", std::vector<int>(1 + i % 8, 1000)};
    nodes.push_back(n);
  }
  return nodes;
}

std::vector<OpenbTask> SmallTasks() {
  std::vector<OpenbTask> tasks;
  for (int i = 0; i < 60; ++i) {
    OpenbTask t;
    t.name = "t" + std::to_string(i);
    t.request = i % 4 == 0 ? Req(1 + i % 3, 1000) : Req(1, 100 + (i * 53) % 900);
    if (i % 7 == 0) t.request.gpu_models = {"T4"};
    tasks.push_back(t);
  }
  return tasks;
}

TEST(OpenbRun, SameSeedSameResultAndCurveIsComplete) {
  for (const auto& policy : sched::PolicyNames()) {
    OpenbOptions o;
    o.policy = policy;
    o.seed = 7;
    auto a = RunOpenb(SmallCluster(), SmallTasks(), o);
    auto b = RunOpenb(SmallCluster(), SmallTasks(), o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->allocated_gpu_milli, b->allocated_gpu_milli) << policy;
    ASSERT_EQ(a->curve.size(), b->curve.size());
    for (size_t i = 0; i < a->curve.size(); ++i) {
      EXPECT_EQ(a->curve[i].allocation_pct, b->curve[i].allocation_pct);
    }
    EXPECT_GE(a->curve.size(), 121u) << policy;  // 0..~130%
    EXPECT_LE(a->allocation_rate_at_end, 100.0);
    EXPECT_GE(a->allocation_rate_at_end, a->allocation_rate_at_100);
    EXPECT_GT(a->tasks_failed, 0);  // 130% cannot all fit
  }
  OpenbOptions bad;
  bad.policy = "nope";
  EXPECT_FALSE(RunOpenb(SmallCluster(), SmallTasks(), bad).ok());
}

// A cluster and trace with every case the two paths must agree on: shares of
// many sizes, 1 to 8 whole GPUs, CPU-only tasks, model constraints (typical
// types with models too), CPU and memory pressure, a node without GPUs, and
// many ties (equal nodes).
std::vector<OpenbNode> MixedCluster() {
  const char* models[] = {"T4", "V100M16", "G2", "P100"};
  std::vector<OpenbNode> nodes;
  for (int i = 0; i < 48; ++i) {
    OpenbNode n;
    n.name = "node-" + std::to_string(100 + i);
    const int gpus = i == 5 ? 0 : (i % 4 == 0 ? 8 : 1 + (i * 5) % 8);
    n.capacity = {i % 3 == 0 ? 32000 : 96000, i % 5 == 0 ? 65536 : 393216,
                  gpus == 0 ? "" : models[i % 4],
                  std::vector<int>(static_cast<size_t>(gpus), 1000)};
    nodes.push_back(n);
  }
  return nodes;
}

std::vector<OpenbTask> MixedTasks() {
  std::vector<OpenbTask> tasks;
  sched::Rng rng(99);
  const int shares[] = {100, 250, 460, 500, 200, 700};
  for (int i = 0; i < 220; ++i) {
    OpenbTask t;
    t.name = "t" + std::to_string(i);
    const uint64_t kind = rng.Uniform(10);
    if (kind < 5) {
      t.request = Req(1, shares[rng.Uniform(6)]);
    } else if (kind < 8) {
      const int counts[] = {1, 1, 2, 4, 8};
      t.request = Req(counts[rng.Uniform(5)], 1000);
    } else {
      t.request = Req(0, 0);
    }
    t.request.cpu_milli = 2000 * static_cast<int64_t>(1 + rng.Uniform(8));
    t.request.memory_mib = 4096 * static_cast<int64_t>(1 + rng.Uniform(6));
    if (t.request.num_gpu > 0 && rng.Uniform(5) == 0) t.request.gpu_models = {"T4", "G2"};
    tasks.push_back(t);
  }
  return tasks;
}

TEST(OpenbRun, ViaDecideGivesTheSameCurveAsThePolicies) {
  const auto nodes = MixedCluster();
  const auto tasks = MixedTasks();
  for (const auto& policy : sched::PolicyNames()) {
    for (uint64_t seed : {42, 43, 44}) {
      OpenbOptions o;
      o.policy = policy;
      o.seed = seed;
      EXPECT_TRUE(o.via_decide);  // the default
      o.via_decide = false;
      auto fast = RunOpenb(nodes, tasks, o);
      o.via_decide = true;
      auto decide = RunOpenb(nodes, tasks, o);
      ASSERT_TRUE(fast.ok()) << fast.status().ToString();
      ASSERT_TRUE(decide.ok()) << decide.status().ToString();
      EXPECT_GT(fast->allocated_gpu_milli, 0) << policy;
      EXPECT_GT(fast->tasks_failed, 0) << policy;
      EXPECT_EQ(decide->tasks_failed, fast->tasks_failed) << policy << " seed " << seed;
      EXPECT_EQ(decide->allocated_gpu_milli, fast->allocated_gpu_milli)
          << policy << " seed " << seed;
      ASSERT_EQ(decide->curve.size(), fast->curve.size()) << policy;
      for (size_t k = 0; k < fast->curve.size(); ++k) {
        ASSERT_EQ(decide->curve[k].allocation_pct, fast->curve[k].allocation_pct)
            << policy << " seed " << seed << " at " << k << "%";
      }
    }
  }
  OpenbOptions random_ties;
  random_ties.via_decide = true;
  random_ties.tie_break = sched::TieBreak::kRandom;
  EXPECT_FALSE(RunOpenb(nodes, tasks, random_ties).ok());
}

TEST(OpenbRun, TheFileOrderOfTheNodesDoesNotMatter) {
  // The visit order is drawn from the nodes sorted by name, so listing the
  // nodes out of name order gives the same run as listing them sorted.
  auto sorted =
      ParseOpenbNodes("n.csv",
                      "sn,cpu_milli,memory_mib,gpu,model\n"
                      "a,64000,262144,2,T4\nb,96000,786432,8,G2\nc,32000,262144,4,P100\n");
  auto shuffled =
      ParseOpenbNodes("n.csv",
                      "sn,cpu_milli,memory_mib,gpu,model\n"
                      "c,32000,262144,4,P100\na,64000,262144,2,T4\nb,96000,786432,8,G2\n");
  ASSERT_TRUE(sorted.ok() && shuffled.ok());
  std::vector<OpenbTask> tasks;
  for (int i = 0; i < 12; ++i) {
    tasks.push_back({"t" + std::to_string(i), Req(1 + i % 3, i % 3 ? 1000 : 300 + 50 * i)});
  }
  for (const std::string policy : {"best-fit", "fgd", "dot-product"}) {
    OpenbOptions o;
    o.policy = policy;
    auto r1 = RunOpenb(*sorted, tasks, o);
    auto r2 = RunOpenb(*shuffled, tasks, o);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_EQ(r1->allocated_gpu_milli, r2->allocated_gpu_milli) << policy;
    ASSERT_EQ(r1->curve.size(), r2->curve.size()) << policy;
    for (size_t k = 0; k < r1->curve.size(); ++k) {
      EXPECT_DOUBLE_EQ(r1->curve[k].allocation_pct, r2->curve[k].allocation_pct) << policy;
    }
  }
}

}  // namespace
}  // namespace gpupool::sim
