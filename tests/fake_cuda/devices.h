// The fake CUDA driver's devices (see fake_cuda.cpp): those of the fake
// NVML's JSON file, filtered by CUDA_VISIBLE_DEVICES as the real driver
// filters them. Pure functions of their inputs but for ReadConfig, which
// reads $FAKE_NVML_CONFIG; callable from any thread.
#ifndef GPUPOOL_TESTS_FAKE_CUDA_DEVICES_H_
#define GPUPOOL_TESTS_FAKE_CUDA_DEVICES_H_

#include <optional>
#include <string>
#include <vector>

#include "gpushare/cuda_abi.h"

#pragma GCC visibility push(hidden)

namespace fake_cuda {

struct Device {
  std::string uuid;  // as in the file, e.g. "GPU-5c7f...": the key of the shared state
  std::string name;  // as in the file, e.g. "NVIDIA A100-SXM4-80GB"
  unsigned long long total_bytes = 0;
  CUuuid id{};  // what cuDeviceGetUuid answers
};

// Every device of $FAKE_NVML_CONFIG, in file order; nullopt without the
// variable or with an unreadable or malformed file.
std::optional<std::vector<Device>> ReadConfig();

// The devices a process sees with CUDA_VISIBLE_DEVICES = `env` (nullptr:
// unset), in ordinal order: a comma list of indices into `all` or of UUIDs
// ("GPU-..." or "MIG-...", whole or a unique prefix); the first invalid or
// repeated entry ends the list.
std::vector<Device> FilterVisible(const std::vector<Device>& all, const char* env);

// The 16 bytes of "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; for any other
// string, a deterministic hash of it.
CUuuid UuidBytes(const std::string& uuid);

}  // namespace fake_cuda

#pragma GCC visibility pop

#endif  // GPUPOOL_TESTS_FAKE_CUDA_DEVICES_H_
