// The provider's choices about running jobs: which executors are allowed,
// how the sandbox is built, the image cache, the container engine, the
// per-task accounts and the default limits. Part of the agent's config file
// (agent/agent_config.h, docs/provider-guide.md); plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/container_command.h"
#include "exec/executor.h"
#include "exec/image_cache.h"
#include "exec/private_network.h"

namespace gpupool::exec {

struct SandboxOptions {
  std::string bwrap = "bwrap";
  // What of the host a job without an image sees, read-only. Symlinks
  // (Debian's /bin -> usr/bin) are recreated as symlinks; missing paths are
  // skipped. Nothing else of the host is visible: no /home, /root, /srv,
  // /mnt, /var, no agent data dir.
  std::vector<std::string> host_paths = {"/usr",   "/bin",   "/sbin",   "/lib",
                                         "/lib32", "/lib64", "/libx32", "/etc"};
  std::string devices_dir = "/dev";         // where the GPU device nodes are
  std::string ldconfig = "/sbin/ldconfig";  // lists the driver libraries bound into images
  // The jobs' own network (exec/private_network.h): pasta, the
  // destinations no job reaches besides this machine's own addresses
  // (link-local, where cloud metadata services answer, and AWS's IPv6
  // metadata address), and the host ports the ranks of multi-node jobs are
  // reached on: each rank takes a block of `gang_ports_per_rank`.
  std::string pasta = "pasta";
  std::vector<IpPrefix> blocked_networks = DefaultBlockedNetworks();
  PortRange gang_ports{61000, 1000};
  int gang_ports_per_rank = 50;

  static std::vector<IpPrefix> DefaultBlockedNetworks() {
    return {*ParseIpPrefix("169.254.0.0/16"), *ParseIpPrefix("fd00:ec2::254/128")};
  }
};

// Shims get this config (and ExecEnvironment) as JSON: a new field must be
// added to agent/shim_launch.cpp's codec and its round-trip test too.
struct ExecConfig {
  // Allowed executors, the first being the default for jobs that name none.
  // "process" (no isolation) is allowed only when listed.
  std::vector<std::string> executors = {"sandbox"};
  SandboxOptions sandbox;
  // The NVIDIA user-space driver libraries to use instead of the system's
  // (the agent's `gpu_driver_dir` / --gpu-driver-dir; empty: the system's):
  // a directory holding libnvidia-ml.so.1, libcuda.so.1 and the like. The
  // agent loads NVML from it, and every job holding GPUs gets its driver
  // libraries from it (exec/driver_files.h DriverFilesInDir): the sandbox
  // binds them at /gpupool/driver/lib, with or without an image, and the
  // process executor puts it first on LD_LIBRARY_PATH. docker and podman
  // leave it alone: their engine's NVIDIA toolkit injects the host's driver.
  std::string gpu_driver_dir;
  // libgpushare.so, the CUDA driver interposer that holds a task's GPU
  // share to its memory cap (exec/gpu_share.h): the agent's
  // `gpushare_library` / --gpushare-library, else the one built beside the
  // agent's binary (BIN/../lib/libgpushare.so). A task that needs it fails
  // to start when it is missing.
  std::string gpushare_library;
  // The compute share's mode for every share started here (the agent's
  // `sharing_mode`): false, work-conserving (a share alone uses the whole
  // GPU); true, strict (never more than its share). See share/arbiter.h.
  bool gpu_share_strict = false;
  ImageCacheOptions images;  // images.dir defaults to DATA_DIR/images
  ContainerOptions docker;   // for "docker"; engine "docker"
  ContainerOptions podman;   // for "podman"; engine "podman"
  // cgroup v2 subtree for task limits: "auto" (the agent's own, when
  // delegated), "none" (rlimits), or a path.
  std::string cgroup = "auto";
  // A root agent runs each task as its own uid (and gid) from
  // [first_uid, first_uid + uid_count); an agent that is not root runs
  // tasks as itself.
  int first_uid = 190000;
  int uid_count = 1000;
  // Limits for jobs that name none (Limits: 0 = none). pids is always the
  // provider's: jobs cannot ask for it.
  Limits defaults{0, 0, 4096, 0};
  int64_t memory_poll_ms = 100;  // how often memory is measured without a cgroup
};

}  // namespace gpupool::exec
