/* The task's own view through NVML: a program inside the task that asks
 * NVML for a GPU's memory (nvidia-smi, pynvml, a framework's "free memory"
 * check) sees what the CUDA queries show it, a GPU the size of its cap of
 * which only its own processes use any, not the whole card and its
 * neighbours' use. Only the memory queries are wrapped; everything else of
 * NVML answers as the driver does. Without a cap every wrapper forwards. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "gpushare/glibc_compat.h"
#include "gpushare/internal.h"

typedef int nvmlReturn_t;
typedef void* nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

/* nvml.h's nvmlMemory_t and nvmlMemory_v2_t. */
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_t)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2_t)(nvmlDevice_t, nvmlMemory_v2_t*);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_t)(nvmlDevice_t, char*, unsigned int);

/* NVML's own `name`: the library is loaded when one of our wrappers runs
 * (the program links it or dlopened it), so it is looked up, never loaded. */
static void* real_nvml(const char* name) {
  static _Atomic(void*) handle;
  void* h = atomic_load(&handle);
  if (h == NULL) {
    h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return NULL;
    atomic_store(&handle, h);
  }
  void* f = gs_real_dlsym(h, name);
  /* Never our own wrapper (a program linked with -rdynamic against us). */
  return f == gs_nvml_wrapper_by_name(name) ? NULL : f;
}

/* "GPU-8a3b0c1d-...": the 16 bytes that cuDeviceGetUuid gives for it. */
static int parse_uuid(const char* text, unsigned char out[16]) {
  if (strncmp(text, "GPU-", 4) != 0) return -1;
  int n = 0, high = -1;
  for (const char* p = text + 4; *p != '\0'; ++p) {
    if (*p == '-') continue;
    if (!isxdigit((unsigned char)*p) || n == 16) return -1;
    int v = isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10);
    if (high < 0) {
      high = v;
    } else {
      out[n++] = (unsigned char)(high << 4 | v);
      high = -1;
    }
  }
  return n == 16 && high < 0 ? 0 : -1;
}

/* The task's view of `device`'s memory: 1 with `total` cut to the cap and
 * `used` the task's own use, 0 when no cap applies (or the device is not
 * one the ledger can name: the driver's answer stands). */
static int task_view(nvmlDevice_t device, uint64_t* total, uint64_t* used) {
  nvmlDeviceGetUUID_t get_uuid = (nvmlDeviceGetUUID_t)real_nvml("nvmlDeviceGetUUID");
  char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  unsigned char uuid[16];
  if (get_uuid == NULL || get_uuid(device, text, sizeof text) != NVML_SUCCESS ||
      parse_uuid(text, uuid) != 0) {
    return 0;
  }
  return gs_memory_view(uuid, total, used);
}

/* Puts the task's view into NVML's answer for `device`: 1 when a cap applies. */
static int apply_view(nvmlDevice_t device, unsigned long long* total, unsigned long long* free,
                      unsigned long long* used) {
  uint64_t t = *total, u = 0;
  if (!task_view(device, &t, &u)) return 0;
  *total = t;
  *used = u;
  *free = t - u;
  return 1;
}

GPUSHARE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  nvmlDeviceGetMemoryInfo_t real = (nvmlDeviceGetMemoryInfo_t)real_nvml("nvmlDeviceGetMemoryInfo");
  if (real == NULL) return NVML_ERROR_UNINITIALIZED;
  nvmlReturn_t r = real(device, memory);
  if (r == NVML_SUCCESS && memory != NULL) {
    apply_view(device, &memory->total, &memory->free, &memory->used);
  }
  return r;
}

GPUSHARE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                        nvmlMemory_v2_t* memory) {
  nvmlDeviceGetMemoryInfo_v2_t real =
      (nvmlDeviceGetMemoryInfo_v2_t)real_nvml("nvmlDeviceGetMemoryInfo_v2");
  if (real == NULL) return NVML_ERROR_UNINITIALIZED;
  nvmlReturn_t r = real(device, memory);
  /* The driver's reserve is the card's, not the task's: none here. */
  if (r == NVML_SUCCESS && memory != NULL &&
      apply_view(device, &memory->total, &memory->free, &memory->used)) {
    memory->reserved = 0;
  }
  return r;
}

void* gs_nvml_wrapper_by_name(const char* name) {
  if (name == NULL || strncmp(name, "nvmlDeviceGetMemoryInfo", 23) != 0) return NULL;
  if (strcmp(name + 23, "") == 0) return (void*)nvmlDeviceGetMemoryInfo;
  if (strcmp(name + 23, "_v2") == 0) return (void*)nvmlDeviceGetMemoryInfo_v2;
  return NULL;
}
