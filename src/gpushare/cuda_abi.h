/* The part of the CUDA driver API's binary interface that gpupool's GPU
 * sharing layer touches: types, result codes and the entry points' C
 * signatures, as the driver (libcuda.so.1) exports them.
 *
 * NVIDIA's cuda.h is not a Debian package we build with, and the ABI is
 * stable and small where we need it: these declarations follow the driver
 * API reference. Both libgpushare.so (src/gpushare) and the fake driver the
 * tests load (tests/fake_cuda) use this header, so they agree by
 * construction; the real driver agrees because the layouts are the
 * documented ones. Plain C: it goes into libraries that load into any
 * process. */
#ifndef GPUPOOL_GPUSHARE_CUDA_ABI_H_
#define GPUPOOL_GPUSHARE_CUDA_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999
};

typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* 64-bit platforms */
typedef uint64_t cuuint64_t;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUfunc_st* CUfunction;
typedef struct CUarray_st* CUarray;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {
  char bytes[16];
} CUuuid;

/* cuMemCreate's description of an allocation. */
typedef struct {
  int type; /* CUmemLocationType: 1 = device */
  int id;   /* the device ordinal */
} CUmemLocation;
typedef struct {
  int type;                 /* CUmemAllocationType: 1 = pinned */
  int requestedHandleTypes; /* CUmemAllocationHandleType */
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
enum { CU_MEM_LOCATION_TYPE_DEVICE = 1 };

/* Arrays: their size follows from the descriptor. */
enum {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20
};
typedef struct {
  size_t Width;
  size_t Height;
  int Format; /* CUarray_format */
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
/* The 32-bit descriptor of the legacy cuArrayCreate (before CUDA 3.2). */
typedef struct {
  unsigned int Width;
  unsigned int Height;
  int Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct {
  unsigned int Width;
  unsigned int Height;
  unsigned int Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;
typedef struct {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* cuLaunchKernelEx's configuration. */
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

/* cuGetProcAddress. */
enum {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2
};
typedef int CUdriverProcAddressQueryResult;
enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
};

/* The entry points, as function pointer types (the _t names are ours). */
typedef CUresult (*cuInit_t)(unsigned int flags);
typedef CUresult (*cuDriverGetVersion_t)(int* version);
typedef CUresult (*cuDeviceGetCount_t)(int* count);
typedef CUresult (*cuDeviceGet_t)(CUdevice* device, int ordinal);
typedef CUresult (*cuDeviceGetUuid_t)(CUuuid* uuid, CUdevice dev);
typedef CUresult (*cuDeviceTotalMem_v2_t)(size_t* bytes, CUdevice dev);
typedef CUresult (*cuCtxGetDevice_t)(CUdevice* device);
typedef CUresult (*cuCtxSynchronize_t)(void);
typedef CUresult (*cuDevicePrimaryCtxRetain_t)(CUcontext* ctx, CUdevice dev);
typedef CUresult (*cuCtxSetCurrent_t)(CUcontext ctx);
typedef CUresult (*cuStreamSynchronize_t)(CUstream stream);
typedef CUresult (*cuMemGetInfo_v2_t)(size_t* free_bytes, size_t* total_bytes);
typedef CUresult (*cuMemAlloc_v2_t)(CUdeviceptr* dptr, size_t bytesize);
typedef CUresult (*cuMemAllocPitch_v2_t)(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                         size_t height, unsigned int element_size_bytes);
typedef CUresult (*cuMemAllocManaged_t)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
typedef CUresult (*cuMemAllocAsync_t)(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
typedef CUresult (*cuMemAllocFromPoolAsync_t)(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream stream);
typedef CUresult (*cuMemFree_v2_t)(CUdeviceptr dptr);
/* The legacy (before CUDA 3.2) 32-bit entry points, still exported. */
typedef CUresult (*cuMemAlloc_t)(unsigned int* dptr, unsigned int bytesize);
typedef CUresult (*cuMemAllocPitch_t)(unsigned int* dptr, unsigned int* pitch,
                                      unsigned int width_bytes, unsigned int height,
                                      unsigned int element_size_bytes);
typedef CUresult (*cuMemFree_t)(unsigned int dptr);
typedef CUresult (*cuMemGetInfo_t)(unsigned int* free_bytes, unsigned int* total_bytes);
typedef CUresult (*cuDeviceTotalMem_t)(unsigned int* bytes, CUdevice dev);
typedef CUresult (*cuArrayCreate_t)(CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* desc);
typedef CUresult (*cuArray3DCreate_t)(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc);
typedef CUresult (*cuMemFreeAsync_t)(CUdeviceptr dptr, CUstream stream);
typedef CUresult (*cuMemCreate_t)(CUmemGenericAllocationHandle* handle, size_t size,
                                  const CUmemAllocationProp* prop, unsigned long long flags);
typedef CUresult (*cuMemRelease_t)(CUmemGenericAllocationHandle handle);
typedef CUresult (*cuArrayCreate_v2_t)(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc);
typedef CUresult (*cuArray3DCreate_v2_t)(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc);
typedef CUresult (*cuArrayDestroy_t)(CUarray array);
typedef CUresult (*cuLaunchKernel_t)(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                     unsigned int grid_z, unsigned int block_x,
                                     unsigned int block_y, unsigned int block_z,
                                     unsigned int shared_mem_bytes, CUstream stream,
                                     void** kernel_params, void** extra);
typedef CUresult (*cuLaunchKernelEx_t)(const CUlaunchConfig* config, CUfunction f,
                                       void** kernel_params, void** extra);
typedef CUresult (*cuLaunchCooperativeKernel_t)(CUfunction f, unsigned int grid_x,
                                                unsigned int grid_y, unsigned int grid_z,
                                                unsigned int block_x, unsigned int block_y,
                                                unsigned int block_z, unsigned int shared_mem_bytes,
                                                CUstream stream, void** kernel_params);
typedef CUresult (*cuGetProcAddress_t)(const char* symbol, void** pfn, int cuda_version,
                                       cuuint64_t flags);
typedef CUresult (*cuGetProcAddress_v2_t)(const char* symbol, void** pfn, int cuda_version,
                                          cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* symbol_status);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_GPUSHARE_CUDA_ABI_H_ */
