/* Kernel launches: the way every launch path goes through the library, so
 * that the compute share can hold it back. Until a task has a compute share
 * to keep (not built yet: see docs/architecture.md), each wrapper forwards
 * at once; benchmarks measure that cost (bench/gpushare_bench.cpp). */
#include "gpushare/internal.h"

#define LAUNCH(name)                                                                              \
  CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                unsigned int by, unsigned int bz, unsigned int shared, CUstream stream,           \
                void** params, void** extra) {                                                    \
    name##_t real = GS_REAL(name);                                                                \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);                        \
  }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)

#define LAUNCH_EX(name)                                                                    \
  CUresult name(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) { \
    name##_t real = GS_REAL(name);                                                         \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                                   \
    return real(config, f, params, extra);                                                 \
  }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

#define LAUNCH_COOPERATIVE(name)                                                                  \
  CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                unsigned int by, unsigned int bz, unsigned int shared, CUstream stream,           \
                void** params) {                                                                  \
    name##_t real = GS_REAL(name);                                                                \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params);                               \
  }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)
