// The placement vocabulary (policies.h): one scorer per policy name, and the
// reference policy that places a task by a scorer alone.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sched/policies.h"
#include "sched/policy_gpupool.h"

namespace gpupool::sched {

double PlacementScorer::Before(const NodeCapacity&, const std::vector<TaskType>&) const {
  return 0;
}

namespace {

// The node after taking `t` on `gpus` (CPU, memory and GPU milli; a whole
// GPU is emptied).
NodeCapacity After(const NodeCapacity& free, const TaskRequest& t, const std::vector<int>& gpus) {
  NodeCapacity after = free;
  after.cpu_milli -= t.cpu_milli;
  after.memory_mib -= t.memory_mib;
  const int per = t.IsFractional() ? t.gpu_milli : static_cast<int>(kMilliPerGpu);
  for (int g : gpus) {
    int& m = after.gpus[static_cast<size_t>(g)];
    m = std::max(m - per, 0);
  }
  return after;
}

class ConstantScorer : public PlacementScorer {
 public:
  ConstantScorer(std::string name, bool random) : name_(std::move(name)), random_(random) {}
  std::string Name() const override { return name_; }
  bool RandomChoice() const override { return random_; }
  bool Scores() const override { return false; }
  ScoreKey Score(const NodeCapacity&, const NodeCapacity&, double, const TaskRequest&,
                 const std::vector<int>&, const std::vector<TaskType>&) const override {
    return {};
  }

 private:
  std::string name_;
  bool random_;
};

class BestFitScorer : public PlacementScorer {
 public:
  std::string Name() const override { return "best-fit"; }
  bool TightestGpuFirst() const override { return true; }
  ScoreKey Score(const NodeCapacity&, const NodeCapacity& free, double, const TaskRequest& t,
                 const std::vector<int>&, const std::vector<TaskType>&) const override {
    return {BestFitScore(free.cpu_milli, FreeGpuMilli(free), t), 0};
  }
};

class DotProductScorer : public PlacementScorer {
 public:
  std::string Name() const override { return "dot-product"; }
  bool TightestGpuFirst() const override { return true; }
  ScoreKey Score(const NodeCapacity&, const NodeCapacity& free, double, const TaskRequest& t,
                 const std::vector<int>&, const std::vector<TaskType>&) const override {
    return {DotProductScore(free.cpu_milli, FreeGpuMilli(free), t), 0};
  }
};

class FgdScorer : public PlacementScorer {
 public:
  std::string Name() const override { return "fgd"; }
  bool UsesWorkload() const override { return true; }
  double Before(const NodeCapacity& free, const std::vector<TaskType>& w) const override {
    return NodeFragmentation(free, w);
  }
  ScoreKey Score(const NodeCapacity&, const NodeCapacity& free, double before, const TaskRequest& t,
                 const std::vector<int>& gpus, const std::vector<TaskType>& w) const override {
    return {FgdScore(before, NodeFragmentation(After(free, t, gpus), w)), 0};
  }
};

class GpupoolScorer : public PlacementScorer {
 public:
  explicit GpupoolScorer(GpupoolOptions o) : opt_(o) {}
  std::string Name() const override {
    if (opt_.quantum_milli == GpupoolOptions{}.quantum_milli && opt_.pack == GpupoolOptions{}.pack)
      return "gpupool";
    return "gpupool/q=" + std::to_string(opt_.quantum_milli) + ",p=" + std::to_string(opt_.pack);
  }
  bool UsesWorkload() const override { return true; }
  bool TightestGpuFirst() const override { return opt_.pack != 0; }
  double Before(const NodeCapacity& free, const std::vector<TaskType>& w) const override {
    return NodeFragmentation(free, w);
  }
  ScoreKey Score(const NodeCapacity& cap, const NodeCapacity& free, double before,
                 const TaskRequest& t, const std::vector<int>& gpus,
                 const std::vector<TaskType>& w) const override {
    return GpupoolKey(opt_, cap, free, t, before, NodeFragmentation(After(free, t, gpus), w));
  }

 private:
  GpupoolOptions opt_;
};

// Places by a scorer alone: see MakeScoredPolicy.
class ScoredPolicy : public PlacementPolicy {
 public:
  ScoredPolicy(std::unique_ptr<PlacementScorer> scorer, std::vector<TaskType> workload, TieBreak tb)
      : scorer_(std::move(scorer)), workload_(std::move(workload)), tie_break_(tb) {}
  std::string Name() const override { return scorer_->Name(); }

  std::optional<Choice> Place(const ClusterState& s, const TaskRequest& t, Rng& rng) override {
    bool have = false;
    ScoreKey best;
    int64_t best_left = 0;
    int ties = 0;
    Choice choice;
    std::vector<int> feasible;  // RandomChoice: every feasible node
    for (int i = 0; i < static_cast<int>(s.free.size()); ++i) {
      const NodeCapacity& n = s.free[static_cast<size_t>(i)];
      if (!Fits(n, t)) continue;
      if (scorer_->RandomChoice()) {
        feasible.push_back(i);
        continue;
      }
      const NodeCapacity& cap = s.capacity[static_cast<size_t>(i)];
      const double before = scorer_->Before(n, workload_);
      // The node's best choice of GPUs.
      std::vector<std::vector<int>> options;
      if (t.IsFractional()) {
        for (int g : ShareCandidates(n, t)) options.push_back({g});
      } else if (t.num_gpu > 0) {
        options.push_back(*WholeGpus(n, t));
      } else {
        options.emplace_back();
      }
      size_t pick = 0;
      ScoreKey node_key;
      for (size_t k = 0; k < options.size(); ++k) {
        const ScoreKey key = scorer_->Score(cap, n, before, t, options[k], workload_);
        const bool tighter = scorer_->TightestGpuFirst() && t.IsFractional() &&
                             n.gpus[static_cast<size_t>(options[k][0])] <
                                 n.gpus[static_cast<size_t>(options[pick][0])];
        if (k == 0 || key > node_key || (key == node_key && tighter)) {
          pick = k;
          node_key = key;
        }
      }
      const int64_t left = FreeGpuMilli(n) - t.GpuDemand();
      const bool by_left = tie_break_ == TieBreak::kLeastGpuLeft && scorer_->Scores();
      if (!have || node_key > best || (node_key == best && by_left && left < best_left)) {
        have = true;
        best = node_key;
        best_left = left;
        ties = 1;
        choice = Choice{i, options[pick]};
      } else if (node_key == best && tie_break_ == TieBreak::kRandom && scorer_->Scores()) {
        ++ties;
        if (rng.Uniform(static_cast<uint64_t>(ties)) == 0) choice = Choice{i, options[pick]};
      }
    }
    if (scorer_->RandomChoice()) {
      if (feasible.empty()) return std::nullopt;
      const int i = feasible[rng.Uniform(feasible.size())];
      return Choice{i, RandomGpus(s.free[static_cast<size_t>(i)], t, rng)};
    }
    if (!have) return std::nullopt;
    return choice;
  }

 private:
  std::unique_ptr<PlacementScorer> scorer_;
  std::vector<TaskType> workload_;
  TieBreak tie_break_;
};

}  // namespace

std::unique_ptr<PlacementScorer> MakeScorer(const std::string& name) {
  if (name == "random") return std::make_unique<ConstantScorer>("random", true);
  if (name == "first-fit") return std::make_unique<ConstantScorer>("first-fit", false);
  if (name == "best-fit") return std::make_unique<BestFitScorer>();
  if (name == "dot-product") return std::make_unique<DotProductScorer>();
  if (name == "fgd") return std::make_unique<FgdScorer>();
  GpupoolOptions o;
  if (ParseGpupoolName(name, o)) return std::make_unique<GpupoolScorer>(o);
  return nullptr;
}

std::unique_ptr<PlacementPolicy> MakeScoredPolicy(std::unique_ptr<PlacementScorer> scorer,
                                                  std::vector<TaskType> workload,
                                                  TieBreak tie_break) {
  if (!scorer) return nullptr;
  return std::make_unique<ScoredPolicy>(std::move(scorer), std::move(workload), tie_break);
}

}  // namespace gpupool::sched
