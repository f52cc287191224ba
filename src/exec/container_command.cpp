#include "exec/container_command.h"

#include <cstdio>
#include <cstring>
#include <string_view>

#include "model/image_ref.h"

namespace gpupool::exec {
namespace {

// Variables that name host paths or would replace the image's own: dropped
// from the task's env.
constexpr std::string_view kDroppedEnv[] = {"PATH", "SHELL"};
// Variables the executor sets itself, whatever the task's env says.
constexpr std::string_view kOwnedEnv[] = {"HOME", "TMPDIR", "GPUPOOL_WORK_DIR",
                                          "GPUPOOL_CHECKPOINT_DIR", "NVIDIA_VISIBLE_DEVICES"};

bool Contains(const auto& list, std::string_view s) {
  for (std::string_view item : list) {
    if (item == s) return true;
  }
  return false;
}

// podman, /usr/bin/podman, podman-remote: podman's own --gpus syntax.
bool IsPodman(const std::string& engine) {
  size_t slash = engine.rfind('/');
  std::string_view base =
      std::string_view(engine).substr(slash == std::string::npos ? 0 : slash + 1);
  return base.starts_with("podman");
}

// 1500 -> "1.500".
std::string FormatCpus(int64_t milli) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%lld.%03lld", static_cast<long long>(milli / 1000),
                static_cast<long long>(milli % 1000));
  return buffer;
}

// The image as the engine names it: "docker://busybox:1.36" -> "busybox:1.36".
Result<std::string> EngineImage(const std::string& image, const std::string& engine) {
  if (image.empty()) {
    return Status::InvalidArgument("a job without an image cannot run with " + engine +
                                   ": give it a docker:// image or use the sandbox executor");
  }
  GP_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(image));
  if (ref.kind != ImageRef::Kind::kDocker) {
    return Status::InvalidArgument(
        "image \"" + image + "\": only docker:// images can run with " + engine +
        "; load the archive or OCI layout into " + engine +
        " and name it by its docker:// reference, or use the sandbox executor");
  }
  // Never an option in the image's place (ParseImageRef rejects it too).
  if (ref.location.empty() || ref.location.front() == '-') {
    return Status::InvalidArgument("image \"" + image + "\": not an image reference");
  }
  return ref.location;
}

std::string JoinUuids(const std::vector<std::string>& uuids) {
  std::string joined;
  for (const std::string& uuid : uuids) joined += (joined.empty() ? "" : ",") + uuid;
  return joined;
}

}  // namespace

std::string ContainerName(const std::string& attempt_id) {
  std::string name = "gpupool-";
  for (char c : attempt_id) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-';
    name += keep ? c : '-';
  }
  return name;
}

Result<std::vector<std::string>> ContainerRunCommand(const ContainerOptions& o,
                                                     const TaskContext& task) {
  GP_ASSIGN_OR_RETURN(std::string image, EngineImage(task.image, o.engine));
  if (o.gpu_mode != "cdi" && o.gpu_mode != "gpus") {
    return Status::InvalidArgument("gpu_mode \"" + o.gpu_mode + "\": must be \"cdi\" or \"gpus\"");
  }
  if (task.work_dir.empty() || task.work_dir.front() != '/' ||
      task.work_dir.find_first_of(":,") != std::string::npos) {
    return Status::InvalidArgument("work directory \"" + task.work_dir +
                                   "\": must be an absolute path without ':' or ','");
  }

  std::vector<std::string> argv = {o.engine,  "run",
                                   "--name",  ContainerName(task.attempt_id),
                                   "--label", "gpupool.attempt=" + task.attempt_id,
                                   "--init",  "--pull",
                                   "missing"};
  if (task.uid >= 0) {
    std::string user = std::to_string(task.uid);
    if (task.gid >= 0) user += ":" + std::to_string(task.gid);
    argv.insert(argv.end(), {"--user", user});
  }
  argv.insert(argv.end(), {"--cap-drop", "ALL", "--security-opt", "no-new-privileges"});
  if (task.network == NetworkMode::kNone) {
    argv.insert(argv.end(), {"--network", "none"});
  } else if (task.host_network || task.network == NetworkMode::kHost) {
    argv.insert(argv.end(), {"--network", "host"});
  }

  const Limits& limits = task.limits;
  if (limits.memory_bytes > 0) {
    std::string bytes = std::to_string(limits.memory_bytes) + "b";
    argv.insert(argv.end(), {"--memory", bytes, "--memory-swap", bytes});
  }
  if (limits.cpu_milli > 0) argv.insert(argv.end(), {"--cpus", FormatCpus(limits.cpu_milli)});
  if (limits.pids > 0) argv.insert(argv.end(), {"--pids-limit", std::to_string(limits.pids)});

  std::string visible_devices = "void";
  if (!task.gpu_uuids.empty()) {
    if (o.gpu_mode == "cdi") {
      for (const std::string& uuid : task.gpu_uuids) {
        argv.insert(argv.end(), {"--device", "nvidia.com/gpu=" + uuid});
      }
    } else if (IsPodman(o.engine)) {
      for (const std::string& uuid : task.gpu_uuids) argv.insert(argv.end(), {"--gpus", uuid});
    } else {
      argv.insert(argv.end(), {"--gpus", "\"device=" + JoinUuids(task.gpu_uuids) + "\""});
      visible_devices = JoinUuids(task.gpu_uuids);
    }
  }

  argv.insert(argv.end(), {"-v", task.work_dir + ":" + kContainerWorkDir});
  if (!task.argv.empty()) argv.insert(argv.end(), {"-w", kContainerWorkDir});

  for (const std::string& entry : task.env) {
    size_t eq = entry.find('=');
    if (eq == 0 || eq == std::string::npos || entry.find('\0') != std::string::npos) {
      // `-e KEY` alone would copy the engine client's own variable.
      return Status::InvalidArgument("environment entry \"" + entry + "\": must be KEY=VALUE");
    }
    std::string_view key = std::string_view(entry).substr(0, eq);
    if (Contains(kDroppedEnv, key) || Contains(kOwnedEnv, key)) continue;
    argv.insert(argv.end(), {"-e", entry});
  }
  for (const char* key : {"HOME", "TMPDIR", "GPUPOOL_WORK_DIR"}) {
    argv.insert(argv.end(), {"-e", std::string(key) + "=" + kContainerWorkDir});
  }
  argv.insert(argv.end(), {"-e", "GPUPOOL_CHECKPOINT_DIR=" + CheckpointDirIn(kContainerWorkDir)});
  argv.insert(argv.end(), {"-e", "NVIDIA_VISIBLE_DEVICES=" + visible_devices});

  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  // A shell `run` replaces the image's ENTRYPOINT too, as in the sandbox.
  bool shell = task.argv_is_shell && task.argv.size() == 3;
  if (shell) argv.insert(argv.end(), {"--entrypoint", task.argv[0]});
  argv.push_back(std::move(image));
  argv.insert(argv.end(), task.argv.begin() + (shell ? 1 : 0), task.argv.end());
  return argv;
}

std::vector<std::string> ContainerKillCommand(const ContainerOptions& o,
                                              const std::string& attempt_id, int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  std::string name = abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
  return {o.engine, "kill", "--signal", name, ContainerName(attempt_id)};
}

std::vector<std::string> ContainerRemoveCommand(const ContainerOptions& o,
                                                const std::string& attempt_id) {
  return {o.engine, "rm", "-f", ContainerName(attempt_id)};
}

std::vector<std::string> ContainerInspectCommand(const ContainerOptions& o,
                                                 const std::string& attempt_id) {
  return {o.engine, "inspect", "--format", "{{.State.OOMKilled}} {{.State.ExitCode}}",
          ContainerName(attempt_id)};
}

}  // namespace gpupool::exec
