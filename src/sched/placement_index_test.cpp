// The scoring policies cache per-node summaries, fragmentation and scores
// between calls. These tests hold them to the straightforward scans they
// replaced (kept here as the reference): the same choice for the same
// cluster, task and generator state, on random clusters that change between
// calls through Allocate/Release and through direct edits of the free vector.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <string>
#include <vector>

#include "sched/placement.h"
#include "sched/policies.h"

namespace gpupool::sched {
namespace {

// ---- reference: the policies as they were before the caches ----

struct RefPicker {
  explicit RefPicker(TieBreak tb) : random_ties(tb == TieBreak::kRandom) {}
  bool random_ties;
  bool have = false;
  int64_t score = 0;
  int ties = 0;
  Choice choice;

  void Offer(int64_t s, int node, const std::vector<int>& gpus, Rng& rng) {
    if (!have || s > score) {
      have = true;
      score = s;
      ties = 1;
      choice = Choice{node, gpus};
    } else if (s == score && random_ties) {
      ++ties;
      if (rng.Uniform(static_cast<uint64_t>(ties)) == 0) choice = Choice{node, gpus};
    }
  }
  std::optional<Choice> Result() const {
    if (!have) return std::nullopt;
    return choice;
  }
};

std::optional<std::vector<int>> RefDefaultGpus(const NodeCapacity& free, const TaskRequest& task) {
  if (task.num_gpu <= 0) return std::vector<int>{};
  if (task.IsFractional()) {
    for (int i = 0; i < static_cast<int>(free.gpus.size()); ++i) {
      if (free.gpus[i] >= task.gpu_milli) return std::vector<int>{i};
    }
    return std::nullopt;
  }
  return WholeGpus(free, task);
}

std::optional<Choice> RefBestFit(const ClusterState& s, const TaskRequest& t, TieBreak tb,
                                 Rng& rng) {
  RefPicker best(tb);
  for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
    const NodeCapacity& n = s.free[i];
    if (!Fits(n, t)) continue;
    const double left = 0.5 * static_cast<double>(n.cpu_milli - t.cpu_milli) / 128000 +
                        0.5 * static_cast<double>(FreeGpuMilli(n) - t.GpuDemand()) / 8000;
    const auto score = static_cast<int64_t>((1.0 - left) * 100.0);
    std::vector<int> gpus;
    if (t.IsFractional()) {
      int pick = -1;
      for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
        if (n.gpus[g] >= t.gpu_milli && (pick < 0 || n.gpus[g] < n.gpus[pick])) pick = g;
      }
      gpus = {pick};
    } else {
      gpus = *RefDefaultGpus(n, t);
    }
    best.Offer(score, i, gpus, rng);
  }
  return best.Result();
}

// The FGD artifact's DotProd as its experiment runs it (dot_product_score.go
// with dimExtMethod "merge", normMethod "max"; a share on the best-fit GPU,
// open_gpu_share.go allocateGpuIdBasedOnBestFit).
std::optional<Choice> RefDotProduct(const ClusterState& s, const TaskRequest& t, TieBreak tb,
                                    Rng& rng) {
  RefPicker best(tb);
  for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
    const NodeCapacity& n = s.free[i];
    if (!Fits(n, t)) continue;
    const double node_vec[2] = {static_cast<double>(n.cpu_milli) / 128000,
                                static_cast<double>(FreeGpuMilli(n)) / 8000};
    const double task_vec[2] = {static_cast<double>(t.cpu_milli) / 128000,
                                static_cast<double>(t.GpuDemand()) / 8000};
    double dot = 0;
    for (int k = 0; k < 2; ++k) dot += node_vec[k] * task_vec[k];
    const auto score = static_cast<int64_t>(100.0 * (1 - dot / 2));
    std::vector<int> gpus;
    if (t.IsFractional()) {
      int pick = -1;
      for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
        if (n.gpus[g] >= t.gpu_milli && (pick < 0 || n.gpus[g] < n.gpus[pick])) pick = g;
      }
      gpus = {pick};
    } else {
      gpus = *RefDefaultGpus(n, t);
    }
    best.Offer(score, i, gpus, rng);
  }
  return best.Result();
}

int64_t RefFgdScore(double before, double after) {
  const double x = (before - after) / 1000.0;
  return static_cast<int64_t>(100.0 / (1.0 + std::exp(-x)));
}

std::optional<Choice> RefFgd(const ClusterState& s, const TaskRequest& t,
                             const std::vector<TaskType>& types, TieBreak tb, Rng& rng) {
  RefPicker best(tb);
  for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
    const NodeCapacity& n = s.free[i];
    if (!Fits(n, t)) continue;
    const double before = NodeFragmentation(n, types);
    if (t.IsFractional()) {
      int64_t node_score = 0;
      int node_gpu = -1;
      NodeCapacity after = n;
      after.cpu_milli -= t.cpu_milli;
      after.memory_mib -= t.memory_mib;
      for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
        if (n.gpus[g] < t.gpu_milli) continue;
        after.gpus[g] -= t.gpu_milli;
        const int64_t sc = RefFgdScore(before, NodeFragmentation(after, types));
        after.gpus[g] += t.gpu_milli;
        if (node_gpu < 0 || sc > node_score) {
          node_score = sc;
          node_gpu = g;
        }
      }
      best.Offer(node_score, i, {node_gpu}, rng);
    } else {
      std::vector<int> gpus = *RefDefaultGpus(n, t);
      NodeCapacity after = n;
      Allocate(after, t, gpus);
      best.Offer(RefFgdScore(before, NodeFragmentation(after, types)), i, gpus, rng);
    }
  }
  return best.Result();
}

// ---- random clusters and tasks ----

const char* kModels[] = {"A100", "V100", "T4", "P100"};

TaskRequest RandomTask(Rng& r) {
  TaskRequest t;
  t.cpu_milli = 1000 * static_cast<int64_t>(r.Uniform(12));
  t.memory_mib = 1024 * static_cast<int64_t>(r.Uniform(64));
  const uint64_t kind = r.Uniform(10);
  if (kind < 1) {
    t.num_gpu = 0;
  } else if (kind < 5) {
    t.num_gpu = 1;
    t.gpu_milli = static_cast<int>(50 * (1 + r.Uniform(19)));
  } else if (kind < 8) {
    t.num_gpu = 1;
    t.gpu_milli = 1000;
  } else {
    t.num_gpu = static_cast<int>(2 + r.Uniform(7));
    t.gpu_milli = 1000;
  }
  if (r.Uniform(4) == 0) t.gpu_models = {kModels[r.Uniform(4)]};
  if (r.Uniform(12) == 0) t.gpu_models = {kModels[r.Uniform(4)], kModels[r.Uniform(4)]};
  return t;
}

ClusterState RandomCluster(Rng& r, int nodes) {
  std::vector<NodeCapacity> caps;
  for (int i = 0; i < nodes; ++i) {
    NodeCapacity n;
    n.cpu_milli = 8000 * static_cast<int64_t>(1 + r.Uniform(12));
    n.memory_mib = 16384 * static_cast<int64_t>(1 + r.Uniform(16));
    const uint64_t g = r.Uniform(12);  // 0..11 GPUs: some CPU-only, some > 8
    if (g > 0) n.model = kModels[r.Uniform(4)];
    n.gpus.assign(static_cast<size_t>(g), 1000);
    caps.push_back(std::move(n));
  }
  return ClusterState::FromCapacity(std::move(caps));
}

void ExpectSame(const std::optional<Choice>& want, const std::optional<Choice>& got,
                const std::string& what) {
  ASSERT_EQ(want.has_value(), got.has_value()) << what;
  if (!want) return;
  EXPECT_EQ(want->node, got->node) << what;
  EXPECT_EQ(want->gpus, got->gpus) << what;
}

struct Placed {
  TaskRequest task;
  Choice choice;
};

void RunEquivalence(const std::string& name, TieBreak tb, uint64_t seed) {
  Rng world(seed);
  std::vector<TaskRequest> sample;
  for (int k = 0; k < 300; ++k) sample.push_back(RandomTask(world));
  const std::vector<TaskType> types = TypicalTaskTypes(sample, 90, 1, true);
  auto fast = MakePolicy(name, types, tb);
  ClusterState s = RandomCluster(world, 40 + static_cast<int>(world.Uniform(40)));
  std::deque<Placed> live;
  Rng ref_rng(seed * 7 + 1), fast_rng(seed * 7 + 1);
  for (int step = 0; step < 1500; ++step) {
    const TaskRequest t = RandomTask(world);
    std::optional<Choice> want;
    if (name == "best-fit") want = RefBestFit(s, t, tb, ref_rng);
    if (name == "dot-product") want = RefDotProduct(s, t, tb, ref_rng);
    if (name == "fgd") want = RefFgd(s, t, types, tb, ref_rng);
    const std::optional<Choice> got = fast->Place(s, t, fast_rng);
    ExpectSame(want, got, name + " step " + std::to_string(step));
    if (::testing::Test::HasFailure()) return;
    if (got) {
      ASSERT_TRUE(Allocate(s.free[got->node], t, got->gpus)) << name;
      live.push_back({t, *got});
    }
    // Departures keep the cluster churning between full and empty.
    while (!live.empty() && (live.size() > 150 || world.Uniform(3) == 0)) {
      const size_t k = world.Uniform(live.size());
      Release(s.free[live[k].choice.node], live[k].task, live[k].choice.gpus);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    // Edits that bypass Allocate/Release: the caches must notice them.
    if (world.Uniform(50) == 0) {
      NodeCapacity& n = s.free[world.Uniform(s.free.size())];
      if (!n.gpus.empty()) {
        int& g = n.gpus[world.Uniform(n.gpus.size())];
        g = static_cast<int>(world.Uniform(static_cast<uint64_t>(g) + 1));
      }
      n.cpu_milli = static_cast<int64_t>(world.Uniform(static_cast<uint64_t>(n.cpu_milli) + 1));
    }
    if (world.Uniform(400) == 0) {  // a new cluster, possibly of another size
      s = RandomCluster(world, 40 + static_cast<int>(world.Uniform(40)));
      live.clear();
    }
  }
}

TEST(PlacementIndex, CachedPoliciesChooseAsTheReferenceScans) {
  for (const std::string name : {"best-fit", "dot-product", "fgd"}) {
    for (TieBreak tb : {TieBreak::kLowestIndex, TieBreak::kRandom}) {
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        RunEquivalence(name, tb, seed);
        ASSERT_FALSE(HasFailure()) << name << " seed " << seed;
      }
    }
  }
}

TEST(PlacementIndex, FgdOnIdenticalNodesStillDrawsTiesFromTheGenerator) {
  // Every node scores the same: the random tie break must consume the
  // generator exactly as the reference scan does, also on cached scores.
  auto s = ClusterState::FromCapacity(
      std::vector<NodeCapacity>(32, NodeCapacity{32000, 1 << 20, "V100", {1000, 1000}}));
  const std::vector<TaskType> w = {{TaskRequest{1000, 0, 1, 1000, {}}, 0.5},
                                   {TaskRequest{1000, 0, 1, 300, {}}, 0.5}};
  auto p = MakePolicy("fgd", w, TieBreak::kRandom);
  Rng a(9), b(9);
  const TaskRequest t{1000, 1024, 1, 300, {}};
  for (int k = 0; k < 20; ++k) {
    ExpectSame(RefFgd(s, t, w, TieBreak::kRandom, a), p->Place(s, t, b), "tie");
    EXPECT_EQ(a.Next(), b.Next());
  }
}

}  // namespace
}  // namespace gpupool::sched
