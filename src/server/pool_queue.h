// PoolQueue: the Pool's store. It forwards every transaction to the real
// Store and keeps in memory what every scheduling pass needs and would
// otherwise re-read and re-parse from the store each time: the pending
// jobs, the live (scheduled or running) jobs, their live attempts and the
// nodes (a QueueCache).
//
// How it stays consistent: each transaction runs on a TrackingTx
// (server/tracking_tx.h) that records the jobs, attempts and nodes it
// writes. When the callback succeeds, those rows, and only those, are
// re-read by id inside the same transaction into a QueueDelta; the delta
// is applied to the cache once the transaction has committed and dropped
// when it rolled back. The cache is loaded from the store by the first
// transaction, and loaded again whenever it cannot be sure of it: after a
// transaction whose callback succeeded but whose commit failed, and after
// a transaction opened inside another one's callback (not the Pool's way).
// The store stays the truth: a restarted server rebuilds the cache from it.
//
// Check mode (PoolQueueOptions::check, on in the Pool's tests): after every
// transaction the cache is compared with a full ReadPoolView of the store;
// any difference is reported to `on_drift` (default: logged and the process
// aborted), then the cache is reloaded.
//
// Contract: ReadView(tx, ...) inside one of this store's transactions
// returns exactly what ReadPoolView(tx, ...) would, writes made earlier in
// the same transaction included. Fair-share usage (few rows, one per group)
// is read from the store each time. Single-threaded, like the Pool.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/pass_input.h"
#include "server/tracking_tx.h"
#include "store/store.h"

namespace gpupool::server {

// The touched rows as the transaction left them (nullopt: absent).
struct QueueDelta {
  std::vector<std::pair<int64_t, std::optional<Job>>> jobs;
  std::vector<std::pair<std::string, std::optional<Attempt>>> attempts;
  std::vector<std::pair<std::string, std::optional<Node>>> nodes;
};

// Jobs of one state, class and group (for the metrics).
struct JobCount {
  JobState state = JobState::kPending;
  JobPriority priority = JobPriority::kNormal;
  std::string group;
  int64_t count = 0;
  friend bool operator==(const JobCount&, const JobCount&) = default;
};
using JobCountKey = std::tuple<JobState, JobPriority, std::string>;
std::vector<JobCount> ToJobCounts(const std::map<JobCountKey, int64_t>& counts);

// The rows in memory, in ReadPoolView's orders (jobs by id, attempts by
// job id and number, nodes by name).
class QueueCache {
 public:
  // Replaces everything with the store's rows.
  Status Load(Tx& tx);
  // The touched rows as `tx` has them now.
  static Result<QueueDelta> ReadTouched(Tx& tx, const TouchedRows& touched);
  void Apply(const QueueDelta& delta);
  // A PoolView without usage; without `with_pending`, no pending jobs;
  // without `with_jobs`, no jobs at all (the nodes and live attempts).
  PoolView View(bool with_pending, bool with_jobs = true) const;

  size_t pending() const { return pending_.size(); }
  // Whether job `id` is pending or live here.
  bool HoldsJob(int64_t id) const { return pending_.count(id) + live_jobs_.count(id) > 0; }
  // The pending and live jobs by state, class and group.
  std::vector<JobCount> CountJobs() const;

 private:
  using AttemptKey = std::tuple<int64_t, int32_t, std::string>;  // job id, number, id
  void PutJob(int64_t id, const std::optional<Job>& job);
  void PutAttempt(const std::string& id, const std::optional<Attempt>& attempt);
  void PutNode(const std::string& id, const std::optional<Node>& node);

  std::map<int64_t, SharedJob> pending_;  // shared with the views (PoolView)
  std::map<int64_t, Job> live_jobs_;
  std::map<AttemptKey, Attempt> attempts_;
  std::map<std::string, AttemptKey> attempt_key_;  // attempt id -> key
  std::map<std::string, Node> nodes_;              // by name
  std::map<std::string, std::string> node_name_;   // node id -> name
};

// The first difference between two views ("" when they are equal), usage
// left out.
std::string DescribeViewDifference(const PoolView& cached, const PoolView& stored);

struct PoolQueueOptions {
  bool check = false;
  // Called with what differs when the check finds the cache has drifted.
  // Unset: logged at error and the process aborts.
  std::function<void(const std::string& difference)> on_drift;
};

class PoolQueue final : public Store {
 public:
  PoolQueue(Store& store, PoolQueueOptions options);

  Status Transact(const std::function<Status(Tx&)>& fn) override;

  // What ReadPoolView(tx, with_pending) would return, from memory. `tx`
  // must be the one this store passed to the running callback; any other
  // is read in full from the store.
  Result<PoolView> ReadView(Tx& tx, bool with_pending);
  // Only the nodes and the live attempts of that view (no jobs, no usage):
  // what listing the nodes needs.
  Result<PoolView> ReadNodesView(Tx& tx);

  // Forgets the cache; the next transaction loads it again.
  void Invalidate() { loaded_ = false; }
  bool loaded() const { return loaded_; }
  // Loads (if needed) and compares the cache with the store now, as the
  // check mode does after every transaction.
  Status Check();

  // The pending and live jobs by state, class and group, from memory
  // (loaded first if need be).
  Result<std::vector<JobCount>> LiveJobCounts();
  // Jobs that became terminal (succeeded, failed, cancelled) through this
  // store since it was made, by state, class and group: a job the cache
  // held as pending or live whose committed row is terminal. A transaction
  // whose commit left the cache unsure (it is loaded again) is not counted.
  std::vector<JobCount> FinishedJobCounts() const { return ToJobCounts(finished_); }

 private:
  Status EnsureLoaded();
  // The view from the cache, inside the running transaction.
  Result<PoolView> CachedView(bool with_pending, bool with_jobs);

  Store& store_;
  PoolQueueOptions options_;
  QueueCache cache_;
  bool loaded_ = false;
  TrackingTx* current_ = nullptr;  // the running transaction's
  std::map<JobCountKey, int64_t> finished_;
};

}  // namespace gpupool::server
