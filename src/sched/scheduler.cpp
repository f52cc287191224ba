#include "sched/scheduler.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "sched/pass.h"
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

using namespace detail;

// Walks the queue in order: places each job, or says why it waits (making
// room by preemption or holding a backfill reservation where it may).
Result<Decisions> Run(Pass& pass) {
  pass.scorer = MakeScorer(pass.config.placement.name);
  if (!pass.scorer) return ParsePlacementScore(pass.config.placement.name).status();
  GP_RETURN_IF_ERROR(Build(pass));
  GP_ASSIGN_OR_RETURN(auto order, OrderJobs(pass));
  if (pass.scorer->UsesWorkload()) {
    if (pass.config.workload.empty()) {
      BuildWorkload(pass);
    } else {
      pass.workload = pass.config.workload;
    }
  }
  int placed = 0;
  pass.out.waiting.reserve(order.size());
  for (QueueEntry& entry : order) {
    const PendingJob& job = *pass.pending_by_id.at(entry.job_id);
    Waiting w;
    w.job_id = job.job_id;
    if (pass.config.max_placements > 0 && placed >= pass.config.max_placements) {
      const std::optional<WaitReason>& why = Unsatisfiable(pass, job.request);
      w.unsatisfiable = why.has_value();
      if (why) {
        w.reason = *why;
      } else {
        w.reason.kind = WaitKind::kPlacementLimit;
        w.reason.request = WaitRequestOf(job.request);
      }
    } else if (TryPlace(pass, job)) {
      ++placed;
      continue;
    } else if (const std::optional<WaitReason>& why = Unsatisfiable(pass, job.request)) {
      w.reason = *why;
      w.unsatisfiable = true;
    } else {
      w.reason = CachedWaitReason(pass, job.request);
      if (PreferenceActive(pass, job)) {
        w.reason.preferred_models = job.request.preferred_models;
        w.reason.prefer_left_ms = job.submit_ms + job.request.prefer_wait_ms - pass.snap.now_ms;
      }
      // Making room by preemption, or else holding a backfill reservation.
      if (!TryPreempt(pass, job, entry, &w.reason) &&
          pass.reservations_made < pass.config.max_reservations) {
        ++pass.reservations_made;
        if (int64_t t = Reserve(pass, job); t > 0) {
          w.reserved_start_ms = t;
          w.reason.reserved_in_ms = t - pass.snap.now_ms;
        }
      }
    }
    w.queue = std::move(entry);
    pass.out.waiting.push_back(std::move(w));
  }
  // Positions count the jobs still waiting, as a user reads them: the ones
  // placed in this pass are no longer in line.
  for (size_t i = 0; i < pass.out.waiting.size(); ++i) {
    pass.out.waiting[i].position = static_cast<int64_t>(i) + 1;
  }
  return std::move(pass.out);
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config) : config_(std::move(config)) {}

Result<Decisions> Scheduler::Decide(const Snapshot& snapshot) {
  Pass pass(config_, snapshot);
  return Run(pass);
}

Result<Decisions> Scheduler::Decide(const Snapshot& snapshot, RunContext& run) {
  Pass pass(config_, snapshot, &run.rng, EnsureScoreCache(run.cache));
  return Run(pass);
}

}  // namespace gpupool::sched
