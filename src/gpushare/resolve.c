/* How libgpushare.so sits between a job and the driver: the real entry
 * points, and every way a program reaches an entry point (a direct link,
 * dlsym on the driver's handle, cuGetProcAddress and its _v2) handing out
 * the wrapper instead. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "gpushare/glibc_compat.h"
#include "gpushare/internal.h"

typedef void* (*dlsym_t)(void*, const char*);

struct entry_info {
  const char* name;
  const char* base;
  int since, until, ptsz;
  void* wrapper;
};

static const struct entry_info entries[GS_COUNT] = {
#define GS_INFO(name, base, since, until, ptsz) {#name, base, since, until, ptsz, (void*)name},
    GPUSHARE_ENTRIES(GS_INFO)
#undef GS_INFO
};

static _Atomic(void*) real_entries[GS_COUNT];
static _Atomic(dlsym_t) real_dlsym_fn;
static _Atomic(void*) driver_handle;

/* glibc's dlvsym, bound at link time to its oldest version, so that the
 * library also loads into images with an older glibc. */
extern void* gs_glibc_dlvsym(void* handle, const char* name, const char* version);
__asm__(".symver gs_glibc_dlvsym, dlvsym@" GS_GLIBC_BASE);

/* glibc's own dlsym: the next "dlsym" after this library. Its version
 * differs by release (GLIBC_2.34 once it moved into libc). */
static dlsym_t real_dlsym(void) {
  dlsym_t f = atomic_load(&real_dlsym_fn);
  if (f == NULL) {
    static const char* const versions[] = {"GLIBC_2.34", GS_GLIBC_BASE};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && f == NULL; ++i) {
      f = (dlsym_t)gs_glibc_dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    }
    atomic_store(&real_dlsym_fn, f);
  }
  return f;
}

/* The driver library, as the job loaded it (or loaded now: a call of one of
 * our exports means the program links or loads it). */
static void* driver(void) {
  void* h = atomic_load(&driver_handle);
  if (h == NULL) {
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) atomic_store(&driver_handle, h);
  }
  return h;
}

void* gs_real_dlsym(void* handle, const char* name) {
  dlsym_t s = real_dlsym();
  return s != NULL ? s(handle, name) : NULL;
}

void* gs_real_driver(const char* name) {
  void* h = driver();
  dlsym_t s = real_dlsym();
  return h != NULL && s != NULL ? s(h, name) : NULL;
}

void* gs_real(enum gs_entry id) {
  void* f = atomic_load_explicit(&real_entries[id], memory_order_acquire);
  if (f == NULL) {
    f = gs_real_driver(entries[id].name);
    /* Never our own wrapper: that would call itself. */
    if (f == entries[id].wrapper) f = NULL;
    if (f != NULL) atomic_store_explicit(&real_entries[id], f, memory_order_release);
  }
  return f;
}

void* gs_wrapper_by_name(const char* name) {
  if (name == NULL) return NULL;
  if (name[0] == 'n') return gs_nvml_wrapper_by_name(name);
  if (name[0] != 'c' || name[1] != 'u') return NULL;
  for (int i = 0; i < GS_COUNT; ++i) {
    if (strcmp(entries[i].name, name) == 0) return entries[i].wrapper;
  }
  return NULL;
}

/* The wrapper for what the driver's cuGetProcAddress handed out: by address
 * (the export it is), else by the base name's rules; NULL if not wrapped. */
static void* wrapper_for(const char* symbol, void* real, int cuda_version, cuuint64_t flags) {
  for (int i = 0; i < GS_COUNT; ++i) {
    if (gs_real((enum gs_entry)i) == real) return entries[i].wrapper;
  }
  int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  void* plain = NULL;
  for (int i = 0; i < GS_COUNT; ++i) {
    const struct entry_info* e = &entries[i];
    if (strcmp(e->base, symbol) != 0 || cuda_version < e->since ||
        (e->until != 0 && cuda_version >= e->until)) {
      continue;
    }
    if (e->ptsz == ptsz) return e->wrapper;
    if (!e->ptsz) plain = e->wrapper;
  }
  return plain;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  cuGetProcAddress_t real = GS_REAL(cuGetProcAddress);
  if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cuda_version, flags);
  if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL && symbol != NULL) {
    void* w = wrapper_for(symbol, *pfn, cuda_version, flags);
    if (w != NULL) *pfn = w;
  }
  return r;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbol_status) {
  cuGetProcAddress_v2_t real = GS_REAL(cuGetProcAddress_v2);
  if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cuda_version, flags, symbol_status);
  if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL && symbol != NULL) {
    void* w = wrapper_for(symbol, *pfn, cuda_version, flags);
    if (w != NULL) *pfn = w;
  }
  return r;
}

/* dlsym: a program that dlopens the driver (or NVML) and looks up an entry
 * point gets the wrapper. Everything else is glibc's answer unchanged; the plain
 * path is a tail call, so glibc still sees the program's own return address
 * (RTLD_NEXT is relative to the caller).
 *
 * dlvsym is not wrapped: this library must reach glibc's dlvsym through the
 * ordinary lookup, which an unversioned definition of our own would take
 * over (it matches any version asked for). A program that finds the driver
 * by dlvsym, by reading its symbol table itself or from a static binary is
 * not held by this library; the agent's NVML backstop stops it. */
GPUSHARE_EXPORT void* dlsym(void* handle, const char* name) {
  void* w = gs_wrapper_by_name(name);
  if (w == NULL) return real_dlsym()(handle, name);
  return real_dlsym()(handle, name) != NULL ? w : NULL;
}
