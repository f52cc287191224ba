// What a Pool transaction did besides its writes, collected while it runs
// and carried out only once it has committed (Pool::Notify) or forgotten
// when it rolls back (Pool::Discard): agents to wake for new orders, jobs
// whose watchers to wake, refusals to remember, lines to log, a pass to ask
// for. Keeping these out of the store's transaction is what lets a failed
// call change nothing.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gpupool::server {

// What a transaction did that the server's metrics count
// (PoolHooks::counted; server/metrics_api.h).
struct PoolCounts {
  int64_t placements = 0;
  int64_t preemptions = 0;
  std::vector<int64_t> queue_waits_ms;  // per placement: since submitted or requeued
  int64_t checkpoints = 0;              // accepted (a retry of the newest is not)
  int64_t checkpoint_bytes = 0;
  int64_t migrations = 0;                    // restarts from a checkpoint on another node
  std::vector<std::string> reclaim_reasons;  // a provider's reclaims, in its agent's words

  bool empty() const {
    return placements == 0 && preemptions == 0 && checkpoints == 0 && migrations == 0 &&
           reclaim_reasons.empty();
  }
};

struct PoolEffects {
  std::set<std::string> nodes;                            // nodes with new outbox orders
  std::set<int64_t> jobs;                                 // jobs that changed or got log lines
  std::vector<std::pair<int64_t, std::string>> refusals;  // job, node id that refused it
  std::vector<std::string> log_lines;                     // logged at info
  bool schedule = false;                                  // something may let a job run
  PoolCounts counts;

  void Clear() { *this = PoolEffects{}; }
};

}  // namespace gpupool::server
