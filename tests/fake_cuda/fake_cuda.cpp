// A fake libcuda.so.1 for tests: the CUDA driver API entry points that
// gpupool's GPU sharing layer (src/gpushare) touches, with the signatures of
// gpushare/cuda_abi.h, serving the devices of the fake NVML's JSON file
// ($FAKE_NVML_CONFIG, see tests/fake_nvml/fake_nvml.cpp: devices[] with uuid,
// memory_total_mib, name) instead of real GPUs.
//
// Devices. cuInit reads the file and CUDA_VISIBLE_DEVICES again on every call
// (a convenience for tests; the real driver reads them once). Without the
// file, or with no visible device, it fails with CUDA_ERROR_NO_DEVICE.
// CUDA_VISIBLE_DEVICES is a comma list of indices into devices[] or of UUIDs
// ("GPU-...", whole or a unique prefix); the first invalid (or repeated)
// entry ends it; unset means all, empty means none. Ordinals are positions in
// the visible list. Every entry point answers CUDA_ERROR_NOT_INITIALIZED
// before a successful cuInit, except, as in the real driver, cuInit,
// cuDriverGetVersion and cuGetProcAddress(_v2).
//
// Contexts. Each device has one primary context; the current context is per
// thread and is, until cuCtxSetCurrent names another (NULL restores it), the
// primary context of device 0. Allocations and launches go to the current
// context's device. Streams, pools and kernel parameters are ignored.
//
// Memory. The driver's memory is shared by all processes that load the fake
// with the same state directory ($FAKE_CUDA_STATE_DIR, else
// /tmp/fake-cuda-<uid>), in one file per device keyed by UUID (see
// shared_state.h), whose records of processes that are gone are dropped
// whenever it is read: memory is released when a process exits. An
// allocation past memory_total_mib fails with CUDA_ERROR_OUT_OF_MEMORY;
// cuMemGetInfo reports the total minus what all live processes hold. Device
// pointers, array and allocation handles are fake, unique and never
// dereferenced; freeing an unknown one is CUDA_ERROR_INVALID_VALUE. A forked
// child starts with no allocations (and no launches of its own).
//
// Kernels. A launch costs gridDimX*gridDimY*gridDimZ µs of device time. A
// device has one timeline (CLOCK_MONOTONIC) shared by all processes: a launch
// reserves [max(now, busy_until), +cost], moves busy_until to its end, adds
// the cost to the process's busy total (kept after the process exits) and
// returns at once, except that a process whose last reservation ends more than
// 50 ms from now first sleeps until it is within 50 ms (a bounded launch
// queue). cuCtxSynchronize and cuStreamSynchronize sleep until the end of the
// process's last reservation on the current device.
//
// Test hooks (not part of CUDA), usable without cuInit:
//   unsigned long long fakeCudaUsedBytes(const char* uuid)   all live processes
//   unsigned long long fakeCudaProcessUsedBytes(const char* uuid, int pid)
//   unsigned long long fakeCudaBusyMicros(const char* uuid, int pid)  pid 0: all
//   unsigned long long fakeCudaSynchronizeCalls(void)   this process's
//       cuCtxSynchronize and cuStreamSynchronize calls, whoever made them
//   void fakeCudaReset(void)   removes the state files; forgets allocations
//   CUresult fakeCudaGetFunction(CUfunction* f)   a handle to launch
//
// All entry points are thread-safe. The library links with -Bsymbolic, so
// cuGetProcAddress hands out its own functions even when an interposer that
// defines the same names is preloaded.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "devices.h"
#include "gpushare/cuda_abi.h"
#include "shared_state.h"

struct CUctx_st {
  std::string uuid;  // the device's; a context outlives the device's visibility
  int retains = 0;
};
struct CUfunc_st {
  int unused = 0;
};

using namespace fake_cuda;

namespace {

constexpr int64_t kQueueAheadNs = 50'000'000;
constexpr unsigned long long kMaxKernelMicros = 1ULL << 40;

enum class Kind { kPointer, kHandle, kArray };
struct Allocation {
  std::string uuid;
  unsigned long long bytes = 0;
};

std::mutex mu;
bool initialized = false;                                    // guarded by mu
std::vector<Device> devices;                                 // visible ones; guarded by mu
std::map<std::string, std::unique_ptr<CUctx_st>> primaries;  // by UUID; guarded by mu
// This process's allocations and last reserved kernel end per device; they
// belong to process `owner_pid` and are forgotten in a forked child.
std::map<std::pair<Kind, uint64_t>, Allocation> allocations;  // guarded by mu
std::map<std::string, int64_t> last_end_ns;                   // guarded by mu
pid_t owner_pid = 0;                                          // guarded by mu
uint64_t next_address = 0x7f0000000000ULL;                    // guarded by mu
uint32_t next_legacy_address = 0x10000000U;                   // guarded by mu
thread_local CUctx_st* current_context = nullptr;             // nullptr: device 0's primary
CUfunc_st dummy_function;

// ---- Devices -----------------------------------------------------------------

CUctx_st* PrimaryLocked(const std::string& uuid) {
  auto& slot = primaries[uuid];
  if (!slot) {
    slot = std::make_unique<CUctx_st>();
    slot->uuid = uuid;
  }
  return slot.get();
}

// Forgets the parent's allocations in a forked child.
void AdoptProcessLocked() {
  if (owner_pid == getpid()) return;
  owner_pid = getpid();
  allocations.clear();
  last_end_ns.clear();
}

int OrdinalLocked(const std::string& uuid) {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].uuid == uuid) return static_cast<int>(i);
  }
  return -1;
}

// The checks every entry point makes; on success *device is the current
// context's device.
CUresult CurrentLocked(Device* device) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  AdoptProcessLocked();
  std::string uuid = current_context ? current_context->uuid : devices.at(0).uuid;
  int ordinal = OrdinalLocked(uuid);
  if (ordinal < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = devices[ordinal];
  return CUDA_SUCCESS;
}

CUresult DeviceLocked(CUdevice ordinal, Device* device) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  AdoptProcessLocked();
  if (ordinal < 0 || ordinal >= static_cast<int>(devices.size())) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *device = devices[ordinal];
  return CUDA_SUCCESS;
}

// ---- Shared state files --------------------------------------------------------

// ---- Allocations ----------------------------------------------------------------

// Takes `bytes` on a device (the current context's without an ordinal) and
// returns a new fake address or handle in *out.
CUresult Allocate(Kind kind, std::optional<CUdevice> ordinal, unsigned long long bytes,
                  uint64_t* out, bool legacy = false) {
  std::lock_guard<std::mutex> lock(mu);
  Device device;
  CUresult result = ordinal ? DeviceLocked(*ordinal, &device) : CurrentLocked(&device);
  if (result != CUDA_SUCCESS) return result;
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  result = WithMemory(device.uuid, [&](std::vector<Record>& records) {
    unsigned long long used = 0;
    for (const Record& r : records) used += r.value;
    if (used > device.total_bytes || bytes > device.total_bytes - used) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    OwnRecord(records).value += bytes;
    return CUDA_SUCCESS;
  });
  if (result != CUDA_SUCCESS) return result;
  uint64_t address;
  if (legacy) {
    address = next_legacy_address;
    next_legacy_address += 256;
  } else {
    address = next_address;
    next_address += (bytes + 0xFFFFULL) / 0x10000ULL * 0x10000ULL + 0x10000ULL;
  }
  allocations[{kind, address}] = {device.uuid, bytes};
  *out = address;
  return CUDA_SUCCESS;
}

CUresult Release(Kind kind, uint64_t address) {
  std::lock_guard<std::mutex> lock(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  AdoptProcessLocked();
  auto it = allocations.find({kind, address});
  if (it == allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation allocation = it->second;
  allocations.erase(it);
  WithMemory(allocation.uuid, [&](std::vector<Record>& records) {
    Record& own = OwnRecord(records);
    own.value -= std::min(own.value, allocation.bytes);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult AllocatePointer(CUdeviceptr* dptr, unsigned long long bytes) {
  uint64_t address = 0;
  CUresult result = Allocate(Kind::kPointer, std::nullopt, bytes, dptr ? &address : nullptr);
  if (result == CUDA_SUCCESS) *dptr = address;
  return result;
}

size_t FormatBytes(int format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;
  }
}

CUresult CreateArray(CUarray* array, size_t width, size_t height, size_t depth, int format,
                     unsigned int channels) {
  if (array == nullptr || width == 0) return CUDA_ERROR_INVALID_VALUE;
  if (channels != 1 && channels != 2 && channels != 4) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long bytes = static_cast<unsigned long long>(width) * std::max<size_t>(height, 1) *
                             std::max<size_t>(depth, 1) * channels * FormatBytes(format);
  uint64_t handle = 0;
  CUresult result = Allocate(Kind::kArray, std::nullopt, bytes, &handle);
  if (result == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(static_cast<uintptr_t>(handle));
  return result;
}

// ---- Kernels --------------------------------------------------------------------

CUresult Launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz) {
  unsigned long long cost = 0;
  if (__builtin_mul_overflow(static_cast<unsigned long long>(gx), gy, &cost) ||
      __builtin_mul_overflow(cost, static_cast<unsigned long long>(gz), &cost) ||
      cost > kMaxKernelMicros) {
    cost = kMaxKernelMicros;
  }
  Device device;
  int64_t own_end = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    CUresult result = CurrentLocked(&device);
    if (result != CUDA_SUCCESS) return result;
    own_end = last_end_ns[device.uuid];
  }
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (cost == 0) return CUDA_ERROR_INVALID_VALUE;
  if (own_end - NowNs() > kQueueAheadNs) SleepUntil(own_end - kQueueAheadNs);
  int64_t end = 0;
  CUresult result = WithTimeline(device.uuid, [&](int64_t& busy_until, std::vector<Record>& rs) {
    end = std::max(NowNs(), busy_until) + static_cast<int64_t>(cost) * 1000;
    busy_until = end;
    OwnRecord(rs).value += cost;
    return CUDA_SUCCESS;
  });
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard<std::mutex> lock(mu);
  int64_t& last = last_end_ns[device.uuid];
  last = std::max(last, end);
  return CUDA_SUCCESS;
}

std::atomic<unsigned long long> synchronize_calls{0};  // this process's

CUresult Synchronize() {
  synchronize_calls.fetch_add(1, std::memory_order_relaxed);
  int64_t own_end = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    Device device;
    CUresult result = CurrentLocked(&device);
    if (result != CUDA_SUCCESS) return result;
    own_end = last_end_ns[device.uuid];
  }
  SleepUntil(own_end);
  return CUDA_SUCCESS;
}

// ---- Hooks' helpers -------------------------------------------------------------

unsigned long long MemorySum(const char* uuid, long pid) {
  unsigned long long sum = 0;
  if (uuid == nullptr) return 0;
  WithMemory(uuid, [&](std::vector<Record>& records) {
    sum = SumRecords(records, pid);
    return CUDA_SUCCESS;
  });
  return sum;
}

}  // namespace

// The contract with src/gpushare: every entry point has its cuda_abi.h type.
#define FAKE_CUDA_CHECK_ABI(name) \
  static_assert(std::is_same_v<decltype(&name), name##_t>, #name " differs from cuda_abi.h")

extern "C" {

// ---- Initialization and devices ------------------------------------------------

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu);
  auto all = ReadConfig();
  devices = all ? FilterVisible(*all, std::getenv("CUDA_VISIBLE_DEVICES")) : std::vector<Device>();
  initialized = !devices.empty();
  return initialized ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 12040;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  std::lock_guard<std::mutex> lock(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(devices.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = DeviceLocked(ordinal, &d);
  if (result != CUDA_SUCCESS) return result;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = DeviceLocked(dev, &d);
  if (result != CUDA_SUCCESS) return result;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "%s", d.name.c_str());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = DeviceLocked(dev, &d);
  if (result != CUDA_SUCCESS) return result;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *uuid = d.id;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = DeviceLocked(dev, &d);
  if (result != CUDA_SUCCESS) return result;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = d.total_bytes;
  return CUDA_SUCCESS;
}

// The 32-bit original; larger totals are clamped.
CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  CUresult result = cuDeviceTotalMem_v2(bytes ? &total : nullptr, dev);
  if (result == CUDA_SUCCESS) *bytes = static_cast<unsigned int>(std::min<size_t>(total, ~0U));
  return result;
}

// ---- Contexts -------------------------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = DeviceLocked(dev, &d);
  if (result != CUDA_SUCCESS) return result;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* primary = PrimaryLocked(d.uuid);
  ++primary->retains;
  *ctx = primary;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = DeviceLocked(dev, &d);
  if (result != CUDA_SUCCESS) return result;
  CUctx_st* primary = PrimaryLocked(d.uuid);
  if (primary->retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --primary->retains;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != nullptr) {
    bool known = std::any_of(primaries.begin(), primaries.end(),
                             [&](const auto& entry) { return entry.second.get() == ctx; });
    if (!known) return CUDA_ERROR_INVALID_CONTEXT;
  }
  current_context = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  std::lock_guard<std::mutex> lock(mu);
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current_context ? current_context : PrimaryLocked(devices.at(0).uuid);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = CurrentLocked(&d);
  if (result != CUDA_SUCCESS) return result;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = OrdinalLocked(d.uuid);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return Synchronize(); }
CUresult cuStreamSynchronize(CUstream) { return Synchronize(); }
CUresult cuStreamSynchronize_ptsz(CUstream) { return Synchronize(); }

// ---- Memory ---------------------------------------------------------------------

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(mu);
  Device d;
  CUresult result = CurrentLocked(&d);
  if (result != CUDA_SUCCESS) return result;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long used = 0;
  result = WithMemory(d.uuid, [&](std::vector<Record>& records) {
    used = SumRecords(records, 0);
    return CUDA_SUCCESS;
  });
  if (result != CUDA_SUCCESS) return result;
  *free_bytes = d.total_bytes - std::min(used, d.total_bytes);
  *total_bytes = d.total_bytes;
  return CUDA_SUCCESS;
}

// The 32-bit original; larger amounts are clamped.
CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t free64 = 0, total64 = 0;
  CUresult result = cuMemGetInfo_v2(&free64, &total64);
  if (result != CUDA_SUCCESS) return result;
  *free_bytes = static_cast<unsigned int>(std::min<size_t>(free64, ~0U));
  *total_bytes = static_cast<unsigned int>(std::min<size_t>(total64, ~0U));
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return AllocatePointer(dptr, bytesize);
}

// The 32-bit original: handles below 4 GiB.
CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytesize) {
  uint64_t address = 0;
  CUresult result =
      Allocate(Kind::kPointer, std::nullopt, bytesize, dptr ? &address : nullptr, true);
  if (result == CUDA_SUCCESS) *dptr = static_cast<unsigned int>(address);
  return result;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                            unsigned int element_size_bytes) {
  if (pitch == nullptr || width_bytes == 0 || height == 0 || element_size_bytes == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t rounded = (width_bytes + 511) / 512 * 512;
  CUresult result = AllocatePointer(dptr, static_cast<unsigned long long>(rounded) * height);
  if (result == CUDA_SUCCESS) *pitch = rounded;
  return result;
}

// The 32-bit original.
CUresult cuMemAllocPitch(unsigned int* dptr, unsigned int* pitch, unsigned int width_bytes,
                         unsigned int height, unsigned int element_size_bytes) {
  if (dptr == nullptr || pitch == nullptr || width_bytes == 0 || height == 0 ||
      element_size_bytes == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned long long rounded = (width_bytes + 511ULL) / 512 * 512;
  uint64_t address = 0;
  CUresult result = Allocate(Kind::kPointer, std::nullopt, rounded * height, &address, true);
  if (result != CUDA_SUCCESS) return result;
  *dptr = static_cast<unsigned int>(address);
  *pitch = static_cast<unsigned int>(rounded);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int) {
  return AllocatePointer(dptr, bytesize);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream) {
  return AllocatePointer(dptr, bytesize);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream) {
  return AllocatePointer(dptr, bytesize);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool, CUstream) {
  return AllocatePointer(dptr, bytesize);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool, CUstream) {
  return AllocatePointer(dptr, bytesize);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return Release(Kind::kPointer, dptr); }
CUresult cuMemFree(unsigned int dptr) { return Release(Kind::kPointer, dptr); }
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return Release(Kind::kPointer, dptr); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream) { return Release(Kind::kPointer, dptr); }

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t value = 0;
  CUresult result = Allocate(Kind::kHandle, prop->location.id, size, &value);
  if (result == CUDA_SUCCESS) *handle = value;
  return result;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return Release(Kind::kHandle, handle);
}

CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(array, desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
}

CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(array, desc->Width, desc->Height, desc->Depth, desc->Format,
                     desc->NumChannels);
}

// The originals, with 32-bit descriptor fields (CUDA_ARRAY_DESCRIPTOR_v1).
struct FakeCudaArrayDescriptorV1 {
  unsigned int Width, Height;
  int Format;
  unsigned int NumChannels;
};
struct FakeCudaArray3DDescriptorV1 {
  unsigned int Width, Height, Depth;
  int Format;
  unsigned int NumChannels, Flags;
};

CUresult cuArrayCreate(CUarray* array, const FakeCudaArrayDescriptorV1* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(array, desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
}

CUresult cuArray3DCreate(CUarray* array, const FakeCudaArray3DDescriptorV1* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(array, desc->Width, desc->Height, desc->Depth, desc->Format,
                     desc->NumChannels);
}

CUresult cuArrayDestroy(CUarray array) {
  return Release(Kind::kArray, reinterpret_cast<uintptr_t>(array));
}

// ---- Kernels --------------------------------------------------------------------

CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void**,
                        void**) {
  return Launch(f, grid_x, grid_y, grid_z);
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int, unsigned int, unsigned int,
                             unsigned int, CUstream, void**, void**) {
  return Launch(f, grid_x, grid_y, grid_z);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void**, void**) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void**, void**) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int, unsigned int, unsigned int,
                                   unsigned int, CUstream, void**) {
  return Launch(f, grid_x, grid_y, grid_z);
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                        unsigned int grid_z, unsigned int, unsigned int,
                                        unsigned int, unsigned int, CUstream, void**) {
  return Launch(f, grid_x, grid_y, grid_z);
}

// ---- cuGetProcAddress -----------------------------------------------------------

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbol_status);

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbol_status) {
  struct Entry {
    const char* name;
    int introduced;
    void* plain;
    int v2_since = 0;  // 0: no _v2
    void* v2 = nullptr;
    void* ptsz = nullptr;  // the per-thread default stream twin
  };
  auto fn = [](auto f) { return reinterpret_cast<void*>(f); };
  const Entry table[] = {
      {"cuInit", 2000, fn(cuInit)},
      {"cuDriverGetVersion", 2020, fn(cuDriverGetVersion)},
      {"cuDeviceGetCount", 2000, fn(cuDeviceGetCount)},
      {"cuDeviceGet", 2000, fn(cuDeviceGet)},
      {"cuDeviceGetName", 2000, fn(cuDeviceGetName)},
      {"cuDeviceGetUuid", 9020, fn(cuDeviceGetUuid), 11040, fn(cuDeviceGetUuid_v2)},
      {"cuDeviceTotalMem", 2000, fn(cuDeviceTotalMem), 3020, fn(cuDeviceTotalMem_v2)},
      {"cuDevicePrimaryCtxRetain", 7000, fn(cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", 7000, fn(cuDevicePrimaryCtxRelease)},
      {"cuCtxSetCurrent", 4000, fn(cuCtxSetCurrent)},
      {"cuCtxGetCurrent", 4000, fn(cuCtxGetCurrent)},
      {"cuCtxGetDevice", 2000, fn(cuCtxGetDevice)},
      {"cuCtxSynchronize", 2000, fn(cuCtxSynchronize)},
      {"cuStreamSynchronize", 2000, fn(cuStreamSynchronize), 0, nullptr,
       fn(cuStreamSynchronize_ptsz)},
      {"cuMemGetInfo", 2000, fn(cuMemGetInfo), 3020, fn(cuMemGetInfo_v2)},
      {"cuMemAlloc", 2000, fn(cuMemAlloc), 3020, fn(cuMemAlloc_v2)},
      {"cuMemAllocPitch", 2000, fn(cuMemAllocPitch), 3020, fn(cuMemAllocPitch_v2)},
      {"cuMemAllocManaged", 6000, fn(cuMemAllocManaged)},
      {"cuMemAllocAsync", 11020, fn(cuMemAllocAsync), 0, nullptr, fn(cuMemAllocAsync_ptsz)},
      {"cuMemAllocFromPoolAsync", 11020, fn(cuMemAllocFromPoolAsync), 0, nullptr,
       fn(cuMemAllocFromPoolAsync_ptsz)},
      {"cuMemFree", 2000, fn(cuMemFree), 3020, fn(cuMemFree_v2)},
      {"cuMemFreeAsync", 11020, fn(cuMemFreeAsync), 0, nullptr, fn(cuMemFreeAsync_ptsz)},
      {"cuMemCreate", 10020, fn(cuMemCreate)},
      {"cuMemRelease", 10020, fn(cuMemRelease)},
      {"cuArrayCreate", 2000, fn(cuArrayCreate), 3020, fn(cuArrayCreate_v2)},
      {"cuArray3DCreate", 2000, fn(cuArray3DCreate), 3020, fn(cuArray3DCreate_v2)},
      {"cuArrayDestroy", 2000, fn(cuArrayDestroy)},
      {"cuLaunchKernel", 4000, fn(cuLaunchKernel), 0, nullptr, fn(cuLaunchKernel_ptsz)},
      {"cuLaunchKernelEx", 11080, fn(cuLaunchKernelEx), 0, nullptr, fn(cuLaunchKernelEx_ptsz)},
      {"cuLaunchCooperativeKernel", 9000, fn(cuLaunchCooperativeKernel), 0, nullptr,
       fn(cuLaunchCooperativeKernel_ptsz)},
      {"cuGetProcAddress", 11030, fn(cuGetProcAddress), 12000, fn(cuGetProcAddress_v2)},
  };
  auto answer = [&](CUresult result, void* f, CUdriverProcAddressQueryResult status) {
    if (pfn != nullptr) *pfn = f;
    if (symbol_status != nullptr) *symbol_status = status;
    return result;
  };
  if (symbol == nullptr || pfn == nullptr ||
      flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    return answer(CUDA_ERROR_INVALID_VALUE, nullptr, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  }
  for (const Entry& e : table) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (cuda_version < e.introduced) {
      return answer(CUDA_ERROR_NOT_FOUND, nullptr, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    }
    void* f = e.v2 != nullptr && cuda_version >= e.v2_since ? e.v2 : e.plain;
    if (e.ptsz != nullptr && flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) f = e.ptsz;
    return answer(CUDA_SUCCESS, f, CU_GET_PROC_ADDRESS_SUCCESS);
  }
  return answer(CUDA_ERROR_NOT_FOUND, nullptr, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

// ---- Test hooks -----------------------------------------------------------------

unsigned long long fakeCudaUsedBytes(const char* uuid) { return MemorySum(uuid, 0); }

unsigned long long fakeCudaProcessUsedBytes(const char* uuid, int pid) {
  return pid == 0 ? 0 : MemorySum(uuid, pid);
}

unsigned long long fakeCudaSynchronizeCalls(void) { return synchronize_calls.load(); }

unsigned long long fakeCudaBusyMicros(const char* uuid, int pid) {
  unsigned long long sum = 0;
  if (uuid == nullptr) return 0;
  WithTimeline(uuid, [&](int64_t&, std::vector<Record>& records) {
    sum = SumRecords(records, pid);
    return CUDA_SUCCESS;
  });
  return sum;
}

void fakeCudaReset(void) {
  std::lock_guard<std::mutex> lock(mu);
  allocations.clear();
  last_end_ns.clear();
  RemoveStateFiles();
}

CUresult fakeCudaGetFunction(CUfunction* f) {
  if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *f = &dummy_function;
  return CUDA_SUCCESS;
}

}  // extern "C"

FAKE_CUDA_CHECK_ABI(cuInit);
FAKE_CUDA_CHECK_ABI(cuDriverGetVersion);
FAKE_CUDA_CHECK_ABI(cuDeviceGetCount);
FAKE_CUDA_CHECK_ABI(cuDeviceGet);
FAKE_CUDA_CHECK_ABI(cuDeviceGetUuid);
FAKE_CUDA_CHECK_ABI(cuDeviceTotalMem_v2);
FAKE_CUDA_CHECK_ABI(cuCtxGetDevice);
FAKE_CUDA_CHECK_ABI(cuCtxSynchronize);
FAKE_CUDA_CHECK_ABI(cuDevicePrimaryCtxRetain);
FAKE_CUDA_CHECK_ABI(cuCtxSetCurrent);
FAKE_CUDA_CHECK_ABI(cuStreamSynchronize);
FAKE_CUDA_CHECK_ABI(cuMemGetInfo_v2);
FAKE_CUDA_CHECK_ABI(cuMemAlloc_v2);
FAKE_CUDA_CHECK_ABI(cuMemAllocPitch_v2);
FAKE_CUDA_CHECK_ABI(cuMemAllocManaged);
FAKE_CUDA_CHECK_ABI(cuMemAllocAsync);
FAKE_CUDA_CHECK_ABI(cuMemAllocFromPoolAsync);
FAKE_CUDA_CHECK_ABI(cuMemFree_v2);
FAKE_CUDA_CHECK_ABI(cuMemFreeAsync);
FAKE_CUDA_CHECK_ABI(cuMemCreate);
FAKE_CUDA_CHECK_ABI(cuMemRelease);
FAKE_CUDA_CHECK_ABI(cuArrayCreate_v2);
FAKE_CUDA_CHECK_ABI(cuArray3DCreate_v2);
FAKE_CUDA_CHECK_ABI(cuArrayDestroy);
FAKE_CUDA_CHECK_ABI(cuLaunchKernel);
FAKE_CUDA_CHECK_ABI(cuLaunchKernelEx);
FAKE_CUDA_CHECK_ABI(cuLaunchCooperativeKernel);
FAKE_CUDA_CHECK_ABI(cuGetProcAddress);
FAKE_CUDA_CHECK_ABI(cuGetProcAddress_v2);
