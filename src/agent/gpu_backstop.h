// The fail-closed backstop of GPU memory caps: what NVML says the processes
// of each capped task hold on each of its GPUs, against the cap.
//
// libgpushare.so holds a task to its cap at the driver API, but a program
// can go around it (a static binary, a raw ioctl on /dev/nvidia*, a lookup
// of glibc's own dlsym by version). NVML sees the memory whatever the path:
// a task whose processes together hold more than cap + allowance on one GPU
// is stopped, as the host memory limit stops one over its limit. The
// allowance is per process that holds GPU memory: the driver's context of
// each process (a few hundred MiB on current GPUs) is not an allocation the
// interposer counts, and a well-behaved job must not be stopped for it.
//
// Pure: the agent reads NVML and the process trees and acts on the verdicts.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/resources.h"

namespace gpupool::agent {

// Each process's context is allowed this much beyond the cap.
inline constexpr int64_t kGpuContextAllowanceMib = 512;

struct CappedTask {
  std::string attempt_id;
  int64_t cap_bytes = 0;  // per GPU; > 0
  std::vector<std::string> gpu_uuids;
  std::set<int64_t> pids;  // its processes, as the host sees them
};

struct CapVerdict {
  std::string attempt_id;
  std::string reason;  // "used 6.0 GiB of GPU memory on GPU-..., over its cap of 4 GiB ..."
  friend bool operator==(const CapVerdict&, const CapVerdict&) = default;
};

// Each task's cap and what its processes hold on each of its GPUs (-1 when
// NVML says nothing of that GPU), for the heartbeat's report.
std::vector<ShareUse> ShareUses(const std::vector<CappedTask>& tasks,
                                const std::vector<GpuTelemetry>& telemetry);

// The tasks over their cap, each once (its first GPU over), in `tasks`'
// order. A GPU or a process NVML does not report, or reports without a
// figure (used_memory_mib < 0), counts nothing.
std::vector<CapVerdict> TasksOverGpuMemoryCap(const std::vector<CappedTask>& tasks,
                                              const std::vector<GpuTelemetry>& telemetry);

}  // namespace gpupool::agent
