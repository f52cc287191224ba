#include "sched/scheduler.h"

#include <algorithm>

#include "common/units.h"

namespace gpupool::sched {
namespace {

bool GpuMatches(const GpuSlot& gpu, const Resources& r) {
  if (gpu.memory_mib < r.gpu_memory_mib) return false;
  if (r.gpu_models.empty()) return true;
  return std::any_of(r.gpu_models.begin(), r.gpu_models.end(),
                     [&](const std::string& m) { return GpuModelMatches(gpu.name, m); });
}

std::string ModelsText(const Resources& r) {
  std::string s;
  for (size_t i = 0; i < r.gpu_models.size(); ++i) {
    s += i == 0 ? "" : (i + 1 == r.gpu_models.size() ? " or " : ", ");
    s += r.gpu_models[i];
  }
  return s;
}

// Picks free matching GPUs on `node` for `r`, or returns false.
bool TryPlace(const NodeView& node, const Resources& r, std::vector<size_t>* picked) {
  if (!node.ready) return false;
  if (node.cpu_milli_free < r.cpu_milli || node.memory_mib_free < r.memory_mib) return false;
  picked->clear();
  for (size_t i = 0; i < node.gpus.size() && picked->size() < static_cast<size_t>(r.gpus); ++i) {
    if (node.gpus[i].free && GpuMatches(node.gpus[i], r)) picked->push_back(i);
  }
  return picked->size() == static_cast<size_t>(r.gpus);
}

}  // namespace

std::string UnsatisfiableReason(const std::vector<NodeView>& nodes, const Resources& r) {
  bool any_ready = false;
  int most_model = 0, most_full = 0;
  bool cpu_ok = false, mem_ok = false, all_ok = false;
  for (const NodeView& n : nodes) {
    if (!n.ready) continue;
    any_ready = true;
    int model = 0, full = 0;
    for (const GpuSlot& g : n.gpus) {
      Resources model_only = r;
      model_only.gpu_memory_mib = 0;
      if (GpuMatches(g, model_only)) ++model;
      if (GpuMatches(g, r)) ++full;
    }
    most_model = std::max(most_model, model);
    most_full = std::max(most_full, full);
    bool c = n.cpu_milli_total >= r.cpu_milli, m = n.memory_mib_total >= r.memory_mib;
    cpu_ok |= c;
    mem_ok |= m;
    all_ok |= c && m && full >= r.gpus;
  }
  if (all_ok) return "";
  if (!any_ready) return "no node is ready";
  std::string of_model = r.gpu_models.empty() ? "" : " of model " + ModelsText(r);
  std::string with_mem = r.gpu_memory_mib > 0 ? " with " + FormatMebibytes(r.gpu_memory_mib) : "";
  if (r.gpus > 0) {
    if (!r.gpu_models.empty() && most_model == 0) return "no node has a GPU" + of_model;
    if (most_full == 0) return "no node has a GPU" + with_mem + of_model;
    if (most_full < r.gpus) {
      return "no node has " + std::to_string(r.gpus) + " GPUs" + with_mem + of_model +
             " (the most on one node is " + std::to_string(most_full) + ")";
    }
  }
  if (!cpu_ok) return "no node has " + FormatMilli(r.cpu_milli) + " CPUs";
  if (!mem_ok) return "no node has " + FormatMebibytes(r.memory_mib) + " of memory";
  return "no single node has all of the requested GPUs, CPUs and memory";
}

Decisions Decide(const Snapshot& snapshot, const Options& options) {
  Decisions out;
  std::vector<NodeView> nodes = snapshot.nodes;  // free capacity shrinks as we place
  std::vector<size_t> picked;
  for (const PendingJob& job : snapshot.queue) {
    const Resources& r = job.resources;
    bool limit_reached = options.max_placements > 0 &&
                         out.placements.size() >= static_cast<size_t>(options.max_placements);
    bool placed = false;
    for (NodeView& node : nodes) {
      if (limit_reached || !TryPlace(node, r, &picked)) continue;
      Placement p{job.job_id, node.id, {}};
      for (size_t i : picked) {
        node.gpus[i].free = false;
        p.gpu_uuids.push_back(node.gpus[i].uuid);
      }
      node.cpu_milli_free -= r.cpu_milli;
      node.memory_mib_free -= r.memory_mib;
      out.placements.push_back(std::move(p));
      placed = true;
      break;
    }
    if (placed) continue;
    std::string why = UnsatisfiableReason(snapshot.nodes, r);
    if (!why.empty()) {
      out.waiting.push_back({job.job_id, std::move(why), true});
    } else if (r.gpus > 0) {
      out.waiting.push_back(
          {job.job_id,
           "waiting for " + std::to_string(r.gpus) + " free GPU" + (r.gpus > 1 ? "s" : ""), false});
    } else {
      out.waiting.push_back({job.job_id, "waiting for free CPU or memory", false});
    }
  }
  return out;
}

}  // namespace gpupool::sched
