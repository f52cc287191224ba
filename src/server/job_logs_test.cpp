// Job logs on the server (server/job_logs.h) through the Pool, as agents
// reach it: the output limit against an agent that does not keep to it,
// and log retention with a fake clock.
#include "server/job_logs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "server/pool.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDay = 24 * 3600 * 1000;

class JobLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("job_logs_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store_ = *SqliteStore::Open((dir_ / "state.db").string());
    options_.logs.max_job_output_bytes = 1000;
    options_.logs.retention_ms = 30 * kDay;
    options_.logs.budget_bytes = int64_t{1} << 30;
    MakePool();
  }
  void TearDown() override {
    pool_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void MakePool() {
    PoolHooks hooks;
    hooks.outbox_ready = [](const std::string&) {};
    hooks.job_changed = [](int64_t) {};
    hooks.schedule_needed = [] {};
    pool_ = std::make_unique<Pool>(*store_, clock_, options_, hooks);
    node_ = pool_->AgentHello(Hello())->node_id;
  }
  proto::Hello Hello() {
    proto::Hello h;
    h.node_name = "a";
    h.agent_instance = "i1";
    h.cpu_milli = 8000;
    h.memory_mib = 32768;
    for (int i = 0; i < 4; ++i)
      h.gpus.push_back({i, "gpu" + std::to_string(i), "A100", 81920, 8, 0, true});
    return h;
  }
  // Submits a job and starts it on node a; returns its id.
  int64_t Started() {
    JobSpec s;
    s.name = "flood";
    s.run = "yes";
    s.resources.gpus = 1;
    int64_t id = pool_->Submit(s, "alice")->id;
    EXPECT_EQ(*pool_->Schedule(), 1);
    Send(proto::kTaskStatus,
         proto::Encode(
             proto::TaskReport{Attempt(id), proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}));
    return id;
  }
  void Finish(int64_t id) {
    Send(proto::kTaskStatus, proto::Encode(proto::TaskReport{Attempt(id), proto::TaskState::kExited,
                                                             0, 0, "", clock_.NowMs()}));
    ASSERT_TRUE(IsTerminal(pool_->GetJob(id)->job.state));
  }
  static std::string Attempt(int64_t id) { return std::to_string(id) + ".1"; }
  void Send(std::string_view type, const std::string& body) {
    Status s = pool_->AgentMessage(node_, ++seq_, std::string(type), body);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Lines of `n` bytes from `offset` on, as the agent ships output.log.
  void Ship(int64_t job, int64_t& offset, int count, size_t n,
            const std::string& stream = "stdout") {
    proto::LogChunk c;
    c.attempt_id = Attempt(job);
    for (int i = 0; i < count; ++i) {
      c.lines.push_back({offset, stream, clock_.NowMs(), std::string(n, 'y')});
      offset += static_cast<int64_t>(n) + 17;
    }
    Send(proto::kLogs, proto::Encode(c));
  }
  std::vector<LogLine> All(int64_t job) {
    std::vector<LogLine> out;
    int64_t cursor = 0;
    while (true) {
      auto page = pool_->ReadLogs(job, cursor, 1000);
      EXPECT_TRUE(page.ok());
      if (!page.ok() || page->lines.empty()) break;
      cursor = page->lines.back().cursor;
      out.insert(out.end(), page->lines.begin(), page->lines.end());
    }
    return out;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  PoolOptions options_;
  std::unique_ptr<Pool> pool_;
  std::string node_;
  int64_t seq_ = 0;
};

TEST_F(JobLogsTest, StartOrdersCarryTheLimit) {
  int64_t id = Started();
  bool found = false;
  for (const auto& m : *pool_->PendingOrders(node_, 0)) {
    if (m.type != proto::kStart) continue;
    EXPECT_EQ(proto::DecodeStartTask(m.body)->max_output_bytes, 1000);
    found = true;
  }
  EXPECT_TRUE(found) << "no start order for job " << id;
}

TEST_F(JobLogsTest, AnAgentThatFloodsPastTheLimitGetsNoMoreStoredThanTheLimit) {
  int64_t id = Started();
  int64_t offset = 0;
  // Far past the limit (1000 bytes: 25 lines of 20 bytes at 40 each), in
  // several messages, as an agent that does not keep to it would send.
  for (int i = 0; i < 20; ++i) Ship(id, offset, 50, 20);
  auto lines = All(id);
  int64_t output = 0, markers = 0;
  for (const LogLine& l : lines) {
    if (l.stream == "stdout") output += LogLineCost(l.text);
    if (l.stream == "event" && l.text == OutputLimitMarker(1000)) ++markers;
  }
  EXPECT_EQ(markers, 1);
  EXPECT_LE(output, 1000);
  EXPECT_EQ(output, 25 * LogLineCost(std::string(20, 'y')));
  EXPECT_EQ(lines.back().text, "output limit of 1000 B reached: further output dropped");
  // Events still pass within their allowance; more output never does.
  Ship(id, offset, 1, 30, "event");
  Ship(id, offset, 5, 20);
  lines = All(id);
  EXPECT_EQ(lines.back().stream, "event");
  EXPECT_EQ(lines.back().text, std::string(30, 'y'));
  // The job shows it.
  auto d = pool_->GetJob(id);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->output.limited.size(), 1u);
  EXPECT_EQ(d->output.limited[0].limit_event, OutputLimitMarker(1000));
  EXPECT_EQ(d->output.limited[0].limit_reached_ms, clock_.NowMs());
  EXPECT_EQ(d->output.lines, static_cast<int64_t>(lines.size()));
  // A reconnecting agent resumes after the last line taken, dropped or not.
  ASSERT_TRUE(pool_->AgentDisconnected(node_).ok());
  proto::Hello again = Hello();
  again.tasks = {{Attempt(id), proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()}};
  auto w = pool_->AgentHello(again);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->log_offsets.at(Attempt(id)), offset - 37);
}

TEST_F(JobLogsTest, ResentLinesAreNotCountedTwice) {
  int64_t id = Started();
  int64_t offset = 0;
  Ship(id, offset, 20, 20);  // 800 of 1000 bytes
  int64_t again = 0;
  for (int i = 0; i < 10; ++i) {
    again = 0;
    Ship(id, again, 20, 20);  // the same lines after reconnects
  }
  Ship(id, offset, 5, 20);  // 5 more fit: 1000 exactly
  auto lines = All(id);
  EXPECT_EQ(lines.size(), 25u);
  for (const LogLine& l : lines) EXPECT_EQ(l.stream, "stdout");
}

TEST_F(JobLogsTest, TheAgentsOwnMarkerIsKeptAndNotRepeated) {
  options_.logs.max_job_output_bytes = 10'000;  // the provider's limit is lower than the server's
  MakePool();
  int64_t id = Started();
  int64_t offset = 0;
  Ship(id, offset, 10, 20);
  proto::LogChunk c{Attempt(id), {{offset, "event", clock_.NowMs(), OutputLimitMarker(500)}}};
  offset += 100;
  Send(proto::kLogs, proto::Encode(c));
  Ship(id, offset, 10, 20);  // a broken agent goes on
  auto lines = All(id);
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines.back().text, OutputLimitMarker(500));
  auto d = pool_->GetJob(id);
  ASSERT_EQ(d->output.limited.size(), 1u);
  EXPECT_EQ(d->output.limited[0].limit_event, OutputLimitMarker(500));
}

TEST(LogRemovalReason, RetentionFirstThenTheBudget) {
  LogOptions o;
  o.retention_ms = 30 * kDay;
  o.budget_bytes = 1000;
  const int64_t now = 100 * kDay;
  JobLogSize old{1, now - 31 * kDay, 5, 500, 100};
  JobLogSize recent{2, now - kDay, 5, 500, 100};
  auto r = LogRemovalReason(o, old, 10, now);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->budget);
  EXPECT_THAT(r->reason, HasSubstr("ended more than 30d ago"));
  EXPECT_FALSE(LogRemovalReason(o, recent, 1000, now).has_value());
  r = LogRemovalReason(o, recent, 1001, now);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->budget);
  EXPECT_THAT(r->reason, HasSubstr("more than the server's --log-budget of 1000 B"));
}

TEST_F(JobLogsTest, RetentionRemovesOldLogsThenTheOldestUntilUnderTheBudget) {
  options_.logs.max_job_output_bytes = 1 << 20;
  MakePool();
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; ++i) {
    int64_t id = Started();
    int64_t offset = 0;
    Ship(id, offset, 200, 100);
    Finish(id);
    jobs.push_back(id);
    clock_.AdvanceMs(kDay);
  }
  int64_t running = Started();
  int64_t offset = 0;
  Ship(running, offset, 200, 100);
  // Jobs ended 4, 3, 2 and 1 days ago; keep 3.5 days and about two jobs' logs.
  LogTotals before;
  {
    LogCollector c(*store_, clock_, options_.logs);
    before = *c.Totals();
  }
  EXPECT_EQ(before.jobs, 5);
  LogOptions o = options_.logs;
  o.retention_ms = 3 * kDay + kDay / 2;
  o.budget_bytes = before.stored_bytes * 3 / 5 - 1;  // the running job and two more do not fit
  LogCollector collector(*store_, clock_, o);
  LogGcStats stats;
  int steps = 0;
  while (*collector.Step(stats)) ASSERT_LT(++steps, 1000);
  EXPECT_EQ(stats.jobs_removed, 3);
  EXPECT_EQ(stats.by_retention, 1);
  EXPECT_EQ(stats.by_budget, 2);
  EXPECT_GT(stats.chunks_freed, 0);
  auto removed = pool_->ReadLogs(jobs[0], 0, 10);
  ASSERT_TRUE(removed->removed.has_value());
  EXPECT_THAT(DescribeRemoval(*removed->removed),
              HasSubstr("the output of job " + std::to_string(jobs[0]) + " was removed on "));
  EXPECT_THAT(removed->removed->reason, HasSubstr("--log-retention"));
  EXPECT_THAT(pool_->ReadLogs(jobs[1], 0, 10)->removed->reason, HasSubstr("--log-budget"));
  EXPECT_TRUE(pool_->ReadLogs(jobs[2], 0, 10)->removed.has_value());
  // The newest ended job and the running one keep theirs.
  EXPECT_EQ(All(jobs[3]).size(), 200u);
  EXPECT_EQ(All(running).size(), 200u);
  EXPECT_TRUE(pool_->GetJob(jobs[0])->output.removed.has_value());
  // Nothing more to do.
  LogGcStats again;
  EXPECT_FALSE(*collector.Step(again));
  EXPECT_EQ(again.jobs_removed, 0);
}

TEST_F(JobLogsTest, LogGcRunsItsStepsOnTheLoop) {
  int64_t id = Started();
  int64_t offset = 0;
  Ship(id, offset, 20, 10);
  Finish(id);
  clock_.AdvanceMs(31 * kDay);
  net::EventLoop loop;
  LogCollector collector(*store_, clock_, options_.logs);
  LogGc gc(loop, collector);
  std::vector<LogGcStats> got;
  gc.Collect([&](Result<LogGcStats> s) {
    ASSERT_TRUE(s.ok());
    got.push_back(*s);
  });
  gc.Collect([&](Result<LogGcStats> s) {  // while the first runs: the same answer
    ASSERT_TRUE(s.ok());
    got.push_back(*s);
    loop.Stop();
  });
  loop.Run();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].jobs_removed, 1);
  EXPECT_EQ(got[1].jobs_removed, 1);
  EXPECT_EQ(got[0].kept.jobs, 0);
}

}  // namespace
}  // namespace gpupool::server
