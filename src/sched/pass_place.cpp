// Placing one job: shape tiers, fit, candidates, scoring; gangs all or nothing.
#include "sched/pass.h"

#include <algorithm>
#include <cmath>

namespace gpupool::sched::detail {

bool PreferenceActive(const Pass& pass, const PendingJob& job) {
  return !job.request.preferred_models.empty() &&
         pass.snap.now_ms < job.submit_ms + job.request.prefer_wait_ms;
}

// Shape tiers for a job: its preferred models while it waits for them;
// after the wait, preferred first, then the rest fastest first.
Tiers TiersFor(const Pass& pass, const PendingJob& job) {
  const Request& r = job.request;
  std::vector<char> allowed(pass.shapes.size(), 0), preferred(pass.shapes.size(), 0);
  for (size_t s = 0; s < pass.shapes.size(); ++s) {
    const Shape& sh = pass.shapes[s];
    allowed[s] = ModelOk(sh.model, r.gpu_models) && sh.memory_mib >= r.gpu_memory_mib &&
                 sh.cc >= r.min_compute_capability && MigOk(sh.mig_slices, sh.mig_gb, r);
    preferred[s] =
        allowed[s] && !r.preferred_models.empty() && ModelOk(sh.model, r.preferred_models);
  }
  Tiers t;
  if (r.preferred_models.empty()) {
    t.allowed.push_back(std::move(allowed));
    return t;
  }
  t.allowed.push_back(preferred);
  if (PreferenceActive(pass, job)) return t;
  std::vector<double> speeds;
  for (size_t s = 0; s < pass.shapes.size(); ++s) {
    if (allowed[s] && !preferred[s]) speeds.push_back(pass.shapes[s].speed);
  }
  std::sort(speeds.rbegin(), speeds.rend());
  speeds.erase(std::unique(speeds.begin(), speeds.end()), speeds.end());
  for (double sp : speeds) {
    std::vector<char> tier(pass.shapes.size(), 0);
    for (size_t s = 0; s < pass.shapes.size(); ++s) {
      tier[s] = allowed[s] && !preferred[s] && pass.shapes[s].speed == sp;
    }
    t.allowed.push_back(std::move(tier));
  }
  // Last, any allowed model at once: a gang may span speed tiers.
  if (t.allowed.size() > 1 && job.request.nodes > 1) t.allowed.push_back(std::move(allowed));
  return t;
}

std::optional<std::vector<int>> FitOnState(const Pass& pass, const NodeS& node, const GpuS* gpus,
                                           const Request& r, const std::vector<char>& allowed,
                                           bool actual) {
  if (!node.view->ready || Excluded(r, node.view->id) || !LabelsOk(*node.view, r.node_labels)) {
    return std::nullopt;
  }
  const int64_t cpu = node.cpu_free - (actual ? 0 : node.phantom_cpu);
  const int64_t mem = node.mem_free - (actual ? 0 : node.phantom_mem);
  if (cpu < r.cpu_milli || mem < r.memory_mib) return std::nullopt;
  std::vector<int> picked;
  auto milli = [&](const GpuS& g) { return actual ? g.free_milli : g.AvailMilli(); };
  // An MPS GPU another user's shares hold is not this share's.
  const int user = r.gpu_milli > 0 ? UserIndex(pass, r.user) : -1;
  auto mps_ok = [&](const GpuS& g) { return !g.mps || g.mps_user < 0 || g.mps_user == user; };
  auto gmem = [&](const GpuS& g) { return actual ? g.free_mem : g.AvailMem(); };
  if (r.gpus > 0) {
    const bool smallest = r.mig_slices > 0;  // one MIG instance: the smallest that fits
    for (int g = node.gpu_begin;
         g < node.gpu_end && (smallest || static_cast<int>(picked.size()) < r.gpus); ++g) {
      const GpuS& gpu = gpus[g - node.gpu_begin];
      if (!allowed[static_cast<size_t>(gpu.shape)] || milli(gpu) != kFull) continue;
      if (smallest && !picked.empty()) {
        const Shape& a = pass.shapes[static_cast<size_t>(gpu.shape)];
        const Shape& b = pass.shapes[static_cast<size_t>(gpus[picked[0] - node.gpu_begin].shape)];
        if (!MigSmaller(a.mig_slices, a.mig_gb, a.memory_mib, b.mig_slices, b.mig_gb,
                        b.memory_mib)) {
          continue;
        }
        picked.clear();
      }
      picked.push_back(g);
    }
    if (static_cast<int>(picked.size()) < r.gpus) return std::nullopt;
  } else if (r.gpu_milli > 0) {
    int best = -1;
    int32_t best_milli = kFull + 1;
    for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
      const GpuS& gpu = gpus[g - node.gpu_begin];
      const int32_t m = milli(gpu);
      if (allowed[static_cast<size_t>(gpu.shape)] && m >= r.gpu_milli &&
          gmem(gpu) >= r.gpu_memory_mib && m < best_milli && mps_ok(gpu)) {
        best = g;
        best_milli = m;
      }
    }
    if (best < 0) return std::nullopt;
    picked.push_back(best);
  }
  return picked;
}

// GPUs for `r` on node n under `allowed`, using avail (actual = false) or
// everything free (actual = true); nullopt when it does not fit.
std::vector<char> AllowedShapes(const Pass& pass, const PendingJob& job) {
  const Tiers tiers = TiersFor(pass, job);
  std::vector<char> allowed(pass.shapes.size(), 0);
  for (const auto& tier : tiers.allowed) {
    for (size_t s = 0; s < pass.shapes.size(); ++s) allowed[s] |= tier[s];
  }
  return allowed;
}

namespace {

std::optional<std::vector<int>> FitOn(const Pass& pass, int n, const Request& r,
                                      const std::vector<char>& allowed, bool actual) {
  const NodeS& node = pass.nodes[static_cast<size_t>(n)];
  return FitOnState(pass, node, pass.gpus.data() + node.gpu_begin, r, allowed, actual);
}

}  // namespace

// Candidate nodes for one rank of `r`, best first by the index's order.
void Candidates(Pass& pass, const Request& r, const std::vector<char>& allowed,
                bool may_use_reserved, std::vector<Choice>* out) {
  ++pass.stamp;
  for (int n : pass.exclude) pass.seen[static_cast<size_t>(n)] = pass.stamp;
  const size_t cap = static_cast<size_t>(std::max(pass.config.candidates, 1));
  auto offer = [&](int n, bool actual) {
    if (pass.seen[static_cast<size_t>(n)] == pass.stamp) return false;
    if (auto picked = FitOn(pass, n, r, allowed, actual)) {
      pass.seen[static_cast<size_t>(n)] = pass.stamp;
      out->push_back({n, std::move(*picked), actual});
      return true;
    }
    return false;
  };
  // Nodes by fully free GPUs of shape s, from `from` up: the tightest first.
  auto walk_whole = [&](size_t s, int from, size_t& found) {
    const auto& buckets = pass.whole[s];
    for (size_t c = static_cast<size_t>(from); c < buckets.size() && found < cap; ++c) {
      for (int n : buckets[c]) {
        if (found >= cap) break;
        if (offer(n, false)) ++found;
      }
    }
  };
  if (r.gpus > 0) {
    for (size_t s = 0; s < pass.shapes.size(); ++s) {
      size_t found = 0;
      if (allowed[s]) walk_whole(s, r.gpus, found);
    }
  } else if (r.gpu_milli > 0) {
    // A share: GPUs already shared with the least sufficient room first,
    // then whole free GPUs on the nodes with the fewest.
    for (size_t s = 0; s < pass.shapes.size(); ++s) {
      if (!allowed[s]) continue;
      size_t found = 0;
      for (auto it = pass.partial[s].lower_bound({r.gpu_milli, -1, -1});
           it != pass.partial[s].end() && found < cap; ++it) {
        if (offer(std::get<1>(*it), false)) ++found;
      }
      walk_whole(s, 1, found);
    }
  } else {
    // CPU-only work: nodes without GPUs first, then the rest, in order.
    size_t found = 0;
    for (int round = 0; round < 2 && found < cap; ++round) {
      for (int n = 0; n < static_cast<int>(pass.nodes.size()) && found < cap; ++n) {
        const bool gpu_less = pass.nodes[static_cast<size_t>(n)].gpu_begin ==
                              pass.nodes[static_cast<size_t>(n)].gpu_end;
        if (gpu_less == (round == 0) && offer(n, false)) ++found;
      }
    }
  }
  for (int n : pass.mixed) offer(n, false);
  if (may_use_reserved) {
    for (int n : pass.reserved_nodes) offer(n, true);
  }
}

namespace {

// The candidate's rank by the placement scorer (policies.h), lower first:
// the scorer's key, then (TieBreak::kLeastGpuLeft) the GPU milli left,
// then node order (by id). TieBreak::kRandom is not drawn here: it ends as
// kLowestIndex (Decide draws only for the `random` placement). The node as the scorer sees it
// is what a job may use now (avail: free less reservations).
std::tuple<int64_t, int64_t, int64_t, int> Score(Pass& pass, const Choice& c, const Request& r) {
  const NodeS& node = pass.nodes[static_cast<size_t>(c.node)];
  pass.scratch_free.cpu_milli = node.cpu_free - node.phantom_cpu;
  pass.scratch_free.memory_mib = node.mem_free - node.phantom_mem;
  pass.scratch_free.gpus.clear();
  for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
    pass.scratch_free.gpus.push_back(std::max(pass.gpus[static_cast<size_t>(g)].AvailMilli(), 0));
  }
  pass.scratch_cap.cpu_milli = node.view->cpu_milli_total;
  pass.scratch_cap.memory_mib = node.view->memory_mib_total;
  pass.scratch_cap.gpus.assign(static_cast<size_t>(node.gpu_end - node.gpu_begin), kFull);
  pass.scratch_task.cpu_milli = r.cpu_milli;
  pass.scratch_task.memory_mib = r.memory_mib;
  pass.scratch_task.num_gpu = r.gpus > 0 ? r.gpus : (r.gpu_milli > 0 ? 1 : 0);
  pass.scratch_task.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
  pass.scratch_gpus.clear();
  for (int g : c.gpus) pass.scratch_gpus.push_back(g - node.gpu_begin);
  double& before = pass.frag_before[static_cast<size_t>(c.node)];
  if (std::isnan(before)) before = pass.scorer->Before(pass.scratch_free, pass.workload);
  const ScoreKey k = pass.scorer->Score(pass.scratch_cap, pass.scratch_free, before,
                                        pass.scratch_task, pass.scratch_gpus, pass.workload);
  int64_t left = 0;
  if (pass.config.tie_break == TieBreak::kLeastGpuLeft && pass.scorer->Scores()) {
    for (int m : pass.scratch_free.gpus) left += m;
    for (int g : pass.scratch_gpus) {
      const int m = pass.scratch_free.gpus[static_cast<size_t>(g)];
      left -= m - std::max(m - (r.gpus > 0 ? kFull : r.gpu_milli), 0);
    }
  }
  return {-k.score, -k.tie, left, c.node};
}

// The best of `cands` (at least one): the lowest Score, or for a scorer
// that draws (`random`), one of the best drawn with the seeded generator.
size_t Best(Pass& pass, const std::vector<Choice>& cands, const Request& r) {
  if (cands.size() == 1) return 0;
  if (pass.scorer->RandomChoice()) return static_cast<size_t>(pass.rng.Uniform(cands.size()));
  size_t best = 0;
  auto best_score = Score(pass, cands[0], r);
  for (size_t i = 1; i < cands.size(); ++i) {
    auto s = Score(pass, cands[i], r);
    if (s < best_score) {
      best_score = s;
      best = i;
    }
  }
  return best;
}

bool MayUseReserved(const Pass& pass, const PendingJob& job) {
  return !pass.reserved_nodes.empty() && job.runtime_limit_ms > 0 &&
         pass.snap.now_ms + job.runtime_limit_ms <= pass.earliest_reservation_ms;
}

}  // namespace

bool TryPlace(Pass& pass, const PendingJob& job) {
  const Request& r = job.request;
  const bool may_use_reserved = MayUseReserved(pass, job);
  const size_t id = RequestId(
      pass.placing_ids, r,
      static_cast<uint8_t>((may_use_reserved ? 1 : 0) | (PreferenceActive(pass, job) ? 2 : 0)));
  if (id < pass.failed.size() && pass.failed[id]) return false;
  if (pass.tiers.size() <= id) pass.tiers.resize(id + 1);
  if (!pass.tiers[id]) pass.tiers[id] = TiersFor(pass, job);
  const Tiers& tiers = *pass.tiers[id];
  for (const std::vector<char>& allowed : tiers.allowed) {
    std::vector<Saved> saved;
    Placement p;
    p.job_id = job.job_id;
    p.backfilled = !pass.reserved_nodes.empty();
    pass.exclude.clear();
    for (int rank = 0; rank < r.nodes; ++rank) {
      std::vector<Choice> cands;
      if (pass.config.score_all_nodes) {
        std::optional<Choice> all = ChooseAmongAll(pass, r, allowed, may_use_reserved);
        if (!all) break;
        cands.push_back(std::move(*all));
      } else {
        Candidates(pass, r, allowed, may_use_reserved, &cands);
        if (cands.empty()) break;
      }
      const Choice& c = cands[Best(pass, cands, r)];
      saved.push_back(Save(pass, c.node));
      Take(pass, c.node, r, c.gpus, c.actual);
      pass.exclude.push_back(c.node);
      pass.exclude_order = pass.exclude;
      NodeAssignment a;
      a.node_id = pass.nodes[static_cast<size_t>(c.node)].view->id;
      for (int g : c.gpus) {
        a.gpu_uuids.push_back(
            pass.nodes[static_cast<size_t>(c.node)]
                .view
                ->gpus[static_cast<size_t>(g - pass.nodes[static_cast<size_t>(c.node)].gpu_begin)]
                .uuid);
      }
      a.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
      a.gpu_memory_mib = r.gpus > 0 ? 0 : r.gpu_memory_mib;
      p.nodes.push_back(std::move(a));
    }
    pass.exclude.clear();
    if (static_cast<int>(p.nodes.size()) == r.nodes) {
      if (job.runtime_limit_ms > 0) {
        for (size_t k = 0; k < p.nodes.size(); ++k) {
          const NodeAssignment& a = p.nodes[k];
          pass.placed_holdings.push_back(Holding{a.node_id, a.gpu_uuids, a.gpu_milli,
                                                 a.gpu_memory_mib, r.cpu_milli, r.memory_mib});
          pass.events.push_back({pass.snap.now_ms + job.runtime_limit_ms, job.job_id,
                                 pass.exclude_order[k], &pass.placed_holdings.back()});
        }
      }
      pass.allocated[GroupName(job.group)] += r.GpuMilli();
      pass.out.placements.push_back(std::move(p));
      return true;
    }
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) Restore(pass, *it);
  }
  if (pass.failed.size() <= id) pass.failed.resize(id + 1, 0);
  pass.failed[id] = 1;
  return false;
}

}  // namespace gpupool::sched::detail
