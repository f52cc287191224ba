// Shims are started by exec, never as a bare fork of the threaded agent
// (issue 19, hole 6): the options round-trip, the shim is a program of its
// own, and many shims started while another thread of the agent keeps
// OpenSSL and its locks busy all run (a forked child that inherited a held
// lock would hang at its first TLS call).
#include "agent/shim_launch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>
#include <thread>

#include "agent/tasks.h"
#include "common/files.h"
#include "net/event_loop.h"
#include "net/http_client.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ShimOptions, RoundTripEverythingTheShimNeeds) {
  exec::ExecConfig config;
  config.executors = {"sandbox", "process"};
  config.sandbox.host_paths = {"/usr", "/opt/cuda"};
  config.sandbox.pasta = "/usr/local/bin/pasta";
  config.sandbox.blocked_networks = {*exec::ParseIpPrefix("10.9.0.0/16")};
  config.sandbox.gang_ports = {40000, 500};
  config.sandbox.gang_ports_per_rank = 25;
  config.gpu_driver_dir = "/opt/nvidia/driver-550";
  config.gpushare_library = "/opt/gpupool/lib/libgpushare.so";
  config.images.dir = "/var/lib/gpupool/images";
  config.images.max_bytes = 123;
  config.images.max_image_bytes = 456;
  config.docker.extra_args = {"--security-opt", "no-new-privileges"};
  config.cgroup = "/sys/fs/cgroup/gpupool";
  config.first_uid = 300000;
  config.uid_count = 7;
  config.defaults = {1 << 30, 2000, 512, 4 << 20};
  exec::ExecEnvironment env;
  env.cgroups = exec::CgroupTree::Adopt("/sys/fs/cgroup/gpupool", true);
  env.limits_mode = "cgroup v2";
  env.available = {"sandbox"};
  env.unavailable = {{"process", "not allowed"}};
  env.sandbox_images = true;
  ShimOptions o;
  o.task_dir = "/data/tasks/4.1";
  o.task.attempt_id = "4.1";
  o.task.job_id = 4;
  o.task.spec.name = "x";
  o.task.spec.run = "echo hi";
  o.task.gpu_uuids = {"GPU-1"};
  o.kill_grace_ms = 1234;
  o.exec_config = &config;
  o.exec_env = &env;
  o.uid = 300001;
  o.gid = 300001;
  o.gpu_minors = {0, 3};
  o.gpu_cap_devices = {"nvidia-caps/nvidia-cap21"};
  o.blob.server_url = "https://pool:8470";
  o.blob.token = "gpn_secret";
  o.blob.tls.ca_fingerprint = "sha256:ab";
  o.blob.tls.client_cert_file = "/data/node.crt";
  o.blob.cache_dir = "/data/chunk-cache";
  o.blob.cache_bytes = 99;
  o.blob.staging_dir = "/data/staging";
  o.agent_pid = 4242;
  o.gang_ports = {40025, 25};
  o.gpu_share = exec::GpuShare{int64_t{3} << 30, 375, /*strict=*/true};

  auto text = EncodeShimOptions(o);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = DecodeShimOptions(*text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const ShimOptions& b = (*back)->options;
  EXPECT_EQ(b.task_dir, o.task_dir);
  EXPECT_EQ(b.task, o.task);
  EXPECT_EQ(b.kill_grace_ms, 1234);
  EXPECT_EQ(b.uid, 300001);
  EXPECT_EQ(b.gpu_minors, o.gpu_minors);
  EXPECT_EQ(b.gpu_cap_devices, o.gpu_cap_devices);
  EXPECT_EQ(b.blob.token, "gpn_secret");
  EXPECT_EQ(b.blob.tls.client_cert_file, "/data/node.crt");
  EXPECT_EQ(b.blob.staging_dir, "/data/staging");
  EXPECT_EQ(b.agent_pid, 4242);
  EXPECT_EQ(b.gang_ports, o.gang_ports);
  EXPECT_EQ(b.gpu_share, o.gpu_share);
  EXPECT_EQ(b.exec_config->sandbox.pasta, "/usr/local/bin/pasta");
  EXPECT_EQ(b.exec_config->sandbox.blocked_networks, config.sandbox.blocked_networks);
  EXPECT_EQ(b.exec_config->sandbox.gang_ports, config.sandbox.gang_ports);
  EXPECT_EQ(b.exec_config->sandbox.gang_ports_per_rank, 25);
  EXPECT_EQ(b.exec_config->gpu_driver_dir, "/opt/nvidia/driver-550");
  EXPECT_EQ(b.exec_config->gpushare_library, "/opt/gpupool/lib/libgpushare.so");
  ASSERT_EQ(b.exec_config, &(*back)->exec_config);
  EXPECT_EQ(b.exec_config->executors, config.executors);
  EXPECT_EQ(b.exec_config->sandbox.host_paths, config.sandbox.host_paths);
  EXPECT_EQ(b.exec_config->images.max_bytes, 123);
  EXPECT_EQ(b.exec_config->images.max_image_bytes, 456);
  EXPECT_EQ(b.exec_config->docker, config.docker);
  EXPECT_EQ(b.exec_config->defaults, config.defaults);
  EXPECT_EQ(b.exec_config->first_uid, 300000);
  ASSERT_TRUE(b.exec_env->cgroups.has_value());
  EXPECT_EQ(b.exec_env->cgroups->path(), "/sys/fs/cgroup/gpupool");
  EXPECT_TRUE(b.exec_env->cgroups->has_cpu());
  EXPECT_EQ(b.exec_env->unavailable, env.unavailable);
  EXPECT_TRUE(b.exec_env->sandbox_images);

  // No share: none comes back.
  o.gpu_share.reset();
  auto whole = DecodeShimOptions(*EncodeShimOptions(o));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ((*whole)->options.gpu_share, std::nullopt);

  EXPECT_FALSE(DecodeShimOptions("{").ok());
  EXPECT_THAT(DecodeShimOptions(R"({"task_dir":"x"})").status().message(),
              HasSubstr("shim options"));
}

class ShimLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-shim-launch-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    config_.executors = {"process"};
    config_.cgroup = "none";
    config_.images.dir = dir_ + "/images";
    env_ = exec::ProbeExecEnvironment(config_, -1, -1);
    MakeManager(false);
  }
  void MakeManager(bool stop_with_agent) {
    manager_.reset();
    TaskManager::Options o;
    o.stop_with_agent = stop_with_agent;
    o.data_dir = dir_ + "/data";
    o.kill_grace_ms = 2000;
    o.exec_config = &config_;
    o.exec_env = &env_;
    // A TLS endpoint nobody listens on: the shim's input fetch goes
    // through the TLS client (its context cache and OpenSSL) and fails fast.
    o.blob.server_url = "https://127.0.0.1:" + std::to_string(ClosedPort());
    o.blob.cache_dir = dir_ + "/chunk-cache";
    manager_ = std::make_unique<TaskManager>(std::move(o), loop_, clock_, nullptr);
    ASSERT_TRUE(manager_->Recover().ok());
  }
  void TearDown() override {
    manager_.reset();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A TCP port of this machine that refuses connections.
  static int ClosedPort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  static proto::StartTask Task(const std::string& attempt, bool with_inputs) {
    proto::StartTask t;
    t.attempt_id = attempt;
    t.job_id = std::stoll(attempt.substr(0, attempt.find('.')));
    t.spec.name = "test";
    t.spec.run = "echo ran";
    t.spec.executor = "process";
    if (with_inputs) t.spec.inputs = std::string(64, 'a');
    return t;
  }

  // Reads the task's output until `done` holds for it, or a minute passed.
  void WaitFor(const std::string& id, const std::function<bool(const TaskState&)>& done) {
    const int64_t give_up = clock_.MonoMs() + 60'000;
    while (clock_.MonoMs() < give_up) {
      (void)manager_->ReadOutput(id, 1 << 20);
      if (done(manager_->tasks().at(id))) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string dir_;
  exec::ExecConfig config_;
  exec::ExecEnvironment env_;
  net::EventLoop loop_;
  RealClock clock_;
  std::unique_ptr<TaskManager> manager_;
};

TEST_F(ShimLaunchTest, TheShimIsAProgramOfItsOwnNotAForkOfTheAgent) {
  proto::StartTask t = Task("1.1", false);
  t.spec.run = "sleep 30";
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  pid_t shim = manager_->tasks().at("1.1").shim_pid;
  // Its command line is the shim's, with the agent's data dir, and its
  // image is this binary's, exec'd anew (once the child got that far).
  Result<std::string> cmdline = Status::NotFound("not read yet");
  const int64_t give_up = clock_.MonoMs() + 30'000;
  while (clock_.MonoMs() < give_up) {
    cmdline = ReadFile("/proc/" + std::to_string(shim) + "/cmdline");
    if (cmdline.ok() && cmdline->starts_with("gpupool-shim")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(cmdline.ok());
  EXPECT_EQ(cmdline->substr(0, cmdline->find('\0')), "gpupool-shim");
  EXPECT_THAT(*cmdline, HasSubstr(std::string("\0__shim\0", 8)));
  EXPECT_THAT(*cmdline, HasSubstr(dir_ + "/data"));
  EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(shim) + "/exe"),
            fs::read_symlink("/proc/self/exe"));
  // One thread: nothing of the agent's threads came along.
  auto status = ReadFile("/proc/" + std::to_string(shim) + "/status");
  ASSERT_TRUE(status.ok());
  EXPECT_THAT(*status, HasSubstr("Threads:\t1\n"));
  manager_->Stop("1.1", "done", TaskManager::kKillNow);
}

// The process that started `pid` (its parent), or 0.
static pid_t ParentOf(pid_t pid) {
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return 0;
  std::istringstream rest(stat->substr(stat->rfind(')') + 2));
  char state;
  pid_t parent = 0;
  rest >> state >> parent;
  return parent;
}

// `--on-exit kill`: once the agent is gone (here its TaskManager, whose
// launcher then ends, as it does when the agent process dies), the shim
// stops its job and says why; the next agent recovers the result.
TEST_F(ShimLaunchTest, AShimTiedToTheAgentStopsItsJobWhenTheAgentGoes) {
  MakeManager(true);
  proto::StartTask t = Task("1.1", false);
  t.spec.run = "sleep 60";
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  WaitFor("1.1", [](const TaskState& task) { return task.started; });
  ASSERT_TRUE(manager_->tasks().at("1.1").started);
  MakeManager(true);  // the agent goes; the next one recovers the task
  ASSERT_EQ(manager_->tasks().count("1.1"), 1u);
  WaitFor("1.1", [](const TaskState& task) { return task.result.has_value(); });
  const TaskState& task = manager_->tasks().at("1.1");
  ASSERT_TRUE(task.result.has_value());
  EXPECT_EQ(task.result->reason, "stopped: its agent exited (the agent runs with --on-exit kill)");
}

// Without it, the job outlives the agent and the next agent takes it over.
TEST_F(ShimLaunchTest, AShimNotTiedToTheAgentOutlivesIt) {
  proto::StartTask t = Task("1.1", false);
  t.spec.run = "sleep 60";
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  WaitFor("1.1", [](const TaskState& task) { return task.started; });
  const pid_t shim = manager_->tasks().at("1.1").shim_pid;
  const uint64_t shim_start = manager_->tasks().at("1.1").shim_start_time;
  MakeManager(false);
  ASSERT_EQ(manager_->tasks().count("1.1"), 1u);
  const TaskState& task = manager_->tasks().at("1.1");
  EXPECT_FALSE(task.result.has_value());
  EXPECT_EQ(task.shim_pid, shim);
  EXPECT_EQ(ProcessStartTime(shim), shim_start);  // the same shim, still there
  manager_->Stop("1.1", "done", TaskManager::kKillNow);
}

// A launcher killed by hand takes nothing with it (shims not tied to the
// agent) and is started again by the next task.
TEST_F(ShimLaunchTest, ALauncherKilledByHandIsStartedAgain) {
  proto::StartTask first = Task("1.1", false);
  first.spec.run = "sleep 60";
  ASSERT_TRUE(manager_->Start(first, {}).ok());
  WaitFor("1.1", [](const TaskState& task) { return task.started; });
  const pid_t shim = manager_->tasks().at("1.1").shim_pid;
  const pid_t launcher = ParentOf(shim);
  ASSERT_GT(launcher, 1);
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  while (ParentOf(shim) == launcher) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  ASSERT_TRUE(manager_->Start(Task("2.1", false), {}).ok());
  WaitFor("2.1", [](const TaskState& task) { return task.result.has_value(); });
  ASSERT_TRUE(manager_->tasks().at("2.1").result.has_value());
  EXPECT_EQ(manager_->tasks().at("2.1").result->exit_code, 0);
  EXPECT_EQ(manager_->tasks().at("2.1").result->reason, "");
  // The first job still runs under its shim.
  EXPECT_EQ(ProcessStartTime(shim), manager_->tasks().at("1.1").shim_start_time);
  EXPECT_FALSE(manager_->tasks().at("1.1").result.has_value());
  manager_->Stop("1.1", "done", TaskManager::kKillNow);
}

// A hostile job looks for a way back into the agent or the launcher: the
// descriptors it inherited hold no socket (neither the launcher's nor the
// agent's server connection) and none of the request's memfds.
TEST_F(ShimLaunchTest, AJobInheritsNoSocketOrMemfdOfTheAgentOrTheLauncher) {
  proto::StartTask t = Task("1.1", false);
  t.spec.run = "for f in /proc/self/fd/*; do echo \"fd $(readlink $f)\"; done";
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  std::string out;
  const int64_t give_up = clock_.MonoMs() + 60'000;
  while (clock_.MonoMs() < give_up && !manager_->tasks().at("1.1").result) {
    for (const OutputRecord& r : manager_->ReadOutput("1.1", 1 << 20)) out += r.text + "\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const OutputRecord& r : manager_->ReadOutput("1.1", 1 << 20)) out += r.text + "\n";
  ASSERT_TRUE(manager_->tasks().at("1.1").result.has_value());
  EXPECT_EQ(manager_->tasks().at("1.1").result->exit_code, 0);
  EXPECT_THAT(out, HasSubstr("fd /dev/null"));  // it did list them
  EXPECT_THAT(out, Not(HasSubstr("socket:")));
  EXPECT_THAT(out, Not(HasSubstr("memfd:")));
}

// Another thread of the agent (the checkpoint stager does this) keeps
// creating TLS contexts and connecting while shims start, each of which
// goes through the TLS client itself. Every shim must get there and end.
TEST_F(ShimLaunchTest, ShimsStartedWhileAnotherThreadUsesTlsAllRun) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  const int port = ClosedPort();
  std::thread busy([&] {
    for (int64_t i = 0; !stop; ++i) {
      net::HttpCall call;
      call.base_url = "https://127.0.0.1:" + std::to_string(port);
      call.target = "/";
      call.timeout_ms = 1000;
      // A new pin each time: a new context, made under OpenSSL's locks.
      char pin[80];
      std::snprintf(pin, sizeof pin, "sha256:%064lx", static_cast<long>(i));
      call.tls.ca_fingerprint = pin;
      (void)net::Fetch(call);
      ++calls;
    }
  });
  constexpr int kTasks = 60;
  for (int i = 1; i <= kTasks; ++i) {
    ASSERT_TRUE(manager_->Start(Task(std::to_string(i) + ".1", true), {}).ok());
  }
  // Every shim ends (it cannot fetch the inputs: no server). A shim that
  // hangs on a lock inherited from the busy thread never would.
  const int64_t give_up = clock_.MonoMs() + 120'000;
  int ended = 0;
  while (clock_.MonoMs() < give_up) {
    ended = 0;
    for (int i = 1; i <= kTasks; ++i) {
      const std::string id = std::to_string(i) + ".1";
      (void)manager_->ReadOutput(id, 1 << 20);
      const TaskState& t = manager_->tasks().at(id);
      auto start = ProcessStartTime(t.shim_pid);
      if (t.result || !start || *start != t.shim_start_time) ++ended;
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
    }
    if (ended == kTasks) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  busy.join();
  EXPECT_EQ(ended, kTasks) << "shims still stuck after 120 s";
  EXPECT_GT(calls.load(), 0);
  for (int i = 1; i <= kTasks; ++i) {
    const std::string log = manager_->tasks().at(std::to_string(i) + ".1").paths.output_log();
    auto text = ReadFile(log);
    ASSERT_TRUE(text.ok()) << log;
    EXPECT_THAT(*text, HasSubstr("cannot fetch the job's files")) << log;
  }
}

}  // namespace
}  // namespace gpupool::agent
