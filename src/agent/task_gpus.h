// What a start order's GPUs are on this node: their device minor numbers
// and, for a share of a GPU, the memory cap that libgpushare.so holds the
// task to (exec/gpu_share.h). The agent calls TaskGpusFor on each start
// order with the GPUs it reported in its hello, and the shim's executor
// enforces the result. A MIG instance's minor is its parent GPU's; the
// instance's ids are listed in `mig`, for its capability devices.
//
// The cap rule. A task holds a share when its start order's gpu_milli is
// 1..999 (from a server that sends none, 0: when its spec asks for a share,
// gpus 0 and gpu_milli 1..999). A share's cap is model/resources.h's
// ShareMemoryCapBytes of its gpu_memory (the order's gpu_memory_mib, else
// the spec's) and its GPU's memory. Whole GPUs get no cap and no
// interposer, with or without gpu_memory: for them gpu_memory is the least
// memory a GPU must have (model/job_spec.h), not a limit.
//
// Lives in the agent: it reads the start order against this node's own GPU
// inventory, which only the agent holds. Pure: no I/O, no
// clock; thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "common/status.h"
#include "exec/driver_files.h"
#include "exec/gpu_share.h"
#include "model/resources.h"
#include "proto/messages.h"

namespace gpupool::agent {

struct TaskGpus {
  std::vector<int> minors;               // /dev/nvidia<minor> of the task's GPUs, where known
  std::optional<exec::GpuShare> share;   // a share's cap; absent: none
  std::vector<exec::MigInstance> mig{};  // the task's MIG instances (their capabilities)
  friend bool operator==(const TaskGpus&, const TaskGpus&) = default;
};

// The task's GPUs as `node_gpus` (this node's) describe them. A share whose
// cap depends on its GPU's memory fails (FailedPrecondition, naming the
// GPU) when that GPU is not among `node_gpus` or its memory is unknown, and
// a share of other than one GPU is InvalidArgument: a share must never run
// without its cap.
Result<TaskGpus> TaskGpusFor(const proto::StartTask& task, const std::vector<GpuInfo>& node_gpus);

// Whether a share capped at `cap_bytes` on GPU `uuid` fits beside the caps
// of the shares already running there (`others`, bytes): together they must
// stay within `lent_mib`, what of the GPU is lent. A cap is memory its share
// may take at any moment; caps that add up past the GPU would let one
// share's allocation fail for want of memory its neighbour holds. (A share
// without gpu_memory reserves nothing in the scheduler, which cannot know
// its GPU's size at submission; this is where its cap is checked.)
// FailedPrecondition naming the GPU and the figures, or OK.
Status ShareCapFits(const std::string& uuid, int64_t cap_bytes, const std::vector<int64_t>& others,
                    int64_t lent_mib);

}  // namespace gpupool::agent
