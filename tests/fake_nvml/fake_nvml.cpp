// A fake libnvidia-ml.so.1 for tests: the NVML C entry points gpupool uses,
// serving devices described by a JSON file instead of real GPUs.
//
// The file is named by $FAKE_NVML_CONFIG and read again on every call, so a
// test may rewrite it between reads. Without the variable nvmlInit fails with
// NVML_ERROR_DRIVER_NOT_LOADED, as on a machine without a driver. Format:
//
//   {"driver_version": "550.54.15", "cuda_version": 12040, "init_error": 0,
//    "missing": ["nvmlDeviceGetComputeRunningProcesses_v3"],  // -> error 13
//    "errors": {"nvmlDeviceGetCount": 9},                     // forced codes
//    "devices": [{"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-...",
//                 "memory_total_mib": 81920, "memory_used_mib": 1024,
//                 "cc": [8, 0], "utilization": 37, "temperature": 55,
//                 "power_mw": 210000, "minor": 3,   // /dev/nvidia3; default: position
//                 "energy_mj": 123456789,           // total energy; absent: 0
//                 "errors": {"nvmlDeviceGetTemperature": 3},
//                 "processes": [{"pid": 1234, "used_mib": 1000}]}]}
//
// MIG: a device with "mig_mode" (0 or 1; absent: the GPU cannot do MIG and
// the MIG calls answer NVML_ERROR_NOT_SUPPORTED) may list its instances,
// served at the indices nvmlDeviceGetMigDeviceHandleByIndex takes:
//
//   "mig_mode": 1, "mig_pending": 1, "max_mig_devices": 7,   // defaults: mode, 7
//   "sm_count": 98,
//   "mig_devices": [{"index": 0,            // default: position; gaps allowed
//                    "uuid": "MIG-...", "profile": "3g.40gb",
//                    "memory_total_mib": 40192, "memory_used_mib": 0,
//                    "sm_count": 42, "gpu_instance_slices": 3,
//                    "compute_instance_slices": 3,   // default: gpu_instance_slices
//                    "gpu_instance_id": 2, "compute_instance_id": 0,
//                    "processes": [...], "errors": {...}}]
//
// As real NVML does, a MIG handle's name is its parent's followed by
// " MIG <profile>", its compute capability is its parent's, and
// utilization, temperature, power, index and minor number are
// NVML_ERROR_NOT_SUPPORTED on it. Instances are listed only while
// "mig_mode" is 1.
//
// "missing" makes a function answer NVML_ERROR_FUNCTION_NOT_FOUND; truly
// absent symbols come from building this file several times with the
// FAKE_NVML_EXPORT_* switches (see CMakeLists.txt): "full", "v2" (no _v3),
// "legacy" (plain names only, no compute capability, power, index, minor
// number or MIG) and
// "broken" (no nvmlDeviceGetUUID).
//
// For tests, fakeNvmlCallCount(name) says how often an entry point was
// called since fakeNvmlResetCallCounts() or since the library was loaded (it
// may stay loaded after dlclose). All entry points are thread-safe.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/nvml_api.h"

#ifndef FAKE_NVML_EXPORT_V3
#define FAKE_NVML_EXPORT_V3 1  // nvmlDeviceGetComputeRunningProcesses_v3
#endif
#ifndef FAKE_NVML_EXPORT_V2
#define FAKE_NVML_EXPORT_V2 1  // the _v2 entry points
#endif
#ifndef FAKE_NVML_EXPORT_EXTRAS
#define FAKE_NVML_EXPORT_EXTRAS 1  // compute capability, power, index, minor number, MIG
#endif
#ifndef FAKE_NVML_EXPORT_UUID
#define FAKE_NVML_EXPORT_UUID 1
#endif

using namespace gpupool::nvml;

namespace {

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

struct Process {
  unsigned int pid = 0;
  long long used_mib = -1;  // < 0: not available
};

struct Device {
  std::string name;
  std::string uuid;
  unsigned long long total_mib = 0;
  unsigned long long used_mib = 0;
  int cc_major = 0;
  int cc_minor = 0;
  unsigned int utilization = 0;
  unsigned int temperature = 0;
  unsigned int power_mw = 0;
  unsigned long long energy_mj = 0;
  unsigned int minor = 0;  // /dev/nvidia<minor>; the device's position unless configured
  std::vector<Process> processes;
  std::map<std::string, int> errors;
  unsigned int sm_count = 0;
  // MIG. On a GPU: its mode (-1: not MIG capable) and instances. On an
  // instance: its profile and ids.
  int mig_mode = -1;
  int mig_pending = -1;
  unsigned int max_mig_devices = 7;
  std::map<unsigned int, Device> mig_devices;  // by index
  bool is_mig = false;
  std::string profile;
  unsigned int gi_slices = 0;
  unsigned int ci_slices = 0;
  unsigned int gi_id = 0;
  unsigned int ci_id = 0;
};

struct Config {
  std::string driver_version;
  int cuda_version = 0;
  int init_error = 0;
  std::map<std::string, int> errors;  // includes "missing" as error 13
  std::vector<Device> devices;
};

std::mutex mu;
int init_count = 0;                     // guarded by mu
std::map<std::string, int> call_count;  // guarded by mu

std::map<std::string, int> ReadErrors(const nlohmann::json& j) {
  std::map<std::string, int> errors;
  if (j.contains("errors")) {
    for (auto& [name, code] : j.at("errors").items()) errors[name] = code.get<int>();
  }
  return errors;
}

Device ReadDevice(const nlohmann::json& d);

// The configuration, or an NVML error code when there is none.
std::optional<Config> LoadConfig(nvmlReturn_t* error) {
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  if (path == nullptr || *path == '\0') {
    *error = NVML_ERROR_DRIVER_NOT_LOADED;
    return std::nullopt;
  }
  try {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "fake_nvml: cannot read %s\n", path);
      *error = NVML_ERROR_DRIVER_NOT_LOADED;
      return std::nullopt;
    }
    nlohmann::json j = nlohmann::json::parse(in);
    Config c;
    c.driver_version = j.value("driver_version", "");
    c.cuda_version = j.value("cuda_version", 0);
    c.init_error = j.value("init_error", 0);
    c.errors = ReadErrors(j);
    for (const auto& name : j.value("missing", nlohmann::json::array())) {
      c.errors[name.get<std::string>()] = NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    for (const auto& d : j.value("devices", nlohmann::json::array())) {
      Device dev = ReadDevice(d);
      dev.minor = d.value("minor", static_cast<unsigned int>(c.devices.size()));
      dev.mig_mode = d.value("mig_mode", -1);
      dev.mig_pending = d.value("mig_pending", dev.mig_mode);
      dev.max_mig_devices = d.value("max_mig_devices", 7U);
      unsigned int position = 0;
      for (const auto& m : d.value("mig_devices", nlohmann::json::array())) {
        Device mig = ReadDevice(m);
        mig.is_mig = true;
        mig.profile = m.value("profile", "");
        mig.gi_slices = m.value("gpu_instance_slices", 0U);
        mig.ci_slices = m.value("compute_instance_slices", mig.gi_slices);
        mig.gi_id = m.value("gpu_instance_id", 0U);
        mig.ci_id = m.value("compute_instance_id", 0U);
        mig.name = dev.name + " MIG " + mig.profile;
        mig.cc_major = dev.cc_major;
        mig.cc_minor = dev.cc_minor;
        dev.mig_devices[m.value("index", position)] = std::move(mig);
        ++position;
      }
      c.devices.push_back(std::move(dev));
    }
    return c;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_nvml: bad config %s: %s\n", path, e.what());
    *error = NVML_ERROR_UNKNOWN;
    return std::nullopt;
  }
}

// The fields a GPU and a MIG instance share.
Device ReadDevice(const nlohmann::json& d) {
  Device dev;
  dev.name = d.value("name", "");
  dev.uuid = d.value("uuid", "");
  dev.total_mib = d.value("memory_total_mib", 0ULL);
  dev.used_mib = d.value("memory_used_mib", 0ULL);
  if (d.contains("cc")) {
    dev.cc_major = d.at("cc").at(0).get<int>();
    dev.cc_minor = d.at("cc").at(1).get<int>();
  }
  dev.utilization = d.value("utilization", 0U);
  dev.temperature = d.value("temperature", 0U);
  dev.power_mw = d.value("power_mw", 0U);
  dev.energy_mj = d.value("energy_mj", 0ULL);
  dev.sm_count = d.value("sm_count", 0U);
  for (const auto& p : d.value("processes", nlohmann::json::array())) {
    dev.processes.push_back({p.value("pid", 0U), p.value("used_mib", -1LL)});
  }
  dev.errors = ReadErrors(d);
  return dev;
}

int ForcedError(const std::map<std::string, int>& errors, const char* function) {
  auto it = errors.find(function);
  return it == errors.end() ? NVML_SUCCESS : it->second;
}

// Runs `body(config)` for a system-level call after the common checks.
template <typename Body>
nvmlReturn_t System(const char* function, Body body) {
  std::lock_guard<std::mutex> lock(mu);
  ++call_count[function];
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  nvmlReturn_t error = NVML_SUCCESS;
  std::optional<Config> config = LoadConfig(&error);
  if (!config) return error;
  if (int forced = ForcedError(config->errors, function)) return forced;
  return body(*config);
}

// Handles are 1-based device positions disguised as pointers; a MIG
// device's handle also holds its index + 1 above bit 16.
constexpr uintptr_t kMigShift = 16;
nvmlDevice_t HandleFor(unsigned int index) {
  return reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
}
[[maybe_unused]] nvmlDevice_t MigHandleFor(nvmlDevice_t parent, unsigned int mig_index) {
  return reinterpret_cast<nvmlDevice_t>(reinterpret_cast<uintptr_t>(parent) |
                                        ((static_cast<uintptr_t>(mig_index) + 1) << kMigShift));
}
uintptr_t ParentPosition(nvmlDevice_t handle) {
  return reinterpret_cast<uintptr_t>(handle) & ((uintptr_t{1} << kMigShift) - 1);
}

// The device (a GPU or one of its MIG instances) a handle names, or null.
const Device* Resolve(const Config& config, nvmlDevice_t handle) {
  uintptr_t position = ParentPosition(handle);
  uintptr_t mig = reinterpret_cast<uintptr_t>(handle) >> kMigShift;
  if (position == 0 || position > config.devices.size()) return nullptr;
  const Device& device = config.devices[position - 1];
  if (mig == 0) return &device;
  if (device.mig_mode != 1) return nullptr;
  auto it = device.mig_devices.find(static_cast<unsigned int>(mig - 1));
  return it == device.mig_devices.end() ? nullptr : &it->second;
}

// Runs `body(device)` for a per-device call after the common checks.
template <typename Body>
nvmlReturn_t WithDevice(const char* function, nvmlDevice_t handle, Body body) {
  return System(function, [&](const Config& config) -> nvmlReturn_t {
    const Device* device = Resolve(config, handle);
    if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (int forced = ForcedError(device->errors, function)) return forced;
    return body(*device);
  });
}

// As WithDevice, for what real NVML does not answer on a MIG handle.
template <typename Body>
nvmlReturn_t WithWholeDevice(const char* function, nvmlDevice_t handle, Body body) {
  return WithDevice(function, handle, [&](const Device& d) -> nvmlReturn_t {
    if (d.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return body(d);
  });
}

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Init(const char* function) {
  std::lock_guard<std::mutex> lock(mu);
  ++call_count[function];
  nvmlReturn_t error = NVML_SUCCESS;
  std::optional<Config> config = LoadConfig(&error);
  if (!config) return error;
  if (config->init_error != NVML_SUCCESS) return config->init_error;
  ++init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t GetCount(const char* function, unsigned int* count) {
  return System(function, [&](const Config& c) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = static_cast<unsigned int>(c.devices.size());
    return NVML_SUCCESS;
  });
}

nvmlReturn_t GetHandle(const char* function, unsigned int index, nvmlDevice_t* device) {
  return System(function, [&](const Config& c) {
    if (device == nullptr || index >= c.devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = HandleFor(index);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t GetCudaVersion(const char* function, int* version) {
  return System(function, [&](const Config& c) {
    if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *version = c.cuda_version;
    return NVML_SUCCESS;
  });
}

template <typename Info>
nvmlReturn_t GetProcesses(const char* function, nvmlDevice_t handle, unsigned int* count,
                          Info* infos) {
  return WithDevice(function, handle, [&](const Device& d) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = static_cast<unsigned int>(d.processes.size());
    if (*count < n) {
      *count = n;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < n; ++i) {
      Info info{};
      info.pid = d.processes[i].pid;
      info.usedGpuMemory = d.processes[i].used_mib < 0
                               ? kValueNotAvailable
                               : static_cast<unsigned long long>(d.processes[i].used_mib) * kMiB;
      if constexpr (sizeof(Info) == sizeof(nvmlProcessInfo_v2_t)) {
        info.gpuInstanceId = 0xFFFFFFFFu;
        info.computeInstanceId = 0xFFFFFFFFu;
      }
      infos[i] = info;
    }
    *count = n;
    return NVML_SUCCESS;
  });
}

}  // namespace

extern "C" {

// ---- Test helper (not part of NVML) ----------------------------------------

int fakeNvmlCallCount(const char* function) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = call_count.find(function);
  return it == call_count.end() ? 0 : it->second;
}

void fakeNvmlResetCallCounts() {
  std::lock_guard<std::mutex> lock(mu);
  call_count.clear();
}

// ---- Library ---------------------------------------------------------------

nvmlReturn_t nvmlInit() { return Init(kSymInit); }
#if FAKE_NVML_EXPORT_V2
nvmlReturn_t nvmlInit_v2() { return Init(kSymInit_v2); }
#endif

nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(mu);
  ++call_count[kSymShutdown];
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --init_count;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

// ---- System ----------------------------------------------------------------

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return System(kSymSystemGetDriverVersion,
                [&](const Config& c) { return CopyString(c.driver_version, version, length); });
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return GetCudaVersion(kSymSystemGetCudaDriverVersion, version);
}
#if FAKE_NVML_EXPORT_V2
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return GetCudaVersion(kSymSystemGetCudaDriverVersion_v2, version);
}
#endif

// ---- Devices ---------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return GetCount(kSymDeviceGetCount, count); }
#if FAKE_NVML_EXPORT_V2
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return GetCount(kSymDeviceGetCount_v2, count);
}
#endif

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return GetHandle(kSymDeviceGetHandleByIndex, index, device);
}
#if FAKE_NVML_EXPORT_V2
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return GetHandle(kSymDeviceGetHandleByIndex_v2, index, device);
}
#endif

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  return WithDevice(kSymDeviceGetName, device,
                    [&](const Device& d) { return CopyString(d.name, name, length); });
}

#if FAKE_NVML_EXPORT_UUID
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  return WithDevice(kSymDeviceGetUUID, device,
                    [&](const Device& d) { return CopyString(d.uuid, uuid, length); });
}
#endif

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return WithDevice(kSymDeviceGetMemoryInfo, device, [&](const Device& d) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = d.total_mib * kMiB;
    memory->used = d.used_mib * kMiB;
    memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  return WithWholeDevice(kSymDeviceGetUtilizationRates, device, [&](const Device& d) {
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = d.utilization;
    utilization->memory = 0;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int* temp) {
  return WithWholeDevice(kSymDeviceGetTemperature, device, [&](const Device& d) {
    if (temp == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d.temperature;
    return NVML_SUCCESS;
  });
}

#if FAKE_NVML_EXPORT_EXTRAS
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  return WithDevice(kSymDeviceGetCudaComputeCapability, device, [&](const Device& d) {
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d.cc_major;
    *minor = d.cc_minor;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  return WithWholeDevice(kSymDeviceGetPowerUsage, device, [&](const Device& d) {
    if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *power = d.power_mw;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
  return WithWholeDevice(kSymDeviceGetTotalEnergyConsumption, device, [&](const Device& d) {
    if (energy == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *energy = d.energy_mj;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  return WithWholeDevice(kSymDeviceGetIndex, device, [&](const Device&) {
    if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *index = static_cast<unsigned int>(reinterpret_cast<uintptr_t>(device) - 1);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor_number) {
  return WithWholeDevice(kSymDeviceGetMinorNumber, device, [&](const Device& d) {
    if (minor_number == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *minor_number = d.minor;
    return NVML_SUCCESS;
  });
}

// ---- MIG -------------------------------------------------------------------

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current_mode,
                                  unsigned int* pending_mode) {
  return WithWholeDevice(kSymDeviceGetMigMode, device, [&](const Device& d) {
    if (current_mode == nullptr || pending_mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *current_mode = static_cast<unsigned int>(d.mig_mode);
    *pending_mode = static_cast<unsigned int>(d.mig_pending < 0 ? d.mig_mode : d.mig_pending);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return WithWholeDevice(kSymDeviceGetMaxMigDeviceCount, device, [&](const Device& d) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = d.max_mig_devices;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* mig_device) {
  return WithWholeDevice(kSymDeviceGetMigDeviceHandleByIndex, device, [&](const Device& d) {
    if (mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (d.mig_mode != 1 || index >= d.max_mig_devices) return NVML_ERROR_INVALID_ARGUMENT;
    if (d.mig_devices.count(index) == 0) return NVML_ERROR_NOT_FOUND;
    *mig_device = MigHandleFor(device, index);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig) {
  return WithDevice(kSymDeviceIsMigDeviceHandle, device, [&](const Device& d) {
    if (is_mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = d.is_mig ? 1U : 0U;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                          nvmlDevice_t* device) {
  return WithDevice(kSymDeviceGetDeviceHandleFromMigDeviceHandle, mig_device, [&](const Device& d) {
    if (device == nullptr || !d.is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *device = HandleFor(static_cast<unsigned int>(ParentPosition(mig_device) - 1));
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return WithDevice(kSymDeviceGetGpuInstanceId, device, [&](const Device& d) {
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = d.gi_id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  return WithDevice(kSymDeviceGetComputeInstanceId, device, [&](const Device& d) {
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = d.ci_id;
    return NVML_SUCCESS;
  });
}

static nvmlReturn_t Attributes(const char* function, nvmlDevice_t device,
                               nvmlDeviceAttributes_t* attributes) {
  return WithDevice(function, device, [&](const Device& d) {
    if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlDeviceAttributes_t a{};
    a.multiprocessorCount = d.sm_count;
    a.gpuInstanceSliceCount = d.gi_slices;
    a.computeInstanceSliceCount = d.ci_slices;
    a.memorySizeMB = d.total_mib;
    *attributes = a;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return Attributes(kSymDeviceGetAttributes, device, attributes);
}
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return Attributes(kSymDeviceGetAttributes_v2, device, attributes);
}
#endif

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                  nvmlProcessInfo_v1_t* infos) {
  return GetProcesses(kSymDeviceGetComputeRunningProcesses, device, count, infos);
}
#if FAKE_NVML_EXPORT_V2
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return GetProcesses(kSymDeviceGetComputeRunningProcesses_v2, device, count, infos);
}
#endif
#if FAKE_NVML_EXPORT_V3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return GetProcesses(kSymDeviceGetComputeRunningProcesses_v3, device, count, infos);
}
#endif

}  // extern "C"
