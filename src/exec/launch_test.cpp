// SpawnPlan's child (ExecPlan's steps, in a vfork child), started as the shim
// starts it (run_plan_testing.h); ExecPlan after a fork; and
// DescribeLaunchFailure. Needs root (uid switch, mount namespaces), as the
// agent that uses these paths does.
#include "exec/launch.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "exec/run_plan_testing.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using test_support::Lines;
using test_support::RunningPlan;
using test_support::TempDir;
using test_support::WriteExecutable;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Outside the agent's default task range (190000-190999), which end-to-end
// tests running at the same time use.
constexpr int kTaskUid = 189701;
constexpr int kTaskGid = 189701;

// The line of `text` that starts with `prefix`, without it; "" if none.
std::string Field(const std::string& text, const std::string& prefix) {
  for (const std::string& line : Lines(text)) {
    if (line.starts_with(prefix)) {
      std::string v = line.substr(prefix.size());
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
      return v;
    }
  }
  return "";
}

std::set<int> OpenFds(pid_t pid) {
  std::set<int> fds;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    fds.insert(std::stoi(it->path().filename().string()));
  }
  return fds;
}

// Everything left on `fd` (a pipe whose writers are gone), then closes it.
std::string ReadToEndAndClose(int fd) {
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return text;
}

LaunchPlan ShellPlan(const std::string& script) {
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c", script};
  plan.env = {"PATH=/usr/bin:/bin"};
  plan.cwd = "/";
  return plan;
}

TEST(ExecPlanTest, EnvironmentIsExactlyThePlans) {
  // The test process's own environment (PATH, HOME, ...) must not leak in.
  ASSERT_NE(::getenv("PATH"), nullptr);
  LaunchPlan plan;
  plan.argv = {"/usr/bin/env"};
  plan.env = {"A=1", "B=two words", "EMPTY="};
  RunningPlan run(plan);
  ASSERT_FALSE(run.launch_failed());
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(0)) << run.err();
  EXPECT_THAT(Lines(run.out()), ElementsAre("A=1", "B=two words", "EMPTY="));
}

TEST(ExecPlanTest, RunsInTheWorkingDirectory) {
  TempDir dir;
  LaunchPlan plan;
  plan.argv = {"/bin/pwd"};
  plan.cwd = dir.path();
  RunningPlan run(plan);
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(0)) << run.err();
  EXPECT_EQ(run.out(), dir.path() + "\n");
}

TEST(ExecPlanTest, AppliesRlimitsSoftAndHard) {
  LaunchPlan plan = ShellPlan("ulimit -n; cat /proc/self/limits");
  plan.rlimits = {{RLIMIT_NOFILE, 77}, {RLIMIT_CORE, 0}, {RLIMIT_FSIZE, 1 << 20}};
  RunningPlan run(plan);
  ASSERT_TRUE(run.Finish());
  ASSERT_TRUE(run.exited_with(0)) << run.err();
  EXPECT_EQ(Lines(run.out()).at(0), "77");
  // "Max open files            77                   77                   files"
  EXPECT_THAT(Field(run.out(), "Max open files"), ::testing::MatchesRegex("77 +77 +files"));
  EXPECT_THAT(Field(run.out(), "Max core file size"), ::testing::MatchesRegex("0 +0 +bytes"));
  EXPECT_THAT(Field(run.out(), "Max file size"),
              ::testing::MatchesRegex("1048576 +1048576 +bytes"));
}

TEST(ExecPlanTest, BecomesTheTaskAccountWithOnlyItsGroup) {
  ASSERT_EQ(::geteuid(), 0u) << "these tests run as root, like the agent";
  LaunchPlan plan;
  plan.argv = {"/bin/cat", "/proc/self/status"};
  plan.cwd = "/";
  plan.uid = kTaskUid;
  plan.gid = kTaskGid;
  RunningPlan run(plan);
  ASSERT_TRUE(run.Finish());
  ASSERT_TRUE(run.exited_with(0)) << run.err();
  std::string u = std::to_string(kTaskUid), g = std::to_string(kTaskGid);
  EXPECT_EQ(Field(run.out(), "Uid:"), u + "\t" + u + "\t" + u + "\t" + u);
  EXPECT_EQ(Field(run.out(), "Gid:"), g + "\t" + g + "\t" + g + "\t" + g);
  // root's supplementary groups are dropped.
  EXPECT_EQ(Field(run.out(), "Groups:"), g);
}

TEST(ExecPlanTest, WithoutAnAccountStaysAsItIs) {
  LaunchPlan plan;
  plan.argv = {"/bin/cat", "/proc/self/status"};
  RunningPlan run(plan);
  ASSERT_TRUE(run.Finish());
  ASSERT_TRUE(run.exited_with(0)) << run.err();
  std::string me = std::to_string(::getuid());
  EXPECT_EQ(Field(run.out(), "Uid:"), me + "\t" + me + "\t" + me + "\t" + me);
}

TEST(ExecPlanTest, KeepsOnlyStdioAndKeepFds) {
  // Descriptors the test process leaves open without close-on-exec, below,
  // between and above the kept ones.
  int devnull = ::open("/dev/null", O_RDWR);
  ASSERT_GE(devnull, 0);
  const int leak_low = 20, keep_plain = 40, keep_cloexec = 41, leak_high = 60;
  ASSERT_EQ(::dup2(devnull, leak_low), leak_low);
  ASSERT_EQ(::dup2(devnull, keep_plain), keep_plain);
  ASSERT_EQ(::dup3(devnull, keep_cloexec, O_CLOEXEC), keep_cloexec);
  ASSERT_EQ(::dup2(devnull, leak_high), leak_high);

  LaunchPlan plan;
  plan.argv = {"/bin/sleep", "10"};
  plan.cwd = "/";
  plan.keep_fds = {keep_cloexec, keep_plain};  // unsorted on purpose
  std::set<int> fds;
  {
    RunningPlan run(plan);
    for (int fd : {devnull, leak_low, keep_plain, keep_cloexec, leak_high}) ::close(fd);
    ASSERT_FALSE(run.launch_failed());
    // After the exec (the error pipe closed), once the dynamic loader has
    // closed what it opened, the set settles.
    const std::set<int> want = {0, 1, 2, keep_plain, keep_cloexec};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {
      fds = OpenFds(run.pid());
      if (fds == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
  }  // kills the sleeper
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2, keep_plain, keep_cloexec}));
}

TEST(ExecPlanTest, ABareProgramNameIsFoundOnThePlansPath) {
  // The job's PATH decides (a spec's own PATH, an image's); wrappers such as
  // bwrap are given as full paths by their executors.
  TempDir dir;
  WriteExecutable(dir.path() + "/hello-from-path", "#!/bin/sh\necho found; echo PATH=$PATH\n");
  LaunchPlan plan;
  plan.argv = {"hello-from-path"};
  plan.env = {"PATH=/no/such/dir:" + dir.path()};
  RunningPlan run(plan);
  ASSERT_FALSE(run.launch_failed())
      << DescribeLaunchFailure(plan, run.failure_step(), run.failure_errno());
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(0));
  EXPECT_THAT(Lines(run.out()), ElementsAre("found", "PATH=/no/such/dir:" + dir.path()));
  // Not on the plan's PATH: not found, though the caller's PATH has it.
  LaunchPlan missing;
  missing.argv = {"env"};
  missing.env = {"PATH=/no/such/dir"};
  RunningPlan run2(missing);
  EXPECT_TRUE(run2.launch_failed());
  EXPECT_EQ(DescribeLaunchFailure(missing, run2.failure_step(), run2.failure_errno()),
            "cannot start env: No such file or directory");
}

TEST(ExecPlanTest, TheSearchGoesOnPastADeniedFileAndSaysDeniedWhenNothingRan) {
  // execvpe's rules: a file that is not executable is skipped (the next
  // directory may have the program), and if nothing ran the error is
  // "Permission denied", not "No such file".
  TempDir denied, allowed;
  WriteExecutable(denied.path() + "/prog", "#!/bin/sh\necho wrong\n");
  ::chmod((denied.path() + "/prog").c_str(), 0644);
  WriteExecutable(allowed.path() + "/prog", "#!/bin/sh\necho right\n");
  LaunchPlan plan;
  plan.argv = {"prog"};
  plan.env = {"PATH=" + denied.path() + ":" + allowed.path()};
  RunningPlan run(plan);
  ASSERT_FALSE(run.launch_failed());
  ASSERT_TRUE(run.Finish());
  EXPECT_EQ(run.out(), "right\n");

  plan.env = {"PATH=/no/such:" + denied.path()};
  // Root may read anything but still needs an execute bit to run it.
  RunningPlan run2(plan);
  EXPECT_TRUE(run2.launch_failed());
  EXPECT_EQ(DescribeLaunchFailure(plan, run2.failure_step(), run2.failure_errno()),
            "cannot start prog: Permission denied");
}

TEST(ExecPlanTest, AnExecutableWithoutAShebangRunsAsAShellScript) {
  TempDir dir;
  WriteExecutable(dir.path() + "/plain", "echo \"as script: $1\"\n");
  LaunchPlan plan;
  plan.argv = {"plain", "arg"};
  plan.env = {"PATH=" + dir.path()};
  RunningPlan run(plan);
  ASSERT_FALSE(run.launch_failed())
      << DescribeLaunchFailure(plan, run.failure_step(), run.failure_errno());
  ASSERT_TRUE(run.Finish());
  EXPECT_EQ(run.out(), "as script: arg\n");
}

TEST(ExecPlanTest, TheJobExecsWithTheGivenMaskAndDefaultSigpipeNotTheCallers) {
  // The shim blocks the signals it reads through a signalfd and ignores
  // SIGPIPE; its job must get neither.
  sigset_t blocked, before;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &blocked, &before);
  auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  LaunchPlan plan = ShellPlan("grep -E '^(SigBlk|SigIgn):' /proc/self/status");
  sigset_t none;
  sigemptyset(&none);
  int out[2], exec_pipe[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(exec_pipe, O_CLOEXEC), 0);
  auto pid = SpawnPlan(plan, {-1, out[1], -1}, none, exec_pipe[1]);
  ::close(out[1]);
  ::close(exec_pipe[1]);
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::signal(SIGPIPE, old_pipe);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  std::string text = ReadToEndAndClose(out[0]);
  ::close(exec_pipe[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_EQ(Field(text, "SigBlk:"), "0000000000000000");
  // dash ignores nothing itself at start; SIGPIPE is bit 13.
  EXPECT_EQ(Field(text, "SigIgn:"), "0000000000000000");
}

TEST(ExecPlanTest, AfterAForkExecPlanRunsThePlanToo) {
  // The path of callers that fork themselves (exec/subprocess.cpp).
  TempDir dir;
  WriteExecutable(dir.path() + "/forked", "#!/bin/sh\necho forked \"$1\" in \"$(pwd)\"\n");
  LaunchPlan plan;
  plan.argv = {"forked", "x"};
  plan.env = {"PATH=" + dir.path()};
  plan.cwd = dir.path();
  int out[2], exec_pipe[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(exec_pipe, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ExecPlan(plan, exec_pipe[1]);
  }
  ::close(out[1]);
  ::close(exec_pipe[1]);
  std::string text = ReadToEndAndClose(out[0]);
  int failure[2];
  EXPECT_NE(::read(exec_pipe[0], failure, sizeof failure), static_cast<ssize_t>(sizeof failure));
  ::close(exec_pipe[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(text, "forked x in " + dir.path() + "\n");
}

TEST(FindProgramTest, LooksUpNamesAndChecksPaths) {
  EXPECT_EQ(FindProgram("sh", "/no/such:/usr/bin:/bin"), "/usr/bin/sh");
  EXPECT_EQ(FindProgram("sh", "/no/such"), "");
  EXPECT_EQ(FindProgram("/bin/sh", ""), "/bin/sh");
  EXPECT_EQ(FindProgram("/etc/passwd", ""), "");  // not executable
  EXPECT_EQ(FindProgram("passwd", "/etc"), "");   // a file, but not executable
}

TEST(ExecPlanTest, JoinsTheCgroupByWritingItsPid) {
  // A plain file stands in for cgroup.procs: the child writes "0" (itself).
  TempDir dir;
  std::string procs = dir.path() + "/cgroup.procs";
  ASSERT_TRUE(WriteFileAtomic(procs, "").ok());
  LaunchPlan plan;
  plan.argv = {"/bin/true"};
  plan.cgroup_procs = procs;
  RunningPlan run(plan);
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(0));
  EXPECT_EQ(ReadFile(procs).value_or("?"), "0");
}

// One failing step: what the error pipe says and how it reads.
struct FailureCase {
  std::string name;
  LaunchPlan plan;
  LaunchStep step;
  int err;
  std::string description;
};

void PrintTo(const FailureCase& c, std::ostream* os) { *os << c.name; }

std::vector<FailureCase> FailureCases() {
  std::vector<FailureCase> cases;
  LaunchPlan base;
  base.argv = {"/bin/true"};
  base.cwd = "/";
  {
    LaunchPlan p = base;
    p.argv = {"/no/such"};
    cases.push_back({"MissingProgram", p, LaunchStep::kExec, ENOENT,
                     "cannot start /no/such: No such file or directory"});
  }
  {
    LaunchPlan p = base;
    p.argv = {"/proc/version"};  // exists, executable by no one
    cases.push_back({"NotExecutable", p, LaunchStep::kExec, EACCES,
                     "cannot start /proc/version: Permission denied"});
  }
  {
    LaunchPlan p = base;
    p.cwd = "/no/such/dir";
    cases.push_back({"BadCwd", p, LaunchStep::kChdir, ENOENT,
                     "cannot start: cannot enter /no/such/dir: No such file or directory"});
  }
  {
    LaunchPlan p = base;
    p.cgroup_procs = "/no/such/cgroup/cgroup.procs";
    cases.push_back({"BadCgroup", p, LaunchStep::kCgroup, ENOENT,
                     "cannot start: cannot join cgroup /no/such/cgroup/cgroup.procs: No such file "
                     "or directory"});
  }
  {
    // Above the kernel's nr_open: refused even to root.
    LaunchPlan p = base;
    p.rlimits = {{RLIMIT_NOFILE, uint64_t{1} << 40}};
    cases.push_back({"Rlimit", p, LaunchStep::kRlimits, EPERM,
                     "cannot start: cannot set resource limits: Operation not permitted"});
  }
  {
    LaunchPlan p = base;
    p.stage_dir = "/no/such/stage";
    cases.push_back({"MissingStageDir", p, LaunchStep::kStage, ENOENT,
                     "cannot start: cannot prepare the sandbox's mounts in /no/such/stage: No "
                     "such file or directory"});
  }
  {
    // The earliest failing step is the one reported.
    LaunchPlan p = base;
    p.argv = {"/no/such"};
    p.cwd = "/no/such/dir";
    p.cgroup_procs = "/no/such/cgroup.procs";
    cases.push_back({"FirstStepWins", p, LaunchStep::kCgroup, ENOENT,
                     "cannot start: cannot join cgroup /no/such/cgroup.procs: No such file or "
                     "directory"});
  }
  return cases;
}

class ExecPlanFailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(ExecPlanFailureTest, ReportedThroughTheErrorPipe) {
  const FailureCase& c = GetParam();
  RunningPlan run(c.plan);
  ASSERT_TRUE(run.launch_failed());
  EXPECT_EQ(run.failure_step(), static_cast<int>(c.step));
  EXPECT_EQ(run.failure_errno(), c.err) << std::strerror(run.failure_errno());
  EXPECT_EQ(DescribeLaunchFailure(c.plan, run.failure_step(), run.failure_errno()), c.description);
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(127));
  EXPECT_EQ(run.out(), "");
}

INSTANTIATE_TEST_SUITE_P(Steps, ExecPlanFailureTest, ::testing::ValuesIn(FailureCases()),
                         [](const auto& info) { return info.param.name; });

TEST(ExecPlanTest, MissingStageSourceFailsTheStageStep) {
  TempDir stage(0755);
  LaunchPlan plan;
  plan.argv = {"/bin/true"};
  plan.stage_dir = stage.path();
  plan.stage_binds = {{"/no/such/source", "work"}};
  RunningPlan run(plan);
  ASSERT_TRUE(run.launch_failed());
  EXPECT_EQ(run.failure_step(), static_cast<int>(LaunchStep::kStage));
  EXPECT_EQ(run.failure_errno(), ENOENT);
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(fs::is_empty(stage.path()));
}

TEST(DescribeLaunchFailureTest, OtherSteps) {
  LaunchPlan plan;
  plan.uid = kTaskUid;
  EXPECT_EQ(DescribeLaunchFailure(plan, static_cast<int>(LaunchStep::kSetUser), EPERM),
            "cannot start: cannot become uid 189701: Operation not permitted");
  EXPECT_EQ(DescribeLaunchFailure(plan, static_cast<int>(LaunchStep::kExec), ENOENT),
            "cannot start (nothing): No such file or directory");
  EXPECT_EQ(DescribeLaunchFailure(plan, 99, EIO), "cannot start: Input/output error");
}

// What stays visible in this process's mount table under `dir`.
bool MountedAt(const std::string& dir) {
  std::string mountinfo = ReadFile("/proc/self/mountinfo").value_or("");
  return mountinfo.find(" " + dir + " ") != std::string::npos ||
         mountinfo.find(" " + dir + "/") != std::string::npos;
}

TEST(ExecPlanTest, StageBindsReachAnUnreachableDirAndFileForTheTaskAccount) {
  // The agent's data dir: root's, 0700; the task's directory inside it
  // belongs to the task account, a file in it is world-readable.
  TempDir secret(0700);
  std::string work = secret.path() + "/work";
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  ASSERT_EQ(::chown(work.c_str(), kTaskUid, kTaskGid), 0);
  ASSERT_TRUE(WriteFileAtomic(work + "/inner", "inner-text\n").ok());
  std::string file = secret.path() + "/config";
  ASSERT_TRUE(WriteFileAtomic(file, "file-text\n", {.mode = 0644}).ok());
  TempDir stage(0755);
  const std::string& s = stage.path();

  LaunchPlan plan =
      ShellPlan("test -r " + file + " && echo direct=readable || echo direct=denied; " +  //
                "cat " + s + "/w/inner " + s + "/cfg; " +                                 //
                "ls " + s + "; " +                                                        //
                "echo from-task > " + s + "/w/new && echo write=ok; " +                   //
                "id -u");
  plan.stage_dir = s;
  plan.stage_binds = {{work, "w"}, {file, "cfg"}};
  plan.uid = kTaskUid;
  plan.gid = kTaskGid;
  RunningPlan run(plan);
  ASSERT_FALSE(run.launch_failed())
      << DescribeLaunchFailure(plan, run.failure_step(), run.failure_errno());
  ASSERT_TRUE(run.Finish());
  EXPECT_TRUE(run.exited_with(0)) << run.err();
  EXPECT_THAT(Lines(run.out()), ElementsAre("direct=denied", "inner-text", "file-text", "cfg", "w",
                                            "write=ok", std::to_string(kTaskUid)));

  // What the task wrote went to the real directory ...
  EXPECT_EQ(ReadFile(work + "/new").value_or("?"), "from-task\n");
  struct stat st;
  ASSERT_EQ(::stat((work + "/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(kTaskUid));
  // ... and the host's view of the stage directory is unchanged: the
  // mounts lived in the child's own mount namespace.
  EXPECT_TRUE(fs::is_empty(s));
  EXPECT_FALSE(MountedAt(s));
  EXPECT_THAT(ReadFile("/proc/self/mountinfo").value_or(""), Not(HasSubstr(s)));
}

}  // namespace
}  // namespace gpupool::exec

namespace gpupool::exec {
namespace {

// ForkExec: the plan built before the fork, run in the child, its output
// and its launch failure reported as ExecPlan reports them.
TEST(ForkExecTest, RunsThePlanPreparedBeforeTheFork) {
  for (bool missing : {false, true}) {
    LaunchPlan plan = ShellPlan("echo prepared-$A");
    plan.env.push_back("A=before");
    if (missing) plan.argv = {"no-such-program-here"};
    int out[2], err[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
    ForkExec exec(plan, err[1]);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(out[1], 1);
      exec.Run();
    }
    ::close(out[1]);
    ::close(err[1]);
    std::string text = ReadToEndAndClose(out[0]);
    int failure[2] = {0, 0};
    bool failed = ::read(err[0], failure, sizeof failure) == sizeof failure;
    ::close(err[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (missing) {
      EXPECT_TRUE(failed);
      EXPECT_EQ(failure[0], static_cast<int>(LaunchStep::kExec));
      EXPECT_EQ(failure[1], ENOENT);
    } else {
      EXPECT_FALSE(failed);
      EXPECT_EQ(text, "prepared-before\n");
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
}

}  // namespace
}  // namespace gpupool::exec
