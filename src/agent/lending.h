// Lender: what this machine lends right now and what must be taken back,
// from the provider's policy (agent/policy.h), the time, the GPUs' telemetry
// and the owner's commands (pause, resume, reclaim, leave).
//
// Pure and deterministic: time and telemetry are passed in. The agent feeds
// it on a timer and acts on what it says whether or not a server is
// reachable: it refuses start orders that LendingAdmits (model/node.h)
// refuses under Update's lending, and vacates what ToVacate names.
//
// Modes: lending; paused (no new work, running work goes on); leaving
// (likewise, until the agent deregisters). Outside the availability windows
// the lending's mode is "closed" and nothing is lent. `Reclaim` takes GPUs
// (or everything) back until `Resume`.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/policy.h"
#include "model/node.h"

namespace gpupool::agent {

class Lender {
 public:
  // `interposer_usable`: whether this agent has a usable libgpushare.so;
  // without one it lends whole GPUs only, whatever the policy says
  // (EffectiveSharing).
  Lender(ProviderPolicy policy, bool interposer_usable)
      : policy_(std::move(policy)), idle_(policy_), interposer_usable_(interposer_usable) {}

  // A new policy; idle-only lending starts observing afresh.
  void SetPolicy(ProviderPolicy policy);
  void SetInterposerUsable(bool usable) { interposer_usable_ = usable; }
  // How shares of a GPU are held here now (EffectiveSharing).
  GpuSharing sharing() const { return EffectiveSharing(policy_, interposer_usable_); }
  const ProviderPolicy& policy() const { return policy_; }

  void Pause() { mode_ = mode_ == "leaving" ? mode_ : "paused"; }
  // Back to lending; ends the owner's reclaims. A leaving node stays leaving.
  void Resume();
  void Leave() { mode_ = "leaving"; }
  // Takes `uuids` back (empty: every GPU, and CPU-only work too) until Resume.
  void Reclaim(const std::vector<std::string>& uuids);
  const std::string& mode() const { return mode_; }
  // Whether Update needs the GPUs' telemetry (idle-only lending).
  bool WantsTelemetry() const { return policy_.idle_for_ms > 0; }

  struct RunningTask {
    std::string attempt_id;
    std::vector<std::string> gpu_uuids;
  };

  // What is lent at `now_ms`. `telemetry` is the latest sample (used by
  // idle-only lending; GPUs without a sample are not idle); `pool_pids` the
  // processes of the pool's tasks.
  NodeLending Update(int64_t now_ms, const std::vector<GpuInfo>& gpus,
                     const std::vector<GpuTelemetry>& telemetry, const std::set<int64_t>& pool_pids,
                     const std::vector<RunningTask>& running);

  // The tasks `lending` no longer allows to run, with why: one of their GPUs
  // is not lent, or (a task without GPUs) the windows are closed or the
  // owner reclaimed the whole machine.
  std::vector<std::pair<std::string, std::string>> ToVacate(
      const NodeLending& lending, const std::vector<RunningTask>& running) const;

 private:
  ProviderPolicy policy_;
  IdleTracker idle_;
  bool interposer_usable_ = false;
  std::string mode_ = "lending";
  std::set<std::string> reclaimed_;  // GPU uuids the owner took back
  bool reclaimed_all_ = false;
};

}  // namespace gpupool::agent
