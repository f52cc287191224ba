// GpuSource backed by NVML, loaded at run time (see gpu_source.h).
//
// The library is opened with dlopen and every entry point is looked up by
// name, preferring the newest version (_v3, then _v2, then the plain name).
// Required entry points missing -> Unavailable at open; optional ones missing
// -> the matching telemetry value is -1 (or the process list is empty).
// A device whose static facts (name, UUID, memory) cannot be read is left out
// of the snapshot with a warning in the log, so that one lost GPU does not
// hide the others; its neighbours keep their NVML indices.
//
// MIG. A GPU whose current MIG mode is enabled is reported as its MIG
// devices (nvmlDeviceGetMigDeviceHandleByIndex over 0 ..
// nvmlDeviceGetMaxMigDeviceCount - 1, skipping the NOT_FOUND gaps), each a
// GpuInfo of its own: its "MIG-..." UUID, its memory, its profile (from the
// " MIG <profile>" NVML puts at the end of its name, else built from its
// attributes), its compute slices, its GPU/compute instance ids, and its
// parent's UUID, model name, index, minor number and compute capability.
// The parent itself is not reported: its memory and time belong to the
// instances. A GPU in MIG mode without instances reports nothing (logged).
// Drivers or GPUs without MIG (missing symbols, NOT_SUPPORTED) report whole
// GPUs as before.

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/log.h"
#include "gpu/gpu_source.h"
#include "gpu/nvml_api.h"

namespace gpupool {
namespace {

using namespace nvml;  // NOLINT: this file is the NVML binding

constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";
constexpr const char* kLibraryEnv = "GPUPOOL_NVML_LIBRARY";
constexpr unsigned long long kMiB = 1024ULL * 1024ULL;
constexpr size_t kMaxProcesses = 65536;  // guards against a driver reporting nonsense

// The resolved entry points. Required ones are never null once Resolve()
// succeeded; optional ones may be.
struct NvmlFunctions {
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  DeviceGetCountFn device_count = nullptr;
  DeviceGetHandleByIndexFn device_handle = nullptr;
  DeviceGetNameFn device_name = nullptr;
  DeviceGetUUIDFn device_uuid = nullptr;
  DeviceGetMemoryInfoFn device_memory = nullptr;
  // Optional.
  SystemGetDriverVersionFn driver_version = nullptr;
  SystemGetCudaDriverVersionFn cuda_version = nullptr;
  DeviceGetCudaComputeCapabilityFn device_cc = nullptr;
  DeviceGetUtilizationRatesFn device_utilization = nullptr;
  DeviceGetTemperatureFn device_temperature = nullptr;
  DeviceGetPowerUsageFn device_power = nullptr;
  DeviceGetTotalEnergyConsumptionFn device_energy = nullptr;
  DeviceGetIndexFn device_index = nullptr;
  DeviceGetMinorNumberFn device_minor = nullptr;
  DeviceGetComputeRunningProcessesV2Fn processes_v3 = nullptr;
  DeviceGetComputeRunningProcessesV2Fn processes_v2 = nullptr;
  DeviceGetComputeRunningProcessesV1Fn processes_v1 = nullptr;
  DeviceGetMigModeFn mig_mode = nullptr;
  DeviceGetMaxMigDeviceCountFn mig_max = nullptr;
  DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;
  DeviceGetInstanceIdFn mig_gi = nullptr;
  DeviceGetInstanceIdFn mig_ci = nullptr;
  DeviceGetAttributesFn attributes = nullptr;
};

// Closes a dlopen handle unless released.
class LibraryHandle {
 public:
  explicit LibraryHandle(void* handle) : handle_(handle) {}
  ~LibraryHandle() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;
  void* get() const { return handle_; }
  void* release() { return std::exchange(handle_, nullptr); }

 private:
  void* handle_;
};

// The first of `names` that the library exports, or null.
template <typename Fn>
Fn FindSymbol(void* library, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* sym = dlsym(library, name)) return reinterpret_cast<Fn>(sym);
  }
  return nullptr;
}

// Looks up every entry point; Unavailable naming the missing required ones.
Result<NvmlFunctions> Resolve(void* lib, const std::string& path) {
  NvmlFunctions f;
  std::vector<std::string> missing;
  auto require = [&](auto& slot, std::initializer_list<const char*> names) {
    slot = FindSymbol<std::remove_reference_t<decltype(slot)>>(lib, names);
    if (slot != nullptr) return;
    std::string alternatives;
    for (const char* name : names) {
      if (!alternatives.empty()) alternatives += " or ";
      alternatives += name;
    }
    missing.push_back(std::move(alternatives));
  };
  require(f.init, {kSymInit_v2, kSymInit});
  require(f.shutdown, {kSymShutdown});
  require(f.error_string, {kSymErrorString});
  require(f.device_count, {kSymDeviceGetCount_v2, kSymDeviceGetCount});
  require(f.device_handle, {kSymDeviceGetHandleByIndex_v2, kSymDeviceGetHandleByIndex});
  require(f.device_name, {kSymDeviceGetName});
  require(f.device_uuid, {kSymDeviceGetUUID});
  require(f.device_memory, {kSymDeviceGetMemoryInfo});
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    return Status::Unavailable("NVML: " + path + " lacks required functions: " + list +
                               " (is it NVIDIA's libnvidia-ml?)");
  }
  f.driver_version = FindSymbol<SystemGetDriverVersionFn>(lib, {kSymSystemGetDriverVersion});
  f.cuda_version = FindSymbol<SystemGetCudaDriverVersionFn>(
      lib, {kSymSystemGetCudaDriverVersion_v2, kSymSystemGetCudaDriverVersion});
  f.device_cc =
      FindSymbol<DeviceGetCudaComputeCapabilityFn>(lib, {kSymDeviceGetCudaComputeCapability});
  f.device_utilization =
      FindSymbol<DeviceGetUtilizationRatesFn>(lib, {kSymDeviceGetUtilizationRates});
  f.device_temperature = FindSymbol<DeviceGetTemperatureFn>(lib, {kSymDeviceGetTemperature});
  f.device_power = FindSymbol<DeviceGetPowerUsageFn>(lib, {kSymDeviceGetPowerUsage});
  f.device_energy =
      FindSymbol<DeviceGetTotalEnergyConsumptionFn>(lib, {kSymDeviceGetTotalEnergyConsumption});
  f.device_index = FindSymbol<DeviceGetIndexFn>(lib, {kSymDeviceGetIndex});
  f.device_minor = FindSymbol<DeviceGetMinorNumberFn>(lib, {kSymDeviceGetMinorNumber});
  f.processes_v3 = FindSymbol<DeviceGetComputeRunningProcessesV2Fn>(
      lib, {kSymDeviceGetComputeRunningProcesses_v3});
  f.processes_v2 = FindSymbol<DeviceGetComputeRunningProcessesV2Fn>(
      lib, {kSymDeviceGetComputeRunningProcesses_v2});
  f.processes_v1 =
      FindSymbol<DeviceGetComputeRunningProcessesV1Fn>(lib, {kSymDeviceGetComputeRunningProcesses});
  f.mig_mode = FindSymbol<DeviceGetMigModeFn>(lib, {kSymDeviceGetMigMode});
  f.mig_max = FindSymbol<DeviceGetMaxMigDeviceCountFn>(lib, {kSymDeviceGetMaxMigDeviceCount});
  f.mig_handle =
      FindSymbol<DeviceGetMigDeviceHandleByIndexFn>(lib, {kSymDeviceGetMigDeviceHandleByIndex});
  f.mig_gi = FindSymbol<DeviceGetInstanceIdFn>(lib, {kSymDeviceGetGpuInstanceId});
  f.mig_ci = FindSymbol<DeviceGetInstanceIdFn>(lib, {kSymDeviceGetComputeInstanceId});
  f.attributes =
      FindSymbol<DeviceGetAttributesFn>(lib, {kSymDeviceGetAttributes_v2, kSymDeviceGetAttributes});
  return f;
}

std::string ErrorText(const NvmlFunctions& f, nvmlReturn_t code) {
  const char* text = f.error_string(code);
  if (text == nullptr || *text == '\0') return "NVML error " + std::to_string(code);
  return text;
}

// A string an NVML function wrote into `buffer`, cut at the first NUL.
std::string FromBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// 12040 -> "12.4"; empty when unknown.
std::string FormatCudaVersion(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

int64_t BytesToMib(unsigned long long bytes) { return static_cast<int64_t>(bytes / kMiB); }

constexpr unsigned int kMaxMigDevices = 64;  // A100/H100 have 7; guards against nonsense
constexpr unsigned int kMaxInstanceId = 1024;

// A MIG device's profile: what follows " MIG " in its NVML name ("NVIDIA
// A100-SXM4-80GB MIG 3g.40gb"), else "<slices>g.<GiB rounded up>gb" from
// its attributes (NVIDIA's nominal sizes are close to, not exactly, that).
std::string MigProfileText(const std::string& name, const nvmlDeviceAttributes_t* attributes,
                           int64_t memory_mib) {
  constexpr std::string_view kMarker = " MIG ";
  if (size_t at = name.rfind(kMarker); at != std::string::npos) {
    std::string profile = name.substr(at + kMarker.size());
    if (MigProfileOf(profile)) return profile;
  }
  if (attributes == nullptr || attributes->gpuInstanceSliceCount == 0) return "";
  Resources::Mig m;
  m.slices = static_cast<int32_t>(std::min(attributes->gpuInstanceSliceCount, kMaxMigDevices));
  m.memory_gb = static_cast<int32_t>((std::max<int64_t>(memory_mib, 1) + 1023) / 1024);
  return FormatMigProfile(m);
}

struct ProcessList {
  nvmlReturn_t code = NVML_SUCCESS;
  std::vector<GpuProcess> processes;
};

// Calls one variant of nvmlDeviceGetComputeRunningProcesses, growing the
// buffer while the driver says it is too small (processes come and go
// between calls, so a few attempts may be needed).
template <typename Info, typename Fn>
ProcessList CallProcesses(Fn fn, nvmlDevice_t device) {
  std::vector<Info> infos(32);
  for (int attempt = 0; attempt < 8; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    nvmlReturn_t code = fn(device, &count, infos.data());
    if (code == NVML_ERROR_INSUFFICIENT_SIZE) {
      size_t wanted = std::max<size_t>(count, infos.size() * 2) + 8;
      if (wanted > kMaxProcesses) return {code, {}};
      infos.assign(wanted, Info{});
      continue;
    }
    if (code != NVML_SUCCESS) return {code, {}};
    ProcessList list;
    count = std::min<unsigned int>(count, static_cast<unsigned int>(infos.size()));
    for (unsigned int i = 0; i < count; ++i) {
      const Info& info = infos[i];
      int64_t used = info.usedGpuMemory == kValueNotAvailable ? -1 : BytesToMib(info.usedGpuMemory);
      list.processes.push_back(GpuProcess{static_cast<int64_t>(info.pid), used});
    }
    return list;
  }
  return {NVML_ERROR_INSUFFICIENT_SIZE, {}};
}

// The newest available variant; an older one when a newer one answers
// NVML_ERROR_FUNCTION_NOT_FOUND (an old driver).
ProcessList ListProcesses(const NvmlFunctions& f, nvmlDevice_t device) {
  ProcessList list{NVML_ERROR_FUNCTION_NOT_FOUND, {}};
  if (f.processes_v3 != nullptr) list = CallProcesses<nvmlProcessInfo_v2_t>(f.processes_v3, device);
  if (list.code == NVML_ERROR_FUNCTION_NOT_FOUND && f.processes_v2 != nullptr) {
    list = CallProcesses<nvmlProcessInfo_v2_t>(f.processes_v2, device);
  }
  if (list.code == NVML_ERROR_FUNCTION_NOT_FOUND && f.processes_v1 != nullptr) {
    list = CallProcesses<nvmlProcessInfo_v1_t>(f.processes_v1, device);
  }
  return list;
}

struct DeviceReading {
  GpuInfo info;
  GpuTelemetry telemetry;
};

class NvmlSource final : public GpuSource {
 public:
  struct Loaded {
    void* library = nullptr;  // owned from here on
    std::string path;
    NvmlFunctions functions;
    std::string driver_version;
    std::string cuda_version;
  };

  explicit NvmlSource(Loaded loaded) : s_(std::move(loaded)) {}
  ~NvmlSource() override {
    s_.functions.shutdown();
    dlclose(s_.library);
  }
  NvmlSource(const NvmlSource&) = delete;
  NvmlSource& operator=(const NvmlSource&) = delete;

  Result<GpuSnapshot> Read() override {
    const NvmlFunctions& f = s_.functions;
    GpuSnapshot snapshot;
    snapshot.driver_version = s_.driver_version;
    snapshot.cuda_version = s_.cuda_version;
    unsigned int count = 0;
    if (nvmlReturn_t code = f.device_count(&count); code != NVML_SUCCESS) {
      return Status::Unavailable("NVML: nvmlDeviceGetCount failed: " + ErrorText(f, code));
    }
    for (unsigned int i = 0; i < count; ++i) {
      Result<std::vector<DeviceReading>> readings = ReadDevice(i);
      if (!readings.ok()) {
        GP_LOG(kWarn) << "NVML: leaving out GPU " << i << ": " << readings.status().message();
        continue;
      }
      for (DeviceReading& reading : *readings) {
        snapshot.gpus.push_back(std::move(reading.info));
        snapshot.telemetry.push_back(std::move(reading.telemetry));
      }
    }
    return snapshot;
  }

  std::string Describe() const override {
    std::string s = "NVML (" + s_.path;
    if (!s_.driver_version.empty()) s += ", driver " + s_.driver_version;
    if (!s_.cuda_version.empty()) s += ", CUDA " + s_.cuda_version;
    return s + ")";
  }

 private:
  // The GPU at `position`, or its MIG devices when it is in MIG mode.
  Result<std::vector<DeviceReading>> ReadDevice(unsigned int position) const {
    const NvmlFunctions& f = s_.functions;
    auto failed = [&](const char* what, nvmlReturn_t code) {
      return Status::Unavailable(std::string(what) + " failed: " + ErrorText(f, code));
    };
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t code = f.device_handle(position, &device); code != NVML_SUCCESS) {
      return failed("nvmlDeviceGetHandleByIndex", code);
    }
    DeviceReading r;
    char name[kNameBufferSize] = {};
    if (nvmlReturn_t code = f.device_name(device, name, sizeof name); code != NVML_SUCCESS) {
      return failed(kSymDeviceGetName, code);
    }
    char uuid[kUuidBufferSize] = {};
    if (nvmlReturn_t code = f.device_uuid(device, uuid, sizeof uuid); code != NVML_SUCCESS) {
      return failed(kSymDeviceGetUUID, code);
    }
    nvmlMemory_t memory{};
    if (nvmlReturn_t code = f.device_memory(device, &memory); code != NVML_SUCCESS) {
      return failed(kSymDeviceGetMemoryInfo, code);
    }

    r.info.index = static_cast<int32_t>(position);
    unsigned int index = 0;
    if (f.device_index != nullptr && f.device_index(device, &index) == NVML_SUCCESS) {
      r.info.index = static_cast<int32_t>(index);
    }
    unsigned int minor_number = 0;
    if (f.device_minor != nullptr && f.device_minor(device, &minor_number) == NVML_SUCCESS &&
        minor_number <= static_cast<unsigned int>(std::numeric_limits<int32_t>::max())) {
      r.info.minor_number = static_cast<int32_t>(minor_number);
    }
    r.info.uuid = FromBuffer(uuid, sizeof uuid);
    r.info.name = FromBuffer(name, sizeof name);
    r.info.memory_mib = BytesToMib(memory.total);
    int major = 0;
    int minor = 0;
    if (f.device_cc != nullptr && f.device_cc(device, &major, &minor) == NVML_SUCCESS) {
      r.info.cc_major = major;
      r.info.cc_minor = minor;
    }
    r.info.simulated = false;

    GpuTelemetry& t = r.telemetry;
    t.uuid = r.info.uuid;
    t.memory_used_mib = BytesToMib(memory.used);
    nvmlUtilization_t utilization{};
    if (f.device_utilization != nullptr &&
        f.device_utilization(device, &utilization) == NVML_SUCCESS) {
      t.utilization_percent = static_cast<int32_t>(utilization.gpu);
    }
    unsigned int temperature = 0;
    if (f.device_temperature != nullptr &&
        f.device_temperature(device, NVML_TEMPERATURE_GPU, &temperature) == NVML_SUCCESS) {
      t.temperature_c = static_cast<int32_t>(temperature);
    }
    unsigned int power = 0;
    if (f.device_power != nullptr && f.device_power(device, &power) == NVML_SUCCESS) {
      t.power_mw = power;
    }
    unsigned long long energy = 0;
    if (f.device_energy != nullptr && f.device_energy(device, &energy) == NVML_SUCCESS &&
        energy <= static_cast<unsigned long long>(std::numeric_limits<int64_t>::max())) {
      t.energy_mj = static_cast<int64_t>(energy);
    }
    t.processes = ListProcesses(f, device).processes;
    if (!MigEnabled(device, r.info)) return std::vector<DeviceReading>{std::move(r)};
    return ReadMigDevices(device, r.info);
  }

  // True when the GPU's current MIG mode is on (false for drivers and GPUs
  // without MIG). A pending change waits for a GPU reset: logged.
  bool MigEnabled(nvmlDevice_t device, const GpuInfo& gpu) const {
    const NvmlFunctions& f = s_.functions;
    if (f.mig_mode == nullptr || f.mig_max == nullptr || f.mig_handle == nullptr) return false;
    unsigned int current = NVML_DEVICE_MIG_DISABLE;
    unsigned int pending = NVML_DEVICE_MIG_DISABLE;
    if (f.mig_mode(device, &current, &pending) != NVML_SUCCESS) return false;
    if (current != pending) {
      GP_LOG(kWarn) << "NVML: GPU " << gpu.uuid << " has MIG mode "
                    << (current == NVML_DEVICE_MIG_ENABLE ? "on" : "off") << ", turning "
                    << (pending == NVML_DEVICE_MIG_ENABLE ? "on" : "off")
                    << " at its next reset; reported as it is now";
    }
    return current == NVML_DEVICE_MIG_ENABLE;
  }

  // The MIG devices of a GPU in MIG mode; `parent` is the GPU as read.
  Result<std::vector<DeviceReading>> ReadMigDevices(nvmlDevice_t device,
                                                    const GpuInfo& parent) const {
    const NvmlFunctions& f = s_.functions;
    unsigned int max = 0;
    if (nvmlReturn_t code = f.mig_max(device, &max); code != NVML_SUCCESS) {
      return Status::Unavailable(std::string(kSymDeviceGetMaxMigDeviceCount) +
                                 " failed: " + ErrorText(f, code));
    }
    std::vector<DeviceReading> out;
    for (unsigned int i = 0; i < std::min(max, kMaxMigDevices); ++i) {
      nvmlDevice_t mig = nullptr;
      nvmlReturn_t code = f.mig_handle(device, i, &mig);
      if (code == NVML_ERROR_NOT_FOUND) continue;  // no instance at this index
      if (code != NVML_SUCCESS) {
        GP_LOG(kWarn) << "NVML: leaving out MIG device " << i << " of GPU " << parent.uuid << ": "
                      << kSymDeviceGetMigDeviceHandleByIndex << " failed: " << ErrorText(f, code);
        continue;
      }
      Result<DeviceReading> reading = ReadMigDevice(mig, parent);
      if (!reading.ok()) {
        GP_LOG(kWarn) << "NVML: leaving out MIG device " << i << " of GPU " << parent.uuid << ": "
                      << reading.status().message();
        continue;
      }
      out.push_back(std::move(*reading));
    }
    if (out.empty()) {
      GP_LOG(kWarn) << "NVML: GPU " << parent.uuid
                    << " is in MIG mode without MIG instances: nothing of it can be lent "
                       "(create instances with nvidia-smi mig, or turn MIG mode off)";
    }
    return out;
  }

  Result<DeviceReading> ReadMigDevice(nvmlDevice_t mig, const GpuInfo& parent) const {
    const NvmlFunctions& f = s_.functions;
    auto failed = [&](const char* what, nvmlReturn_t code) {
      return Status::Unavailable(std::string(what) + " failed: " + ErrorText(f, code));
    };
    char uuid[kUuidBufferSize] = {};
    if (nvmlReturn_t code = f.device_uuid(mig, uuid, sizeof uuid); code != NVML_SUCCESS) {
      return failed(kSymDeviceGetUUID, code);
    }
    nvmlMemory_t memory{};
    if (nvmlReturn_t code = f.device_memory(mig, &memory); code != NVML_SUCCESS) {
      return failed(kSymDeviceGetMemoryInfo, code);
    }
    nvmlDeviceAttributes_t attributes{};
    const bool have_attributes =
        f.attributes != nullptr && f.attributes(mig, &attributes) == NVML_SUCCESS;
    char name[kNameBufferSize] = {};
    std::string mig_name;
    if (f.device_name(mig, name, sizeof name) == NVML_SUCCESS) {
      mig_name = FromBuffer(name, sizeof name);
    }

    DeviceReading r;
    r.info = parent;  // index, model name, minor number and compute capability
    r.info.uuid = FromBuffer(uuid, sizeof uuid);
    r.info.parent_uuid = parent.uuid;
    r.info.memory_mib = BytesToMib(memory.total);
    r.info.mig_profile =
        MigProfileText(mig_name, have_attributes ? &attributes : nullptr, r.info.memory_mib);
    std::optional<Resources::Mig> profile = MigProfileOf(r.info.mig_profile);
    r.info.mig_slices = profile ? profile->slices : 0;
    if (have_attributes && attributes.computeInstanceSliceCount > 0 &&
        attributes.computeInstanceSliceCount <= kMaxMigDevices) {
      r.info.mig_slices = static_cast<int32_t>(attributes.computeInstanceSliceCount);
    }
    if (r.info.mig_slices <= 0) {
      return Status::Unavailable("neither its name (" + mig_name +
                                 ") nor its attributes say how many compute slices it has");
    }
    unsigned int id = 0;
    if (f.mig_gi != nullptr && f.mig_gi(mig, &id) == NVML_SUCCESS && id <= kMaxInstanceId) {
      r.info.mig_gpu_instance = static_cast<int32_t>(id);
    }
    if (f.mig_ci != nullptr && f.mig_ci(mig, &id) == NVML_SUCCESS && id <= kMaxInstanceId) {
      r.info.mig_compute_instance = static_cast<int32_t>(id);
    }
    GpuTelemetry& t = r.telemetry;  // utilization, temperature, power: not per instance
    t.uuid = r.info.uuid;
    t.memory_used_mib = BytesToMib(memory.used);
    t.processes = ListProcesses(f, mig).processes;
    return r;
  }

  Loaded s_;
};

}  // namespace

Result<std::unique_ptr<GpuSource>> OpenNvml(std::string library_path) {
  if (library_path.empty()) {
    const char* env = std::getenv(kLibraryEnv);
    library_path = (env != nullptr && *env != '\0') ? env : kDefaultLibrary;
  }
  dlerror();  // clear any stale error
  LibraryHandle library(dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (library.get() == nullptr) {
    const char* why = dlerror();
    return Status::Unavailable(
        "NVML: cannot load " + library_path + ": " + (why != nullptr ? why : "unknown error") +
        " (no NVIDIA driver here? set " + kLibraryEnv + " to the library's path)");
  }
  GP_ASSIGN_OR_RETURN(NvmlFunctions functions, Resolve(library.get(), library_path));
  if (nvmlReturn_t code = functions.init(); code != NVML_SUCCESS) {
    return Status::Unavailable("NVML: nvmlInit failed: " + ErrorText(functions, code));
  }

  NvmlSource::Loaded loaded;
  loaded.path = library_path;
  loaded.functions = functions;
  char driver[kVersionBufferSize] = {};
  if (functions.driver_version != nullptr &&
      functions.driver_version(driver, sizeof driver) == NVML_SUCCESS) {
    loaded.driver_version = FromBuffer(driver, sizeof driver);
  }
  int cuda = 0;
  if (functions.cuda_version != nullptr && functions.cuda_version(&cuda) == NVML_SUCCESS) {
    loaded.cuda_version = FormatCudaVersion(cuda);
  }
  loaded.library = library.release();
  return std::unique_ptr<GpuSource>(std::make_unique<NvmlSource>(std::move(loaded)));
}

}  // namespace gpupool
