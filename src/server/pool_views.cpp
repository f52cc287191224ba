// Pool: read views for the API (a job's detail, the queue, groups, nodes,
// the provider event log, logs). They change nothing.
#include "server/pool.h"

#include <algorithm>

#include "common/log.h"
#include "server/pool_rules.h"

namespace gpupool::server {

Result<JobDetail> Pool::GetJob(int64_t id) {
  JobDetail d;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(id));
    if (!job) return Status::NotFound("job " + std::to_string(id) + " does not exist");
    d.job = *std::move(job);
    AttemptQuery q;
    q.job_id = id;
    GP_ASSIGN_OR_RETURN(d.attempts, tx.ListAttempts(q));
    for (const Attempt& a : d.attempts) {
      std::vector<std::string> ids{a.node_id};
      for (const AttemptRank& r : a.ranks) ids.push_back(r.node_id);
      for (const std::string& node : ids) {
        if (node.empty() || d.node_names.count(node)) continue;
        GP_ASSIGN_OR_RETURN(auto n, tx.GetNode(node));
        if (n) d.node_names[node] = n->name;
      }
    }
    GP_ASSIGN_OR_RETURN(d.output, SummarizeJobOutput(tx, id));
    return Status::Ok();
  }));
  if (d.job.state == JobState::kPending) d.queue = QueueInfoFor(id);
  return d;
}

std::optional<QueueInfo> Pool::QueueInfoFor(int64_t job_id) const {
  auto it = queue_.find(job_id);
  if (it == queue_.end()) return std::nullopt;
  return it->second;
}

Result<std::vector<QueuedJob>> Pool::Queue(const std::optional<std::string>& owner) {
  std::vector<Job> pending;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(PoolView view, store_.ReadView(tx, true));  // from memory
    for (const SharedJob& j : view.pending)
      if (!owner || j->owner == *owner) pending.push_back(*j);
    return Status::Ok();
  }));
  std::vector<QueuedJob> out;
  out.reserve(pending.size());
  for (Job& j : pending) {
    QueuedJob e;
    e.queue = QueueInfoFor(j.id);
    e.job = std::move(j);
    out.push_back(std::move(e));
  }
  // Scheduler order; jobs not ordered yet go last, by id (submission).
  std::stable_sort(out.begin(), out.end(), [](const QueuedJob& a, const QueuedJob& b) {
    int64_t pa = a.queue ? a.queue->position : INT64_MAX;
    int64_t pb = b.queue ? b.queue->position : INT64_MAX;
    return pa < pb;
  });
  return out;
}

Result<std::vector<GroupStatus>> Pool::Groups() {
  int64_t now = clock_.NowMs();
  PoolView view;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(view, store_.ReadView(tx, true));
    return Status::Ok();
  }));
  std::map<std::string, GroupStatus> groups;
  auto group = [&](const std::string& name) -> GroupStatus& {
    GroupStatus& g = groups[name];
    g.name = name;
    return g;
  };
  for (const sched::GroupConfig& c : options_.scheduler.groups) {
    GroupStatus& g = group(c.name);
    g.configured = true;
    g.weight = c.weight;
    g.guaranteed_milli = c.guaranteed_milli;
  }
  for (const auto& [name, u] : UsageNow(view, PassContextAt(now)))
    group(name).usage_milli_ms = u.milli_ms;
  std::map<int64_t, const Job*> live_by_id;
  for (const Job& j : view.live_jobs) {
    live_by_id[j.id] = &j;
    ++group(j.spec.group).running_jobs;
  }
  for (const SharedJob& j : view.pending) ++group(j->spec.group).pending_jobs;
  for (const Attempt& a : view.live_attempts) {
    auto j = live_by_id.find(a.job_id);
    if (j != live_by_id.end()) group(j->second->spec.group).allocated_milli += TotalMilli(a);
  }
  double total_usage = 0, total_weight = 0;
  for (const auto& [name, g] : groups) {
    total_usage += static_cast<double>(g.usage_milli_ms);
    total_weight += static_cast<double>(g.weight);
  }
  std::vector<GroupStatus> out;
  for (auto& [name, g] : groups) {
    g.usage_fraction = total_usage > 0 ? static_cast<double>(g.usage_milli_ms) / total_usage : 0;
    g.share_fraction = total_weight > 0 ? static_cast<double>(g.weight) / total_weight : 0;
    g.fair_share_factor =
        g.share_fraction > 0 ? std::exp2(-g.usage_fraction / g.share_fraction) : 0;
    out.push_back(g);
  }
  return out;
}

Result<std::vector<Job>> Pool::ListJobs(const JobQuery& q) {
  std::vector<Job> jobs;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(jobs, tx.ListJobs(q));
    return Status::Ok();
  }));
  return jobs;
}

Result<LogPage> Pool::ReadLogs(int64_t job_id, int64_t after_cursor, int32_t limit) {
  LogPage page;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(page, ReadLogPage(tx, job_id, after_cursor, limit));
    return Status::Ok();
  }));
  return page;
}

Result<std::vector<NodeStatus>> Pool::ListNodes() {
  std::vector<NodeStatus> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    // The nodes and live attempts from the queue's memory (pool_queue.h).
    GP_ASSIGN_OR_RETURN(PoolView view, store_.ReadNodesView(tx));
    std::vector<Node>& nodes = view.nodes;
    const std::vector<Attempt>& attempts = view.live_attempts;
    std::map<std::string, std::map<std::string, std::vector<std::string>>> used;
    std::map<std::string, std::map<std::string, int32_t>> milli;
    // Node -> GPU -> each holder's (milli, the memory it asked for).
    std::map<std::string, std::map<std::string, std::vector<std::pair<int32_t, int64_t>>>> held;
    for (const Attempt& a : attempts) {
      for (const NodeHolding& where : HoldingsOf(a)) {
        for (const auto& g : where.gpu_uuids) {
          used[where.node_id][g].push_back(a.id);
          milli[where.node_id][g] += MilliPerGpu(a);
          held[where.node_id][g].emplace_back(MilliPerGpu(a), a.gpu_memory_mib);
        }
      }
    }
    for (Node& n : nodes) {
      NodeStatus st;
      auto it = live_.find(n.id);
      st.connected = it != live_.end();
      st.gpu_attempts = used[n.id];
      if (st.connected) {
        st.telemetry = it->second.telemetry;
        st.running_tasks = it->second.running_tasks;
        for (const ShareUse& s : it->second.shares) {
          const auto& on_gpu = st.gpu_attempts[s.gpu_uuid];
          if (std::find(on_gpu.begin(), on_gpu.end(), s.attempt_id) != on_gpu.end()) {
            st.shares.push_back(s);
          }
        }
      }
      st.gpu_used_milli = milli[n.id];
      for (const GpuInfo& g : n.gpus) {
        int64_t mib = 0;
        for (const auto& [m, asked] : held[n.id][g.uuid]) {
          const int64_t cap = ShareMemoryCapBytes(m, g.memory_mib, asked) >> 20;
          mib += cap > 0 ? cap : g.memory_mib;  // 0: a whole GPU
        }
        if (mib > 0) st.gpu_reserved_mib[g.uuid] = std::min(mib, g.memory_mib);
      }
      // A lent GPU is free while some of it is: a share may still fit.
      bool free_lent = false;
      for (const GpuInfo& g : n.gpus) {
        if (n.lending && !n.lending->gpus.count(g.uuid)) continue;
        auto m = st.gpu_used_milli.find(g.uuid);
        free_lent |= m == st.gpu_used_milli.end() || m->second < 1000;
      }
      st.status = NodeStatusName(n.state, st.connected, n.lending ? &*n.lending : nullptr,
                                 free_lent, !n.gpus.empty());
      st.node = std::move(n);
      out.push_back(std::move(st));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<NodeEventEntry>> Pool::NodeEvents(const std::string& node,
                                                     const std::string& kind, int64_t after_id,
                                                     int64_t before_id, int32_t limit) {
  if (!kind.empty() && std::find(std::begin(kNodeEventKinds), std::end(kNodeEventKinds), kind) ==
                           std::end(kNodeEventKinds)) {
    return Status::InvalidArgument(
        "kind: must be one of reclaim, pause, resume, leave, policy, refused");
  }
  std::vector<NodeEventEntry> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    std::string node_id;
    if (!node.empty()) {
      GP_ASSIGN_OR_RETURN(auto found, tx.GetNodeByName(node));
      if (!found) {
        GP_ASSIGN_OR_RETURN(found, tx.GetNode(node));
      }
      if (!found) return Status::NotFound("node " + node + " does not exist");
      node_id = found->id;
    }
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    std::map<std::string, std::string> names;
    for (const Node& n : nodes) names[n.id] = n.name;
    // Pages of the log until `limit` events of the kind are found.
    int64_t after = after_id, before = before_id;
    while (static_cast<int32_t>(out.size()) < limit) {
      GP_ASSIGN_OR_RETURN(auto page, tx.ListNodeEvents(node_id, after, before, limit));
      for (NodeEvent& e : page) {
        (before_id > 0 ? before : after) = e.id;
        if (static_cast<int32_t>(out.size()) >= limit) break;
        if (!kind.empty() && e.kind != kind) continue;
        std::string name = names.count(e.node_id) ? names[e.node_id] : e.node_id;
        out.push_back({std::move(e), std::move(name)});
      }
      if (static_cast<int32_t>(page.size()) < limit) break;
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::string> Pool::AttemptNodeName(const std::string& attempt_id) {
  std::string name;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(attempt_id));
    if (!a) return Status::NotFound("attempt " + attempt_id + " does not exist");
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(a->node_id));
    if (node) name = node->name;
    return Status::Ok();
  }));
  return name;
}

std::optional<ShareUse> Pool::ShareUseOf(const std::string& node_id,
                                         const std::string& attempt_id) const {
  auto it = live_.find(node_id);
  if (it == live_.end()) return std::nullopt;
  for (const ShareUse& s : it->second.shares) {
    if (s.attempt_id == attempt_id) return s;
  }
  return std::nullopt;
}

}  // namespace gpupool::server
