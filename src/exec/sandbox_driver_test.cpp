// The provider's GPU driver directory (ExecConfig::gpu_driver_dir) in the
// local executors: the sandbox binds its driver libraries and tools at
// /gpupool/driver for every job with GPUs, with or without an image, instead
// of the host's from ldconfig; the process executor puts it first on
// LD_LIBRARY_PATH. Plans checked, then run for real (sandbox_testing.h).
// Needs root, bubblewrap, skopeo, umoci and busybox-static, as the agent does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/files.h"
#include "exec/launch.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"
#include "exec/sandbox_testing.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using namespace test_support;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A driver directory only root may enter (as an agent's might be): the
// task's account reaches its files only through the staged binds.
class DriverDir {
 public:
  DriverDir() {
    EXPECT_TRUE(WriteFileAtomic(path() + "/libnvidia-ml.so.1", "dir-nvml\n", {.mode = 0644}).ok());
    EXPECT_TRUE(
        WriteFileAtomic(path() + "/libcuda.so.550.54.15", "dir-cuda\n", {.mode = 0644}).ok());
    fs::create_symlink("libcuda.so.550.54.15", path() + "/libcuda.so.1");
    EXPECT_TRUE(WriteFileAtomic(path() + "/libz.so.1", "not-the-driver\n", {.mode = 0644}).ok());
    WriteExecutable(path() + "/nvidia-smi", "#!/bin/sh\necho dir-smi\n");
  }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_{0700};
};

using SandboxDriverDirTest = SandboxTest;

TEST_F(SandboxDriverDirTest, AHostJobWithGpusGetsTheDirectorysLibrariesFirst) {
  DriverDir driver;
  config_.gpu_driver_dir = driver.path();
  config_.sandbox.ldconfig = "/no/such/ldconfig";  // not asked
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShellTask(
      "cat /gpupool/driver/lib/libnvidia-ml.so.1 /gpupool/driver/lib/libcuda.so.1; "
      "echo ls=$(ls /gpupool/driver/lib | tr '\\n' ' '); echo ld=$LD_LIBRARY_PATH; "
      "echo path=$PATH; echo smi=$(nvidia-smi)");
  task.uid = kTaskUid;
  task.gid = kTaskGid;
  task.gpu_uuids = {"GPU-00000000-0000-0000-0000-000000000001"};
  task.gpu_minors = {0};
  task.env = {"LD_LIBRARY_PATH=/opt/lib"};
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/run/lib-libnvidia-ml.so.1",
                                 "/gpupool/driver/lib/libnvidia-ml.so.1"}));
  EXPECT_TRUE(HasSeq(plan.argv,
                     {"--ro-bind", "/run/lib-libcuda.so.1", "/gpupool/driver/lib/libcuda.so.1"}));
  EXPECT_TRUE(
      HasSeq(plan.argv, {"--ro-bind", "/run/bin-nvidia-smi", "/gpupool/driver/bin/nvidia-smi"}));
  EXPECT_THAT(plan.stage_binds, Contains(LaunchPlan::StageBind{driver.path() + "/libnvidia-ml.so.1",
                                                               "lib-libnvidia-ml.so.1"}));
  EXPECT_FALSE(Mentions(plan.argv, "libz"));
  EXPECT_THAT(EnvValues(plan.env, "LD_LIBRARY_PATH"), ElementsAre("/gpupool/driver/lib:/opt/lib"));
  executor.Cleanup();

  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_THAT(Lines(o.out), testing::IsSupersetOf({"dir-nvml", "dir-cuda"}));
  EXPECT_EQ(Said(o.out, "ls"),
            "libcuda.so.1 libcuda.so.550.54.15 libnvidia-ml.so.1");  // the driver's only
  EXPECT_EQ(Said(o.out, "ld"), "/gpupool/driver/lib:/opt/lib");
  EXPECT_THAT(Said(o.out, "path"), testing::EndsWith(":/gpupool/driver/bin"));
  // The host's /usr comes first on PATH: its nvidia-smi, where it has one.
  if (FindProgram("nvidia-smi", EnvValues(HostBaseEnv(), "PATH").at(0)).empty()) {
    EXPECT_EQ(Said(o.out, "smi"), "dir-smi");
  }
}

TEST_F(SandboxDriverDirTest, OnlyJobsWithGpusGetTheDriver) {
  DriverDir driver;
  config_.gpu_driver_dir = driver.path();
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.env = {"LD_LIBRARY_PATH=/opt/lib"};
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_FALSE(Mentions(plan.argv, "/gpupool/driver")) << Join(plan.argv);
  EXPECT_FALSE(Mentions(plan.argv, driver.path())) << Join(plan.argv);
  EXPECT_THAT(EnvValues(plan.env, "LD_LIBRARY_PATH"), ElementsAre("/opt/lib"));
}

TEST_F(SandboxDriverDirTest, WithoutADriverDirectoryAHostJobUsesTheHostsUsr) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.gpu_uuids = {"GPU-1"};
  task.gpu_minors = {0};
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_FALSE(Mentions(plan.argv, "/gpupool/driver")) << Join(plan.argv);
  EXPECT_THAT(EnvValues(plan.env, "LD_LIBRARY_PATH"), testing::IsEmpty());
}

TEST_F(SandboxDriverDirTest, AVanishedDriverDirectoryFailsTheStartNamingIt) {
  config_.gpu_driver_dir = base_.path() + "/driver-gone";
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = HostTask({"true"});
  task.gpu_uuids = {"GPU-1"};
  ASSERT_TRUE(executor.Prepare(task, [](const std::string&) {}).ok());
  Result<LaunchPlan> plan = executor.Start(task);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("cannot read the GPU driver directory " + config_.gpu_driver_dir));
  executor.Cleanup();
}

TEST_F(SandboxImageTest, AnImageJobGetsTheDriverDirectorysLibrariesNotLdconfigs) {
  DriverDir driver;
  config_.gpu_driver_dir = driver.path();
  config_.sandbox.ldconfig = "/no/such/ldconfig";  // would fail the start if run
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task = ImageTask({"/bin/sh", "-c",
                                "cat /gpupool/driver/lib/libnvidia-ml.so.1; "
                                "echo ld=$LD_LIBRARY_PATH; echo path=$PATH"});
  task.argv_is_shell = true;
  task.gpu_uuids = {"GPU-00000000-0000-0000-0000-000000000001"};
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/run/lib-libnvidia-ml.so.1",
                                 "/gpupool/driver/lib/libnvidia-ml.so.1"}))
      << Join(plan.argv);
  executor.Cleanup();
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(Lines(o.out).at(0), "dir-nvml");
  EXPECT_EQ(Said(o.out, "ld"), "/gpupool/driver/lib");
  EXPECT_EQ(Said(o.out, "path"), "/bin:/gpupool/driver/bin");
}

TEST_F(SandboxDriverDirTest, TheProcessExecutorPutsTheDirectoryFirstOnLdLibraryPath) {
  DriverDir driver;
  config_.gpu_driver_dir = driver.path();
  ProcessExecutor executor(config_, nullptr);
  TaskContext task = ShellTask("echo ld=$LD_LIBRARY_PATH");
  task.gpu_uuids = {"GPU-1"};
  task.env = {"LD_LIBRARY_PATH=/opt/lib"};
  Outcome o = RunJob(executor, task);
  ASSERT_TRUE(o.exited_with(0)) << o.error << o.err;
  EXPECT_EQ(Said(o.out, "ld"), driver.path() + ":/opt/lib");

  // Without GPUs, or without a driver directory: the job's own.
  task.gpu_uuids.clear();
  EXPECT_EQ(Said(RunJob(executor, task).out, "ld"), "/opt/lib");
  task.gpu_uuids = {"GPU-1"};
  task.env.clear();
  EXPECT_EQ(Said(RunJob(executor, task).out, "ld"), driver.path());
  config_.gpu_driver_dir.clear();
  EXPECT_EQ(Said(RunJob(executor, task).out, "ld"), "");
}

}  // namespace
}  // namespace gpupool::exec
