// `sandbox`, the default executor: the job runs under bubblewrap.
//
// Inside it sees:
//   /            an empty read-only tmpfs holding only what follows
//   the system   the provider's host_paths read-only (/usr, /etc, ...), or,
//                for a job with an image, the image's root read-only
//   /work        its work directory, the only writable place it keeps
//   /tmp, /dev/shm  private tmpfs
//   /dev         a minimal /dev plus the device nodes of its own GPUs
//                (nvidia<minor>) and the NVIDIA control devices
//   /proc        its own pid namespace: only its processes
//   /sys         read-only
//   /gpupool/driver  for an image job with GPUs: the host's NVIDIA
//                user-space libraries and tools (LD_LIBRARY_PATH, PATH);
//                with a gpu_driver_dir, for every job with GPUs: that
//                directory's (exec/driver_files.h DriverFilesInDir)
//   /gpupool/share  for a share of a GPU: libgpushare.so and the task's
//                limits read-only, its usage ledger read-write, and the
//                library in a read-only /etc/ld.so.preload of the sandbox's
//                own, /etc then being bound entry by entry without the
//                system's ld.so.preload (exec/gpu_share.h)
// and new user, pid, ipc, uts, cgroup and network namespaces; it cannot
// make user namespaces of its own (bubblewrap's --disable-userns), and
// no_new_privs holds (setuid binaries do not raise it). Its network: by
// default its own, connected outward by pasta (exec/private_network.h),
// with no route to this machine's services or other jobs; with `network:
// false` only a loopback; with `network: host` (where the provider's policy
// allows it) the machine's. It runs as the task's unprivileged account,
// dies with its shim, and can see nothing of the provider's home
// directories, the agent's data dir or other jobs. A root agent stages what bubblewrap binds from
// outside the host's system paths (the work directory, the image root, the
// GPU device nodes, the driver files) under a private /run first
// (LaunchPlan::stage_binds), so the task's account needs no access to the
// paths that lead to them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/image_cache.h"
#include "exec/local_executor.h"

namespace gpupool::exec {

// Where the job's work directory is inside the sandbox.
inline constexpr const char* kSandboxWorkDir = "/work";
// Where a root agent's sandbox child stages what bubblewrap binds.
inline constexpr const char* kSandboxStageDir = "/run";

class BwrapArgs;  // the command line being built (sandbox.cpp)

class SandboxExecutor final : public LocalExecutor {
 public:
  // `images` may be null: image jobs then fail with a clear reason.
  SandboxExecutor(const ExecConfig& config, const CgroupTree* cgroups,
                  std::unique_ptr<ImageCache> images);
  ~SandboxExecutor() override;

  std::string_view name() const override { return "sandbox"; }
  Status Prepare(const TaskContext& task, const ProgressFn& progress) override;
  Result<LaunchPlan> Start(const TaskContext& task) override;
  // For a private network: connects bubblewrap's network namespace while
  // bubblewrap holds the job back (--block-fd), then lets it run.
  Status Started(pid_t pid) override;
  void Cleanup() override;
  std::string ExitReason(int wait_status, std::string_view last_stderr_line) override;

 protected:
  std::vector<pid_t> Spared() const override;
  int EndSignal(int wait_status) const override;
  std::string ShareDirInJob(const TaskContext& task) const override;

 private:
  // The steps of Start. AddSystem binds the host's system or the image's
  // root and returns the environment the job starts from.
  Result<std::vector<std::string>> AddSystem(BwrapArgs& args, const TaskContext& task) const;
  Status AddGpuDevices(BwrapArgs& args, const TaskContext& task) const;
  Status AddDriverFiles(BwrapArgs& args, const TaskContext& task,
                        std::vector<std::string>& env) const;
  Status AddGpuShare(BwrapArgs& args, const TaskContext& task) const;
  Result<std::vector<std::string>> Command(const TaskContext& task) const;
  Status AddNetwork(BwrapArgs& args, const TaskContext& task);
  Status ConnectNetwork();
  void CloseNetworkFds();

  std::unique_ptr<ImageCache> images_;
  std::optional<ImageLease> image_;
  // A private network: bubblewrap tells its child's pid on info_fd_ and
  // waits on block_fd_ (ours are the other ends; the child's ends are
  // closed in Started).
  std::optional<PrivateNetworkPlan> net_plan_;
  int info_fd_ = -1, block_fd_ = -1;
  int child_info_fd_ = -1, child_block_fd_ = -1;
  std::optional<PrivateNetwork> net_;
};

// Whether bubblewrap runs here as `uid`/`gid` (-1: as this process): a
// quick sandbox around /bin/true. The error says why not, with bwrap's own
// words ("bwrap: No permissions to create new namespace ...").
Status ProbeSandbox(const SandboxOptions& options, int uid, int gid);

}  // namespace gpupool::exec
