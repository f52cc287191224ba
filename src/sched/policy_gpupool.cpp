#include "sched/policy_gpupool.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

namespace gpupool::sched {
namespace {

using Key = ScoreKey;

bool Used(const NodeCapacity& cap, const NodeCapacity& n) {
  return FreeGpuMilli(n) < FreeGpuMilli(cap) || n.cpu_milli < cap.cpu_milli;
}

int64_t FragKey(const GpupoolOptions& opt, double before, double after) {
  const double delta = after - before;  // increase of expected fragmentation
  if (opt.quantum_milli <= 0) {
    return static_cast<int64_t>(100.0 / (1.0 + std::exp(delta / 1000.0)));  // FGD's score
  }
  return -static_cast<int64_t>(std::floor(delta / opt.quantum_milli));
}

int64_t PackKey(const GpupoolOptions& opt, const NodeCapacity& cap, const NodeCapacity& n,
                const TaskRequest& t) {
  switch (opt.pack) {
    case 1:
      return -(FreeGpuMilli(n) - t.GpuDemand());
    case 2:
      return Used(cap, n) ? 1 : 0;
    case 3:  // nodes in use first, then the least free GPU milli left
      return (Used(cap, n) ? int64_t{1} << 40 : 0) - (FreeGpuMilli(n) - t.GpuDemand());
    case 4:  // least resources left, CPU and GPU weighted as best-fit does
      return -((n.cpu_milli - t.cpu_milli) / 16 + FreeGpuMilli(n) - t.GpuDemand());
    case 5:  // nodes in use first, then as 4
      return (Used(cap, n) ? int64_t{1} << 40 : 0) -
             ((n.cpu_milli - t.cpu_milli) / 16 + FreeGpuMilli(n) - t.GpuDemand());
    case 6:  // as 2; a CPU-only task also prefers the node with the least free GPU
      if (t.num_gpu <= 0) return (Used(cap, n) ? int64_t{1} << 40 : 0) - FreeGpuMilli(n);
      return Used(cap, n) ? 1 : 0;
    case 7:  // as 5; a CPU-only task as 2
      if (t.num_gpu <= 0) return Used(cap, n) ? 1 : 0;
      return (Used(cap, n) ? int64_t{1} << 40 : 0) -
             ((n.cpu_milli - t.cpu_milli) / 16 + FreeGpuMilli(n) - t.GpuDemand());
    default:
      return 0;
  }
}

class GpupoolPolicy : public PlacementPolicy {
 public:
  GpupoolPolicy(GpupoolOptions o, std::vector<TaskType> types, TieBreak tb)
      : opt_(o), types_(std::move(types)), tie_break_(tb) {}

  std::string Name() const override {
    if (opt_.quantum_milli == GpupoolOptions{}.quantum_milli && opt_.pack == GpupoolOptions{}.pack)
      return "gpupool";
    return "gpupool/q=" + std::to_string(opt_.quantum_milli) + ",p=" + std::to_string(opt_.pack);
  }

  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    if (cache_.size() != s.free.size()) cache_.assign(s.free.size(), Cached{});
    bool have = false;
    Key best;
    int ties = 0;
    Choice choice;
    auto offer = [&](const Key& k, int node, std::vector<int> gpus) {
      if (!have || k > best) {
        have = true;
        best = k;
        ties = 1;
        choice = Choice{node, std::move(gpus)};
      } else if (k == best && tie_break_ == TieBreak::kRandom) {
        ++ties;
        if (rng.Uniform(static_cast<uint64_t>(ties)) == 0) choice = Choice{node, std::move(gpus)};
      }
    };
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      const NodeCapacity& n = s.free[i];
      if (!Fits(n, t)) continue;
      const double before = Before(i, n);
      NodeCapacity after = n;
      if (t.IsFractional()) {
        after.cpu_milli -= t.cpu_milli;
        after.memory_mib -= t.memory_mib;
        // One try per distinct free amount; among equal fragmentation keys
        // the GPU with the least free milli (best fit), then the first.
        int gpu = -1;
        Key node_key;
        int64_t gpu_free = 0;
        for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
          if (n.gpus[g] < t.gpu_milli) continue;
          bool seen = false;
          for (int h = 0; h < g; ++h) seen |= n.gpus[h] == n.gpus[g];
          if (seen) continue;
          after.gpus[g] -= t.gpu_milli;
          const Key k =
              GpupoolKey(opt_, s.capacity[i], n, t, before, NodeFragmentation(after, types_));
          after.gpus[g] += t.gpu_milli;
          const bool fit_better = opt_.pack != 0 && n.gpus[g] < gpu_free;
          if (gpu < 0 || k > node_key || (k == node_key && fit_better)) {
            gpu = g;
            node_key = k;
            gpu_free = n.gpus[g];
          }
        }
        offer(node_key, i, {gpu});
      } else {
        std::optional<std::vector<int>> gpus =
            t.num_gpu > 0 ? WholeGpus(n, t) : std::optional<std::vector<int>>(std::vector<int>{});
        Allocate(after, t, *gpus);
        offer(GpupoolKey(opt_, s.capacity[i], n, t, before, NodeFragmentation(after, types_)), i,
              std::move(*gpus));
      }
    }
    if (!have) return std::nullopt;
    return choice;
  }

 private:
  struct Cached {
    bool valid = false;
    int64_t cpu = 0;
    std::vector<int> gpus;
    double frag = 0;
  };

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

  GpupoolOptions opt_;
  std::vector<TaskType> types_;
  TieBreak tie_break_;
  std::vector<Cached> cache_;
};

}  // namespace

// Parses "q=<int>,p=<int>" into `o`; false on anything else.
static bool ParseOptions(const std::string& spec, GpupoolOptions& o) {
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    if (item.size() < 3 || item[1] != '=') return false;
    int v = 0;
    for (size_t j = 2; j < item.size(); ++j) {
      if (item[j] < '0' || item[j] > '9' || v > 1000000) return false;
      v = v * 10 + (item[j] - '0');
    }
    if (item[0] == 'q') {
      o.quantum_milli = v;
    } else if (item[0] == 'p' && v <= 7) {
      o.pack = v;
    } else {
      return false;
    }
    pos = end + 1;
  }
  return true;
}

ScoreKey GpupoolKey(const GpupoolOptions& options, const NodeCapacity& cap,
                    const NodeCapacity& free, const TaskRequest& t, double before, double after) {
  return ScoreKey{FragKey(options, before, after), PackKey(options, cap, free, t)};
}

bool ParseGpupoolName(const std::string& name, GpupoolOptions& o) {
  o = GpupoolOptions{};
  const std::string prefix = "gpupool/";
  if (name == "gpupool") return true;
  return name.rfind(prefix, 0) == 0 && ParseOptions(name.substr(prefix.size()), o);
}

std::unique_ptr<PlacementPolicy> MakeGpupoolPolicy(GpupoolOptions options,
                                                   std::vector<TaskType> workload,
                                                   TieBreak tie_break) {
  return std::make_unique<GpupoolPolicy>(options, std::move(workload), tie_break);
}

std::unique_ptr<PlacementPolicy> MakeGpupoolPolicy(const std::string& name,
                                                   std::vector<TaskType> workload,
                                                   TieBreak tie_break) {
  GpupoolOptions o;
  if (!ParseGpupoolName(name, o)) return nullptr;
  return MakeGpupoolPolicy(o, std::move(workload), tie_break);
}

}  // namespace gpupool::sched
