#include "store/memory_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "store/sqlite_store.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {

// The suite's reopen: a store over the state an earlier store on the same
// directory left (kept here, by directory, for the test's duration).
StoreBackend MemoryBackend() {
  return {"memory", [](const std::string& dir) -> Result<std::unique_ptr<Store>> {
            static auto* states = new std::map<std::string, std::shared_ptr<MemoryState>>();
            auto& state = (*states)[dir];
            auto store = MemoryStore::Over(state);
            state = store->state();
            return std::unique_ptr<Store>(std::move(store));
          }};
}
GPUPOOL_STORE_CONFORMANCE_SUITE(Memory, MemoryBackend());

namespace {

TEST(MemoryStoreTest, ConformanceSuiteIsLinked) {
  const auto* unit = ::testing::UnitTest::GetInstance();
  int conformance = 0;
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    if (std::string(unit->GetTestSuite(i)->name()) == "Memory/StoreConformanceTest") {
      conformance = unit->GetTestSuite(i)->total_test_count();
    }
  }
  EXPECT_GE(conformance, 15);
}

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

// A failed transaction must restore the indexes too, not only the rows:
// the queries below read jobs by state and owner, attempts by liveness and
// node, and the storage counts, all of which the callback changed.
TEST(MemoryStoreTest, FailedTransactionLeavesEveryIndexAsItWas) {
  MemoryStore store;
  JobSpec spec = RunSpec();
  spec.inputs = std::string(64, 'a');
  Job pending = MakeJob("alice", spec, JobState::kPending);
  pending.input_bytes = 100;
  ASSERT_TRUE(InTx(store, [&](Tx& tx) { return tx.InsertJob(pending); }).ok());
  Status st = store.Transact([&](Tx& tx) -> Status {
    Job ended = pending;
    ended.id = 1;
    ended.owner = "bob";
    ended.state = JobState::kCancelled;
    GP_RETURN_IF_ERROR(tx.UpdateJob(ended));
    GP_RETURN_IF_ERROR(tx.PutAttempt(MakeAttempt(1, 1, "n-1", AttemptState::kRunning)));
    GP_RETURN_IF_ERROR(tx.AppendLogs(1, {Line("1.1", 0, "x")}));
    GP_RETURN_IF_ERROR(tx.RemoveJobLogs(1, 5, "gone"));
    GP_RETURN_IF_ERROR(tx.PutNode(MakeNode("n-1", "alpha")));
    return Status::Internal("abort");
  });
  ASSERT_EQ(st.code(), StatusCode::kInternal);
  Status checks = store.Transact([](Tx& tx) -> Status {
    JobQuery q;
    q.states = {JobState::kPending};
    GP_ASSIGN_OR_RETURN(auto by_state, tx.ListJobs(q));
    EXPECT_EQ(by_state.size(), 1u);
    q.states = {JobState::kCancelled};
    GP_ASSIGN_OR_RETURN(auto cancelled, tx.CountJobs(q));
    EXPECT_EQ(cancelled, 0);
    JobQuery bob;
    bob.owner = "bob";
    GP_ASSIGN_OR_RETURN(auto bobs, tx.CountJobs(bob));
    EXPECT_EQ(bobs, 0);
    AttemptQuery live;
    live.live_only = true;
    GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts(live));
    EXPECT_TRUE(attempts.empty());
    AttemptQuery on_node;
    on_node.node_id = "n-1";
    GP_ASSIGN_OR_RETURN(attempts, tx.ListAttempts(on_node));
    EXPECT_TRUE(attempts.empty());
    GP_ASSIGN_OR_RETURN(auto used, tx.StorageUsed({StorageHolderKind::kUser, "alice"}));
    EXPECT_EQ(used.bytes, 100);
    GP_ASSIGN_OR_RETURN(auto inputs, tx.ListActiveJobInputs());
    EXPECT_EQ(inputs.size(), 1u);
    GP_ASSIGN_OR_RETURN(auto totals, tx.GetLogTotals());
    EXPECT_EQ(totals, LogTotals{});
    GP_ASSIGN_OR_RETURN(auto removal, tx.GetLogRemoval(1));
    EXPECT_FALSE(removal.has_value());
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNodeByName("alpha"));
    EXPECT_FALSE(node.has_value());
    // The counters went back too: the next line is the first cursor.
    GP_RETURN_IF_ERROR(tx.AppendLogs(1, {Line("1.1", 0, "y")}));
    GP_ASSIGN_OR_RETURN(auto lines, tx.ReadLogs(1, 0, 10));
    EXPECT_EQ(lines.size(), 1u);
    if (!lines.empty()) {
      EXPECT_EQ(lines[0].cursor, 1);
    }
    return Status::Ok();
  });
  EXPECT_TRUE(checks.ok()) << checks.ToString();
}

// ---------------------------------------------------------------------------
// The same random transactions against SQLite and memory, some of them
// failing, must leave both answering every query alike (what store.h
// leaves open included: orders, storage counts, log bookkeeping). Only
// stored_bytes differs by design (compressed chunks vs memory held).

class Differential {
 public:
  explicit Differential(uint32_t seed) : rng_(seed) {}

  // One transaction of 1..4 random operations; each operation appends its
  // outcome to `trace`, and a fifth of the transactions fail at the end.
  std::function<Status(Tx&, std::string&)> Next() {
    std::vector<std::function<Status(Tx&, std::string&)>> ops;
    const int n = Pick(1, 4);
    for (int i = 0; i < n; ++i) ops.push_back(Op());
    const bool fail = Pick(0, 4) == 0;
    return [ops, fail](Tx& tx, std::string& trace) -> Status {
      for (const auto& op : ops) {
        Status st = op(tx, trace);
        trace += std::string(StatusCodeName(st.code())) + ";";
      }
      return fail ? Status::Internal("abort") : Status::Ok();
    };
  }

 private:
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  const T& Of(const std::vector<T>& v) {
    return v[static_cast<size_t>(Pick(0, static_cast<int>(v.size()) - 1))];
  }

  Job RandomJob() {
    static const std::vector<std::string> owners = {"alice", "bob", "carol"};
    static const std::vector<std::string> groups = {"default", "vision", "nlp"};
    static const std::vector<std::string> inputs = {"", std::string(64, 'a'), std::string(64, 'b')};
    JobSpec spec = CommandSpec();
    spec.group = Of(groups);
    spec.inputs = Of(inputs);
    Job j = MakeJob(Of(owners), spec, kAllJobStates[Pick(0, 5)]);
    j.input_bytes = Pick(0, 3) * 100;
    j.finished_ms = IsTerminal(j.state) ? Pick(1, 50) : 0;
    return j;
  }

  std::function<Status(Tx&, std::string&)> Op() {
    const int64_t job = Pick(1, 12);  // sometimes missing
    const std::string attempt = std::to_string(job) + "." + std::to_string(Pick(1, 2));
    switch (Pick(0, 12)) {
      case 0:
      case 1: {
        Job j = RandomJob();
        return [j](Tx& tx, std::string& trace) -> Status {
          GP_ASSIGN_OR_RETURN(int64_t id, tx.InsertJob(j));
          trace += "job " + std::to_string(id) + ";";
          return Status::Ok();
        };
      }
      case 2: {
        Job j = RandomJob();
        j.id = job;
        return [j](Tx& tx, std::string&) { return tx.UpdateJob(j); };
      }
      case 3: {
        Attempt a = MakeAttempt(job, Pick(1, 2), Pick(0, 1) ? "n-1" : "n-2",
                                Pick(0, 1) ? AttemptState::kRunning : AttemptState::kFailed);
        if (Pick(0, 2) == 0) {
          AttemptRank r0, r1;
          r0.node_id = a.node_id;
          r1.rank = 1;
          r1.node_id = "n-3";
          a.ranks = {r0, r1};
        }
        return [a](Tx& tx, std::string&) { return tx.PutAttempt(a); };
      }
      case 4: {
        Checkpoint c =
            MakeCheckpoint(job, attempt, static_cast<char>('c' + Pick(0, 2)), Pick(1, 9));
        return [c](Tx& tx, std::string& trace) -> Status {
          GP_ASSIGN_OR_RETURN(Checkpoint out, tx.AddCheckpoint(c));
          trace += "ckpt " + std::to_string(out.number) + ";";
          return Status::Ok();
        };
      }
      case 5: {
        const int64_t number = Pick(1, 3);
        return [job, number](Tx& tx, std::string&) { return tx.DeleteCheckpoint(job, number); };
      }
      case 6:
      case 7: {
        std::vector<LogLine> lines;
        for (int i = Pick(0, 5); i > 0; --i) {
          LogLine l = Line(attempt, Pick(0, 30), std::string(static_cast<size_t>(Pick(0, 9)), 'z'));
          l.rank = Pick(0, 1);
          lines.push_back(l);
        }
        return [job, lines](Tx& tx, std::string&) { return tx.AppendLogs(job, lines); };
      }
      case 8: {
        LogSkip skip{job, attempt, Pick(0, 1), Pick(0, 40), Pick(0, 1) ? "limit" : "", Pick(0, 9)};
        return [skip](Tx& tx, std::string&) { return tx.SkipLogs(skip); };
      }
      case 9: {
        const int64_t at = Pick(0, 20);
        return [job, at](Tx& tx, std::string&) { return tx.RemoveJobLogs(job, at, "r"); };
      }
      case 10: {
        Node n = MakeNode("n-" + std::to_string(Pick(1, 3)), Pick(0, 1) ? "alpha" : "beta");
        return [n](Tx& tx, std::string&) { return tx.PutNode(n); };
      }
      case 11: {
        const std::string node = "n-" + std::to_string(Pick(1, 2));
        return [node](Tx& tx, std::string& trace) -> Status {
          GP_ASSIGN_OR_RETURN(int64_t seq, tx.PushOutbox(node, "t", "{}"));
          trace += "seq " + std::to_string(seq) + ";";
          return Status::Ok();
        };
      }
      default: {
        const int64_t upto = Pick(0, 3);
        const std::string node = "n-" + std::to_string(Pick(1, 2));
        return [node, upto](Tx& tx, std::string&) { return tx.AckOutbox(node, upto); };
      }
    }
  }

  std::mt19937 rng_;
};

// Everything the queries answer, stored_bytes zeroed.
struct Seen {
  std::vector<std::vector<Job>> jobs;
  std::vector<int64_t> counts;
  std::vector<std::vector<Attempt>> attempts;
  std::vector<std::vector<Checkpoint>> checkpoints;
  std::vector<std::string> manifests, inputs;
  std::vector<StorageUsage> usage;
  std::vector<std::vector<LogLine>> lines;
  std::vector<std::vector<LogStream>> streams;
  std::vector<std::optional<LogRemoval>> removals;
  LogTotals totals;
  std::vector<JobLogSize> ended;
  std::vector<Node> nodes;
  std::vector<std::vector<OutboxMessage>> outbox;
  friend bool operator==(const Seen&, const Seen&) = default;
};

Result<Seen> Look(Store& store) {
  Seen s;
  Status st = store.Transact([&](Tx& tx) -> Status {
    std::vector<JobQuery> queries(6);
    queries[1].states = {JobState::kPending, JobState::kRunning};
    queries[2].owner = "alice";
    queries[3].owner = "bob";
    queries[3].or_groups = {"vision", "default"};
    queries[4].newest_first = true;
    queries[4].limit = 3;
    queries[5].after_id = 2;
    queries[5].states = {JobState::kSucceeded};
    for (const JobQuery& q : queries) {
      GP_ASSIGN_OR_RETURN(auto jobs, tx.ListJobs(q));
      s.jobs.push_back(jobs);
      GP_ASSIGN_OR_RETURN(int64_t n, tx.CountJobs(q));
      s.counts.push_back(n);
    }
    std::vector<AttemptQuery> aqs(6);
    aqs[5].node_id = "n-2";
    aqs[5].live_only = true;
    aqs[1].job_id = 2;
    aqs[2].node_id = "n-1";
    aqs[3].node_id = "n-3";
    aqs[3].live_only = true;
    aqs[4].live_only = true;
    for (const AttemptQuery& q : aqs) {
      GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts(q));
      s.attempts.push_back(attempts);
    }
    for (int64_t job = 1; job <= 12; ++job) {
      GP_ASSIGN_OR_RETURN(auto cs, tx.ListCheckpoints(job));
      s.checkpoints.push_back(cs);
      GP_ASSIGN_OR_RETURN(auto lines, tx.ReadLogs(job, 0, 1000));
      s.lines.push_back(lines);
      GP_ASSIGN_OR_RETURN(auto streams, tx.ListLogStreams(job));
      for (LogStream& l : streams) l.stored_bytes = 0;
      s.streams.push_back(streams);
      GP_ASSIGN_OR_RETURN(auto removal, tx.GetLogRemoval(job));
      if (removal) removal->stored_bytes = 0;
      s.removals.push_back(removal);
    }
    GP_ASSIGN_OR_RETURN(s.manifests, tx.ListCheckpointManifests());
    GP_ASSIGN_OR_RETURN(s.inputs, tx.ListActiveJobInputs());
    GP_ASSIGN_OR_RETURN(s.usage, tx.ListStorageUsage());
    GP_ASSIGN_OR_RETURN(s.totals, tx.GetLogTotals());
    s.totals.stored_bytes = 0;
    GP_ASSIGN_OR_RETURN(s.ended, tx.ListEndedJobLogs(100));
    for (JobLogSize& e : s.ended) e.stored_bytes = 0;
    GP_ASSIGN_OR_RETURN(s.nodes, tx.ListNodes());
    for (const char* node : {"n-1", "n-2"}) {
      GP_ASSIGN_OR_RETURN(auto out, tx.ListOutbox(node, 0));
      s.outbox.push_back(out);
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return s;
}

TEST(MemoryStoreTest, BehavesAsSqliteUnderRandomTransactions) {
  std::string dir = ::testing::TempDir() + "gpupool-memdiff-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    auto sqlite = SqliteStore::Open(dir + "/s" + std::to_string(seed) + ".db");
    ASSERT_TRUE(sqlite.ok()) << sqlite.status().ToString();
    MemoryStore memory;
    Differential gen(seed);
    for (int step = 0; step < 120; ++step) {
      auto tx = gen.Next();
      std::string trace_sql, trace_mem;
      Status a = (*sqlite)->Transact([&](Tx& t) { return tx(t, trace_sql); });
      Status b = memory.Transact([&](Tx& t) { return tx(t, trace_mem); });
      ASSERT_EQ(a.code(), b.code()) << "seed " << seed << " step " << step;
      ASSERT_EQ(trace_sql, trace_mem) << "seed " << seed << " step " << step;
      auto seen_sql = Look(**sqlite);
      auto seen_mem = Look(memory);
      ASSERT_TRUE(seen_sql.ok()) << seen_sql.status().ToString();
      ASSERT_TRUE(seen_mem.ok()) << seen_mem.status().ToString();
      ASSERT_TRUE(*seen_sql == *seen_mem) << "seed " << seed << " step " << step;
    }
    // Freeing removed logs ends in both (their chunks differ in size).
    for (Store* store : {static_cast<Store*>(sqlite->get()), static_cast<Store*>(&memory)}) {
      int steps = 0;
      while (true) {
        auto n = InTx(*store, [](Tx& t) { return t.DeleteRemovedLogChunks(3); });
        ASSERT_TRUE(n.ok());
        if (*n == 0) break;
        ASSERT_LT(++steps, 10000);
      }
    }
    auto seen_sql = Look(**sqlite);
    auto seen_mem = Look(memory);
    ASSERT_TRUE(seen_sql.ok()) << seen_sql.status().ToString();
    ASSERT_TRUE(seen_mem.ok()) << seen_mem.status().ToString();
    EXPECT_TRUE(*seen_sql == *seen_mem) << "seed " << seed << " after freeing";
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace gpupool
