/* A driver that does nothing, for gpupool-gpushare-bench: each entry point
 * the interposer's wrappers call returns at once, so what a benchmark
 * through the wrappers measures beyond it is the wrappers' own cost (the
 * fake driver of the tests keeps shared state files and varies by more than
 * that cost). Built as libcuda.so.1 in its own directory. */
#include <stdatomic.h>
#include <string.h>

#include "gpushare/cuda_abi.h"

#define EXPORT __attribute__((visibility("default")))

static _Atomic unsigned long long next_ptr = 1 << 20;

EXPORT CUresult cuInit(unsigned int flags) {
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuCtxGetDevice(CUdevice* dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  memset(uuid->bytes, 0x42 + dev, sizeof uuid->bytes);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  *dptr = atomic_fetch_add(&next_ptr, bytesize);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return dptr != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared, CUstream stream, void** params, void** extra) {
  (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params,
      (void)extra;
  return f != NULL && gx > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
EXPORT CUresult fakeCudaGetFunction(CUfunction* f) {
  *f = (CUfunction)&next_ptr;
  return CUDA_SUCCESS;
}
