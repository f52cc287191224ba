/* The memory cap: every allocation path charges the task's ledger before
 * the driver allocates and the free gives it back; the size queries report
 * the cap. Without limits (no file) every wrapper only forwards. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpushare/allocs.h"
#include "gpushare/glibc_compat.h"
#include "gpushare/internal.h"
#include "gpushare/ledger.h"

#define MAX_ORDINALS 64

static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static struct gpushare_limits limits;
static int capped; /* a memory cap applies */
static int broken; /* limits there but unusable: refuse every allocation */
static struct gpushare_ledger* ledger;
static _Atomic int ordinal_index[MAX_ORDINALS]; /* ledger index + 1; 0: not looked up */
static atomic_flag refusal_said = ATOMIC_FLAG_INIT;

void gs_say(const char* what) {
  /* stderr is the job's own log: once per process is enough. */
  char line[700];
  int n = snprintf(line, sizeof line, "gpupool gpushare: %s\n", what);
  if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void load_state(void) {
  char err[600];
  int r = gpushare_read_limits(&limits, err, sizeof err);
  if (r < 0) {
    broken = 1;
    char msg[700];
    snprintf(msg, sizeof msg, "%s; GPU memory allocations are refused", err);
    gs_say(msg);
    return;
  }
  if (r == 0 || limits.memory_bytes == 0) return;
  ledger = gpushare_ledger_open(limits.usage_path, err, sizeof err);
  if (ledger == NULL) {
    broken = 1;
    char msg[700];
    snprintf(msg, sizeof msg, "%s; GPU memory allocations are refused", err);
    gs_say(msg);
    return;
  }
  capped = 1;
}

static void ensure_state(void) { pthread_once(&state_once, load_state); }

__attribute__((destructor)) static void drop_records(void) {
  if (ledger != NULL) gpushare_ledger_drop_self(ledger);
}

/* The ledger's index of device `ordinal` (by its UUID, so processes that
 * order their devices differently still count one GPU once); -1 unknown. */
static int ledger_device(CUdevice ordinal) {
  if (ledger == NULL || ordinal < 0 || ordinal >= MAX_ORDINALS) return -1;
  int cached = atomic_load(&ordinal_index[ordinal]);
  if (cached != 0) return cached - 1;
  CUuuid uuid;
  cuDeviceGetUuid_t get = (cuDeviceGetUuid_t)gs_real_driver("cuDeviceGetUuid_v2");
  if (get == NULL) get = (cuDeviceGetUuid_t)gs_real_driver("cuDeviceGetUuid");
  if (get == NULL || get(&uuid, ordinal) != CUDA_SUCCESS) return -1;
  int index = gpushare_ledger_device(ledger, (const unsigned char*)uuid.bytes);
  if (index >= 0) atomic_store(&ordinal_index[ordinal], index + 1);
  return index;
}

static int current_ledger_device(void) {
  static _Atomic(cuCtxGetDevice_t) cached;
  cuCtxGetDevice_t get = atomic_load(&cached);
  if (get == NULL) {
    get = (cuCtxGetDevice_t)gs_real_driver("cuCtxGetDevice");
    atomic_store(&cached, get);
  }
  CUdevice dev = 0;
  if (get == NULL || get(&dev) != CUDA_SUCCESS) return -1;
  return ledger_device(dev);
}

/* Takes `bytes` on ledger device `dev` for an allocation about to be made:
 * CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY as on a smaller GPU. */
static CUresult charge(int dev, uint64_t bytes) {
  if (broken) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!capped) return CUDA_SUCCESS;
  if (dev < 0 || gpushare_ledger_charge(ledger, dev, bytes, limits.memory_bytes) != 0) {
    if (!atomic_flag_test_and_set(&refusal_said)) {
      char msg[300];
      snprintf(msg, sizeof msg,
               "an allocation of %llu bytes was refused: the task's GPU memory cap is %llu "
               "bytes per GPU (further refusals are not reported)",
               (unsigned long long)bytes, (unsigned long long)limits.memory_bytes);
      gs_say(msg);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

static void uncharge(int dev, uint64_t bytes) {
  if (capped && dev >= 0) gpushare_ledger_release(ledger, dev, bytes);
}

/* After the driver answered an allocation charged in advance. */
static CUresult settle(CUresult r, int kind, uint64_t key, int dev, uint64_t bytes) {
  if (!capped) return r;
  if (r != CUDA_SUCCESS) {
    uncharge(dev, bytes);
    return r;
  }
  int old_dev;
  uint64_t old_bytes;
  if (gpushare_allocs_take(kind, key, &old_dev, &old_bytes)) uncharge(old_dev, old_bytes);
  if (gpushare_allocs_add(kind, key, dev, bytes) != 0) {
    /* Cannot remember it: keep it charged for the process's life. */
  }
  return r;
}

static void release(int kind, uint64_t key) {
  int dev;
  uint64_t bytes;
  if (capped && gpushare_allocs_take(kind, key, &dev, &bytes)) uncharge(dev, bytes);
}

#define FORWARD_OR_FAIL(name, ...)                     \
  name##_t real = GS_REAL(name);                       \
  if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED; \
  ensure_state();                                      \
  if (!capped && !broken) return real(__VA_ARGS__)

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  FORWARD_OR_FAIL(cuMemAlloc_v2, dptr, bytesize);
  int dev = current_ledger_device();
  CUresult r = charge(dev, bytesize);
  if (r != CUDA_SUCCESS) return r;
  r = real(dptr, bytesize);
  return settle(r, GPUSHARE_DEVPTR, r == CUDA_SUCCESS ? *dptr : 0, dev, bytesize);
}

CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytesize) {
  FORWARD_OR_FAIL(cuMemAlloc, dptr, bytesize);
  int dev = current_ledger_device();
  CUresult r = charge(dev, bytesize);
  if (r != CUDA_SUCCESS) return r;
  r = real(dptr, bytesize);
  return settle(r, GPUSHARE_DEVPTR, r == CUDA_SUCCESS ? *dptr : 0, dev, bytesize);
}

/* The pitch is the driver's: charge the row rounded up to 512 bytes first,
 * then settle on what it took. */
static CUresult settle_pitch(CUresult r, uint64_t key, int dev, uint64_t guess, uint64_t actual,
                             CUresult (*undo)(uint64_t)) {
  if (r == CUDA_SUCCESS && actual > guess && charge(dev, actual - guess) != CUDA_SUCCESS) {
    undo(key);
    uncharge(dev, guess);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r == CUDA_SUCCESS && actual < guess) uncharge(dev, guess - actual);
  return settle(r, GPUSHARE_DEVPTR, key, dev, r == CUDA_SUCCESS ? actual : guess);
}

static uint64_t pitch_guess(uint64_t width, uint64_t height) {
  return ((width + 511) / 512) * 512 * height;
}

static CUresult free_v2(uint64_t p) {
  cuMemFree_v2_t f = GS_REAL(cuMemFree_v2);
  return f != NULL ? f((CUdeviceptr)p) : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult free_v1(uint64_t p) {
  cuMemFree_t f = GS_REAL(cuMemFree);
  return f != NULL ? f((unsigned int)p) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                            unsigned int element_size_bytes) {
  FORWARD_OR_FAIL(cuMemAllocPitch_v2, dptr, pitch, width_bytes, height, element_size_bytes);
  int dev = current_ledger_device();
  uint64_t guess = pitch_guess(width_bytes, height);
  CUresult r = charge(dev, guess);
  if (r != CUDA_SUCCESS) return r;
  r = real(dptr, pitch, width_bytes, height, element_size_bytes);
  uint64_t actual = r == CUDA_SUCCESS ? (uint64_t)*pitch * height : 0;
  return settle_pitch(r, r == CUDA_SUCCESS ? *dptr : 0, dev, guess, actual, free_v2);
}

CUresult cuMemAllocPitch(unsigned int* dptr, unsigned int* pitch, unsigned int width_bytes,
                         unsigned int height, unsigned int element_size_bytes) {
  FORWARD_OR_FAIL(cuMemAllocPitch, dptr, pitch, width_bytes, height, element_size_bytes);
  int dev = current_ledger_device();
  uint64_t guess = pitch_guess(width_bytes, height);
  CUresult r = charge(dev, guess);
  if (r != CUDA_SUCCESS) return r;
  r = real(dptr, pitch, width_bytes, height, element_size_bytes);
  uint64_t actual = r == CUDA_SUCCESS ? (uint64_t)*pitch * height : 0;
  return settle_pitch(r, r == CUDA_SUCCESS ? *dptr : 0, dev, guess, actual, free_v1);
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  FORWARD_OR_FAIL(cuMemAllocManaged, dptr, bytesize, flags);
  int dev = current_ledger_device();
  CUresult r = charge(dev, bytesize);
  if (r != CUDA_SUCCESS) return r;
  r = real(dptr, bytesize, flags);
  return settle(r, GPUSHARE_DEVPTR, r == CUDA_SUCCESS ? *dptr : 0, dev, bytesize);
}

#define ALLOC_ASYNC(name)                                                            \
  CUresult name(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {               \
    FORWARD_OR_FAIL(name, dptr, bytesize, stream);                                   \
    int dev = current_ledger_device();                                               \
    CUresult r = charge(dev, bytesize);                                              \
    if (r != CUDA_SUCCESS) return r;                                                 \
    r = real(dptr, bytesize, stream);                                                \
    return settle(r, GPUSHARE_DEVPTR, r == CUDA_SUCCESS ? *dptr : 0, dev, bytesize); \
  }
ALLOC_ASYNC(cuMemAllocAsync)
ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define ALLOC_FROM_POOL(name)                                                             \
  CUresult name(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) { \
    FORWARD_OR_FAIL(name, dptr, bytesize, pool, stream);                                  \
    int dev = current_ledger_device();                                                    \
    CUresult r = charge(dev, bytesize);                                                   \
    if (r != CUDA_SUCCESS) return r;                                                      \
    r = real(dptr, bytesize, pool, stream);                                               \
    return settle(r, GPUSHARE_DEVPTR, r == CUDA_SUCCESS ? *dptr : 0, dev, bytesize);      \
  }
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync)
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz)

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FORWARD_OR_FAIL(cuMemFree_v2, dptr);
  CUresult r = real(dptr);
  if (r == CUDA_SUCCESS) release(GPUSHARE_DEVPTR, dptr);
  return r;
}

CUresult cuMemFree(unsigned int dptr) {
  FORWARD_OR_FAIL(cuMemFree, dptr);
  CUresult r = real(dptr);
  if (r == CUDA_SUCCESS) release(GPUSHARE_DEVPTR, dptr);
  return r;
}

#define FREE_ASYNC(name)                                   \
  CUresult name(CUdeviceptr dptr, CUstream stream) {       \
    FORWARD_OR_FAIL(name, dptr, stream);                   \
    CUresult r = real(dptr, stream);                       \
    if (r == CUDA_SUCCESS) release(GPUSHARE_DEVPTR, dptr); \
    return r;                                              \
  }
FREE_ASYNC(cuMemFreeAsync)
FREE_ASYNC(cuMemFreeAsync_ptsz)

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  FORWARD_OR_FAIL(cuMemCreate, handle, size, prop, flags);
  int dev = prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                ? ledger_device(prop->location.id)
                : current_ledger_device();
  CUresult r = charge(dev, size);
  if (r != CUDA_SUCCESS) return r;
  r = real(handle, size, prop, flags);
  return settle(r, GPUSHARE_HANDLE, r == CUDA_SUCCESS ? *handle : 0, dev, size);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FORWARD_OR_FAIL(cuMemRelease, handle);
  CUresult r = real(handle);
  if (r == CUDA_SUCCESS) release(GPUSHARE_HANDLE, handle);
  return r;
}

/* An array's bytes: its elements times the format's size (4 for formats
 * this table does not know: the NVML backstop covers the difference). */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, int format, unsigned channels) {
  uint64_t elem = 4;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      elem = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      elem = 2;
      break;
    default:
      break;
  }
  uint64_t n = w * (h ? h : 1) * (d ? d : 1) * (channels ? channels : 1);
  return n * elem;
}

#define ARRAY_CREATE(name, desc_type, depth_expr)                                              \
  CUresult name(CUarray* array, const desc_type* desc) {                                       \
    FORWARD_OR_FAIL(name, array, desc);                                                        \
    if (desc == NULL) return real(array, desc);                                                \
    int dev = current_ledger_device();                                                         \
    uint64_t bytes =                                                                           \
        array_bytes(desc->Width, desc->Height, depth_expr, desc->Format, desc->NumChannels);   \
    CUresult r = charge(dev, bytes);                                                           \
    if (r != CUDA_SUCCESS) return r;                                                           \
    r = real(array, desc);                                                                     \
    return settle(r, GPUSHARE_ARRAY, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*array : 0, dev, \
                  bytes);                                                                      \
  }
ARRAY_CREATE(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 1)
ARRAY_CREATE(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 1)
ARRAY_CREATE(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, desc->Depth)
ARRAY_CREATE(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, desc->Depth)

CUresult cuArrayDestroy(CUarray array) {
  FORWARD_OR_FAIL(cuArrayDestroy, array);
  CUresult r = real(array);
  if (r == CUDA_SUCCESS) release(GPUSHARE_ARRAY, (uint64_t)(uintptr_t)array);
  return r;
}

/* What a capped device looks like: `total` is the cap (or the GPU, if
 * smaller), `free` what the task's processes together have not taken. */
static void capped_view(int dev, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (!capped || dev < 0) return;
  if (*total_bytes > limits.memory_bytes) *total_bytes = limits.memory_bytes;
  uint64_t used = gpushare_ledger_used(ledger, dev);
  uint64_t left = used >= *total_bytes ? 0 : *total_bytes - used;
  if (*free_bytes > left) *free_bytes = left;
}

int gs_memory_view(const unsigned char uuid[16], uint64_t* total, uint64_t* used) {
  ensure_state();
  if (!capped) return 0;
  int dev = gpushare_ledger_device(ledger, uuid);
  if (dev < 0) return 0;
  uint64_t free_bytes = *total;
  capped_view(dev, &free_bytes, total);
  *used = gpushare_ledger_used(ledger, dev);
  if (*used > *total) *used = *total;
  return 1;
}

/* cuMemGetInfo_v2 (size_t) and the legacy cuMemGetInfo (unsigned int). */
#define MEM_GET_INFO(name, type)                                          \
  CUresult name(type* free_bytes, type* total_bytes) {                    \
    FORWARD_OR_FAIL(name, free_bytes, total_bytes);                       \
    CUresult r = real(free_bytes, total_bytes);                           \
    if (r == CUDA_SUCCESS && free_bytes != NULL && total_bytes != NULL) { \
      uint64_t f = *free_bytes, t = *total_bytes;                         \
      capped_view(current_ledger_device(), &f, &t);                       \
      *free_bytes = (type)f;                                              \
      *total_bytes = (type)t;                                             \
    }                                                                     \
    return r;                                                             \
  }
MEM_GET_INFO(cuMemGetInfo_v2, size_t)
MEM_GET_INFO(cuMemGetInfo, unsigned int)

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  FORWARD_OR_FAIL(cuDeviceTotalMem_v2, bytes, dev);
  CUresult r = real(bytes, dev);
  if (r == CUDA_SUCCESS && bytes != NULL && capped && *bytes > limits.memory_bytes) {
    *bytes = limits.memory_bytes;
  }
  return r;
}

CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  FORWARD_OR_FAIL(cuDeviceTotalMem, bytes, dev);
  CUresult r = real(bytes, dev);
  if (r == CUDA_SUCCESS && bytes != NULL && capped && *bytes > limits.memory_bytes) {
    *bytes = (unsigned int)limits.memory_bytes;
  }
  return r;
}
