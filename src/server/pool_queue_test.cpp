// The pool's queue in memory (server/pool_queue.h): it never drifts from
// the store (random operations under the check mode), the check mode
// catches a drift, a failed transaction leaves it as it was, and a pool
// reopened on the same SQLite file schedules exactly what the first one
// would.
#include "server/pool_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>

#include "server/pool_testing.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

// Random operations on a pool, as its agents and users would send them:
// agents say hello (new instances), report their tasks running and ending,
// lend or pause, disconnect; users submit (GPUs, shares, classes,
// preemptible work, gangs), cancel and stop; time passes, nodes are
// checked and passes run. The same seed gives the same operations on two
// pools in the same state.
class Scenario {
 public:
  explicit Scenario(uint32_t seed) : rng_(seed) {}

  void Step(Pool& pool, FakeClock& clock) {
    switch (Pick(12)) {
      case 0:
      case 1:
        Hello(pool, Name());
        break;
      case 2:
        Disconnect(pool, Name());
        break;
      case 3:
      case 4:
        Submit(pool);
        break;
      case 5:
      case 6: {
        auto placed = pool.Schedule();
        ASSERT_TRUE(placed.ok()) << placed.status().ToString();
        placements += *placed;
        break;
      }
      case 7:
      case 8:
        ReportOne(pool);
        break;
      case 9: {
        int64_t id = 1 + Pick(static_cast<int>(submitted + 1));
        if (Pick(2) == 0) {
          (void)pool.Cancel(id);
        } else {
          (void)pool.StopForGood(id, "idle session", Pick(2) == 0);
        }
        break;
      }
      case 10: {
        clock.AdvanceMs(Pick(20'000));
        ASSERT_TRUE(pool.CheckNodes().ok());
        break;
      }
      case 11:
        Lend(pool, Name());
        break;
    }
  }

  // Disconnects every agent, then (after whatever the caller does) says
  // hello again with the tasks each one holds.
  void DisconnectAll(Pool& pool) {
    for (const auto& [name, id] : ids_) ASSERT_TRUE(pool.AgentDisconnected(id).ok());
  }
  void HelloAll(Pool& pool) {
    std::vector<std::string> names;
    for (const auto& [name, id] : ids_) names.push_back(name);
    for (const std::string& n : names) Hello(pool, n);
  }

  // The pool's jobs, attempts and orders, with node ids named.
  std::string Fingerprint(Pool& pool) {
    std::string out;
    auto named = [&](std::string s) {
      for (const auto& [name, id] : ids_) {
        for (size_t at; (at = s.find(id)) != std::string::npos;) s.replace(at, id.size(), name);
      }
      return s;
    };
    for (int64_t id = 1; id <= submitted; ++id) {
      auto d = pool.GetJob(id);
      if (!d.ok()) continue;
      out += "job " + std::to_string(id) + " " + std::string(JobStateName(d->job.state)) + " " +
             d->job.reason + " " + d->job.current_attempt + "\n";
      for (const Attempt& a : d->attempts) {
        out += "  " + a.id + " " + std::string(AttemptStateName(a.state)) + " " + a.node_id + " " +
               a.reason + "\n";
      }
    }
    for (const auto& [name, id] : ids_) {
      auto orders = pool.PendingOrders(id, 0);
      if (!orders.ok()) continue;
      for (const OutboxMessage& m : *orders) {
        out += name + " #" + std::to_string(m.seq) + " " + m.type + " " + m.body + "\n";
      }
    }
    return named(out);
  }

  int64_t submitted = 0;
  int64_t placements = 0;
  int64_t reports = 0;

 private:
  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }
  std::string Name() { return std::string(1, static_cast<char>('a' + Pick(3))); }

  void Hello(Pool& pool, const std::string& name) {
    proto::Hello h;
    h.node_name = name;
    h.agent_instance = name + std::to_string(++instances_);
    h.cpu_milli = 8000;
    h.memory_mib = 32768;
    for (int i = 0; i < 2; ++i) {
      h.gpus.push_back({i, name + "-gpu" + std::to_string(i), "A100", 81920, 8, 0, true});
    }
    // The agent still holds what it was running, unless it lost it.
    if (auto it = ids_.find(name); it != ids_.end() && Pick(4) != 0) {
      for (const Attempt& a : LiveAttemptsOn(pool, it->second)) {
        h.tasks.push_back({a.id, proto::TaskState::kRunning, 0, 0, "", 0});
      }
    }
    auto w = pool.AgentHello(h);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ids_[name] = w->node_id;
    seq_[name] = 0;
  }
  void Disconnect(Pool& pool, const std::string& name) {
    if (auto it = ids_.find(name); it != ids_.end()) {
      ASSERT_TRUE(pool.AgentDisconnected(it->second).ok());
    }
  }
  void Lend(Pool& pool, const std::string& name) {
    auto it = ids_.find(name);
    if (it == ids_.end()) return;
    NodeLending l;
    l.mode = Pick(3) == 0 ? "paused" : "lending";
    for (int i = 0; i < 2; ++i) {
      if (Pick(4) != 0) l.gpus[name + "-gpu" + std::to_string(i)] = Pick(2) ? 81920 : 40960;
    }
    (void)pool.AgentMessage(it->second, ++seq_[name], std::string(proto::kLending),
                            proto::Encode(l));
  }
  void Submit(Pool& pool) {
    JobSpec s;
    s.name = "j";
    s.run = "true";
    s.group = Pick(2) ? "lab-a" : "lab-b";
    s.priority = static_cast<JobPriority>(Pick(3));
    switch (Pick(5)) {
      case 0:
        s.resources.gpus = 0;
        break;
      case 1:
        s.resources.gpu_milli = 500;
        s.resources.gpu_memory_mib = 10240;
        break;
      case 2:
        s.resources.gpus = 2;
        break;
      case 3:
        s.resources.gpus = 1;
        s.resources.nodes = 2;
        s.distributed = Distributed::kTorch;
        break;
      default:
        s.resources.gpus = 1;
    }
    if (Pick(2) == 0) s.checkpoint = CheckpointSpec{0, 5'000, "SIGUSR1"};
    auto j = pool.Submit(s, Pick(2) ? "u" : "w");
    if (j.ok()) submitted = std::max(submitted, j->id);
  }
  std::vector<Attempt> LiveAttemptsOn(Pool& pool, const std::string& node_id) {
    std::vector<Attempt> out;
    JobQuery q;
    q.states = {JobState::kScheduled, JobState::kRunning};
    auto jobs = pool.ListJobs(q);
    if (!jobs.ok()) return out;
    for (const Job& j : *jobs) {
      auto d = pool.GetJob(j.id);
      if (!d.ok()) continue;
      for (const Attempt& a : d->attempts) {
        if (!IsLive(a.state)) continue;
        bool there = a.node_id == node_id;
        for (const AttemptRank& r : a.ranks) there = there || r.node_id == node_id;
        if (there) out.push_back(a);
      }
    }
    return out;
  }
  // A task report from the node of one rank of a live attempt.
  void ReportOne(Pool& pool) {
    std::vector<std::pair<std::string, Attempt>> live;  // node name, attempt
    for (const auto& [name, id] : ids_) {
      for (Attempt& a : LiveAttemptsOn(pool, id)) live.emplace_back(name, std::move(a));
    }
    if (live.empty()) return;
    const auto& [name, a] = live[Pick(static_cast<int>(live.size()))];
    proto::TaskReport r{a.id, proto::TaskState::kRunning, 0, 0, "", 0};
    if (a.state == AttemptState::kRunning || Pick(3) == 0) {
      r.state = proto::TaskState::kExited;
      r.exit_code = Pick(3) == 0 ? 1 : 0;
    }
    if (!a.ranks.empty()) {
      r.master_addr = "10.0.0.1";
      r.master_port = 29500;
    }
    Status s = pool.AgentMessage(ids_.at(name), ++seq_[name], std::string(proto::kTaskStatus),
                                 proto::Encode(r));
    if (s.ok()) ++reports;
  }

  std::mt19937 rng_;
  std::map<std::string, std::string> ids_;  // node name -> id
  std::map<std::string, int64_t> seq_;      // node name -> the agent's last seq
  int instances_ = 0;
};

PoolOptions ScenarioOptions() {
  PoolOptions o;
  o.scheduler.groups = {{"lab-a", 1, 0}, {"lab-b", 1, 0}};
  o.queue_check.check = true;
  o.queue_check.on_drift = [](const std::string& d) { ADD_FAILURE() << d; };
  return o;
}

// Many random operations under the check mode: after every transaction the
// queue in memory equals a full read of the store (any difference fails
// the test with what differs).
TEST_F(PoolTest, TheQueueInMemoryNeverDriftsFromTheStore) {
  int64_t placements = 0, reports = 0, submitted = 0;
  const uint32_t seeds = 6;
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    Restart();
    UseOptions(ScenarioOptions());
    Scenario s(seed);
    for (int i = 0; i < 250 && !HasFailure(); ++i) s.Step(*pool_, clock_);
    placements += s.placements;
    reports += s.reports;
    submitted += s.submitted;
  }
  // The operations did something (each run starts from the last one's store).
  EXPECT_GT(placements, 8 * seeds);
  EXPECT_GT(reports, 8 * seeds);
  EXPECT_GT(submitted, 16 * seeds);
}

// The check mode itself: a job written behind the pool's back is found.
TEST_F(PoolTest, TheCheckModeFindsACacheThatDrifted) {
  std::vector<std::string> drifts;
  PoolOptions o;
  o.queue_check.check = true;
  o.queue_check.on_drift = [&](const std::string& d) { drifts.push_back(d); };
  UseOptions(o);
  ASSERT_TRUE(pool_->Submit(Spec(1), "u").ok());
  EXPECT_TRUE(drifts.empty());
  // Behind the pool's back, on the same database.
  auto other = *SqliteStore::Open((dir_ / "state.db").string());
  Job sneaky;
  sneaky.owner = "x";
  sneaky.spec = Spec(1);
  sneaky.state = JobState::kPending;
  ASSERT_TRUE(other->Transact([&](Tx& tx) { return tx.InsertJob(sneaky).status(); }).ok());
  ASSERT_TRUE(pool_->ListNodes().ok());  // any transaction of the pool
  ASSERT_EQ(drifts.size(), 1u);
  EXPECT_THAT(drifts[0], HasSubstr("pending jobs"));
  EXPECT_THAT(drifts[0], HasSubstr("job 2"));
  // The cache was loaded again: it has the job now, and says no more.
  ASSERT_TRUE(pool_->ListNodes().ok());
  EXPECT_EQ(drifts.size(), 1u);
  EXPECT_EQ(pool_->Queue(std::nullopt)->size(), 2u);
}

// A store whose next commit fails: the callback runs and succeeds, then
// the transaction is rolled back and the error returned.
class FailingStore final : public Store {
 public:
  explicit FailingStore(Store& in) : in_(in) {}
  Status Transact(const std::function<Status(Tx&)>& fn) override {
    return in_.Transact([&](Tx& tx) -> Status {
      GP_RETURN_IF_ERROR(fn(tx));
      if (fail_next_) {
        fail_next_ = false;
        return Status::Unavailable("injected commit failure");
      }
      return Status::Ok();
    });
  }
  void FailNext() { fail_next_ = true; }

 private:
  Store& in_;
  bool fail_next_ = false;
};

TEST_F(PoolTest, AFailedCommitLeavesTheQueueAsTheStoreHasIt) {
  FailingStore failing(*store_);
  PoolOptions o = ScenarioOptions();
  Pool pool(failing, clock_, o, hooks_);
  auto a = *pool.AgentHello(MakeHello("a", 2));
  ASSERT_TRUE(pool.Submit(Spec(1), "u").ok());
  ASSERT_TRUE(pool.Submit(Spec(1), "u").ok());
  failing.FailNext();
  auto placed = pool.Schedule();
  ASSERT_FALSE(placed.ok());
  EXPECT_THAT(placed.status().message(), HasSubstr("injected"));
  // Nothing was placed; the next pass (checked against the store) places
  // both, as if the failed one had never run.
  EXPECT_EQ(pool.GetJob(1)->job.state, JobState::kPending);
  EXPECT_TRUE(pool.PendingOrders(a.node_id, 0)->empty());
  ASSERT_EQ(*pool.Schedule(), 2);
  EXPECT_EQ(pool.GetJob(2)->job.state, JobState::kScheduled);
  auto report = [&] {
    proto::TaskReport r{"1.1", proto::TaskState::kRunning, 0, 0, "", 0};
    return pool.AgentMessage(a.node_id, 1, std::string(proto::kTaskStatus), proto::Encode(r));
  };
  // A failed report: the job stays scheduled, in memory too; sent again
  // (the same seq: nothing of it was applied), it runs.
  failing.FailNext();
  EXPECT_FALSE(report().ok());
  EXPECT_EQ(pool.GetJob(1)->job.state, JobState::kScheduled);
  ASSERT_EQ(*pool.Schedule(), 0);
  ASSERT_TRUE(report().ok());
  EXPECT_EQ(pool.GetJob(1)->job.state, JobState::kRunning);
}

// A transaction that wrote a job and then failed (the quota refused it):
// the job is in neither the store nor the queue.
TEST_F(PoolTest, ATransactionThatFailsMidwayLeavesTheQueueAsItWas) {
  PoolHooks hooks = hooks_;
  hooks.manifest_stored = [](const std::string&) { return true; };
  hooks.within_quota = [](Tx&, const std::string&, const std::string&, std::string_view,
                          const std::function<Status()>& change) -> Status {
    GP_RETURN_IF_ERROR(change());                    // the job is inserted...
    return Status::ResourceExhausted("over quota");  // ... and the transaction fails
  };
  Pool pool(*store_, clock_, ScenarioOptions(), hooks);
  auto a = *pool.AgentHello(MakeHello("a", 1));
  JobSpec s = Spec(1);
  s.inputs = std::string(64, 'a');
  auto refused = pool.Submit(s, "u", 100);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(pool.Queue(std::nullopt)->empty());
  EXPECT_EQ(*pool.Schedule(), 0);
  EXPECT_TRUE(pool.PendingOrders(a.node_id, 0)->empty());
  ASSERT_TRUE(pool.Submit(Spec(1), "u").ok());
  EXPECT_EQ(*pool.Schedule(), 1);
}

// A server killed at points along a run of random operations: a pool
// opened on a copy of its SQLite files as they were on disk (the database
// and its write-ahead log), whose agents then reconnect, schedules exactly
// what the killed one does when its agents reconnect, and both go on alike.
TEST(PoolQueueRestartTest, AReopenedPoolSchedulesWhatTheFirstWould) {
  auto base =
      std::filesystem::temp_directory_path() / ("pool_queue_restart_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base / "first");
  FakeClock clock;
  auto store = *SqliteStore::Open((base / "first" / "state.db").string());
  Pool pool(*store, clock, ScenarioOptions(), PoolHooks{});
  Scenario s(7);
  int64_t placed_after_restart = 0;
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 60; ++i) {
      s.Step(pool, clock);
      ASSERT_FALSE(::testing::Test::HasFailure()) << "round " << round << " step " << i;
    }
    s.DisconnectAll(pool);
    // Killed here: its files as they are (the connection stays open).
    auto dir = base / ("restart" + std::to_string(round));
    std::filesystem::create_directories(dir);
    for (const auto& f : std::filesystem::directory_iterator(base / "first")) {
      std::string name = f.path().filename().string();
      if (name.ends_with("-shm")) continue;  // rebuilt from the log
      std::filesystem::copy_file(f.path(), dir / name);
    }
    FakeClock clock2(clock.NowMs());
    auto store2 = *SqliteStore::Open((dir / "state.db").string());
    Pool reopened(*store2, clock2, ScenarioOptions(), PoolHooks{});
    Scenario s2 = s;  // the same agents, users and random choices from here
    s.HelloAll(pool);
    s2.HelloAll(reopened);
    auto p1 = pool.Schedule();
    auto p2 = reopened.Schedule();
    ASSERT_TRUE(p1.ok() && p2.ok());
    EXPECT_EQ(*p1, *p2) << "round " << round;
    placed_after_restart += *p2;
    ASSERT_EQ(s.Fingerprint(pool), s2.Fingerprint(reopened)) << "round " << round;
    // And they go on alike (the reopened one on a copy of the scenario).
    Scenario ahead = s;
    for (int i = 0; i < 20; ++i) {
      ahead.Step(pool, clock);
      s2.Step(reopened, clock2);
    }
    ASSERT_EQ(ahead.Fingerprint(pool), s2.Fingerprint(reopened)) << "round " << round;
    s = ahead;
  }
  EXPECT_GT(placed_after_restart, 0);  // the passes after the restarts placed work
  EXPECT_GT(s.placements, 20);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace gpupool::server
