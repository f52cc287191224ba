// `docker` and `podman`: the job runs as a container of an engine the
// provider already runs with the NVIDIA container toolkit. The shim runs
// the engine's CLI (`docker run`, attached, so its output is the job's);
// the engine enforces the limits; stop, inspect and removal go through the
// CLI too (exec/container_command.h builds every command line). Only
// docker:// images: the engine pulls them itself.
#pragma once

#include <string>

#include "exec/container_command.h"
#include "exec/executor.h"

namespace gpupool::exec {

class ContainerExecutor final : public Executor {
 public:
  // `name` is "docker" or "podman".
  ContainerExecutor(std::string name, const ContainerOptions& options);

  std::string_view name() const override { return name_; }
  Status Prepare(const TaskContext& task, const ProgressFn& progress) override;
  Result<LaunchPlan> Start(const TaskContext& task) override;
  Usage GetUsage() override { return {}; }
  void Stop(int sig) override;
  bool EnforcesMemory() const override { return true; }
  std::string ExitReason(int wait_status, std::string_view last_stderr_line) override;
  void Cleanup() override;
  void Recover(const TaskContext& task) override;

 private:
  std::string name_;
  ContainerOptions options_;
  std::string attempt_id_;
  Limits limits_;
};

}  // namespace gpupool::exec
