// SandboxExecutor with a real ExecConfig: the bubblewrap command it plans,
// then that plan run for real as the shim runs it (run_plan_testing.h), with
// the isolation checked from inside. Image jobs use the busybox image of
// tests/images/make_test_image.sh through a real ImageCache. Needs root,
// bubblewrap, skopeo, umoci and busybox-static, as the agent does.
//
// A root agent's plan stages what bubblewrap binds under /run in the
// child's own mount namespace; the tests move that stage to a fresh
// directory (Restage) and otherwise run the plan as it is.
#include "exec/sandbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "exec/limits.h"
#include "exec/process_tree.h"
#include "exec/run_plan_testing.h"
#include "exec/sandbox_testing.h"
#include "exec/subprocess.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
// The fixtures and helpers (sandbox_testing.h).
using namespace test_support;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// --- The plan ---------------------------------------------------------------

TEST_F(SandboxTest, HostJobBindsHostPathsReadOnlyAndRunsInWork) {
  config_.sandbox.host_paths = {"/usr", "/bin", "/etc", "/no/such/path"};
  config_.sandbox.bwrap = "/usr/bin/bwrap";
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"/usr/bin/env", "-0"});
  LaunchPlan plan = MustStart(executor, task);
  const auto& a = plan.argv;
  SCOPED_TRACE(Join(a));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a[0], "/usr/bin/bwrap");
  for (const char* flag :
       {"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--unshare-net", "--die-with-parent", "--new-session"}) {
    EXPECT_THAT(a, Contains(flag));
  }
  EXPECT_TRUE(HasSeq(a, {"--hostname", "gpupool-7"}));
  EXPECT_TRUE(HasSeq(a, {"--ro-bind", "/usr", "/usr"}));
  EXPECT_TRUE(HasSeq(a, {"--symlink", "usr/bin", "/bin"}));  // Debian's merged /usr
  EXPECT_TRUE(HasSeq(a, {"--ro-bind", "/etc", "/etc"}));
  EXPECT_FALSE(Mentions(a, "/no/such/path"));
  EXPECT_FALSE(Mentions(a, "/lib64"));          // only the configured paths
  EXPECT_THAT(a, Not(Contains("--dev-bind")));  // no GPUs, no devices
  EXPECT_TRUE(HasSeq(a, {"--bind", work_dir_, "/work"}));
  EXPECT_TRUE(HasSeq(a, {"--chdir", "/work", "--remount-ro", "/", "--"}));
  EXPECT_THAT(Command(plan), ElementsAre("/usr/bin/env", "-0"));
  // The agent's own account: nothing to stage.
  EXPECT_EQ(plan.stage_dir, "");
  EXPECT_THAT(plan.stage_binds, IsEmpty());
  EXPECT_EQ(plan.uid, -1);
  EXPECT_EQ(plan.cwd, "/");
  EXPECT_EQ(plan.cgroup_procs, "");
  EXPECT_THAT(plan.rlimits, Contains(Rlimit{RLIMIT_CORE, 0}));
}

TEST_F(SandboxTest, OnlyTheHostNetworkSharesTheHostsNamespace) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.network = NetworkMode::kHost;
  EXPECT_THAT(MustStart(executor, task).argv, Not(Contains("--unshare-net")));
  task.network = NetworkMode::kNone;
  LaunchPlan none = MustStart(executor, task);
  EXPECT_THAT(none.argv, Contains("--unshare-net"));
  EXPECT_THAT(none.argv, Not(Contains("--block-fd")));
  executor.Cleanup();
  // The default: its own namespace, held back until pasta connected it.
  task.network = NetworkMode::kPrivate;
  LaunchPlan own = MustStart(executor, task);
  EXPECT_THAT(own.argv, Contains("--unshare-net"));
  if (HostDefaultRoutes().any()) {
    EXPECT_THAT(own.argv, Contains("--block-fd"));
    EXPECT_THAT(own.argv, Contains("--info-fd"));
    EXPECT_EQ(own.keep_fds.size(), 2u);
  }
  executor.Cleanup();
  // Nested user namespaces are refused in every mode.
  EXPECT_THAT(own.argv, Contains("--disable-userns"));
}

TEST_F(SandboxTest, OnlyTheAssignedGpusDeviceNodesAndTheControlDevice) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.gpu_minors = {1};
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  EXPECT_TRUE(HasSeq(plan.argv, {"--dev-bind", dev_dir_ + "/nvidia1", "/dev/nvidia1"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--dev-bind", dev_dir_ + "/nvidiactl", "/dev/nvidiactl"}));
  EXPECT_FALSE(Mentions(plan.argv, "nvidia0"));
  EXPECT_EQ(std::count(plan.argv.begin(), plan.argv.end(), "--dev-bind"), 2);
}

TEST_F(SandboxTest, AMigInstancesCapabilityDevicesAreBoundWithItsGpu) {
  std::filesystem::create_directories(dev_dir_ + "/nvidia-caps");
  for (const char* cap : {"nvidia-cap21", "nvidia-cap22", "nvidia-cap30"}) {
    std::ofstream(dev_dir_ + "/nvidia-caps/" + cap) << "";
  }
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.gpu_minors = {1};
  task.gpu_cap_devices = {"nvidia-caps/nvidia-cap21", "nvidia-caps/nvidia-cap22"};
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  EXPECT_TRUE(HasSeq(plan.argv, {"--dev-bind", dev_dir_ + "/nvidia-caps/nvidia-cap21",
                                 "/dev/nvidia-caps/nvidia-cap21"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--dev-bind", dev_dir_ + "/nvidia-caps/nvidia-cap22",
                                 "/dev/nvidia-caps/nvidia-cap22"}));
  EXPECT_FALSE(Mentions(plan.argv, "nvidia-cap30"));  // another instance's
  executor.Cleanup();

  // A capability the driver named but /dev lacks fails the start; a name
  // that climbs out of the devices directory is refused.
  task.gpu_cap_devices = {"nvidia-caps/nvidia-cap99"};
  ASSERT_TRUE(executor.Prepare(task, [](const std::string&) {}).ok());
  Result<LaunchPlan> missing = executor.Start(task);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("nvidia-cap99 is missing"));
  executor.Cleanup();
  task.gpu_cap_devices = {"../etc/shadow"};
  ASSERT_TRUE(executor.Prepare(task, [](const std::string&) {}).ok());
  EXPECT_FALSE(executor.Start(task).ok());
}

TEST_F(SandboxTest, AMissingDeviceNodeFailsTheStartNamingIt) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.gpu_minors = {1, 2};
  ASSERT_TRUE(executor.Prepare(task, [](const std::string&) {}).ok());
  Result<LaunchPlan> plan = executor.Start(task);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr(dev_dir_ + "/nvidia2"));
  EXPECT_THAT(plan.status().message(), HasSubstr("is missing"));
}

TEST_F(SandboxTest, ATaskAccountGetsWhatBubblewrapBindsStaged) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  task.gpu_minors = {0};
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  EXPECT_EQ(plan.uid, kTaskUid);
  EXPECT_EQ(plan.gid, kTaskGid);
  EXPECT_EQ(plan.stage_dir, kSandboxStageDir);
  using B = LaunchPlan::StageBind;
  EXPECT_THAT(plan.stage_binds,
              ElementsAre(B{dev_dir_ + "/nvidia0", "dev-nvidia0"},
                          B{dev_dir_ + "/nvidiactl", "dev-nvidiactl"}, B{work_dir_, "work"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--bind", "/run/work", "/work"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--dev-bind", "/run/dev-nvidia0", "/dev/nvidia0"}));
  EXPECT_FALSE(Mentions(plan.argv, base_.path()));  // nothing of the data dir itself
  // The host's system is reachable by anyone: bound directly.
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/usr", "/usr"}));
  // Prepare gave the work directory to the account, and only to it.
  struct stat st;
  ASSERT_EQ(::stat(work_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(kTaskUid));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(SandboxTest, EnvironmentSandboxPathsHostPathAndJobOverrides) {
  ASSERT_NE(::getenv("PATH"), nullptr);
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  LaunchPlan plain = MustStart(executor, task);
  EXPECT_THAT(EnvValues(plain.env, "HOME"), ElementsAre("/work"));
  EXPECT_THAT(EnvValues(plain.env, "TMPDIR"), ElementsAre("/tmp"));
  EXPECT_THAT(EnvValues(plain.env, "GPUPOOL_WORK_DIR"), ElementsAre("/work"));
  EXPECT_THAT(EnvValues(plain.env, "GPUPOOL_CHECKPOINT_DIR"), ElementsAre("/work/.checkpoints"));
  EXPECT_THAT(EnvValues(plain.env, "PATH"), ElementsAre(::getenv("PATH")));

  task.env = {"TMPDIR=/work/tmp", "FOO=bar", "CUDA_VISIBLE_DEVICES=GPU-1"};
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_THAT(EnvValues(plan.env, "TMPDIR"), ElementsAre("/work/tmp"));
  EXPECT_THAT(EnvValues(plan.env, "HOME"), ElementsAre("/work"));
  EXPECT_THAT(EnvValues(plan.env, "FOO"), ElementsAre("bar"));
  EXPECT_THAT(EnvValues(plan.env, "CUDA_VISIBLE_DEVICES"), ElementsAre("GPU-1"));
  // Nothing else of the agent's environment.
  for (const std::string& kv : plan.env) {
    std::string key = kv.substr(0, kv.find('='));
    EXPECT_THAT((std::vector<std::string>{"PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR",
                                          "GPUPOOL_WORK_DIR", "GPUPOOL_CHECKPOINT_DIR", "FOO",
                                          "CUDA_VISIBLE_DEVICES"}),
                Contains(key));
  }
}

TEST_F(SandboxTest, NothingToRunIsRefused) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  ASSERT_TRUE(executor.Prepare(HostTask({}), [](const std::string&) {}).ok());
  Result<LaunchPlan> plan = executor.Start(HostTask({}));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "nothing to run: give run or command");
}

TEST_F(SandboxTest, WithoutAnImageCacheImageJobsFailClearly) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({});
  task.image = "oci-archive:/srv/x.tar";
  Status s = executor.Prepare(task, [](const std::string&) {});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("this node cannot run images"));
}

TEST_F(SandboxTest, TheProcessExecutorRefusesImagesAndRunsInTheRealWorkDir) {
  ProcessExecutor executor(config_, nullptr);
  TaskContext task = HostTask({"/bin/true"});
  task.image = "oci-archive:/srv/x.tar";
  Result<LaunchPlan> refused = executor.Start(task);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("cannot run images"));

  task.image = "";
  Result<LaunchPlan> plan = executor.Start(task);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_THAT(plan->argv, ElementsAre("/bin/true"));  // no wrapper
  EXPECT_EQ(plan->cwd, work_dir_);
  EXPECT_THAT(EnvValues(plan->env, "HOME"), ElementsAre(work_dir_));
}

// --- Running it -------------------------------------------------------------

TEST_F(SandboxTest, IsolationSeenFromInside) {
  ASSERT_TRUE(fs::exists("/home"));  // so "absent" below means hidden
  const std::string probe = "/usr/gpupool-sandbox-test-probe";
  ASSERT_FALSE(fs::exists(probe));
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask(
      "echo pid=$$\n"
      "test -e /home && echo home=visible || echo home=absent\n"
      "test -e " +
      base_.path() +
      " && echo datadir=visible || echo datadir=absent\n"
      "touch " +
      probe +
      " 2>/dev/null && echo usr=writable || echo usr=readonly\n"
      "echo from-job > /work/out.txt && echo work=writable\n"
      "echo tmp=$(ls -A /tmp | wc -l)\n"
      "echo uid=$(id -u)\n"
      "echo cwd=$(pwd)\n"
      "echo env=$HOME,$TMPDIR,$GPUPOOL_WORK_DIR\n"
      "echo hostname=$(hostname)\n"
      "echo devices=$(ls /dev | grep nvidia | tr '\\n' ,)\n"
      "echo gpu=$(cat /dev/nvidia1)\n");
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  task.gpu_minors = {1};
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  SCOPED_TRACE(o.out);
  // Its own pid namespace: bubblewrap's init is 1, the job 2.
  EXPECT_LE(std::stoi(Said(o.out, "pid")), 3);
  EXPECT_EQ(Said(o.out, "home"), "absent");
  EXPECT_EQ(Said(o.out, "datadir"), "absent");
  EXPECT_EQ(Said(o.out, "usr"), "readonly");
  EXPECT_EQ(Said(o.out, "work"), "writable");
  EXPECT_EQ(Said(o.out, "tmp"), "0");  // a private /tmp
  EXPECT_EQ(Said(o.out, "uid"), std::to_string(kTaskUid));
  EXPECT_EQ(Said(o.out, "cwd"), "/work");
  EXPECT_EQ(Said(o.out, "env"), "/work,/tmp,/work");
  EXPECT_EQ(Said(o.out, "hostname"), "gpupool-7");
  EXPECT_EQ(Said(o.out, "devices"), "nvidia1,nvidiactl,");
  EXPECT_EQ(Said(o.out, "gpu"), "nvidia1");
  EXPECT_EQ(o.reason, "");
  EXPECT_FALSE(fs::exists(probe));
  // /work was the task's real work directory, written as its account.
  EXPECT_EQ(ReadFile(work_dir_ + "/out.txt").value_or("?"), "from-job\n");
  struct stat st;
  ASSERT_EQ(::stat((work_dir_ + "/out.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(kTaskUid));
}

TEST_F(SandboxTest, NoNetworkLeavesOnlyLoopback) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  task.network = NetworkMode::kNone;
  Outcome none = RunJob(executor, task);
  ASSERT_TRUE(none.exited_with(0)) << none.error << none.err;
  EXPECT_THAT(Lines(none.out), ElementsAre("lo"));
  task.network = NetworkMode::kHost;  // the host's interfaces: more than loopback
  Outcome host = RunJob(executor, task);
  ASSERT_TRUE(host.exited_with(0)) << host.error << host.err;
  EXPECT_GT(Lines(host.out).size(), 1u) << host.out;
}

TEST_F(SandboxTest, TheDefaultNetworkIsTheJobsOwnAndPastaEndsWithIt) {
  ASSERT_TRUE(HostDefaultRoutes().any()) << "this test needs a machine with a default route";
  // A server on this machine's loopback: the job must not reach it.
  int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(server, 4), 0);
  ASSERT_EQ(::getsockname(server, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string port = std::to_string(ntohs(a.sin_port));
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask(
      "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort; "
      "/usr/bin/python3 -c \"import socket\ntry:\n socket.create_connection(('127.0.0.1', " +
      port + "), timeout=3); print('reached')\nexcept OSError as e: print('refused', e.errno)\"");
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  Outcome o = RunJob(executor, task);
  ::close(server);
  ASSERT_TRUE(o.exited_with(0)) << o.error << o.err;
  std::vector<std::string> lines = Lines(o.out);
  ASSERT_EQ(lines.size(), 3u) << o.out;
  // Its loopback and one interface (pasta's copy of the machine's).
  EXPECT_TRUE((lines[0] == "lo") != (lines[1] == "lo")) << o.out;
  EXPECT_EQ(lines[2], "refused " + std::to_string(ECONNREFUSED)) << o.out;
  // Nothing of the job is left, pasta included.
  EXPECT_THAT(Descendants(::getpid()), IsEmpty());
}

TEST_F(SandboxTest, TheProcessExecutorIsolatesNothing) {
  ProcessExecutor executor(config_, nullptr);
  TaskContext task =
      ShellTask("echo pid=$$; test -e /home && echo home=visible || echo home=absent; pwd");
  Outcome o = RunJob(executor, task);
  ASSERT_TRUE(o.exited_with(0)) << o.error << o.err;
  EXPECT_GT(std::stoi(Said(o.out, "pid")), 3);  // the host's pid numbers
  EXPECT_EQ(Said(o.out, "home"), "visible");
  EXPECT_THAT(Lines(o.out).back(), work_dir_);
}

// A job that answers SIGTERM and reports it, running as the task account
// and ready (it said so) once StartReady returns.
class StopTest : public SandboxTest {
 protected:
  static constexpr const char* kScript =
      "trap 'echo got-term; exit 0' TERM\n"
      "echo ready\n"
      "while :; do sleep 0.05; done\n";

  std::unique_ptr<RunningPlan> StartReady() {
    TaskContext task = ShellTask(kScript);
    task.uid = kTaskUid;
    task.gid = kTaskGid;
    LaunchPlan plan = MustStart(executor_, task);
    Restage(plan, stage_.path());
    auto run = std::make_unique<RunningPlan>(plan);
    EXPECT_TRUE(executor_.Started(run->pid()).ok());
    EXPECT_TRUE(run->WaitForStdout("ready\n")) << run->err();
    return run;
  }

  SandboxExecutor executor_{config_, nullptr, nullptr};
  TempDir stage_{0755};
};

TEST_F(StopTest, StopReachesTheJobWhileBubblewrapWaitsForIt) {
  auto run = StartReady();
  // Usage counts the whole tree: bubblewrap, its init, the shell.
  Usage usage = executor_.GetUsage();
  EXPECT_GE(usage.processes, 3);
  EXPECT_GT(usage.memory_bytes, 0);
  EXPECT_FALSE(executor_.EnforcesMemory());  // no cgroup: the shim watches
  executor_.Stop(SIGTERM);
  ASSERT_TRUE(run->Finish(5'000)) << "the job did not end after SIGTERM";
  // bubblewrap was spared: it passed on the job's own exit status.
  EXPECT_TRUE(run->exited_with(0)) << "wait status " << run->wait_status() << "; " << run->err();
  EXPECT_THAT(run->out(), HasSubstr("got-term"));
  EXPECT_EQ(executor_.ExitReason(run->wait_status(), run->last_stderr_line()), "");
  executor_.Cleanup();
}

TEST_F(StopTest, WithoutSparingBubblewrapTheSandboxDiesOfTheSignal) {
  // The contrast: the same signal to every process of the tree.
  auto run = StartReady();
  SignalTree(::getpid(), SIGTERM);
  ASSERT_TRUE(run->Finish(5'000));
  EXPECT_TRUE(WIFSIGNALED(run->wait_status()) && WTERMSIG(run->wait_status()) == SIGTERM)
      << "wait status " << run->wait_status();
  executor_.Cleanup();
}

TEST_F(SandboxTest, StopWithSigkillEndsEverything) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask("trap '' TERM; echo ready; while :; do sleep 0.05; done");
  LaunchPlan plan = MustStart(executor, task);
  RunningPlan run(plan);
  ASSERT_TRUE(executor.Started(run.pid()).ok());
  ASSERT_TRUE(run.WaitForStdout("ready\n")) << run.err();
  executor.Stop(SIGKILL);
  ASSERT_TRUE(run.Finish(5'000));
  EXPECT_TRUE(WIFSIGNALED(run.wait_status()) && WTERMSIG(run.wait_status()) == SIGKILL);
  executor.Cleanup();  // reaps pasta, which the SIGKILL ended too
  std::vector<pid_t> left = Descendants(::getpid());
  std::string comms;
  for (pid_t p : left) comms += ReadFile("/proc/" + std::to_string(p) + "/stat").value_or("?");
  EXPECT_THAT(left, IsEmpty()) << comms;
}

TEST_F(SandboxTest, AProgramMissingInsideIsACannotStart) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"/no/such"});
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  EXPECT_TRUE(o.exited_with(1));
  EXPECT_EQ(o.last_err_line, "bwrap: execvp /no/such: No such file or directory");
  EXPECT_EQ(o.reason, "cannot start /no/such: No such file or directory");
}

TEST_F(SandboxTest, BubblewrapsOwnFailureIsASandboxFailure) {
  // The agent's account binds the work directory directly; it is gone.
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"/bin/true"});
  ASSERT_TRUE(executor.Prepare(task, [](const std::string&) {}).ok());
  Result<LaunchPlan> plan = executor.Start(task);
  ASSERT_TRUE(plan.ok());
  fs::remove_all(work_dir_);
  RunningPlan run(*plan);
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(1));
  EXPECT_THAT(run.last_stderr_line(), StartsWith("bwrap: "));
  EXPECT_THAT(executor.ExitReason(run.wait_status(), run.last_stderr_line()),
              StartsWith("the sandbox could not be set up: "));
  EXPECT_THAT(executor.ExitReason(run.wait_status(), run.last_stderr_line()), HasSubstr(work_dir_));
}

TEST_F(SandboxTest, ASignalInsideIsReportedAsTheSignal) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask("kill -SEGV $$");
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  // bubblewrap turns the death by signal into an exit code 128 + 11.
  EXPECT_TRUE(o.exited_with(128 + SIGSEGV)) << o.wait_status;
  EXPECT_EQ(o.reason, "killed by signal SIGSEGV (segmentation fault)");
  // A plain exit stays plain.
  task = ShellTask("exit 3");
  task.uid = kTaskUid;  // the work directory is its already
  task.gid = kTaskGid;
  Outcome plain = RunJob(executor, task);
  EXPECT_TRUE(plain.exited_with(3));
  EXPECT_EQ(plain.reason, "");
}

TEST_F(SandboxTest, TheFileSizeLimitIsTheDiskLimit) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask("head -c 1000000 /dev/zero > /work/big");
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  task.limits.disk_bytes = 64 << 10;
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  EXPECT_TRUE(o.exited_with(128 + SIGXFSZ)) << o.wait_status;
  EXPECT_EQ(o.reason, DiskLimitReason(64 << 10));
  EXPECT_EQ(fs::file_size(work_dir_ + "/big"), uint64_t{64} << 10);
  // Without a disk limit the same end is only a signal.
  SandboxExecutor unlimited(config_, nullptr, nullptr);
  ASSERT_TRUE(unlimited.Prepare(HostTask({"true"}), [](const std::string&) {}).ok());
  EXPECT_EQ(unlimited.ExitReason(o.wait_status, ""),
            "killed by signal SIGXFSZ (file size limit exceeded)");
}

TEST_F(SandboxTest, ExitReasonReadsBubblewrapsLastLineOnlyForItsExitCode1) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  const int exit1 = 1 << 8, exit2 = 2 << 8;
  EXPECT_EQ(executor.ExitReason(exit1, "bwrap: execvp /no/such: No such file or directory"),
            "cannot start /no/such: No such file or directory");
  EXPECT_EQ(executor.ExitReason(exit1, "bwrap: Creating new namespace failed: nope"),
            "the sandbox could not be set up: Creating new namespace failed: nope");
  EXPECT_EQ(executor.ExitReason(exit2, "bwrap: execvp x: y"), "");
  EXPECT_EQ(executor.ExitReason(exit1, "error: bwrap: x"), "");
}

// --- Image jobs -------------------------------------------------------------

TEST_F(SandboxImageTest, NoCommandRunsEntrypointAndCmd) {
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task = ImageTask({});
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_THAT(Command(plan), ElementsAre("/bin/sh", "-c", "echo image-default-cmd"));
  // The image's root, staged, entry by entry; not the host's system.
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/run/root/bin", "/bin"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/run/root/app", "/app"}));
  EXPECT_FALSE(HasSeq(plan.argv, {"--ro-bind", "/usr", "/usr"}));
  EXPECT_FALSE(Mentions(plan.argv, "/run/root/tmp"));  // the sandbox's own /tmp
  executor.Cleanup();
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  EXPECT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(o.out, "image-default-cmd\n");
}

TEST_F(SandboxImageTest, ACommandReplacesCmdAndKeepsTheEntrypoint) {
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task =
      ImageTask({"echo greeting=$GREETING; echo cwd=$(pwd); echo path=$PATH; echo home=$HOME; "
                 "echo uid=$(id -u); test -e /usr && echo usr=yes || echo usr=no"});
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_THAT(Command(plan), ElementsAre("/bin/sh", "-c", task.argv[0]));
  EXPECT_TRUE(HasSeq(plan.argv, {"--chdir", "/app"}));  // the image's WorkingDir
  executor.Cleanup();
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(Said(o.out, "greeting"), "hello-from-image");
  EXPECT_EQ(Said(o.out, "cwd"), "/app");
  EXPECT_EQ(Said(o.out, "path"), "/bin");  // the image's, not the host's
  EXPECT_EQ(Said(o.out, "home"), "/work");
  EXPECT_EQ(Said(o.out, "uid"), std::to_string(kTaskUid));
  EXPECT_EQ(Said(o.out, "usr"), "no");  // busybox has no /usr: the host's is not there
}

TEST_F(SandboxImageTest, ARunIsUsedAsItIsAndJobEnvOverridesTheImages) {
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task = ImageTask({"/bin/sh", "-c", "echo run:$GREETING:$EXTRA; pwd"});
  task.argv_is_shell = true;
  task.env = {"GREETING=from-job", "EXTRA=x"};
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_THAT(Command(plan), ElementsAreArray(task.argv));
  EXPECT_THAT(EnvValues(plan.env, "GREETING"), ElementsAre("from-job"));
  executor.Cleanup();
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(o.out, "run:from-job:x\n/app\n");
}

TEST_F(SandboxImageTest, TheLeaseIsHeldFromPrepareToCleanup) {
  SandboxExecutor executor(config_, nullptr, Cache());
  std::vector<std::string> events;
  ASSERT_TRUE(
      executor.Prepare(ImageTask({}), [&](const std::string& e) { events.push_back(e); }).ok());
  ASSERT_FALSE(events.empty());
  EXPECT_THAT(events.back(), StartsWith("image "));
  auto in_use = [&] {
    int n = 0;
    for (const auto& e : Cache()->List()) n += e.in_use;
    return n;
  };
  EXPECT_EQ(in_use(), 1);
  executor.Cleanup();
  EXPECT_EQ(in_use(), 0);
}

TEST_F(SandboxImageTest, WithGpusTheHostDriverLibrariesAreBoundIn) {
  // A fake driver library where anyone may read it (the host's are in
  // /usr/lib), and a fake ldconfig that lists it.
  TempDir driver(0755);
  const std::string lib = driver.path() + "/libcuda.so.1";
  ASSERT_TRUE(WriteFileAtomic(lib, "fake-libcuda\n", {.mode = 0644}).ok());
  const std::string ldconfig = driver.path() + "/ldconfig";
  WriteExecutable(ldconfig,
                  "#!/bin/sh\n"
                  "echo '1 libs found in cache'\n"
                  "printf '\\tlibcuda.so.1 (libc6,x86-64) => " +
                      lib + "\\n'\n");
  config_.sandbox.ldconfig = ldconfig;
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task = ImageTask({"/bin/sh", "-c",
                                "cat /gpupool/driver/lib/libcuda.so.1; echo ld=$LD_LIBRARY_PATH; "
                                "echo path=$PATH"});
  task.argv_is_shell = true;
  task.gpu_uuids = {"GPU-00000000-0000-0000-0000-000000000001"};
  task.env = {"LD_LIBRARY_PATH=/opt/lib"};
  LaunchPlan plan = MustStart(executor, task);
  // Staged like the rest: the task's account may not reach the driver's directory.
  EXPECT_TRUE(
      HasSeq(plan.argv, {"--ro-bind", "/run/lib-libcuda.so.1", "/gpupool/driver/lib/libcuda.so.1"}))
      << Join(plan.argv);
  EXPECT_TRUE(std::find(plan.stage_binds.begin(), plan.stage_binds.end(),
                        LaunchPlan::StageBind{lib, "lib-libcuda.so.1"}) != plan.stage_binds.end());
  executor.Cleanup();
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(Lines(o.out).at(0), "fake-libcuda");
  EXPECT_EQ(Said(o.out, "ld"), "/gpupool/driver/lib:/opt/lib");
  EXPECT_EQ(Said(o.out, "path"), "/bin:/gpupool/driver/bin");

  // Without GPUs nothing of the driver.
  task.gpu_uuids.clear();
  LaunchPlan no_gpu = MustStart(executor, task);
  EXPECT_FALSE(Mentions(no_gpu.argv, lib)) << Join(no_gpu.argv);
  EXPECT_THAT(EnvValues(no_gpu.env, "LD_LIBRARY_PATH"), ElementsAre("/opt/lib"));
  executor.Cleanup();
}

TEST_F(SandboxImageTest, ABrokenLdconfigFailsTheStart) {
  config_.sandbox.ldconfig = "/no/such/ldconfig";
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task = ImageTask({});
  task.gpu_uuids = {"GPU-1"};
  ASSERT_TRUE(executor.Prepare(task, [](const std::string&) {}).ok());
  Result<LaunchPlan> plan = executor.Start(task);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(plan.status().message(), HasSubstr("cannot list the driver libraries"));
  executor.Cleanup();
}

}  // namespace
}  // namespace gpupool::exec
