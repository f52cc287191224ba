// The provider's agent config file (`gpupool agent --config FILE`): how this
// machine runs jobs. See docs/provider-guide.md for every field.
//
//   executors: [sandbox, docker]   # allowed, the first is the default;
//                                  # "process" (no isolation) only if listed
//   sandbox:
//     uids: 190000-190999          # a root agent runs each task as its own uid
//     host_paths: [/usr, /bin, /sbin, /lib, /lib32, /lib64, /libx32, /etc]
//     devices_dir: /dev
//     bwrap: bwrap
//     ldconfig: /sbin/ldconfig
//   gpu_driver_dir: /opt/nvidia/550  # the NVIDIA libraries (libnvidia-ml.so.1,
//                                  # libcuda.so.1) instead of the system's, for
//                                  # NVML and for jobs; --gpu-driver-dir wins
//   gpushare_library: /opt/gpupool/lib/libgpushare.so  # the interposer that
//                                  # caps GPU shares (exec/gpu_share.h);
//                                  # default BIN/../lib/libgpushare.so;
//                                  # --gpushare-library wins
//   mps_control: /usr/bin/nvidia-cuda-mps-control  # for policy.sharing: mps
//                                  # (agent/mps.h); default: on the PATH;
//                                  # --mps-control wins
//   mps_dir: /run/gpupool-mps      # the MPS daemons' directories (default
//                                  # DATA_DIR/mps; keep it short)
//   sharing_mode: work-conserving  # GPU shares' compute: work-conserving (a
//                                  # share alone gets the whole GPU) or
//                                  # strict (never more than its share)
//   images: {cache_dir: /var/cache/gpupool/images, cache_size: 50GiB,
//            skopeo: skopeo, umoci: umoci}
//   docker: {command: docker, gpus: cdi, extra_args: []}   # gpus: cdi | gpus
//   podman: {command: podman, gpus: cdi}
//   limits:
//     cgroup: auto                 # auto | none | /sys/fs/cgroup/...
//     pids: 4096                   # per task
//     memory: 16GiB                # for jobs that name none (absent: no limit)
//     cpus: 4                      # likewise
//     disk: 100GiB                 # work directory cap, likewise
//     memory_poll: 100ms           # without a cgroup: how often memory is measured
//   policy: {...}                  # what is lent, when, to whom (agent/policy.h)
//   owner: alice                   # may use the control socket besides root
//                                  # (a user name or uid)
//   advertise_addr: 100.64.0.7     # where other nodes reach this one (the
//                                  # master of a multi-node job); read at
//                                  # start, --advertise-addr wins
//
// Parsing is strict like job specs: unknown fields, wrong types and values
// out of range are InvalidArgument naming the field path. Every field is
// optional. Pure functions (LoadAgentConfig and ResolveAgentConfig read one
// file, CheckGpuDriverDir, CheckGpushareLibraryPath and ResolveAgentConfig
// look at one path; DefaultGpushareLibrary reads /proc/self/exe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "agent/policy.h"
#include "common/status.h"
#include "exec/exec_config.h"

namespace gpupool::agent {

struct AgentConfig {
  exec::ExecConfig exec;
  ProviderPolicy policy;
  std::string owner;           // user name or uid; empty: root and the agent's own account only
  std::string advertise_addr;  // empty: the address of the connection to the server
  // nvidia-cuda-mps-control for `policy.sharing: mps` (agent/mps.h): a path
  // or a name on the PATH; empty: nvidia-cuda-mps-control on the PATH.
  std::string mps_control;
  // Where the MPS daemons' pipe and log directories go (agent/mps.h);
  // empty: DATA_DIR/mps. Short: MPS's sockets live there.
  std::string mps_dir;
};

// An address other nodes reach this one at: a host name, an IPv4 address or
// an IPv6 address (no brackets, no port), as the job's MASTER_ADDR takes it.
// InvalidArgument, readable, otherwise.
Status CheckAdvertiseAddr(std::string_view addr);

// What of the config file `gpupool agent`'s flags override (0 or empty:
// nothing).
struct AgentConfigFlags {
  int64_t max_image_bytes = 0;   // --max-image-size: images.max_image_bytes
  std::string gpu_driver_dir;    // --gpu-driver-dir: gpu_driver_dir
  std::string gpushare_library;  // --gpushare-library: gpushare_library
  std::string mps_control = {};  // --mps-control: mps_control
};

// The agent's config: the file at `path` (empty: the defaults) with the
// flags on top, and the GPU driver directory and the gpushare library in
// force, where named, checked (CheckGpuDriverDir, CheckGpushareLibraryPath).
// Errors name the file, or the flag or field:
// "--gpu-driver-dir: cannot use /x: No such file or directory",
// "/etc/gpupool/agent.yaml: gpu_driver_dir: /x is not a directory".
// An unnamed gpushare library stays empty (the agent takes
// DefaultGpushareLibrary).
Result<AgentConfig> ResolveAgentConfig(const std::string& path, const std::string& data_dir,
                                       const AgentConfigFlags& flags);

// Whether `dir` can be the GPU driver directory (ExecConfig::gpu_driver_dir):
// an absolute path of an existing directory. InvalidArgument saying why
// otherwise, for the caller to prefix with the flag or field. Looks at the
// file system (stat).
Status CheckGpuDriverDir(const std::string& dir);

// Whether `path` can be the gpushare library (ExecConfig::gpushare_library):
// an absolute path of an existing regular file. InvalidArgument saying why
// otherwise, for the caller to prefix with the flag or field.
Status CheckGpushareLibraryPath(const std::string& path);

// Where the build and an install put libgpushare.so for the gpupool binary
// at `exe`: beside its bin directory, EXE_DIR/../lib/libgpushare.so
// ("/opt/gpupool/bin/gpupool" -> "/opt/gpupool/lib/libgpushare.so").
std::string GpushareLibraryNextTo(const std::string& exe);
// GpushareLibraryNextTo this process's binary; "" when /proc/self/exe
// cannot be read.
std::string DefaultGpushareLibrary();
// Fills `config.gpushare_library` with DefaultGpushareLibrary() when empty
// and says, for the agent's start-up log, whether GPU shares can be capped
// here: the line to log, or FailedPrecondition saying why not and what it
// means (exec::CheckGpushareLibrary).
Result<std::string> ResolveGpuSharing(exec::ExecConfig& config);

// Where the agent loads NVML from: `nvml_library` (--nvml-library) when
// given, else DIR/libnvidia-ml.so.1 for a GPU driver directory, else ""
// (OpenNvml then takes $GPUPOOL_NVML_LIBRARY, else the system's
// libnvidia-ml.so.1).
std::string NvmlLibraryPath(const std::string& nvml_library, const std::string& gpu_driver_dir);

// `data_dir` fills the defaults that live under it (images.cache_dir).
Result<AgentConfig> ParseAgentConfig(std::string_view text, const std::string& data_dir);
// A policy file for `gpupool agent policy set`: the policy's fields at the
// top, or an agent config whose `policy:` is taken. Errors name the field
// ("policy.windows.weekly[0].from (line 4): ...").
Result<ProviderPolicy> ParsePolicyText(std::string_view text);
// Errors are prefixed with the path.
Result<AgentConfig> LoadAgentConfig(const std::string& path, const std::string& data_dir);
// The config of an agent started without --config.
AgentConfig DefaultAgentConfig(const std::string& data_dir);

}  // namespace gpupool::agent
