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
  for (QueueEntry& entry : order) {
    const PendingJob& job = *pass.pending_by_id.at(entry.job_id);
    Waiting w{job.job_id, entry.position, "", std::move(entry.explanation), false, 0};
    if (pass.config.max_placements > 0 && placed >= pass.config.max_placements) {
      w.reason = Unsatisfiable(pass, job.request);
      w.unsatisfiable = !w.reason.empty();
      if (w.reason.empty()) {
        w.reason = "waiting for the next scheduling pass (placement limit reached)";
      }
      pass.out.waiting.push_back(std::move(w));
      continue;
    }
    if (TryPlace(pass, job)) {
      ++placed;
      continue;
    }
    const std::string& why = Unsatisfiable(pass, job.request);
    if (!why.empty()) {
      w.reason = why;
      w.unsatisfiable = true;
      pass.out.waiting.push_back(std::move(w));
      continue;
    }
    w.reason = CachedWaitText(pass, job.request);
    if (PreferenceActive(pass, job)) {
      w.reason += " (preferring " + ListText(job.request.preferred_models) + " for " +
                  DurationText(job.submit_ms + job.request.prefer_wait_ms - pass.snap.now_ms) +
                  " more)";
    }
    std::string preempt_note;
    if (TryPreempt(pass, job, entry, &preempt_note)) {
      w.reason = preempt_note;
    } else if (pass.reservations_made < pass.config.max_reservations) {
      ++pass.reservations_made;
      if (int64_t t = Reserve(pass, job); t > 0) {
        w.reserved_start_ms = t;
        w.reason += "; reserved: expected to start in " + DurationText(t - pass.snap.now_ms);
      }
    }
    pass.out.waiting.push_back(std::move(w));
  }
  // Positions count the jobs still waiting, as a user reads them: the ones
  // placed in this pass are no longer in line.
  for (size_t i = 0; i < pass.out.waiting.size(); ++i) {
    Waiting& w = pass.out.waiting[i];
    const std::string old = "position " + std::to_string(w.position);
    w.position = static_cast<int64_t>(i) + 1;
    if (w.explanation.compare(0, old.size(), old) == 0) {
      w.explanation.replace(0, old.size(), "position " + std::to_string(w.position));
    }
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
