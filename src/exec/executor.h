// Executors: how one job runs on a provider's machine.
//
// Every executor has the same steps, driven by the task's shim
// (agent/shim.h), one process per task:
//
//   Prepare   get what the job needs before it can start: an image, a
//             cgroup. May take minutes; reports progress as events.
//   Start     the command the shim runs in a fresh child (a LaunchPlan):
//             argv, environment, working directory, and what the child does
//             to itself before exec (join a cgroup, set rlimits, drop to an
//             unprivileged uid).
//   Started   told the child's pid once it runs; finishes what needs the
//             child (the sandbox's network) before the job itself runs.
//             An error: the job must not run (the shim kills it).
//   Usage     what the job's processes use now.
//   Stop      a signal to every process of the job.
//   ExitReason why the job ended when the executor or a limit ended it.
//   Cleanup   after the job ended: remove containers and cgroups, release
//             the image.
//   Recover   after an agent restart, for a task whose shim is gone: remove
//             whatever the job left behind.
//
// The executors: `sandbox` (bubblewrap, the default), `docker` and `podman`
// (a container engine the provider runs, with the NVIDIA toolkit), and
// `process` (no isolation; only where the provider opts in).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "exec/gpu_share.h"
#include "exec/private_network.h"
#include "model/job.h"

namespace gpupool::exec {

// The job's checkpoint directory (GPUPOOL_CHECKPOINT_DIR), inside its work
// directory so it counts toward the job's disk limit and is reachable the
// same way in every executor. See docs/checkpoints.md for the contract.
inline constexpr std::string_view kCheckpointDirName = ".checkpoints";
inline std::string CheckpointDirIn(std::string_view work_dir) {
  return std::string(work_dir) + "/" + std::string(kCheckpointDirName);
}

// What one job may use; 0 means no limit.
struct Limits {
  int64_t memory_bytes = 0;  // host memory of all its processes
  int64_t cpu_milli = 0;     // CPU share, thousandths of a core
  int64_t pids = 0;          // processes and threads
  int64_t disk_bytes = 0;    // what its work directory may hold
  friend bool operator==(const Limits&, const Limits&) = default;
};

// One task as an executor sees it. Built by the shim from the start order
// and the provider's config.
struct TaskContext {
  std::string attempt_id;
  int64_t job_id = 0;
  std::string task_dir;  // DATA_DIR/tasks/<attempt id>
  std::string work_dir;  // task_dir/work: the only place the job may write
  // What to run: ["/bin/sh", "-c", run] for a spec's `run`, its `command`
  // otherwise. Empty: the image's own entrypoint and command.
  std::vector<std::string> argv;
  bool argv_is_shell = false;  // argv came from `run`
  // KEY=VALUE the job gets on top of the image's: the spec's env and
  // gpupool's own (CUDA_VISIBLE_DEVICES, GPUPOOL_*). Paths that differ
  // inside a sandbox are set by the executor (HOME, TMPDIR, GPUPOOL_WORK_DIR,
  // GPUPOOL_CHECKPOINT_DIR).
  std::vector<std::string> env;
  std::string image;  // "" (the host system) or a reference: docker://..., oci-archive:...
  // The spec's network: private (the default), none, or the host's.
  NetworkMode network = NetworkMode::kPrivate;
  // A rank of a multi-node job: the ranks reach each other at the node's
  // own addresses (rank 0's port was chosen free on the host), so a
  // container shares the host's network instead of an engine bridge.
  bool host_network = false;
  // A rank of a multi-node job in the sandbox's private network: the ports
  // of this machine forwarded to it (exec/private_network.h); rank 0's
  // master port is the first.
  PortRange gang_ports;
  std::vector<std::string> gpu_uuids;
  // The assigned GPUs' device minor numbers (/dev/nvidia<minor>), as far as
  // known (simulated GPUs have none). The control devices are added by the
  // executor.
  std::vector<int> gpu_minors;
  // The MIG capability devices of the task's MIG instances, relative to
  // /dev ("nvidia-caps/nvidia-cap21"; exec/driver_files.h).
  std::vector<std::string> gpu_cap_devices;
  // A share of a GPU held to its memory cap by libgpushare.so
  // (exec/gpu_share.h), set by the agent (agent/task_gpus.h); absent: the
  // job gets no interposer.
  std::optional<GpuShare> gpu_share;
  Limits limits;
  // The unprivileged account the job runs as (a root agent gives each task
  // its own); -1: the agent's own.
  int uid = -1;
  int gid = -1;
  // True once the task was asked to stop: a long Prepare (an image pull)
  // gives up when it says so. May be empty.
  std::function<bool()> stop_requested;
};

// A resource limit the child sets on itself before exec (soft = hard).
struct Rlimit {
  int resource = 0;  // RLIMIT_*
  uint64_t value = 0;
  friend bool operator==(const Rlimit&, const Rlimit&) = default;
};

// What the shim's child does, in this order: join `cgroup_procs` (writes
// its pid there), set `rlimits`, stage `stage_binds`, become `uid`/`gid`
// (when >= 0), chdir to `cwd`, exec `argv` with exactly `env`.
struct LaunchPlan {
  std::vector<std::string> argv;  // argv[0] is a path or a name looked up on PATH
  std::vector<std::string> env;
  std::string cwd;
  std::string cgroup_procs;  // "" = none
  std::vector<Rlimit> rlimits;
  int uid = -1;
  int gid = -1;
  // Directories the task's account must reach although it may not
  // traverse the paths that lead to them (the agent's data dir): while
  // still root, the child enters a private mount namespace, mounts a small
  // tmpfs on `stage_dir` and binds each source there as stage_dir/NAME.
  struct StageBind {
    std::string source;
    std::string name;
    friend bool operator==(const StageBind&, const StageBind&) = default;
  };
  std::string stage_dir;
  std::vector<StageBind> stage_binds;
  // Descriptors the child keeps open across exec; the shim keeps them open
  // in the child under the same numbers.
  std::vector<int> keep_fds;
};

struct Usage {
  int64_t memory_bytes = -1;  // -1: not known
  int64_t cpu_ms = -1;
  int64_t processes = -1;
};

// Called with a line for the job's events: "pulling image 3/7 layers".
using ProgressFn = std::function<void(const std::string& event)>;

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;

  virtual Status Prepare(const TaskContext& task, const ProgressFn& progress) = 0;
  virtual Result<LaunchPlan> Start(const TaskContext& task) = 0;
  virtual Status Started(pid_t pid) {
    (void)pid;
    return Status::Ok();
  }
  virtual Usage GetUsage() = 0;
  virtual void Stop(int sig) = 0;
  // True when the kernel enforces the memory limit (a cgroup); otherwise
  // the shim compares GetUsage() with the limit itself.
  virtual bool EnforcesMemory() const = 0;
  // Why the job ended, for its result: "" for a plain exit, else a limit
  // ("exceeded its memory limit of 4 GiB"), a failure to start inside a
  // wrapper, or the signal that killed it. `wait_status` is the child's
  // status from waitpid; `last_stderr_line` the last line it wrote to stderr.
  virtual std::string ExitReason(int wait_status, std::string_view last_stderr_line) = 0;
  virtual void Cleanup() = 0;
  virtual void Recover(const TaskContext& task) = 0;
};

}  // namespace gpupool::exec
