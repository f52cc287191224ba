// TaskManager and the shim with the real executors (process and the
// bubblewrap sandbox) on this machine: the ranks of multi-node jobs, their
// environment, the master port rank 0's agent chooses, the gang lease, and
// checkpoints that only rank 0 uploads.
#include "agent/tasks.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "agent/task_files.h"
#include "common/clock.h"
#include "common/files.h"
#include "exec/executors.h"
#include "net/event_loop.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class TasksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-tasks-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    config_.executors = {"process", "sandbox"};
    config_.cgroup = "none";  // no cgroup changes from a unit test
    config_.images.dir = dir_ + "/images";
    env_ = exec::ProbeExecEnvironment(config_, -1, -1);
    manager_ = MakeManager();
    ASSERT_TRUE(manager_->Recover().ok());
  }

  void TearDown() override {
    manager_.reset();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::unique_ptr<TaskManager> MakeManager(int64_t kill_grace_ms = 5000) {
    TaskManager::Options o;
    o.data_dir = dir_ + "/data";
    o.kill_grace_ms = kill_grace_ms;
    o.exec_config = &config_;
    o.exec_env = &env_;
    o.blob.server_url = blob_url_;
    o.blob.cache_dir = dir_ + "/chunk-cache";
    return std::make_unique<TaskManager>(std::move(o), loop_, clock_, nullptr);
  }

  bool Offers(const std::string& executor) const {
    return std::find(env_.available.begin(), env_.available.end(), executor) !=
           env_.available.end();
  }

  static proto::StartTask Task(const std::string& attempt, const std::string& run) {
    proto::StartTask t;
    t.attempt_id = attempt;
    t.job_id = std::stoll(attempt.substr(0, attempt.find('.')));
    t.spec.name = "test";
    t.spec.run = run;
    t.spec.executor = "process";
    return t;
  }

  static proto::GangRank Rank(int rank, int nodes, Distributed mode, std::string addr = "",
                              int port = 0) {
    proto::GangRank g;
    g.rank = rank;
    g.nodes = nodes;
    g.mode = mode;
    g.master_addr = std::move(addr);
    g.master_port = port;
    return g;
  }

  // The task's output records until its result was read (or the time is up).
  std::vector<OutputRecord> WaitEnded(const std::string& id, int64_t timeout_ms = 15'000) {
    std::vector<OutputRecord> out;
    int64_t give_up = clock_.NowMs() + timeout_ms;
    while (clock_.NowMs() < give_up) {
      for (auto& r : manager_->ReadOutput(id, 1 << 20)) out.push_back(std::move(r));
      if (manager_->tasks().at(id).result) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return out;
  }

  // Waits for a line of the job's stdout; false when the time is up.
  bool WaitLine(const std::string& id, const std::string& line,
                std::vector<OutputRecord>* seen = nullptr, int64_t timeout_ms = 10'000) {
    int64_t give_up = clock_.NowMs() + timeout_ms;
    while (clock_.NowMs() < give_up) {
      for (auto& r : manager_->ReadOutput(id, 1 << 20)) {
        bool hit = r.stream == "stdout" && r.text == line;
        if (seen) seen->push_back(std::move(r));
        if (hit) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // WaitLine while the server answers: the lease renewed every 50 ms, so
  // that a slow start on a loaded machine does not outlast it.
  bool WaitLineRenewing(const std::string& id, const std::string& line,
                        std::vector<OutputRecord>* seen = nullptr) {
    for (int i = 0; i < 300; ++i) {
      manager_->RenewLeases(BootTimeMs());
      if (WaitLine(id, line, seen, 50)) return true;
    }
    return false;
  }

  // The job's environment, from `env` as its run line.
  static std::map<std::string, std::string> Environment(const std::vector<OutputRecord>& out) {
    std::map<std::string, std::string> env;
    for (const auto& r : out) {
      if (r.stream != "stdout") continue;
      size_t eq = r.text.find('=');
      if (eq != std::string::npos) env[r.text.substr(0, eq)] = r.text.substr(eq + 1);
    }
    return env;
  }

  static std::string Events(const std::vector<OutputRecord>& out) {
    std::string events;
    for (const auto& r : out) {
      if (r.stream == "event") events += r.text + "\n";
    }
    return events;
  }

  std::string dir_;
  std::string blob_url_ = "http://127.0.0.1:1";
  exec::ExecConfig config_;
  exec::ExecEnvironment env_;
  net::EventLoop loop_;
  RealClock clock_;
  std::unique_ptr<TaskManager> manager_;
};

constexpr const char* kTorchVariables[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                           "RANK",        "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                           "NODE_RANK",   "GROUP_RANK",  "GPUPOOL_MASTER"};

TEST_F(TasksTest, ATorchRankGetsTorchrunsVariablesUnderEveryExecutor) {
  for (const std::string executor : {"process", "sandbox"}) {
    if (!Offers(executor)) {
      ADD_FAILURE() << executor << " does not work here: " << env_.unavailable[executor];
      continue;
    }
    SCOPED_TRACE(executor);
    std::string id = executor == "process" ? "11.1" : "12.1";
    proto::StartTask t = Task(id, "env");
    t.spec.executor = executor;
    t.gpu_uuids = {"GPU-a", "GPU-b"};
    t.gang = Rank(2, 3, Distributed::kTorch, "10.0.0.5", 29533);
    // The spec validator refuses these names; the shim would not let them
    // through either.
    t.spec.env = {{"RANK", "7"}, {"MASTER_PORT", "1"}, {"MY_VAR", "kept"}};
    ASSERT_TRUE(manager_->Start(t, {}).ok());
    auto env = Environment(WaitEnded(id));
    ASSERT_TRUE(manager_->tasks().at(id).result);
    EXPECT_EQ(manager_->tasks().at(id).result->exit_code, 0);
    EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.5");
    EXPECT_EQ(env["MASTER_PORT"], "29533");
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["RANK"], "2");
    EXPECT_EQ(env["LOCAL_RANK"], "0");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
    EXPECT_EQ(env["NODE_RANK"], "2");
    EXPECT_EQ(env["GROUP_RANK"], "2");
    EXPECT_EQ(env["GPUPOOL_MASTER"], "10.0.0.5:29533");
    EXPECT_EQ(env["GPUPOOL_NNODES"], "3");
    EXPECT_EQ(env["GPUPOOL_NODE_RANK"], "2");
    EXPECT_EQ(env["GPUPOOL_GPUS_PER_NODE"], "2");
    EXPECT_EQ(env["MY_VAR"], "kept");
  }
}

TEST_F(TasksTest, AnIpv6MasterIsBracketedOnlyInGpupoolMaster) {
  proto::StartTask t = Task("13.1", "env");
  t.gang = Rank(1, 2, Distributed::kTorch, "fd00::5", 40000);
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  auto env = Environment(WaitEnded("13.1"));
  EXPECT_EQ(env["MASTER_ADDR"], "fd00::5");
  EXPECT_EQ(env["GPUPOOL_MASTER"], "[fd00::5]:40000");
}

TEST_F(TasksTest, ReplicasAndSingleNodeJobsGetOnlyTheirPlace) {
  proto::StartTask replica = Task("14.1", "env");
  replica.gpu_uuids = {"GPU-a"};
  replica.gang = Rank(1, 4, Distributed::kNone);
  ASSERT_TRUE(manager_->Start(replica, {}).ok());
  auto env = Environment(WaitEnded("14.1"));
  EXPECT_EQ(env["GPUPOOL_NNODES"], "4");
  EXPECT_EQ(env["GPUPOOL_NODE_RANK"], "1");
  EXPECT_EQ(env["GPUPOOL_GPUS_PER_NODE"], "1");
  for (const char* name : kTorchVariables) EXPECT_EQ(env.count(name), 0u) << name;

  ASSERT_TRUE(manager_->Start(Task("15.1", "env"), {}).ok());
  env = Environment(WaitEnded("15.1"));
  EXPECT_EQ(env["GPUPOOL_NNODES"], "1");
  EXPECT_EQ(env["GPUPOOL_NODE_RANK"], "0");
  EXPECT_EQ(env.count("GPUPOOL_GPUS_PER_NODE"), 0u);
  for (const char* name : kTorchVariables) EXPECT_EQ(env.count(name), 0u) << name;
}

// Rank 0's agent chooses a free port, keeps it with the task, and repeats
// it in every report, also after an agent restart.
TEST_F(TasksTest, RankZeroGetsAFreePortThatStaysWithTheTask) {
  proto::StartTask t = Task("21.1", "echo up; sleep 30");
  t.gang = Rank(0, 2, Distributed::kTorch);
  ASSERT_TRUE(NeedsMaster(t));
  ASSERT_TRUE(manager_->ChooseMaster(t, "10.1.2.3").ok());
  ASSERT_TRUE(t.gang);
  EXPECT_EQ(t.gang->master_addr, "10.1.2.3");
  int port = t.gang->master_port;
  ASSERT_GT(port, 0);
  ASSERT_LE(port, 65535);
  {  // free: the job can listen on it
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    ::close(fd);
  }
  ASSERT_TRUE(manager_->Start(t, {}).ok());

  proto::TaskReport r = manager_->Report(manager_->tasks().at("21.1"));
  EXPECT_EQ(r.state, proto::TaskState::kRunning);
  EXPECT_EQ(r.master_addr, "10.1.2.3");
  EXPECT_EQ(r.master_port, port);
  std::vector<OutputRecord> out;
  ASSERT_TRUE(WaitLine("21.1", "up", &out));

  // A resent order picks no new port.
  proto::StartTask again = Task("21.1", "echo up; sleep 30");
  again.gang = Rank(0, 2, Distributed::kTorch);
  ASSERT_TRUE(manager_->ChooseMaster(again, "10.9.9.9").ok());
  EXPECT_EQ(again.gang->master_addr, "10.1.2.3");
  EXPECT_EQ(again.gang->master_port, port);

  // Another gang's rank 0 gets another port.
  proto::StartTask other = Task("22.1", "env");
  other.gang = Rank(0, 2, Distributed::kTorch);
  ASSERT_TRUE(manager_->ChooseMaster(other, "10.1.2.3").ok());
  EXPECT_NE(other.gang->master_port, port);

  // Orders that name their master, and ranks that need none, are left alone.
  proto::StartTask rank1 = Task("23.1", "true");
  rank1.gang = Rank(1, 2, Distributed::kTorch, "10.7.7.7", 1234);
  proto::StartTask replica = Task("24.1", "true");
  replica.gang = Rank(0, 2, Distributed::kNone);
  proto::StartTask single = Task("25.1", "true");
  for (proto::StartTask* u : {&rank1, &replica, &single}) {
    proto::StartTask before = *u;
    EXPECT_FALSE(NeedsMaster(*u));
    ASSERT_TRUE(manager_->ChooseMaster(*u, "10.1.2.3").ok());
    EXPECT_EQ(*u, before);
  }

  // An agent restart finds the master with the task.
  auto restarted = MakeManager();
  ASSERT_TRUE(restarted->Recover().ok());
  ASSERT_TRUE(restarted->tasks().count("21.1"));
  const TaskState& recovered = restarted->tasks().at("21.1");
  EXPECT_TRUE(recovered.gang);
  r = restarted->Report(recovered);
  EXPECT_EQ(r.state, proto::TaskState::kRunning);
  EXPECT_EQ(r.master_addr, "10.1.2.3");
  EXPECT_EQ(r.master_port, port);
  bool reported = false;
  for (const proto::TaskReport& each : restarted->Reports()) {
    if (each.attempt_id == "21.1") reported = each.master_port == port;
  }
  EXPECT_TRUE(reported) << "the hello's task list carries the master too";
  proto::StartTask resent = again;
  resent.gang->master_port = 0;
  ASSERT_TRUE(restarted->ChooseMaster(resent, "10.9.9.9").ok());
  EXPECT_EQ(resent.gang->master_port, port);

  // ... and with it the job's environment, and its final report.
  manager_->Stop("21.1", "cancelled");
  WaitEnded("21.1");
  r = manager_->Report(manager_->tasks().at("21.1"));
  EXPECT_EQ(r.state, proto::TaskState::kExited);
  EXPECT_EQ(r.master_port, port);
}

TEST_F(TasksTest, ATaskThatCannotStartLeavesNothingBehindAndAResentOrderStartsAfresh) {
  // What a start that failed half-way would leave: the task's directory,
  // here with something where exec.json goes.
  std::string task_dir = dir_ + "/data/tasks/31.1";
  fs::create_directories(task_dir + "/exec.json");
  Status first = manager_->Start(Task("31.1", "echo fresh"), {});
  ASSERT_FALSE(first.ok());
  EXPECT_THAT(first.message(), HasSubstr("exec.json"));
  EXPECT_FALSE(fs::exists(task_dir)) << "a task that did not start keeps no directory";
  EXPECT_EQ(manager_->tasks().count("31.1"), 0u);

  ASSERT_TRUE(manager_->Start(Task("31.1", "echo fresh"), {}).ok());
  std::vector<OutputRecord> out;
  ASSERT_TRUE(WaitLine("31.1", "fresh", &out));
  WaitEnded("31.1");
  EXPECT_EQ(manager_->Report(manager_->tasks().at("31.1")).state, proto::TaskState::kExited);
}

TEST_F(TasksTest, RankZeroJobSeesTheChosenMaster) {
  proto::StartTask t = Task("26.1", "env");
  t.gang = Rank(0, 2, Distributed::kTorch);
  ASSERT_TRUE(manager_->ChooseMaster(t, "fd00::7").ok());
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  auto env = Environment(WaitEnded("26.1"));
  EXPECT_EQ(env["MASTER_ADDR"], "fd00::7");
  EXPECT_EQ(env["MASTER_PORT"], std::to_string(t.gang->master_port));
  EXPECT_EQ(env["RANK"], "0");
  EXPECT_EQ(env["WORLD_SIZE"], "2");
}

TEST_F(TasksTest, AnAttemptWhoseLeaseRunsOutIsStopped) {
  // Long enough that a loaded machine starts the shim within it; the test
  // renews until the job is up and then stops renewing.
  manager_->SetLease(1500);
  const int64_t sent = BootTimeMs();
  manager_->RenewLeases(sent);
  proto::StartTask t = Task("31.1",
                            "trap 'echo term; exit 3' TERM; echo up; "
                            "while true; do sleep 0.05; done");
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  // The lease is there before the shim runs, counted from the request.
  auto text = ReadFile(manager_->tasks().at("31.1").paths.lease());
  ASSERT_TRUE(text.ok());
  auto lease = DecodeLeaseFile(*text);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->lease_ms, 1500);
  EXPECT_EQ(lease->deadline_ms, sent + 1500);

  // Renewed while the job starts (its trap is set once it says "up").
  std::vector<OutputRecord> out;
  ASSERT_TRUE(WaitLineRenewing("31.1", "up", &out));
  for (auto& r : WaitEnded("31.1")) out.push_back(std::move(r));
  const TaskState& task = manager_->tasks().at("31.1");
  ASSERT_TRUE(task.result);
  EXPECT_FALSE(task.result->failed);
  EXPECT_TRUE(task.result->lost);
  EXPECT_THAT(task.result->reason, HasSubstr("lost contact with the server for 1.5s"));
  EXPECT_THAT(task.result->reason, HasSubstr("(attempt lease)"));
  EXPECT_EQ(task.result->exit_code, 3) << "stopped like a normal stop: SIGTERM first";
  EXPECT_THAT(Events(out), HasSubstr("attempt lease"));
  // Lost, not failed: the job is requeued, it is not at fault.
  EXPECT_EQ(manager_->Report(task).state, proto::TaskState::kLost);
}

TEST_F(TasksTest, RenewedLeasesKeepTasksRunningAndStaleAnswersDoNotMoveThemBack) {
  // Long enough that a loaded machine (the sanitizer build on two busy
  // cores) starts each shim and comes round this loop within it.
  const int64_t lease = 3000;
  manager_->SetLease(lease);
  proto::StartTask rank =
      Task("32.1", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done");
  rank.gang = Rank(1, 2, Distributed::kNone);
  proto::StartTask single =
      Task("33.1", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done");
  const int64_t first = BootTimeMs();
  manager_->RenewLeases(first);
  ASSERT_TRUE(manager_->Start(rank, {}).ok());
  manager_->RenewLeases(BootTimeMs());
  ASSERT_TRUE(manager_->Start(single, {}).ok());
  for (const char* id : {"32.1", "33.1"}) {
    ASSERT_TRUE(fs::exists(manager_->tasks().at(id).paths.lease())) << id;
  }
  // Renewed, both outlive the first lease three times over, still ticking.
  std::map<std::string, int> ticks;
  while (BootTimeMs() < first + 3 * lease || ticks.size() < 2) {
    manager_->RenewLeases(BootTimeMs());
    manager_->Poll();
    for (const char* id : {"32.1", "33.1"}) {
      for (const auto& r : manager_->ReadOutput(id, 1 << 20)) {
        if (r.text.starts_with("tick ")) ++ticks[id];
      }
      ASSERT_FALSE(manager_->tasks().at(id).result) << manager_->tasks().at(id).result->reason;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // An answer to an older request does not shorten a lease.
  const std::string path = manager_->tasks().at("33.1").paths.lease();
  auto before = DecodeLeaseFile(*ReadFile(path));
  ASSERT_TRUE(before.ok());
  manager_->RenewLeases(before->deadline_ms - lease - 500);
  EXPECT_EQ(DecodeLeaseFile(*ReadFile(path))->deadline_ms, before->deadline_ms);
  // Without renewals both go.
  for (const char* id : {"32.1", "33.1"}) {
    WaitEnded(id, 10'000);
    ASSERT_TRUE(manager_->tasks().at(id).result);
    EXPECT_THAT(manager_->tasks().at(id).result->reason, HasSubstr("attempt lease")) << id;
  }
}

TEST_F(TasksTest, ALeaseThatRunsOutAtOnceStopsTheTaskBeforeOrAsItStarts) {
  manager_->SetLease(1);
  manager_->RenewLeases(BootTimeMs());
  proto::StartTask t = Task("34.1", "echo ran; sleep 30");
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  auto out = WaitEnded("34.1");
  const TaskState& task = manager_->tasks().at("34.1");
  ASSERT_TRUE(task.result);
  EXPECT_TRUE(task.result->lost);
  EXPECT_EQ(manager_->Report(task).state, proto::TaskState::kLost);
  EXPECT_THAT(task.result->reason, HasSubstr("(attempt lease)"));
  if (task.result->reason.find("before it started") != std::string::npos) {
    for (const auto& r : out) EXPECT_NE(r.text, "ran");
  }
}

TEST_F(TasksTest, ATaskStartedWhileARenewalIsLateWaitsForItInsteadOfBeingLost) {
  // The newest answered renewal request is old when the start order comes
  // (a busy server answers late): the task's lease is already in its stop
  // window (a third of the lease, at most the kill grace), not expired.
  manager_ = MakeManager(/*kill_grace_ms=*/60'000);
  ASSERT_TRUE(manager_->Recover().ok());
  const int64_t lease = 90'000;  // stop window: 30 s
  manager_->SetLease(lease);
  manager_->RenewLeases(BootTimeMs() - lease + 25'000);  // 25 s left
  ASSERT_TRUE(manager_->Start(Task("37.1", "echo ran"), {}).ok());
  // The shim waits for the renewal rather than give the attempt up.
  std::vector<OutputRecord> out;
  bool waiting = false;
  const int64_t give_up = clock_.NowMs() + 20'000;
  while (!waiting && !manager_->tasks().at("37.1").result && clock_.NowMs() < give_up) {
    for (auto& r : manager_->ReadOutput("37.1", 1 << 20)) {
      waiting |= r.stream == "event" && r.text.find("waiting for the renewal") != std::string::npos;
      out.push_back(std::move(r));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(waiting) << Events(out);
  // The late answer comes: the job runs.
  manager_->RenewLeases(BootTimeMs());
  for (auto& r : WaitEnded("37.1")) out.push_back(std::move(r));
  const TaskState& task = manager_->tasks().at("37.1");
  ASSERT_TRUE(task.result);
  EXPECT_FALSE(task.result->lost) << task.result->reason;
  EXPECT_EQ(manager_->Report(task).state, proto::TaskState::kExited);
  EXPECT_EQ(task.result->exit_code, 0);
  bool ran = false;
  for (const auto& r : out) ran |= r.stream == "stdout" && r.text == "ran";
  EXPECT_TRUE(ran);
}

TEST_F(TasksTest, AShareKeepsItsComputeShareAndModeAcrossARestart) {
  config_.gpu_share_strict = true;  // the node's sharing_mode: strict
  proto::StartTask t = Task("36.1", "true");
  t.gpu_uuids = {"GPU-aaaa"};
  ASSERT_TRUE(manager_->Start(t, {{}, exec::GpuShare{int64_t{1} << 30, 250}}).ok());
  const TaskState& task = manager_->tasks().at("36.1");
  EXPECT_EQ(task.gpu_share_milli, 250);
  EXPECT_TRUE(task.gpu_share_strict);
  EXPECT_EQ(task.gpu_memory_cap, int64_t{1} << 30);
  WaitEnded("36.1");  // (no libgpushare.so here: it fails to start; what is kept stays)
  auto restarted = MakeManager();
  ASSERT_TRUE(restarted->Recover().ok());
  const TaskState& again = restarted->tasks().at("36.1");
  EXPECT_EQ(again.gpu_share_milli, 250);
  EXPECT_TRUE(again.gpu_share_strict);
  EXPECT_EQ(again.gpu_memory_cap, int64_t{1} << 30);
}

TEST_F(TasksTest, ARestartedAgentRenewsLeasesOnceItKnowsTheLease) {
  // Far longer than the test takes: only the lease file is under test here.
  manager_->SetLease(30'000);
  manager_->RenewLeases(BootTimeMs());
  // A recovered agent that has no lease yet leaves a running task's lease
  // alone; the welcome's answer to its hello renews it.
  proto::StartTask late = Task("35.1", "echo up; sleep 30");
  ASSERT_TRUE(manager_->Start(late, {}).ok());
  ASSERT_TRUE(WaitLineRenewing("35.1", "up"));
  auto restarted = MakeManager();
  ASSERT_TRUE(restarted->Recover().ok());
  std::string path = manager_->tasks().at("35.1").paths.lease();
  auto before = ReadFile(path);
  ASSERT_TRUE(before.ok());
  restarted->RenewLeases(BootTimeMs());  // no lease known yet: nothing written
  EXPECT_EQ(*ReadFile(path), *before);
  int64_t hello_sent = BootTimeMs();
  restarted->SetLease(5000);
  restarted->RenewLeases(hello_sent);
  auto after = DecodeLeaseFile(*ReadFile(path));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->lease_ms, 5000);
  EXPECT_EQ(after->deadline_ms, hello_sent + 5000);
  // A server that grants no leases any more: the file goes, so no old
  // deadline stops the task.
  restarted->SetLease(0);
  EXPECT_FALSE(fs::exists(path));
  manager_->Stop("35.1", "done", TaskManager::kKillNow);
  WaitEnded("35.1");
}

// A rank above 0 gets the checkpoint signal before a stop that requeues the
// job, like every rank, but never uploads: its SIGTERM comes after half the
// grace, whatever it commits.
TEST_F(TasksTest, ARankAboveZeroCheckpointsOnSignalButNeverUploads) {
  // Uploads would go here: a listener that is never answered.
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  blob_url_ = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  manager_ = MakeManager();
  ASSERT_TRUE(manager_->Recover().ok());

  proto::StartTask t = Task("41.1",
                            "trap 'echo usr1; mkdir -p \"$GPUPOOL_CHECKPOINT_DIR/ckpt-1\"' USR1; "
                            "trap 'echo term; exit 0' TERM; echo up; "
                            "while true; do sleep 0.05; done");
  t.spec.checkpoint = CheckpointSpec{};
  t.gang = Rank(1, 2, Distributed::kTorch, "10.0.0.5", 29533);
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  std::vector<OutputRecord> out;
  ASSERT_TRUE(WaitLine("41.1", "up", &out));
  int64_t stopped = clock_.NowMs();
  manager_->StopToRequeue("41.1", "preempted", 3000);
  for (auto& r : WaitEnded("41.1")) out.push_back(std::move(r));

  const TaskState& task = manager_->tasks().at("41.1");
  ASSERT_TRUE(task.result);
  EXPECT_EQ(task.result->exit_code, 0) << "SIGTERM, not SIGKILL";
  int64_t usr1 = -1, term = -1;
  for (const auto& r : out) {
    if (r.text == "usr1") usr1 = r.ts_ms;
    if (r.text == "term") term = r.ts_ms;
  }
  ASSERT_GE(usr1, 0) << "the checkpoint signal came first";
  ASSERT_GE(term, 0);
  EXPECT_LT(usr1 - stopped, 1000);
  EXPECT_GE(term - stopped, 1400) << "its commit does not hurry the stop";
  EXPECT_LT(term - stopped, 2900);
  std::string events = Events(out);
  EXPECT_THAT(events, HasSubstr("uploaded from rank 0 only"));
  EXPECT_THAT(events, Not(HasSubstr("uploading")));
  EXPECT_EQ(::accept(listener, nullptr, nullptr), -1) << "nothing reached the blob store";
  ::close(listener);
}

}  // namespace
}  // namespace gpupool::agent
