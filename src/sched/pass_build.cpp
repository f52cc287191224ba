// Building a pass: the snapshot checked and indexed, the queue ordered.
#include "sched/pass.h"

#include <algorithm>
#include <limits>

namespace gpupool::sched::detail {

namespace {

double Speed(const Pass& pass, const std::string& model) {
  for (const auto& [name, speed] : pass.config.model_speed) {
    if (GpuModelMatches(model, name)) return speed;
  }
  return 1.0;
}

// The shape id of a GPU; consecutive GPUs are usually of one shape.
int ShapeOf(Pass& pass, const GpuView& g, std::map<ShapeKey, int>& ids) {
  if (!pass.shapes.empty()) {
    const Shape& last = pass.shapes[static_cast<size_t>(pass.last_shape)];
    if (last.memory_mib == g.memory_mib && last.cc == g.compute_capability &&
        last.mig_slices == g.mig_slices && last.mig_gb == g.mig_memory_gb &&
        last.model == g.model) {
      return pass.last_shape;
    }
  }
  auto [it, inserted] = ids.emplace(
      ShapeKey{g.model, g.memory_mib, g.compute_capability, g.mig_slices, g.mig_memory_gb},
      static_cast<int>(pass.shapes.size()));
  if (inserted) {
    pass.shapes.push_back({g.model, g.memory_mib, g.compute_capability, Speed(pass, g.model),
                           g.mig_slices, g.mig_memory_gb});
  }
  pass.last_shape = it->second;
  return it->second;
}

}  // namespace

Status Build(Pass& pass) {
  std::unordered_map<std::string, int> node_index;
  node_index.reserve(pass.snap.nodes.size());
  std::map<ShapeKey, int> shape_ids;
  pass.nodes.reserve(pass.snap.nodes.size());
  size_t gpu_count = 0;
  for (const NodeView& v : pass.snap.nodes) gpu_count += v.gpus.size();
  pass.gpus.reserve(gpu_count);
  // Nodes in id order: ties end in node id, whatever the caller's order.
  std::vector<const NodeView*> by_id;
  by_id.reserve(pass.snap.nodes.size());
  for (const NodeView& v : pass.snap.nodes) by_id.push_back(&v);
  auto id_less = [](const NodeView* a, const NodeView* b) { return a->id < b->id; };
  if (!std::is_sorted(by_id.begin(), by_id.end(), id_less)) {
    std::sort(by_id.begin(), by_id.end(), id_less);
  }
  for (const NodeView* vp : by_id) {
    const NodeView& v = *vp;
    auto where = [&] { return "nodes[" + std::to_string(pass.nodes.size()) + "] (" + v.id + ")"; };
    if (!node_index.emplace(v.id, static_cast<int>(pass.nodes.size())).second) {
      return Status::InvalidArgument(where() + ".id: duplicate node id");
    }
    NodeS n;
    n.view = &v;
    n.cpu_free = v.cpu_milli_free;
    n.mem_free = v.memory_mib_free;
    n.gpu_begin = static_cast<int>(pass.gpus.size());
    for (const GpuView& g : v.gpus) {
      if (g.free_milli < 0 || g.free_milli > kFull || g.free_memory_mib < 0 ||
          g.free_memory_mib > g.memory_mib) {
        return Status::InvalidArgument(where() + ".gpus (" + g.uuid +
                                       "): free amounts must be within the GPU's capacity");
      }
      GpuS s;
      s.free_milli = g.free_milli;
      s.free_mem = g.free_memory_mib;
      s.shape = ShapeOf(pass, g, shape_ids);
      s.mps = g.mps;
      if (g.mps && !g.mps_user.empty()) s.mps_user = InternUser(pass, g.mps_user);
      pass.gpus.push_back(s);
      if (pass.gpus.back().shape != pass.gpus[static_cast<size_t>(n.gpu_begin)].shape)
        n.mixed = true;
    }
    n.gpu_end = static_cast<int>(pass.gpus.size());
    pass.nodes.push_back(std::move(n));
  }
  int most_gpus = 0;
  for (const NodeS& n : pass.nodes) most_gpus = std::max(most_gpus, n.gpu_end - n.gpu_begin);
  pass.whole.assign(pass.shapes.size(),
                    std::vector<std::vector<int>>(static_cast<size_t>(most_gpus) + 1));
  pass.partial.resize(pass.shapes.size());
  pass.seen.assign(pass.nodes.size(), 0);
  pass.frag_before.assign(pass.nodes.size(), std::numeric_limits<double>::quiet_NaN());
  // score_all_nodes scans every node: the index serves only backfill then.
  pass.indexed = !pass.config.score_all_nodes || pass.config.max_reservations > 0;
  for (int i = 0; i < static_cast<int>(pass.nodes.size()); ++i) {
    if (pass.nodes[static_cast<size_t>(i)].mixed && Ready(pass, i)) pass.mixed.push_back(i);
    Index(pass, i);
  }

  pass.pending_by_id.reserve(pass.snap.pending.size());
  for (size_t i = 0; i < pass.snap.pending.size(); ++i) {
    const PendingJob& j = pass.snap.pending[i];
    auto where = [&] {
      return "pending[" + std::to_string(i) + "] (job " + std::to_string(j.job_id) + ")";
    };
    if (!pass.pending_by_id.emplace(j.job_id, &j).second) {
      return Status::InvalidArgument(where() + ": duplicate job id");
    }
    if (Status s = ValidateRequest(j.request); !s.ok()) {
      return Status::InvalidArgument(where() + ".request." + s.message());
    }
  }
  for (size_t i = 0; i < pass.snap.running.size(); ++i) {
    const RunningJob& r = pass.snap.running[i];
    for (const Holding& h : r.holdings) {
      auto n = node_index.find(h.node_id);
      if (n == node_index.end()) {
        return Status::InvalidArgument("running[" + std::to_string(i) + "] (" + r.attempt_id +
                                       "): holding on unknown node " + h.node_id);
      }
      for (const std::string& uuid : h.gpu_uuids) {
        if (GpuIndex(pass, n->second, uuid) < 0) {
          return Status::InvalidArgument("running[" + std::to_string(i) + "] (" + r.attempt_id +
                                         "): holding names GPU " + uuid + " not on node " +
                                         h.node_id);
        }
      }
      pass.running_on_node[n->second].push_back(i);
      pass.allocated[GroupName(r.group)] += h.gpu_milli * static_cast<int64_t>(h.gpu_uuids.size());
      if (r.expected_end_ms > 0)
        pass.events.push_back({r.expected_end_ms, r.job_id, n->second, &h});
    }
  }
  pass.node_index = std::move(node_index);
  return Status::Ok();
}

Result<std::vector<QueueEntry>> OrderJobs(Pass& pass) {
  std::map<std::string, GroupState> groups;
  for (const GroupConfig& g : pass.config.groups) {
    GroupState s;
    s.name = g.name;
    s.weight = g.weight;
    s.guaranteed_milli = g.guaranteed_milli;
    groups[g.name] = s;
  }
  auto ensure = [&](const std::string& name) -> GroupState& {
    GroupState& s = groups[name];
    if (s.name.empty()) s.name = name;
    return s;
  };
  for (const PendingJob& j : pass.snap.pending) ensure(GroupName(j.group));
  for (const RunningJob& r : pass.snap.running) ensure(GroupName(r.group));
  for (auto& [name, s] : groups) {
    if (auto u = pass.snap.usage.find(name); u != pass.snap.usage.end()) s.usage = u->second;
    if (auto a = pass.allocated.find(name); a != pass.allocated.end())
      s.allocated_milli = a->second;
    pass.group_state[name] = s;
  }
  std::vector<GroupState> list;
  for (auto& [name, s] : groups) list.push_back(s);
  std::vector<QueuedJob> jobs;
  jobs.reserve(pass.snap.pending.size());
  for (const PendingJob& j : pass.snap.pending) {
    jobs.push_back(
        {j.job_id, GroupName(j.group), j.priority, j.submit_ms, j.request.GpuMilli(), j.front});
  }
  GP_ASSIGN_OR_RETURN(auto order,
                      OrderQueue(list, jobs, {pass.snap.now_ms, pass.config.half_life_ms}));
  return order;
}

// FGD's target workload: the queued requests (and, for an empty queue, none).
void BuildWorkload(Pass& pass) {
  std::vector<TaskRequest> tasks;
  tasks.reserve(pass.snap.pending.size());
  for (const PendingJob& j : pass.snap.pending) {
    const Request& r = j.request;
    TaskRequest t;
    t.cpu_milli = r.cpu_milli;
    t.memory_mib = r.memory_mib;
    t.num_gpu = r.gpus > 0 ? r.gpus : (r.gpu_milli > 0 ? 1 : 0);
    t.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
    tasks.push_back(t);
  }
  pass.workload = TypicalTaskTypes(tasks, 95, 1, true);
}

}  // namespace gpupool::sched::detail
