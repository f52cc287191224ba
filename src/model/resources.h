// Resource requests and GPU descriptions: the integer quantities the
// scheduler reasons about. Amounts are integers (MiB, milli-CPU); text such
// as "24GiB" is converted at the edge (model/job_spec, the CLI).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool {

// What a job asks for. Zero means "no requirement" for the minimums.
//
// GPUs are either whole (`gpus` > 0) or a share of one GPU (`gpu_milli` in
// 1..999 with `gpus` == 0), never both. `gpu_memory_mib` is, for whole GPUs,
// the minimum memory of each GPU; for a share, the GPU memory the share takes
// (reserved on its GPU; 0 = no memory reservation).
struct Resources {
  int32_t gpus = 0;                     // whole GPUs (per node)
  int64_t gpu_memory_mib = 0;           // see above
  std::vector<std::string> gpu_models;  // allowed GPU models; empty = any
  int64_t cpu_milli = 0;                // host CPU, thousandths of a core
  int64_t memory_mib = 0;               // host memory
  int64_t disk_mib = 0;   // what the job's work directory may hold; 0 = the node's default
  int32_t gpu_milli = 0;  // a share of one GPU, 1..999; 0 = none
  int32_t min_compute_capability = 0;              // major * 10 + minor (80 for 8.0); 0 = any
  std::map<std::string, std::string> node_labels;  // every one must match the node's
  // Preferred models, used alone until `prefer_wait_ms` after submission;
  // then any allowed model.
  std::vector<std::string> preferred_models;
  int64_t prefer_wait_ms = 0;
  // Nodes: more than 1 asks for a gang of this many distinct nodes, each
  // with everything above (the amounts are per node), placed all or nothing.
  int32_t nodes = 1;
  // One MIG instance of at least this profile (slices and memory both >=),
  // taken whole; empty (slices 0) = not a MIG request. Only with gpus 0 or
  // 1, no share and no gpu_memory (model/job_spec_resources.cpp).
  struct Mig {
    int32_t slices = 0;     // compute slices: the N of "Ng.Mgb"
    int32_t memory_gb = 0;  // the M of "Ng.Mgb", NVIDIA's nominal size
    friend bool operator==(const Mig&, const Mig&) = default;
  } mig;

  bool WantsMig() const { return mig.slices > 0; }
  // GPU milli per node: 1000 per whole GPU, or the share.
  int64_t GpuMilliPerNode() const { return gpus > 0 ? int64_t{gpus} * 1000 : gpu_milli; }
  // GPU milli in all, over every node.
  int64_t TotalGpuMilli() const { return GpuMilliPerNode() * nodes; }

  friend bool operator==(const Resources&, const Resources&) = default;
};

// One GPU as a node reports it. Static facts only; telemetry is separate.
struct GpuInfo {
  int32_t index = 0;
  std::string uuid;  // "GPU-8a3b..."; simulated GPUs use "GPU-SIM-..."
  std::string name;  // as NVML reports it, e.g. "NVIDIA A100-SXM4-80GB"
  int64_t memory_mib = 0;
  int32_t cc_major = 0;  // compute capability
  int32_t cc_minor = 0;
  bool simulated = false;
  int32_t minor_number = -1;  // /dev/nvidia<minor>; -1 when not known (simulated GPUs)
  // A MIG instance (a slice of a GPU in MIG mode, schedulable on its own):
  // `uuid` is its own "MIG-..." UUID, `name` its parent's model, memory_mib
  // its own memory and minor_number its parent's device node. All empty or
  // 0 for a whole GPU.
  std::string parent_uuid{};          // the GPU it is a slice of
  std::string mig_profile{};          // "3g.40gb"
  int32_t mig_slices = 0;             // compute slices it owns
  int32_t mig_gpu_instance = -1;      // NVML's GPU instance id; -1 when not known
  int32_t mig_compute_instance = -1;  // NVML's compute instance id; -1 when not known

  bool IsMig() const { return !parent_uuid.empty(); }

  friend bool operator==(const GpuInfo&, const GpuInfo&) = default;
};

// The GPU memory cap of a share of `share_milli` thousandths (1..999) of a
// GPU with `gpu_memory_mib`, for all of the task's processes together:
// `asked_mib` (the spec's gpu_memory) when given, else floor(share_milli /
// 1000 × the GPU's memory), in bytes. 0 for whole GPUs (share_milli 0 or
// 1000 and more): they are not capped. The agent enforces it
// (agent/task_gpus.h); the server and the CLI show it.
int64_t ShareMemoryCapBytes(int32_t share_milli, int64_t gpu_memory_mib, int64_t asked_mib);

// A share's cap and what its processes hold on its GPU, as the agent reports
// it with heartbeats (NVML's per-process counts; -1: not known).
struct ShareUse {
  std::string attempt_id;
  std::string gpu_uuid;
  int64_t memory_cap_mib = 0;
  int64_t memory_used_mib = -1;
  friend bool operator==(const ShareUse&, const ShareUse&) = default;
};

// A process using a GPU, as NVML reports it.
struct GpuProcess {
  int64_t pid = 0;
  int64_t used_memory_mib = 0;
  friend bool operator==(const GpuProcess&, const GpuProcess&) = default;
};

// Changing values of one GPU, sent with heartbeats. -1 means "not available".
struct GpuTelemetry {
  std::string uuid;
  int64_t memory_used_mib = -1;
  int32_t utilization_percent = -1;
  int32_t temperature_c = -1;
  int64_t power_mw = -1;
  // Energy used since the driver was loaded (NVML's total energy
  // consumption, a counter that restarts with the driver), millijoules.
  int64_t energy_mj = -1;
  std::vector<GpuProcess> processes;
  friend bool operator==(const GpuTelemetry&, const GpuTelemetry&) = default;
};

// True when `wanted` (what a user wrote in gpu_models, e.g. "A100" or
// "a100-sxm4-80gb") names the GPU called `gpu_name` (e.g. "NVIDIA
// A100-SXM4-80GB"): the whole name, or one of its words split at spaces and
// dashes, compared without case. "A10" does not match an A100.
bool GpuModelMatches(std::string_view gpu_name, std::string_view wanted);

// A MIG profile name as NVIDIA writes it: "3g.40gb" (3 compute slices,
// about 40 GB). ParseMigProfile is strict ("<N>g.<M>gb", N 1..64, M
// 1..4096, lower case, no spaces); its message says what was wrong.
// MigProfileOf reads what a driver reports and is lenient: "1g.10gb+me"
// (a media extension) is 1g.10gb, "2c.3g.20gb" (a compute instance of two
// slices in a 3g GPU instance) has 2 slices and 20 GB; nullopt when the text
// holds no profile.
Result<Resources::Mig> ParseMigProfile(std::string_view text);
std::optional<Resources::Mig> MigProfileOf(std::string_view text);
// "3g.40gb".
std::string FormatMigProfile(const Resources::Mig& mig);
// True when an instance of profile `have` is at least `want`.
bool MigFits(const Resources::Mig& have, const Resources::Mig& want);

// "A100 80 GiB (simulated)", "NVIDIA T4 16 GiB".
std::string DescribeGpu(const GpuInfo& gpu);

}  // namespace gpupool
