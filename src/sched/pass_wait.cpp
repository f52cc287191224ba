// Why a job waits, as data (sched/wait_reason.h renders it): what no node
// could ever host (UnsatisfiableReason) and what the job waits for now.
#include <algorithm>

#include "sched/pass.h"

namespace gpupool::sched {

using namespace detail;

WaitRequest WaitRequestOf(const Request& r) {
  WaitRequest w;
  w.nodes = r.nodes;
  w.gpus = r.gpus;
  w.gpu_milli = r.gpu_milli;
  w.gpu_memory_mib = r.gpu_memory_mib;
  w.min_compute_capability = r.min_compute_capability;
  w.mig_slices = r.mig_slices;
  w.mig_memory_gb = r.mig_memory_gb;
  w.gpu_models = r.gpu_models;
  w.node_labels = r.node_labels;
  w.cpu_milli = r.cpu_milli;
  w.memory_mib = r.memory_mib;
  return w;
}

std::optional<WaitReason> UnsatisfiableReason(const std::vector<NodeView>& nodes,
                                              const Request& r) {
  int ready = 0, labelled = 0, hosts = 0, excluded_hosts = 0;
  int most_model = 0, most_full = 0;
  bool cpu_ok = false, mem_ok = false;
  Request model_only = r;
  model_only.gpu_memory_mib = 0;
  model_only.min_compute_capability = 0;
  Request model_mem = model_only;
  model_mem.gpu_memory_mib = r.gpu_memory_mib;
  int most_model_mem = 0;
  for (const NodeView& n : nodes) {
    if (!n.ready) continue;
    ++ready;
    if (!LabelsOk(n, r.node_labels)) continue;
    ++labelled;
    int model = 0, model_mem_count = 0, full = 0;
    for (const GpuView& g : n.gpus) {
      model += GpuStaticOk(g, model_only, r.gpu_models) ? 1 : 0;
      model_mem_count += GpuStaticOk(g, model_mem, r.gpu_models) ? 1 : 0;
      full += GpuStaticOk(g, r, r.gpu_models) ? 1 : 0;
    }
    most_model = std::max(most_model, model);
    most_model_mem = std::max(most_model_mem, model_mem_count);
    most_full = std::max(most_full, full);
    const bool c = n.cpu_milli_total >= r.cpu_milli;
    const bool m = n.memory_mib_total >= r.memory_mib;
    cpu_ok |= c;
    mem_ok |= m;
    const int need = r.gpus > 0 ? r.gpus : (r.gpu_milli > 0 ? 1 : 0);
    if (c && m && full >= need) {
      if (Excluded(r, n.id)) {
        ++excluded_hosts;
      } else if (++hosts >= r.nodes) {
        return std::nullopt;
      }
    }
  }
  if (hosts >= r.nodes) return std::nullopt;
  auto reason = [&](WaitKind kind, int64_t count = 0) {
    WaitReason w;
    w.kind = kind;
    w.request = WaitRequestOf(r);
    w.count = count;
    return w;
  };
  if (excluded_hosts > 0 && hosts + excluded_hosts >= r.nodes) {
    return reason(WaitKind::kExcludedNodes, excluded_hosts);
  }
  if (ready == 0) return reason(WaitKind::kNoReadyNode);
  if (labelled == 0) return reason(WaitKind::kNoLabelledNode);
  if (WantsGpu(r)) {
    const int need = r.gpus > 0 ? r.gpus : 1;
    if (r.mig_slices > 0 && most_full == 0) return reason(WaitKind::kNoMigInstance);
    if (most_model == 0) return reason(WaitKind::kNoGpuModel);
    if (r.gpu_memory_mib > 0 && most_model_mem == 0) return reason(WaitKind::kNoGpuMemory);
    if (most_full == 0) return reason(WaitKind::kNoGpuCapability);
    if (most_full < need) return reason(WaitKind::kTooFewGpus, most_full);
  }
  if (!cpu_ok) return reason(WaitKind::kNoCpu);
  if (!mem_ok) return reason(WaitKind::kNoMemory);
  if (r.nodes > 1) return reason(WaitKind::kGangTooFewNodes, hosts);
  return reason(WaitKind::kNoSingleNode);
}

}  // namespace gpupool::sched

namespace gpupool::sched::detail {

const WaitReason& CachedWaitReason(Pass& pass, const Request& r) {
  const size_t id = RequestId(pass.static_ids, r, 0);
  if (pass.wait_reason.size() <= id) pass.wait_reason.resize(id + 1);
  if (!pass.wait_reason[id]) {
    WaitReason w;
    w.kind = WaitKind::kResources;
    w.request = WaitRequestOf(r);
    pass.wait_reason[id] = std::move(w);
  }
  return *pass.wait_reason[id];
}

const std::optional<WaitReason>& Unsatisfiable(Pass& pass, const Request& r) {
  const size_t id = RequestId(pass.static_ids, r, 0);
  if (pass.unsatisfiable.size() <= id) {
    pass.unsatisfiable.resize(id + 1);
    pass.unsatisfiable_known.resize(id + 1, 0);
  }
  if (!pass.unsatisfiable_known[id]) {
    pass.unsatisfiable[id] = UnsatisfiableReason(pass.snap.nodes, r);
    pass.unsatisfiable_known[id] = 1;
  }
  return pass.unsatisfiable[id];
}

}  // namespace gpupool::sched::detail
