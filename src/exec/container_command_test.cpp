#include "exec/container_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <csignal>
#include <string>
#include <vector>

namespace gpupool::exec {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

using Argv = std::vector<std::string>;

TaskContext Task() {
  TaskContext t;
  t.attempt_id = "12.1";
  t.job_id = 12;
  t.task_dir = "/var/lib/gpupool/tasks/12.1";
  t.work_dir = "/var/lib/gpupool/tasks/12.1/work";
  t.argv = {"/bin/sh", "-c", "python train.py --epochs 3"};
  t.argv_is_shell = true;
  t.env = {"PATH=/usr/local/bin:/usr/bin:/bin",
           "LANG=C.UTF-8",
           "HOME=/var/lib/gpupool/tasks/12.1/work",
           "TMPDIR=/var/lib/gpupool/tasks/12.1/work",
           "MESSAGE=hello world",
           "OPTS=--lr=0.1 --name='a b'",
           "EMPTY=",
           "CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb",
           "GPUPOOL_JOB_ID=12"};
  t.image = "docker://nvcr.io/nvidia/pytorch:24.01-py3";
  t.network = NetworkMode::kPrivate;
  t.gpu_uuids = {"GPU-aaa", "GPU-bbb"};
  t.gpu_minors = {0, 1};
  t.limits = Limits{34359738368, 1500, 4096, 0};
  t.uid = 190003;
  t.gid = 190003;
  return t;
}

Argv RunArgv(const ContainerOptions& o, const TaskContext& t) {
  auto argv = ContainerRunCommand(o, t);
  EXPECT_TRUE(argv.ok()) << argv.status().ToString();
  return argv.ok() ? *argv : Argv{};
}

// The env part every test task gets: the task's own minus PATH, HOME and
// TMPDIR, then the executor's.
Argv EnvArgs(const std::string& visible_devices) {
  return {"-e", "LANG=C.UTF-8",
          "-e", "MESSAGE=hello world",
          "-e", "OPTS=--lr=0.1 --name='a b'",
          "-e", "EMPTY=",
          "-e", "CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb",
          "-e", "GPUPOOL_JOB_ID=12",
          "-e", "HOME=/work",
          "-e", "TMPDIR=/work",
          "-e", "GPUPOOL_WORK_DIR=/work",
          "-e", "GPUPOOL_CHECKPOINT_DIR=/work/.checkpoints",
          "-e", "NVIDIA_VISIBLE_DEVICES=" + visible_devices};
}

Argv Concat(std::initializer_list<Argv> parts) {
  Argv all;
  for (const Argv& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

const Argv kHead = {"run",    "--name", "gpupool-12-1", "--label", "gpupool.attempt=12.1",
                    "--init", "--pull", "missing"};
const Argv kUserAndPrivileges = {"--user", "190003:190003",  "--cap-drop",
                                 "ALL",    "--security-opt", "no-new-privileges"};
const Argv kLimits = {"--memory", "34359738368b", "--memory-swap", "34359738368b",
                      "--cpus",   "1.500",        "--pids-limit",  "4096"};
const Argv kWork = {"-v", "/var/lib/gpupool/tasks/12.1/work:/work", "-w", "/work"};
// A shell `run` replaces the image's ENTRYPOINT, as in the sandbox.
const Argv kImageAndCommand = {"--entrypoint", "/bin/sh", "nvcr.io/nvidia/pytorch:24.01-py3", "-c",
                               "python train.py --epochs 3"};

TEST(ContainerRunCommandTest, DockerWithCdiGpus) {
  ContainerOptions o;  // docker, cdi
  EXPECT_EQ(RunArgv(o, Task()),
            Concat({{"docker"},
                    kHead,
                    kUserAndPrivileges,
                    kLimits,
                    {"--device", "nvidia.com/gpu=GPU-aaa", "--device", "nvidia.com/gpu=GPU-bbb"},
                    kWork,
                    EnvArgs("void"),
                    kImageAndCommand}));
}

TEST(ContainerRunCommandTest, DockerWithGpusFlagQuotesTheDeviceList) {
  ContainerOptions o;
  o.engine = "/usr/bin/docker";
  o.gpu_mode = "gpus";
  // docker reads --gpus as CSV: the inner quotes keep the comma in one field.
  EXPECT_EQ(RunArgv(o, Task()), Concat({{"/usr/bin/docker"},
                                        kHead,
                                        kUserAndPrivileges,
                                        kLimits,
                                        {"--gpus", "\"device=GPU-aaa,GPU-bbb\""},
                                        kWork,
                                        EnvArgs("GPU-aaa,GPU-bbb"),
                                        kImageAndCommand}));

  TaskContext one = Task();
  one.gpu_uuids = {"GPU-aaa"};
  Argv argv = RunArgv(o, one);
  EXPECT_THAT(argv, Contains("\"device=GPU-aaa\""));
  EXPECT_THAT(argv, Contains("NVIDIA_VISIBLE_DEVICES=GPU-aaa"));
}

TEST(ContainerRunCommandTest, PodmanWithGpusFlagNamesEachGpu) {
  ContainerOptions o;
  o.engine = "podman";
  o.gpu_mode = "gpus";
  EXPECT_EQ(RunArgv(o, Task()), Concat({{"podman"},
                                        kHead,
                                        kUserAndPrivileges,
                                        kLimits,
                                        {"--gpus", "GPU-aaa", "--gpus", "GPU-bbb"},
                                        kWork,
                                        EnvArgs("void"),
                                        kImageAndCommand}));
  o.gpu_mode = "cdi";
  EXPECT_THAT(RunArgv(o, Task()), Contains("nvidia.com/gpu=GPU-bbb"));
}

TEST(ContainerRunCommandTest, NoNetworkNoLimitsNoUserNoGpus) {
  TaskContext t = Task();
  t.network = NetworkMode::kNone;
  t.limits = Limits{};
  t.uid = -1;
  t.gid = -1;
  t.gpu_uuids.clear();
  t.gpu_minors.clear();
  for (std::string mode : {"cdi", "gpus"}) {
    ContainerOptions o;
    o.gpu_mode = mode;
    EXPECT_EQ(RunArgv(o, t), Concat({{"docker"},
                                     kHead,
                                     {"--cap-drop", "ALL", "--security-opt", "no-new-privileges"},
                                     {"--network", "none"},
                                     kWork,
                                     EnvArgs("void"),
                                     kImageAndCommand}))
        << mode;
  }
}

TEST(ContainerRunCommandTest, AMultiNodeRankSharesTheHostNetwork) {
  TaskContext t = Task();
  t.host_network = true;
  std::vector<std::string> argv = RunArgv(ContainerOptions{}, t);
  auto net = std::find(argv.begin(), argv.end(), "--network");
  ASSERT_NE(net, argv.end());
  EXPECT_EQ(*(net + 1), "host");
  t.network = NetworkMode::kNone;  // no network wins (a spec validator refuses the pair anyway)
  argv = RunArgv(ContainerOptions{}, t);
  EXPECT_EQ(*(std::find(argv.begin(), argv.end(), "--network") + 1), "none");
}

TEST(ContainerRunCommandTest, PartialLimitsAndUidWithoutGid) {
  TaskContext t = Task();
  t.limits = Limits{0, 250, 0, 1 << 30};  // the disk limit is not the engine's
  t.gid = -1;
  Argv argv = RunArgv(ContainerOptions{}, t);
  EXPECT_THAT(argv, Not(Contains("--memory")));
  EXPECT_THAT(argv, Not(Contains("--pids-limit")));
  EXPECT_THAT(argv, Not(Contains("--storage-opt")));
  EXPECT_THAT(argv, Contains("0.250"));
  EXPECT_THAT(argv, Contains("190003"));

  t.limits.cpu_milli = 16000;
  EXPECT_THAT(RunArgv(ContainerOptions{}, t), Contains("16.000"));
}

TEST(ContainerRunCommandTest, TheImagesOwnCommandKeepsItsWorkdir) {
  TaskContext t = Task();
  t.argv.clear();
  t.argv_is_shell = false;
  Argv argv = RunArgv(ContainerOptions{}, t);
  EXPECT_THAT(argv, Not(Contains("-w")));
  EXPECT_THAT(argv, Contains("/var/lib/gpupool/tasks/12.1/work:/work"));
  EXPECT_EQ(argv.back(), "nvcr.io/nvidia/pytorch:24.01-py3");
}

TEST(ContainerRunCommandTest, ProviderArgsGoJustBeforeTheImage) {
  ContainerOptions o;
  o.extra_args = {"--runtime", "nvidia", "--shm-size", "8g"};
  TaskContext t = Task();
  t.argv = {"python", "-c", "print('a b')"};
  t.argv_is_shell = false;  // a command: the image's ENTRYPOINT stays
  Argv argv = RunArgv(o, t);
  Argv tail(argv.end() - 8, argv.end());
  EXPECT_EQ(tail, (Argv{"--runtime", "nvidia", "--shm-size", "8g",
                        "nvcr.io/nvidia/pytorch:24.01-py3", "python", "-c", "print('a b')"}));
}

TEST(ContainerRunCommandTest, TheJobCannotChooseItsGpusOrHostPaths) {
  TaskContext t = Task();
  t.env.push_back("NVIDIA_VISIBLE_DEVICES=all");
  t.env.push_back("SHELL=/bin/bash");
  t.env.push_back("GPUPOOL_WORK_DIR=/elsewhere");
  Argv argv = RunArgv(ContainerOptions{}, t);
  EXPECT_THAT(argv, Not(Contains("NVIDIA_VISIBLE_DEVICES=all")));
  EXPECT_THAT(argv, Not(Contains("SHELL=/bin/bash")));
  EXPECT_THAT(argv, Not(Contains("GPUPOOL_WORK_DIR=/elsewhere")));
  EXPECT_THAT(argv, Not(Contains("PATH=/usr/local/bin:/usr/bin:/bin")));
  EXPECT_THAT(argv, Contains("NVIDIA_VISIBLE_DEVICES=void"));
}

TEST(ContainerRunCommandTest, RejectsImagesTheEngineCannotPull) {
  for (std::string image : {"oci-archive:/srv/images/model.tar", "docker-archive:/srv/img.tar",
                            "oci:/srv/layout:latest"}) {
    TaskContext t = Task();
    t.image = image;
    auto argv = ContainerRunCommand(ContainerOptions{}, t);
    ASSERT_FALSE(argv.ok()) << image;
    EXPECT_EQ(argv.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(argv.status().message(),
                HasSubstr("image \"" + image + "\": only docker:// images can run with docker"));
    EXPECT_THAT(argv.status().message(), HasSubstr("sandbox executor"));
  }
  TaskContext t = Task();
  t.image = "";
  EXPECT_THAT(ContainerRunCommand(ContainerOptions{}, t).status().message(),
              HasSubstr("a job without an image cannot run with docker"));
  // Never an option in the image's place.
  t.image = "docker://--privileged";
  EXPECT_EQ(ContainerRunCommand(ContainerOptions{}, t).status().code(),
            StatusCode::kInvalidArgument);
  t.image = "docker://";
  EXPECT_EQ(ContainerRunCommand(ContainerOptions{}, t).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ContainerRunCommandTest, RejectsBadOptionsAndTasks) {
  ContainerOptions o;
  o.gpu_mode = "all";
  EXPECT_THAT(ContainerRunCommand(o, Task()).status().message(),
              HasSubstr("gpu_mode \"all\": must be \"cdi\" or \"gpus\""));

  for (std::string env : {"NOVALUE", "=x"}) {
    TaskContext t = Task();
    t.env.push_back(env);
    auto argv = ContainerRunCommand(ContainerOptions{}, t);
    EXPECT_EQ(argv.status().code(), StatusCode::kInvalidArgument) << env;
    EXPECT_THAT(argv.status().message(), HasSubstr("must be KEY=VALUE")) << env;
  }
  for (std::string dir : {"", "work", "/data/a:b/work"}) {
    TaskContext t = Task();
    t.work_dir = dir;
    EXPECT_EQ(ContainerRunCommand(ContainerOptions{}, t).status().code(),
              StatusCode::kInvalidArgument)
        << dir;
  }
}

TEST(ContainerCommandTest, Names) {
  EXPECT_EQ(ContainerName("12.1"), "gpupool-12-1");
  EXPECT_EQ(ContainerName("7.10"), "gpupool-7-10");
  EXPECT_EQ(ContainerName("a_b-C"), "gpupool-a_b-C");
  EXPECT_EQ(ContainerName("x/y z"), "gpupool-x-y-z");
}

TEST(ContainerCommandTest, KillRemoveInspect) {
  ContainerOptions docker;
  ContainerOptions podman;
  podman.engine = "/usr/bin/podman";
  EXPECT_EQ(ContainerKillCommand(docker, "12.1", SIGTERM),
            (Argv{"docker", "kill", "--signal", "SIGTERM", "gpupool-12-1"}));
  EXPECT_EQ(ContainerKillCommand(podman, "12.1", SIGKILL),
            (Argv{"/usr/bin/podman", "kill", "--signal", "SIGKILL", "gpupool-12-1"}));
  EXPECT_EQ(ContainerKillCommand(docker, "3.2", SIGINT)[3], "SIGINT");
  EXPECT_EQ(ContainerKillCommand(docker, "3.2", SIGRTMIN + 1)[3], std::to_string(SIGRTMIN + 1));
  EXPECT_EQ(ContainerRemoveCommand(docker, "12.1"), (Argv{"docker", "rm", "-f", "gpupool-12-1"}));
  EXPECT_EQ(ContainerInspectCommand(podman, "12.1"),
            (Argv{"/usr/bin/podman", "inspect", "--format",
                  "{{.State.OOMKilled}} {{.State.ExitCode}}", "gpupool-12-1"}));
}

}  // namespace
}  // namespace gpupool::exec
