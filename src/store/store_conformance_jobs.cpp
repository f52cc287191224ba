// The Store conformance suite (store/store_conformance.h): the jobs facet
// (JobsTx): jobs, attempts, checkpoints and the groups' fair-share usage.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

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

TEST_P(StoreConformanceTest, SubmitKeysLeadToTheirJobPerUser) {
  CONF_ASSERT_OK_AND_ASSIGN(Job a, Insert(store(), MakeJob("alice", RunSpec())));
  CONF_ASSERT_OK_AND_ASSIGN(Job b, Insert(store(), MakeJob("bob", RunSpec())));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutSubmitKey("alice", "k-1", a.id));
    return tx.PutSubmitKey("bob", "k-1", b.id);  // keys are per user
  }));
  auto find = [&](const std::string& owner, const std::string& key) {
    return InTx(store(), [&](Tx& tx) { return tx.FindSubmitKey(owner, key); });
  };
  CONF_ASSERT_OK_AND_ASSIGN(auto alice, find("alice", "k-1"));
  EXPECT_EQ(alice, std::optional<int64_t>(a.id));
  CONF_ASSERT_OK_AND_ASSIGN(auto bob, find("bob", "k-1"));
  EXPECT_EQ(bob, std::optional<int64_t>(b.id));
  CONF_ASSERT_OK_AND_ASSIGN(auto none, find("alice", "k-2"));
  EXPECT_EQ(none, std::nullopt);
  // A key in use stays with its first job; a missing job takes none.
  Status again = InTx(store(), [&](Tx& tx) { return tx.PutSubmitKey("alice", "k-1", b.id); });
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  Status ghost = InTx(store(), [&](Tx& tx) { return tx.PutSubmitKey("alice", "k-3", 999); });
  EXPECT_EQ(ghost.code(), StatusCode::kNotFound) << ghost.ToString();
  CONF_ASSERT_OK_AND_ASSIGN(alice, find("alice", "k-1"));
  EXPECT_EQ(alice, std::optional<int64_t>(a.id));
  CONF_ASSERT_OK_AND_ASSIGN(none, find("alice", "k-3"));
  EXPECT_EQ(none, std::nullopt);
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
      if (j.id <= q.after_id || (q.before_id > 0 && j.id >= q.before_id)) continue;
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
  queries.push_back(JQ().Before(9).Limit(3).NewestFirst());
  queries.push_back(JQ().Owner("alice").Before(7).NewestFirst());
  queries.push_back(JQ().States({JobState::kPending}).After(2).Before(11));
  queries.push_back(JQ().Owner("bob").OrGroups({"vision"}));
  queries.push_back(JQ().Owner("nobody").OrGroups({"vision", "nlp"}).States({JobState::kPending}));
  queries.push_back(JQ().Owner("bob").OrGroups({"nlp"}).Limit(2).NewestFirst());
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(list(queries[i]), expect(queries[i])) << "query #" << i;
    // CountJobs counts what the query selects, whatever its paging.
    JobQuery unpaged = queries[i];
    unpaged.after_id = 0;
    unpaged.before_id = 0;
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

// Attempts being stopped are live (they hold their GPUs until they have
// left) in every state that says so, and keep what the stop was for.
TEST_P(StoreConformanceTest, StoppingAttemptsAreLiveAndKeepTheirStop) {
  for (int i = 0; i < 4; ++i) {
    CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  }
  Attempt preempting = MakeAttempt(1, 1, "n-a", AttemptState::kPreempting);
  preempting.preempt_ms = 50;
  preempting.preempt_for_job = 4;
  preempting.reason = "preempted for job 4";
  Attempt stopping = MakeAttempt(2, 1, "n-a", AttemptState::kStoppingForGood);
  stopping.preempt_ms = 51;
  stopping.reason = "idle for 30m";
  Attempt gang = MakeAttempt(3, 1, "n-a", AttemptState::kGangStopping);
  for (int r = 0; r < 2; ++r) {
    AttemptRank rank;
    rank.rank = r;
    rank.node_id = r == 0 ? "n-a" : "n-b";
    rank.state = r == 0 ? AttemptState::kRunning : AttemptState::kFailed;
    gang.ranks.push_back(rank);
  }
  gang.gang_stop_ms = 52;
  gang.gang_stop_rank = 1;
  Attempt preempted = MakeAttempt(4, 1, "n-a", AttemptState::kPreempted);
  preempted.preempt_ms = 40;
  preempted.preempt_for_job = 1;
  for (const Attempt& a : {preempting, stopping, gang, preempted}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAttempt(a); }));
  }
  for (const Attempt& want : {preempting, stopping, gang, preempted}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto got,
                              InTx(store(), [&](Tx& tx) { return tx.GetAttempt(want.id); }));
    ASSERT_TRUE(got.has_value()) << want.id;
    EXPECT_EQ(*got, want) << want.id;
  }
  using V = std::vector<std::string>;
  CONF_ASSERT_OK_AND_ASSIGN(auto live,
                            InTx(store(), [](Tx& tx) { return tx.ListAttempts(AQ().LiveOnly()); }));
  EXPECT_EQ(AttemptIds(live), (V{"1.1", "2.1", "3.1"}));
  CONF_ASSERT_OK_AND_ASSIGN(auto on_b, InTx(store(), [](Tx& tx) {
                              return tx.ListAttempts(AQ().Node("n-b").LiveOnly());
                            }));
  EXPECT_EQ(AttemptIds(on_b), V{"3.1"});
  // Once it has left, it is no longer live.
  preempting.state = AttemptState::kPreempted;
  preempting.finished_ms = 60;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAttempt(preempting); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto after,
                            InTx(store(), [](Tx& tx) { return tx.ListAttempts(AQ().LiveOnly()); }));
  EXPECT_EQ(AttemptIds(after), (V{"2.1", "3.1"}));
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

// ---------------------------------------------------------------------------
// Checkpoints

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

}  // namespace gpupool
