// MemoryStore's jobs facet (store/memory_tables.h): jobs, attempts,
// checkpoints and the groups' fair-share usage.
#include <algorithm>
#include <limits>

#include "store/memory_tables.h"

namespace gpupool {
namespace {

std::string JobMissing(int64_t id) { return "job " + std::to_string(id) + " does not exist"; }

}  // namespace

// ---- jobs

void MemoryTx::IndexJob(const Job& job, bool add) {
  std::set<int64_t>& by_state = s_.jobs_by_state[job.state];
  std::set<int64_t>& by_owner = s_.jobs_by_owner[job.owner];
  if (add) {
    j_.Insert(by_state, job.id);
    j_.Insert(by_owner, job.id);
  } else {
    j_.Remove(by_state, job.id);
    j_.Remove(by_owner, job.id);
  }
}

Result<int64_t> MemoryTx::InsertJob(const Job& job) {
  Job stored = job;
  stored.id = s_.last_job_id + 1;
  j_.Set(s_.last_job_id, stored.id);
  IndexJob(stored, true);
  if (!stored.spec.inputs.empty() && !IsTerminal(stored.state)) {
    AddStorageRef(stored, stored.spec.inputs, stored.input_bytes);
  }
  const int64_t id = stored.id;
  j_.Put(s_.jobs, id, std::move(stored));
  return id;
}

Result<std::optional<int64_t>> MemoryTx::FindSubmitKey(const std::string& owner,
                                                       const std::string& key) {
  auto it = s_.submit_keys.find({owner, key});
  if (it == s_.submit_keys.end()) return std::optional<int64_t>();
  return std::optional<int64_t>(it->second);
}

Status MemoryTx::PutSubmitKey(const std::string& owner, const std::string& key, int64_t job_id) {
  if (!s_.jobs.count(job_id)) return Status::NotFound(JobMissing(job_id));
  if (s_.submit_keys.count({owner, key})) {
    return Status::AlreadyExists("submission key " + key + " of user " + owner +
                                 " is in use already");
  }
  j_.Put(s_.submit_keys, std::make_pair(owner, key), job_id);
  return Status::Ok();
}

Status MemoryTx::UpdateJob(const Job& job) {
  auto it = s_.jobs.find(job.id);
  if (it == s_.jobs.end()) return Status::NotFound(JobMissing(job.id));
  const Job old = it->second;
  IndexJob(old, false);
  IndexJob(job, true);
  // A job's inputs stop counting when it ends (SQLite's storage_inputs_end).
  if (!old.spec.inputs.empty() && !IsTerminal(old.state) && IsTerminal(job.state)) {
    DropStorageRef(old, old.spec.inputs);
  }
  j_.Put(s_.jobs, job.id, job);
  return Status::Ok();
}

Result<std::optional<Job>> MemoryTx::GetJob(int64_t id) {
  auto it = s_.jobs.find(id);
  if (it == s_.jobs.end()) return std::optional<Job>();
  return std::optional<Job>(it->second);
}

bool MemoryTx::JobMatches(const Job& job, const JobQuery& q) const {
  if (q.owner && job.owner != *q.owner) {
    // As SQLite stores the spec, the group "default" is not written out, so
    // a job of that group is never matched by or_groups (no lab may be
    // named "default": Auth::AddGroup).
    if (job.spec.group == "default") return false;
    if (std::find(q.or_groups.begin(), q.or_groups.end(), job.spec.group) == q.or_groups.end()) {
      return false;
    }
  }
  if (!q.states.empty() &&
      std::find(q.states.begin(), q.states.end(), job.state) == q.states.end()) {
    return false;
  }
  return true;
}

// The index sets a query can walk instead of every job: the owner's jobs
// (without or_groups) or the jobs in its states, whichever holds fewer;
// none (walk every job) when neither applies.
static std::optional<std::vector<const std::set<int64_t>*>> Narrowest(const MemoryState& s,
                                                                      const JobQuery& q) {
  static const std::set<int64_t> kNone;
  std::vector<const std::set<int64_t>*> by_state;
  size_t in_states = 0;
  for (JobState st : std::set<JobState>(q.states.begin(), q.states.end())) {
    auto it = s.jobs_by_state.find(st);
    by_state.push_back(it == s.jobs_by_state.end() ? &kNone : &it->second);
    in_states += by_state.back()->size();
  }
  if (q.owner && q.or_groups.empty()) {
    auto it = s.jobs_by_owner.find(*q.owner);
    const std::set<int64_t>* owned = it == s.jobs_by_owner.end() ? &kNone : &it->second;
    // An owner's jobs in some states (a user's pending jobs, at each
    // submission): from whichever index holds fewer.
    if (q.states.empty() || owned->size() <= in_states) {
      return std::vector<const std::set<int64_t>*>{owned};
    }
  }
  if (!q.states.empty()) return by_state;
  return std::nullopt;
}

// Calls take(id) for the ids of the union of `sets` above `after_id`, by
// ascending id (descending with `newest_first`), until it returns false.
template <typename Take>
static void WalkUnion(const std::vector<const std::set<int64_t>*>& sets, int64_t after_id,
                      bool newest_first, Take take) {
  using It = std::set<int64_t>::const_iterator;
  std::vector<std::pair<It, It>> at;  // what is left of each: [lo, hi)
  for (const auto* set : sets) {
    at.emplace_back(set->upper_bound(after_id), set->end());
  }
  while (true) {
    int best = -1;
    int64_t best_id = 0;
    for (size_t i = 0; i < at.size(); ++i) {
      auto& [lo, hi] = at[i];
      if (lo == hi) continue;
      int64_t id = newest_first ? *std::prev(hi) : *lo;
      if (best < 0 || (newest_first ? id > best_id : id < best_id)) {
        best = static_cast<int>(i);
        best_id = id;
      }
    }
    if (best < 0) return;
    auto& [lo, hi] = at[static_cast<size_t>(best)];
    if (newest_first) {
      --hi;
    } else {
      ++lo;
    }
    if (!take(best_id)) return;
  }
}

Result<std::vector<Job>> MemoryTx::ListJobs(const JobQuery& q) {
  std::vector<Job> out;
  if (q.limit <= 0) return out;
  const auto limit = static_cast<size_t>(q.limit);
  auto take = [&](int64_t id) {
    const Job& job = s_.jobs.at(id);
    if ((q.before_id <= 0 || id < q.before_id) && JobMatches(job, q)) out.push_back(job);
    return out.size() < limit;
  };
  if (auto sets = Narrowest(s_, q)) {
    WalkUnion(*sets, q.after_id, q.newest_first, take);
    return out;
  }
  if (q.newest_first) {
    for (auto it = s_.jobs.rbegin();
         it != s_.jobs.rend() && it->first > q.after_id && take(it->first);) {
      ++it;
    }
  } else {
    for (auto it = s_.jobs.upper_bound(q.after_id); it != s_.jobs.end() && take(it->first);) {
      ++it;
    }
  }
  return out;
}

Result<int64_t> MemoryTx::CountJobs(const JobQuery& q) {
  int64_t n = 0;
  auto sets = Narrowest(s_, q);
  if (!q.owner && sets) {
    for (const auto* set : *sets) n += static_cast<int64_t>(set->size());  // distinct states
    return n;
  }
  if (!q.owner && q.states.empty()) return static_cast<int64_t>(s_.jobs.size());
  auto count = [&](int64_t id) {
    n += JobMatches(s_.jobs.at(id), q) ? 1 : 0;
    return true;
  };
  if (sets) {
    WalkUnion(*sets, std::numeric_limits<int64_t>::min(), false, count);
  } else {
    for (const auto& [id, job] : s_.jobs) count(id);
  }
  return n;
}

// ---- attempts

void MemoryTx::IndexAttempt(const Attempt& a, bool add) {
  MemoryState::AttemptKey key{a.job_id, a.number, a.id};
  std::set<MemoryState::AttemptKey>& by_node = s_.attempts_by_node[a.node_id];
  if (add) {
    j_.Insert(s_.attempt_order, key);
    if (IsLive(a.state)) j_.Insert(s_.live_attempts, key);
    j_.Insert(by_node, key);
  } else {
    j_.Remove(s_.attempt_order, key);
    j_.Remove(s_.live_attempts, key);
    j_.Remove(by_node, key);
  }
}

Status MemoryTx::PutAttempt(const Attempt& a) {
  if (s_.jobs.count(a.job_id) == 0) {
    return Status::NotFound("attempt " + a.id + ": " + JobMissing(a.job_id));
  }
  auto it = s_.attempts.find(a.id);
  if (it != s_.attempts.end()) IndexAttempt(it->second, false);
  IndexAttempt(a, true);
  // A gang's nodes, indexed for ListAttempts by node; never dropped (as
  // SQLite's attempt_nodes).
  for (const AttemptRank& r : a.ranks) j_.Insert(s_.attempt_nodes, std::pair(r.node_id, a.id));
  j_.Put(s_.attempts, a.id, a);
  return Status::Ok();
}

Result<std::optional<Attempt>> MemoryTx::GetAttempt(const std::string& id) {
  auto it = s_.attempts.find(id);
  if (it == s_.attempts.end()) return std::optional<Attempt>();
  return std::optional<Attempt>(it->second);
}

Result<std::vector<Attempt>> MemoryTx::ListAttempts(const AttemptQuery& q) {
  using Key = MemoryState::AttemptKey;
  std::set<Key> by_node;
  const std::set<Key>* keys = &s_.attempt_order;
  // Live attempts are few; a node's attempts grow with its history.
  if (q.node_id && !q.live_only) {
    auto it = s_.attempts_by_node.find(*q.node_id);
    if (it != s_.attempts_by_node.end()) by_node = it->second;
    for (auto r = s_.attempt_nodes.lower_bound(std::pair(*q.node_id, std::string()));
         r != s_.attempt_nodes.end() && r->first == *q.node_id; ++r) {
      const Attempt& a = s_.attempts.at(r->second);
      by_node.insert(Key{a.job_id, a.number, a.id});
    }
    keys = &by_node;
  } else if (q.live_only) {
    keys = &s_.live_attempts;
  }
  auto first = keys->begin();
  if (q.job_id) {
    first = keys->lower_bound(Key{*q.job_id, std::numeric_limits<int32_t>::min(), std::string()});
  }
  std::vector<Attempt> out;
  for (auto it = first; it != keys->end(); ++it) {
    if (q.job_id && std::get<0>(*it) != *q.job_id) break;
    const Attempt& a = s_.attempts.at(std::get<2>(*it));
    if (q.live_only && !IsLive(a.state)) continue;
    if (q.node_id && q.live_only && a.node_id != *q.node_id &&
        s_.attempt_nodes.count(std::pair(*q.node_id, a.id)) == 0) {
      continue;
    }
    out.push_back(a);
  }
  return out;
}

// ---- checkpoints

Result<Checkpoint> MemoryTx::AddCheckpoint(const Checkpoint& c) {
  auto job = s_.jobs.find(c.job_id);
  if (job == s_.jobs.end()) return Status::NotFound(JobMissing(c.job_id));
  Checkpoint out = c;
  auto seq = s_.checkpoint_seq.find(c.job_id);
  out.number = (seq == s_.checkpoint_seq.end() ? 0 : seq->second) + 1;
  j_.Put(s_.checkpoint_seq, c.job_id, out.number);
  auto m = s_.checkpoint_manifests.find(c.manifest);
  j_.Put(s_.checkpoint_manifests, c.manifest,
         (m == s_.checkpoint_manifests.end() ? 0 : m->second) + 1);
  AddStorageRef(job->second, c.manifest, c.bytes);
  j_.Put(s_.checkpoints, std::pair(out.job_id, out.number), out);
  return out;
}

Result<std::vector<Checkpoint>> MemoryTx::ListCheckpoints(int64_t job_id) {
  std::vector<Checkpoint> out;
  for (auto it = s_.checkpoints.lower_bound({job_id, std::numeric_limits<int64_t>::min()});
       it != s_.checkpoints.end() && it->first.first == job_id; ++it) {
    out.push_back(it->second);
  }
  return out;
}

Result<std::optional<Checkpoint>> MemoryTx::GetCheckpoint(int64_t job_id, int64_t number) {
  auto it = s_.checkpoints.find({job_id, number});
  if (it == s_.checkpoints.end()) return std::optional<Checkpoint>();
  return std::optional<Checkpoint>(it->second);
}

Result<std::optional<Checkpoint>> MemoryTx::LatestCheckpoint(int64_t job_id) {
  auto it = s_.checkpoints.upper_bound({job_id, std::numeric_limits<int64_t>::max()});
  if (it == s_.checkpoints.begin() || std::prev(it)->first.first != job_id) {
    return std::optional<Checkpoint>();
  }
  return std::optional<Checkpoint>(std::prev(it)->second);
}

Status MemoryTx::DeleteCheckpoint(int64_t job_id, int64_t number) {
  auto it = s_.checkpoints.find({job_id, number});
  if (it == s_.checkpoints.end()) return Status::Ok();
  const Checkpoint c = it->second;
  j_.Erase(s_.checkpoints, std::pair(job_id, number));
  const int64_t left = s_.checkpoint_manifests.at(c.manifest) - 1;
  if (left > 0) {
    j_.Put(s_.checkpoint_manifests, c.manifest, left);
  } else {
    j_.Erase(s_.checkpoint_manifests, c.manifest);
  }
  auto job = s_.jobs.find(job_id);
  if (job != s_.jobs.end()) DropStorageRef(job->second, c.manifest);
  return Status::Ok();
}

// ---- group usage

Status MemoryTx::PutGroupUsage(const GroupUsage& u) {
  j_.Put(s_.group_usage, u.group, u);
  return Status::Ok();
}

Result<std::optional<GroupUsage>> MemoryTx::GetGroupUsage(const std::string& group) {
  auto it = s_.group_usage.find(group);
  if (it == s_.group_usage.end()) return std::optional<GroupUsage>();
  return std::optional<GroupUsage>(it->second);
}

Result<std::vector<GroupUsage>> MemoryTx::ListGroupUsage() {
  std::vector<GroupUsage> out;
  for (const auto& [group, u] : s_.group_usage) out.push_back(u);
  return out;
}

}  // namespace gpupool
