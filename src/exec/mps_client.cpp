#include "exec/mps_client.h"

#include <algorithm>

namespace gpupool::exec {

std::vector<std::string> MpsClientEnv(const GpuShare& share, std::string_view pipe_dir) {
  const int percent = std::clamp(share.share_milli / 10, 1, 100);
  const int64_t cap_mib = std::max<int64_t>(share.memory_bytes >> 20, 1);
  return {"CUDA_MPS_PIPE_DIRECTORY=" + std::string(pipe_dir),
          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + std::to_string(percent),
          "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + std::to_string(cap_mib) + "M"};
}

}  // namespace gpupool::exec
