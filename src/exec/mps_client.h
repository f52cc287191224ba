// What a task that holds a share of an MPS GPU gets (agent/mps.h runs the
// GPU's nvidia-cuda-mps-control): the variables that make it an MPS client
// of that daemon and set its limits.
//
//   CUDA_MPS_PIPE_DIRECTORY=DIR              the daemon's pipe directory as
//                                            the job sees it (the sandbox
//                                            binds it at kMpsPipeDirInJob)
//   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30     the share (0.3 -> 30), at least 1
//   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M the share's memory cap in MiB, on
//                                            device 0: the job sees only its
//                                            GPU (CUDA_VISIBLE_DEVICES)
//
// MPS takes both limits per client from its environment (a client may only
// lower what the control daemon's defaults allow); libgpushare.so still
// caps the memory too (exec/gpu_share.h), for every process of the task
// together, while MPS's limit is per client process.
//
// Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "exec/gpu_share.h"

namespace gpupool::exec {

// Where the sandbox binds the GPU's MPS pipe directory.
inline constexpr const char* kMpsPipeDirInJob = "/gpupool/mps";

// The variables above for `share`, naming `pipe_dir` (as the job sees it).
std::vector<std::string> MpsClientEnv(const GpuShare& share, std::string_view pipe_dir);

}  // namespace gpupool::exec
