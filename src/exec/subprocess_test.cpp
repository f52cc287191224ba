#include "exec/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace gpupool::exec {
namespace {

struct Ran {
  CommandResult result;
  std::vector<std::string> lines;
};

Ran MustRun(const std::vector<std::string>& argv, int64_t timeout_ms = 0) {
  Ran run;
  Result<CommandResult> r = RunCommand(
      argv, [&](std::string_view line) { run.lines.emplace_back(line); }, timeout_ms);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) run.result = *r;
  return run;
}

Ran Shell(const std::string& script, int64_t timeout_ms = 0) {
  return MustRun({"sh", "-c", script}, timeout_ms);
}

TEST(RunCommandTest, DeliversStdoutLinesIncludingALastPartialOne) {
  Ran run = Shell("printf 'first\\nsecond\\n\\nlast'");
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.result.signal, 0);
  EXPECT_FALSE(run.result.timed_out);
  EXPECT_EQ(run.lines, (std::vector<std::string>{"first", "second", "", "last"}));
}

TEST(RunCommandTest, ReadsMoreThanAPipeBufferOfOutput) {
  Ran run = MustRun({"seq", "1", "200000"});
  EXPECT_EQ(run.result.exit_code, 0);
  ASSERT_EQ(run.lines.size(), 200000u);
  EXPECT_EQ(run.lines.front(), "1");
  EXPECT_EQ(run.lines.back(), "200000");
}

TEST(RunCommandTest, WorksWithoutACallback) {
  Result<CommandResult> r = RunCommand({"sh", "-c", "echo ignored; exit 4"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 4);
}

TEST(RunCommandTest, ReportsExitCodeAndStderrTail) {
  Ran run = Shell("echo out; echo '  first problem' >&2; echo '  final problem  ' >&2; exit 3");
  EXPECT_EQ(run.result.exit_code, 3);
  EXPECT_EQ(run.result.signal, 0);
  EXPECT_FALSE(run.result.ok());
  EXPECT_EQ(run.result.stderr_tail, "first problem\n  final problem");
  EXPECT_EQ(run.lines, std::vector<std::string>{"out"});
}

TEST(RunCommandTest, KeepsOnlyTheLastFourKiBOfStderr) {
  // 2000 lines of "line NNNN" on stderr, about 20 KB.
  Ran run = Shell("i=0; while [ $i -lt 2000 ]; do echo \"line $i\" >&2; i=$((i+1)); done");
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_LE(run.result.stderr_tail.size(), kStderrTailBytes);
  EXPECT_GE(run.result.stderr_tail.size(), kStderrTailBytes - 16);
  EXPECT_TRUE(run.result.stderr_tail.ends_with("line 1999")) << run.result.stderr_tail;
}

TEST(RunCommandTest, ReportsTheKillingSignal) {
  Ran run = Shell("kill -TERM $$; sleep 5");
  EXPECT_EQ(run.result.exit_code, -1);
  EXPECT_EQ(run.result.signal, SIGTERM);
  EXPECT_FALSE(run.result.timed_out);
}

TEST(RunCommandTest, ResetsSignalsTheParentIgnores) {
  // A shell started with SIGTERM ignored could not be killed by it.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &old), 0);
  Ran run = Shell("kill -TERM $$; sleep 5");
  sigaction(SIGTERM, &old, nullptr);
  EXPECT_EQ(run.result.signal, SIGTERM);
}

TEST(RunCommandTest, KillsTheProcessGroupOnTimeout) {
  // The shell's background child holds the pipes too; both must die (had
  // either lived, RunCommand would have waited the 30 s for the pipes).
  Ran run = Shell("sleep 30 & echo $!; wait", 300);
  EXPECT_TRUE(run.result.timed_out);
  EXPECT_EQ(run.result.signal, SIGKILL);
  EXPECT_EQ(run.result.exit_code, -1);
  ASSERT_EQ(run.lines.size(), 1u);
  pid_t grandchild = std::stoi(run.lines[0]);
  // Gone, or a zombie waiting for whichever process reaps orphans here.
  bool alive = false;
  for (int i = 0; i < 100; ++i) {
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string pid_field, comm, state;
    alive = static_cast<bool>(stat >> pid_field >> comm >> state) && state != "Z";
    if (!alive) break;
    usleep(10'000);
  }
  EXPECT_FALSE(alive) << "the background sleep survived the timeout";
}

TEST(RunCommandTest, StopsWhenCancelled) {
  int asked = 0;
  std::vector<std::string> lines;
  // Cancelled from the fourth question on: after about 600 ms.
  Result<CommandResult> r = RunCommand(
      {"/bin/sh", "-c", "echo started; sleep 30"},
      [&](std::string_view line) { lines.emplace_back(line); }, 0, [&] { return ++asked > 3; });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cancelled);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(lines, std::vector<std::string>{"started"});
  EXPECT_GE(asked, 4);
  // Never cancelled: runs to its end.
  Result<CommandResult> whole =
      RunCommand({"/bin/sh", "-c", "sleep 0.3; exit 4"}, {}, 0, [] { return false; });
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->cancelled);
  EXPECT_EQ(whole->exit_code, 4);
}

TEST(RunCommandTest, NoTimeoutWhenTheProgramIsQuick) {
  Ran run = Shell("echo quick", 5000);
  EXPECT_FALSE(run.result.timed_out);
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.lines, std::vector<std::string>{"quick"});
}

TEST(RunCommandTest, MissingProgramIsAnError) {
  Result<CommandResult> r = RunCommand({"gpupool-no-such-program"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "cannot run gpupool-no-such-program: No such file or directory");
  Result<CommandResult> abs = RunCommand({"/nonexistent/skopeo"});
  ASSERT_FALSE(abs.ok());
  EXPECT_EQ(abs.status().message(), "cannot run /nonexistent/skopeo: No such file or directory");
  EXPECT_FALSE(RunCommand({}).ok());
}

TEST(RunCommandTest, ChildSeesOnlyStandardDescriptorsAndDevNullInput) {
  int fd = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::dup2(fd, 77), 77);
  ::close(fd);
  // The shell lists its own descriptors: a glob of /proc/self/fd.
  Ran run = Shell("cd /proc/self/fd && for f in *; do echo $f; done; readlink /proc/self/fd/0");
  ::close(77);
  EXPECT_EQ(run.result.exit_code, 0);
  ASSERT_FALSE(run.lines.empty());
  EXPECT_EQ(run.lines.back(), "/dev/null");
  std::vector<std::string> fds(run.lines.begin(), run.lines.end() - 1);
  for (const std::string& f : fds) {
    // The shell may hold one descriptor of its own for the cd/glob (3 or 10).
    EXPECT_TRUE(f == "0" || f == "1" || f == "2" || f == "3" || f == "10") << "leaked fd " << f;
  }
  EXPECT_EQ(std::count(fds.begin(), fds.end(), "77"), 0);
}

TEST(RunPlanTest, RunsThePlanWithPipesAndSaysWhatCouldNotBeDone) {
  LaunchPlan plan;
  plan.argv = {"sh", "-c", "echo out; echo err >&2; pwd; echo $ONLY; exit 3"};
  plan.env = {"PATH=/usr/bin:/bin", "ONLY=this"};
  plan.cwd = "/tmp";
  std::vector<std::string> lines;
  auto r = RunPlan(plan, [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stderr_tail, "err");
  EXPECT_EQ(lines, (std::vector<std::string>{"out", "/tmp", "this"}));
  // It never gains privileges by exec.
  plan.argv = {"grep", "NoNewPrivs", "/proc/self/status"};
  lines.clear();
  r = RunPlan(plan, [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"NoNewPrivs:\t1"}));
  // What could not be done is an error, as RunCommand's.
  plan.argv = {"no-such-program-gpupool"};
  EXPECT_EQ(RunPlan(plan).status().message(),
            "cannot run no-such-program-gpupool: No such file or directory");
  plan.argv = {"true"};
  plan.cwd = "/no/such/dir";
  EXPECT_NE(RunPlan(plan).status().message().find("cannot run true: "), std::string::npos);
}

TEST(LastErrorLineTest, PicksTheMessage) {
  EXPECT_EQ(LastErrorLine(""), "");
  EXPECT_EQ(LastErrorLine("\n  \n"), "");
  EXPECT_EQ(LastErrorLine("one\ntwo\n\n"), "two");
  EXPECT_EQ(LastErrorLine("time=\"2024-01-01T00:00:00Z\" level=fatal msg=\"Error: reading "
                          "blob \\\"sha256:ab\\\": file not found\" extra=1\n"),
            "Error: reading blob \"sha256:ab\": file not found");
  EXPECT_EQ(
      LastErrorLine("   \u2022 unpacking\n\u2a2f create runtime bundle: unpack rootfs: bad\n"),
      "create runtime bundle: unpack rootfs: bad");
}

}  // namespace
}  // namespace gpupool::exec
