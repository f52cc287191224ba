// Helpers shared by the files of the Store conformance suite
// (store/store_conformance.h): assertions on Status and Result; InTx,
// which runs one function in its own transaction; and the jobs, attempts,
// nodes, log lines and checkpoints the tests store. For the suite's sources
// only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/job_spec.h"
#include "store/store.h"

namespace gpupool::conformance {

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

#define CONF_EXPECT_OK(expr)                                             \
  do {                                                                   \
    const auto& conf_v_ = (expr);                                        \
    EXPECT_TRUE(StatusOf(conf_v_).ok()) << StatusOf(conf_v_).ToString(); \
  } while (0)

#define CONF_ASSERT_OK(expr)                                             \
  do {                                                                   \
    const auto& conf_v_ = (expr);                                        \
    ASSERT_TRUE(StatusOf(conf_v_).ok()) << StatusOf(conf_v_).ToString(); \
  } while (0)

#define CONF_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  CONF_ASSERT_OK_AND_ASSIGN_IMPL_(GP_CONCAT_(conf_r_, __LINE__), lhs, expr)
#define CONF_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();     \
  lhs = std::move(tmp).value()

template <typename T>
struct IsResult : std::false_type {};
template <typename T>
struct IsResult<Result<T>> : std::true_type {};

// Runs `fn(tx)` in its own transaction and returns its result: a Result<T>
// for functions returning one (committed when OK), a Status otherwise.
template <typename F>
auto InTx(Store& store, F&& fn) {
  using R = std::invoke_result_t<F&, Tx&>;
  if constexpr (IsResult<R>::value) {
    std::optional<R> out;
    Status st = store.Transact([&](Tx& tx) {
      out.emplace(fn(tx));
      return out->ok() ? Status::Ok() : out->status();
    });
    if (!st.ok()) return R(st);
    return std::move(*out);
  } else {
    return store.Transact([&](Tx& tx) { return fn(tx); });
  }
}

// ---- records and queries the suite's files share

inline JobSpec RunSpec() {
  JobSpec s;
  s.name = "train-1";
  s.run = "python train.py --epochs 3 && echo 'done'";
  s.env = {{"A", "1"}, {"DATA_DIR", "/data/x y"}, {"UNICODE", "h\xC3\xA9llo"}};
  s.resources.gpus = 2;
  s.resources.gpu_memory_mib = 24 * 1024;
  s.resources.gpu_models = {"A100", "H100"};
  s.resources.cpu_milli = 4500;
  s.resources.memory_mib = 64 * 1024;
  s.max_runtime_ms = 2 * 3600 * 1000;
  return s;
}

// A share of a GPU with every scheduling field set.
inline JobSpec ShareSpec() {
  JobSpec s;
  s.name = "notebook";
  s.run = "jupyter lab";
  s.resources.gpu_milli = 250;
  s.resources.gpu_memory_mib = 10 * 1024;
  s.resources.min_compute_capability = 86;
  s.resources.gpu_models = {"A100", "L40S"};
  s.resources.preferred_models = {"L40S"};
  s.resources.prefer_wait_ms = 600'000;
  s.resources.node_labels = {{"rack", "3"}, {"net", "ib"}};
  s.priority = JobPriority::kInteractive;
  s.group = "vision";
  s.checkpoint = CheckpointSpec{1'800'000, 60'000, "SIGUSR2"};
  return s;
}

inline JobSpec CommandSpec() {
  JobSpec s;
  s.name = "eval";
  s.command = {"python", "-c", "print('hi')", ""};
  s.resources.cpu_milli = 500;
  s.resources.memory_mib = 1024;
  return s;
}

inline Job MakeJob(std::string owner, JobSpec spec, JobState state = JobState::kPending) {
  Job j;
  j.owner = std::move(owner);
  j.spec = std::move(spec);
  j.state = state;
  j.created_ms = 1'700'000'000'000;
  j.updated_ms = 1'700'000'000'500;
  return j;
}

inline Attempt MakeAttempt(int64_t job_id, int32_t number, std::string node_id,
                           AttemptState state) {
  Attempt a;
  a.id = MakeAttemptId(job_id, number);
  a.job_id = job_id;
  a.number = number;
  a.node_id = std::move(node_id);
  a.state = state;
  a.created_ms = 1000 + number;
  return a;
}

inline Node MakeNode(std::string id, std::string name) {
  Node n;
  n.id = std::move(id);
  n.name = std::move(name);
  n.state = NodeState::kReady;
  n.cpu_milli = 16000;
  n.memory_mib = 128 * 1024;
  n.driver_version = "550.54.15";
  n.cuda_version = "12.4";
  n.agent_version = "0.1.0";
  n.registered_ms = 5;
  n.last_seen_ms = 6;
  return n;
}

inline LogLine Line(std::string attempt_id, int64_t offset, std::string text,
                    std::string stream = "stdout") {
  LogLine l;
  l.attempt_id = std::move(attempt_id);
  l.offset = offset;
  l.stream = std::move(stream);
  l.ts_ms = 100 + offset;
  l.text = std::move(text);
  return l;
}

inline std::vector<int64_t> Ids(const std::vector<Job>& jobs) {
  std::vector<int64_t> ids;
  for (const Job& j : jobs) ids.push_back(j.id);
  return ids;
}

inline std::vector<std::string> AttemptIds(const std::vector<Attempt>& as) {
  std::vector<std::string> ids;
  for (const Attempt& a : as) ids.push_back(a.id);
  return ids;
}

// Query builders (designated initializers trip -Wmissing-field-initializers).
struct JQ {
  JobQuery q;
  JQ& Owner(std::string o) {
    q.owner = std::move(o);
    return *this;
  }
  JQ& OrGroups(std::vector<std::string> g) {
    q.or_groups = std::move(g);
    return *this;
  }
  JQ& States(std::vector<JobState> s) {
    q.states = std::move(s);
    return *this;
  }
  JQ& After(int64_t id) {
    q.after_id = id;
    return *this;
  }
  JQ& Before(int64_t id) {
    q.before_id = id;
    return *this;
  }
  JQ& Limit(int32_t n) {
    q.limit = n;
    return *this;
  }
  JQ& NewestFirst() {
    q.newest_first = true;
    return *this;
  }
  operator JobQuery() const { return q; }  // NOLINT: implicit by design
};

struct AQ {
  AttemptQuery q;
  AQ& Job(int64_t id) {
    q.job_id = id;
    return *this;
  }
  AQ& Node(std::string id) {
    q.node_id = std::move(id);
    return *this;
  }
  AQ& LiveOnly() {
    q.live_only = true;
    return *this;
  }
  operator AttemptQuery() const { return q; }  // NOLINT: implicit by design
};

// Inserts `job` in its own transaction and returns it with its id.
inline Result<Job> Insert(Store& store, Job job) {
  auto id = InTx(store, [&](Tx& tx) { return tx.InsertJob(job); });
  if (!id.ok()) return id.status();
  job.id = *id;
  return job;
}

inline Checkpoint MakeCheckpoint(int64_t job_id, std::string attempt_id, char manifest_digit,
                                 int64_t created_ms) {
  Checkpoint c;
  c.job_id = job_id;
  c.attempt_id = std::move(attempt_id);
  c.manifest = std::string(64, manifest_digit);
  c.created_ms = created_ms;
  c.bytes = 1000 * created_ms;
  c.files = created_ms % 7;
  return c;
}

inline std::vector<int64_t> Numbers(const std::vector<Checkpoint>& cs) {
  std::vector<int64_t> out;
  for (const Checkpoint& c : cs) out.push_back(c.number);
  return out;
}

}  // namespace gpupool::conformance
