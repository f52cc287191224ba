/* A job's view of the driver, for libgpushare's tests: allocates GPU memory
 * by one of the paths a program can take and prints what it got.
 *
 *   cuda_probe info                  "total T free F devtotal D" (bytes)
 *   cuda_probe fill PATH CHUNK_MIB MAX_MIB
 *       allocates CHUNK_MIB chunks by PATH until refused or MAX_MIB is
 *       held; prints "filled N" (MiB) and the first refusal's code, then
 *       frees all and prints "freed" (the ledger's count goes back to 0).
 *   cuda_probe fork-fill PATH CHUNK_MIB MAX_MIB HOLD_MIB
 *       holds HOLD_MIB, then a forked child fills and prints its count.
 *   cuda_probe hold MIB FILE         allocates MIB, writes FILE, sleeps.
 *   cuda_probe spin SECONDS [START_NS [SYNC_EVERY]]
 *       from START_NS (CLOCK_MONOTONIC; default: now) launches 1000 µs
 *       kernels (grid 1000) by cuLaunchKernel until SECONDS have passed,
 *       synchronizing after the first only, or also after every SYNC_EVERY
 *       launches (cuCtxSynchronize; a negative count: cuStreamSynchronize
 *       of the default stream they went to); prints "first_us F" (from the
 *       start to the end of the first kernel), "launches N", "wall_us W",
 *       "busy B" (the device µs reserved for this process, by the fake
 *       driver's fakeCudaBusyMicros) and "syncs S" (every synchronize the
 *       driver saw from this process, by fakeCudaSynchronizeCalls).
 *
 *   cuda_probe nvml LIBRARY          dlopens NVML at LIBRARY, looks its
 *       memory query up by dlsym and prints "nvml total T used U free F"
 *       (bytes) for device 0.
 *
 * PATH: direct (linked cuMemAlloc_v2), legacy (cuMemAlloc, 32-bit),
 * dlsym (dlopen + dlsym), procaddr (cuGetProcAddress, CUDA 11.3),
 * procaddr_v2 (cuGetProcAddress_v2, CUDA 12), ptsz (per-thread stream
 * cuMemAllocAsync), pitch, managed, async, pool, create (cuMemCreate),
 * array (cuArray3DCreate_v2). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpushare/cuda_abi.h"

CUresult cuInit(unsigned int flags);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFree(unsigned int dptr);
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes);
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev);
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t w, size_t h, unsigned e);
CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream stream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc);
CUresult cuArrayDestroy(CUarray array);
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev);
CUresult cuCtxSynchronize(void);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** params, void** extra);
/* The fake driver's test hooks (tests/fake_cuda). */
unsigned long long fakeCudaBusyMicros(const char* uuid, int pid);
unsigned long long fakeCudaSynchronizeCalls(void);
CUresult fakeCudaGetFunction(CUfunction* f);

#define MIB (1024ULL * 1024ULL)

struct held {
  int kind; /* 0 devptr, 1 legacy, 2 handle, 3 array */
  unsigned long long value;
};

static void* lookup(const char* symbol, const char* how) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    exit(3);
  }
  if (strcmp(how, "dlsym") == 0) return dlsym(h, symbol);
  /* The proc-address paths: the getter itself comes from dlsym too, as
   * cudart does it. */
  void* pfn = NULL;
  if (strcmp(how, "procaddr") == 0) {
    cuGetProcAddress_t get = (cuGetProcAddress_t)dlsym(h, "cuGetProcAddress");
    if (get == NULL || get(symbol, &pfn, 11030, CU_GET_PROC_ADDRESS_DEFAULT) != CUDA_SUCCESS) {
      return NULL;
    }
  } else {
    cuGetProcAddress_v2_t get = (cuGetProcAddress_v2_t)dlsym(h, "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult status;
    cuuint64_t flags = strcmp(how, "ptsz") == 0 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                : CU_GET_PROC_ADDRESS_DEFAULT;
    if (get == NULL || get(symbol, &pfn, 12040, flags, &status) != CUDA_SUCCESS) return NULL;
  }
  return pfn;
}

static CUresult alloc_by(const char* path, size_t bytes, struct held* out) {
  CUdeviceptr p = 0;
  CUresult r;
  out->kind = 0;
  if (strcmp(path, "direct") == 0) {
    r = cuMemAlloc_v2(&p, bytes);
  } else if (strcmp(path, "legacy") == 0) {
    unsigned int q = 0;
    r = cuMemAlloc(&q, (unsigned int)bytes);
    out->kind = 1;
    p = q;
  } else if (strcmp(path, "dlsym") == 0) {
    r = ((cuMemAlloc_v2_t)lookup("cuMemAlloc_v2", "dlsym"))(&p, bytes);
  } else if (strcmp(path, "procaddr") == 0 || strcmp(path, "procaddr_v2") == 0) {
    r = ((cuMemAlloc_v2_t)lookup("cuMemAlloc", path))(&p, bytes);
  } else if (strcmp(path, "ptsz") == 0) {
    r = ((cuMemAllocAsync_t)lookup("cuMemAllocAsync", "ptsz"))(&p, bytes, NULL);
  } else if (strcmp(path, "pitch") == 0) {
    size_t pitch = 0;
    r = cuMemAllocPitch_v2(&p, &pitch, bytes / 1024, 1024, 4);
  } else if (strcmp(path, "managed") == 0) {
    r = cuMemAllocManaged(&p, bytes, 1);
  } else if (strcmp(path, "async") == 0) {
    r = cuMemAllocAsync(&p, bytes, NULL);
  } else if (strcmp(path, "pool") == 0) {
    r = cuMemAllocFromPoolAsync(&p, bytes, NULL, NULL);
  } else if (strcmp(path, "create") == 0) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    r = cuMemCreate(&h, bytes, &prop, 0);
    out->kind = 2;
    p = h;
  } else if (strcmp(path, "array") == 0) {
    CUDA_ARRAY3D_DESCRIPTOR d = {bytes / (4 * 256 * 16), 256, 16, CU_AD_FORMAT_FLOAT, 1, 0};
    CUarray a = NULL;
    r = cuArray3DCreate_v2(&a, &d);
    out->kind = 3;
    p = (unsigned long long)(uintptr_t)a;
  } else {
    fprintf(stderr, "unknown path %s\n", path);
    exit(2);
  }
  out->value = p;
  return r;
}

static void release(const struct held* h) {
  switch (h->kind) {
    case 0:
      cuMemFree_v2(h->value);
      break;
    case 1:
      cuMemFree((unsigned int)h->value);
      break;
    case 2:
      cuMemRelease(h->value);
      break;
    case 3:
      cuArrayDestroy((CUarray)(uintptr_t)h->value);
      break;
  }
}

static int fill(const char* path, unsigned chunk_mib, unsigned max_mib) {
  struct held held[4096];
  unsigned n = 0, mib = 0;
  CUresult refused = CUDA_SUCCESS;
  while (mib + chunk_mib <= max_mib && n < 4096) {
    CUresult r = alloc_by(path, chunk_mib * MIB, &held[n]);
    if (r != CUDA_SUCCESS) {
      refused = r;
      break;
    }
    ++n;
    mib += chunk_mib;
  }
  printf("filled %u refused %d\n", mib, refused);
  for (unsigned i = 0; i < n; ++i) release(&held[i]);
  size_t free_b = 0, total_b = 0;
  cuMemGetInfo_v2(&free_b, &total_b);
  printf("freed free %zu total %zu\n", free_b, total_b);
  fflush(stdout);
  return 0;
}

static long long monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Keeps the GPU busy with 1 ms kernels from `start_ns` for `seconds`; with
 * `sync_every`, synchronizes itself after every that many launches, as a
 * PyTorch loop does (torch.cuda.synchronize(), .item()). */
static int spin(double seconds, long long start_ns, int sync_every) {
  CUfunction f = NULL;
  CUuuid id;
  if (fakeCudaGetFunction(&f) != CUDA_SUCCESS || cuDeviceGetUuid(&id, 0) != CUDA_SUCCESS) return 4;
  const unsigned char* b = (const unsigned char*)id.bytes;
  char uuid[48];
  snprintf(uuid, sizeof uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
  long long now = monotonic_ns();
  if (start_ns <= 0) start_ns = now;
  if (start_ns > now) {
    struct timespec until = {start_ns / 1000000000LL, start_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
    }
  }
  long long end_ns = start_ns + (long long)(seconds * 1e9);
  if (cuLaunchKernel(f, 1000, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) return 5;
  cuCtxSynchronize();
  long long first_ns = monotonic_ns() - start_ns;
  unsigned long long launches = 1;
  while (monotonic_ns() < end_ns) {
    if (cuLaunchKernel(f, 1000, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) return 5;
    ++launches;
    if (sync_every > 0 && launches % (unsigned)sync_every == 0) cuCtxSynchronize();
    if (sync_every < 0 && launches % (unsigned)-sync_every == 0) cuStreamSynchronize(NULL);
  }
  long long wall_ns = monotonic_ns() - start_ns;
  cuCtxSynchronize();
  printf("first_us %lld\nlaunches %llu\nwall_us %lld\nbusy %llu\nsyncs %llu\n", first_ns / 1000,
         launches, wall_ns / 1000, fakeCudaBusyMicros(uuid, (int)getpid()),
         fakeCudaSynchronizeCalls());
  return 0;
}

/* What NVML says of device 0's memory, reached as pynvml reaches it. */
static int nvml_info(const char* library) {
  struct {
    unsigned long long total, free, used;
  } memory;
  void* h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return 6;
  int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
  int (*get)(unsigned, void**) =
      (int (*)(unsigned, void**))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  int (*info)(void*, void*) = (int (*)(void*, void*))dlsym(h, "nvmlDeviceGetMemoryInfo");
  void* device = NULL;
  if (init == NULL || get == NULL || info == NULL || init() != 0 || get(0, &device) != 0 ||
      info(device, &memory) != 0) {
    return 7;
  }
  printf("nvml total %llu used %llu free %llu\n", memory.total, memory.used, memory.free);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (cuInit(0) != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed\n");
    return 3;
  }
  if (strcmp(argv[1], "info") == 0) {
    size_t free_b = 0, total_b = 0, dev_total = 0;
    cuMemGetInfo_v2(&free_b, &total_b);
    cuDeviceTotalMem_v2(&dev_total, 0);
    printf("total %zu free %zu devtotal %zu\n", total_b, free_b, dev_total);
    return 0;
  }
  if (strcmp(argv[1], "nvml") == 0 && argc == 3) return nvml_info(argv[2]);
  if (strcmp(argv[1], "fill") == 0 && argc == 5) {
    return fill(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
  }
  if (strcmp(argv[1], "fork-fill") == 0 && argc == 6) {
    struct held h;
    if (alloc_by(argv[2], (size_t)atoi(argv[5]) * MIB, &h) != CUDA_SUCCESS) return 4;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) _exit(fill(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4])));
    int st = 0;
    waitpid(child, &st, 0);
    release(&h);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 5;
  }
  if (strcmp(argv[1], "spin") == 0 && argc >= 3 && argc <= 5) {
    return spin(atof(argv[2]), argc >= 4 ? atoll(argv[3]) : 0, argc == 5 ? atoi(argv[4]) : 0);
  }
  if (strcmp(argv[1], "hold") == 0 && argc == 4) {
    struct held h;
    CUresult r = alloc_by("direct", (size_t)atoi(argv[2]) * MIB, &h);
    FILE* f = fopen(argv[3], "w");
    if (f != NULL) {
      fprintf(f, "%d\n", r);
      fclose(f);
    }
    pause();
    return 0;
  }
  return 2;
}
