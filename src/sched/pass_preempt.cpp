// Preemption (pass.h; the rules are in scheduler.h).
#include "sched/pass.h"

#include <algorithm>

namespace gpupool::sched::detail {

namespace {

constexpr int kMaxPreemptorsPerPass = 16;

int64_t LostWork(const Pass& pass, const RunningJob& v) {
  return pass.snap.now_ms - std::max(v.last_checkpoint_ms, v.started_ms);
}

int64_t HeldOn(const RunningJob& v, const NodeS& node) {
  int64_t milli = 0;
  for (const Holding& h : v.holdings) {
    if (h.node_id == node.view->id) milli += h.gpu_milli * static_cast<int64_t>(h.gpu_uuids.size());
  }
  return milli;
}

// Whether running job v on `node` may make room for `job`.
bool VictimOk(const Pass& pass, const RunningJob& v, const PendingJob& job, const NodeS& node,
              bool owner_node, bool interactive) {
  if (!v.preemptible || v.priority == PriorityClass::kInteractive) return false;
  if (pass.victims.count(v.attempt_id) > 0) return false;
  if (v.last_preempted_ms &&
      pass.snap.now_ms - *v.last_preempted_ms < pass.config.anti_thrash_window_ms) {
    return false;
  }
  // A group's own interactive session may displace its own batch work.
  const std::string g = GroupName(v.group);
  if (g == GroupName(job.group)) return interactive;
  // A group's work on a machine it owns is never preempted by others.
  if (!node.view->owner_group.empty() && node.view->owner_group == g) return false;
  if (owner_node) return true;
  // Borrowed work only: its group stays at or above its guarantee without it.
  auto gs = pass.group_state.find(g);
  const int64_t guaranteed = gs == pass.group_state.end() ? 0 : gs->second.guaranteed_milli;
  auto a = pass.allocated.find(g);
  const int64_t alloc = a == pass.allocated.end() ? 0 : a->second;
  auto t = pass.taken.find(g);
  const int64_t taken = t == pass.taken.end() ? 0 : t->second;
  return alloc - taken > guaranteed;
}

// The GPUs `r` would get on node n once the running jobs `victims` have
// left; nullopt when it still does not fit.
std::optional<std::vector<int>> FitsWithout(const Pass& pass, int n,
                                            const std::vector<size_t>& victims, const Request& r,
                                            const std::vector<char>& allowed) {
  NodeS node = pass.nodes[static_cast<size_t>(n)];
  std::vector<GpuS> gpus(pass.gpus.begin() + node.gpu_begin, pass.gpus.begin() + node.gpu_end);
  for (size_t i : victims) {
    for (const Holding& h : pass.snap.running[i].holdings) {
      if (h.node_id != node.view->id) continue;
      node.cpu_free += h.cpu_milli;
      node.mem_free += h.memory_mib;
      for (const std::string& uuid : h.gpu_uuids) {
        const int g = GpuIndex(pass, n, uuid) - node.gpu_begin;
        GpuS& gpu = gpus[static_cast<size_t>(g)];
        const int64_t cap = node.view->gpus[static_cast<size_t>(g)].memory_mib;
        gpu.free_milli = std::min(kFull, gpu.free_milli + h.gpu_milli);
        gpu.free_mem =
            std::min(cap, gpu.free_mem + (h.gpu_milli >= kFull ? cap : h.gpu_memory_mib));
        if (gpu.free_milli == kFull) gpu.mps_user = -1;
      }
    }
  }
  return FitOnState(pass, node, gpus.data(), r, allowed, false);
}

}  // namespace

bool TryPreempt(Pass& pass, const PendingJob& job, const QueueEntry& entry, WaitReason* reason) {
  if (!pass.config.preemption || job.request.nodes != 1 || pass.preemptors >= kMaxPreemptorsPerPass)
    return false;
  // Opportunistic work preempts only as its owner, on its own machines.
  const bool opportunistic = job.priority == PriorityClass::kOpportunistic;
  const std::string group = GroupName(job.group);
  auto gs = pass.group_state.find(group);
  const bool in_quota =
      gs != pass.group_state.end() && gs->second.guaranteed_milli > 0 && !entry.borrowing;
  const bool interactive = job.priority == PriorityClass::kInteractive;
  const std::vector<char> allowed = AllowedShapes(pass, job);
  struct Option {
    int node = -1;
    std::vector<size_t> victims;
    int64_t lost = 0;
    PreemptReason reason = PreemptReason::kGuarantee;
  };
  std::optional<Option> best;
  for (const auto& [n, runs] : pass.running_on_node) {
    const NodeS& node = pass.nodes[static_cast<size_t>(n)];
    const bool owner_node = !node.view->owner_group.empty() && node.view->owner_group == group;
    if (!owner_node && (opportunistic || (!interactive && !in_quota))) continue;
    if (!node.view->ready || Excluded(job.request, node.view->id) ||
        !LabelsOk(*node.view, job.request.node_labels)) {
      continue;
    }
    std::vector<size_t> cands;
    for (size_t i : runs) {
      if (VictimOk(pass, pass.snap.running[i], job, node, owner_node, interactive))
        cands.push_back(i);
    }
    if (cands.empty()) continue;
    std::sort(cands.begin(), cands.end(), [&](size_t a, size_t b) {
      const RunningJob& x = pass.snap.running[a];
      const RunningJob& y = pass.snap.running[b];
      return std::make_tuple(LostWork(pass, x), -HeldOn(x, node), x.attempt_id) <
             std::make_tuple(LostWork(pass, y), -HeldOn(y, node), y.attempt_id);
    });
    std::vector<size_t> chosen;
    bool ok = false;
    for (size_t i : cands) {
      chosen.push_back(i);
      if (FitsWithout(pass, n, chosen, job.request, allowed)) {
        ok = true;
        break;
      }
    }
    if (!ok) continue;
    // Reprieve, most lost work first, while the rest still make room.
    for (size_t k = chosen.size(); k-- > 0;) {
      std::vector<size_t> rest = chosen;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(k));
      if (!rest.empty() && FitsWithout(pass, n, rest, job.request, allowed)) chosen = rest;
    }
    Option o;
    o.node = n;
    o.victims = chosen;
    for (size_t i : chosen) o.lost += LostWork(pass, pass.snap.running[i]);
    // An owner's right is used only when it takes other groups' work.
    const bool takes_others = std::any_of(chosen.begin(), chosen.end(), [&](size_t i) {
      return GroupName(pass.snap.running[i].group) != group;
    });
    o.reason = owner_node && takes_others
                   ? PreemptReason::kOwner
                   : (interactive ? PreemptReason::kInteractive : PreemptReason::kGuarantee);
    if (!best || std::make_tuple(o.lost, o.victims.size(), o.node) <
                     std::make_tuple(best->lost, best->victims.size(), best->node)) {
      best = std::move(o);
    }
  }
  ++pass.preemptors;
  if (!best) return false;
  const NodeS& node = pass.nodes[static_cast<size_t>(best->node)];
  for (size_t i : best->victims) {
    const RunningJob& v = pass.snap.running[i];
    pass.victims.insert(v.attempt_id);
    int64_t milli = 0;
    for (const Holding& h : v.holdings)
      milli += h.gpu_milli * static_cast<int64_t>(h.gpu_uuids.size());
    pass.taken[GroupName(v.group)] += milli;
    Preemption p;
    p.attempt_id = v.attempt_id;
    p.job_id = v.job_id;
    p.for_job_id = job.job_id;
    p.reason = best->reason;
    p.lost_work_ms = LostWork(pass, v);
    p.message = "preempted for " +
                std::string(best->reason == PreemptReason::kInteractive
                                ? "interactive job "
                                : (best->reason == PreemptReason::kOwner ? "the node owner's job "
                                                                         : "job ")) +
                std::to_string(job.job_id) +
                (best->reason == PreemptReason::kGuarantee
                     ? " of group " + group + " reclaiming its guarantee"
                     : "") +
                " (checkpoint and requeue)";
    pass.out.preemptions.push_back(std::move(p));
  }
  // Hold what is free there now, so later jobs of this pass leave it alone.
  HoldFor(pass, best->node, job.request,
          *FitsWithout(pass, best->node, best->victims, job.request, allowed), pass.snap.now_ms);
  reason->kind = WaitKind::kPreempting;
  reason->count = static_cast<int64_t>(best->victims.size());
  reason->node = node.view->name;
  reason->preferred_models.clear();
  reason->prefer_left_ms = 0;
  return true;
}

}  // namespace gpupool::sched::detail
