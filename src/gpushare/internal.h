/* Inside libgpushare.so: the driver entry points it wraps, how it reaches
 * the real ones, and the task's state. Not an interface of the library. */
#ifndef GPUPOOL_GPUSHARE_INTERNAL_H_
#define GPUPOOL_GPUSHARE_INTERNAL_H_

#include "gpushare/cuda_abi.h"
#include "gpushare/limits.h"

#define GPUSHARE_EXPORT __attribute__((visibility("default")))

/* Every wrapped entry point: X(name, base name, first CUDA version that
 * resolves the base name to it, first that no longer does (0: none), whether
 * it is the per-thread-default-stream twin). cuGetProcAddress(base, version,
 * flags) picks by these when the driver hands out an address that is not
 * one of its exports. */
#define GPUSHARE_ENTRIES(X)                                               \
  X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, 0)                              \
  X(cuMemAlloc, "cuMemAlloc", 0, 3020, 0)                                 \
  X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, 0)                    \
  X(cuMemAllocPitch, "cuMemAllocPitch", 0, 3020, 0)                       \
  X(cuMemAllocManaged, "cuMemAllocManaged", 0, 0, 0)                      \
  X(cuMemAllocAsync, "cuMemAllocAsync", 0, 0, 0)                          \
  X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 0, 0, 1)                     \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0, 0, 0)          \
  X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 0, 0, 1)     \
  X(cuMemFree_v2, "cuMemFree", 3020, 0, 0)                                \
  X(cuMemFree, "cuMemFree", 0, 3020, 0)                                   \
  X(cuMemFreeAsync, "cuMemFreeAsync", 0, 0, 0)                            \
  X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 0, 0, 1)                       \
  X(cuMemCreate, "cuMemCreate", 0, 0, 0)                                  \
  X(cuMemRelease, "cuMemRelease", 0, 0, 0)                                \
  X(cuArrayCreate_v2, "cuArrayCreate", 3020, 0, 0)                        \
  X(cuArrayCreate, "cuArrayCreate", 0, 3020, 0)                           \
  X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0, 0)                    \
  X(cuArray3DCreate, "cuArray3DCreate", 0, 3020, 0)                       \
  X(cuArrayDestroy, "cuArrayDestroy", 0, 0, 0)                            \
  X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, 0)                          \
  X(cuMemGetInfo, "cuMemGetInfo", 0, 3020, 0)                             \
  X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, 0)                  \
  X(cuDeviceTotalMem, "cuDeviceTotalMem", 0, 3020, 0)                     \
  X(cuLaunchKernel, "cuLaunchKernel", 0, 0, 0)                            \
  X(cuLaunchKernel_ptsz, "cuLaunchKernel", 0, 0, 1)                       \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, 0, 0)                        \
  X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 0, 0, 1)                   \
  X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0, 0, 0)      \
  X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 0, 0, 1) \
  X(cuCtxSynchronize, "cuCtxSynchronize", 0, 0, 0)                        \
  X(cuStreamSynchronize, "cuStreamSynchronize", 0, 0, 0)                  \
  X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 0, 0, 1)             \
  X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, 0)                 \
  X(cuGetProcAddress, "cuGetProcAddress", 0, 12000, 0)

enum gs_entry {
#define GS_ENUM(name, base, since, until, ptsz) GS_##name,
  GPUSHARE_ENTRIES(GS_ENUM)
#undef GS_ENUM
      GS_COUNT
};

/* The per-thread-default-stream twins share their plain name's signature. */
typedef cuMemAllocAsync_t cuMemAllocAsync_ptsz_t;
typedef cuMemAllocFromPoolAsync_t cuMemAllocFromPoolAsync_ptsz_t;
typedef cuMemFreeAsync_t cuMemFreeAsync_ptsz_t;
typedef cuLaunchKernel_t cuLaunchKernel_ptsz_t;
typedef cuLaunchKernelEx_t cuLaunchKernelEx_ptsz_t;
typedef cuLaunchCooperativeKernel_t cuLaunchCooperativeKernel_ptsz_t;
typedef cuStreamSynchronize_t cuStreamSynchronize_ptsz_t;

/* The real driver's entry point `id` (NULL when the driver lacks it). */
void* gs_real(enum gs_entry id);
#define GS_REAL(name) ((name##_t)gs_real(GS_##name))

/* A driver function that is not wrapped (cuCtxGetDevice, cuDeviceGetUuid). */
void* gs_real_driver(const char* name);

/* glibc's dlsym, for this library's own lookups (resolve.c). */
void* gs_real_dlsym(void* handle, const char* name);

/* The task's view of the GPU with this UUID (memory.c): 1 with `*total`
 * lowered to the cap and `*used` what the task's processes hold, 0 when no
 * cap applies (both left alone). */
int gs_memory_view(const unsigned char uuid[16], uint64_t* total, uint64_t* used);

/* Our NVML wrapper for `name`, or NULL (nvml.c). */
void* gs_nvml_wrapper_by_name(const char* name);

/* Writes "gpupool gpushare: <what>" to the job's stderr (memory.c). */
void gs_say(const char* what);

/* Our wrapper for the driver's export `name`, or NULL if not wrapped. */
void* gs_wrapper_by_name(const char* name);

/* The wrappers, exported under the driver's names (memory.c, launch.c,
 * resolve.c). */
#define GS_W GPUSHARE_EXPORT CUresult
GS_W cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
GS_W cuMemAlloc(unsigned int* dptr, unsigned int bytesize);
GS_W cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                        unsigned int element_size_bytes);
GS_W cuMemAllocPitch(unsigned int* dptr, unsigned int* pitch, unsigned int width_bytes,
                     unsigned int height, unsigned int element_size_bytes);
GS_W cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
GS_W cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
GS_W cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
GS_W cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                             CUstream stream);
GS_W cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                  CUstream stream);
GS_W cuMemFree_v2(CUdeviceptr dptr);
GS_W cuMemFree(unsigned int dptr);
GS_W cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
GS_W cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
GS_W cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                 unsigned long long flags);
GS_W cuMemRelease(CUmemGenericAllocationHandle handle);
GS_W cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc);
GS_W cuArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* desc);
GS_W cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc);
GS_W cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc);
GS_W cuArrayDestroy(CUarray array);
GS_W cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes);
GS_W cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes);
GS_W cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev);
GS_W cuDeviceTotalMem(unsigned int* bytes, CUdevice dev);
GS_W cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                    unsigned int block_x, unsigned int block_y, unsigned int block_z,
                    unsigned int shared_mem_bytes, CUstream stream, void** kernel_params,
                    void** extra);
GS_W cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                         unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                         unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                         void** kernel_params, void** extra);
GS_W cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernel_params,
                      void** extra);
GS_W cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernel_params,
                           void** extra);
GS_W cuLaunchCooperativeKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                               unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                               unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                               void** kernel_params);
GS_W cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                    unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                    unsigned int block_z, unsigned int shared_mem_bytes,
                                    CUstream stream, void** kernel_params);
GS_W cuCtxSynchronize(void);
GS_W cuStreamSynchronize(CUstream stream);
GS_W cuStreamSynchronize_ptsz(CUstream stream);
GS_W cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags);
GS_W cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult* symbol_status);
#undef GS_W

#endif /* GPUPOOL_GPUSHARE_INTERNAL_H_ */
