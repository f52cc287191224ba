// Placing one rank among every node it fits on (SchedulerConfig::
// score_all_nodes), the scorer choosing the GPUs, as the openb policies
// (policies.h, MakePolicy) do; and the scorer-result cache a RunContext
// carries across passes.
//
// Contract: ChooseAmongAll decides exactly as MakeScoredPolicy's reference
// policy does for the same nodes, scorer, workload and tie break (node
// order is the pass's: by node id), and, for `random`, draws from the
// pass's generator exactly as MakePolicy("random") does: one draw among the
// feasible nodes, then (a share) one among the node's fitting GPUs, even
// when there is only one to draw from. The cache stores only results of
// the scorer's pure functions (Before, Score) under the inputs they read,
// so using it changes no decision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "sched/pass.h"

namespace gpupool::sched {

namespace detail {

struct ScoreCache {
  // What the scorer sees of a node, by pass node index (node id order).
  struct NodeState {
    std::string id;
    uint64_t epoch = 0;  // changes whenever the fields below do
    NodeCapacity cap, free;
    double before = 0;
    uint64_t before_epoch = 0;
  };
  // The scorer's keys for one task shape on one node while its epoch holds:
  // a share's key per GPU (bit g of `share_mask`: keys[g] known), or the
  // key of one GPU set for whole GPUs and CPU-only work (keys.back(), for
  // the GPUs in `set_mask`, known when `has_set`).
  struct Entry {
    uint64_t epoch = 0;
    uint64_t share_mask = 0;
    uint64_t set_mask = 0;
    bool has_set = false;
    std::vector<ScoreKey> keys;
  };
  // Entries over all task shapes (about 200 bytes each at most, with their
  // keys): past this the task rows are dropped and refilled as needed.
  static constexpr size_t kMaxCells = size_t{1} << 19;

  std::vector<NodeState> nodes;
  uint64_t clock = 0;
  std::map<std::tuple<int64_t, int64_t, int, int>, size_t> tasks;  // cpu, mem, num_gpu, milli
  std::vector<std::vector<Entry>> entries;                         // by task, by node
};

ScoreCache* EnsureScoreCache(std::unique_ptr<ScoreCache>& slot) {
  if (!slot) slot = std::make_unique<ScoreCache>();
  return slot.get();
}

namespace {

bool SameView(const NodeCapacity& a, const NodeCapacity& b) {
  return a.cpu_milli == b.cpu_milli && a.memory_mib == b.memory_mib && a.model == b.model &&
         a.gpus == b.gpus;
}

// The node as the scorer sees it (avail: free less reservations), into
// pass.scratch_free / scratch_cap, with its GPU model.
void FillScratch(Pass& pass, int n) {
  const NodeS& node = pass.nodes[static_cast<size_t>(n)];
  NodeCapacity& f = pass.scratch_free;
  f.cpu_milli = node.cpu_free - node.phantom_cpu;
  f.memory_mib = node.mem_free - node.phantom_mem;
  f.model = node.view->gpus.empty() ? std::string() : node.view->gpus.front().model;
  f.gpus.clear();
  for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
    f.gpus.push_back(std::max(pass.gpus[static_cast<size_t>(g)].AvailMilli(), 0));
  }
  NodeCapacity& c = pass.scratch_cap;
  c.cpu_milli = node.view->cpu_milli_total;
  c.memory_mib = node.view->memory_mib_total;
  c.model = f.model;
  c.gpus.assign(static_cast<size_t>(node.gpu_end - node.gpu_begin), kFull);
}

// The node's epoch in the cache after FillScratch (0 without a cache).
uint64_t SyncNode(Pass& pass, int n) {
  if (!pass.cache) return 0;
  ScoreCache& cache = *pass.cache;
  ScoreCache::NodeState& s = cache.nodes[static_cast<size_t>(n)];
  const std::string& id = pass.nodes[static_cast<size_t>(n)].view->id;
  if (s.epoch != 0 && s.id == id && SameView(s.free, pass.scratch_free) &&
      SameView(s.cap, pass.scratch_cap)) {
    return s.epoch;
  }
  s.id = id;
  s.free = pass.scratch_free;
  s.cap = pass.scratch_cap;
  s.epoch = ++cache.clock;
  return s.epoch;
}

double BeforeOf(Pass& pass, int n, uint64_t epoch) {
  if (pass.cache) {
    ScoreCache::NodeState& s = pass.cache->nodes[static_cast<size_t>(n)];
    if (s.before_epoch != epoch) {
      s.before = pass.scorer->Before(pass.scratch_free, pass.workload);
      s.before_epoch = epoch;
    }
    return s.before;
  }
  double& before = pass.frag_before[static_cast<size_t>(n)];
  if (std::isnan(before)) before = pass.scorer->Before(pass.scratch_free, pass.workload);
  return before;
}

// The cache's entries (by node) for the task in pass.scratch_task, or null.
std::vector<ScoreCache::Entry>* EntriesFor(Pass& pass) {
  if (!pass.cache) return nullptr;
  ScoreCache& cache = *pass.cache;
  const TaskRequest& t = pass.scratch_task;
  const auto key = std::make_tuple(t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli);
  auto it = cache.tasks.find(key);
  if (it == cache.tasks.end()) {
    if ((cache.entries.size() + 1) * cache.nodes.size() > ScoreCache::kMaxCells) {
      cache.tasks.clear();
      cache.entries.clear();
    }
    it = cache.tasks.emplace(key, cache.entries.size()).first;
    cache.entries.emplace_back(cache.nodes.size());
  }
  return &cache.entries[it->second];
}

// The entry of node n among `row` (EntriesFor), reset when its epoch moved.
ScoreCache::Entry* EntryFor(Pass& pass, std::vector<ScoreCache::Entry>* row, int n,
                            uint64_t epoch) {
  if (!row) return nullptr;
  ScoreCache::Entry& e = (*row)[static_cast<size_t>(n)];
  if (e.epoch != epoch) {
    e.epoch = epoch;
    e.share_mask = 0;
    e.has_set = false;
    e.keys.assign(pass.scratch_free.gpus.size() + 1, ScoreKey{});
  }
  return &e;
}

// The scorer's key for taking `local` (GPU indices on the node) there.
ScoreKey KeyOf(Pass& pass, std::vector<ScoreCache::Entry>* row, int n, uint64_t epoch,
               double before, const std::vector<int>& local) {
  ScoreCache::Entry* e =
      pass.scratch_free.gpus.size() <= 63 ? EntryFor(pass, row, n, epoch) : nullptr;
  const bool share = pass.scratch_task.IsFractional() && local.size() == 1;
  uint64_t set = 0;
  for (int g : local) set |= uint64_t{1} << g;
  if (e && share && (e->share_mask >> local[0] & 1)) return e->keys[static_cast<size_t>(local[0])];
  if (e && !share && e->has_set && e->set_mask == set) return e->keys.back();
  const ScoreKey k = pass.scorer->Score(pass.scratch_cap, pass.scratch_free, before,
                                        pass.scratch_task, local, pass.workload);
  if (e && share) {
    e->share_mask |= uint64_t{1} << local[0];
    e->keys[static_cast<size_t>(local[0])] = k;
  } else if (e) {
    e->has_set = true;
    e->set_mask = set;
    e->keys.back() = k;
  }
  return k;
}

// A share's fitting GPUs on node n (global indices, in order): the rule
// FitOnState applies, every GPU instead of the tightest.
std::vector<int> ShareOptions(const Pass& pass, int n, const Request& r,
                              const std::vector<char>& allowed, bool actual) {
  const NodeS& node = pass.nodes[static_cast<size_t>(n)];
  const int user = UserIndex(pass, r.user);
  std::vector<int> out;
  for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
    const GpuS& gpu = pass.gpus[static_cast<size_t>(g)];
    const int32_t m = actual ? gpu.free_milli : gpu.AvailMilli();
    const int64_t mem = actual ? gpu.free_mem : gpu.AvailMem();
    const bool mps_ok = !gpu.mps || gpu.mps_user < 0 || gpu.mps_user == user;
    if (allowed[static_cast<size_t>(gpu.shape)] && m >= r.gpu_milli && mem >= r.gpu_memory_mib &&
        mps_ok) {
      out.push_back(g);
    }
  }
  return out;
}

}  // namespace

std::optional<Choice> ChooseAmongAll(Pass& pass, const Request& r, const std::vector<char>& allowed,
                                     bool may_use_reserved) {
  // Feasible nodes in node order (the index's order plays no part).
  ++pass.stamp;
  for (int n : pass.exclude) pass.seen[static_cast<size_t>(n)] = pass.stamp;
  std::vector<Choice> feasible;
  auto offer = [&](int n, bool actual) {
    if (pass.seen[static_cast<size_t>(n)] == pass.stamp) return;
    const NodeS& node = pass.nodes[static_cast<size_t>(n)];
    if (auto picked =
            FitOnState(pass, node, pass.gpus.data() + node.gpu_begin, r, allowed, actual)) {
      pass.seen[static_cast<size_t>(n)] = pass.stamp;
      feasible.push_back({n, std::move(*picked), actual});
    }
  };
  const bool first_only = !pass.scorer->Scores() && !pass.scorer->RandomChoice();
  for (int n = 0; n < static_cast<int>(pass.nodes.size()); ++n) {
    offer(n, false);
    if (first_only && !feasible.empty()) break;
  }
  if (may_use_reserved) {
    for (int n : pass.reserved_nodes) offer(n, true);
  }
  if (feasible.empty()) return std::nullopt;
  const bool share = r.gpu_milli > 0;
  if (pass.scorer->RandomChoice()) {
    Choice c = feasible[static_cast<size_t>(pass.rng.Uniform(feasible.size()))];
    if (share) {
      const std::vector<int> opts = ShareOptions(pass, c.node, r, allowed, c.actual);
      c.gpus = {opts[static_cast<size_t>(pass.rng.Uniform(opts.size()))]};
    }
    return c;
  }
  if (!pass.scorer->Scores()) {
    // Every candidate ties by design (first-fit): the first node, the first
    // fitting GPU, as the scoring below would choose, unscored.
    Choice c = feasible.front();
    if (share) c.gpus = {ShareOptions(pass, c.node, r, allowed, c.actual).front()};
    return c;
  }
  TaskRequest& t = pass.scratch_task;
  t.cpu_milli = r.cpu_milli;
  t.memory_mib = r.memory_mib;
  t.num_gpu = r.gpus > 0 ? r.gpus : (share ? 1 : 0);
  t.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
  if (pass.cache && pass.cache->nodes.size() != pass.nodes.size()) {
    *pass.cache = ScoreCache{};
    pass.cache->nodes.resize(pass.nodes.size());
  }
  std::vector<ScoreCache::Entry>* row = EntriesFor(pass);
  const bool by_left = pass.config.tie_break == TieBreak::kLeastGpuLeft && pass.scorer->Scores();
  std::optional<Choice> best;
  std::tuple<int64_t, int64_t, int64_t, int> best_rank;
  std::vector<int> local;
  for (Choice& c : feasible) {
    FillScratch(pass, c.node);
    const uint64_t epoch = SyncNode(pass, c.node);
    const double before = BeforeOf(pass, c.node, epoch);
    const int begin = pass.nodes[static_cast<size_t>(c.node)].gpu_begin;
    // The node's best choice of GPUs: the first best key; equal keys go to
    // the tighter GPU for scorers that pack (as MakeScoredPolicy).
    std::vector<std::vector<int>> options;
    if (share) {
      for (int g : ShareOptions(pass, c.node, r, allowed, c.actual)) options.push_back({g});
    } else {
      options.push_back(c.gpus);
    }
    size_t pick = 0;
    ScoreKey node_key;
    for (size_t k = 0; k < options.size(); ++k) {
      local.clear();
      for (int g : options[k]) local.push_back(g - begin);
      const ScoreKey key = KeyOf(pass, row, c.node, epoch, before, local);
      const bool tighter =
          pass.scorer->TightestGpuFirst() && share &&
          pass.scratch_free.gpus[static_cast<size_t>(options[k][0] - begin)] <
              pass.scratch_free.gpus[static_cast<size_t>(options[pick][0] - begin)];
      if (k == 0 || key > node_key || (key == node_key && tighter)) {
        pick = k;
        node_key = key;
      }
    }
    int64_t left = 0;
    if (by_left) {
      for (int m : pass.scratch_free.gpus) left += m;
      left -= r.gpus > 0 ? int64_t{r.gpus} * kFull : r.gpu_milli;
    }
    const auto rank = std::make_tuple(-node_key.score, -node_key.tie, left, c.node);
    if (!best || rank < best_rank) {
      best_rank = rank;
      c.gpus = options[pick];
      best = std::move(c);
    }
  }
  return best;
}

}  // namespace detail

RunContext::RunContext(Rng& r) : rng(r) {}
RunContext::~RunContext() = default;

}  // namespace gpupool::sched
