#include "agent/task_gpus.h"

#include <string>

#include "common/units.h"

namespace gpupool::agent {
namespace {

const GpuInfo* FindGpu(const std::vector<GpuInfo>& gpus, const std::string& uuid) {
  for (const GpuInfo& g : gpus) {
    if (g.uuid == uuid) return &g;
  }
  return nullptr;
}

// The share's thousandths of its GPU, or 0 for whole GPUs (see the header).
int32_t ShareMilli(const proto::StartTask& task) {
  if (task.gpu_milli > 0) return task.gpu_milli < 1000 ? task.gpu_milli : 0;
  const Resources& r = task.spec.resources;
  return r.gpus == 0 && r.gpu_milli > 0 && r.gpu_milli < 1000 ? r.gpu_milli : 0;
}

}  // namespace

Result<TaskGpus> TaskGpusFor(const proto::StartTask& task, const std::vector<GpuInfo>& node_gpus) {
  TaskGpus out;
  for (const std::string& uuid : task.gpu_uuids) {
    const GpuInfo* g = FindGpu(node_gpus, uuid);
    if (g != nullptr && g->minor_number >= 0) out.minors.push_back(g->minor_number);
    if (g != nullptr && g->IsMig() && g->minor_number >= 0) {
      out.mig.push_back({g->minor_number, g->mig_gpu_instance, g->mig_compute_instance});
    }
  }
  const int32_t milli = ShareMilli(task);
  if (milli == 0) return out;
  if (task.gpu_uuids.size() != 1) {
    return Status::InvalidArgument("a share of a GPU must be of exactly one GPU, not " +
                                   std::to_string(task.gpu_uuids.size()));
  }
  exec::GpuShare share;
  share.share_milli = milli;
  const int64_t memory_mib =
      task.gpu_memory_mib > 0 ? task.gpu_memory_mib : task.spec.resources.gpu_memory_mib;
  int64_t gpu_mib = 0;
  if (memory_mib <= 0) {
    const std::string& uuid = task.gpu_uuids.front();
    const GpuInfo* g = FindGpu(node_gpus, uuid);
    if (g == nullptr) {
      return Status::FailedPrecondition("the share's GPU " + uuid + " is not one of this node's");
    }
    if (g->memory_mib <= 0) {
      return Status::FailedPrecondition("the memory of the share's GPU " + uuid +
                                        " is not known, so its cap cannot be set");
    }
    gpu_mib = g->memory_mib;
  }
  share.memory_bytes = ShareMemoryCapBytes(milli, gpu_mib, memory_mib);
  out.share = share;
  return out;
}

Status ShareCapFits(const std::string& uuid, int64_t cap_bytes, const std::vector<int64_t>& others,
                    int64_t lent_mib) {
  int64_t taken = 0;
  for (int64_t c : others) taken += c;
  if (taken + cap_bytes <= (lent_mib << 20)) return Status::Ok();
  return Status::FailedPrecondition(
      "the share's GPU memory cap of " + FormatBytes(cap_bytes) + " does not fit on GPU " + uuid +
      ": the caps of the " + std::to_string(others.size()) + " shares there already take " +
      FormatBytes(taken) + " of the " + FormatMebibytes(lent_mib) + " lent");
}

}  // namespace gpupool::agent
