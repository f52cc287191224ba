#include "exec/local_executor.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "exec/gpu_share.h"
#include "exec/launch.h"
#include "exec/limits.h"
#include "exec/mps_client.h"
#include "exec/process_tree.h"

namespace gpupool::exec {

std::string TaskCgroupName(const std::string& attempt_id) {
  std::string name = attempt_id;
  for (char& c : name) {
    if (c == '.') c = '-';
  }
  return name;
}

std::vector<std::string> HostBaseEnv() {
  std::vector<std::string> env;
  for (const char* keep : {"PATH", "LANG", "LC_ALL", "TZ"}) {
    if (const char* v = ::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
  }
  if (!::getenv("PATH")) env.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  return env;
}

std::vector<std::string> MergeEnv(std::vector<std::string> base,
                                  const std::vector<std::string>& overlay) {
  for (const std::string& kv : overlay) {
    std::string key = kv.substr(0, kv.find('='));
    std::erase_if(base, [&](const std::string& b) { return EnvEntryIs(b, key); });
    base.push_back(kv);
  }
  return base;
}

std::vector<std::string> PrependLibraryPath(std::vector<std::string> env, const std::string& dir) {
  std::string old = EnvValue(env, "LD_LIBRARY_PATH").value_or("");
  return MergeEnv(std::move(env), {"LD_LIBRARY_PATH=" + dir + (old.empty() ? "" : ":" + old)});
}

LocalExecutor::LocalExecutor(const ExecConfig& config, const CgroupTree* cgroups)
    : config_(config), cgroups_(cgroups) {}

Status LocalExecutor::Prepare(const TaskContext& task, const ProgressFn& progress) {
  (void)progress;
  limits_ = task.limits;
  if (task.gpu_share) {
    // Fail closed: a share must not run without its cap.
    GP_RETURN_IF_ERROR(CheckGpushareLibrary(config_.gpushare_library));
    if (task.task_dir.empty()) return Status::Internal("a GPU share needs the task's directory");
    GP_RETURN_IF_ERROR(WriteGpuShareFiles(task.task_dir, *task.gpu_share, ShareDirInJob(task),
                                          task.uid, task.gid));
  }
  if (task.uid >= 0) {
    // The job's account owns its work directory and nothing else.
    if (::chown(task.work_dir.c_str(), static_cast<uid_t>(task.uid),
                static_cast<gid_t>(task.gid)) != 0 ||
        ::chmod(task.work_dir.c_str(), 0700) != 0) {
      return Status::Internal("cannot give " + task.work_dir + " to uid " +
                              std::to_string(task.uid) + ": " + std::strerror(errno));
    }
  }
  if (cgroups_ != nullptr) {
    GP_ASSIGN_OR_RETURN(auto cg, cgroups_->CreateTask(TaskCgroupName(task.attempt_id), limits_));
    cgroup_ = std::move(cg);
  }
  return Status::Ok();
}

std::string LocalExecutor::ShareDirInJob(const TaskContext& task) const {
  return GpuShareFilesIn(task.task_dir).dir;
}

LaunchPlan LocalExecutor::BasePlan(const TaskContext& task) const {
  LaunchPlan plan;
  if (cgroup_) plan.cgroup_procs = cgroup_->procs_file();
  plan.rlimits = RlimitsFor(limits_, cgroup_.has_value());
  plan.uid = task.uid;
  plan.gid = task.gid;
  return plan;
}

Usage LocalExecutor::GetUsage() {
  Usage u;
  if (cgroup_) {
    u.memory_bytes = cgroup_->MemoryCurrent();
    u.cpu_ms = cgroup_->CpuUsageMs();
    u.processes = static_cast<int64_t>(cgroup_->Pids().size());
    return u;
  }
  TreeUsage t = MeasureTree(::getpid());
  u.memory_bytes = t.rss_bytes;
  u.cpu_ms = t.cpu_ms;
  u.processes = t.processes;
  return u;
}

void LocalExecutor::Stop(int sig) {
  if (sig == SIGKILL) {
    if (cgroup_) cgroup_->Kill();
    SignalTree(::getpid(), SIGKILL);
    return;
  }
  SignalTree(::getpid(), sig, Spared());
}

int LocalExecutor::EndSignal(int wait_status) const {
  return WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0;
}

std::string LocalExecutor::ExitReason(int wait_status, std::string_view last_stderr_line) {
  (void)last_stderr_line;
  if (cgroup_ && cgroup_->OomKills() > 0 && limits_.memory_bytes > 0) {
    return MemoryLimitReason(limits_.memory_bytes);
  }
  int sig = EndSignal(wait_status);
  if (sig == SIGXFSZ && limits_.disk_bytes > 0) return DiskLimitReason(limits_.disk_bytes);
  // A wrapper's exit code 128 + N: describe it as the death by N it was
  // (a wait status whose low bits are N).
  if (sig != 0 && !WIFSIGNALED(wait_status)) return DescribeWaitStatus(sig);
  return DescribeWaitStatus(wait_status);
}

void LocalExecutor::Cleanup() {
  if (cgroup_) {
    cgroup_->Kill();
    (void)cgroup_->Remove();
    cgroup_.reset();
  }
}

void LocalExecutor::Recover(const TaskContext& task) {
  // The shim is gone; its job died with it (PR_SET_PDEATHSIG / bubblewrap's
  // --die-with-parent), but a cgroup outlives its processes.
  if (cgroups_ == nullptr) return;
  auto cg = cgroups_->FindTask(TaskCgroupName(task.attempt_id));
  if (!cg.ok()) return;
  cg->Kill();
  (void)cg->Remove();
}

Result<LaunchPlan> ProcessExecutor::Start(const TaskContext& task) {
  if (!task.image.empty()) {
    return Status::FailedPrecondition(
        "the process executor cannot run images; use the sandbox executor");
  }
  if (task.argv.empty()) return Status::InvalidArgument("nothing to run: give run or command");
  LaunchPlan plan = BasePlan(task);
  plan.argv = task.argv;
  plan.env = MergeEnv(
      MergeEnv(HostBaseEnv(), {"HOME=" + task.work_dir, "TMPDIR=" + task.work_dir,
                               "GPUPOOL_WORK_DIR=" + task.work_dir,
                               "GPUPOOL_CHECKPOINT_DIR=" + CheckpointDirIn(task.work_dir)}),
      task.env);
  if (!config_.gpu_driver_dir.empty() && !task.gpu_uuids.empty()) {
    plan.env = PrependLibraryPath(std::move(plan.env), config_.gpu_driver_dir);
  }
  if (task.gpu_share) {
    // No isolation here: the job may unset both, so the cap is advisory.
    std::string preload = EnvValue(plan.env, "LD_PRELOAD").value_or("");
    plan.env =
        MergeEnv(std::move(plan.env),
                 {"LD_PRELOAD=" + config_.gpushare_library + (preload.empty() ? "" : ":" + preload),
                  "GPUSHARE_LIMITS=" + GpuShareFilesIn(task.task_dir).limits});
    if (!task.gpu_share->mps_pipe_dir.empty()) {
      plan.env = MergeEnv(std::move(plan.env),
                          MpsClientEnv(*task.gpu_share, task.gpu_share->mps_pipe_dir));
    }
  }
  plan.cwd = task.work_dir;
  return plan;
}

}  // namespace gpupool::exec
