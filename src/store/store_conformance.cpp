#include "store/store_conformance.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/store_conformance_testing.h"

namespace gpupool {

std::string StoreBackendName(const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param.name;
}

void StoreConformanceTest::SetUp() {
  std::string tmpl = ::testing::TempDir() + "gpupool-store-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
  dir_ = tmpl;
  auto s = GetParam().open(dir_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(s).value();
}

void StoreConformanceTest::TearDown() {
  store_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void StoreConformanceTest::Reopen() {
  store_.reset();
  auto s = GetParam().open(dir_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(s).value();
}

namespace {

// ---- helpers (StatusOf, the CONF_ macros and InTx: store/store_conformance_testing.h)

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

JobSpec RunSpec() {
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
JobSpec ShareSpec() {
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

JobSpec CommandSpec() {
  JobSpec s;
  s.name = "eval";
  s.command = {"python", "-c", "print('hi')", ""};
  s.resources.cpu_milli = 500;
  s.resources.memory_mib = 1024;
  return s;
}

Job MakeJob(std::string owner, JobSpec spec, JobState state = JobState::kPending) {
  Job j;
  j.owner = std::move(owner);
  j.spec = std::move(spec);
  j.state = state;
  j.created_ms = 1'700'000'000'000;
  j.updated_ms = 1'700'000'000'500;
  return j;
}

Attempt MakeAttempt(int64_t job_id, int32_t number, std::string node_id, AttemptState state) {
  Attempt a;
  a.id = MakeAttemptId(job_id, number);
  a.job_id = job_id;
  a.number = number;
  a.node_id = std::move(node_id);
  a.state = state;
  a.created_ms = 1000 + number;
  return a;
}

Node MakeNode(std::string id, std::string name) {
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

LogLine Line(std::string attempt_id, int64_t offset, std::string text,
             std::string stream = "stdout") {
  LogLine l;
  l.attempt_id = std::move(attempt_id);
  l.offset = offset;
  l.stream = std::move(stream);
  l.ts_ms = 100 + offset;
  l.text = std::move(text);
  return l;
}

std::vector<int64_t> Ids(const std::vector<Job>& jobs) {
  std::vector<int64_t> ids;
  for (const Job& j : jobs) ids.push_back(j.id);
  return ids;
}

std::vector<std::string> AttemptIds(const std::vector<Attempt>& as) {
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
Result<Job> Insert(Store& store, Job job) {
  auto id = InTx(store, [&](Tx& tx) { return tx.InsertJob(job); });
  if (!id.ok()) return id.status();
  job.id = *id;
  return job;
}

}  // namespace

// ---------------------------------------------------------------------------
// Jobs

TEST_P(StoreConformanceTest, InsertJobAssignsAscendingIdsFromOne) {
  std::vector<int64_t> ids;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    for (int i = 0; i < 3; ++i) {
      Job j = MakeJob("alice", RunSpec());
      j.id = 77;  // ignored: the store assigns ids
      GP_ASSIGN_OR_RETURN(int64_t id, tx.InsertJob(j));
      ids.push_back(id);
    }
    return Status::Ok();
  }));
  CONF_ASSERT_OK_AND_ASSIGN(Job fourth, Insert(store(), MakeJob("bob", CommandSpec())));
  ids.push_back(fourth.id);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3, 4}));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetJob(1); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->id, 1);
  CONF_ASSERT_OK_AND_ASSIGN(auto none, InTx(store(), [](Tx& tx) { return tx.GetJob(77); }));
  EXPECT_FALSE(none.has_value());
}

TEST_P(StoreConformanceTest, JobRoundTripsEveryField) {
  Job a = MakeJob("alice", RunSpec(), JobState::kSucceeded);
  a.reason = "exited with code 0";
  a.exit_code = 0;
  a.attempts = 2;
  a.started_ms = 1'700'000'001'000;
  a.finished_ms = 1'700'000'009'000;
  Job b = MakeJob("bob@example.org", CommandSpec(), JobState::kRunning);
  b.input_bytes = 123'456'789'012;
  b.spec.inputs = std::string(64, 'c');
  b.reason = "";
  b.exit_code = std::nullopt;
  b.attempts = 1;
  b.current_attempt = "2.1";
  b.started_ms = 42;
  Job c = MakeJob("carol", RunSpec(), JobState::kFailed);
  c.exit_code = -9;
  c.reason = "killed: \"OOM\"\nsecond line";
  Job d = MakeJob("dave", ShareSpec(), JobState::kPending);
  d.attempts = 3;
  d.restarts = 2;
  d.spec.max_restarts = 5;
  d.last_preempted_ms = 1'700'000'002'000;
  d.front = true;
  Job e = MakeJob("erin", ShareSpec(), JobState::kPending);
  e.last_preempted_ms = 0;  // preempted at time 0 is not "never"
  std::vector<Job> jobs;
  for (Job j : {a, b, c, d, e}) {
    CONF_ASSERT_OK_AND_ASSIGN(Job stored, Insert(store(), j));
    jobs.push_back(stored);
  }
  auto check = [&] {
    for (const Job& want : jobs) {
      CONF_ASSERT_OK_AND_ASSIGN(auto got,
                                InTx(store(), [&](Tx& tx) { return tx.GetJob(want.id); }));
      ASSERT_TRUE(got.has_value()) << want.id;
      EXPECT_EQ(*got, want) << "job " << want.id;
    }
    CONF_ASSERT_OK_AND_ASSIGN(auto listed,
                              InTx(store(), [](Tx& tx) { return tx.ListJobs(JobQuery{}); }));
    EXPECT_EQ(listed, jobs);
  };
  check();
  Reopen();
  check();
}

TEST_P(StoreConformanceTest, UpdateJobReplacesEveryField) {
  Job a = MakeJob("alice", RunSpec(), JobState::kFailed);
  a.exit_code = 3;
  CONF_ASSERT_OK_AND_ASSIGN(a, Insert(store(), a));
  CONF_ASSERT_OK_AND_ASSIGN(Job other, Insert(store(), MakeJob("bob", RunSpec())));

  Job changed = a;
  changed.owner = "alice2";
  changed.spec = CommandSpec();
  changed.state = JobState::kPending;
  changed.reason = "requeued";
  changed.exit_code = std::nullopt;
  changed.attempts = 5;
  changed.current_attempt = "1.5";
  changed.created_ms = 1;
  changed.updated_ms = 2;
  changed.started_ms = 3;
  changed.finished_ms = 4;
  changed.last_preempted_ms = 5;
  changed.front = true;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.UpdateJob(changed); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [&](Tx& tx) { return tx.GetJob(a.id); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, changed);
  // The other job is untouched.
  CONF_ASSERT_OK_AND_ASSIGN(auto got_other,
                            InTx(store(), [&](Tx& tx) { return tx.GetJob(other.id); }));
  ASSERT_TRUE(got_other.has_value());
  EXPECT_EQ(*got_other, other);

  changed.exit_code = 0;
  changed.state = JobState::kSucceeded;
  changed.last_preempted_ms = std::nullopt;
  changed.front = false;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.UpdateJob(changed); }));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [&](Tx& tx) { return tx.GetJob(a.id); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->exit_code, std::optional<int32_t>(0));
  EXPECT_EQ(*got, changed);
}

TEST_P(StoreConformanceTest, UpdateMissingJobIsNotFound) {
  Job ghost = MakeJob("alice", RunSpec());
  ghost.id = 12345;
  Status st = InTx(store(), [&](Tx& tx) { return tx.UpdateJob(ghost); });
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  CONF_ASSERT_OK_AND_ASSIGN(auto listed,
                            InTx(store(), [](Tx& tx) { return tx.ListJobs(JobQuery{}); }));
  EXPECT_TRUE(listed.empty());
}

TEST_P(StoreConformanceTest, ListJobsFiltersPagesAndOrders) {
  std::vector<Job> all;
  for (int i = 0; i < 12; ++i) {
    JobState state = kAllJobStates[i % std::size(kAllJobStates)];
    JobSpec spec = RunSpec();
    spec.group = i % 4 == 0 ? "vision" : (i % 4 == 1 ? "nlp" : "default");
    CONF_ASSERT_OK_AND_ASSIGN(Job j,
                              Insert(store(), MakeJob(i % 3 == 0 ? "bob" : "alice", spec, state)));
    all.push_back(j);
  }
  auto expect = [&](const JobQuery& q) {
    std::vector<int64_t> want;
    for (const Job& j : all) {
      if (j.id <= q.after_id) continue;
      bool in_group =
          std::find(q.or_groups.begin(), q.or_groups.end(), j.spec.group) != q.or_groups.end();
      if (q.owner && j.owner != *q.owner && !in_group) continue;
      if (!q.states.empty() &&
          std::find(q.states.begin(), q.states.end(), j.state) == q.states.end()) {
        continue;
      }
      want.push_back(j.id);
    }
    if (q.newest_first) std::reverse(want.begin(), want.end());
    if (want.size() > static_cast<size_t>(q.limit)) want.resize(static_cast<size_t>(q.limit));
    return want;
  };
  auto list = [&](const JobQuery& q) -> std::vector<int64_t> {
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListJobs(q); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? Ids(*r) : std::vector<int64_t>{};
  };

  std::vector<JobQuery> queries;
  queries.push_back({});
  queries.push_back(JQ().Owner("alice"));
  queries.push_back(JQ().Owner("bob"));
  queries.push_back(JQ().Owner("nobody"));
  queries.push_back(JQ().States({JobState::kPending}));
  queries.push_back(JQ().States({JobState::kRunning, JobState::kFailed}));
  queries.push_back(
      JQ().States({JobState::kCancelled, JobState::kScheduled, JobState::kSucceeded}));
  queries.push_back(JQ().Owner("alice").States({JobState::kPending, JobState::kRunning}));
  queries.push_back(JQ().After(4));
  queries.push_back(JQ().After(12));
  queries.push_back(JQ().Limit(3));
  queries.push_back(JQ().Owner("alice").After(5).Limit(2));
  queries.push_back(JQ().NewestFirst());
  queries.push_back(JQ().Limit(3).NewestFirst());
  queries.push_back(JQ().Owner("bob").NewestFirst());
  queries.push_back(JQ().States({JobState::kPending, JobState::kFailed}).Limit(1).NewestFirst());
  queries.push_back(JQ().After(6).Limit(2).NewestFirst());
  queries.push_back(JQ().Owner("bob").OrGroups({"vision"}));
  queries.push_back(JQ().Owner("nobody").OrGroups({"vision", "nlp"}).States({JobState::kPending}));
  queries.push_back(JQ().Owner("bob").OrGroups({"nlp"}).Limit(2).NewestFirst());
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(list(queries[i]), expect(queries[i])) << "query #" << i;
    // CountJobs counts what the query selects, whatever its paging.
    JobQuery unpaged = queries[i];
    unpaged.after_id = 0;
    unpaged.limit = 1000;
    auto n = InTx(store(), [&](Tx& tx) { return tx.CountJobs(queries[i]); });
    CONF_ASSERT_OK(n);
    EXPECT_EQ(*n, static_cast<int64_t>(expect(unpaged).size())) << "count of query #" << i;
  }

  // Paging with after_id visits every job exactly once, in order.
  std::vector<int64_t> paged;
  JobQuery page = JQ().Limit(5);
  while (true) {
    std::vector<int64_t> ids = list(page);
    if (ids.empty()) break;
    paged.insert(paged.end(), ids.begin(), ids.end());
    page.after_id = ids.back();
  }
  EXPECT_EQ(paged, expect(JobQuery{}));

  // Listed jobs are complete, not just ids.
  CONF_ASSERT_OK_AND_ASSIGN(auto listed,
                            InTx(store(), [](Tx& tx) { return tx.ListJobs(JQ().Owner("bob")); }));
  ASSERT_FALSE(listed.empty());
  EXPECT_EQ(listed[0], all[0]);
}

TEST_P(StoreConformanceTest, JobsAcceptedUnderEarlierLimitsStillLoad) {
  // A spec within an earlier release's limits, beyond today's submission limits.
  JobSpec spec = RunSpec();
  for (int i = 0; i < 300; ++i) spec.env["V" + std::to_string(i)] = std::string(1000, 'x');
  ASSERT_FALSE(ValidateJobSpec(spec).ok());
  CONF_ASSERT_OK_AND_ASSIGN(Job j, Insert(store(), MakeJob("alice", spec)));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [&](Tx& tx) { return tx.GetJob(j.id); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->spec, spec);
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListJobs({}); }));
  EXPECT_EQ(all.size(), 1u);
}

TEST_P(StoreConformanceTest, TransactionReadsItsOwnWrites) {
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(int64_t id, tx.InsertJob(MakeJob("alice", RunSpec())));
    GP_ASSIGN_OR_RETURN(auto got, tx.GetJob(id));
    EXPECT_TRUE(got.has_value());
    GP_ASSIGN_OR_RETURN(auto listed, tx.ListJobs(JQ().Owner("alice")));
    EXPECT_EQ(listed.size(), 1u);
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v"));
    GP_ASSIGN_OR_RETURN(auto meta, tx.GetMeta("k"));
    EXPECT_EQ(meta, std::optional<std::string>("v"));
    return Status::Ok();
  }));
}

// ---------------------------------------------------------------------------
// Attempts

TEST_P(StoreConformanceTest, AttemptsPutGetListAndReplace) {
  for (int i = 0; i < 3; ++i) {
    CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  }
  Attempt a11 = MakeAttempt(1, 1, "n-a", AttemptState::kPreempted);
  a11.exit_code = 1;
  a11.reason = "preempted for interactive job 3";
  a11.gpu_uuids = {"GPU-1"};
  a11.gpu_milli = 1000;
  a11.preempt_ms = 6;
  a11.preempt_for_job = 3;
  a11.started_ms = 7;
  a11.finished_ms = 8;
  a11.last_checkpoint_ms = 7'500;
  Attempt a12 = MakeAttempt(1, 2, "n-b", AttemptState::kRunning);
  a12.gpu_uuids = {"GPU-2", "GPU-3"};
  a12.started_ms = 9;
  Attempt a21 = MakeAttempt(2, 1, "n-a", AttemptState::kScheduled);
  a21.gpu_uuids = {"GPU-4"};
  a21.gpu_milli = 250;
  a21.gpu_memory_mib = 10240;
  Attempt a32 = MakeAttempt(3, 2, "n-b", AttemptState::kLost);
  a32.exit_code = 0;
  Attempt a310 = MakeAttempt(3, 10, "n-a", AttemptState::kSucceeded);
  a310.exit_code = 0;
  // Inserted out of order: listing orders by job id, then number (10 after 2).
  for (const Attempt& a : {a310, a21, a12, a32, a11}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAttempt(a); }));
  }
  for (const Attempt& want : {a11, a12, a21, a32, a310}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto got,
                              InTx(store(), [&](Tx& tx) { return tx.GetAttempt(want.id); }));
    ASSERT_TRUE(got.has_value()) << want.id;
    EXPECT_EQ(*got, want) << want.id;
  }
  CONF_ASSERT_OK_AND_ASSIGN(auto missing,
                            InTx(store(), [](Tx& tx) { return tx.GetAttempt("9.9"); }));
  EXPECT_FALSE(missing.has_value());

  auto list = [&](const AttemptQuery& q) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListAttempts(q); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? AttemptIds(*r) : std::vector<std::string>{};
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(list({}), (V{"1.1", "1.2", "2.1", "3.2", "3.10"}));
  EXPECT_EQ(list(AQ().Job(1)), (V{"1.1", "1.2"}));
  EXPECT_EQ(list(AQ().Job(3)), (V{"3.2", "3.10"}));
  EXPECT_EQ(list(AQ().Job(99)), V{});
  EXPECT_EQ(list(AQ().Node("n-a")), (V{"1.1", "2.1", "3.10"}));
  EXPECT_EQ(list(AQ().LiveOnly()), (V{"1.2", "2.1"}));
  EXPECT_EQ(list(AQ().Node("n-a").LiveOnly()), (V{"2.1"}));
  EXPECT_EQ(list(AQ().Job(1).LiveOnly()), (V{"1.2"}));
  EXPECT_EQ(list(AQ().Job(1).Node("n-a")), (V{"1.1"}));
  CONF_ASSERT_OK_AND_ASSIGN(auto full,
                            InTx(store(), [](Tx& tx) { return tx.ListAttempts(AQ().Job(1)); }));
  EXPECT_EQ(full, (std::vector<Attempt>{a11, a12}));

  // Put with an existing id replaces the attempt.
  a12.state = AttemptState::kSucceeded;
  a12.exit_code = 0;
  a12.finished_ms = 99;
  a12.gpu_uuids.clear();
  a12.reason = "done";
  a12.last_checkpoint_ms = 98;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAttempt(a12); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [&](Tx& tx) { return tx.GetAttempt("1.2"); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, a12);
  EXPECT_EQ(list(AQ().LiveOnly()), (V{"2.1"}));
  EXPECT_EQ(list({}).size(), 5u);
}

TEST_P(StoreConformanceTest, GangAttemptsKeepTheirRanksAndAreListedOnEveryNode) {
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  Attempt gang = MakeAttempt(1, 1, "n-a", AttemptState::kRunning);
  gang.gpu_uuids = {"GPU-a"};
  for (int r = 0; r < 3; ++r) {
    AttemptRank rank;
    rank.rank = r;
    rank.node_id = std::string("n-") + static_cast<char>('a' + r);
    rank.gpu_uuids = {"GPU-" + std::string(1, static_cast<char>('a' + r))};
    rank.state = r == 2 ? AttemptState::kLost : AttemptState::kRunning;
    if (r == 2) {
      rank.reason = "node c stopped answering";
      rank.finished_ms = 77;
      rank.exit_code = 9;
    }
    gang.ranks.push_back(rank);
  }
  gang.master_addr = "fe80::1";
  gang.master_port = 29500;
  gang.gang_stop_ms = 77;
  gang.gang_stop_rank = 2;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAttempt(gang); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [&](Tx& tx) { return tx.GetAttempt("1.1"); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, gang);
  EXPECT_EQ(got->MasterEndpoint(), "[fe80::1]:29500");
  for (const char* node : {"n-a", "n-b", "n-c"}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto on, InTx(store(), [&](Tx& tx) {
                                return tx.ListAttempts(AQ().Node(node).LiveOnly());
                              }));
    EXPECT_EQ(AttemptIds(on), std::vector<std::string>{"1.1"}) << node;
  }
  // Written again (a rank's state changed), it is still listed once per node.
  gang.ranks[1].state = AttemptState::kSucceeded;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAttempt(gang); }));
  CONF_ASSERT_OK_AND_ASSIGN(
      auto on_b, InTx(store(), [&](Tx& tx) { return tx.ListAttempts(AQ().Node("n-b")); }));
  EXPECT_EQ(on_b, std::vector<Attempt>{gang});
  CONF_ASSERT_OK_AND_ASSIGN(
      auto on_d, InTx(store(), [&](Tx& tx) { return tx.ListAttempts(AQ().Node("n-d")); }));
  EXPECT_TRUE(on_d.empty());
}

TEST_P(StoreConformanceTest, EachRankHasItsOwnLogOffsets) {
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  LogLine r0 = Line("1.1", 0, "rank 0 says hi");
  LogLine r1 = Line("1.1", 0, "rank 1 says hi");
  r1.rank = 1;
  LogLine r1b = Line("1.1", 15, "rank 1 again");
  r1b.rank = 1;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.AppendLogs(1, {r0, r1, r1b, r1}); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto lines,
                            InTx(store(), [](Tx& tx) { return tx.ReadLogs(1, 0, 100); }));
  ASSERT_EQ(lines.size(), 3u);  // the repeated line is stored once
  EXPECT_EQ(lines[0].rank, 0);
  EXPECT_EQ(lines[1].rank, 1);
  EXPECT_EQ(lines[1].text, "rank 1 says hi");
  CONF_ASSERT_OK_AND_ASSIGN(auto end0,
                            InTx(store(), [](Tx& tx) { return tx.LastLogOffset("1.1", 0); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto end1,
                            InTx(store(), [](Tx& tx) { return tx.LastLogOffset("1.1", 1); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto end2,
                            InTx(store(), [](Tx& tx) { return tx.LastLogOffset("1.1", 2); }));
  EXPECT_EQ(end0, 0);
  EXPECT_EQ(end1, 15);
  EXPECT_EQ(end2, -1);
}

TEST_P(StoreConformanceTest, AttemptOfMissingJobIsNotFound) {
  Attempt a = MakeAttempt(42, 1, "n-a", AttemptState::kScheduled);
  Status st = InTx(store(), [&](Tx& tx) { return tx.PutAttempt(a); });
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
}

// ---------------------------------------------------------------------------
// Nodes

TEST_P(StoreConformanceTest, NodesPutGetByNameListAndReplace) {
  Node a = MakeNode("n-2", "alpha");
  a.gpus = {GpuInfo{0, "GPU-aaa", "NVIDIA A100-SXM4-80GB", 81920, 8, 0, false, /*minor*/ 4},
            GpuInfo{1, "GPU-SIM-bbb", "NVIDIA T4", 15360, 7, 5, true}};
  // A MIG instance keeps what it is a slice of.
  GpuInfo mig{2, "MIG-ccc", "NVIDIA A100-SXM4-80GB", 40192, 8, 0, false, 5};
  mig.parent_uuid = "GPU-ddd";
  mig.mig_profile = "3g.40gb";
  mig.mig_slices = 3;
  mig.mig_gpu_instance = 2;
  mig.mig_compute_instance = 0;
  a.gpus.insert(a.gpus.begin() + 1, mig);
  a.labels = {{"zone", "eu-1"}, {"owner", "lab \"x\""}};
  a.owner_group = "vision";
  Node b = MakeNode("n-1", "beta");
  b.state = NodeState::kOffline;
  b.driver_version = "";
  Node c = MakeNode("n-3", "gamma");
  c.state = NodeState::kLost;
  for (const Node& n : {c, b, a}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(n); }));
  }
  for (const Node& want : {a, b, c}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto by_id,
                              InTx(store(), [&](Tx& tx) { return tx.GetNode(want.id); }));
    ASSERT_TRUE(by_id.has_value()) << want.id;
    EXPECT_EQ(*by_id, want);
    CONF_ASSERT_OK_AND_ASSIGN(auto by_name,
                              InTx(store(), [&](Tx& tx) { return tx.GetNodeByName(want.name); }));
    ASSERT_TRUE(by_name.has_value()) << want.name;
    EXPECT_EQ(*by_name, want);
  }
  CONF_ASSERT_OK_AND_ASSIGN(auto listed, InTx(store(), [](Tx& tx) { return tx.ListNodes(); }));
  EXPECT_EQ(listed, (std::vector<Node>{a, b, c}));  // by name, not id

  // Replace by id, including a rename that frees the old name.
  a.name = "alpha2";
  a.state = NodeState::kOffline;
  a.gpus.pop_back();
  a.labels.clear();
  a.owner_group = "";
  a.last_seen_ms = 1234;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(a); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto old_name,
                            InTx(store(), [](Tx& tx) { return tx.GetNodeByName("alpha"); }));
  EXPECT_FALSE(old_name.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetNode("n-2"); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, a);
  CONF_ASSERT_OK_AND_ASSIGN(auto none, InTx(store(), [](Tx& tx) { return tx.GetNode("n-9"); }));
  EXPECT_FALSE(none.has_value());
  // The freed name may be taken by another node.
  CONF_EXPECT_OK(InTx(store(), [](Tx& tx) { return tx.PutNode(MakeNode("n-4", "alpha")); }));
}

TEST_P(StoreConformanceTest, DuplicateNodeNameIsAlreadyExists) {
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.PutNode(MakeNode("n-1", "alpha")); }));
  Status st = InTx(store(), [](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutMeta("written", "before"));
    return tx.PutNode(MakeNode("n-2", "alpha"));
  });
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  CONF_ASSERT_OK_AND_ASSIGN(auto n2, InTx(store(), [](Tx& tx) { return tx.GetNode("n-2"); }));
  EXPECT_FALSE(n2.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto meta, InTx(store(), [](Tx& tx) { return tx.GetMeta("written"); }));
  EXPECT_FALSE(meta.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto n1,
                            InTx(store(), [](Tx& tx) { return tx.GetNodeByName("alpha"); }));
  ASSERT_TRUE(n1.has_value());
  EXPECT_EQ(n1->id, "n-1");
}

TEST_P(StoreConformanceTest, NodeLendingAndLeftStateRoundTrip) {
  NodeLending lending;
  lending.mode = "paused";
  lending.gpus = {{"GPU-aaa", 40960}};
  lending.not_lent = {{"GPU-bbb", "its owner runs process 4242 on it"}};
  lending.sharing = GpuSharing::kNone;
  lending.allow_users = {"alice", "bob"};
  lending.deny_users = {"mallory"};
  lending.allow_groups = {"vision"};
  lending.deny_groups = {"nlp"};
  lending.max_runtime_ms = 3'600'000;
  lending.next_change_ms = 1'700'000'000'000;
  Node lends = MakeNode("n-1", "alpha");
  lends.lending = lending;
  Node plain = MakeNode("n-2", "beta");  // an agent without a policy: no lending
  Node left = MakeNode("n-3", "gamma");
  left.state = NodeState::kLeft;
  left.lending = NodeLending{};  // the defaults: lends everything
  for (const Node& n : {lends, plain, left}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(n); }));
  }
  CONF_ASSERT_OK_AND_ASSIGN(auto listed, InTx(store(), [](Tx& tx) { return tx.ListNodes(); }));
  EXPECT_EQ(listed, (std::vector<Node>{lends, plain, left}));
  EXPECT_FALSE(listed[1].lending.has_value());
  ASSERT_TRUE(listed[2].lending.has_value());

  // Replacing a node replaces its lending, down to absent.
  lends.lending.reset();
  plain.lending = lending;
  for (const Node& n : {lends, plain}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(n); }));
  }
  Reopen();
  for (const Node& want : {lends, plain, left}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [&](Tx& tx) { return tx.GetNode(want.id); }));
    EXPECT_EQ(got, std::optional<Node>(want)) << want.id;
  }
}

// ---------------------------------------------------------------------------
// Node events

TEST_P(StoreConformanceTest, NodeEventsAppendListFilterAndPage) {
  auto event = [](std::string node, int64_t ts, std::string kind) {
    NodeEvent e;
    e.node_id = std::move(node);
    e.ts_ms = ts;
    e.kind = std::move(kind);
    return e;
  };
  NodeEvent reclaim = event("n-1", 10, "reclaim");
  reclaim.id = 99;  // ignored: the store assigns ids
  reclaim.reason = "reclaimed by the owner (\"gpupool agent reclaim\")";
  reclaim.gpus = {"GPU-a", "GPU-b"};
  reclaim.attempts = {"4.1", "7.2"};
  std::vector<NodeEvent> appended = {reclaim, event("n-2", 11, "pause"), event("n-1", 12, "resume"),
                                     event("n-1", 13, "leave")};
  std::vector<int64_t> ids;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    for (const NodeEvent& e : appended) {
      GP_ASSIGN_OR_RETURN(int64_t id, tx.AppendNodeEvent(e));
      ids.push_back(id);
    }
    return Status::Ok();
  }));
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_GT(ids[0], 0);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 4u);
  for (size_t i = 0; i < appended.size(); ++i) appended[i].id = ids[i];

  auto list = [&](const std::string& node, int64_t after, int32_t limit) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListNodeEvents(node, after, limit); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<NodeEvent>{};
  };
  using V = std::vector<NodeEvent>;
  EXPECT_EQ(list("", 0, 100), appended);
  EXPECT_EQ(list("n-1", 0, 100), (V{appended[0], appended[2], appended[3]}));
  EXPECT_EQ(list("n-2", 0, 100), (V{appended[1]}));
  EXPECT_EQ(list("n-9", 0, 100), V{});
  EXPECT_EQ(list("n-1", ids[0], 1), (V{appended[2]}));
  EXPECT_EQ(list("", ids[2], 100), (V{appended[3]}));
  EXPECT_EQ(list("", 0, 0), V{});

  // A rolled-back append leaves nothing; ids go on ascending after a reopen.
  Status st = InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendNodeEvent(event("n-1", 14, "policy")).status());
    return Status::FailedPrecondition("rolled back");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(list("", 0, 100), appended);
  Reopen();
  EXPECT_EQ(list("", 0, 100), appended);
  CONF_ASSERT_OK_AND_ASSIGN(int64_t next, InTx(store(), [&](Tx& tx) {
                              return tx.AppendNodeEvent(event("n-2", 15, "policy"));
                            }));
  EXPECT_GT(next, ids.back());
}

// ---------------------------------------------------------------------------
// Logs

TEST_P(StoreConformanceTest, LogsAppendDedupeReadAndEnd) {
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  const std::string unicode =
      "\xC3\xBCn\xC3\xAF"
      "code";  // 9 bytes, 7 characters
  std::vector<LogLine> first = {Line("1.1", 0, "hello"), Line("1.1", 6, "world", "stderr"),
                                Line("1.1", 12, unicode), Line("1.1", 6, "world again")};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendLogs(1, first));
    GP_RETURN_IF_ERROR(tx.AppendLogs(2, {Line("2.1", 0, "other job")}));
    // A resent batch: every line already stored is skipped.
    GP_RETURN_IF_ERROR(tx.AppendLogs(1, {Line("1.1", 0, "HELLO"), Line("1.1", 22, "")}));
    return tx.AppendLogs(1, {Line("1.2", 0, "second attempt"), Line("1.2", 15, "x")});
  }));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    // A rank's lines come in offset order: one below the highest offset
    // taken is a resend, even when its offset was never stored.
    return tx.AppendLogs(1, {Line("1.1", 6, "late duplicate"), Line("1.2", 100, "far"),
                             Line("1.2", 50, "earlier offset, appended later")});
  }));

  std::vector<LogLine> want = {first[0],
                               first[1],
                               first[2],
                               Line("1.1", 22, ""),
                               Line("1.2", 0, "second attempt"),
                               Line("1.2", 15, "x"),
                               Line("1.2", 100, "far")};
  CONF_ASSERT_OK_AND_ASSIGN(auto got,
                            InTx(store(), [](Tx& tx) { return tx.ReadLogs(1, 0, 1000); }));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(got[i].cursor, got[i - 1].cursor);
    }
    EXPECT_GT(got[i].cursor, 0);
    LogLine w = want[i];
    w.cursor = got[i].cursor;
    EXPECT_EQ(got[i], w) << "line " << i;
  }

  // Paging by cursor and limit yields the same lines.
  std::vector<LogLine> paged;
  int64_t cursor = 0;
  while (true) {
    CONF_ASSERT_OK_AND_ASSIGN(auto page,
                              InTx(store(), [&](Tx& tx) { return tx.ReadLogs(1, cursor, 3); }));
    EXPECT_LE(page.size(), 3u);
    if (page.empty()) break;
    paged.insert(paged.end(), page.begin(), page.end());
    cursor = page.back().cursor;
  }
  EXPECT_EQ(paged, got);
  CONF_ASSERT_OK_AND_ASSIGN(
      auto tail, InTx(store(), [&](Tx& tx) { return tx.ReadLogs(1, got[5].cursor, 100); }));
  EXPECT_EQ(tail, (std::vector<LogLine>{got[6]}));

  CONF_ASSERT_OK_AND_ASSIGN(auto job2, InTx(store(), [](Tx& tx) { return tx.ReadLogs(2, 0, 10); }));
  ASSERT_EQ(job2.size(), 1u);
  EXPECT_EQ(job2[0].text, "other job");
  CONF_ASSERT_OK_AND_ASSIGN(auto job3, InTx(store(), [](Tx& tx) { return tx.ReadLogs(3, 0, 10); }));
  EXPECT_TRUE(job3.empty());

  auto end = [&](const std::string& attempt) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.LastLogOffset(attempt, 0); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(-1);
  };
  EXPECT_EQ(end("1.1"), 22);
  EXPECT_EQ(end("1.2"), 100);  // highest offset, not last appended
  EXPECT_EQ(end("2.1"), 0);
  EXPECT_EQ(end("7.1"), -1);
  CONF_ASSERT_OK(
      InTx(store(), [&](Tx& tx) { return tx.AppendLogs(2, {Line("2.2", 40, unicode)}); }));
  EXPECT_EQ(end("2.2"), 40);
}

TEST_P(StoreConformanceTest, LogsOfMissingJobAreNotFound) {
  Status st = InTx(store(), [](Tx& tx) { return tx.AppendLogs(5, {Line("5.1", 0, "x")}); });
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
}

// ---------------------------------------------------------------------------
// Outbox

TEST_P(StoreConformanceTest, OutboxSeqIsPerNodeGaplessAndNeverGoesBack) {
  auto push = [&](const std::string& node, const std::string& body) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.PushOutbox(node, "assign", body); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(-1);
  };
  auto list = [&](const std::string& node, int64_t after) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListOutbox(node, after); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or({});
  };
  EXPECT_EQ(push("n-1", R"({"a":1})"), 1);
  EXPECT_EQ(push("n-1", R"({"a":2})"), 2);
  EXPECT_EQ(push("n-2", R"({"b":1})"), 1);
  EXPECT_EQ(push("n-1", R"({"a":3})"), 3);

  using M = std::vector<OutboxMessage>;
  EXPECT_EQ(list("n-1", 0), (M{{"n-1", 1, "assign", R"({"a":1})"},
                               {"n-1", 2, "assign", R"({"a":2})"},
                               {"n-1", 3, "assign", R"({"a":3})"}}));
  EXPECT_EQ(list("n-1", 2), (M{{"n-1", 3, "assign", R"({"a":3})"}}));
  EXPECT_EQ(list("n-2", 0), (M{{"n-2", 1, "assign", R"({"b":1})"}}));
  EXPECT_EQ(list("n-9", 0), M{});

  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AckOutbox("n-1", 2); }));
  EXPECT_EQ(list("n-1", 0), (M{{"n-1", 3, "assign", R"({"a":3})"}}));
  EXPECT_EQ(list("n-2", 0).size(), 1u);
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AckOutbox("n-1", 3); }));
  EXPECT_EQ(list("n-1", 0), M{});
  EXPECT_EQ(push("n-1", "{}"), 4);  // the counter survives an empty outbox

  // A rolled back push leaves no gap.
  Status st = InTx(store(), [](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(int64_t seq, tx.PushOutbox("n-1", "x", "{}"));
    EXPECT_EQ(seq, 5);
    return Status::Unavailable("abandon");
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(push("n-1", "{}"), 5);

  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AckOutbox("n-1", 100); }));
  Reopen();
  EXPECT_EQ(push("n-1", "{}"), 6);
  EXPECT_EQ(push("n-2", "{}"), 2);
  EXPECT_EQ(list("n-1", 0), (M{{"n-1", 6, "assign", "{}"}}));
}

// ---------------------------------------------------------------------------
// Meta and tokens

TEST_P(StoreConformanceTest, MetaGetPutOverwrite) {
  CONF_ASSERT_OK_AND_ASSIGN(auto none, InTx(store(), [](Tx& tx) { return tx.GetMeta("k"); }));
  EXPECT_FALSE(none.has_value());
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v1"));
    GP_RETURN_IF_ERROR(tx.PutMeta("empty", ""));
    return tx.PutMeta("k", "v2");
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto k, InTx(store(), [](Tx& tx) { return tx.GetMeta("k"); }));
  EXPECT_EQ(k, std::optional<std::string>("v2"));
  CONF_ASSERT_OK_AND_ASSIGN(auto empty, InTx(store(), [](Tx& tx) { return tx.GetMeta("empty"); }));
  EXPECT_EQ(empty, std::optional<std::string>(""));
}

TEST_P(StoreConformanceTest, GroupUsagePutGetListReplaceAndRollback) {
  CONF_ASSERT_OK_AND_ASSIGN(auto none,
                            InTx(store(), [](Tx& tx) { return tx.GetGroupUsage("vision"); }));
  EXPECT_FALSE(none.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto empty, InTx(store(), [](Tx& tx) { return tx.ListGroupUsage(); }));
  EXPECT_TRUE(empty.empty());
  GroupUsage vision{"vision", 3'600'000'000, 1'700'000'000'000};
  GroupUsage nlp{"nlp", 0, 5};
  GroupUsage big{"astro", INT64_MAX, INT64_MAX - 1};  // saturated usage stays exact
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutGroupUsage(vision));
    GP_RETURN_IF_ERROR(tx.PutGroupUsage(nlp));
    return tx.PutGroupUsage(big);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto got,
                            InTx(store(), [](Tx& tx) { return tx.GetGroupUsage("vision"); }));
  EXPECT_EQ(got, std::optional<GroupUsage>(vision));
  CONF_ASSERT_OK_AND_ASSIGN(auto listed, InTx(store(), [](Tx& tx) { return tx.ListGroupUsage(); }));
  EXPECT_EQ(listed, (std::vector<GroupUsage>{big, nlp, vision}));  // by group name

  // Replace by name.
  vision.milli_ms = 7;
  vision.as_of_ms = 1'700'000'001'000;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutGroupUsage(vision); }));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetGroupUsage("vision"); }));
  EXPECT_EQ(got, std::optional<GroupUsage>(vision));

  // A failed transaction leaves usage as it was.
  Status st = InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutGroupUsage(GroupUsage{"vision", 99, 99}));
    GP_RETURN_IF_ERROR(tx.PutGroupUsage(GroupUsage{"new", 1, 1}));
    return Status::Internal("boom");
  });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  CONF_ASSERT_OK_AND_ASSIGN(listed, InTx(store(), [](Tx& tx) { return tx.ListGroupUsage(); }));
  EXPECT_EQ(listed, (std::vector<GroupUsage>{big, nlp, vision}));

  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(listed, InTx(store(), [](Tx& tx) { return tx.ListGroupUsage(); }));
  EXPECT_EQ(listed, (std::vector<GroupUsage>{big, nlp, vision}));
}

TEST_P(StoreConformanceTest, TokensPutGetRevoke) {
  TokenRecord t{"ab12cd", "alice", "member", 10, 0, false, "", "*"};
  TokenRecord u{"ef34", "agent-join", "agent-join", 11, 99999, false, "join", "*"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutToken(t));
    return tx.PutToken(u);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetToken("ab12cd"); }));
  EXPECT_EQ(got, std::optional<TokenRecord>(t));
  t.revoked = true;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutToken(t); }));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetToken("ab12cd"); }));
  EXPECT_EQ(got, std::optional<TokenRecord>(t));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetToken("ef34"); }));
  EXPECT_EQ(got, std::optional<TokenRecord>(u));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetToken("nope"); }));
  EXPECT_FALSE(got.has_value());
}

TEST_P(StoreConformanceTest, TokensListedBySubjectWithNamesAndScopes) {
  TokenRecord a{"h1", "alice", "member", 10, 0, false, "laptop", "jobs:read"};
  TokenRecord b{"h2", "bob", "member", 11, 500, false, "", "*"};
  TokenRecord c{"h3", "alice", "member", 12, 0, true, "ci", "jobs:read,jobs:write"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    for (const TokenRecord& t : {c, b, a}) GP_RETURN_IF_ERROR(tx.PutToken(t));
    return Status::Ok();
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto alice,
                            InTx(store(), [](Tx& tx) { return tx.ListTokens("alice"); }));
  EXPECT_EQ(alice, (std::vector<TokenRecord>{a, c}));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListTokens(""); }));
  EXPECT_EQ(all, (std::vector<TokenRecord>{a, b, c}));
}

TEST_P(StoreConformanceTest, UsersAndGroupsRoundTrip) {
  UserRecord alice{"alice", "member", "$argon2id$v=19$m=65536,t=2,p=1$abc$def", false, 5};
  UserRecord root{"root", "admin", "", false, 1};
  GroupRecord vision{"vision", {"alice", "bob"}, true, 7};
  GroupRecord nlp{"nlp", {}, false, 8};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutUser(root));
    GP_RETURN_IF_ERROR(tx.PutUser(alice));
    GP_RETURN_IF_ERROR(tx.PutGroup(vision));
    return tx.PutGroup(nlp);
  }));
  alice.disabled = true;
  vision.members.push_back("carol");
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutUser(alice));
    return tx.PutGroup(vision);
  }));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto users, InTx(store(), [](Tx& tx) { return tx.ListUsers(); }));
  EXPECT_EQ(users, (std::vector<UserRecord>{alice, root}));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetUser("alice"); }));
  EXPECT_EQ(got, std::optional<UserRecord>(alice));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetUser("nobody"); }));
  EXPECT_FALSE(got.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto groups, InTx(store(), [](Tx& tx) { return tx.ListGroups(); }));
  EXPECT_EQ(groups, (std::vector<GroupRecord>{nlp, vision}));
  CONF_ASSERT_OK_AND_ASSIGN(auto g, InTx(store(), [](Tx& tx) { return tx.GetGroup("vision"); }));
  EXPECT_EQ(g, std::optional<GroupRecord>(vision));
}

TEST_P(StoreConformanceTest, AuditAppendsInOrderAndSurvivesRollbackOfOthers) {
  AuditEntry login{0, 100, "alice", "login", "alice", "password", "127.0.0.1:5000", true};
  AuditEntry failed{0, 101, "mallory", "login", "alice", "wrong password", "10.0.0.9:1", false};
  CONF_ASSERT_OK_AND_ASSIGN(int64_t first,
                            InTx(store(), [&](Tx& tx) { return tx.AppendAudit(login); }));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t second,
                            InTx(store(), [&](Tx& tx) { return tx.AppendAudit(failed); }));
  EXPECT_LT(first, second);
  Status st = InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendAudit(login).status());
    return Status::Internal("boom");
  });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  Reopen();
  login.id = first;
  failed.id = second;
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListAudit(0, 10); }));
  EXPECT_EQ(all, (std::vector<AuditEntry>{login, failed}));
  CONF_ASSERT_OK_AND_ASSIGN(auto rest,
                            InTx(store(), [&](Tx& tx) { return tx.ListAudit(first, 10); }));
  EXPECT_EQ(rest, (std::vector<AuditEntry>{failed}));
  CONF_ASSERT_OK_AND_ASSIGN(auto one, InTx(store(), [](Tx& tx) { return tx.ListAudit(0, 1); }));
  EXPECT_EQ(one.size(), 1u);
}

TEST_P(StoreConformanceTest, AgentCredentialsReplaceAndRevoke) {
  AgentCredential a{"gpu-1", "hash1", "0a1b", "sha256:00", "", 10, false, 0};
  AgentCredential b{"gpu-2", "hash2", "", "", "carol", 11, false, 0};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutAgentCredential(b));
    return tx.PutAgentCredential(a);
  }));
  a.revoked = true;
  a.revoked_ms = 20;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAgentCredential(a); }));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto got,
                            InTx(store(), [](Tx& tx) { return tx.GetAgentCredential("gpu-1"); }));
  EXPECT_EQ(got, std::optional<AgentCredential>(a));
  CONF_ASSERT_OK_AND_ASSIGN(auto all,
                            InTx(store(), [](Tx& tx) { return tx.ListAgentCredentials(); }));
  EXPECT_EQ(all, (std::vector<AgentCredential>{a, b}));
}

// ---------------------------------------------------------------------------
// Transactions

// ---------------------------------------------------------------------------
// Checkpoints

namespace {

Checkpoint MakeCheckpoint(int64_t job_id, std::string attempt_id, char manifest_digit,
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

std::vector<int64_t> Numbers(const std::vector<Checkpoint>& cs) {
  std::vector<int64_t> out;
  for (const Checkpoint& c : cs) out.push_back(c.number);
  return out;
}

}  // namespace

TEST_P(StoreConformanceTest, CheckpointsAreNumberedPerJobAndRoundTrip) {
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  CONF_ASSERT_OK(Insert(store(), MakeJob("bob", RunSpec())));
  Checkpoint first = MakeCheckpoint(1, "1.1", 'a', 10);
  first.number = 77;  // ignored: the store numbers them
  CONF_ASSERT_OK_AND_ASSIGN(Checkpoint c1,
                            InTx(store(), [&](Tx& tx) { return tx.AddCheckpoint(first); }));
  EXPECT_EQ(c1.number, 1);
  first.number = 1;
  EXPECT_EQ(c1, first);
  CONF_ASSERT_OK_AND_ASSIGN(Checkpoint other, InTx(store(), [&](Tx& tx) {
                              return tx.AddCheckpoint(MakeCheckpoint(2, "2.1", 'b', 11));
                            }));
  EXPECT_EQ(other.number, 1);  // per job
  CONF_ASSERT_OK_AND_ASSIGN(Checkpoint c2, InTx(store(), [&](Tx& tx) {
                              return tx.AddCheckpoint(MakeCheckpoint(1, "1.2", 'c', 12));
                            }));
  EXPECT_EQ(c2.number, 2);

  CONF_ASSERT_OK_AND_ASSIGN(auto list, InTx(store(), [](Tx& tx) { return tx.ListCheckpoints(1); }));
  EXPECT_EQ(list, (std::vector<Checkpoint>{c1, c2}));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetCheckpoint(1, 1); }));
  EXPECT_EQ(got, std::optional<Checkpoint>(c1));
  CONF_ASSERT_OK_AND_ASSIGN(auto latest,
                            InTx(store(), [](Tx& tx) { return tx.LatestCheckpoint(1); }));
  EXPECT_EQ(latest, std::optional<Checkpoint>(c2));
  CONF_ASSERT_OK_AND_ASSIGN(auto none,
                            InTx(store(), [](Tx& tx) { return tx.GetCheckpoint(1, 3); }));
  EXPECT_FALSE(none.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto empty,
                            InTx(store(), [](Tx& tx) { return tx.ListCheckpoints(9); }));
  EXPECT_TRUE(empty.empty());
  CONF_ASSERT_OK_AND_ASSIGN(auto no_latest,
                            InTx(store(), [](Tx& tx) { return tx.LatestCheckpoint(9); }));
  EXPECT_FALSE(no_latest.has_value());
}

TEST_P(StoreConformanceTest, CheckpointNumbersAreNeverReusedAfterDeletes) {
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  auto add = [&](char digit) {
    auto r =
        InTx(store(), [&](Tx& tx) { return tx.AddCheckpoint(MakeCheckpoint(1, "1.1", digit, 5)); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->number : int64_t{-1};
  };
  EXPECT_EQ(add('a'), 1);
  EXPECT_EQ(add('b'), 2);
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.DeleteCheckpoint(1, 1));
    GP_RETURN_IF_ERROR(tx.DeleteCheckpoint(1, 2));
    return tx.DeleteCheckpoint(1, 99);  // absent: not an error
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto list, InTx(store(), [](Tx& tx) { return tx.ListCheckpoints(1); }));
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(add('c'), 3);
  Reopen();
  EXPECT_EQ(add('d'), 4);
  CONF_ASSERT_OK_AND_ASSIGN(list, InTx(store(), [](Tx& tx) { return tx.ListCheckpoints(1); }));
  EXPECT_EQ(Numbers(list), (std::vector<int64_t>{3, 4}));
}

TEST_P(StoreConformanceTest, CheckpointOfMissingJobIsNotFoundAndRollsBack) {
  auto r =
      InTx(store(), [](Tx& tx) { return tx.AddCheckpoint(MakeCheckpoint(42, "42.1", 'a', 1)); });
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  // A rolled-back add hands its number out again.
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  Status st = store().Transact([](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(MakeCheckpoint(1, "1.1", 'a', 1)).status());
    return Status::Internal("abort");
  });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  CONF_ASSERT_OK_AND_ASSIGN(Checkpoint c, InTx(store(), [](Tx& tx) {
                              return tx.AddCheckpoint(MakeCheckpoint(1, "1.1", 'b', 2));
                            }));
  EXPECT_EQ(c.number, 1);
}

TEST_P(StoreConformanceTest, ReachableManifestsForGarbageCollection) {
  JobSpec with_inputs = RunSpec();
  with_inputs.workdir = "/home/alice/proj";
  with_inputs.inputs = std::string(64, '1');
  JobSpec same_inputs = CommandSpec();
  same_inputs.inputs = std::string(64, '1');
  JobSpec other_inputs = RunSpec();
  other_inputs.inputs = std::string(64, '2');
  JobSpec finished_inputs = RunSpec();
  finished_inputs.inputs = std::string(64, '3');
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", with_inputs, JobState::kPending)));
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", same_inputs, JobState::kRunning)));
  CONF_ASSERT_OK(Insert(store(), MakeJob("bob", other_inputs, JobState::kScheduled)));
  CONF_ASSERT_OK(Insert(store(), MakeJob("bob", finished_inputs, JobState::kSucceeded)));
  CONF_ASSERT_OK(Insert(store(), MakeJob("bob", finished_inputs, JobState::kFailed)));
  CONF_ASSERT_OK(Insert(store(), MakeJob("carol", RunSpec(), JobState::kRunning)));  // no inputs
  using V = std::vector<std::string>;
  CONF_ASSERT_OK_AND_ASSIGN(auto inputs,
                            InTx(store(), [](Tx& tx) { return tx.ListActiveJobInputs(); }));
  EXPECT_EQ(inputs, (V{std::string(64, '1'), std::string(64, '2')}));

  CONF_ASSERT_OK_AND_ASSIGN(auto none,
                            InTx(store(), [](Tx& tx) { return tx.ListCheckpointManifests(); }));
  EXPECT_TRUE(none.empty());
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(MakeCheckpoint(4, "4.1", 'f', 1)).status());
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(MakeCheckpoint(1, "1.1", 'e', 2)).status());
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(MakeCheckpoint(2, "2.1", 'e', 3)).status());
    return tx.AddCheckpoint(MakeCheckpoint(2, "2.1", 'd', 3)).status();
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto manifests,
                            InTx(store(), [](Tx& tx) { return tx.ListCheckpointManifests(); }));
  EXPECT_EQ(manifests, (V{std::string(64, 'd'), std::string(64, 'e'), std::string(64, 'f')}));
}

namespace {

StorageHolder User(std::string name) { return {StorageHolderKind::kUser, std::move(name)}; }
StorageHolder Group(std::string name) { return {StorageHolderKind::kGroup, std::move(name)}; }

}  // namespace

TEST_P(StoreConformanceTest, StorageCountsInputsOfLiveJobsAndKeptCheckpointsOnce) {
  auto used = [&](const StorageHolder& h) -> int64_t {
    auto u = InTx(store(), [&](Tx& tx) { return tx.StorageUsed(h); });
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    return u.ok() ? u->bytes : -1;
  };
  JobSpec inputs_a = RunSpec();
  inputs_a.group = "vision";
  inputs_a.inputs = std::string(64, 'a');
  Job j1 = MakeJob("alice", inputs_a, JobState::kPending);
  j1.input_bytes = 100;
  Job j2 = MakeJob("alice", inputs_a, JobState::kRunning);  // the same inputs again
  j2.input_bytes = 100;
  JobSpec inputs_b = inputs_a;
  inputs_b.inputs = std::string(64, 'b');
  Job j3 = MakeJob("bob", inputs_b, JobState::kScheduled);
  j3.input_bytes = 50;
  JobSpec plain = RunSpec();  // group "default", no inputs
  Job j4 = MakeJob("alice", plain, JobState::kRunning);
  Job j5 = MakeJob("carol", inputs_b, JobState::kSucceeded);  // finished: inputs not counted
  j5.input_bytes = 70;
  for (Job* j : {&j1, &j2, &j3, &j4, &j5}) {
    CONF_ASSERT_OK_AND_ASSIGN(*j, Insert(store(), *j));
  }
  EXPECT_EQ(used(User("alice")), 100);
  EXPECT_EQ(used(User("bob")), 50);
  EXPECT_EQ(used(User("carol")), 0);
  EXPECT_EQ(used(Group("vision")), 150);
  EXPECT_EQ(used(Group("default")), 0);

  auto checkpoint = [](int64_t job, char digit, int64_t bytes) {
    Checkpoint c = MakeCheckpoint(job, MakeAttemptId(job, 1), digit, 1);
    c.bytes = bytes;
    return c;
  };
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(checkpoint(j1.id, 'c', 1000)).status());
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(checkpoint(j2.id, 'c', 1000)).status());  // same tree
    return tx.AddCheckpoint(checkpoint(j4.id, 'd', 7)).status();
  }));
  EXPECT_EQ(used(User("alice")), 1107);
  EXPECT_EQ(used(Group("vision")), 1150);
  EXPECT_EQ(used(Group("default")), 7);

  // A transaction that fails counts nothing.
  Status failed = store().Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(checkpoint(j3.id, 'e', 5000)).status());
    return Status::Aborted("no");
  });
  EXPECT_EQ(failed.code(), StatusCode::kAborted);
  EXPECT_EQ(used(User("bob")), 50);

  // Inputs stop counting when the last live job naming them ends;
  // checkpoints when the last one naming their tree is deleted.
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    j1.state = JobState::kSucceeded;
    return tx.UpdateJob(j1);
  }));
  EXPECT_EQ(used(User("alice")), 1107);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    j2.state = JobState::kCancelled;
    GP_RETURN_IF_ERROR(tx.UpdateJob(j2));
    j2.reason = "updated again while terminal";
    return tx.UpdateJob(j2);
  }));
  EXPECT_EQ(used(User("alice")), 1007);
  EXPECT_EQ(used(Group("vision")), 1050);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.DeleteCheckpoint(j1.id, 1); }));
  EXPECT_EQ(used(User("alice")), 1007);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.DeleteCheckpoint(j2.id, 1); }));
  EXPECT_EQ(used(User("alice")), 7);
  EXPECT_EQ(used(Group("vision")), 50);

  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListStorageUsage(); }));
  std::vector<StorageUsage> want = {{User("alice"), 7, 1},
                                    {User("bob"), 50, 1},
                                    {Group("default"), 7, 1},
                                    {Group("vision"), 50, 1}};
  EXPECT_EQ(all, want);
}

TEST_P(StoreConformanceTest, StorageQuotasPutGetListReplaceDelete) {
  StorageQuota alice{User("alice"), 1 << 20, 5};
  StorageQuota vision{Group("vision"), int64_t{5} << 40, 6};
  StorageQuota alice_group{Group("alice"), 3, 7};  // a group of the same name is another holder
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutStorageQuota(vision));
    GP_RETURN_IF_ERROR(tx.PutStorageQuota(alice));
    return tx.PutStorageQuota(alice_group);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(
      auto got, InTx(store(), [](Tx& tx) { return tx.GetStorageQuota(User("alice")); }));
  EXPECT_EQ(got, std::optional<StorageQuota>(alice));
  CONF_ASSERT_OK_AND_ASSIGN(auto none,
                            InTx(store(), [](Tx& tx) { return tx.GetStorageQuota(User("bob")); }));
  EXPECT_FALSE(none.has_value());
  alice.bytes = 2 << 20;
  alice.set_ms = 9;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutStorageQuota(alice); }));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListStorageQuotas(); }));
  EXPECT_EQ(all, (std::vector<StorageQuota>{alice, alice_group, vision}));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.DeleteStorageQuota(User("alice")));
    return tx.DeleteStorageQuota(User("nobody"));
  }));
  CONF_ASSERT_OK_AND_ASSIGN(all, InTx(store(), [](Tx& tx) { return tx.ListStorageQuotas(); }));
  EXPECT_EQ(all, (std::vector<StorageQuota>{alice_group, vision}));
}

TEST_P(StoreConformanceTest, ErrorRollsBackEverything) {
  CONF_ASSERT_OK_AND_ASSIGN(Job kept, Insert(store(), MakeJob("alice", RunSpec())));
  int64_t rolled_back_id = 0;
  const Status boom = Status::FailedPrecondition("stop here");
  Status st = store().Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(rolled_back_id, tx.InsertJob(MakeJob("bob", CommandSpec())));
    Job upd = kept;
    upd.state = JobState::kCancelled;
    GP_RETURN_IF_ERROR(tx.UpdateJob(upd));
    GP_RETURN_IF_ERROR(
        tx.PutAttempt(MakeAttempt(rolled_back_id, 1, "n-1", AttemptState::kScheduled)));
    GP_RETURN_IF_ERROR(tx.PutNode(MakeNode("n-1", "alpha")));
    GP_RETURN_IF_ERROR(tx.AppendLogs(rolled_back_id, {Line("2.1", 0, "x")}));
    GP_RETURN_IF_ERROR(tx.PushOutbox("n-1", "assign", "{}").status());
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v"));
    GP_RETURN_IF_ERROR(tx.PutToken(TokenRecord{"h", "bob", "admin", 1, 0, false, "", "*"}));
    return boom;
  });
  EXPECT_EQ(st, boom);  // the callback's error, unchanged
  EXPECT_GT(rolled_back_id, kept.id);

  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto jobs, tx.ListJobs({}));
    EXPECT_EQ(jobs, std::vector<Job>{kept});
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(rolled_back_id));
    EXPECT_FALSE(job.has_value());
    GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts({}));
    EXPECT_TRUE(attempts.empty());
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    EXPECT_TRUE(nodes.empty());
    GP_ASSIGN_OR_RETURN(auto logs, tx.ReadLogs(rolled_back_id, 0, 100));
    EXPECT_TRUE(logs.empty());
    GP_ASSIGN_OR_RETURN(auto end, tx.LastLogOffset("2.1", 0));
    EXPECT_EQ(end, -1);
    GP_ASSIGN_OR_RETURN(auto outbox, tx.ListOutbox("n-1", 0));
    EXPECT_TRUE(outbox.empty());
    GP_ASSIGN_OR_RETURN(auto meta, tx.GetMeta("k"));
    EXPECT_FALSE(meta.has_value());
    GP_ASSIGN_OR_RETURN(auto token, tx.GetToken("h"));
    EXPECT_FALSE(token.has_value());
    return Status::Ok();
  }));

  // The next id is still unique (a backend may or may not reuse the rolled
  // back one, which nobody outside the transaction saw).
  CONF_ASSERT_OK_AND_ASSIGN(Job next, Insert(store(), MakeJob("carol", RunSpec())));
  EXPECT_GT(next.id, kept.id);
  CONF_ASSERT_OK_AND_ASSIGN(auto jobs, InTx(store(), [](Tx& tx) { return tx.ListJobs({}); }));
  EXPECT_EQ(Ids(jobs), (std::vector<int64_t>{kept.id, next.id}));
}

TEST_P(StoreConformanceTest, ExceptionRollsBackAndPropagates) {
  EXPECT_THROW((void)store().Transact([](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.InsertJob(MakeJob("alice", RunSpec())).status());
    throw std::runtime_error("callback bug");
  }),
               std::runtime_error);
  CONF_ASSERT_OK_AND_ASSIGN(auto jobs, InTx(store(), [](Tx& tx) { return tx.ListJobs({}); }));
  EXPECT_TRUE(jobs.empty());
  CONF_EXPECT_OK(Insert(store(), MakeJob("alice", RunSpec())));
}

TEST_P(StoreConformanceTest, NestedTransactIsFailedPrecondition) {
  bool inner_ran = false;
  Status inner;
  CONF_ASSERT_OK(store().Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutMeta("outer", "1"));
    inner = store().Transact([&](Tx&) {
      inner_ran = true;
      return Status::Ok();
    });
    return tx.PutMeta("outer2", "2");
  }));
  EXPECT_EQ(inner.code(), StatusCode::kFailedPrecondition) << inner.ToString();
  EXPECT_FALSE(inner_ran);
  CONF_ASSERT_OK_AND_ASSIGN(auto v, InTx(store(), [](Tx& tx) { return tx.GetMeta("outer2"); }));
  EXPECT_EQ(v, std::optional<std::string>("2"));
}

TEST_P(StoreConformanceTest, ReopenSeesEverythingCommitted) {
  Job job = MakeJob("alice", RunSpec(), JobState::kRunning);
  job.exit_code = std::nullopt;
  job.current_attempt = "1.1";
  job.attempts = 1;
  Attempt attempt = MakeAttempt(1, 1, "n-1", AttemptState::kRunning);
  attempt.gpu_uuids = {"GPU-x"};
  Node node = MakeNode("n-1", "alpha");
  node.gpus = {GpuInfo{0, "GPU-x", "NVIDIA H100", 81920, 9, 0, false}};
  node.labels = {{"k", "v"}};
  TokenRecord token{"hash1", "alice", "admin", 1, 2, false, "x", "jobs:read"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(job.id, tx.InsertJob(job));
    GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
    GP_RETURN_IF_ERROR(tx.PutNode(node));
    GP_RETURN_IF_ERROR(tx.AppendLogs(job.id, {Line("1.1", 0, "a"), Line("1.1", 2, "b")}));
    GP_RETURN_IF_ERROR(tx.PushOutbox("n-1", "assign", "{}").status());
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v"));
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(MakeCheckpoint(job.id, "1.1", 'c', 3)).status());
    return tx.PutToken(token);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto logs_before,
                            InTx(store(), [](Tx& tx) { return tx.ReadLogs(1, 0, 10); }));
  ASSERT_EQ(logs_before.size(), 2u);

  Reopen();

  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto j, tx.GetJob(job.id));
    EXPECT_EQ(j, std::optional<Job>(job));
    GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt("1.1"));
    EXPECT_EQ(a, std::optional<Attempt>(attempt));
    GP_ASSIGN_OR_RETURN(auto n, tx.GetNodeByName("alpha"));
    EXPECT_EQ(n, std::optional<Node>(node));
    GP_ASSIGN_OR_RETURN(auto logs, tx.ReadLogs(job.id, 0, 10));
    EXPECT_EQ(logs, logs_before);
    GP_ASSIGN_OR_RETURN(auto end, tx.LastLogOffset("1.1", 0));
    EXPECT_EQ(end, 2);  // the line stored at offset 2
    GP_ASSIGN_OR_RETURN(auto outbox, tx.ListOutbox("n-1", 0));
    EXPECT_EQ(outbox, (std::vector<OutboxMessage>{{"n-1", 1, "assign", "{}"}}));
    GP_ASSIGN_OR_RETURN(auto meta, tx.GetMeta("k"));
    EXPECT_EQ(meta, std::optional<std::string>("v"));
    GP_ASSIGN_OR_RETURN(auto t, tx.GetToken("hash1"));
    EXPECT_EQ(t, std::optional<TokenRecord>(token));
    GP_ASSIGN_OR_RETURN(auto c, tx.LatestCheckpoint(job.id));
    EXPECT_TRUE(c.has_value() && c->number == 1 && c->manifest == std::string(64, 'c'));
    return Status::Ok();
  }));

  // Counters continue after a reopen: ids, log cursors, outbox seqs.
  CONF_ASSERT_OK_AND_ASSIGN(Job next, Insert(store(), MakeJob("bob", CommandSpec())));
  EXPECT_GT(next.id, job.id);
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AppendLogs(1, {Line("1.1", 4, "c")}); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto logs_after, InTx(store(), [&](Tx& tx) {
                              return tx.ReadLogs(1, logs_before.back().cursor, 10);
                            }));
  ASSERT_EQ(logs_after.size(), 1u);
  EXPECT_GT(logs_after[0].cursor, logs_before.back().cursor);
  CONF_ASSERT_OK_AND_ASSIGN(
      int64_t seq, InTx(store(), [](Tx& tx) { return tx.PushOutbox("n-1", "assign", "{}"); }));
  EXPECT_EQ(seq, 2);
}

}  // namespace gpupool
