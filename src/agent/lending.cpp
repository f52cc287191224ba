#include "agent/lending.h"

#include <algorithm>
#include <map>

namespace gpupool::agent {

void Lender::SetPolicy(ProviderPolicy policy) {
  policy_ = std::move(policy);
  idle_ = IdleTracker(policy_);
}

void Lender::Resume() {
  if (mode_ != "leaving") mode_ = "lending";
  reclaimed_.clear();
  reclaimed_all_ = false;
}

void Lender::Reclaim(const std::vector<std::string>& uuids) {
  if (uuids.empty()) reclaimed_all_ = true;
  reclaimed_.insert(uuids.begin(), uuids.end());
}

NodeLending Lender::Update(int64_t now_ms, const std::vector<GpuInfo>& gpus,
                           const std::vector<GpuTelemetry>& telemetry,
                           const std::set<int64_t>& pool_pids,
                           const std::vector<RunningTask>& running) {
  NodeLending l;
  l.sharing = sharing();
  l.allow_users = policy_.allow_users;
  l.deny_users = policy_.deny_users;
  l.allow_groups = policy_.allow_groups;
  l.deny_groups = policy_.deny_groups;
  l.max_runtime_ms = policy_.max_runtime_ms;
  l.host_network = policy_.allow_host_network;
  WindowState window = EvaluateWindows(policy_, now_ms);
  l.next_change_ms = window.next_change_ms.value_or(0);
  l.mode = mode_ == "lending" && !window.open ? "closed" : mode_;

  std::set<std::string> pool_gpus;
  for (const RunningTask& t : running) pool_gpus.insert(t.gpu_uuids.begin(), t.gpu_uuids.end());
  IdleTracker::Verdict idle;
  if (WantsTelemetry()) idle = idle_.Observe(now_ms, telemetry, pool_pids, pool_gpus);
  for (const GpuInfo& g : gpus) {
    std::string why;
    if (!Lends(policy_, g)) {
      why = "not lent by the policy";
    } else if (reclaimed_all_ || reclaimed_.count(g.uuid)) {
      why = "reclaimed by the owner";
    } else if (!window.open) {
      why = "outside the availability windows";
    } else if (WantsTelemetry() && !idle.lendable.count(g.uuid)) {
      // Without a sample there is no sign of the owner: pool work goes on.
      auto it = idle.why_not.find(g.uuid);
      if (it != idle.why_not.end()) {
        why = it->second;
      } else if (!pool_gpus.count(g.uuid)) {
        why = "no utilization sample yet";
      }
    }
    if (why.empty()) {
      l.gpus[g.uuid] = LentMemoryMib(policy_, g);
    } else {
      l.not_lent[g.uuid] = why;
    }
  }
  return l;
}

std::vector<std::pair<std::string, std::string>> Lender::ToVacate(
    const NodeLending& lending, const std::vector<RunningTask>& running) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const RunningTask& t : running) {
    std::string why;
    if (t.gpu_uuids.empty()) {
      if (reclaimed_all_) why = "reclaimed by the owner";
      if (lending.mode == "closed") why = "outside the availability windows";
    }
    for (const std::string& uuid : t.gpu_uuids) {
      if (lending.gpus.count(uuid)) continue;
      auto it = lending.not_lent.find(uuid);
      why = "GPU " + uuid + ": " +
            (it != lending.not_lent.end() ? it->second : std::string("no longer on this machine"));
      break;
    }
    if (!why.empty()) out.emplace_back(t.attempt_id, why);
  }
  return out;
}

}  // namespace gpupool::agent
