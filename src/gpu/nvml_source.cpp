// GpuSource backed by NVML, loaded at run time (see gpu_source.h).
//
// The library is opened with dlopen and every entry point is looked up by
// name, preferring the newest version (_v3, then _v2, then the plain name).
// Required entry points missing -> Unavailable at open; optional ones missing
// -> the matching telemetry value is -1 (or the process list is empty).
// A device whose static facts (name, UUID, memory) cannot be read is left out
// of the snapshot with a warning in the log, so that one lost GPU does not
// hide the others; its neighbours keep their NVML indices.

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
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
  DeviceGetIndexFn device_index = nullptr;
  DeviceGetMinorNumberFn device_minor = nullptr;
  DeviceGetComputeRunningProcessesV2Fn processes_v3 = nullptr;
  DeviceGetComputeRunningProcessesV2Fn processes_v2 = nullptr;
  DeviceGetComputeRunningProcessesV1Fn processes_v1 = nullptr;
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
  f.device_index = FindSymbol<DeviceGetIndexFn>(lib, {kSymDeviceGetIndex});
  f.device_minor = FindSymbol<DeviceGetMinorNumberFn>(lib, {kSymDeviceGetMinorNumber});
  f.processes_v3 = FindSymbol<DeviceGetComputeRunningProcessesV2Fn>(
      lib, {kSymDeviceGetComputeRunningProcesses_v3});
  f.processes_v2 = FindSymbol<DeviceGetComputeRunningProcessesV2Fn>(
      lib, {kSymDeviceGetComputeRunningProcesses_v2});
  f.processes_v1 =
      FindSymbol<DeviceGetComputeRunningProcessesV1Fn>(lib, {kSymDeviceGetComputeRunningProcesses});
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
      Result<DeviceReading> reading = ReadDevice(i);
      if (!reading.ok()) {
        GP_LOG(kWarn) << "NVML: leaving out GPU " << i << ": " << reading.status().message();
        continue;
      }
      snapshot.gpus.push_back(std::move(reading->info));
      snapshot.telemetry.push_back(std::move(reading->telemetry));
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
  Result<DeviceReading> ReadDevice(unsigned int position) const {
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
    t.processes = ListProcesses(f, device).processes;
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
