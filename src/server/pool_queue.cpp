#include "server/pool_queue.h"

#include <cstdlib>

#include "common/log.h"

namespace gpupool::server {
namespace {

std::string IdOf(const Job& j) { return "job " + std::to_string(j.id); }
std::string IdOf(const Attempt& a) { return "attempt " + a.id; }
std::string IdOf(const Node& n) { return "node " + n.id + " (" + n.name + ")"; }

// What differs between two rows of the same id, for people.
std::string FieldsOf(const Job& c, const Job& s) {
  std::string out;
  auto field = [&](const char* name, bool same) {
    if (!same) out += std::string(out.empty() ? "" : ", ") + name;
  };
  field("state", c.state == s.state);
  field("reason", c.reason == s.reason);
  field("current_attempt", c.current_attempt == s.current_attempt);
  field("attempts", c.attempts == s.attempts);
  field("front", c.front == s.front);
  field("spec", c.spec == s.spec);
  field("updated_ms", c.updated_ms == s.updated_ms);
  return out.empty() ? "other fields" : out;
}
std::string FieldsOf(const Attempt& c, const Attempt& s) {
  std::string out = c.state != s.state ? "state" : "";
  if (c.preempt_ms != s.preempt_ms) out += out.empty() ? "preempt_ms" : ", preempt_ms";
  if (c.ranks != s.ranks) out += out.empty() ? "ranks" : ", ranks";
  return out.empty() ? "other fields" : out;
}
std::string FieldsOf(const Node& c, const Node& s) {
  std::string out = c.state != s.state ? "state" : "";
  if (c.lending != s.lending) out += out.empty() ? "lending" : ", lending";
  if (c.gpus != s.gpus) out += out.empty() ? "gpus" : ", gpus";
  return out.empty() ? "other fields" : out;
}

template <typename T>
std::string ListDifference(const char* what, const std::vector<T>& cached,
                           const std::vector<T>& stored) {
  for (size_t i = 0; i < cached.size() && i < stored.size(); ++i) {
    if (cached[i] == stored[i]) continue;
    if (IdOf(cached[i]) != IdOf(stored[i])) {
      return std::string(what) + " #" + std::to_string(i) + ": the cache has " + IdOf(cached[i]) +
             ", the store " + IdOf(stored[i]);
    }
    return std::string(what) + ": " + IdOf(cached[i]) + " differs (" +
           FieldsOf(cached[i], stored[i]) + ")";
  }
  if (cached.size() != stored.size()) {
    const std::vector<T>& longer = cached.size() > stored.size() ? cached : stored;
    return std::string(what) + ": the cache has " + std::to_string(cached.size()) + ", the store " +
           std::to_string(stored.size()) +
           " (first extra: " + IdOf(longer[std::min(cached.size(), stored.size())]) + " in the " +
           (cached.size() > stored.size() ? "cache" : "store") + ")";
  }
  return "";
}

}  // namespace

// ---- QueueCache

Status QueueCache::Load(Tx& tx) {
  GP_ASSIGN_OR_RETURN(PoolView v, ReadPoolView(tx, true));
  *this = QueueCache{};
  for (SharedJob& j : v.pending) pending_.emplace(j->id, std::move(j));
  for (Job& j : v.live_jobs) live_jobs_.emplace(j.id, std::move(j));
  for (Attempt& a : v.live_attempts) {
    std::string id = a.id;  // not a reference to what is moved
    PutAttempt(id, std::move(a));
  }
  for (Node& n : v.nodes) {
    std::string id = n.id;
    PutNode(id, std::move(n));
  }
  return Status::Ok();
}

Result<QueueDelta> QueueCache::ReadTouched(Tx& tx, const TouchedRows& touched) {
  QueueDelta d;
  for (int64_t id : touched.jobs) {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(id));
    d.jobs.emplace_back(id, std::move(job));
  }
  for (const std::string& id : touched.attempts) {
    GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(id));
    d.attempts.emplace_back(id, std::move(attempt));
  }
  for (const std::string& id : touched.nodes) {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(id));
    d.nodes.emplace_back(id, std::move(node));
  }
  return d;
}

void QueueCache::Apply(const QueueDelta& delta) {
  for (const auto& [id, job] : delta.jobs) PutJob(id, job);
  for (const auto& [id, attempt] : delta.attempts) PutAttempt(id, attempt);
  for (const auto& [id, node] : delta.nodes) PutNode(id, node);
}

std::vector<JobCount> ToJobCounts(const std::map<JobCountKey, int64_t>& counts) {
  std::vector<JobCount> out;
  for (const auto& [key, n] : counts)
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), n});
  return out;
}

std::vector<JobCount> QueueCache::CountJobs() const {
  std::map<JobCountKey, int64_t> counts;
  for (const auto& [id, job] : pending_)
    ++counts[{job->state, job->spec.priority, job->spec.group}];
  for (const auto& [id, job] : live_jobs_) ++counts[{job.state, job.spec.priority, job.spec.group}];
  return ToJobCounts(counts);
}

void QueueCache::PutJob(int64_t id, const std::optional<Job>& job) {
  pending_.erase(id);
  live_jobs_.erase(id);
  if (!job) return;
  if (job->state == JobState::kPending) {
    pending_.insert_or_assign(id, std::make_shared<const Job>(*job));
  } else if (IsLiveJobState(job->state)) {
    live_jobs_.insert_or_assign(id, *job);
  }
}

void QueueCache::PutAttempt(const std::string& id, const std::optional<Attempt>& attempt) {
  if (auto k = attempt_key_.find(id); k != attempt_key_.end()) {
    attempts_.erase(k->second);
    attempt_key_.erase(k);
  }
  if (!attempt || !IsLive(attempt->state)) return;
  AttemptKey key{attempt->job_id, attempt->number, id};
  attempts_.insert_or_assign(key, *attempt);
  attempt_key_.emplace(id, std::move(key));
}

void QueueCache::PutNode(const std::string& id, const std::optional<Node>& node) {
  if (auto n = node_name_.find(id); n != node_name_.end()) {
    nodes_.erase(n->second);
    node_name_.erase(n);
  }
  if (!node) return;
  nodes_.insert_or_assign(node->name, *node);
  node_name_.emplace(id, node->name);
}

PoolView QueueCache::View(bool with_pending, bool with_jobs) const {
  PoolView v;
  if (with_pending && with_jobs) {
    v.pending.reserve(pending_.size());
    for (const auto& [id, j] : pending_) v.pending.push_back(j);
  }
  if (with_jobs) {
    v.live_jobs.reserve(live_jobs_.size());
    for (const auto& [id, j] : live_jobs_) v.live_jobs.push_back(j);
  }
  v.live_attempts.reserve(attempts_.size());
  for (const auto& [key, a] : attempts_) v.live_attempts.push_back(a);
  v.nodes.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) v.nodes.push_back(n);
  return v;
}

std::string DescribeViewDifference(const PoolView& cached, const PoolView& stored) {
  auto rows = [](const std::vector<SharedJob>& jobs) {
    std::vector<Job> out;
    for (const SharedJob& j : jobs) out.push_back(*j);
    return out;
  };
  std::string d = ListDifference("pending jobs", rows(cached.pending), rows(stored.pending));
  if (d.empty()) d = ListDifference("live jobs", cached.live_jobs, stored.live_jobs);
  if (d.empty()) d = ListDifference("live attempts", cached.live_attempts, stored.live_attempts);
  if (d.empty()) d = ListDifference("nodes", cached.nodes, stored.nodes);
  return d;
}

// ---- PoolQueue

PoolQueue::PoolQueue(Store& store, PoolQueueOptions options)
    : store_(store), options_(std::move(options)) {}

Status PoolQueue::EnsureLoaded() {
  if (loaded_) return Status::Ok();
  QueueCache fresh;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) { return fresh.Load(tx); }));
  cache_ = std::move(fresh);
  loaded_ = true;
  return Status::Ok();
}

Result<std::vector<JobCount>> PoolQueue::LiveJobCounts() {
  GP_RETURN_IF_ERROR(EnsureLoaded());
  return cache_.CountJobs();
}

Status PoolQueue::Transact(const std::function<Status(Tx&)>& fn) {
  if (current_ != nullptr) {
    // A transaction inside another's callback (not the Pool's way): its
    // writes are not tracked, so the cache is read again afterwards.
    loaded_ = false;
    return store_.Transact(fn);
  }
  GP_RETURN_IF_ERROR(EnsureLoaded());
  std::optional<QueueDelta> staged;
  bool callback_ok = false;
  Status s = store_.Transact([&](Tx& inner) -> Status {
    TrackingTx tx(inner);
    current_ = &tx;
    struct Reset {  // also when the callback throws (the store rolls back)
      TrackingTx*& current;
      ~Reset() { current = nullptr; }
    } reset{current_};
    Status st = fn(tx);
    if (!st.ok()) return st;
    callback_ok = true;
    if (tx.touched().empty()) return Status::Ok();
    GP_ASSIGN_OR_RETURN(staged, QueueCache::ReadTouched(inner, tx.touched()));
    return Status::Ok();
  });
  if (!s.ok()) {
    // Rolled back: the staged rows are dropped. If the callback succeeded,
    // the commit (or the re-read) failed; the cache was not changed, but
    // it is loaded again to be sure.
    if (callback_ok) loaded_ = false;
    return s;
  }
  if (staged) {
    for (const auto& [id, job] : staged->jobs) {
      if (job && IsTerminal(job->state) && cache_.HoldsJob(id))
        ++finished_[{job->state, job->spec.priority, job->spec.group}];
    }
    cache_.Apply(*staged);
  }
  if (options_.check) {
    if (Status c = Check(); !c.ok()) {
      if (options_.on_drift) {
        options_.on_drift(c.message());
      } else {
        GP_LOG(kError) << c.message();
        std::abort();
      }
      loaded_ = false;
    }
  }
  return s;
}

Status PoolQueue::Check() {
  GP_RETURN_IF_ERROR(EnsureLoaded());
  PoolView stored;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(stored, ReadPoolView(tx, true));
    return Status::Ok();
  }));
  std::string d = DescribeViewDifference(cache_.View(true), stored);
  if (d.empty()) return Status::Ok();
  return Status::Internal("the pool's queue in memory differs from the store: " + d);
}

Result<PoolView> PoolQueue::ReadView(Tx& tx, bool with_pending) {
  if (current_ == nullptr || &tx != current_ || !loaded_) return ReadPoolView(tx, with_pending);
  GP_ASSIGN_OR_RETURN(PoolView v, CachedView(with_pending, /*with_jobs=*/true));
  GP_ASSIGN_OR_RETURN(v.usage, tx.ListGroupUsage());
  return v;
}

Result<PoolView> PoolQueue::ReadNodesView(Tx& tx) {
  if (current_ == nullptr || &tx != current_ || !loaded_) {
    GP_ASSIGN_OR_RETURN(PoolView v, ReadPoolView(tx, /*with_pending=*/false));
    v.live_jobs.clear();
    v.usage.clear();
    return v;
  }
  return CachedView(/*with_pending=*/false, /*with_jobs=*/false);
}

Result<PoolView> PoolQueue::CachedView(bool with_pending, bool with_jobs) {
  if (current_->touched().empty()) return cache_.View(with_pending, with_jobs);
  // Earlier writes of this transaction: the cache as they leave it.
  GP_ASSIGN_OR_RETURN(QueueDelta d,
                      QueueCache::ReadTouched(current_->inner(), current_->touched()));
  QueueCache overlay = cache_;
  overlay.Apply(d);
  return overlay.View(with_pending, with_jobs);
}

}  // namespace gpupool::server
