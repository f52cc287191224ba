// ProbeExecEnvironment, MakeExecutor and ProbeSandbox on this machine:
// the real bubblewrap, skopeo and umoci; container engines replaced by
// scripts (or names that do not exist). Needs root, as the agent does.
#include "exec/executors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/files.h"
#include "exec/sandbox.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::StartsWith;

// Outside the agent's default task range (190000-190999), which end-to-end
// tests running at the same time use.
constexpr int kProbeUid = 189703;
constexpr int kProbeGid = 189703;

constexpr const char* kNoEngine = "gpupool-test-no-such-engine";
constexpr const char* kDaemonDown =
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
    "running?";

class ExecutorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-executors-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    config_.cgroup = "none";  // no cgroup changes from a unit test
    config_.images.dir = dir_ + "/images";
    config_.docker.engine = kNoEngine;
    config_.podman.engine = kNoEngine;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A script standing in for a program; returns its path.
  std::string Script(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomic(path, "#!/bin/sh\n" + body, {.mode = 0755}).ok());
    return path;
  }
  // An engine whose daemon does not answer, and one that does; both log
  // their arguments.
  std::string DownEngine() {
    return Script("docker-down", "echo \"$@\" >> " + dir_ + "/engine.log\n" +
                                     "echo 'some noise' >&2\n" + "echo '" + kDaemonDown +
                                     "' >&2\n" + "exit 1\n");
  }
  std::string UpEngine() {
    return Script("engine-up", "echo \"$@\" >> " + dir_ + "/engine.log\necho 24.0.7\n");
  }

  std::string dir_;
  ExecConfig config_;
};

TEST_F(ExecutorsTest, AMissingEngineIsUnavailableAndTheRestWork) {
  config_.executors = {"sandbox", "process", "docker"};
  ExecEnvironment env = ProbeExecEnvironment(config_, kProbeUid, kProbeGid);
  EXPECT_THAT(env.available, ElementsAre("sandbox", "process"));
  EXPECT_THAT(env.unavailable,
              ElementsAre(Pair("docker", std::string(kNoEngine) + " is not installed")));
  EXPECT_EQ(env.default_executor(), "sandbox");
  // The sandbox works, and skopeo and umoci are installed here.
  EXPECT_TRUE(env.sandbox_images);
  EXPECT_FALSE(env.cgroups.has_value());
  EXPECT_THAT(env.limits_mode,
              StartsWith("limits: rlimits (no usable cgroup v2: disabled in the agent's config"));
}

TEST_F(ExecutorsTest, AnEngineThatFailsVersionIsUnavailableWithItsError) {
  config_.executors = {"docker", "sandbox"};
  config_.docker.engine = DownEngine();
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  EXPECT_THAT(env.available, ElementsAre("sandbox"));
  EXPECT_THAT(env.unavailable, ElementsAre(Pair("docker", config_.docker.engine +
                                                              " version failed: " + kDaemonDown)));
  // The default is the first that works.
  EXPECT_EQ(env.default_executor(), "sandbox");
  // The server must answer, not only the CLI.
  EXPECT_EQ(ReadFile(dir_ + "/engine.log").value_or(""), "version --format {{.Server.Version}}\n");
}

TEST_F(ExecutorsTest, AnEngineThatAnswersIsAvailable) {
  config_.executors = {"podman", "process"};
  config_.podman.engine = UpEngine();
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  EXPECT_THAT(env.available, ElementsAre("podman", "process"));
  EXPECT_THAT(env.unavailable, IsEmpty());
  // The tools are here, but no sandbox is offered to use them.
  EXPECT_FALSE(env.sandbox_images);
  // An image job goes to the engine, which pulls images itself.
  EXPECT_EQ(ChooseExecutor("", true, env), "podman");
}

TEST_F(ExecutorsTest, AnUnknownNameIsUnavailable) {
  config_.executors = {"process", "kubernetes"};
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  EXPECT_THAT(env.available, ElementsAre("process"));
  EXPECT_THAT(env.unavailable, ElementsAre(Pair("kubernetes", "unknown executor")));
}

TEST_F(ExecutorsTest, ABrokenSandboxLeavesTheProcessExecutor) {
  config_.executors = {"sandbox", "process"};
  config_.sandbox.bwrap = "/no/such/bwrap";
  ExecEnvironment env = ProbeExecEnvironment(config_, kProbeUid, kProbeGid);
  EXPECT_THAT(env.available, ElementsAre("process"));
  EXPECT_THAT(
      env.unavailable,
      ElementsAre(Pair("sandbox", "cannot start /no/such/bwrap: No such file or directory")));
  EXPECT_EQ(env.default_executor(), "process");
  EXPECT_FALSE(env.sandbox_images);  // skopeo and umoci are here, the sandbox is not
  // No executor here runs images: the default gets the job and says why.
  EXPECT_EQ(ChooseExecutor("", true, env), "process");
}

TEST_F(ExecutorsTest, WithoutSkopeoOrUmociTheSandboxRunsNoImages) {
  config_.executors = {"sandbox"};
  config_.images.umoci = "/no/such/umoci";
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  EXPECT_THAT(env.available, ElementsAre("sandbox"));
  EXPECT_FALSE(env.sandbox_images);
}

TEST(ChooseExecutorTest, AskedForWinsElseTheDefaultElseForAnImageTheFirstThatRunsImages) {
  ExecEnvironment env;
  EXPECT_EQ(ChooseExecutor("", false, env), "");
  EXPECT_EQ(ChooseExecutor("", true, env), "");
  env.available = {"process", "sandbox"};
  env.sandbox_images = true;
  EXPECT_EQ(ChooseExecutor("", false, env), "process");
  EXPECT_EQ(ChooseExecutor("", true, env), "sandbox");         // process refuses images
  EXPECT_EQ(ChooseExecutor("process", true, env), "process");  // asked for: it says why not
  EXPECT_EQ(ChooseExecutor("docker", false, env), "docker");   // not offered: MakeExecutor says
  env.sandbox_images = false;
  EXPECT_EQ(ChooseExecutor("", true, env), "process");
  env.available = {"process", "sandbox", "docker"};
  EXPECT_EQ(ChooseExecutor("", true, env), "docker");
  env.sandbox_images = true;
  EXPECT_EQ(ChooseExecutor("", true, env), "sandbox");  // the first that can
  env.available = {"sandbox", "process"};
  EXPECT_EQ(ChooseExecutor("", true, env), "sandbox");
  EXPECT_EQ(ChooseExecutor("", false, env), "sandbox");
}

TEST_F(ExecutorsTest, MakeExecutorGivesTheDefaultOrTheOneAskedFor) {
  config_.executors = {"sandbox", "process"};
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  ASSERT_THAT(env.available, ElementsAre("sandbox", "process"));
  auto def = MakeExecutor("", false, config_, env);
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ((*def)->name(), "sandbox");
  auto process = MakeExecutor("process", false, config_, env);
  ASSERT_TRUE(process.ok()) << process.status().ToString();
  EXPECT_EQ((*process)->name(), "process");
  auto sandbox = MakeExecutor("sandbox", false, config_, env);
  ASSERT_TRUE(sandbox.ok());
  EXPECT_EQ((*sandbox)->name(), "sandbox");
}

TEST_F(ExecutorsTest, AnImageJobSkipsADefaultThatCannotRunImages) {
  config_.executors = {"process", "sandbox"};
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  ASSERT_THAT(env.available, ElementsAre("process", "sandbox"));
  ASSERT_TRUE(env.sandbox_images);
  auto host = MakeExecutor("", false, config_, env);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ((*host)->name(), "process");
  auto image = MakeExecutor("", true, config_, env);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ((*image)->name(), "sandbox");
  // Asked for by name, the process executor it is; its Start refuses the image.
  auto asked = MakeExecutor("process", true, config_, env);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ((*asked)->name(), "process");
}

TEST_F(ExecutorsTest, MakeExecutorRefusesWhatTheNodeDoesNotOffer) {
  config_.executors = {"sandbox", "docker"};
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  auto process = MakeExecutor("process", false, config_, env);
  ASSERT_FALSE(process.ok());
  EXPECT_EQ(process.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(process.status().message(), "this node does not offer the process executor");

  auto docker = MakeExecutor("docker", false, config_, env);
  ASSERT_FALSE(docker.ok());
  EXPECT_EQ(docker.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(docker.status().message(), std::string("the docker executor does not work on this "
                                                   "node: ") +
                                           kNoEngine + " is not installed");

  ExecEnvironment none;
  auto nothing = MakeExecutor("", false, config_, none);
  ASSERT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.status().message(), "this node has no working executor");
}

TEST_F(ExecutorsTest, MakeExecutorBuildsAContainerExecutorForAWorkingEngine) {
  config_.executors = {"docker"};
  config_.docker.engine = UpEngine();
  ExecEnvironment env = ProbeExecEnvironment(config_, -1, -1);
  auto docker = MakeExecutor("", false, config_, env);
  ASSERT_TRUE(docker.ok()) << docker.status().ToString();
  EXPECT_EQ((*docker)->name(), "docker");
  EXPECT_TRUE((*docker)->EnforcesMemory());
}

TEST_F(ExecutorsTest, TheSandboxGetsAnImageCacheOnlyWhereImagesWork) {
  TaskContext task;
  task.attempt_id = "3.1";
  task.work_dir = dir_;
  task.image = "oci-archive:/no/such/image.tar";
  auto noop = [](const std::string&) {};

  ExecEnvironment with;
  with.available = {"sandbox"};
  with.sandbox_images = true;
  auto a = MakeExecutor("", true, config_, with);
  ASSERT_TRUE(a.ok());
  Status s = (*a)->Prepare(task, noop);  // the cache looks for the archive
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_THAT(s.message(), StartsWith("image oci-archive:/no/such/image.tar: "));
  EXPECT_THAT(s.message(), Not(HasSubstr("cannot run images")));

  ExecEnvironment without = with;
  without.sandbox_images = false;
  auto b = MakeExecutor("", true, config_, without);
  ASSERT_TRUE(b.ok());
  s = (*b)->Prepare(task, noop);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("this node cannot run images"));
}

TEST(ProbeSandboxTest, WorksHereAsThisProcessAndAsATaskAccount) {
  ASSERT_EQ(::geteuid(), 0u) << "these tests run as root, like the agent";
  SandboxOptions options;
  Status self = ProbeSandbox(options, -1, -1);
  EXPECT_TRUE(self.ok()) << self.ToString();
  Status task = ProbeSandbox(options, kProbeUid, kProbeGid);
  EXPECT_TRUE(task.ok()) << task.ToString();
}

TEST(ProbeSandboxTest, AMissingBubblewrapCannotStart) {
  SandboxOptions options;
  options.bwrap = "/no/such/bwrap";
  Status s = ProbeSandbox(options, -1, -1);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "cannot start /no/such/bwrap: No such file or directory");
}

TEST(ProbeSandboxTest, ABubblewrapThatFailsIsQuoted) {
  char tmpl[] = "/tmp/gpupool-executors-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  SandboxOptions options;
  options.bwrap = dir + "/bwrap";
  ASSERT_TRUE(WriteFileAtomic(options.bwrap,
                              "#!/bin/sh\n"
                              "echo 'bwrap: No permissions to create new namespace' >&2\n"
                              "exit 1\n",
                              {.mode = 0755})
                  .ok());
  Status s = ProbeSandbox(options, -1, -1);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "bubblewrap does not work here: bwrap: No permissions to create new namespace");
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace gpupool::exec
