// Why a job waits: the texts of Waiting::reason and UnsatisfiableReason.
#include "sched/pass.h"

#include <algorithm>

namespace gpupool::sched::detail {

std::string ListText(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    s += i == 0 ? "" : (i + 1 == items.size() ? " or " : ", ");
    s += items[i];
  }
  return s;
}

namespace {

std::string CcText(int32_t cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

// " of model A100 with 40 GiB and compute capability >= 8.0" (empty when unconstrained).
std::string GpuConstraintText(const Request& r, const std::vector<std::string>& models) {
  std::string s;
  if (!models.empty()) s += " of model " + ListText(models);
  if (r.gpu_memory_mib > 0) {
    s += (r.gpus > 0 ? " with " : " with ") + FormatMebibytes(r.gpu_memory_mib) +
         (r.gpus > 0 ? "" : " free");
  }
  if (r.min_compute_capability > 0) {
    s += " and compute capability >= " + CcText(r.min_compute_capability);
  }
  return s;
}

std::string ShareText(int32_t milli) {
  std::string frac = std::to_string(milli);
  while (frac.size() < 3) frac = "0" + frac;
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return "a 0." + frac + " GPU share";
}

}  // namespace

std::string DurationText(int64_t ms) {
  if (ms < 60'000) return std::to_string((ms + 999) / 1000) + "s";
  if (ms < 3'600'000) return std::to_string((ms + 59'999) / 60'000) + "m";
  const int64_t minutes = ms % 3'600'000 / 60'000;
  return std::to_string(ms / 3'600'000) + "h" + (minutes > 0 ? std::to_string(minutes) + "m" : "");
}

namespace {

// What the job waits for right now, e.g. "waiting for 2 free GPUs of model A100".
std::string WaitText(const Request& r) {
  std::string per_node;
  if (r.mig_slices > 0) {
    per_node =
        "a free MIG instance of at least " + MigRequestText(r) + GpuConstraintText(r, r.gpu_models);
  } else if (r.gpus > 0) {
    per_node = std::to_string(r.gpus) + " free GPU" + (r.gpus > 1 ? "s" : "") +
               GpuConstraintText(r, r.gpu_models);
  } else if (r.gpu_milli > 0) {
    per_node = ShareText(r.gpu_milli) + GpuConstraintText(r, r.gpu_models);
  } else {
    per_node = "free CPU and memory";
  }
  if (!r.node_labels.empty()) {
    std::string labels;
    for (const auto& [k, v] : r.node_labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
    per_node += " on a node labelled " + labels;
  }
  if (r.nodes > 1) {
    return "waiting for " + std::to_string(r.nodes) + " nodes with " + per_node + " each";
  }
  return "waiting for " + per_node;
}

}  // namespace

const std::string& CachedWaitText(Pass& pass, const Request& r) {
  const size_t id = RequestId(pass.static_ids, r, 0);
  if (pass.wait_text.size() <= id) pass.wait_text.resize(id + 1);
  if (!pass.wait_text[id]) pass.wait_text[id] = WaitText(r);
  return *pass.wait_text[id];
}

const std::string& Unsatisfiable(Pass& pass, const Request& r) {
  const size_t id = RequestId(pass.static_ids, r, 0);
  if (pass.unsatisfiable.size() <= id) pass.unsatisfiable.resize(id + 1);
  if (!pass.unsatisfiable[id]) pass.unsatisfiable[id] = UnsatisfiableReason(pass.snap.nodes, r);
  return *pass.unsatisfiable[id];
}

}  // namespace gpupool::sched::detail

namespace gpupool::sched {

using namespace detail;

std::string UnsatisfiableReason(const std::vector<NodeView>& nodes, const Request& r) {
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
        return "";
      }
    }
  }
  if (hosts >= r.nodes) return "";
  if (excluded_hosts > 0 && hosts + excluded_hosts >= r.nodes) {
    return "no node it may use can host it; " + std::to_string(excluded_hosts) +
           (excluded_hosts > 1 ? " nodes that could are" : " node that could is") +
           " excluded for it";
  }
  if (ready == 0) return "no node is ready";
  if (labelled == 0) {
    std::string labels;
    for (const auto& [k, v] : r.node_labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
    return "no ready node is labelled " + labels;
  }
  const std::string of_model = r.gpu_models.empty() ? "" : " of model " + ListText(r.gpu_models);
  if (WantsGpu(r)) {
    const int need = r.gpus > 0 ? r.gpus : 1;
    if (r.mig_slices > 0 && most_full == 0) {
      return "no node has a MIG instance of at least " + MigRequestText(r) + of_model +
             (r.min_compute_capability > 0
                  ? " with compute capability >= " + CcText(r.min_compute_capability)
                  : "");
    }
    if (most_model == 0) return "no node has a GPU" + of_model;
    if (r.gpu_memory_mib > 0 && most_model_mem == 0) {
      return "no node has a GPU" + of_model + " with " + FormatMebibytes(r.gpu_memory_mib);
    }
    if (most_full == 0) {
      return "no node has a GPU" + of_model +
             " with compute capability >= " + CcText(r.min_compute_capability);
    }
    if (most_full < need) {
      return "no node has " + std::to_string(need) + " GPUs" + GpuConstraintText(r, r.gpu_models) +
             " (the most on one node is " + std::to_string(most_full) + ")";
    }
  }
  if (!cpu_ok) return "no node has " + FormatMilli(r.cpu_milli) + " CPUs";
  if (!mem_ok) return "no node has " + FormatMebibytes(r.memory_mib) + " of memory";
  if (r.nodes > 1) {
    return "the gang needs " + std::to_string(r.nodes) + " nodes that can each host one rank; " +
           std::to_string(hosts) + " can";
  }
  return "no single node has all of the requested GPUs, CPUs and memory";
}

}  // namespace gpupool::sched
