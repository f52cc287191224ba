// GpuSource: where an agent learns about its GPUs.
//
// Two implementations: NVML, loaded at run time with dlopen so the agent
// builds and runs on machines without a GPU, and simulated GPUs for demos and
// tests, which say so (GpuInfo::simulated). A GpuSource is used from one
// thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace gpupool {

struct GpuSnapshot {
  std::vector<GpuInfo> gpus;            // static facts, by index
  std::vector<GpuTelemetry> telemetry;  // same order as gpus
  std::string driver_version;           // "550.54.15"; empty if unknown
  std::string cuda_version;             // CUDA driver version "12.4"; empty if unknown
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // Reads the GPUs and their current telemetry.
  virtual Result<GpuSnapshot> Read() = 0;
  // "NVML (libnvidia-ml.so.1, driver 550.54.15)", "simulated: 2xA100:80GiB".
  virtual std::string Describe() const = 0;
};

// Loads NVML from `library_path`, or when empty from $GPUPOOL_NVML_LIBRARY,
// or "libnvidia-ml.so.1". Unavailable if the library cannot be loaded or
// nvmlInit fails; the message says why.
Result<std::unique_ptr<GpuSource>> OpenNvml(std::string library_path = "");

// "2xA100:80GiB,1xT4:16GiB" (count "x" is optional: "A100:80GiB"). Each GPU
// gets a stable UUID derived from `seed` (e.g. the node name) and its index.
Result<std::unique_ptr<GpuSource>> OpenSimulatedGpus(std::string_view spec, std::string_view seed);

}  // namespace gpupool
