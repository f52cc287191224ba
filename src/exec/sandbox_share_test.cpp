// A share of a GPU in the local executors (exec/gpu_share.h): the sandbox
// binds libgpushare.so, the task's limits and ledger at /gpupool/share and
// its own /etc/ld.so.preload (with /etc bound entry by entry, without the
// system's ld.so.preload), so every dynamically linked process of the job
// maps the library whatever its environment says; the process executor sets
// LD_PRELOAD and GPUSHARE_LIMITS. Plans checked, then run for real
// (sandbox_testing.h) with the library this build made (GPUSHARE_LIB).
// Needs root, bubblewrap, skopeo, umoci and busybox-static, as the agent does.
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/files.h"
#include "exec/gpu_share.h"
#include "exec/launch.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"
#include "exec/sandbox_testing.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using namespace test_support;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

// What a job with a share shows of its injection.
constexpr const char* kShowShare =
    "echo preload=$(cat /etc/ld.so.preload); "
    "echo limits=$(cat /gpupool/share/limits | tr '\\n' ' '); "
    "echo ls=$(ls /gpupool/share | tr '\\n' ' '); "
    "echo usage=$(stat -c %a:%u:%s /gpupool/share/usage); "
    // A process started with an empty environment maps the library all the same.
    "echo mapped=$(env -i /bin/grep -q /gpupool/share/libgpushare.so /proc/self/maps && echo yes); "
    "echo ld_preload=$LD_PRELOAD; "
    "(echo x > /gpupool/share/limits) 2>/dev/null; echo write_limits=$?; "
    "(echo x > /etc/ld.so.preload) 2>/dev/null; echo write_preload=$?; "
    "(echo x > /gpupool/share/usage) 2>/dev/null; echo write_usage=$?; "
    // Opened for writing, nothing written: the want file is the task's, the
    // grant the agent's.
    "(: >> /gpupool/share/want) 2>/dev/null; echo write_want=$?; "
    "(: >> /gpupool/share/grant) 2>/dev/null; echo write_grant=$?; "
    "echo passwd=$(test -f /etc/passwd && echo yes)";

class SandboxShareTest : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    config_.gpushare_library = GPUSHARE_LIB;
  }
  TaskContext ShareTask(const std::string& script) const {
    TaskContext task = ShellTask(script);
    task.uid = kTaskUid;
    task.gid = kTaskGid;
    task.gpu_uuids = {"GPU-00000000-0000-0000-0000-000000000001"};
    task.gpu_share = GpuShare{4 * kGiB, 500};
    return task;
  }
};

TEST_F(SandboxShareTest, AShareGetsTheInterposerInEveryProcess) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShareTask(kShowShare);
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  const GpuShareFiles files = GpuShareFilesIn(task_dir_);
  EXPECT_TRUE(HasSeq(
      plan.argv, {"--ro-bind", "/run/share-libgpushare.so", "/gpupool/share/libgpushare.so",
                  "--ro-bind", "/run/share-limits", "/gpupool/share/limits", "--bind",
                  "/run/share-usage", "/gpupool/share/usage", "--bind", "/run/share-want",
                  "/gpupool/share/want", "--ro-bind", "/run/share-grant", "/gpupool/share/grant",
                  "--ro-bind", "/run/share-ld.so.preload", "/etc/ld.so.preload"}));
  EXPECT_THAT(plan.stage_binds, testing::IsSupersetOf({
                                    LaunchPlan::StageBind{GPUSHARE_LIB, "share-libgpushare.so"},
                                    LaunchPlan::StageBind{files.limits, "share-limits"},
                                    LaunchPlan::StageBind{files.usage, "share-usage"},
                                    LaunchPlan::StageBind{files.want, "share-want"},
                                    LaunchPlan::StageBind{files.grant, "share-grant"},
                                    LaunchPlan::StageBind{files.preload, "share-ld.so.preload"},
                                }));
  // /etc entry by entry on the tmpfs root, not the host's directory.
  EXPECT_FALSE(HasSeq(plan.argv, {"--ro-bind", "/etc", "/etc"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--dir", "/etc"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/etc/passwd", "/etc/passwd"}));
  EXPECT_THAT(EnvValues(plan.env, "LD_PRELOAD"), testing::IsEmpty());
  EXPECT_THAT(EnvValues(plan.env, "GPUSHARE_LIMITS"), testing::IsEmpty());
  executor.Cleanup();

  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(Said(o.out, "preload"), "/gpupool/share/libgpushare.so");
  EXPECT_EQ(Said(o.out, "limits"),
            "gpushare 1 memory_bytes 4294967296 share_milli 500 mode work-conserving usage "
            "/gpupool/share/usage want /gpupool/share/want grant /gpupool/share/grant");
  EXPECT_EQ(Said(o.out, "ls"), "grant libgpushare.so limits usage want");
  EXPECT_EQ(Said(o.out, "usage"), "600:" + std::to_string(kTaskUid) + ":0");
  EXPECT_EQ(Said(o.out, "mapped"), "yes");
  EXPECT_EQ(Said(o.out, "ld_preload"), "");
  EXPECT_NE(Said(o.out, "write_limits"), "0");
  EXPECT_NE(Said(o.out, "write_preload"), "0");
  EXPECT_EQ(Said(o.out, "write_usage"), "0");  // the task's own ledger
  EXPECT_EQ(Said(o.out, "write_want"), "0");   // its own activity
  EXPECT_NE(Said(o.out, "write_grant"), "0");  // the agent's
  EXPECT_EQ(Said(o.out, "passwd"), "yes");
  // Outside, the limits are as the agent wrote them.
  EXPECT_EQ(*ReadFile(files.limits), GpuShareLimitsText({4 * kGiB, 500}, kShareDirInJob));
}

TEST_F(SandboxShareTest, WholeGpusGetNothingOfIt) {
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShareTask(
      "ls /gpupool 2>&1; test -e /etc/ld.so.preload && echo preload=yes; "
      "grep -c libgpushare /proc/self/maps");
  task.gpu_share.reset();
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  // bubblewrap's own arguments, not the job's script.
  std::vector<std::string> bwrap(plan.argv.begin(),
                                 std::find(plan.argv.begin(), plan.argv.end(), "--"));
  EXPECT_TRUE(HasSeq(bwrap, {"--ro-bind", "/etc", "/etc"}));
  EXPECT_FALSE(Mentions(bwrap, "/gpupool/share"));
  EXPECT_FALSE(Mentions(bwrap, "ld.so.preload"));
  executor.Cleanup();
  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  EXPECT_THAT(Lines(o.out), ElementsAre(HasSubstr("No such file"), "0")) << o.out;
  EXPECT_FALSE(fs::exists(GpuShareFilesIn(task_dir_).dir));
}

TEST_F(SandboxShareTest, WithoutTheLibraryAShareDoesNotStart) {
  config_.gpushare_library = base_.path() + "/lib/libgpushare.so";
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShareTask("true");
  Status s = executor.Prepare(task, [](const std::string&) {});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("GPU sharing is not available on this node: cannot use " +
                                     config_.gpushare_library + ": No such file"));
  // Whole GPUs do not need it.
  task.gpu_share.reset();
  EXPECT_TRUE(RunJob(executor, task).exited_with(0));
}

TEST_F(SandboxShareTest, TheProcessExecutorPreloadsThroughTheEnvironment) {
  ProcessExecutor executor(config_, nullptr);
  TaskContext task = ShareTask(
      "echo ld_preload=$LD_PRELOAD; echo limits=$GPUSHARE_LIMITS; "
      "echo mapped=$(grep -q libgpushare.so /proc/self/maps && echo yes)");
  task.uid = task.gid = -1;  // as the agent's account, as the process executor runs
  task.env = {"LD_PRELOAD=/opt/own.so"};
  Outcome o = RunJob(executor, task);
  ASSERT_TRUE(o.exited_with(0)) << o.error << o.err;
  const GpuShareFiles files = GpuShareFilesIn(task_dir_);
  EXPECT_EQ(Said(o.out, "ld_preload"), std::string(GPUSHARE_LIB) + ":/opt/own.so");
  EXPECT_EQ(Said(o.out, "limits"), files.limits);
  EXPECT_EQ(Said(o.out, "mapped"), "yes");
  // No sandbox: the limits name the ledger where it is.
  EXPECT_EQ(*ReadFile(files.limits), GpuShareLimitsText({4 * kGiB, 500}, files.dir));
}

TEST_F(SandboxShareTest, AnMpsShareReachesItsDaemonsPipeDirectoryWithItsLimits) {
  // The GPU's MPS pipe directory (agent/mps.h), with a file standing in
  // for the daemon's control socket.
  const std::string pipe = base_.path() + "/mps-pipe";
  fs::create_directories(pipe);
  ::chmod(pipe.c_str(), 01777);
  ASSERT_TRUE(WriteFileAtomic(pipe + "/control", "").ok());
  SandboxExecutor executor(config_, nullptr, nullptr);
  TaskContext task = ShareTask(
      "echo mps=$(env | grep ^CUDA_MPS_ | sort | tr '\\n' ' '); "
      "echo pipe=$(ls /gpupool/mps | tr '\\n' ' '); echo shm=$(ls /dev/shm); "
      "echo preload=$(cat /etc/ld.so.preload)");
  const std::string shm = base_.path() + "/mps-shm";
  fs::create_directories(shm);
  ::chmod(shm.c_str(), 01777);
  ASSERT_TRUE(WriteFileAtomic(shm + "/cuda.shm.0", "").ok());
  task.gpu_share = GpuShare{3 * kGiB, 300, false, pipe, shm};
  LaunchPlan plan = MustStart(executor, task);
  SCOPED_TRACE(Join(plan.argv));
  EXPECT_TRUE(HasSeq(plan.argv, {"--bind", "/run/mps-pipe", "/gpupool/mps"}));
  EXPECT_THAT(plan.stage_binds, testing::Contains(LaunchPlan::StageBind{pipe, "mps-pipe"}));
  EXPECT_TRUE(HasSeq(plan.argv, {"--bind", "/run/mps-shm", "/dev/shm"}));
  EXPECT_THAT(EnvValues(plan.env, "CUDA_MPS_PIPE_DIRECTORY"), ElementsAre("/gpupool/mps"));
  executor.Cleanup();

  Outcome o = RunJob(executor, task);
  ASSERT_EQ(o.error, "");
  ASSERT_TRUE(o.exited_with(0)) << o.err;
  EXPECT_EQ(Said(o.out, "mps"),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3072M "
            "CUDA_MPS_PIPE_DIRECTORY=/gpupool/mps");
  EXPECT_EQ(Said(o.out, "pipe"), "control");
  EXPECT_EQ(Said(o.out, "shm"), "cuda.shm.0");  // the daemon's /dev/shm
  // The interposer's memory cap holds as well.
  EXPECT_EQ(Said(o.out, "preload"), "/gpupool/share/libgpushare.so");

  // The process executor names the directory where it is.
  ProcessExecutor process(config_, nullptr);
  task.uid = task.gid = -1;
  task.argv = {"/bin/sh", "-c", "echo pipe=$CUDA_MPS_PIPE_DIRECTORY"};
  Outcome p = RunJob(process, task);
  ASSERT_TRUE(p.exited_with(0)) << p.error << p.err;
  EXPECT_EQ(Said(p.out, "pipe"), pipe);

  // Without a pipe directory: no MPS variables, no bind.
  task = ShareTask("true");
  LaunchPlan plain = MustStart(executor, task);
  EXPECT_FALSE(HasSeq(plain.argv, {"--bind", "/run/mps-pipe", "/gpupool/mps"}));
  EXPECT_FALSE(HasSeq(plain.argv, {"--bind", "/run/mps-shm", "/dev/shm"}));
  EXPECT_THAT(EnvValues(plain.env, "CUDA_MPS_PIPE_DIRECTORY"), testing::IsEmpty());
  executor.Cleanup();
}

// The image's root as the cache unpacked it (one image in this suite).
std::string ImageRootIn(const std::string& cache) {
  for (const auto& e : fs::directory_iterator(cache + "/roots")) {
    if (fs::exists(e.path() / "rootfs")) return (e.path() / "rootfs").string();
  }
  return "";
}

using SandboxShareImageTest = SandboxImageTest;

TEST_F(SandboxShareImageTest, AnImagesOwnLdSoPreloadGivesWayToOurs) {
  config_.gpushare_library = GPUSHARE_LIB;
  SandboxExecutor executor(config_, nullptr, Cache());
  TaskContext task = ImageTask({"/bin/sh", "-c", "cat /etc/ld.so.preload /etc/motd; ls /etc"});
  task.argv_is_shell = true;
  task.gpu_uuids = {"GPU-00000000-0000-0000-0000-000000000001"};
  Outcome first = RunJob(executor, task);                                      // pulls the image
  ASSERT_TRUE(first.exited_with(1)) << first.error << first.out << first.err;  // no /etc

  // The image has an /etc of its own, with an ld.so.preload.
  const std::string root = ImageRootIn(config_.images.dir);
  ASSERT_FALSE(root.empty());
  fs::create_directories(root + "/etc");
  ASSERT_TRUE(WriteFileAtomic(root + "/etc/ld.so.preload", "/lib/image-own.so\n").ok());
  ASSERT_TRUE(WriteFileAtomic(root + "/etc/motd", "image-motd\n").ok());
  Outcome whole = RunJob(executor, task);
  ASSERT_TRUE(whole.exited_with(0)) << whole.error << whole.err;
  EXPECT_THAT(Lines(whole.out),
              ElementsAre("/lib/image-own.so", "image-motd", "ld.so.preload", "motd"));

  task.gpu_share = GpuShare{kGiB, 250};
  LaunchPlan plan = MustStart(executor, task);
  EXPECT_TRUE(HasSeq(plan.argv, {"--ro-bind", "/run/root/etc/motd", "/etc/motd"}))
      << Join(plan.argv);
  EXPECT_FALSE(Mentions(plan.argv, "/run/root/etc/ld.so.preload")) << Join(plan.argv);
  executor.Cleanup();
  Outcome shared = RunJob(executor, task);
  ASSERT_TRUE(shared.exited_with(0)) << shared.error << shared.err;
  EXPECT_THAT(Lines(shared.out),
              ElementsAre("/gpupool/share/libgpushare.so", "image-motd", "ld.so.preload", "motd"));
  fs::remove_all(root + "/etc");
}

}  // namespace
}  // namespace gpupool::exec
