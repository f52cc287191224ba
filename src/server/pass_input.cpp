#include "server/pass_input.h"

#include "accounting/records.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "server/pool_rules.h"

namespace gpupool::server {
namespace {

static_assert(static_cast<int>(JobPriority::kInteractive) ==
              static_cast<int>(sched::PriorityClass::kInteractive));
static_assert(static_cast<int>(JobPriority::kNormal) ==
              static_cast<int>(sched::PriorityClass::kNormal));
static_assert(static_cast<int>(JobPriority::kOpportunistic) ==
              static_cast<int>(sched::PriorityClass::kOpportunistic));

// The scheduler's class of a job priority (the same three, in the same order).
sched::PriorityClass ClassOf(JobPriority p) { return static_cast<sched::PriorityClass>(p); }

// The nodes offered to the scheduler, and those whose providers admit only
// some jobs.
struct OfferedNodes {
  std::map<std::string, size_t> node_at;  // node id -> index in snapshot.nodes
  // Ready nodes whose lending admits only some jobs (users, groups, runtime,
  // whole GPUs only); every pending job is checked against these alone.
  std::vector<const Node*> restricted;
  // Ready nodes whose policy refuses `network: host`: checked only for the
  // jobs that ask for it.
  std::vector<const Node*> no_host_network;
};

OfferedNodes AddNodes(const PoolView& view, const PassContext& ctx, sched::Snapshot& snap) {
  OfferedNodes out;
  for (const Node& n : view.nodes) {
    const NodeLending* lending = n.lending ? &*n.lending : nullptr;
    sched::NodeView v;
    v.id = n.id;
    v.name = n.name;
    v.ready = n.state == NodeState::kReady && ctx.connected(n.id) &&
              (lending == nullptr || lending->mode == "lending");
    v.owner_group = n.owner_group;
    v.labels = n.labels;
    for (const GpuInfo& g : n.gpus) {
      sched::GpuView gv;
      gv.uuid = g.uuid;
      gv.model = g.name;
      gv.memory_mib = std::max<int64_t>(g.memory_mib, 0);
      gv.compute_capability = g.cc_major * 10 + g.cc_minor;
      gv.free_milli = 1000;
      if (g.IsMig()) {  // a MIG instance: only MIG requests that it meets (sched/mig.h)
        std::optional<Resources::Mig> profile = MigProfileOf(g.mig_profile);
        if (!profile || g.mig_slices <= 0) continue;  // never from a valid hello
        gv.mig_slices = g.mig_slices;
        gv.mig_memory_gb = profile->memory_gb;
      }
      if (lending != nullptr) {
        auto lent = lending->gpus.find(g.uuid);
        if (lent == lending->gpus.end()) continue;  // not lent now: not offered
        // Only part of its memory is lent, and the agent then takes shares
        // only (LendingAdmits). The scheduler knows no such GPU, so it is
        // offered as a GPU of the lent memory that is never wholly free
        // (999 milli): whole-GPU requests need 1000 and pass it by, shares
        // fit within the memory lent.
        if (lent->second < gv.memory_mib) {
          gv.memory_mib = std::max<int64_t>(lent->second, 0);
          gv.free_milli = 999;
        }
      }
      gv.free_memory_mib = gv.memory_mib;
      // One MPS server serves one user at a time: the scheduler co-locates
      // one user's shares only (mps_user is filled from the holdings below).
      gv.mps = lending != nullptr && lending->sharing == GpuSharing::kMps;
      v.gpus.push_back(std::move(gv));
    }
    if (v.ready && lending != nullptr &&
        (lending->sharing == GpuSharing::kNone || !lending->allow_users.empty() ||
         !lending->deny_users.empty() || !lending->allow_groups.empty() ||
         !lending->deny_groups.empty() || lending->max_runtime_ms > 0)) {
      out.restricted.push_back(&n);
    } else if (v.ready && lending != nullptr && !lending->host_network) {
      out.no_host_network.push_back(&n);
    }
    v.cpu_milli_total = v.cpu_milli_free = n.cpu_milli;
    v.memory_mib_total = v.memory_mib_free = n.memory_mib;
    out.node_at[n.id] = snap.nodes.size();
    snap.nodes.push_back(std::move(v));
  }

  return out;
}

// Takes what the live attempts hold off their nodes and lists the current
// ones as running.
void AddRunning(const PoolView& view, const OfferedNodes& nodes, sched::Snapshot& snap) {
  const std::map<std::string, size_t>& node_at = nodes.node_at;
  std::map<int64_t, const Job*> live_by_id;
  for (const Job& j : view.live_jobs) live_by_id[j.id] = &j;
  for (const Attempt& a : view.live_attempts) {
    auto j = live_by_id.find(a.job_id);
    const Job* job = j == live_by_id.end() ? nullptr : j->second;
    std::vector<sched::Holding> holdings;
    for (const NodeHolding& where : HoldingsOf(a)) {
      auto n = node_at.find(where.node_id);
      if (n == node_at.end()) continue;  // a node the store no longer has
      sched::NodeView& node = snap.nodes[n->second];
      sched::Holding h;
      h.node_id = where.node_id;
      h.gpu_milli = MilliPerGpu(a);
      bool share = h.gpu_milli < 1000;
      h.gpu_memory_mib = share ? a.gpu_memory_mib : 0;
      // The amounts are clamped so that a node that came back with fewer or
      // smaller GPUs never makes the snapshot inconsistent.
      for (const std::string& uuid : where.gpu_uuids) {
        auto g = std::find_if(node.gpus.begin(), node.gpus.end(),
                              [&](const sched::GpuView& x) { return x.uuid == uuid; });
        if (g == node.gpus.end()) continue;
        g->free_milli = std::max(0, g->free_milli - h.gpu_milli);
        g->free_memory_mib =
            share ? std::max<int64_t>(0, g->free_memory_mib - h.gpu_memory_mib) : 0;
        if (g->mps && share && job != nullptr) g->mps_user = job->owner;
        h.gpu_uuids.push_back(uuid);
      }
      if (job != nullptr) {
        h.cpu_milli = job->spec.resources.cpu_milli;
        h.memory_mib = job->spec.resources.memory_mib;
        node.cpu_milli_free = std::max<int64_t>(0, node.cpu_milli_free - h.cpu_milli);
        node.memory_mib_free = std::max<int64_t>(0, node.memory_mib_free - h.memory_mib);
      }
      holdings.push_back(std::move(h));
    }
    if (holdings.empty()) continue;
    if (job == nullptr || job->current_attempt != a.id) continue;  // stale: holds, never runs
    sched::RunningJob r;
    r.job_id = job->id;
    r.attempt_id = a.id;
    r.group = job->spec.group;
    r.priority = ClassOf(job->spec.priority);
    r.holdings = std::move(holdings);
    r.started_ms = a.started_ms > 0 ? a.started_ms : a.created_ms;
    // The work at stake in a preemption is what the attempt did since its
    // newest checkpoint (AddCheckpoint records it); none yet: since its start.
    r.last_checkpoint_ms = a.last_checkpoint_ms;
    // An attempt already ordered to stop is leaving: it is not preempted twice.
    r.preemptible = job->spec.preemptible() && !IsStopping(a.state);
    r.last_preempted_ms = job->last_preempted_ms;
    r.expected_end_ms = job->spec.max_runtime_ms > 0 ? r.started_ms + job->spec.max_runtime_ms : 0;
    snap.running.push_back(std::move(r));
  }
}

// Excludes from `q` the nodes job `j` must avoid: their provider's policy
// refuses it, or they refused its start lately. Returns why, for people
// ("" when none is excluded).
std::string ExcludeNodes(const Job& j, sched::Request& q, const PoolView& view,
                         const OfferedNodes& nodes,
                         const std::map<int64_t, std::map<std::string, int64_t>>& refused,
                         int64_t now) {
  std::vector<std::pair<std::string, std::string>> why;  // node name, reason
  const bool share = q.gpus == 0 && q.gpu_milli > 0;
  LendingRequest who;  // no GPUs: who asks, for how long, and whether a share
  who.user = j.owner;
  who.group = j.spec.group;
  who.max_runtime_ms = j.spec.max_runtime_ms;
  who.gpu_milli = share ? q.gpu_milli : 1000;
  who.host_network = j.spec.network == NetworkMode::kHost;
  auto check = [&](const Node* n) {
    Status admits = LendingAdmits(*n->lending, who, {});
    if (admits.ok()) return;
    q.excluded_nodes.push_back(n->id);
    why.emplace_back(n->name, admits.message());
  };
  for (const Node* n : nodes.restricted) check(n);
  if (who.host_network) {
    for (const Node* n : nodes.no_host_network) check(n);
  }
  if (auto r = refused.find(j.id); r != refused.end()) {
    for (const auto& [node_id, until] : r->second) {
      if (until <= now) continue;
      q.excluded_nodes.push_back(node_id);
      auto n = std::find_if(view.nodes.begin(), view.nodes.end(),
                            [&](const Node& x) { return x.id == node_id; });
      why.emplace_back(n == view.nodes.end() ? node_id : n->name, "it refused the job lately");
    }
  }
  if (why.empty()) return "";
  std::sort(q.excluded_nodes.begin(), q.excluded_nodes.end());
  q.excluded_nodes.erase(std::unique(q.excluded_nodes.begin(), q.excluded_nodes.end()),
                         q.excluded_nodes.end());
  std::string text = "not placed on ";
  for (size_t i = 0; i < why.size() && i < 3; ++i) {
    text += (i == 0 ? "" : ", ") + why[i].first + " (" + why[i].second + ")";
  }
  if (why.size() > 3) text += " and " + std::to_string(why.size() - 3) + " more nodes";
  return text;
}

}  // namespace

Result<PoolView> ReadPoolView(Tx& tx, bool with_pending) {
  PoolView v;
  if (with_pending) {
    JobQuery pending_q;
    pending_q.states = {JobState::kPending};
    pending_q.limit = 1'000'000;
    GP_ASSIGN_OR_RETURN(std::vector<Job> pending, tx.ListJobs(pending_q));
    v.pending.reserve(pending.size());
    for (Job& j : pending) v.pending.push_back(std::make_shared<const Job>(std::move(j)));
  }
  JobQuery live_q;
  live_q.states.assign(std::begin(kLiveJobStates), std::end(kLiveJobStates));
  live_q.limit = 1'000'000;
  GP_ASSIGN_OR_RETURN(v.live_jobs, tx.ListJobs(live_q));
  AttemptQuery aq;
  aq.live_only = true;
  GP_ASSIGN_OR_RETURN(v.live_attempts, tx.ListAttempts(aq));
  GP_ASSIGN_OR_RETURN(v.nodes, tx.ListNodes());
  GP_ASSIGN_OR_RETURN(v.usage, tx.ListGroupUsage());
  return v;
}

std::map<std::string, sched::DecayedUsage> UsageNow(const PoolView& view, const PassContext& ctx) {
  const int64_t now = ctx.now_ms, half_life = ctx.half_life_ms;
  std::map<std::string, sched::DecayedUsage> usage;
  for (const GroupUsage& u : view.usage) {
    usage[u.group] = sched::Decay({u.milli_ms, u.as_of_ms}, now, half_life);
  }
  std::map<int64_t, const Job*> live_by_id;
  for (const Job& j : view.live_jobs) live_by_id[j.id] = &j;
  std::map<std::string, const std::vector<GpuInfo>*> gpus;
  for (const Node& n : view.nodes) gpus[n.id] = &n.gpus;
  auto gpus_of = [&](const std::string& id) -> const std::vector<GpuInfo>* {
    auto it = gpus.find(id);
    return it == gpus.end() ? nullptr : it->second;
  };
  for (const Attempt& a : view.live_attempts) {
    auto j = live_by_id.find(a.job_id);
    if (j == live_by_id.end()) continue;
    // Added virtually: the charge is written when the attempt ends.
    sched::DecayedUsage& u = usage[j->second->spec.group];
    u = sched::Charge(u, WeightedMilli(a, ctx.usage_prices, now, gpus_of), a.created_ms, now,
                      half_life);
  }
  // What a lab lent counts against its own use (every entry is as of now).
  for (const auto& [group, bonus] : ctx.lending_bonus) {
    auto it = usage.find(group);
    if (it == usage.end()) continue;
    it->second.milli_ms = std::max<int64_t>(it->second.milli_ms - bonus, 0);
  }
  return usage;
}

PassInput BuildPassInput(const PoolView& view, const PassContext& ctx) {
  static const std::map<int64_t, std::map<std::string, int64_t>> kNoRefusals;
  const auto& refused = ctx.refused != nullptr ? *ctx.refused : kNoRefusals;
  PassInput in;
  sched::Snapshot& snap = in.snapshot;
  snap.now_ms = ctx.now_ms;
  const OfferedNodes nodes = AddNodes(view, ctx, snap);
  AddRunning(view, nodes, snap);
  for (const SharedJob& shared : view.pending) {
    const Job& j = *shared;
    sched::PendingJob p;
    p.job_id = j.id;
    p.group = j.spec.group;
    p.priority = ClassOf(j.spec.priority);
    p.submit_ms = j.created_ms;
    p.request = RequestFor(j.spec);
    p.request.user = j.owner;
    for (const auto& [key, value] : ctx.required_node_labels) p.request.node_labels[key] = value;
    p.runtime_limit_ms = j.spec.max_runtime_ms;
    p.front = j.front;
    if (!ctx.held_accounts.empty()) {
      auto held = ctx.held_accounts.find(
          ctx.account_of ? ctx.account_of(j) : accounting::JobAccount(j.owner, j.spec.group));
      if (held != ctx.held_accounts.end()) {
        in.skipped[j.id] = "held: " + held->second;
        continue;
      }
    }
    if (Status st = sched::ValidateRequest(p.request); !st.ok()) {
      // One bad record must not stop every other job from being scheduled.
      in.skipped[j.id] = "cannot be scheduled: " + st.message();
      continue;
    }
    std::string excluded = ExcludeNodes(j, p.request, view, nodes, refused, ctx.now_ms);
    if (!excluded.empty()) in.exclusions[j.id] = std::move(excluded);
    snap.pending.push_back(std::move(p));
  }
  snap.usage = UsageNow(view, ctx);
  return in;
}

}  // namespace gpupool::server
