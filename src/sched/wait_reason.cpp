#include "sched/wait_reason.h"

#include <nlohmann/json.hpp>

#include "common/units.h"
#include "model/resources.h"

namespace gpupool::sched {

namespace {

std::string ListText(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    s += i == 0 ? "" : (i + 1 == items.size() ? " or " : ", ");
    s += items[i];
  }
  return s;
}

std::string CcText(int32_t cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

std::string LabelsText(const std::map<std::string, std::string>& labels) {
  std::string s;
  for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

// " of model A100 with 40 GiB and compute capability >= 8.0" (empty when unconstrained).
std::string GpuConstraintText(const WaitRequest& r) {
  std::string s;
  if (!r.gpu_models.empty()) s += " of model " + ListText(r.gpu_models);
  if (r.gpu_memory_mib > 0) {
    s += " with " + FormatMebibytes(r.gpu_memory_mib) + (r.gpus > 0 ? "" : " free");
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

std::string DurationText(int64_t ms) {
  if (ms < 60'000) return std::to_string((ms + 999) / 1000) + "s";
  if (ms < 3'600'000) return std::to_string((ms + 59'999) / 60'000) + "m";
  const int64_t minutes = ms % 3'600'000 / 60'000;
  return std::to_string(ms / 3'600'000) + "h" + (minutes > 0 ? std::to_string(minutes) + "m" : "");
}

std::string MigText(const WaitRequest& r) {
  return FormatMigProfile({r.mig_slices, r.mig_memory_gb});
}

// "waiting for 2 free GPUs of model A100", with the preference and the
// reservation when there are.
std::string ResourcesText(const WaitReason& w) {
  const WaitRequest& r = w.request;
  std::string per_node;
  if (r.mig_slices > 0) {
    per_node = "a free MIG instance of at least " + MigText(r) + GpuConstraintText(r);
  } else if (r.gpus > 0) {
    per_node =
        std::to_string(r.gpus) + " free GPU" + (r.gpus > 1 ? "s" : "") + GpuConstraintText(r);
  } else if (r.gpu_milli > 0) {
    per_node = ShareText(r.gpu_milli) + GpuConstraintText(r);
  } else {
    per_node = "free CPU and memory";
  }
  if (!r.node_labels.empty()) per_node += " on a node labelled " + LabelsText(r.node_labels);
  std::string s =
      r.nodes > 1 ? "waiting for " + std::to_string(r.nodes) + " nodes with " + per_node + " each"
                  : "waiting for " + per_node;
  if (!w.preferred_models.empty()) {
    s += " (preferring " + ListText(w.preferred_models) + " for " + DurationText(w.prefer_left_ms) +
         " more)";
  }
  if (w.reserved_in_ms > 0)
    s += "; reserved: expected to start in " + DurationText(w.reserved_in_ms);
  return s;
}

std::string OfModel(const WaitRequest& r) {
  return r.gpu_models.empty() ? "" : " of model " + ListText(r.gpu_models);
}

std::string KindText(const WaitReason& w) {
  const WaitRequest& r = w.request;
  switch (w.kind) {
    case WaitKind::kResources:
      return ResourcesText(w);
    case WaitKind::kPlacementLimit:
      return "waiting for the next scheduling pass (placement limit reached)";
    case WaitKind::kPreempting:
      return "waiting for " + std::to_string(w.count) + " preempted attempt" +
             (w.count > 1 ? "s" : "") + " to checkpoint and leave node " + w.node;
    case WaitKind::kVictimsLeaving: {
      std::string ids;
      for (int64_t v : w.jobs) ids += (ids.empty() ? "" : ", ") + std::to_string(v);
      return "waiting for job" + std::string(w.jobs.size() > 1 ? "s " : " ") + ids +
             " to leave (preempted for it: checkpoint and requeue)";
    }
    case WaitKind::kExcludedNodes:
      return "no node it may use can host it; " + std::to_string(w.count) +
             (w.count > 1 ? " nodes that could are" : " node that could is") + " excluded for it";
    case WaitKind::kNoReadyNode:
      return "no node is ready";
    case WaitKind::kNoLabelledNode:
      return "no ready node is labelled " + LabelsText(r.node_labels);
    case WaitKind::kNoMigInstance:
      return "no node has a MIG instance of at least " + MigText(r) + OfModel(r) +
             (r.min_compute_capability > 0
                  ? " with compute capability >= " + CcText(r.min_compute_capability)
                  : "");
    case WaitKind::kNoGpuModel:
      return "no node has a GPU" + OfModel(r);
    case WaitKind::kNoGpuMemory:
      return "no node has a GPU" + OfModel(r) + " with " + FormatMebibytes(r.gpu_memory_mib);
    case WaitKind::kNoGpuCapability:
      return "no node has a GPU" + OfModel(r) +
             " with compute capability >= " + CcText(r.min_compute_capability);
    case WaitKind::kTooFewGpus:
      return "no node has " + std::to_string(r.gpus > 0 ? r.gpus : 1) + " GPUs" +
             GpuConstraintText(r) + " (the most on one node is " + std::to_string(w.count) + ")";
    case WaitKind::kNoCpu:
      return "no node has " + FormatMilli(r.cpu_milli) + " CPUs";
    case WaitKind::kNoMemory:
      return "no node has " + FormatMebibytes(r.memory_mib) + " of memory";
    case WaitKind::kGangTooFewNodes:
      return "the gang needs " + std::to_string(r.nodes) + " nodes that can each host one rank; " +
             std::to_string(w.count) + " can";
    case WaitKind::kNoSingleNode:
      return "no single node has all of the requested GPUs, CPUs and memory";
  }
  return "waiting";
}

}  // namespace

std::string_view WaitKindName(WaitKind kind) {
  switch (kind) {
    case WaitKind::kResources:
      return "resources";
    case WaitKind::kPlacementLimit:
      return "placement_limit";
    case WaitKind::kPreempting:
      return "preempting";
    case WaitKind::kVictimsLeaving:
      return "victims_leaving";
    case WaitKind::kExcludedNodes:
      return "excluded_nodes";
    case WaitKind::kNoReadyNode:
      return "no_ready_node";
    case WaitKind::kNoLabelledNode:
      return "no_labelled_node";
    case WaitKind::kNoMigInstance:
      return "no_mig_instance";
    case WaitKind::kNoGpuModel:
      return "no_gpu_model";
    case WaitKind::kNoGpuMemory:
      return "no_gpu_memory";
    case WaitKind::kNoGpuCapability:
      return "no_gpu_capability";
    case WaitKind::kTooFewGpus:
      return "too_few_gpus";
    case WaitKind::kNoCpu:
      return "no_cpu";
    case WaitKind::kNoMemory:
      return "no_memory";
    case WaitKind::kGangTooFewNodes:
      return "gang_too_few_nodes";
    case WaitKind::kNoSingleNode:
      return "no_single_node";
  }
  return "unknown";
}

bool WaitKindUnsatisfiable(WaitKind kind) {
  switch (kind) {
    case WaitKind::kResources:
    case WaitKind::kPlacementLimit:
    case WaitKind::kPreempting:
    case WaitKind::kVictimsLeaving:
      return false;
    default:
      return true;
  }
}

std::string WaitReasonText(const WaitReason& reason) {
  std::string s = KindText(reason);
  if (!reason.note.empty()) s += "; " + reason.note;
  return s;
}

const std::string& WaitTextMemo::Text(const WaitReason& reason) {
  for (const auto& [r, text] : recent_) {
    if (r == reason) return text;
  }
  if (recent_.size() < kSize) {
    recent_.emplace_back(reason, WaitReasonText(reason));
    return recent_.back().second;
  }
  auto& slot = recent_[next_];
  next_ = (next_ + 1) % kSize;
  slot = {reason, WaitReasonText(reason)};
  return slot.second;
}

std::string ExplanationText(int64_t position, const QueueEntry& e) {
  std::string x;
  x.reserve(200);
  x += "position ";
  x += std::to_string(position);
  x += " (";
  x += PriorityClassName(e.priority);
  x += "): group ";
  x += e.group;
  x += ": ";
  x += std::to_string(e.usage_percent);
  x += "% of recent use, fair share ";
  x += std::to_string(e.share_percent);
  x += "%; ";
  x += e.borrowing ? "would borrow beyond its guarantee (" : "within its guarantee (";
  x += GpusText(e.group_milli);
  x += " of ";
  x += GpusText(e.guaranteed_milli);
  x += " GPUs with the jobs ahead of it)";
  return x;
}

nlohmann::json WaitingToJson(const WaitReason& w, const QueueEntry& e) {
  using nlohmann::json;
  const WaitRequest& r = w.request;
  json request = {{"nodes", r.nodes},
                  {"gpus", r.gpus},
                  {"gpu_milli", r.gpu_milli},
                  {"gpu_memory_mib", r.gpu_memory_mib},
                  {"min_compute_capability", r.min_compute_capability},
                  {"gpu_models", r.gpu_models},
                  {"node_labels", r.node_labels},
                  {"cpu_milli", r.cpu_milli},
                  {"memory_mib", r.memory_mib}};
  if (r.mig_slices > 0) request["mig"] = FormatMigProfile({r.mig_slices, r.mig_memory_gb});
  json out = {{"kind", std::string(WaitKindName(w.kind))},
              {"unsatisfiable", WaitKindUnsatisfiable(w.kind)},
              {"request", std::move(request)}};
  switch (w.kind) {
    case WaitKind::kPreempting:
      out["attempts"] = w.count;
      out["node"] = w.node;
      break;
    case WaitKind::kVictimsLeaving:
      out["jobs"] = w.jobs;
      break;
    case WaitKind::kExcludedNodes:
      out["excluded_hosts"] = w.count;
      break;
    case WaitKind::kTooFewGpus:
      out["most_on_one_node"] = w.count;
      break;
    case WaitKind::kGangTooFewNodes:
      out["nodes_that_can_host"] = w.count;
      break;
    default:
      break;
  }
  if (!w.preferred_models.empty()) {
    out["preferred_models"] = w.preferred_models;
    out["prefer_left_ms"] = w.prefer_left_ms;
  }
  if (w.reserved_in_ms > 0) out["reserved_in_ms"] = w.reserved_in_ms;
  if (!w.note.empty()) out["note"] = w.note;
  out["queue"] = {{"class", std::string(PriorityClassName(e.priority))},
                  {"group", e.group},
                  {"usage_percent", e.usage_percent},
                  {"share_percent", e.share_percent},
                  {"borrowing", e.borrowing},
                  {"group_gpu_milli", e.group_milli},
                  {"guaranteed_gpu_milli", e.guaranteed_milli}};
  return out;
}

}  // namespace gpupool::sched
