#include "sched/policies.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace gpupool::sched {

uint64_t Rng::Uniform(uint64_t n) {
  // Rejection sampling: unbiased and independent of the standard library's
  // distribution implementation.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = engine_();
  } while (x >= limit);
  return x % n;
}

namespace {

int PerGpuMilli(const TaskRequest& t) {
  return t.IsFractional() ? t.gpu_milli : static_cast<int>(kMilliPerGpu);
}

// Keeps the best integer score seen. Ties: uniformly at random (reservoir
// sampling over the tied candidates, as upstream kube-scheduler's selectHost)
// or the first offered, i.e. the lowest node index (the FGD artifact's patched
// selectHost keeps the lexicographically smallest node name).
struct BestPicker {
  explicit BestPicker(TieBreak tb) : random_ties(tb == TieBreak::kRandom) {}
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

// The GPUs a task takes on a node by default: the first fitting GPU for a
// share, the first num_gpu free GPUs otherwise, none for a CPU task.
std::optional<std::vector<int>> DefaultGpus(const NodeCapacity& free, const TaskRequest& task) {
  if (task.num_gpu <= 0) return std::vector<int>{};
  if (task.IsFractional()) {
    for (int i = 0; i < static_cast<int>(free.gpus.size()); ++i) {
      if (free.gpus[i] >= task.gpu_milli) return std::vector<int>{i};
    }
    return std::nullopt;
  }
  return WholeGpus(free, task);
}

class RandomPolicy : public PlacementPolicy {
 public:
  std::string Name() const override { return "random"; }
  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    std::vector<int> feasible;
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      if (Fits(s.free[i], t)) feasible.push_back(i);
    }
    if (feasible.empty()) return std::nullopt;
    const int n = feasible[rng.Uniform(feasible.size())];
    return Choice{n, *DefaultGpus(s.free[n], t)};
  }
};

class FirstFitPolicy : public PlacementPolicy {
 public:
  std::string Name() const override { return "first-fit"; }
  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng&) override {
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      if (Fits(s.free[i], t)) return Choice{i, *DefaultGpus(s.free[i], t)};
    }
    return std::nullopt;
  }
};

constexpr double kMaxSpecCpu = 128000;  // the artifact's normalisation constants
constexpr double kMaxSpecGpu = 8000;

class BestFitPolicy : public PlacementPolicy {
 public:
  explicit BestFitPolicy(TieBreak tb) : tie_break_(tb) {}
  std::string Name() const override { return "best-fit"; }
  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    BestPicker best(tie_break_);
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      const NodeCapacity& n = s.free[i];
      if (!Fits(n, t)) continue;
      const double left = 0.5 * static_cast<double>(n.cpu_milli - t.cpu_milli) / kMaxSpecCpu +
                          0.5 * static_cast<double>(FreeGpuMilli(n) - t.GpuDemand()) / kMaxSpecGpu;
      const auto score = static_cast<int64_t>((1.0 - left) * 100.0);
      std::vector<int> gpus;
      if (t.IsFractional()) {
        int pick = -1;
        for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
          if (n.gpus[g] >= t.gpu_milli && (pick < 0 || n.gpus[g] < n.gpus[pick])) pick = g;
        }
        gpus = {pick};
      } else {
        gpus = *DefaultGpus(n, t);
      }
      best.Offer(score, i, gpus, rng);
    }
    return best.Result();
  }

 private:
  TieBreak tie_break_;
};

class DotProductPolicy : public PlacementPolicy {
 public:
  explicit DotProductPolicy(TieBreak tb) : tie_break_(tb) {}
  std::string Name() const override { return "dot-product"; }
  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    BestPicker best(tie_break_);
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      const NodeCapacity& n = s.free[i];
      if (!Fits(n, t)) continue;
      const NodeCapacity& cap = s.capacity[i];
      const double cpu_cap = std::max<double>(1, static_cast<double>(cap.cpu_milli));
      const double cpu_term = (static_cast<double>(t.cpu_milli) / cpu_cap) *
                              (static_cast<double>(n.cpu_milli) / cpu_cap);
      auto offer = [&](double gpu_req, double gpu_free, double gpu_cap,
                       const std::vector<int>& gpus) {
        gpu_cap = std::max(1.0, gpu_cap);
        const double dot = (cpu_term + (gpu_req / gpu_cap) * (gpu_free / gpu_cap)) / 2;
        best.Offer(static_cast<int64_t>((1.0 - dot) * 100.0), i, gpus, rng);
      };
      if (t.IsFractional()) {
        // One candidate per GPU: the share against that GPU's free milli.
        BestPicker on_node(TieBreak::kLowestIndex);
        for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
          if (n.gpus[g] < t.gpu_milli) continue;
          const double dot = (cpu_term + (static_cast<double>(t.gpu_milli) / kMilliPerGpu) *
                                             (static_cast<double>(n.gpus[g]) / kMilliPerGpu)) /
                             2;
          const auto sc = static_cast<int64_t>((1.0 - dot) * 100.0);
          if (!on_node.have || sc > on_node.score) {
            on_node.have = true;
            on_node.score = sc;
            on_node.choice = Choice{i, {g}};
          }
        }
        best.Offer(on_node.score, i, on_node.choice.gpus, rng);
      } else {
        offer(static_cast<double>(t.GpuDemand()), static_cast<double>(FreeGpuMilli(n)),
              static_cast<double>(FreeGpuMilli(cap)), *DefaultGpus(n, t));
      }
    }
    return best.Result();
  }

 private:
  TieBreak tie_break_;
};

class FgdPolicy : public PlacementPolicy {
 public:
  FgdPolicy(std::vector<TaskType> types, TieBreak tb) : types_(std::move(types)), tie_break_(tb) {}
  std::string Name() const override { return "fgd"; }

  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    if (cache_.size() != s.free.size()) cache_.assign(s.free.size(), Cached{});
    BestPicker best(tie_break_);
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      const NodeCapacity& n = s.free[i];
      if (!Fits(n, t)) continue;
      const double before = Before(i, n);
      if (t.IsFractional()) {
        // Try each distinct free amount once: equal GPUs give equal results,
        // and the artifact keeps the first GPU with the best score.
        int64_t node_score = 0;
        int node_gpu = -1;
        NodeCapacity after = n;
        after.cpu_milli -= t.cpu_milli;
        after.memory_mib -= t.memory_mib;
        for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
          if (n.gpus[g] < t.gpu_milli) continue;
          bool seen = false;
          for (int h = 0; h < g; ++h) seen |= n.gpus[h] == n.gpus[g];
          if (seen) continue;
          after.gpus[g] -= t.gpu_milli;
          const int64_t sc = Score(before, NodeFragmentation(after, types_));
          after.gpus[g] += t.gpu_milli;
          if (node_gpu < 0 || sc > node_score) {
            node_score = sc;
            node_gpu = g;
          }
        }
        best.Offer(node_score, i, {node_gpu}, rng);
      } else {
        std::vector<int> gpus = *DefaultGpus(n, t);
        NodeCapacity after = n;
        Allocate(after, t, gpus);
        best.Offer(Score(before, NodeFragmentation(after, types_)), i, gpus, rng);
      }
    }
    return best.Result();
  }

 private:
  struct Cached {
    bool valid = false;
    int64_t cpu = 0;
    std::vector<int> gpus;
    double frag = 0;
  };

  static int64_t Score(double before, double after) {
    const double x = (before - after) / 1000.0;
    return static_cast<int64_t>(100.0 / (1.0 + std::exp(-x)));
  }

  double Before(int i, const NodeCapacity& n) {
    Cached& c = cache_[i];
    if (!c.valid || c.cpu != n.cpu_milli || c.gpus != n.gpus) {
      c.valid = true;
      c.cpu = n.cpu_milli;
      c.gpus = n.gpus;
      c.frag = NodeFragmentation(n, types_);
    }
    return c.frag;
  }

  std::vector<TaskType> types_;
  TieBreak tie_break_;
  std::vector<Cached> cache_;
};

}  // namespace

double NodeFragmentation(const NodeCapacity& free, const std::vector<TaskType>& types) {
  const int64_t total = FreeGpuMilli(free);
  if (total == 0) return 0;
  double frag = 0;
  for (const TaskType& tt : types) {
    const TaskRequest& m = tt.request;
    if (m.num_gpu <= 0) {
      frag += tt.weight * static_cast<double>(total);  // a CPU task uses no GPU
      continue;
    }
    if (!ModelAllowed(free, m)) {
      frag += tt.weight * static_cast<double>(total);
      continue;
    }
    const int per = PerGpuMilli(m);
    int usable = 0;
    int64_t unusable_milli = 0;
    for (int g : free.gpus) {
      if (g >= per) {
        ++usable;
      } else {
        unusable_milli += g;
      }
    }
    if (usable >= m.num_gpu && free.cpu_milli >= m.cpu_milli) {
      frag += tt.weight * static_cast<double>(unusable_milli);
    } else {
      frag += tt.weight * static_cast<double>(total);
    }
  }
  return frag;
}

std::vector<TaskType> TypicalTaskTypes(const std::vector<TaskRequest>& tasks, double threshold_pct,
                                       int step, bool include_cpu) {
  // Key order (cpu, per-GPU milli, num_gpu, models) is the artifact's order
  // for equal counts; a CPU-only task has per-GPU milli 0.
  using Key = std::tuple<int64_t, int, int, std::vector<std::string>>;
  std::map<Key, double> counts;
  double total = 0;
  for (const TaskRequest& t : tasks) {
    if (t.num_gpu <= 0 && !include_cpu) continue;
    const int milli = t.num_gpu <= 0 ? 0 : PerGpuMilli(t);
    counts[Key{t.cpu_milli, milli, std::max(t.num_gpu, 0), t.gpu_models}] += 1;
    total += 1;
  }
  // Most popular first; equal counts: larger key first (the map iterates in
  // ascending key order, so walk it backwards before a stable sort).
  std::vector<std::pair<Key, double>> sorted(counts.rbegin(), counts.rend());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const double expected = threshold_pct * total / 100.0;
  size_t taken = 0;
  double cum = 0;
  while (cum < expected && taken < sorted.size()) {
    const size_t until = std::min(sorted.size(), taken + static_cast<size_t>(std::max(step, 1)));
    for (; taken < until; ++taken) cum += sorted[taken].second;
  }
  std::vector<TaskType> out;
  for (size_t i = 0; i < taken; ++i) {
    const auto& [key, n] = sorted[i];
    TaskType tt;
    tt.request.cpu_milli = std::get<0>(key);
    tt.request.gpu_milli = std::get<1>(key);
    tt.request.num_gpu = std::get<2>(key);
    tt.request.gpu_models = std::get<3>(key);
    tt.weight = n / cum;
    out.push_back(std::move(tt));
  }
  return out;
}

std::vector<std::string> PolicyNames() {
  return {"random", "first-fit", "best-fit", "dot-product", "fgd"};
}

std::unique_ptr<PlacementPolicy> MakePolicy(const std::string& name, std::vector<TaskType> workload,
                                            TieBreak tie_break) {
  if (name == "random") return std::make_unique<RandomPolicy>();
  if (name == "first-fit") return std::make_unique<FirstFitPolicy>();
  if (name == "best-fit") return std::make_unique<BestFitPolicy>(tie_break);
  if (name == "dot-product") return std::make_unique<DotProductPolicy>(tie_break);
  if (name == "fgd") return std::make_unique<FgdPolicy>(std::move(workload), tie_break);
  return nullptr;
}

}  // namespace gpupool::sched
