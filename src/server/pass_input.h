// The scheduler's input for one pass, built from what the store holds, which
// agents are connected and what the providers lend (their nodes' lending as
// the agents report it), so that the scheduler proposes only what the agents
// would accept (LendingAdmits): a node that does not lend now is not ready,
// GPUs not lent are left out, a job its policy refuses (user, group, runtime,
// shares, host network) excludes the node, and so does a node that refused
// the job lately. Running attempts are charged to their groups' fair-share
// usage for their time so far, without being written. A pending job whose
// account is at its budget's limit is left out, with the reason.
//
// Contract: BuildPassInput is pure (its result depends on its arguments
// only) and never fails: a pending job whose stored request the scheduler
// would reject is left out and listed in `skipped` with the reason, so one
// bad record cannot stop every other job from being scheduled. ReadPoolView
// reads, in one transaction, everything a pass needs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accounting/prices.h"
#include "common/status.h"
#include "model/job.h"
#include "model/node.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace gpupool::server {

// A pending job as a pass reads it: shared with the queue in memory
// (server/pool_queue.h), so a pass over a long queue copies no job. Never
// changed in place: a pass that changes a job writes a copy.
using SharedJob = std::shared_ptr<const Job>;

// What one pass reads from the store.
struct PoolView {
  std::vector<SharedJob> pending;
  std::vector<Job> live_jobs;  // scheduled or running
  std::vector<Attempt> live_attempts;
  std::vector<Node> nodes;
  std::vector<GroupUsage> usage;
};

// The job states of PoolView::live_jobs.
inline constexpr JobState kLiveJobStates[] = {JobState::kScheduled, JobState::kRunning};
inline bool IsLiveJobState(JobState s) {
  for (JobState l : kLiveJobStates)
    if (s == l) return true;
  return false;
}

// Reads the view from the store; without `with_pending`, the pending jobs
// are left out. (The Pool reads it from memory: server/pool_queue.h.)
Result<PoolView> ReadPoolView(Tx& tx, bool with_pending);

// What BuildPassInput needs besides the view.
struct PassContext {
  int64_t now_ms = 0;
  int64_t half_life_ms = 0;  // fair-share usage decay (SchedulerConfig)
  // Whether the agent of a node is connected now.
  std::function<bool(const std::string& node_id)> connected;
  // Job -> node id -> until when the job avoids the node (it refused it).
  const std::map<int64_t, std::map<std::string, int64_t>>* refused = nullptr;
  // Accounts at their budget's limit (accounting/budgets.h) -> why: their
  // pending jobs wait, with that reason.
  std::map<std::string, std::string> held_accounts;
  // The account a job pays from (AccountingService::AccountOf); unset: its
  // group's, or its owner's without one.
  std::function<std::string(const Job&)> account_of;
  // Fair-share usage is weighted by these prices (pool_rules.h
  // WeightedMilli); nullptr: every GPU counts the same.
  const accounting::PriceBook* usage_prices = nullptr;
  // Lab -> weighted GPU-milli x ms its lending takes off its usage (never
  // below zero; --lending-fair-share).
  std::map<std::string, int64_t> lending_bonus;
  // Labels every node must carry to get work (PoolOptions), required of
  // every job as its own node_labels are.
  std::map<std::string, std::string> required_node_labels;
};

// The scheduler's input, and what the pass tells waiting jobs besides.
struct PassInput {
  sched::Snapshot snapshot;
  // Pending jobs whose request the scheduler would reject, or whose account
  // is at its budget's limit, with the reason.
  std::map<int64_t, std::string> skipped;
  // Why jobs are kept off nodes ("alpha (refused by the provider's ...)").
  std::map<int64_t, std::string> exclusions;
};

PassInput BuildPassInput(const PoolView& view, const PassContext& ctx);

// Decayed usage per group at ctx.now_ms, running attempts included.
std::map<std::string, sched::DecayedUsage> UsageNow(const PoolView& view, const PassContext& ctx);

}  // namespace gpupool::server
