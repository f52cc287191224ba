// The project's own declarations of the small part of the NVML C API that
// gpupool uses (nvml.h is not installed on our machines and carries NVIDIA's
// copyright). Written from NVIDIA's public API documentation.
//
// Contract: these are ABI descriptions only, never linked against. The real
// library is opened with dlopen and each entry point is looked up by name
// (kSym* below); the fake library in tests/fake_nvml implements the same
// symbols with these types. Everything here is plain data and type aliases,
// safe to include anywhere. Functions marked "optional" may be absent in old
// drivers; callers must cope with a null pointer for them.
#pragma once

#include <cstdint>

namespace gpupool::nvml {

// ---- Types -----------------------------------------------------------------

using nvmlReturn_t = int;  // a C enum: always int-sized
struct nvmlDevice_st;      // opaque; only ever handled through a pointer
using nvmlDevice_t = nvmlDevice_st*;

struct nvmlMemory_t {  // bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlUtilization_t {  // percent over the last sample period
  unsigned int gpu;
  unsigned int memory;
};

// Used by the unversioned nvmlDeviceGetComputeRunningProcesses.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or kValueNotAvailable
};

// Used by nvmlDeviceGetComputeRunningProcesses_v2 and _v3 (same layout).
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or kValueNotAvailable
  unsigned int gpuInstanceId;        // MIG only; 0xFFFFFFFF otherwise
  unsigned int computeInstanceId;    // MIG only; 0xFFFFFFFF otherwise
};

// Used by nvmlDeviceGetAttributes(_v2): what a MIG device (or a whole GPU)
// is made of.
struct nvmlDeviceAttributes_t {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;  // MiB
};

// The x86-64 / aarch64 layouts NVML documents; a mismatch would corrupt memory.
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlDeviceAttributes_t) == 40);

// ---- Constants -------------------------------------------------------------

inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

inline constexpr int NVML_TEMPERATURE_GPU = 0;  // nvmlTemperatureSensors_t

inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;

// Buffer sizes large enough for every NVML version (the documented minimums
// are 64/96 for names, 80/96 for UUIDs and 80 for the driver version).
inline constexpr unsigned int kNameBufferSize = 96;
inline constexpr unsigned int kUuidBufferSize = 96;
inline constexpr unsigned int kVersionBufferSize = 96;

// usedGpuMemory when the driver cannot tell (e.g. without permission).
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;

// ---- Entry points: symbol names and pointer types ----------------------------

using InitFn = nvmlReturn_t (*)();
inline constexpr const char* kSymInit_v2 = "nvmlInit_v2";
inline constexpr const char* kSymInit = "nvmlInit";

using ShutdownFn = nvmlReturn_t (*)();
inline constexpr const char* kSymShutdown = "nvmlShutdown";

using ErrorStringFn = const char* (*)(nvmlReturn_t result);
inline constexpr const char* kSymErrorString = "nvmlErrorString";

using SystemGetDriverVersionFn = nvmlReturn_t (*)(char* version, unsigned int length);
inline constexpr const char* kSymSystemGetDriverVersion = "nvmlSystemGetDriverVersion";

// Optional. Version as 1000 * major + 10 * minor: 12040 is CUDA 12.4.
using SystemGetCudaDriverVersionFn = nvmlReturn_t (*)(int* version);
inline constexpr const char* kSymSystemGetCudaDriverVersion_v2 =
    "nvmlSystemGetCudaDriverVersion_v2";
inline constexpr const char* kSymSystemGetCudaDriverVersion = "nvmlSystemGetCudaDriverVersion";

using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int* count);
inline constexpr const char* kSymDeviceGetCount_v2 = "nvmlDeviceGetCount_v2";
inline constexpr const char* kSymDeviceGetCount = "nvmlDeviceGetCount";

using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
inline constexpr const char* kSymDeviceGetHandleByIndex_v2 = "nvmlDeviceGetHandleByIndex_v2";
inline constexpr const char* kSymDeviceGetHandleByIndex = "nvmlDeviceGetHandleByIndex";

using DeviceGetNameFn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
inline constexpr const char* kSymDeviceGetName = "nvmlDeviceGetName";

using DeviceGetUUIDFn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
inline constexpr const char* kSymDeviceGetUUID = "nvmlDeviceGetUUID";

using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
inline constexpr const char* kSymDeviceGetMemoryInfo = "nvmlDeviceGetMemoryInfo";

// Optional.
using DeviceGetCudaComputeCapabilityFn = nvmlReturn_t (*)(nvmlDevice_t device, int* major,
                                                          int* minor);
inline constexpr const char* kSymDeviceGetCudaComputeCapability =
    "nvmlDeviceGetCudaComputeCapability";

// Optional.
using DeviceGetUtilizationRatesFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                     nvmlUtilization_t* utilization);
inline constexpr const char* kSymDeviceGetUtilizationRates = "nvmlDeviceGetUtilizationRates";

// Optional. `sensor` is an nvmlTemperatureSensors_t; degrees Celsius.
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t device, int sensor,
                                                unsigned int* temp);
inline constexpr const char* kSymDeviceGetTemperature = "nvmlDeviceGetTemperature";

// Optional. Milliwatts.
using DeviceGetPowerUsageFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* power);
inline constexpr const char* kSymDeviceGetPowerUsage = "nvmlDeviceGetPowerUsage";

// Optional (Volta and later). Millijoules since the driver was last loaded.
using DeviceGetTotalEnergyConsumptionFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                           unsigned long long* energy);
inline constexpr const char* kSymDeviceGetTotalEnergyConsumption =
    "nvmlDeviceGetTotalEnergyConsumption";

// Optional. On entry *count is the capacity of `infos`; on success it is the
// number written; NVML_ERROR_INSUFFICIENT_SIZE sets it to the number needed.
using DeviceGetComputeRunningProcessesV2Fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                              unsigned int* count,
                                                              nvmlProcessInfo_v2_t* infos);
inline constexpr const char* kSymDeviceGetComputeRunningProcesses_v3 =
    "nvmlDeviceGetComputeRunningProcesses_v3";
inline constexpr const char* kSymDeviceGetComputeRunningProcesses_v2 =
    "nvmlDeviceGetComputeRunningProcesses_v2";
using DeviceGetComputeRunningProcessesV1Fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                              unsigned int* count,
                                                              nvmlProcessInfo_v1_t* infos);
inline constexpr const char* kSymDeviceGetComputeRunningProcesses =
    "nvmlDeviceGetComputeRunningProcesses";

// Optional.
using DeviceGetIndexFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* index);
inline constexpr const char* kSymDeviceGetIndex = "nvmlDeviceGetIndex";

// Optional. The device's minor number: the GPU's node is /dev/nvidia<minor>.
// NVML_ERROR_NOT_SUPPORTED on platforms without such nodes (Windows).
using DeviceGetMinorNumberFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* minor_number);
inline constexpr const char* kSymDeviceGetMinorNumber = "nvmlDeviceGetMinorNumber";

// ---- MIG (all optional: drivers before R450 and GPUs without MIG lack them,
// or answer NVML_ERROR_NOT_SUPPORTED) ------------------------------------------

// The GPU's MIG mode now and after the next reset (NVML_DEVICE_MIG_*).
using DeviceGetMigModeFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* current_mode,
                                            unsigned int* pending_mode);
inline constexpr const char* kSymDeviceGetMigMode = "nvmlDeviceGetMigMode";

// How many MIG device handles the GPU may have: the bound of the index below.
using DeviceGetMaxMigDeviceCountFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* count);
inline constexpr const char* kSymDeviceGetMaxMigDeviceCount = "nvmlDeviceGetMaxMigDeviceCount";

// The MIG device at `index` (0 .. max - 1); NVML_ERROR_NOT_FOUND where no
// instance exists at that index (the indices may have gaps).
using DeviceGetMigDeviceHandleByIndexFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int index,
                                                           nvmlDevice_t* mig_device);
inline constexpr const char* kSymDeviceGetMigDeviceHandleByIndex =
    "nvmlDeviceGetMigDeviceHandleByIndex";

using DeviceIsMigDeviceHandleFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* is_mig);
inline constexpr const char* kSymDeviceIsMigDeviceHandle = "nvmlDeviceIsMigDeviceHandle";

using DeviceGetDeviceHandleFromMigDeviceHandleFn = nvmlReturn_t (*)(nvmlDevice_t mig_device,
                                                                    nvmlDevice_t* device);
inline constexpr const char* kSymDeviceGetDeviceHandleFromMigDeviceHandle =
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle";

// A MIG device's GPU instance and compute instance ids.
using DeviceGetInstanceIdFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* id);
inline constexpr const char* kSymDeviceGetGpuInstanceId = "nvmlDeviceGetGpuInstanceId";
inline constexpr const char* kSymDeviceGetComputeInstanceId = "nvmlDeviceGetComputeInstanceId";

// Slice counts, SMs and memory of a MIG device (nvml.h maps the plain name
// to _v2 since R470; both have this signature).
using DeviceGetAttributesFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                               nvmlDeviceAttributes_t* attributes);
inline constexpr const char* kSymDeviceGetAttributes_v2 = "nvmlDeviceGetAttributes_v2";
inline constexpr const char* kSymDeviceGetAttributes = "nvmlDeviceGetAttributes";

}  // namespace gpupool::nvml
