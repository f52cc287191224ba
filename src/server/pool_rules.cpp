#include "server/pool_rules.h"

#include <algorithm>

#include "model/job_spec.h"

namespace gpupool::server {

sched::Request RequestFor(const JobSpec& spec) {
  const Resources& r = spec.resources;
  sched::Request q;
  q.nodes = std::max(r.nodes, 1);
  q.gpus = r.gpus;
  q.gpu_milli = r.gpus > 0 ? 0 : r.gpu_milli;
  q.gpu_memory_mib = r.gpu_memory_mib;
  q.min_compute_capability = r.min_compute_capability;
  q.gpu_models = r.gpu_models;
  q.preferred_models = r.preferred_models;
  q.prefer_wait_ms = r.prefer_wait_ms;
  q.node_labels = r.node_labels;
  // Only nodes that can run it the way it asks (labels their agents set).
  if (!spec.executor.empty()) q.node_labels[ExecutorLabel(spec.executor)] = "true";
  if (!spec.image.empty() && (spec.executor.empty() || spec.executor == "sandbox")) {
    q.node_labels[kImagesLabel] = "true";
  }
  q.cpu_milli = r.cpu_milli;
  q.memory_mib = r.memory_mib;
  q.mig_slices = r.mig.slices;
  q.mig_memory_gb = r.mig.memory_gb;
  return q;
}

int32_t MilliPerGpu(const Attempt& a) {
  return a.gpu_milli > 0 ? a.gpu_milli : (a.gpu_uuids.empty() ? 0 : 1000);
}
int64_t TotalMilli(const Attempt& a) {
  return int64_t{MilliPerGpu(a)} * static_cast<int64_t>(a.gpu_uuids.size()) * a.NodeCount();
}

int64_t WeightedMilli(
    const Attempt& a, const accounting::PriceBook* prices, int64_t at_ms,
    const std::function<const std::vector<GpuInfo>*(const std::string&)>& gpus_of) {
  if (prices == nullptr) return TotalMilli(a);
  const int64_t milli = MilliPerGpu(a);
  int64_t sum = 0;
  for (const NodeHolding& h : HoldingsOf(a)) {
    const std::vector<GpuInfo>* gpus = gpus_of(h.node_id);
    for (const std::string& uuid : h.gpu_uuids) {
      int64_t weight = 1000;
      if (gpus != nullptr) {
        for (const GpuInfo& g : *gpus)
          if (g.uuid == uuid) weight = prices->UsageWeightMilli(g, at_ms);
      }
      sum += milli * weight / 1000;
    }
  }
  return sum;
}

std::vector<NodeHolding> HoldingsOf(const Attempt& a) {
  if (a.ranks.empty()) return {{a.node_id, a.gpu_uuids}};
  std::vector<NodeHolding> out;
  for (const AttemptRank& r : a.ranks) out.push_back({r.node_id, r.gpu_uuids});
  return out;
}

proto::TaskReport LostReport(const std::string& attempt_id, std::string reason, int64_t now) {
  proto::TaskReport r;
  r.attempt_id = attempt_id;
  r.state = proto::TaskState::kLost;
  r.reason = std::move(reason);
  r.ts_ms = now;
  return r;
}

std::optional<AttemptEvent> AttemptEventOf(const proto::TaskReport& r) {
  using T = proto::TaskState;
  switch (r.state) {
    case T::kStarting:
      return std::nullopt;
    case T::kRunning:
      return AttemptEvent::kStarted;
    case T::kExited:
      // The shim records "stopped: ..." as the reason of anything it
      // stopped: an exit 0 with a reason or signal was stopped, not finished.
      if (r.exit_code != 0) return AttemptEvent::kExitedError;
      return r.signal == 0 && r.reason.empty() ? AttemptEvent::kExitedClean
                                               : AttemptEvent::kExitedZero;
    case T::kFailed:
      return AttemptEvent::kFailed;
    case T::kLost:
      return AttemptEvent::kLost;
    case T::kVacated:
      return AttemptEvent::kVacated;
    case T::kRefused:
      return AttemptEvent::kRefused;
  }
  return std::nullopt;  // unreachable: the decoder admits only the states above
}

AttemptTransition OrderStop(Attempt& a, AttemptEvent order, int64_t now) {
  AttemptTransition t = StepAttempt(a.state, order);
  if (!t.accepted) return t;
  a.state = t.next;
  if (order == AttemptEvent::kGangStop) {
    a.gang_stop_ms = now;
  } else {
    a.preempt_ms = now;
  }
  return t;
}

JobEvent RetryIfAllowed(const Job& job, JobEvent event) {
  bool failure = event == JobEvent::kExitedError || event == JobEvent::kAttemptFailed;
  return failure && job.restarts < job.spec.max_restarts ? JobEvent::kRetry : event;
}

bool StartHeldBack(const Job& job, const Attempt& a, const AttemptRank& r) {
  return r.rank > 0 && job.spec.distributed == Distributed::kTorch && a.master_port == 0;
}

bool EndHeldBackRanks(const Job& job, Attempt& a, int64_t now) {
  bool changed = false;
  for (AttemptRank& r : a.ranks) {
    if (!IsLive(r.state) || !StartHeldBack(job, a, r)) continue;
    r.state = AttemptState::kCancelled;
    r.reason = "never started: the gang stopped first";
    r.finished_ms = now;
    changed = true;
  }
  return changed;
}

int64_t PreemptGraceMs(const JobSpec& spec) {
  return spec.checkpoint ? spec.checkpoint->grace_ms : kDefaultStopGraceMs;
}

std::string ExitReason(const proto::TaskReport& r) {
  if (!r.reason.empty()) return r.reason;
  if (r.signal > 0) return "killed by signal " + std::to_string(r.signal);
  if (r.state == proto::TaskState::kExited && r.exit_code != 0)
    return "exited with code " + std::to_string(r.exit_code);
  return "";
}

}  // namespace gpupool::server
