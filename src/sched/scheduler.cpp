#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/units.h"
#include "model/resources.h"
#include "sched/mig.h"
#include "sched/policies.h"

namespace gpupool::sched {

std::string_view PreemptReasonName(PreemptReason r) {
  switch (r) {
    case PreemptReason::kInteractive:
      return "interactive";
    case PreemptReason::kGuarantee:
      return "guarantee";
    case PreemptReason::kOwner:
      return "owner";
  }
  return "unknown";
}

std::string_view PlacementScoreName(const PlacementScore& s) { return s.name; }

Result<PlacementScore> ParsePlacementScore(std::string_view name) {
  if (MakeScorer(std::string(name))) return PlacementScore{std::string(name)};
  std::string known;
  for (const std::string& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown placement \"" + std::string(name) +
                                 "\"; expected one of " + known);
}

Status ValidateRequest(const Request& r) {
  if (r.nodes < 1) return Status::InvalidArgument("nodes: must be >= 1");
  if (r.gpus < 0) return Status::InvalidArgument("gpus: must be >= 0");
  if (r.gpu_milli < 0 || r.gpu_milli >= kMilliPerGpu) {
    return Status::InvalidArgument("gpu_milli: a share is 1..999 thousandths of one GPU");
  }
  if (r.gpus > 0 && r.gpu_milli > 0) {
    return Status::InvalidArgument(
        "gpus, gpu_milli: ask for whole GPUs or a share of one, not both");
  }
  if (r.gpu_memory_mib < 0) return Status::InvalidArgument("gpu_memory_mib: must be >= 0");
  if (r.mig_slices < 0 || r.mig_memory_gb < 0 || (r.mig_slices > 0 && r.gpus != 1) ||
      (r.mig_slices == 0 && r.mig_memory_gb != 0)) {
    return Status::InvalidArgument(
        "mig_slices, mig_memory_gb: a MIG request is one instance (gpus 1) of >= 1 slice");
  }
  if (r.min_compute_capability < 0) {
    return Status::InvalidArgument("min_compute_capability: must be >= 0");
  }
  if (r.prefer_wait_ms < 0) return Status::InvalidArgument("prefer_wait_ms: must be >= 0");
  if (r.cpu_milli < 0) return Status::InvalidArgument("cpu_milli: must be >= 0");
  if (r.memory_mib < 0) return Status::InvalidArgument("memory_mib: must be >= 0");
  if (std::adjacent_find(r.excluded_nodes.begin(), r.excluded_nodes.end(),
                         std::greater_equal<>()) != r.excluded_nodes.end()) {
    return Status::InvalidArgument("excluded_nodes: must be sorted and unique");
  }
  return Status::Ok();
}

namespace {

bool ModelOk(const std::string& model, const std::vector<std::string>& wanted) {
  return wanted.empty() || std::any_of(wanted.begin(), wanted.end(), [&](const std::string& w) {
           return GpuModelMatches(model, w);
         });
}

bool LabelsOk(const NodeView& node, const std::map<std::string, std::string>& wanted) {
  for (const auto& [k, v] : wanted) {
    auto it = node.labels.find(k);
    if (it == node.labels.end() || it->second != v) return false;
  }
  return true;
}

bool WantsGpu(const Request& r) { return r.gpus > 0 || r.gpu_milli > 0; }

bool Excluded(const Request& r, const std::string& node_id) {
  return !r.excluded_nodes.empty() &&
         std::binary_search(r.excluded_nodes.begin(), r.excluded_nodes.end(), node_id);
}

// Static fit of one GPU (as if idle) for the request: model, memory, cc.
bool GpuStaticOk(const GpuView& g, const Request& r, const std::vector<std::string>& models) {
  return ModelOk(g.model, models) && g.memory_mib >= r.gpu_memory_mib &&
         g.compute_capability >= r.min_compute_capability &&
         MigOk(g.mig_slices, g.mig_memory_gb, r);
}

std::string ListText(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    s += i == 0 ? "" : (i + 1 == items.size() ? " or " : ", ");
    s += items[i];
  }
  return s;
}

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

std::string DurationText(int64_t ms) {
  if (ms < 60'000) return std::to_string((ms + 999) / 1000) + "s";
  if (ms < 3'600'000) return std::to_string((ms + 59'999) / 60'000) + "m";
  const int64_t minutes = ms % 3'600'000 / 60'000;
  return std::to_string(ms / 3'600'000) + "h" + (minutes > 0 ? std::to_string(minutes) + "m" : "");
}

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

namespace {

constexpr int32_t kFull = static_cast<int32_t>(kMilliPerGpu);
constexpr int kMaxPreemptorsPerPass = 16;

// What makes GPUs interchangeable: model, memory, compute capability and
// MIG profile (slices, GB).
using ShapeKey = std::tuple<std::string, int64_t, int32_t, int32_t, int32_t>;

// The state of one pass. Resources are tracked twice: `free` is what is
// really free now (after this pass's placements), `phantom` is the part of it
// held for a reservation (backfill or a preemptor). `avail` = free - phantom
// is what a job that would still run when the reservation starts may use, and
// what the index shows.
class Pass {
 public:
  Pass(const SchedulerConfig& config, const Snapshot& snap) : config_(config), snap_(snap) {}

  Result<Decisions> Run() {
    scorer_ = MakeScorer(config_.placement.name);
    if (!scorer_) return ParsePlacementScore(config_.placement.name).status();
    GP_RETURN_IF_ERROR(Build());
    GP_ASSIGN_OR_RETURN(auto order, OrderJobs());
    if (scorer_->UsesWorkload()) BuildWorkload();
    int placed = 0;
    for (QueueEntry& entry : order) {
      const PendingJob& job = *pending_by_id_.at(entry.job_id);
      Waiting w{job.job_id, entry.position, "", std::move(entry.explanation), false, 0};
      if (config_.max_placements > 0 && placed >= config_.max_placements) {
        w.reason = Unsatisfiable(job.request);
        w.unsatisfiable = !w.reason.empty();
        if (w.reason.empty()) {
          w.reason = "waiting for the next scheduling pass (placement limit reached)";
        }
        out_.waiting.push_back(std::move(w));
        continue;
      }
      if (TryPlace(job)) {
        ++placed;
        continue;
      }
      const std::string& why = Unsatisfiable(job.request);
      if (!why.empty()) {
        w.reason = why;
        w.unsatisfiable = true;
        out_.waiting.push_back(std::move(w));
        continue;
      }
      w.reason = CachedWaitText(job.request);
      if (PreferenceActive(job)) {
        w.reason += " (preferring " + ListText(job.request.preferred_models) + " for " +
                    DurationText(job.submit_ms + job.request.prefer_wait_ms - snap_.now_ms) +
                    " more)";
      }
      std::string preempt_note;
      if (TryPreempt(job, entry, &preempt_note)) {
        w.reason = preempt_note;
      } else if (reservations_made_ < config_.max_reservations) {
        ++reservations_made_;
        if (int64_t t = Reserve(job); t > 0) {
          w.reserved_start_ms = t;
          w.reason += "; reserved: expected to start in " + DurationText(t - snap_.now_ms);
        }
      }
      out_.waiting.push_back(std::move(w));
    }
    // Positions count the jobs still waiting, as a user reads them: the ones
    // placed in this pass are no longer in line.
    for (size_t i = 0; i < out_.waiting.size(); ++i) {
      Waiting& w = out_.waiting[i];
      const std::string old = "position " + std::to_string(w.position);
      w.position = static_cast<int64_t>(i) + 1;
      if (w.explanation.compare(0, old.size(), old) == 0) {
        w.explanation.replace(0, old.size(), "position " + std::to_string(w.position));
      }
    }
    return std::move(out_);
  }

 private:
  struct GpuS {
    int32_t free_milli = 0;
    int64_t free_mem = 0;
    int32_t phantom_milli = 0;
    int64_t phantom_mem = 0;
    int shape = 0;
    bool claimed = false;        // promised to a reservation's future
    bool mps = false;            // GpuView::mps
    int mps_user = -1;           // users_ index of the user whose shares hold it; -1: none
    int32_t indexed_milli = -1;  // key in partial_ while indexed, -1 when not
    int32_t AvailMilli() const { return free_milli - phantom_milli; }
    int64_t AvailMem() const { return free_mem - phantom_mem; }
  };
  struct NodeS {
    const NodeView* view = nullptr;
    int64_t cpu_free = 0, mem_free = 0;
    int64_t phantom_cpu = 0, phantom_mem = 0;
    int gpu_begin = 0, gpu_end = 0;
    bool mixed = false;  // GPUs of more than one shape
    bool reserved = false;
    std::vector<std::pair<int, int>> indexed;  // (shape, whole-free count) in whole_
  };
  // A candidate placement on one node.
  struct Choice {
    int node = -1;
    std::vector<int> gpus;  // global GPU indices
    bool actual = false;    // may use phantom (reserved) resources
  };
  // Per request, which shapes it may use, in tiers tried in order.
  struct Tiers {
    std::vector<std::vector<char>> allowed;  // per tier, by shape
  };
  // Running work's expected end, replayed by backfill reservations.
  struct Event {
    int64_t at;
    int64_t job_id;
    int node;
    const Holding* holding;
  };

  // --- building -------------------------------------------------------------

  Status Build() {
    std::unordered_map<std::string, int> node_index;
    std::map<ShapeKey, int> shape_ids;
    nodes_.reserve(snap_.nodes.size());
    nodes_.reserve(snap_.nodes.size());
    // Nodes in id order: ties end in node id, whatever the caller's order.
    std::vector<const NodeView*> by_id;
    by_id.reserve(snap_.nodes.size());
    for (const NodeView& v : snap_.nodes) by_id.push_back(&v);
    std::sort(by_id.begin(), by_id.end(),
              [](const NodeView* a, const NodeView* b) { return a->id < b->id; });
    for (const NodeView* vp : by_id) {
      const NodeView& v = *vp;
      auto where = [&] { return "nodes[" + std::to_string(nodes_.size()) + "] (" + v.id + ")"; };
      if (!node_index.emplace(v.id, static_cast<int>(nodes_.size())).second) {
        return Status::InvalidArgument(where() + ".id: duplicate node id");
      }
      NodeS n;
      n.view = &v;
      n.cpu_free = v.cpu_milli_free;
      n.mem_free = v.memory_mib_free;
      n.gpu_begin = static_cast<int>(gpus_.size());
      for (const GpuView& g : v.gpus) {
        if (g.free_milli < 0 || g.free_milli > kFull || g.free_memory_mib < 0 ||
            g.free_memory_mib > g.memory_mib) {
          return Status::InvalidArgument(where() + ".gpus (" + g.uuid +
                                         "): free amounts must be within the GPU's capacity");
        }
        GpuS s;
        s.free_milli = g.free_milli;
        s.free_mem = g.free_memory_mib;
        s.shape = ShapeOf(g, shape_ids);
        s.mps = g.mps;
        if (g.mps && !g.mps_user.empty()) s.mps_user = InternUser(g.mps_user);
        gpus_.push_back(s);
        if (gpus_.back().shape != gpus_[static_cast<size_t>(n.gpu_begin)].shape) n.mixed = true;
      }
      n.gpu_end = static_cast<int>(gpus_.size());
      nodes_.push_back(std::move(n));
    }
    int most_gpus = 0;
    for (const NodeS& n : nodes_) most_gpus = std::max(most_gpus, n.gpu_end - n.gpu_begin);
    whole_.assign(shapes_.size(),
                  std::vector<std::vector<int>>(static_cast<size_t>(most_gpus) + 1));
    partial_.resize(shapes_.size());
    seen_.assign(nodes_.size(), 0);
    frag_before_.assign(nodes_.size(), std::numeric_limits<double>::quiet_NaN());
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      if (nodes_[static_cast<size_t>(i)].mixed && Ready(i)) mixed_.push_back(i);
      Index(i);
    }

    pending_by_id_.reserve(snap_.pending.size());
    for (size_t i = 0; i < snap_.pending.size(); ++i) {
      const PendingJob& j = snap_.pending[i];
      auto where = [&] {
        return "pending[" + std::to_string(i) + "] (job " + std::to_string(j.job_id) + ")";
      };
      if (!pending_by_id_.emplace(j.job_id, &j).second) {
        return Status::InvalidArgument(where() + ": duplicate job id");
      }
      if (Status s = ValidateRequest(j.request); !s.ok()) {
        return Status::InvalidArgument(where() + ".request." + s.message());
      }
    }
    for (size_t i = 0; i < snap_.running.size(); ++i) {
      const RunningJob& r = snap_.running[i];
      for (const Holding& h : r.holdings) {
        auto n = node_index.find(h.node_id);
        if (n == node_index.end()) {
          return Status::InvalidArgument("running[" + std::to_string(i) + "] (" + r.attempt_id +
                                         "): holding on unknown node " + h.node_id);
        }
        for (const std::string& uuid : h.gpu_uuids) {
          if (GpuIndex(n->second, uuid) < 0) {
            return Status::InvalidArgument("running[" + std::to_string(i) + "] (" + r.attempt_id +
                                           "): holding names GPU " + uuid + " not on node " +
                                           h.node_id);
          }
        }
        running_on_node_[n->second].push_back(i);
        allocated_[GroupName(r.group)] += h.gpu_milli * static_cast<int64_t>(h.gpu_uuids.size());
        if (r.expected_end_ms > 0) events_.push_back({r.expected_end_ms, r.job_id, n->second, &h});
      }
    }
    node_index_ = std::move(node_index);
    return Status::Ok();
  }

  // The shape id of a GPU; consecutive GPUs are usually of one shape.
  int ShapeOf(const GpuView& g, std::map<ShapeKey, int>& ids) {
    if (!shapes_.empty()) {
      const Shape& last = shapes_[static_cast<size_t>(last_shape_)];
      if (last.memory_mib == g.memory_mib && last.cc == g.compute_capability &&
          last.mig_slices == g.mig_slices && last.mig_gb == g.mig_memory_gb &&
          last.model == g.model) {
        return last_shape_;
      }
    }
    auto [it, inserted] = ids.emplace(
        ShapeKey{g.model, g.memory_mib, g.compute_capability, g.mig_slices, g.mig_memory_gb},
        static_cast<int>(shapes_.size()));
    if (inserted) {
      shapes_.push_back({g.model, g.memory_mib, g.compute_capability, Speed(g.model), g.mig_slices,
                         g.mig_memory_gb});
    }
    last_shape_ = it->second;
    return it->second;
  }

  // Global index of the GPU `uuid` on node n, or -1.
  int GpuIndex(int n, const std::string& uuid) const {
    const NodeS& node = nodes_[static_cast<size_t>(n)];
    for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
      if (node.view->gpus[static_cast<size_t>(g - node.gpu_begin)].uuid == uuid) return g;
    }
    return -1;
  }

  double Speed(const std::string& model) const {
    for (const auto& [name, speed] : config_.model_speed) {
      if (GpuModelMatches(model, name)) return speed;
    }
    return 1.0;
  }

  static std::string GroupName(const std::string& g) { return g.empty() ? "default" : g; }

  Result<std::vector<QueueEntry>> OrderJobs() {
    std::map<std::string, GroupState> groups;
    for (const GroupConfig& g : config_.groups) {
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
    for (const PendingJob& j : snap_.pending) ensure(GroupName(j.group));
    for (const RunningJob& r : snap_.running) ensure(GroupName(r.group));
    for (auto& [name, s] : groups) {
      if (auto u = snap_.usage.find(name); u != snap_.usage.end()) s.usage = u->second;
      if (auto a = allocated_.find(name); a != allocated_.end()) s.allocated_milli = a->second;
      group_state_[name] = s;
    }
    std::vector<GroupState> list;
    for (auto& [name, s] : groups) list.push_back(s);
    std::vector<QueuedJob> jobs;
    jobs.reserve(snap_.pending.size());
    for (const PendingJob& j : snap_.pending) {
      jobs.push_back(
          {j.job_id, GroupName(j.group), j.priority, j.submit_ms, j.request.GpuMilli(), j.front});
    }
    GP_ASSIGN_OR_RETURN(auto order, OrderQueue(list, jobs, {snap_.now_ms, config_.half_life_ms}));
    return order;
  }

  // FGD's target workload: the queued requests (and, for an empty queue, none).
  void BuildWorkload() {
    std::vector<TaskRequest> tasks;
    tasks.reserve(snap_.pending.size());
    for (const PendingJob& j : snap_.pending) {
      const Request& r = j.request;
      TaskRequest t;
      t.cpu_milli = r.cpu_milli;
      t.memory_mib = r.memory_mib;
      t.num_gpu = r.gpus > 0 ? r.gpus : (r.gpu_milli > 0 ? 1 : 0);
      t.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
      tasks.push_back(t);
    }
    workload_ = TypicalTaskTypes(tasks, 95, 1, true);
  }

  // --- the index -------------------------------------------------------------

  bool Ready(int n) const { return nodes_[static_cast<size_t>(n)].view->ready; }

  void Index(int n) {
    NodeS& node = nodes_[static_cast<size_t>(n)];
    frag_before_[static_cast<size_t>(n)] = std::numeric_limits<double>::quiet_NaN();
    if (!node.view->ready) return;
    node.indexed.clear();
    for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
      GpuS& gpu = gpus_[static_cast<size_t>(g)];
      const int32_t avail = gpu.AvailMilli();
      if (avail > 0 && avail < kFull) {
        partial_[static_cast<size_t>(gpu.shape)].emplace(avail, n, g);
        gpu.indexed_milli = avail;
      }
      if (avail == kFull) {
        auto it = std::find_if(node.indexed.begin(), node.indexed.end(),
                               [&](const auto& p) { return p.first == gpu.shape; });
        if (it == node.indexed.end()) {
          node.indexed.emplace_back(gpu.shape, 1);
        } else {
          ++it->second;
        }
      }
    }
    for (const auto& [shape, count] : node.indexed) {
      std::vector<int>& bucket = whole_[static_cast<size_t>(shape)][static_cast<size_t>(count)];
      bucket.insert(std::lower_bound(bucket.begin(), bucket.end(), n), n);
    }
  }

  void Unindex(int n) {
    NodeS& node = nodes_[static_cast<size_t>(n)];
    for (const auto& [shape, count] : node.indexed) {
      std::vector<int>& bucket = whole_[static_cast<size_t>(shape)][static_cast<size_t>(count)];
      bucket.erase(std::lower_bound(bucket.begin(), bucket.end(), n));
    }
    node.indexed.clear();
    for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
      GpuS& gpu = gpus_[static_cast<size_t>(g)];
      if (gpu.indexed_milli >= 0) {
        partial_[static_cast<size_t>(gpu.shape)].erase({gpu.indexed_milli, n, g});
        gpu.indexed_milli = -1;
      }
    }
  }

  // --- fitting ---------------------------------------------------------------

  bool PreferenceActive(const PendingJob& job) const {
    return !job.request.preferred_models.empty() &&
           snap_.now_ms < job.submit_ms + job.request.prefer_wait_ms;
  }

  // Shape tiers for a job: its preferred models while it waits for them;
  // after the wait, preferred first, then the rest fastest first.
  Tiers TiersFor(const PendingJob& job) const {
    const Request& r = job.request;
    std::vector<char> allowed(shapes_.size(), 0), preferred(shapes_.size(), 0);
    for (size_t s = 0; s < shapes_.size(); ++s) {
      const Shape& sh = shapes_[s];
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
    if (PreferenceActive(job)) return t;
    std::vector<double> speeds;
    for (size_t s = 0; s < shapes_.size(); ++s) {
      if (allowed[s] && !preferred[s]) speeds.push_back(shapes_[s].speed);
    }
    std::sort(speeds.rbegin(), speeds.rend());
    speeds.erase(std::unique(speeds.begin(), speeds.end()), speeds.end());
    for (double sp : speeds) {
      std::vector<char> tier(shapes_.size(), 0);
      for (size_t s = 0; s < shapes_.size(); ++s) {
        tier[s] = allowed[s] && !preferred[s] && shapes_[s].speed == sp;
      }
      t.allowed.push_back(std::move(tier));
    }
    // Last, any allowed model at once: a gang may span speed tiers.
    if (t.allowed.size() > 1 && job.request.nodes > 1) t.allowed.push_back(std::move(allowed));
    return t;
  }

  // GPUs for `r` on node n under `allowed`, using avail (actual = false) or
  // everything free (actual = true); nullopt when it does not fit.
  std::optional<std::vector<int>> FitOn(int n, const Request& r, const std::vector<char>& allowed,
                                        bool actual) const {
    const NodeS& node = nodes_[static_cast<size_t>(n)];
    return FitOnState(node, gpus_.data() + node.gpu_begin, r, allowed, actual);
  }

  std::optional<std::vector<int>> FitOnState(const NodeS& node, const GpuS* gpus, const Request& r,
                                             const std::vector<char>& allowed, bool actual) const {
    if (!node.view->ready || Excluded(r, node.view->id) || !LabelsOk(*node.view, r.node_labels)) {
      return std::nullopt;
    }
    const int64_t cpu = node.cpu_free - (actual ? 0 : node.phantom_cpu);
    const int64_t mem = node.mem_free - (actual ? 0 : node.phantom_mem);
    if (cpu < r.cpu_milli || mem < r.memory_mib) return std::nullopt;
    std::vector<int> picked;
    auto milli = [&](const GpuS& g) { return actual ? g.free_milli : g.AvailMilli(); };
    // An MPS GPU another user's shares hold is not this share's.
    const int user = r.gpu_milli > 0 ? UserIndex(r.user) : -1;
    auto mps_ok = [&](const GpuS& g) { return !g.mps || g.mps_user < 0 || g.mps_user == user; };
    auto gmem = [&](const GpuS& g) { return actual ? g.free_mem : g.AvailMem(); };
    if (r.gpus > 0) {
      const bool smallest = r.mig_slices > 0;  // one MIG instance: the smallest that fits
      for (int g = node.gpu_begin;
           g < node.gpu_end && (smallest || static_cast<int>(picked.size()) < r.gpus); ++g) {
        const GpuS& gpu = gpus[g - node.gpu_begin];
        if (!allowed[static_cast<size_t>(gpu.shape)] || milli(gpu) != kFull) continue;
        if (smallest && !picked.empty()) {
          const Shape& a = shapes_[static_cast<size_t>(gpu.shape)];
          const Shape& b = shapes_[static_cast<size_t>(gpus[picked[0] - node.gpu_begin].shape)];
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

  // Candidate nodes for one rank of `r`, best first by the index's order.
  void Candidates(const Request& r, const std::vector<char>& allowed, bool may_use_reserved,
                  std::vector<Choice>* out) {
    ++stamp_;
    for (int n : exclude_) seen_[static_cast<size_t>(n)] = stamp_;
    const size_t cap = static_cast<size_t>(std::max(config_.candidates, 1));
    auto offer = [&](int n, bool actual) {
      if (seen_[static_cast<size_t>(n)] == stamp_) return false;
      if (auto picked = FitOn(n, r, allowed, actual)) {
        seen_[static_cast<size_t>(n)] = stamp_;
        out->push_back({n, std::move(*picked), actual});
        return true;
      }
      return false;
    };
    // Nodes by fully free GPUs of shape s, from `from` up: the tightest first.
    auto walk_whole = [&](size_t s, int from, size_t& found) {
      const auto& buckets = whole_[s];
      for (size_t c = static_cast<size_t>(from); c < buckets.size() && found < cap; ++c) {
        for (int n : buckets[c]) {
          if (found >= cap) break;
          if (offer(n, false)) ++found;
        }
      }
    };
    if (r.gpus > 0) {
      for (size_t s = 0; s < shapes_.size(); ++s) {
        size_t found = 0;
        if (allowed[s]) walk_whole(s, r.gpus, found);
      }
    } else if (r.gpu_milli > 0) {
      // A share: GPUs already shared with the least sufficient room first,
      // then whole free GPUs on the nodes with the fewest.
      for (size_t s = 0; s < shapes_.size(); ++s) {
        if (!allowed[s]) continue;
        size_t found = 0;
        for (auto it = partial_[s].lower_bound({r.gpu_milli, -1, -1});
             it != partial_[s].end() && found < cap; ++it) {
          if (offer(std::get<1>(*it), false)) ++found;
        }
        walk_whole(s, 1, found);
      }
    } else {
      // CPU-only work: nodes without GPUs first, then the rest, in order.
      size_t found = 0;
      for (int pass = 0; pass < 2 && found < cap; ++pass) {
        for (int n = 0; n < static_cast<int>(nodes_.size()) && found < cap; ++n) {
          const bool gpu_less =
              nodes_[static_cast<size_t>(n)].gpu_begin == nodes_[static_cast<size_t>(n)].gpu_end;
          if (gpu_less == (pass == 0) && offer(n, false)) ++found;
        }
      }
    }
    for (int n : mixed_) offer(n, false);
    if (may_use_reserved) {
      for (int n : reserved_nodes_) offer(n, true);
    }
  }

  // The candidate's rank by the placement scorer (policies.h), lower first:
  // the scorer's key, then (TieBreak::kLeastGpuLeft) the GPU milli left,
  // then node order (by id). TieBreak::kRandom is not drawn here: it ends as
  // kLowestIndex (Decide draws only for the `random` placement). The node as the scorer sees it
  // is what a job may use now (avail: free less reservations).
  std::tuple<int64_t, int64_t, int64_t, int> Score(const Choice& c, const Request& r) {
    const NodeS& node = nodes_[static_cast<size_t>(c.node)];
    scratch_free_.cpu_milli = node.cpu_free - node.phantom_cpu;
    scratch_free_.memory_mib = node.mem_free - node.phantom_mem;
    scratch_free_.gpus.clear();
    for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
      scratch_free_.gpus.push_back(std::max(gpus_[static_cast<size_t>(g)].AvailMilli(), 0));
    }
    scratch_cap_.cpu_milli = node.view->cpu_milli_total;
    scratch_cap_.memory_mib = node.view->memory_mib_total;
    scratch_cap_.gpus.assign(static_cast<size_t>(node.gpu_end - node.gpu_begin), kFull);
    scratch_task_.cpu_milli = r.cpu_milli;
    scratch_task_.memory_mib = r.memory_mib;
    scratch_task_.num_gpu = r.gpus > 0 ? r.gpus : (r.gpu_milli > 0 ? 1 : 0);
    scratch_task_.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
    scratch_gpus_.clear();
    for (int g : c.gpus) scratch_gpus_.push_back(g - node.gpu_begin);
    double& before = frag_before_[static_cast<size_t>(c.node)];
    if (std::isnan(before)) before = scorer_->Before(scratch_free_, workload_);
    const ScoreKey k = scorer_->Score(scratch_cap_, scratch_free_, before, scratch_task_,
                                      scratch_gpus_, workload_);
    int64_t left = 0;
    if (config_.tie_break == TieBreak::kLeastGpuLeft && scorer_->Scores()) {
      for (int m : scratch_free_.gpus) left += m;
      for (int g : scratch_gpus_) {
        const int m = scratch_free_.gpus[static_cast<size_t>(g)];
        left -= m - std::max(m - (r.gpus > 0 ? kFull : r.gpu_milli), 0);
      }
    }
    return {-k.score, -k.tie, left, c.node};
  }

  // The best of `cands` (at least one): the lowest Score, or for a scorer
  // that draws (`random`), one of the best drawn with the seeded generator.
  size_t Best(const std::vector<Choice>& cands, const Request& r) {
    if (cands.size() == 1) return 0;
    if (scorer_->RandomChoice()) return static_cast<size_t>(rng_.Uniform(cands.size()));
    size_t best = 0;
    auto best_score = Score(cands[0], r);
    for (size_t i = 1; i < cands.size(); ++i) {
      auto s = Score(cands[i], r);
      if (s < best_score) {
        best_score = s;
        best = i;
      }
    }
    return best;
  }

  // Takes `r` on node n (GPUs `gpus`). `actual`: take reserved resources
  // first (the job ends before the reservation starts).
  void Take(int n, const Request& r, const std::vector<int>& gpus, bool actual) {
    Unindex(n);
    NodeS& node = nodes_[static_cast<size_t>(n)];
    auto take = [&](int64_t amount, int64_t& free, auto& phantom) {
      if (actual) {
        const auto from_phantom = std::min<int64_t>(phantom, amount);
        phantom = static_cast<std::remove_reference_t<decltype(phantom)>>(phantom - from_phantom);
      }
      free -= amount;
    };
    take(r.cpu_milli, node.cpu_free, node.phantom_cpu);
    take(r.memory_mib, node.mem_free, node.phantom_mem);
    for (int g : gpus) {
      GpuS& gpu = gpus_[static_cast<size_t>(g)];
      const int32_t milli = r.gpus > 0 ? kFull : r.gpu_milli;
      const int64_t mem = r.gpus > 0 ? gpu.free_mem : r.gpu_memory_mib;
      int64_t free_milli = gpu.free_milli;
      take(milli, free_milli, gpu.phantom_milli);
      gpu.free_milli = static_cast<int32_t>(free_milli);
      take(mem, gpu.free_mem, gpu.phantom_mem);
      if (gpu.mps && r.gpus == 0) gpu.mps_user = InternUser(r.user);
    }
    Index(n);
  }

  // Saved state of nodes touched by a tentative gang placement.
  struct Saved {
    int node;
    NodeS state;
    std::vector<GpuS> gpus;
  };
  Saved Save(int n) const {
    const NodeS& node = nodes_[static_cast<size_t>(n)];
    return {n, node,
            std::vector<GpuS>(gpus_.begin() + node.gpu_begin, gpus_.begin() + node.gpu_end)};
  }
  void Restore(const Saved& s) {
    Unindex(s.node);
    NodeS& node = nodes_[static_cast<size_t>(s.node)];
    node = s.state;
    node.indexed.clear();
    std::copy(s.gpus.begin(), s.gpus.end(), gpus_.begin() + node.gpu_begin);
    for (int g = node.gpu_begin; g < node.gpu_end; ++g)
      gpus_[static_cast<size_t>(g)].indexed_milli = -1;
    Index(s.node);
  }

  // Jobs whose requests are alike share one id per pass: what failed for
  // one fails for all (free capacity only shrinks within a pass).
  struct RequestKey {
    const Request* r;
    uint8_t flags;  // 1: may use reserved capacity, 2: preference window open
  };
  struct RequestKeyHash {
    size_t operator()(const RequestKey& k) const {
      const Request& r = *k.r;
      size_t h = std::hash<int64_t>()(r.nodes * 1'000'003LL + r.gpus * 1'009LL + r.gpu_milli);
      auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
      mix(std::hash<int64_t>()(r.gpu_memory_mib));
      mix(std::hash<int64_t>()(r.cpu_milli * 31 + r.memory_mib));
      mix(static_cast<size_t>(r.min_compute_capability) * 7 + k.flags);
      mix(static_cast<size_t>(r.mig_slices) * 4099 + static_cast<size_t>(r.mig_memory_gb));
      for (const auto& m : r.gpu_models) mix(std::hash<std::string>()(m));
      for (const auto& m : r.preferred_models) mix(std::hash<std::string>()(m) * 3);
      for (const auto& [a, b] : r.node_labels) mix(std::hash<std::string>()(a + "=" + b));
      for (const auto& n : r.excluded_nodes) mix(std::hash<std::string>()(n) * 5);
      return h;
    }
  };
  struct RequestKeyEq {
    bool operator()(const RequestKey& x, const RequestKey& y) const {
      const Request& a = *x.r;
      const Request& b = *y.r;
      return x.flags == y.flags && a.nodes == b.nodes && a.gpus == b.gpus &&
             a.gpu_milli == b.gpu_milli && a.gpu_memory_mib == b.gpu_memory_mib &&
             a.min_compute_capability == b.min_compute_capability && a.cpu_milli == b.cpu_milli &&
             a.memory_mib == b.memory_mib && a.gpu_models == b.gpu_models &&
             a.preferred_models == b.preferred_models && a.node_labels == b.node_labels &&
             a.excluded_nodes == b.excluded_nodes && a.mig_slices == b.mig_slices &&
             a.mig_memory_gb == b.mig_memory_gb;
    }
  };
  using RequestIds = std::unordered_map<RequestKey, size_t, RequestKeyHash, RequestKeyEq>;

  size_t RequestId(RequestIds& ids, const Request& r, uint8_t flags) {
    return ids.try_emplace(RequestKey{&r, flags}, ids.size()).first->second;
  }

  bool MayUseReserved(const PendingJob& job) const {
    return !reserved_nodes_.empty() && job.runtime_limit_ms > 0 &&
           snap_.now_ms + job.runtime_limit_ms <= earliest_reservation_ms_;
  }

  bool TryPlace(const PendingJob& job) {
    const Request& r = job.request;
    const bool may_use_reserved = MayUseReserved(job);
    const size_t id = RequestId(
        placing_ids_, r,
        static_cast<uint8_t>((may_use_reserved ? 1 : 0) | (PreferenceActive(job) ? 2 : 0)));
    if (id < failed_.size() && failed_[id]) return false;
    if (tiers_.size() <= id) tiers_.resize(id + 1);
    if (!tiers_[id]) tiers_[id] = TiersFor(job);
    const Tiers& tiers = *tiers_[id];
    for (const std::vector<char>& allowed : tiers.allowed) {
      std::vector<Saved> saved;
      Placement p;
      p.job_id = job.job_id;
      p.backfilled = !reserved_nodes_.empty();
      exclude_.clear();
      for (int rank = 0; rank < r.nodes; ++rank) {
        std::vector<Choice> cands;
        Candidates(r, allowed, may_use_reserved, &cands);
        if (cands.empty()) break;
        const Choice& c = cands[Best(cands, r)];
        saved.push_back(Save(c.node));
        Take(c.node, r, c.gpus, c.actual);
        exclude_.push_back(c.node);
        exclude_order_ = exclude_;
        NodeAssignment a;
        a.node_id = nodes_[static_cast<size_t>(c.node)].view->id;
        for (int g : c.gpus) {
          a.gpu_uuids.push_back(
              nodes_[static_cast<size_t>(c.node)]
                  .view
                  ->gpus[static_cast<size_t>(g - nodes_[static_cast<size_t>(c.node)].gpu_begin)]
                  .uuid);
        }
        a.gpu_milli = r.gpus > 0 ? kFull : r.gpu_milli;
        a.gpu_memory_mib = r.gpus > 0 ? 0 : r.gpu_memory_mib;
        p.nodes.push_back(std::move(a));
      }
      exclude_.clear();
      if (static_cast<int>(p.nodes.size()) == r.nodes) {
        if (job.runtime_limit_ms > 0) {
          for (size_t k = 0; k < p.nodes.size(); ++k) {
            const NodeAssignment& a = p.nodes[k];
            placed_holdings_.push_back(Holding{a.node_id, a.gpu_uuids, a.gpu_milli,
                                               a.gpu_memory_mib, r.cpu_milli, r.memory_mib});
            events_.push_back({snap_.now_ms + job.runtime_limit_ms, job.job_id, exclude_order_[k],
                               &placed_holdings_.back()});
          }
        }
        allocated_[GroupName(job.group)] += r.GpuMilli();
        out_.placements.push_back(std::move(p));
        return true;
      }
      for (auto it = saved.rbegin(); it != saved.rend(); ++it) Restore(*it);
    }
    if (failed_.size() <= id) failed_.resize(id + 1, 0);
    failed_[id] = 1;
    return false;
  }

  const std::string& CachedWaitText(const Request& r) {
    const size_t id = RequestId(static_ids_, r, 0);
    if (wait_text_.size() <= id) wait_text_.resize(id + 1);
    if (!wait_text_[id]) wait_text_[id] = WaitText(r);
    return *wait_text_[id];
  }

  const std::string& Unsatisfiable(const Request& r) {
    const size_t id = RequestId(static_ids_, r, 0);
    if (unsatisfiable_.size() <= id) unsatisfiable_.resize(id + 1);
    if (!unsatisfiable_[id]) unsatisfiable_[id] = UnsatisfiableReason(snap_.nodes, r);
    return *unsatisfiable_[id];
  }

  // Holds what is avail now of the GPUs `picked` on node n (and CPU and
  // memory) for a job that will start there at `at_ms`.
  void HoldFor(int n, const Request& r, const std::vector<int>& picked, int64_t at_ms) {
    Unindex(n);
    NodeS& node = nodes_[static_cast<size_t>(n)];
    node.phantom_cpu += std::clamp<int64_t>(node.cpu_free - node.phantom_cpu, 0, r.cpu_milli);
    node.phantom_mem += std::clamp<int64_t>(node.mem_free - node.phantom_mem, 0, r.memory_mib);
    for (int g : picked) {
      GpuS& gpu = gpus_[static_cast<size_t>(g)];
      const int32_t want = r.gpus > 0 ? kFull : r.gpu_milli;
      const int64_t want_mem = r.gpus > 0 ? gpu.free_mem : r.gpu_memory_mib;
      gpu.phantom_milli += std::clamp<int32_t>(gpu.AvailMilli(), 0, want);
      gpu.phantom_mem += std::clamp<int64_t>(gpu.AvailMem(), 0, want_mem);
      gpu.claimed = true;
    }
    Index(n);
    if (!node.reserved) {
      node.reserved = true;
      reserved_nodes_.push_back(n);
    }
    earliest_reservation_ms_ = std::min(earliest_reservation_ms_, at_ms);
  }

  // --- backfill reservation ---------------------------------------------------

  // The earliest time the running work's expected ends leave room for `job`
  // (all ranks), holding that room; 0 when no such time is known.
  int64_t Reserve(const PendingJob& job) {
    const Request& r = job.request;
    const Tiers tiers = TiersFor(job);
    std::vector<char> allowed(shapes_.size(), 0);
    for (const auto& tier : tiers.allowed) {
      for (size_t s = 0; s < shapes_.size(); ++s) allowed[s] |= tier[s];
    }
    // Scratch copies of the nodes the replay touches, in the avail view;
    // claimed GPUs belong to an earlier reservation's future.
    struct Scratch {
      NodeS node;
      std::vector<GpuS> gpus;
      bool fits = false;
    };
    std::unordered_map<int, Scratch> scratch;
    int fitting = 0;
    auto get = [&](int n) -> Scratch& {
      auto [it, inserted] = scratch.try_emplace(n);
      if (inserted) {
        const NodeS& node = nodes_[static_cast<size_t>(n)];
        it->second.node = node;
        it->second.node.cpu_free -= node.phantom_cpu;
        it->second.node.mem_free -= node.phantom_mem;
        it->second.node.phantom_cpu = it->second.node.phantom_mem = 0;
        for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
          GpuS copy = gpus_[static_cast<size_t>(g)];
          copy.free_milli = copy.claimed ? 0 : copy.AvailMilli();
          copy.free_mem = copy.claimed ? 0 : copy.AvailMem();
          copy.phantom_milli = 0;
          copy.phantom_mem = 0;
          it->second.gpus.push_back(copy);
        }
      }
      return it->second;
    };
    auto check = [&](int n) {
      Scratch& sc = get(n);
      const bool f = FitOnState(sc.node, sc.gpus.data(), r, allowed, false).has_value();
      fitting += static_cast<int>(f) - static_cast<int>(sc.fits);
      sc.fits = f;
    };
    if (r.nodes > 1) {  // ranks that fit now, from the index
      std::vector<Choice> now;
      Candidates(r, allowed, false, &now);
      for (const Choice& c : now) check(c.node);
    }
    std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
      return std::tie(a.at, a.job_id, a.node) < std::tie(b.at, b.job_id, b.node);
    });
    int64_t at = 0;
    for (const Event& e : events_) {
      if (fitting >= r.nodes) break;
      Scratch& sc = get(e.node);
      sc.node.cpu_free += e.holding->cpu_milli;
      sc.node.mem_free += e.holding->memory_mib;
      for (const std::string& uuid : e.holding->gpu_uuids) {
        const int g = GpuIndex(e.node, uuid) - sc.node.gpu_begin;
        GpuS& gpu = sc.gpus[static_cast<size_t>(g)];
        if (gpu.claimed) continue;
        const int64_t cap = sc.node.view->gpus[static_cast<size_t>(g)].memory_mib;
        gpu.free_milli = std::min(kFull, gpu.free_milli + e.holding->gpu_milli);
        gpu.free_mem = std::min(
            cap, gpu.free_mem + (e.holding->gpu_milli >= kFull ? cap : e.holding->gpu_memory_mib));
        if (gpu.free_milli == kFull) gpu.mps_user = -1;
      }
      check(e.node);
      at = std::max(e.at, snap_.now_ms + 1);
    }
    if (fitting < r.nodes || at == 0) return 0;
    std::vector<int> chosen;
    for (const auto& [n, sc] : scratch) {
      if (sc.fits) chosen.push_back(n);
    }
    std::sort(chosen.begin(), chosen.end());
    chosen.resize(static_cast<size_t>(r.nodes));
    for (int n : chosen) {
      const Scratch& sc = scratch.at(n);
      HoldFor(n, r, *FitOnState(sc.node, sc.gpus.data(), r, allowed, false), at);
    }
    return at;
  }

  // --- preemption ---------------------------------------------------------------

  int64_t LostWork(const RunningJob& v) const {
    return snap_.now_ms - std::max(v.last_checkpoint_ms, v.started_ms);
  }

  // Whether running job v on `node` may make room for `job`.
  bool VictimOk(const RunningJob& v, const PendingJob& job, const NodeS& node, bool owner_node,
                bool interactive) const {
    if (!v.preemptible || v.priority == PriorityClass::kInteractive) return false;
    if (victims_.count(v.attempt_id) > 0) return false;
    if (v.last_preempted_ms &&
        snap_.now_ms - *v.last_preempted_ms < config_.anti_thrash_window_ms) {
      return false;
    }
    // A group's own interactive session may displace its own batch work.
    const std::string g = GroupName(v.group);
    if (g == GroupName(job.group)) return interactive;
    // A group's work on a machine it owns is never preempted by others.
    if (!node.view->owner_group.empty() && node.view->owner_group == g) return false;
    if (owner_node) return true;
    // Borrowed work only: its group stays at or above its guarantee without it.
    auto gs = group_state_.find(g);
    const int64_t guaranteed = gs == group_state_.end() ? 0 : gs->second.guaranteed_milli;
    auto a = allocated_.find(g);
    const int64_t alloc = a == allocated_.end() ? 0 : a->second;
    auto t = taken_.find(g);
    const int64_t taken = t == taken_.end() ? 0 : t->second;
    return alloc - taken > guaranteed;
  }

  bool TryPreempt(const PendingJob& job, const QueueEntry& entry, std::string* note) {
    if (!config_.preemption || job.request.nodes != 1 || preemptors_ >= kMaxPreemptorsPerPass)
      return false;
    // Opportunistic work preempts only as its owner, on its own machines.
    const bool opportunistic = job.priority == PriorityClass::kOpportunistic;
    const std::string group = GroupName(job.group);
    auto gs = group_state_.find(group);
    const bool in_quota =
        gs != group_state_.end() && gs->second.guaranteed_milli > 0 && !entry.borrowing;
    const bool interactive = job.priority == PriorityClass::kInteractive;
    const Tiers tiers = TiersFor(job);
    std::vector<char> allowed(shapes_.size(), 0);
    for (const auto& tier : tiers.allowed) {
      for (size_t s = 0; s < shapes_.size(); ++s) allowed[s] |= tier[s];
    }
    struct Option {
      int node = -1;
      std::vector<size_t> victims;
      int64_t lost = 0;
      PreemptReason reason = PreemptReason::kGuarantee;
    };
    std::optional<Option> best;
    for (const auto& [n, runs] : running_on_node_) {
      const NodeS& node = nodes_[static_cast<size_t>(n)];
      const bool owner_node = !node.view->owner_group.empty() && node.view->owner_group == group;
      if (!owner_node && (opportunistic || (!interactive && !in_quota))) continue;
      if (!node.view->ready || Excluded(job.request, node.view->id) ||
          !LabelsOk(*node.view, job.request.node_labels)) {
        continue;
      }
      std::vector<size_t> cands;
      for (size_t i : runs) {
        if (VictimOk(snap_.running[i], job, node, owner_node, interactive)) cands.push_back(i);
      }
      if (cands.empty()) continue;
      std::sort(cands.begin(), cands.end(), [&](size_t a, size_t b) {
        const RunningJob& x = snap_.running[a];
        const RunningJob& y = snap_.running[b];
        return std::make_tuple(LostWork(x), -HeldOn(x, node), x.attempt_id) <
               std::make_tuple(LostWork(y), -HeldOn(y, node), y.attempt_id);
      });
      std::vector<size_t> chosen;
      bool ok = false;
      for (size_t i : cands) {
        chosen.push_back(i);
        if (FitsWithout(n, chosen, job.request, allowed)) {
          ok = true;
          break;
        }
      }
      if (!ok) continue;
      // Reprieve, most lost work first, while the rest still make room.
      for (size_t k = chosen.size(); k-- > 0;) {
        std::vector<size_t> rest = chosen;
        rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(k));
        if (!rest.empty() && FitsWithout(n, rest, job.request, allowed)) chosen = rest;
      }
      Option o;
      o.node = n;
      o.victims = chosen;
      for (size_t i : chosen) o.lost += LostWork(snap_.running[i]);
      // An owner's right is used only when it takes other groups' work.
      const bool takes_others = std::any_of(chosen.begin(), chosen.end(), [&](size_t i) {
        return GroupName(snap_.running[i].group) != group;
      });
      o.reason = owner_node && takes_others
                     ? PreemptReason::kOwner
                     : (interactive ? PreemptReason::kInteractive : PreemptReason::kGuarantee);
      if (!best || std::make_tuple(o.lost, o.victims.size(), o.node) <
                       std::make_tuple(best->lost, best->victims.size(), best->node)) {
        best = std::move(o);
      }
    }
    ++preemptors_;
    if (!best) return false;
    const NodeS& node = nodes_[static_cast<size_t>(best->node)];
    for (size_t i : best->victims) {
      const RunningJob& v = snap_.running[i];
      victims_.insert(v.attempt_id);
      int64_t milli = 0;
      for (const Holding& h : v.holdings)
        milli += h.gpu_milli * static_cast<int64_t>(h.gpu_uuids.size());
      taken_[GroupName(v.group)] += milli;
      Preemption p;
      p.attempt_id = v.attempt_id;
      p.job_id = v.job_id;
      p.for_job_id = job.job_id;
      p.reason = best->reason;
      p.lost_work_ms = LostWork(v);
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
      out_.preemptions.push_back(std::move(p));
    }
    // Hold what is free there now, so later jobs of this pass leave it alone.
    HoldFor(best->node, job.request, *FitsWithout(best->node, best->victims, job.request, allowed),
            snap_.now_ms);
    *note = "waiting for " + std::to_string(best->victims.size()) + " preempted attempt" +
            (best->victims.size() > 1 ? "s" : "") + " to checkpoint and leave node " +
            node.view->name;
    return true;
  }

  static int64_t HeldOn(const RunningJob& v, const NodeS& node) {
    int64_t milli = 0;
    for (const Holding& h : v.holdings) {
      if (h.node_id == node.view->id)
        milli += h.gpu_milli * static_cast<int64_t>(h.gpu_uuids.size());
    }
    return milli;
  }

  // The GPUs `r` would get on node n once the running jobs `victims` have
  // left; nullopt when it still does not fit.
  std::optional<std::vector<int>> FitsWithout(int n, const std::vector<size_t>& victims,
                                              const Request& r,
                                              const std::vector<char>& allowed) const {
    NodeS node = nodes_[static_cast<size_t>(n)];
    std::vector<GpuS> gpus(gpus_.begin() + node.gpu_begin, gpus_.begin() + node.gpu_end);
    for (size_t i : victims) {
      for (const Holding& h : snap_.running[i].holdings) {
        if (h.node_id != node.view->id) continue;
        node.cpu_free += h.cpu_milli;
        node.mem_free += h.memory_mib;
        for (const std::string& uuid : h.gpu_uuids) {
          const int g = GpuIndex(n, uuid) - node.gpu_begin;
          GpuS& gpu = gpus[static_cast<size_t>(g)];
          const int64_t cap = node.view->gpus[static_cast<size_t>(g)].memory_mib;
          gpu.free_milli = std::min(kFull, gpu.free_milli + h.gpu_milli);
          gpu.free_mem =
              std::min(cap, gpu.free_mem + (h.gpu_milli >= kFull ? cap : h.gpu_memory_mib));
          if (gpu.free_milli == kFull) gpu.mps_user = -1;
        }
      }
    }
    return FitOnState(node, gpus.data(), r, allowed, false);
  }

  struct Shape {
    std::string model;
    int64_t memory_mib;
    int32_t cc;
    double speed;
    int32_t mig_slices;  // a MIG instance's profile; 0 for whole GPUs
    int32_t mig_gb;
  };

  const SchedulerConfig& config_;
  const Snapshot& snap_;
  Decisions out_;

  std::vector<Shape> shapes_;
  std::vector<NodeS> nodes_;
  std::vector<GpuS> gpus_;
  std::unordered_map<std::string, int> node_index_;
  // Per shape and number of fully free GPUs (avail), the nodes in order.
  std::vector<std::vector<std::vector<int>>> whole_;
  // Per shape, GPUs partly taken: (avail milli, node, gpu).
  std::vector<std::set<std::tuple<int, int, int>>> partial_;
  int last_shape_ = 0;
  std::vector<int> mixed_;
  std::vector<int> seen_;
  int stamp_ = 0;
  std::vector<int> exclude_;

  std::unordered_map<int64_t, const PendingJob*> pending_by_id_;
  std::map<int, std::vector<size_t>> running_on_node_;
  std::map<std::string, int64_t> allocated_;
  // Users whose shares hold MPS GPUs (GpuS::mps_user), interned.
  std::map<std::string, int, std::less<>> user_index_;
  int InternUser(const std::string& user) {
    return user_index_.emplace(user, static_cast<int>(user_index_.size())).first->second;
  }
  // -2 (no GPU's) for a user not interned.
  int UserIndex(const std::string& user) const {
    auto it = user_index_.find(user);
    return it == user_index_.end() ? -2 : it->second;
  }
  std::map<std::string, GroupState> group_state_;
  std::vector<TaskType> workload_;
  std::unique_ptr<PlacementScorer> scorer_;
  Rng rng_{config_.seed};
  std::vector<double> frag_before_;  // per node: the scorer's Before(), NaN when stale
  NodeCapacity scratch_free_, scratch_cap_;
  TaskRequest scratch_task_;
  std::vector<int> scratch_gpus_;
  RequestIds placing_ids_;                                 // by request and flags
  std::vector<char> failed_;                               // by placing id
  std::vector<std::optional<Tiers>> tiers_;                // by placing id
  RequestIds static_ids_;                                  // by request alone
  std::vector<std::optional<std::string>> unsatisfiable_;  // by static id
  std::vector<std::optional<std::string>> wait_text_;      // by static id
  std::vector<Event> events_;
  std::deque<Holding> placed_holdings_;  // this pass's placements, for events_
  std::vector<int> exclude_order_;

  std::vector<int> reserved_nodes_;
  int64_t earliest_reservation_ms_ = INT64_MAX;
  int reservations_made_ = 0;

  std::set<std::string> victims_;
  std::map<std::string, int64_t> taken_;
  int preemptors_ = 0;
};

}  // namespace

Scheduler::Scheduler(SchedulerConfig config) : config_(std::move(config)) {}

Result<Decisions> Scheduler::Decide(const Snapshot& snapshot) {
  Pass pass(config_, snapshot);
  return pass.Run();
}

}  // namespace gpupool::sched
