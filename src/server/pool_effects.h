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

struct PoolEffects {
  std::set<std::string> nodes;                            // nodes with new outbox orders
  std::set<int64_t> jobs;                                 // jobs that changed or got log lines
  std::vector<std::pair<int64_t, std::string>> refusals;  // job, node id that refused it
  std::vector<std::string> log_lines;                     // logged at info
  bool schedule = false;                                  // something may let a job run

  void Clear() { *this = PoolEffects{}; }
};

}  // namespace gpupool::server
