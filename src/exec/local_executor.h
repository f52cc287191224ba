// Executors that run the job as a local process tree under the task's shim:
// `process` (no isolation) and, built on the same base, `sandbox`
// (exec/sandbox.h).
//
// What they share: limits from a per-task cgroup v2 when the agent has a
// delegated subtree (exec/cgroup.h), else rlimits plus the shim's own
// memory watch (exec/limits.h); a GPU share's files (exec/gpu_share.h),
// written in Prepare, which fails when the interposer is missing; usage and
// signals over the shim's process tree (the shim is a child subreaper, so
// every process the job makes stays under it); readable end reasons for
// limit kills. Used from the shim's one thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "exec/cgroup.h"
#include "exec/exec_config.h"
#include "exec/executor.h"

namespace gpupool::exec {

class LocalExecutor : public Executor {
 public:
  // `cgroups` may be null (no usable cgroup v2: rlimits apply).
  LocalExecutor(const ExecConfig& config, const CgroupTree* cgroups);

  Status Prepare(const TaskContext& task, const ProgressFn& progress) override;
  Status Started(pid_t pid) override {
    child_ = pid;
    return Status::Ok();
  }
  Usage GetUsage() override;
  void Stop(int sig) override;
  bool EnforcesMemory() const override { return cgroup_.has_value(); }
  std::string ExitReason(int wait_status, std::string_view last_stderr_line) override;
  void Cleanup() override;
  void Recover(const TaskContext& task) override;

 protected:
  // The plan's limits and account: cgroup, rlimits, uid and gid.
  LaunchPlan BasePlan(const TaskContext& task) const;
  // Where the job sees the GPU share's ledger, want and grant files (the
  // limits file names them): their directory in the task directory, or
  // where the sandbox binds them.
  virtual std::string ShareDirInJob(const TaskContext& task) const;
  // Processes of the job's tree that must not get a polite signal (the
  // sandbox's own bubblewrap processes, which would die of it at once).
  virtual std::vector<pid_t> Spared() const { return {}; }
  // The signal that ended the job: from the wait status, or, where a
  // wrapper turns it into an exit code 128 + N (bubblewrap), from that.
  virtual int EndSignal(int wait_status) const;

  const ExecConfig& config_;
  const CgroupTree* cgroups_;
  std::optional<TaskCgroup> cgroup_;
  Limits limits_;
  pid_t child_ = 0;
};

// `process`: the job runs directly, as the task's account, in its work
// directory. No namespaces: it sees the whole machine. Images are refused.
// With a gpu_driver_dir, a job holding GPUs has that directory first on its
// LD_LIBRARY_PATH. A GPU share gets libgpushare.so first on LD_PRELOAD and
// GPUSHARE_LIMITS naming its limits file (exec/gpu_share.h): advisory, since
// nothing stops the job from clearing either.
class ProcessExecutor final : public LocalExecutor {
 public:
  using LocalExecutor::LocalExecutor;
  std::string_view name() const override { return "process"; }
  Result<LaunchPlan> Start(const TaskContext& task) override;
};

// The name of a task's cgroup under the agent's tree ("42-1" for attempt
// 42.1; the tree adds its "task-" prefix).
std::string TaskCgroupName(const std::string& attempt_id);

// What a job on the host system inherits from the agent: PATH (a default
// when unset), LANG, LC_ALL, TZ.
std::vector<std::string> HostBaseEnv();

// `base` with `overlay` on top: a later KEY=... replaces an earlier one.
std::vector<std::string> MergeEnv(std::vector<std::string> base,
                                  const std::vector<std::string>& overlay);

// `env` with `dir` first on its LD_LIBRARY_PATH, the entries it had after:
// how a job's dlopen("libcuda.so.1") finds the driver gpupool chose first.
std::vector<std::string> PrependLibraryPath(std::vector<std::string> env, const std::string& dir);

}  // namespace gpupool::exec
