#include "exec/container_executor.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "exec/limits.h"
#include "exec/subprocess.h"
#include "model/image_ref.h"

extern char** environ;

namespace gpupool::exec {

ContainerExecutor::ContainerExecutor(std::string name, const ContainerOptions& options)
    : name_(std::move(name)), options_(options) {}

Status ContainerExecutor::Prepare(const TaskContext& task, const ProgressFn& progress) {
  attempt_id_ = task.attempt_id;
  limits_ = task.limits;
  if (task.image.empty()) {
    return Status::InvalidArgument("the " + name_ +
                                   " executor needs an image (image: docker://...)");
  }
  GP_ASSIGN_OR_RETURN(auto ref, ParseImageRef(task.image));
  if (ref.kind != ImageRef::Kind::kDocker) {
    return Status::InvalidArgument("image " + task.image + ": the " + name_ +
                                   " executor runs docker:// images only");
  }
  if (task.uid >= 0 && (::chown(task.work_dir.c_str(), static_cast<uid_t>(task.uid),
                                static_cast<gid_t>(task.gid)) != 0 ||
                        ::chmod(task.work_dir.c_str(), 0700) != 0)) {
    return Status::Internal("cannot give " + task.work_dir + " to uid " + std::to_string(task.uid) +
                            ": " + std::strerror(errno));
  }
  progress("starting container " + ContainerName(task.attempt_id) + " (" + name_ +
           " pulls the image if it is missing)");
  return Status::Ok();
}

Result<LaunchPlan> ContainerExecutor::Start(const TaskContext& task) {
  LaunchPlan plan;
  GP_ASSIGN_OR_RETURN(plan.argv, ContainerRunCommand(options_, task));
  // The engine's CLI needs the agent's own environment (DOCKER_HOST,
  // XDG_RUNTIME_DIR for rootless podman); the job's goes in as -e flags.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) plan.env.push_back(*e);
  plan.cwd = task.work_dir;
  return plan;
}

void ContainerExecutor::Stop(int sig) {
  (void)RunCommand(ContainerKillCommand(options_, attempt_id_, sig), {}, 30'000);
}

std::string ContainerExecutor::ExitReason(int wait_status, std::string_view last_stderr_line) {
  (void)last_stderr_line;
  std::string state;
  auto r = RunCommand(
      ContainerInspectCommand(options_, attempt_id_), [&](std::string_view line) { state = line; },
      30'000);
  // "true 137": the engine's OOM killer ended it.
  if (r.ok() && state.starts_with("true") && limits_.memory_bytes > 0) {
    return MemoryLimitReason(limits_.memory_bytes);
  }
  return DescribeWaitStatus(wait_status);
}

void ContainerExecutor::Cleanup() {
  (void)RunCommand(ContainerRemoveCommand(options_, attempt_id_), {}, 60'000);
}

void ContainerExecutor::Recover(const TaskContext& task) {
  (void)RunCommand(ContainerRemoveCommand(options_, task.attempt_id), {}, 60'000);
}

}  // namespace gpupool::exec
