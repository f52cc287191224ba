#include "sched/policies.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "sched/policy_gpupool.h"

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

}  // namespace

std::vector<int> RandomGpus(const NodeCapacity& free, const TaskRequest& task, Rng& rng) {
  if (!task.IsFractional()) return *DefaultGpus(free, task);
  const std::vector<int> fit = ShareCandidates(free, task);
  return {fit[rng.Uniform(fit.size())]};
}

namespace {

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
    return Choice{n, RandomGpus(s.free[n], t, rng)};
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

// What the scoring policies need to know about each node's free resources,
// kept in step with the ClusterState they are handed by comparing each node's
// CPU, model and GPU vector with the copy taken last time (a few dozen bytes,
// much cheaper than rescoring). A node whose copy differs gets a new epoch, so
// per-node results cached under the old epoch are recomputed when next used.
// Memory is read from the state directly: no score depends on it.
class NodeSummaries {
 public:
  struct Node {
    uint64_t epoch = 0;  // 0: never seen
    int64_t cpu = 0;
    std::string model;
    std::vector<int> gpus;
    int model_id = -1;
    int64_t gpu_total = 0;  // free GPU milli
    int max_free = -1;      // most free milli on one GPU; -1 without GPUs
    int whole = 0;          // GPUs with a whole GPU free
  };

  // Resets everything when the cluster's size changes; returns true then.
  bool Resize(size_t n) {
    if (nodes_.size() == n) return false;
    nodes_.assign(n, Node{});
    return true;
  }

  const Node& Sync(int i, const NodeCapacity& n) {
    Node& s = nodes_[static_cast<size_t>(i)];
    if (s.epoch != 0 && s.cpu == n.cpu_milli && Same(s.gpus, n.gpus) && Same(s.model, n.model)) {
      return s;
    }
    if (s.epoch == 0 || s.model != n.model) {
      s.model = n.model;
      s.model_id = ModelId(n.model);
    }
    s.cpu = n.cpu_milli;
    s.gpus = n.gpus;
    s.gpu_total = 0;
    s.max_free = -1;
    s.whole = 0;
    for (int g : s.gpus) {
      s.gpu_total += g;
      s.max_free = std::max(s.max_free, g);
      s.whole += g >= kMilliPerGpu ? 1 : 0;
    }
    s.epoch = ++clock_;
    return s;
  }

  // Word-wise, inline: cheaper than a memcmp call for a few GPUs or a short
  // model name.
  static bool SameBytes(const char* a, const char* b, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
      uint64_t x, y;
      std::memcpy(&x, a + k, 8);
      std::memcpy(&y, b + k, 8);
      if (x != y) return false;
    }
    for (; k < n; ++k) {
      if (a[k] != b[k]) return false;
    }
    return true;
  }
  static bool Same(const std::vector<int>& a, const std::vector<int>& b) {
    return a.size() == b.size() &&
           SameBytes(reinterpret_cast<const char*>(a.data()),
                     reinterpret_cast<const char*>(b.data()), a.size() * sizeof(int));
  }
  static bool Same(const std::string& a, const std::string& b) {
    return a.size() == b.size() && SameBytes(a.data(), b.data(), a.size());
  }

  int ModelId(const std::string& model) {
    for (size_t k = 0; k < models_.size(); ++k) {
      if (models_[k] == model) return static_cast<int>(k);
    }
    models_.push_back(model);
    return static_cast<int>(models_.size()) - 1;
  }
  const std::string& ModelName(int id) const { return models_[static_cast<size_t>(id)]; }

 private:
  std::vector<Node> nodes_;
  std::vector<std::string> models_;  // interned GPU model names
  uint64_t clock_ = 0;
};

// Fits() for one task against a synced node summary: the same answer, without
// string comparisons per node (the model test is memoised per model id).
class TaskFilter {
 public:
  TaskFilter(const TaskRequest& t, const NodeSummaries& nodes) : t_(t), nodes_(nodes) {}

  bool Fits(const NodeSummaries::Node& s, const NodeCapacity& n) {
    if (s.cpu < t_.cpu_milli || n.memory_mib < t_.memory_mib || !ModelOk(s.model_id)) return false;
    if (t_.num_gpu <= 0) return true;
    if (t_.IsFractional()) return s.max_free >= t_.gpu_milli;
    return s.whole >= t_.num_gpu;
  }

 private:
  bool ModelOk(int id) {
    if (t_.gpu_models.empty()) return true;
    const auto k = static_cast<size_t>(id);
    if (k >= allowed_.size()) allowed_.resize(k + 1, -1);
    if (allowed_[k] < 0) {
      NodeCapacity probe;
      probe.model = nodes_.ModelName(id);
      allowed_[k] = ModelAllowed(probe, t_) ? 1 : 0;
    }
    return allowed_[k] == 1;
  }

  const TaskRequest& t_;
  const NodeSummaries& nodes_;
  std::vector<signed char> allowed_;
};

// Syncs every node's summary and calls visit(index, free, summary) for each
// node the task fits on, in index order: the scan the scoring policies share.
template <typename Visit>
void ForEachFittingNode(const ClusterState& s, const TaskRequest& t, NodeSummaries& nodes,
                        Visit&& visit) {
  TaskFilter filter(t, nodes);
  for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
    const NodeCapacity& n = s.free[static_cast<size_t>(i)];
    const NodeSummaries::Node& sum = nodes.Sync(i, n);
    if (filter.Fits(sum, n)) visit(i, n, sum);
  }
}

// Keeps the best integer score seen. Ties: uniformly at random (reservoir
// sampling over the tied candidates, as upstream kube-scheduler's selectHost)
// or the first offered, i.e. the lowest node index (the FGD artifact's patched
// selectHost keeps the lexicographically smallest node name). Keeps the node
// and, where the policy chooses among a node's GPUs, the GPU; the rest is
// derived from the node at the end, so offering allocates nothing.
struct FastPicker {
  explicit FastPicker(TieBreak tb) : random_ties(tb == TieBreak::kRandom) {}
  bool random_ties;
  bool have = false;
  int64_t score = 0;
  int ties = 0;
  int node = -1;
  int gpu = -1;

  void Offer(int64_t s, int i, int g, Rng& rng) {
    if (!have || s > score) {
      have = true;
      score = s;
      ties = 1;
      node = i;
      gpu = g;
    } else if (s == score && random_ties) {
      ++ties;
      if (rng.Uniform(static_cast<uint64_t>(ties)) == 0) {
        node = i;
        gpu = g;
      }
    }
  }
  // A share goes on `gpu`; other tasks take the node's default GPUs.
  std::optional<Choice> Result(const ClusterState& s, const TaskRequest& t) const {
    if (!have) return std::nullopt;
    if (t.IsFractional()) return Choice{node, {gpu}};
    return Choice{node, *DefaultGpus(s.free[static_cast<size_t>(node)], t)};
  }
};

// The fitting GPU with least free milli, the first of equals (the
// artifact's gpuSelMethod "best", allocateGpuIdBasedOnBestFit).
int TightestGpu(const NodeCapacity& n, const TaskRequest& t) {
  int pick = -1;
  for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
    if (n.gpus[g] >= t.gpu_milli && (pick < 0 || n.gpus[g] < n.gpus[pick])) pick = g;
  }
  return pick;
}

class BestFitPolicy : public PlacementPolicy {
 public:
  explicit BestFitPolicy(TieBreak tb) : tie_break_(tb) {}
  std::string Name() const override { return "best-fit"; }
  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    nodes_.Resize(s.free.size());
    FastPicker best(tie_break_);
    ForEachFittingNode(s, t, nodes_,
                       [&](int i, const NodeCapacity&, const NodeSummaries::Node& sum) {
                         best.Offer(BestFitScore(sum.cpu, sum.gpu_total, t), i, -1, rng);
                       });
    if (best.have && t.IsFractional())
      best.gpu = TightestGpu(s.free[static_cast<size_t>(best.node)], t);
    return best.Result(s, t);
  }

 private:
  TieBreak tie_break_;
  NodeSummaries nodes_;
};

class DotProductPolicy : public PlacementPolicy {
 public:
  explicit DotProductPolicy(TieBreak tb) : tie_break_(tb) {}
  std::string Name() const override { return "dot-product"; }
  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    nodes_.Resize(s.free.size());
    FastPicker best(tie_break_);
    ForEachFittingNode(s, t, nodes_,
                       [&](int i, const NodeCapacity&, const NodeSummaries::Node& sum) {
                         best.Offer(DotProductScore(sum.cpu, sum.gpu_total, t), i, -1, rng);
                       });
    if (best.have && t.IsFractional())
      best.gpu = TightestGpu(s.free[static_cast<size_t>(best.node)], t);
    return best.Result(s, t);
  }

 private:
  TieBreak tie_break_;
  NodeSummaries nodes_;
};

// FGD. NodeFragmentation depends on a node only through its model, which of
// the workload's CPU thresholds its free CPU reaches, and the multiset of its
// free GPU milli; Frag() computes exactly the same sum (same terms, same
// order, so the same double) from precomputed per-type constants, and
// memoises it by that key. A node's score for a task depends on the node's
// free CPU and GPUs and on the task's (cpu, per-GPU milli, GPU count) only,
// so scores are cached per node and task shape until the node changes.
class FgdPolicy : public PlacementPolicy {
 public:
  FgdPolicy(std::vector<TaskType> types, TieBreak tb) : types_(std::move(types)), tie_break_(tb) {
    for (const TaskType& tt : types_) {
      const TaskRequest& m = tt.request;
      if (m.num_gpu > 0) {
        const int per = PerGpuMilli(m);
        if (std::find(pers_.begin(), pers_.end(), per) == pers_.end()) pers_.push_back(per);
        cpus_.push_back(m.cpu_milli);
      }
    }
    std::sort(cpus_.begin(), cpus_.end());
    cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
    for (const TaskType& tt : types_) {
      const TaskRequest& m = tt.request;
      Type k;
      k.weight = tt.weight;
      k.gpu = m.num_gpu > 0;
      if (k.gpu) {
        k.num = m.num_gpu;
        k.per_idx =
            static_cast<int>(std::find(pers_.begin(), pers_.end(), PerGpuMilli(m)) - pers_.begin());
        k.cpu_idx = static_cast<int>(std::lower_bound(cpus_.begin(), cpus_.end(), m.cpu_milli) -
                                     cpus_.begin());
      }
      tt_.push_back(k);
    }
    usable_.resize(pers_.size());
    unusable_.resize(pers_.size());
  }
  std::string Name() const override { return "fgd"; }

  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    if (nodes_.Resize(s.free.size())) {
      before_.assign(s.free.size(), Before{});
      shapes_.clear();
      scores_.clear();
    }
    std::vector<Entry>& cache = ScoresFor(t, s.free.size());
    FastPicker best(tie_break_);
    ForEachFittingNode(s, t, nodes_,
                       [&](int i, const NodeCapacity&, const NodeSummaries::Node& sum) {
                         Entry& e = cache[static_cast<size_t>(i)];
                         if (e.epoch != sum.epoch) {
                           ScoreNode(i, sum, t, e);
                           e.epoch = sum.epoch;
                         }
                         best.Offer(e.score, i, e.gpu, rng);
                       });
    return best.Result(s, t);
  }

 private:
  struct Type {
    double weight = 0;
    bool gpu = false;  // false: a CPU-only type, which strands all free GPU milli
    int num = 0;
    int per_idx = 0;  // into pers_
    int cpu_idx = 0;  // into cpus_: the type fits when the node's CPU rank exceeds it
  };
  struct Entry {
    uint64_t epoch = 0;
    int32_t score = 0;
    int32_t gpu = -1;
  };
  struct Before {
    uint64_t epoch = 0;
    double frag = 0;
  };
  struct MemoKey {
    uint64_t a = 0, b = 0;
    bool operator==(const MemoKey& o) const { return a == o.a && b == o.b; }
  };
  struct MemoHash {
    size_t operator()(const MemoKey& k) const {
      uint64_t x = k.a * 0x9E3779B97F4A7C15ULL ^ (k.b + 0x632BE59BD9B4E019ULL + (k.a >> 29));
      x ^= x >> 31;
      x *= 0xBF58476D1CE4E5B9ULL;
      x ^= x >> 29;
      return static_cast<size_t>(x);
    }
  };

  static constexpr size_t kMaxCachedScores = size_t{1} << 21;  // entries over all shapes
  static constexpr size_t kMaxMemo = size_t{1} << 20;

  static int64_t Score(double before, double after) { return FgdScore(before, after); }

  // The score cache of the task's shape (cpu, per-GPU milli, GPU count).
  std::vector<Entry>& ScoresFor(const TaskRequest& t, size_t nodes) {
    const auto key =
        std::make_tuple(t.cpu_milli, t.num_gpu <= 0 ? 0 : PerGpuMilli(t), std::max(t.num_gpu, 0));
    auto it = shapes_.find(key);
    if (it != shapes_.end()) return scores_[it->second];
    if ((scores_.size() + 1) * nodes > kMaxCachedScores) {
      shapes_.clear();
      scores_.clear();
    }
    shapes_.emplace(key, scores_.size());
    scores_.emplace_back(nodes, Entry{});
    return scores_.back();
  }

  const std::vector<char>& Allowed(int model_id) {
    const auto k = static_cast<size_t>(model_id);
    if (k >= allowed_.size()) allowed_.resize(k + 1);
    std::vector<char>& a = allowed_[k];
    if (a.empty() && !types_.empty()) {
      NodeCapacity probe;
      probe.model = nodes_.ModelName(model_id);
      for (const TaskType& tt : types_) a.push_back(ModelAllowed(probe, tt.request) ? 1 : 0);
    }
    return a;
  }

  // NodeFragmentation of a node with this model, free CPU and free GPUs.
  double Frag(int model_id, int64_t cpu, const std::vector<int>& gpus) {
    int64_t total = 0;
    for (int g : gpus) total += g;
    if (total == 0) return 0;
    const auto rank =
        static_cast<uint64_t>(std::upper_bound(cpus_.begin(), cpus_.end(), cpu) - cpus_.begin());
    MemoKey key;
    const bool memo = gpus.size() <= 8 && model_id < 4096 && rank < 4096;
    if (memo) {
      int sorted[8];
      const int n = static_cast<int>(gpus.size());
      for (int k = 0; k < n; ++k) {
        int v = gpus[static_cast<size_t>(k)];
        if (v < 0 || v > 2047) return Compute(model_id, rank, gpus, total);
        int j = k;
        for (; j > 0 && sorted[j - 1] < v; --j) sorted[j] = sorted[j - 1];
        sorted[j] = v;
      }
      for (int k = n; k < 8; ++k) sorted[k] = 0;
      for (int k = 0; k < 5; ++k) key.a = key.a << 11 | static_cast<uint64_t>(sorted[k]);
      for (int k = 5; k < 8; ++k) key.b = key.b << 11 | static_cast<uint64_t>(sorted[k]);
      key.b = (key.b << 4 | static_cast<uint64_t>(n)) << 24 |
              static_cast<uint64_t>(model_id) << 12 | rank;
      auto it = memo_.find(key);
      if (it != memo_.end()) return it->second;
    }
    const double f = Compute(model_id, rank, gpus, total);
    if (memo) {
      if (memo_.size() >= kMaxMemo) memo_.clear();
      memo_.emplace(key, f);
    }
    return f;
  }

  double Compute(int model_id, uint64_t rank, const std::vector<int>& gpus, int64_t total) {
    for (size_t p = 0; p < pers_.size(); ++p) {
      int usable = 0;
      int64_t unusable = 0;
      for (int g : gpus) {
        if (g >= pers_[p]) {
          ++usable;
        } else {
          unusable += g;
        }
      }
      usable_[p] = usable;
      unusable_[p] = unusable;
    }
    const std::vector<char>& allowed = Allowed(model_id);
    double frag = 0;
    for (size_t k = 0; k < tt_.size(); ++k) {
      const Type& y = tt_[k];
      int64_t x = total;
      if (y.gpu && allowed[k] && usable_[static_cast<size_t>(y.per_idx)] >= y.num &&
          rank > static_cast<uint64_t>(y.cpu_idx)) {
        x = unusable_[static_cast<size_t>(y.per_idx)];
      }
      frag += y.weight * static_cast<double>(x);
    }
    return frag;
  }

  void ScoreNode(int i, const NodeSummaries::Node& sum, const TaskRequest& t, Entry& e) {
    Before& b = before_[static_cast<size_t>(i)];
    if (b.epoch != sum.epoch) {
      b.frag = Frag(sum.model_id, sum.cpu, sum.gpus);
      b.epoch = sum.epoch;
    }
    const double before = b.frag;
    after_ = sum.gpus;
    const int64_t cpu_after = sum.cpu - t.cpu_milli;
    if (t.IsFractional()) {
      // Try each distinct free amount once: equal GPUs give equal results,
      // and the artifact keeps the first GPU with the best score.
      int64_t node_score = 0;
      int node_gpu = -1;
      for (int g = 0; g < static_cast<int>(after_.size()); ++g) {
        const int free = sum.gpus[static_cast<size_t>(g)];
        if (free < t.gpu_milli) continue;
        bool seen = false;
        for (int h = 0; h < g; ++h) seen |= sum.gpus[static_cast<size_t>(h)] == free;
        if (seen) continue;
        after_[static_cast<size_t>(g)] -= t.gpu_milli;
        const int64_t sc = Score(before, Frag(sum.model_id, cpu_after, after_));
        after_[static_cast<size_t>(g)] += t.gpu_milli;
        if (node_gpu < 0 || sc > node_score) {
          node_score = sc;
          node_gpu = g;
        }
      }
      e.score = static_cast<int32_t>(node_score);
      e.gpu = node_gpu;
      return;
    }
    // The default GPUs: the first num_gpu whole free GPUs (none for a CPU task).
    int need = std::max(t.num_gpu, 0);
    for (size_t g = 0; g < after_.size() && need > 0; ++g) {
      if (after_[g] == kMilliPerGpu) {
        after_[g] -= static_cast<int>(kMilliPerGpu);
        --need;
      }
    }
    e.score = static_cast<int32_t>(Score(before, Frag(sum.model_id, cpu_after, after_)));
    e.gpu = -1;
  }

  std::vector<TaskType> types_;
  TieBreak tie_break_;
  std::vector<Type> tt_;
  std::vector<int> pers_;                   // distinct per-GPU milli of the GPU types
  std::vector<int64_t> cpus_;               // distinct CPU requests of the GPU types, ascending
  std::vector<std::vector<char>> allowed_;  // per model id, per type: ModelAllowed
  std::vector<int> usable_;
  std::vector<int64_t> unusable_;
  std::vector<int> after_;
  NodeSummaries nodes_;
  std::vector<Before> before_;
  std::map<std::tuple<int64_t, int, int>, size_t> shapes_;
  std::vector<std::vector<Entry>> scores_;
  std::unordered_map<MemoKey, double, MemoHash> memo_;
};

}  // namespace

int64_t BestFitScore(int64_t cpu_free, int64_t gpu_free, const TaskRequest& t) {
  const double left = 0.5 * static_cast<double>(cpu_free - t.cpu_milli) / kMaxSpecCpu +
                      0.5 * static_cast<double>(gpu_free - t.GpuDemand()) / kMaxSpecGpu;
  return static_cast<int64_t>((1.0 - left) * 100.0);
}

int64_t DotProductScore(int64_t cpu_free, int64_t gpu_free, const TaskRequest& t) {
  // In the artifact's order (CalculateVectorDotProduct over the vectors
  // NormalizeVector made, then / 2, 1 - x, * 100, truncated).
  const double node_cpu = static_cast<double>(cpu_free) / kMaxSpecCpu;
  const double node_gpu = static_cast<double>(gpu_free) / kMaxSpecGpu;
  const double task_cpu = static_cast<double>(t.cpu_milli) / kMaxSpecCpu;
  const double task_gpu = static_cast<double>(t.GpuDemand()) / kMaxSpecGpu;
  double dot = 0;
  dot += node_cpu * task_cpu;
  dot += node_gpu * task_gpu;
  dot /= 2;
  return static_cast<int64_t>(100.0 * (1 - dot));
}

int64_t FgdScore(double before, double after) {
  const double x = (before - after) / 1000.0;
  return static_cast<int64_t>(100.0 / (1.0 + std::exp(-x)));
}

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
  return {"random", "first-fit", "best-fit", "dot-product", "fgd", "gpupool"};
}

std::unique_ptr<PlacementPolicy> MakePolicy(const std::string& name, std::vector<TaskType> workload,
                                            TieBreak tie_break) {
  if (tie_break == TieBreak::kLeastGpuLeft) {
    return MakeScoredPolicy(MakeScorer(name), std::move(workload), tie_break);
  }
  if (name == "random") return std::make_unique<RandomPolicy>();
  if (name == "first-fit") return std::make_unique<FirstFitPolicy>();
  if (name == "best-fit") return std::make_unique<BestFitPolicy>(tie_break);
  if (name == "dot-product") return std::make_unique<DotProductPolicy>(tie_break);
  if (name == "fgd") return std::make_unique<FgdPolicy>(std::move(workload), tie_break);
  if (name.rfind("gpupool", 0) == 0) return MakeGpupoolPolicy(name, std::move(workload), tie_break);
  return nullptr;
}

}  // namespace gpupool::sched
