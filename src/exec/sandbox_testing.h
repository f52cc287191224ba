// For the sandbox's tests only (sandbox_test.cpp, sandbox_driver_test.cpp):
// the fixtures that plan a SandboxExecutor's command line with a real
// ExecConfig and run it for real as the shim does (run_plan_testing.h), and
// helpers that read the plan and the job's output. Needs root, as the agent
// does; SandboxImageTest also needs skopeo, umoci and busybox-static (the
// busybox image of tests/images/make_test_image.sh, built once per suite).
//
// A root agent's plan stages what bubblewrap binds under /run in the
// child's own mount namespace; RunJob moves that stage to a fresh directory
// (Restage) and otherwise runs the plan as it is.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "exec/run_plan_testing.h"
#include "exec/sandbox.h"
#include "exec/subprocess.h"

namespace gpupool::exec::test_support {

// Outside the agent's default task range (190000-190999), which end-to-end
// tests running at the same time use.
inline constexpr int kTaskUid = 189702;
inline constexpr int kTaskGid = 189702;

inline std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// Whether `seq` appears in `argv` as consecutive elements.
inline bool HasSeq(const std::vector<std::string>& argv, const std::vector<std::string>& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

inline bool Mentions(const std::vector<std::string>& argv, const std::string& text) {
  return std::any_of(argv.begin(), argv.end(),
                     [&](const std::string& a) { return a.find(text) != std::string::npos; });
}

// What follows "--": the job's own command line.
inline std::vector<std::string> Command(const LaunchPlan& plan) {
  auto it = std::find(plan.argv.begin(), plan.argv.end(), "--");
  if (it == plan.argv.end()) return {"(no --)"};
  return std::vector<std::string>(it + 1, plan.argv.end());
}

// All values of KEY in KEY=VALUE entries.
inline std::vector<std::string> EnvValues(const std::vector<std::string>& env,
                                          const std::string& key) {
  std::vector<std::string> values;
  for (const auto& kv : env) {
    if (kv.starts_with(key + "=")) values.push_back(kv.substr(key.size() + 1));
  }
  return values;
}

// The value of a "key=value" line of the job's output; "(missing)" if none.
inline std::string Said(const std::string& out, const std::string& key) {
  for (const std::string& line : Lines(out)) {
    if (line.starts_with(key + "=")) return line.substr(key.size() + 1);
  }
  return "(missing)";
}

// Moves the plan's stage from /run to `dir`, paths in bubblewrap's argv
// included.
inline void Restage(LaunchPlan& plan, const std::string& dir) {
  if (plan.stage_dir.empty()) return;
  ASSERT_EQ(plan.stage_dir, kSandboxStageDir);
  plan.stage_dir = dir;
  const std::string prefix = std::string(kSandboxStageDir) + "/";
  for (std::string& a : plan.argv) {
    if (a.starts_with(prefix)) a = dir + "/" + a.substr(prefix.size());
  }
}

// How a job run through an executor ended.
struct Outcome {
  std::string error;  // Prepare, Start or the launch failed
  std::string out, err, last_err_line;
  int wait_status = -1;
  std::string reason;  // ExitReason
  bool exited_with(int code) const {
    return error.empty() && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == code;
  }
};

// Prepare, Start, run the plan to its end, ExitReason, Cleanup.
inline Outcome RunJob(Executor& executor, const TaskContext& task) {
  Outcome o;
  if (Status s = executor.Prepare(task, [](const std::string&) {}); !s.ok()) {
    o.error = s.ToString();
    return o;
  }
  Result<LaunchPlan> plan = executor.Start(task);
  if (!plan.ok()) {
    o.error = plan.status().ToString();
    executor.Cleanup();
    return o;
  }
  TempDir stage(0755);
  Restage(*plan, stage.path());
  RunningPlan run(*plan);
  if (Status s = executor.Started(run.pid()); !s.ok()) {
    o.error = s.ToString();
    executor.Stop(SIGKILL);
  }
  if (run.launch_failed()) {
    o.error = DescribeLaunchFailure(*plan, run.failure_step(), run.failure_errno());
  }
  if (!run.Finish()) o.error += "(timed out)";
  o.out = run.out();
  o.err = run.err();
  o.last_err_line = run.last_stderr_line();
  o.wait_status = run.wait_status();
  o.reason = executor.ExitReason(o.wait_status, o.last_err_line);
  executor.Cleanup();
  return o;
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "these tests run as root, like the agent";
    // The agent's data dir: root's and closed to the task accounts.
    ASSERT_FALSE(base_.path().empty());
    task_dir_ = base_.path() + "/tasks/7.1";
    work_dir_ = task_dir_ + "/work";
    std::filesystem::create_directories(work_dir_);
    // Fake GPU device nodes.
    dev_dir_ = base_.path() + "/dev";
    std::filesystem::create_directories(dev_dir_);
    for (const char* name : {"nvidia0", "nvidia1", "nvidiactl"}) {
      ASSERT_TRUE(WriteFileAtomic(dev_dir_ + "/" + name, name, {.mode = 0666}).ok());
    }
    config_.cgroup = "none";
    config_.sandbox.devices_dir = dev_dir_;
  }

  TaskContext HostTask(std::vector<std::string> argv) const {
    TaskContext t;
    t.attempt_id = "7.1";
    t.job_id = 7;
    t.task_dir = task_dir_;
    t.work_dir = work_dir_;
    t.argv = std::move(argv);
    return t;
  }
  TaskContext ShellTask(const std::string& script) const {
    TaskContext t = HostTask({"/bin/sh", "-c", script});
    t.argv_is_shell = true;
    return t;
  }

  LaunchPlan MustStart(SandboxExecutor& executor, const TaskContext& task) {
    Status s = executor.Prepare(task, [](const std::string&) {});
    EXPECT_TRUE(s.ok()) << s.ToString();
    Result<LaunchPlan> plan = executor.Start(task);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? *plan : LaunchPlan{};
  }

  TempDir base_;
  std::string task_dir_, work_dir_, dev_dir_;
  ExecConfig config_;
};

// The script, in the source tree (GPUPOOL_SOURCE_DIR: src/exec/CMakeLists.txt;
// __FILE__ may be relative to a directory the test does not run in).
inline std::string ImageScriptPath() {
  return std::string(GPUPOOL_SOURCE_DIR) + "/tests/images/make_test_image.sh";
}

class SandboxImageTest : public SandboxTest {
 protected:
  static void SetUpTestSuite() {
    // Readable by the task's account, which pulls the image (as a
    // provider's local images must be).
    images_base_ = MakeTempDir(0755);
    ASSERT_FALSE(images_base_.empty());
    Result<CommandResult> r = RunCommand({"sh", ImageScriptPath(), images_base_ + "/image"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->exit_code, 0) << r->stderr_tail;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(images_base_, ec);
  }

  void SetUp() override {
    SandboxTest::SetUp();
    config_.images.dir = images_base_ + "/cache";  // shared: pulled once
  }
  std::unique_ptr<ImageCache> Cache() { return std::make_unique<ImageCache>(config_.images); }
  TaskContext ImageTask(std::vector<std::string> argv) const {
    TaskContext t = HostTask(std::move(argv));
    t.image = "oci-archive:" + images_base_ + "/image/busybox.tar";
    t.uid = kTaskUid;
    t.gid = kTaskGid;
    return t;
  }

  static inline std::string images_base_;
};

}  // namespace gpupool::exec::test_support
