// Tests of the fake libcuda.so.1 (tests/fake_cuda/fake_cuda.cpp), loaded
// afresh by path with dlopen for every test, with its own device file and
// state directory. Checks that need other processes fork; a child reports a
// failed check on stderr and through its exit status.

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpushare/cuda_abi.h"

namespace {

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;
const char* const kUuid0 = "GPU-00112233-4455-6677-8899-aabbccddeeff";
const char* const kUuid1 = "GPU-11110000-2222-3333-4444-555555555555";
const char* const kUuid2 = "GPU-11119999-2222-3333-4444-555555555555";
const char* const kOddUuid = "not-a-gpu-uuid";

#define CHILD_CHECK(cond)                                                                         \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "child %d: check failed at line %d: %s\n", getpid(), __LINE__, #cond); \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

// The entry points the tests call, resolved with dlsym.
struct Api {
  cuInit_t cuInit;
  cuDriverGetVersion_t cuDriverGetVersion;
  cuDeviceGetCount_t cuDeviceGetCount;
  cuDeviceGet_t cuDeviceGet;
  cuDeviceGetUuid_t cuDeviceGetUuid;
  cuDeviceGetUuid_t cuDeviceGetUuid_v2;
  cuDeviceTotalMem_v2_t cuDeviceTotalMem_v2;
  cuDevicePrimaryCtxRetain_t cuDevicePrimaryCtxRetain;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  cuCtxSetCurrent_t cuCtxSetCurrent;
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  cuCtxGetDevice_t cuCtxGetDevice;
  cuCtxSynchronize_t cuCtxSynchronize;
  cuStreamSynchronize_t cuStreamSynchronize;
  cuMemGetInfo_v2_t cuMemGetInfo_v2;
  CUresult (*cuMemGetInfo)(unsigned int*, unsigned int*);
  cuMemAlloc_v2_t cuMemAlloc_v2;
  CUresult (*cuMemAlloc)(unsigned int*, unsigned int);
  cuMemAllocPitch_v2_t cuMemAllocPitch_v2;
  CUresult (*cuMemAllocPitch)(unsigned int*, unsigned int*, unsigned int, unsigned int,
                              unsigned int);
  cuMemAllocManaged_t cuMemAllocManaged;
  cuMemAllocAsync_t cuMemAllocAsync;
  cuMemAllocAsync_t cuMemAllocAsync_ptsz;
  cuMemAllocFromPoolAsync_t cuMemAllocFromPoolAsync;
  cuMemAllocFromPoolAsync_t cuMemAllocFromPoolAsync_ptsz;
  cuMemFree_v2_t cuMemFree_v2;
  CUresult (*cuMemFree)(unsigned int);
  cuMemFreeAsync_t cuMemFreeAsync;
  cuMemFreeAsync_t cuMemFreeAsync_ptsz;
  cuMemCreate_t cuMemCreate;
  cuMemRelease_t cuMemRelease;
  cuArrayCreate_v2_t cuArrayCreate_v2;
  cuArray3DCreate_v2_t cuArray3DCreate_v2;
  CUresult (*cuArrayCreate)(CUarray*, const void*);
  cuArrayDestroy_t cuArrayDestroy;
  cuLaunchKernel_t cuLaunchKernel;
  cuLaunchKernel_t cuLaunchKernel_ptsz;
  cuLaunchKernelEx_t cuLaunchKernelEx;
  cuLaunchCooperativeKernel_t cuLaunchCooperativeKernel;
  cuGetProcAddress_t cuGetProcAddress;
  cuGetProcAddress_v2_t cuGetProcAddress_v2;
  unsigned long long (*fakeCudaUsedBytes)(const char*);
  unsigned long long (*fakeCudaProcessUsedBytes)(const char*, int);
  unsigned long long (*fakeCudaBusyMicros)(const char*, int);
  void (*fakeCudaReset)(void);
  CUresult (*fakeCudaGetFunction)(CUfunction*);
};

// cuArrayCreate's original descriptor, with 32-bit sizes.
struct ArrayDescriptorV1 {
  unsigned int Width, Height;
  int Format;
  unsigned int NumChannels;
};

// Runs `body` in a forked child; answers its exit status (-1: no normal exit).
int RunInChild(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/fake_cuda_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    nlohmann::json devices = nlohmann::json::array();
    devices.push_back({{"uuid", kUuid0}, {"memory_total_mib", 1024}, {"name", "A"}});
    devices.push_back({{"uuid", kUuid1}, {"memory_total_mib", 2048}, {"name", "B"}});
    devices.push_back({{"uuid", kUuid2}, {"memory_total_mib", 512}, {"name", "C"}});
    devices.push_back({{"uuid", kOddUuid}, {"memory_total_mib", 256}, {"name", "D"}});
    std::ofstream(dir_ + "/nvml.json") << nlohmann::json{{"devices", devices}}.dump();
    setenv("FAKE_NVML_CONFIG", (dir_ + "/nvml.json").c_str(), 1);
    setenv("FAKE_CUDA_STATE_DIR", (dir_ + "/state").c_str(), 1);
    unsetenv("CUDA_VISIBLE_DEVICES");

    handle_ = dlopen(FAKE_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
#define LOAD(name)                                                          \
  api_.name = reinterpret_cast<decltype(api_.name)>(dlsym(handle_, #name)); \
  ASSERT_NE(api_.name, nullptr) << #name;
    LOAD(cuInit)
    LOAD(cuDriverGetVersion)
    LOAD(cuDeviceGetCount)
    LOAD(cuDeviceGet)
    LOAD(cuDeviceGetUuid) LOAD(cuDeviceGetUuid_v2) LOAD(cuDeviceTotalMem_v2)
        LOAD(cuDevicePrimaryCtxRetain) LOAD(cuDevicePrimaryCtxRelease) LOAD(cuCtxSetCurrent) LOAD(
            cuCtxGetCurrent) LOAD(cuCtxGetDevice) LOAD(cuCtxSynchronize) LOAD(cuStreamSynchronize)
            LOAD(cuMemGetInfo_v2) LOAD(cuMemGetInfo) LOAD(cuMemAlloc_v2) LOAD(cuMemAlloc)
                LOAD(cuMemAllocPitch_v2) LOAD(cuMemAllocPitch) LOAD(cuMemAllocManaged)
                    LOAD(cuMemAllocAsync) LOAD(cuMemAllocAsync_ptsz) LOAD(cuMemAllocFromPoolAsync)
                        LOAD(cuMemAllocFromPoolAsync_ptsz) LOAD(cuMemFree_v2) LOAD(cuMemFree)
                            LOAD(cuMemFreeAsync) LOAD(cuMemFreeAsync_ptsz) LOAD(cuMemCreate)
                                LOAD(cuMemRelease) LOAD(cuArrayCreate_v2) LOAD(cuArray3DCreate_v2)
                                    LOAD(cuArrayCreate) LOAD(cuArrayDestroy) LOAD(cuLaunchKernel)
                                        LOAD(cuLaunchKernel_ptsz) LOAD(cuLaunchKernelEx)
                                            LOAD(cuLaunchCooperativeKernel) LOAD(cuGetProcAddress)
                                                LOAD(cuGetProcAddress_v2) LOAD(fakeCudaUsedBytes)
                                                    LOAD(fakeCudaProcessUsedBytes)
                                                        LOAD(fakeCudaBusyMicros) LOAD(fakeCudaReset)
                                                            LOAD(fakeCudaGetFunction)
#undef LOAD
  }

  void TearDown() override {
    if (handle_ != nullptr) dlclose(handle_);
    unsetenv("CUDA_VISIBLE_DEVICES");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The UUIDs of the visible devices, by ordinal, as bytes.
  std::vector<std::string> VisibleUuids() {
    int count = 0;
    if (api_.cuDeviceGetCount(&count) != CUDA_SUCCESS) return {};
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
      CUuuid id;
      EXPECT_EQ(api_.cuDeviceGetUuid(&id, i), CUDA_SUCCESS);
      out.emplace_back(id.bytes, 16);
    }
    return out;
  }

  std::string UuidOf(CUdevice dev) {
    CUuuid id;
    EXPECT_EQ(api_.cuDeviceGetUuid(&id, dev), CUDA_SUCCESS);
    return std::string(id.bytes, 16);
  }

  unsigned long long Own(const char* uuid) { return api_.fakeCudaProcessUsedBytes(uuid, getpid()); }

  std::string dir_;
  void* handle_ = nullptr;
  Api api_{};
};

TEST_F(FakeCudaTest, EntryPointsNeedCuInit) {
  CUdeviceptr ptr = 0;
  int count = 0;
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(api_.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(api_.cuMemAlloc_v2(&ptr, 16), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(api_.cuMemGetInfo_v2(&free_bytes, &total), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(api_.cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
  CUfunction f = nullptr;
  ASSERT_EQ(api_.fakeCudaGetFunction(&f), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_NOT_INITIALIZED);
  // As in the real driver, these work before cuInit.
  int version = 0;
  EXPECT_EQ(api_.cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 12040);
  void* pfn = nullptr;
  EXPECT_EQ(api_.cuGetProcAddress("cuInit", &pfn, 12040, 0), CUDA_SUCCESS);
  EXPECT_EQ(pfn, reinterpret_cast<void*>(api_.cuInit));
  EXPECT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuDeviceGetCount(&count), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, NoConfigMeansNoDevice) {
  unsetenv("FAKE_NVML_CONFIG");
  EXPECT_EQ(api_.cuInit(0), CUDA_ERROR_NO_DEVICE);
  setenv("FAKE_NVML_CONFIG", (dir_ + "/missing.json").c_str(), 1);
  EXPECT_EQ(api_.cuInit(0), CUDA_ERROR_NO_DEVICE);
  int count = 0;
  EXPECT_EQ(api_.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
}

TEST_F(FakeCudaTest, DevicesComeFromTheConfig) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(api_.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 4);
  CUdevice dev = -1;
  EXPECT_EQ(api_.cuDeviceGet(&dev, 3), CUDA_SUCCESS);
  EXPECT_EQ(dev, 3);
  EXPECT_EQ(api_.cuDeviceGet(&dev, 4), CUDA_ERROR_INVALID_DEVICE);
  size_t total = 0;
  EXPECT_EQ(api_.cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, 2048 * kMiB);
  EXPECT_EQ(api_.cuDeviceTotalMem_v2(&total, 4), CUDA_ERROR_INVALID_DEVICE);

  CUuuid id;
  ASSERT_EQ(api_.cuDeviceGetUuid(&id, 0), CUDA_SUCCESS);
  const unsigned char expected[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                      0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  EXPECT_EQ(std::memcmp(id.bytes, expected, 16), 0);
  CUuuid v2;
  ASSERT_EQ(api_.cuDeviceGetUuid_v2(&v2, 0), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(id.bytes, v2.bytes, 16), 0);

  // An unparseable UUID is hashed: stable, and unlike the others.
  std::string odd = UuidOf(3);
  EXPECT_NE(odd, std::string(16, '\0'));
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(UuidOf(3), odd);
  EXPECT_EQ(std::set<std::string>({UuidOf(0), UuidOf(1), UuidOf(2), odd}).size(), 4u);
}

TEST_F(FakeCudaTest, CudaVisibleDevicesFiltersAndOrders) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  const std::vector<std::string> all = VisibleUuids();
  ASSERT_EQ(all.size(), 4u);
  struct Case {
    const char* env;
    std::vector<int> expected;  // positions in the file
  };
  const std::vector<Case> cases = {
      {"1,0", {1, 0}},
      {"2,7,0", {2}},              // 7 is invalid and ends the list
      {"0,abc,1", {0}},            //
      {"1,1,2", {1}},              // a repeat ends it too
      {"GPU-00112233", {0}},       // a unique prefix
      {"GPU-11119999,0", {2, 0}},  //
      {"3,GPU-1111,0", {3}},       // an ambiguous prefix is invalid
      {kUuid1, {1}},               // the whole UUID
      {"-1", {}},                  //
      {"", {}},                    // empty: none
  };
  for (const Case& c : cases) {
    setenv("CUDA_VISIBLE_DEVICES", c.env, 1);
    std::vector<std::string> expected;
    for (int i : c.expected) expected.push_back(all[i]);
    EXPECT_EQ(api_.cuInit(0), expected.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS) << c.env;
    EXPECT_EQ(VisibleUuids(), expected) << "CUDA_VISIBLE_DEVICES=" << c.env;
  }

  // In a child that sees device 1 as ordinal 0, its memory counts on device
  // 1's UUID.
  int status = RunInChild([&] {
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    CHILD_CHECK(api_.cuInit(0) == CUDA_SUCCESS);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(api_.cuMemAlloc_v2(&ptr, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(api_.fakeCudaProcessUsedBytes(kUuid1, getpid()) == 4096);
    CHILD_CHECK(api_.fakeCudaUsedBytes(kUuid0) == 0);
    return 0;
  });
  EXPECT_EQ(status, 0);
}

TEST_F(FakeCudaTest, EveryAllocationPathCountsAndFreesRelease) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  std::set<unsigned long long> seen;
  auto fresh = [&](unsigned long long p) { return p != 0 && seen.insert(p).second; };
  auto check = [&](const char* what, CUresult alloc, unsigned long long expected,
                   const std::function<CUresult()>& free) {
    SCOPED_TRACE(what);
    ASSERT_EQ(alloc, CUDA_SUCCESS);
    EXPECT_EQ(Own(kUuid0), expected);
    EXPECT_EQ(api_.fakeCudaUsedBytes(kUuid0), expected);
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(api_.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
    EXPECT_EQ(total, 1024 * kMiB);
    EXPECT_EQ(free_bytes, total - expected);
    EXPECT_EQ(free(), CUDA_SUCCESS);
    EXPECT_EQ(api_.fakeCudaUsedBytes(kUuid0), 0u);
  };
  CUdeviceptr p = 0;
  unsigned int p32 = 0;
  size_t pitch = 0;
  check("cuMemAlloc_v2", api_.cuMemAlloc_v2(&p, 1000), 1000, [&] { return api_.cuMemFree_v2(p); });
  EXPECT_TRUE(fresh(p));
  check("cuMemAlloc", api_.cuMemAlloc(&p32, 3000), 3000, [&] { return api_.cuMemFree(p32); });
  EXPECT_TRUE(fresh(p32));
  check("cuMemAllocPitch_v2", api_.cuMemAllocPitch_v2(&p, &pitch, 1000, 3, 4), 1024 * 3,
        [&] { return api_.cuMemFree_v2(p); });
  EXPECT_EQ(pitch, 1024u);
  EXPECT_TRUE(fresh(p));
  unsigned int pitch32 = 0;
  check("cuMemAllocPitch", api_.cuMemAllocPitch(&p32, &pitch32, 512, 2, 4), 1024,
        [&] { return api_.cuMemFree_v2(p32); });
  EXPECT_EQ(pitch32, 512u);
  EXPECT_TRUE(fresh(p32));
  check("cuMemAllocManaged", api_.cuMemAllocManaged(&p, 5000, 1), 5000,
        [&] { return api_.cuMemFreeAsync(p, nullptr); });
  EXPECT_TRUE(fresh(p));
  check("cuMemAllocAsync", api_.cuMemAllocAsync(&p, 6000, nullptr), 6000,
        [&] { return api_.cuMemFreeAsync_ptsz(p, nullptr); });
  EXPECT_TRUE(fresh(p));
  check("cuMemAllocAsync_ptsz", api_.cuMemAllocAsync_ptsz(&p, 7000, nullptr), 7000,
        [&] { return api_.cuMemFree_v2(p); });
  EXPECT_TRUE(fresh(p));
  check("cuMemAllocFromPoolAsync", api_.cuMemAllocFromPoolAsync(&p, 8000, nullptr, nullptr), 8000,
        [&] { return api_.cuMemFree_v2(p); });
  EXPECT_TRUE(fresh(p));
  check("cuMemAllocFromPoolAsync_ptsz",
        api_.cuMemAllocFromPoolAsync_ptsz(&p, 9000, nullptr, nullptr), 9000,
        [&] { return api_.cuMemFree_v2(p); });
  EXPECT_TRUE(fresh(p));

  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{10, 0, CU_AD_FORMAT_FLOAT, 4};  // 10 * 1 * 4 channels * 4
  check("cuArrayCreate_v2", api_.cuArrayCreate_v2(&array, &desc), 160,
        [&] { return api_.cuArrayDestroy(array); });
  CUDA_ARRAY3D_DESCRIPTOR desc3{8, 4, 2, CU_AD_FORMAT_HALF, 2, 0};  // 8*4*2 * 2 * 2
  check("cuArray3DCreate_v2", api_.cuArray3DCreate_v2(&array, &desc3), 256,
        [&] { return api_.cuArrayDestroy(array); });
  ArrayDescriptorV1 desc1{100, 2, CU_AD_FORMAT_SIGNED_INT8, 1};
  check("cuArrayCreate", api_.cuArrayCreate(&array, &desc1), 200,
        [&] { return api_.cuArrayDestroy(array); });
  CUDA_ARRAY_DESCRIPTOR desc16{3, 5, CU_AD_FORMAT_UNSIGNED_INT16, 2};
  check("16-bit array", api_.cuArrayCreate_v2(&array, &desc16), 60,
        [&] { return api_.cuArrayDestroy(array); });

  // cuMemCreate takes the device from the properties, not the context.
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(api_.cuMemCreate(&handle, 2 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(Own(kUuid1), 2 * kMiB);
  EXPECT_EQ(Own(kUuid0), 0u);
  EXPECT_EQ(api_.cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(Own(kUuid1), 0u);
  prop.location.id = 9;
  EXPECT_EQ(api_.cuMemCreate(&handle, 2 * kMiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(FakeCudaTest, BadFreesAndSizesAreInvalid) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(api_.cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api_.cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuMemRelease(p), CUDA_ERROR_INVALID_VALUE);  // not a cuMemCreate handle
  EXPECT_EQ(api_.cuArrayDestroy(reinterpret_cast<CUarray>(p)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_.cuMemFree_v2(p + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_.cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api_.fakeCudaUsedBytes(kUuid0), 0u);
}

TEST_F(FakeCudaTest, AllocationsPastTheTotalFail) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(api_.cuMemAlloc_v2(&a, 1000 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuMemAlloc_v2(&b, 100 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api_.cuMemAlloc_v2(&b, 24 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuMemAlloc_v2(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{1, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1};
  EXPECT_EQ(api_.cuArrayCreate_v2(&array, &desc), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free_bytes = 1, total = 0;
  EXPECT_EQ(api_.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, 0u);
  unsigned int free32 = 1, total32 = 0;
  EXPECT_EQ(api_.cuMemGetInfo(&free32, &total32), CUDA_SUCCESS);
  EXPECT_EQ(free32, 0u);
  EXPECT_EQ(total32, 1024 * kMiB);
  EXPECT_EQ(api_.cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuMemAlloc_v2(&c, 1000 * kMiB), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, TheCurrentContextIsPerThread) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  std::thread([&] {
    CUcontext ctx = nullptr;
    ASSERT_EQ(api_.cuDevicePrimaryCtxRetain(&ctx, 1), CUDA_SUCCESS);
    ASSERT_EQ(api_.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CUcontext got = nullptr;
    EXPECT_EQ(api_.cuCtxGetCurrent(&got), CUDA_SUCCESS);
    EXPECT_EQ(got, ctx);
    CUdevice dev = -1;
    EXPECT_EQ(api_.cuCtxGetDevice(&dev), CUDA_SUCCESS);
    EXPECT_EQ(dev, 1);
    CUdeviceptr p = 0;
    EXPECT_EQ(api_.cuMemAlloc_v2(&p, 1500 * kMiB), CUDA_SUCCESS);  // more than device 0 has
    EXPECT_EQ(api_.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  }).join();
  EXPECT_EQ(Own(kUuid1), 1500 * kMiB);
  CUdevice dev = -1;
  EXPECT_EQ(api_.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);  // the default: device 0's primary context
  CUdeviceptr p = 0;
  EXPECT_EQ(api_.cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Own(kUuid0), kMiB);

  CUcontext ctx2 = nullptr;
  ASSERT_EQ(api_.cuDevicePrimaryCtxRetain(&ctx2, 2), CUDA_SUCCESS);
  ASSERT_EQ(api_.cuCtxSetCurrent(ctx2), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 2);
  ASSERT_EQ(api_.cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  int not_a_context = 0;
  EXPECT_EQ(api_.cuCtxSetCurrent(reinterpret_cast<CUcontext>(&not_a_context)),
            CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(FakeCudaTest, ProcessesShareADeviceAndExitReleasesMemory) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  CUdeviceptr mine = 0;
  ASSERT_EQ(api_.cuMemAlloc_v2(&mine, 400 * kMiB), CUDA_SUCCESS);
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Device 0 is ordinal 1 here; the child keeps its memory when it exits.
    auto body = [&] {
      setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
      CHILD_CHECK(api_.cuInit(0) == CUDA_SUCCESS);
      CHILD_CHECK(api_.fakeCudaProcessUsedBytes(kUuid0, getpid()) == 0);  // not the parent's
      CHILD_CHECK(api_.cuMemFree_v2(mine) == CUDA_ERROR_INVALID_VALUE);
      CUcontext ctx = nullptr;
      CHILD_CHECK(api_.cuDevicePrimaryCtxRetain(&ctx, 1) == CUDA_SUCCESS);
      CHILD_CHECK(api_.cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
      CUdeviceptr p = 0;
      CHILD_CHECK(api_.cuMemAlloc_v2(&p, 700 * kMiB) == CUDA_ERROR_OUT_OF_MEMORY);
      CHILD_CHECK(api_.cuMemAlloc_v2(&p, 500 * kMiB) == CUDA_SUCCESS);
      char byte = 'r';
      CHILD_CHECK(write(ready[1], &byte, 1) == 1);
      CHILD_CHECK(read(go[0], &byte, 1) == 1);
      return 0;
    };
    _exit(body());
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  EXPECT_EQ(api_.fakeCudaUsedBytes(kUuid0), 900 * kMiB);
  EXPECT_EQ(api_.fakeCudaProcessUsedBytes(kUuid0, child), 500 * kMiB);
  CUdeviceptr p = 0;
  EXPECT_EQ(api_.cuMemAlloc_v2(&p, 200 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(api_.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, 124 * kMiB);

  // The child exits without freeing; its memory is gone even before it is
  // reaped (a zombie holds none).
  ASSERT_EQ(write(go[1], &byte, 1), 1);
  auto start = std::chrono::steady_clock::now();
  while (api_.fakeCudaUsedBytes(kUuid0) != 400 * kMiB && SecondsSince(start) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(api_.fakeCudaUsedBytes(kUuid0), 400 * kMiB);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(api_.fakeCudaProcessUsedBytes(kUuid0, child), 0u);
  EXPECT_EQ(api_.cuMemAlloc_v2(&p, 600 * kMiB), CUDA_SUCCESS);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

TEST_F(FakeCudaTest, GetProcAddressResolvesVersionedExports) {
  struct Case {
    const char* symbol;
    int version;
    int flags;
    const char* expected;
  };
  const Case cases[] = {
      {"cuMemAlloc", 3010, 0, "cuMemAlloc"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 12040, 2, "cuMemAlloc_v2"},  // no per-thread twin
      {"cuMemGetInfo", 2000, 0, "cuMemGetInfo"},
      {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2"},
      {"cuDeviceTotalMem", 3000, 0, "cuDeviceTotalMem"},
      {"cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"},
      {"cuMemFree", 3010, 0, "cuMemFree"},
      {"cuMemFree", 11000, 0, "cuMemFree_v2"},
      {"cuMemAllocPitch", 3000, 0, "cuMemAllocPitch"},
      {"cuMemAllocPitch", 3020, 0, "cuMemAllocPitch_v2"},
      {"cuArrayCreate", 3010, 0, "cuArrayCreate"},
      {"cuArrayCreate", 3020, 0, "cuArrayCreate_v2"},
      {"cuArray3DCreate", 3020, 0, "cuArray3DCreate_v2"},
      {"cuDeviceGetUuid", 11030, 0, "cuDeviceGetUuid"},
      {"cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2"},
      {"cuGetProcAddress", 11080, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuLaunchKernel", 12040, 0, "cuLaunchKernel"},
      {"cuLaunchKernel", 12040, 1, "cuLaunchKernel"},
      {"cuLaunchKernel", 12040, 2, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", 11080, 2, "cuLaunchKernelEx_ptsz"},
      {"cuLaunchCooperativeKernel", 12040, 2, "cuLaunchCooperativeKernel_ptsz"},
      {"cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"},
      {"cuMemAllocFromPoolAsync", 11020, 2, "cuMemAllocFromPoolAsync_ptsz"},
      {"cuMemFreeAsync", 11020, 0, "cuMemFreeAsync"},
      {"cuMemFreeAsync", 11020, 2, "cuMemFreeAsync_ptsz"},
      {"cuStreamSynchronize", 12040, 2, "cuStreamSynchronize_ptsz"},
      {"cuMemCreate", 10020, 0, "cuMemCreate"},
      {"cuCtxGetCurrent", 12040, 0, "cuCtxGetCurrent"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.symbol) + " " + std::to_string(c.version) + " flags " +
                 std::to_string(c.flags));
    void* want = dlsym(handle_, c.expected);
    ASSERT_NE(want, nullptr);
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status = -1;
    EXPECT_EQ(api_.cuGetProcAddress_v2(c.symbol, &pfn, c.version, c.flags, &status), CUDA_SUCCESS);
    EXPECT_EQ(pfn, want);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    pfn = nullptr;
    EXPECT_EQ(api_.cuGetProcAddress(c.symbol, &pfn, c.version, c.flags), CUDA_SUCCESS);
    EXPECT_EQ(pfn, want);
  }

  const Case too_old[] = {{"cuLaunchKernelEx", 11070, 0, nullptr},
                          {"cuMemAllocAsync", 11010, 2, nullptr},
                          {"cuMemCreate", 10010, 0, nullptr},
                          {"cuGetProcAddress", 11020, 0, nullptr},
                          {"cuDeviceGetUuid", 9010, 0, nullptr}};
  for (const Case& c : too_old) {
    SCOPED_TRACE(c.symbol);
    void* pfn = &pfn;
    CUdriverProcAddressQueryResult status = -1;
    EXPECT_EQ(api_.cuGetProcAddress_v2(c.symbol, &pfn, c.version, c.flags, &status),
              CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(pfn, nullptr);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  }
  for (const char* unknown : {"cuNoSuchFunction", "cuMemAlloc_v2", ""}) {
    void* pfn = &pfn;
    CUdriverProcAddressQueryResult status = -1;
    EXPECT_EQ(api_.cuGetProcAddress_v2(unknown, &pfn, 12040, 0, &status), CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(pfn, nullptr);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT_EQ(api_.cuGetProcAddress(unknown, &pfn, 12040, 0), CUDA_ERROR_NOT_FOUND);
  }

  // What it hands out works.
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  void* pfn = nullptr;
  ASSERT_EQ(api_.cuGetProcAddress("cuMemAlloc", &pfn, 12040, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(reinterpret_cast<cuMemAlloc_v2_t>(pfn)(&p, 77), CUDA_SUCCESS);
  EXPECT_EQ(Own(kUuid0), 77u);
}

TEST_F(FakeCudaTest, LaunchesReserveDeviceTimeAndSynchronizeWaits) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(api_.fakeCudaGetFunction(&f), CUDA_SUCCESS);
  EXPECT_EQ(api_.cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api_.cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);

  // 200 ms in one kernel: grid 200 x 1000 x 1, block dims ignored.
  auto start = std::chrono::steady_clock::now();
  CUlaunchConfig config{};
  config.gridDimX = 200;
  config.gridDimY = 1000;
  config.gridDimZ = 1;
  config.blockDimX = 1024;
  ASSERT_EQ(api_.cuLaunchKernelEx(&config, f, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, getpid()), 200000u);
  ASSERT_EQ(api_.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_GE(SecondsSince(start), 0.2);

  // The launch queue holds 50 ms: the 40th kernel of 10 ms waits until the
  // 39 before it (390 ms) are within 50 ms of done.
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(api_.cuLaunchCooperativeKernel(f, 10, 10, 100, 32, 1, 1, 0, nullptr, nullptr),
              CUDA_SUCCESS);
  }
  EXPECT_GE(SecondsSince(start), 0.34);
  ASSERT_EQ(api_.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(SecondsSince(start), 0.4);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, getpid()), 600000u);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid1, 0), 0u);

  // Another process's work on the device comes first: the child's 300 ms
  // kernel and then ours end at least 600 ms after the child began.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  start = std::chrono::steady_clock::now();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte = 'r';
    bool ok = api_.cuLaunchKernel(f, 300, 1000, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) ==
                  CUDA_SUCCESS &&
              write(ready[1], &byte, 1) == 1 && api_.cuCtxSynchronize() == CUDA_SUCCESS;
    _exit(ok ? 0 : 1);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(api_.cuLaunchKernel_ptsz(f, 300, 1000, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(api_.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_GE(SecondsSince(start), 0.6);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, child), 300000u);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, 0), 1200000u);  // kept after the child exited
  close(ready[0]);
  close(ready[1]);
}

TEST_F(FakeCudaTest, AThrottledProcessGetsLessDeviceTime) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  auto launcher = [&](bool throttled) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    close(go[1]);
    char byte;
    if (read(go[0], &byte, 1) != 0) _exit(2);  // waits for the parent to close it
    CUfunction f = nullptr;
    if (api_.fakeCudaGetFunction(&f) != CUDA_SUCCESS) _exit(3);
    auto start = std::chrono::steady_clock::now();
    while (SecondsSince(start) < 1.0) {
      if (api_.cuLaunchKernel(f, 1000, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr) !=
          CUDA_SUCCESS) {
        _exit(4);
      }
      if (throttled) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    _exit(api_.cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 5);
  };
  pid_t greedy = launcher(false);
  pid_t throttled = launcher(true);
  ASSERT_GT(greedy, 0);
  ASSERT_GT(throttled, 0);
  close(go[0]);
  close(go[1]);
  for (pid_t pid : {greedy, throttled}) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  unsigned long long a = api_.fakeCudaBusyMicros(kUuid0, greedy);
  unsigned long long b = api_.fakeCudaBusyMicros(kUuid0, throttled);
  std::printf("device time: greedy %llu us, throttled %llu us\n", a, b);
  EXPECT_EQ(a % 1000, 0u);
  EXPECT_GT(b, 0u);
  EXPECT_GT(a, b * 3 / 2);  // about 2:1: the throttled one launches at most every 3 ms
  EXPECT_GE(a, 300000u);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, 0), a + b);
}

TEST_F(FakeCudaTest, ResetForgetsEverything) {
  ASSERT_EQ(api_.cuInit(0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api_.cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(api_.fakeCudaGetFunction(&f), CUDA_SUCCESS);
  ASSERT_EQ(api_.cuLaunchKernel(f, 5, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, 0), 5u);
  api_.fakeCudaReset();
  EXPECT_EQ(api_.fakeCudaUsedBytes(kUuid0), 0u);
  EXPECT_EQ(api_.fakeCudaBusyMicros(kUuid0, 0), 0u);
  EXPECT_EQ(api_.cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/state"));
}

}  // namespace
