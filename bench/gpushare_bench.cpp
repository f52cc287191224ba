// What libgpushare.so adds to a driver call (docs/performance.md, "GPU
// shares"): cuLaunchKernel and cuMemAlloc_v2 + cuMemFree_v2 called straight
// on the fake driver (tests/fake_cuda) against the same calls through the
// interposer's wrappers, in one process preloaded with the library as a
// job is:
//
//   LD_PRELOAD=build/lib/libgpushare.so gpupool-gpushare-bench
//       --driver build/tests/fake_cuda/libcuda.so.1 [benchmark flags]
//
// --driver build/bench/null_cuda/libcuda.so.1 is a driver that returns at
// once (bench/null_cuda.c): against it the difference is the wrappers' own
// cost, which the fake driver's variation (its state files) would hide.
//
// dlsym on the driver hands out the wrappers (that is the interposer at
// work); glibc's own dlsym, found by version, the driver's functions.
//
// With the fake, the launch is one it refuses after its cheapest checks (a
// grid of 0), and the allocation pair goes through its shared state files
// (tens of microseconds); the capped wrapper adds its ledger's lock and
// records.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <benchmark/benchmark.h>

#include "gpushare/cuda_abi.h"

namespace {

struct Driver {
  cuLaunchKernel_t launch = nullptr;
  cuMemAlloc_v2_t alloc = nullptr;
  cuMemFree_v2_t free = nullptr;
};

Driver direct, wrapped;
CUfunction kernel = nullptr;
unsigned grid_x = 0;  // the fake refuses a grid of 0 cheaply; the null driver takes 1

void* Need(void* handle, const char* name, bool own = false) {
  using dlsym_t = void* (*)(void*, const char*);
  static auto glibc_dlsym = reinterpret_cast<dlsym_t>(dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
  void* f = own && glibc_dlsym != nullptr ? glibc_dlsym(handle, name) : dlsym(handle, name);
  if (f == nullptr) {
    std::fprintf(stderr, "gpushare-bench: %s not found\n", name);
    std::exit(2);
  }
  return f;
}

void Launch(benchmark::State& state, const Driver& d) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(d.launch(kernel, grid_x, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  }
}

void AllocFree(benchmark::State& state, const Driver& d) {
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (d.alloc(&p, 1 << 20) != CUDA_SUCCESS) state.SkipWithError("allocation refused");
    d.free(p);
  }
}

BENCHMARK_CAPTURE(Launch, driver_alone, direct);
BENCHMARK_CAPTURE(Launch, through_gpushare, wrapped);
BENCHMARK_CAPTURE(AllocFree, driver_alone, direct);
BENCHMARK_CAPTURE(AllocFree, through_gpushare_capped, wrapped);

// --name PATH from argv, removed from it.
std::string TakeFlag(int& argc, char** argv, const std::string& name) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) {
      std::string v = argv[i + 1];
      for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      return v;
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::string fake = TakeFlag(argc, argv, "--driver");
  if (fake.empty()) {
    std::fprintf(stderr, "usage: LD_PRELOAD=libgpushare.so gpupool-gpushare-bench --driver LIB\n");
    return 2;
  }
  // One simulated GPU, a 64 GiB cap and a ledger, in a scratch directory.
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("gpushare-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir / "state");
  std::ofstream(dir / "gpus.json") << R"({"devices": [{"name": "A100", "memory_total_mib": 81920,)"
                                      R"( "uuid": "GPU-11111111-2222-3333-4444-555555555555"}]})";
  std::ofstream(dir / "usage") << "";
  std::ofstream(dir / "limits") << "gpushare 1\nmemory_bytes " << (64LL << 30) << "\nusage "
                                << (dir / "usage").string() << "\n";
  ::setenv("FAKE_NVML_CONFIG", (dir / "gpus.json").c_str(), 1);
  ::setenv("FAKE_CUDA_STATE_DIR", (dir / "state").c_str(), 1);
  ::setenv("GPUSHARE_LIMITS", (dir / "limits").c_str(), 1);

  void* driver = dlopen(fake.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "gpushare-bench: %s\n", dlerror());
    return 2;
  }
  reinterpret_cast<cuInit_t>(Need(driver, "cuInit"))(0);
  reinterpret_cast<CUresult (*)(CUfunction*)>(Need(driver, "fakeCudaGetFunction"))(&kernel);
  direct = {reinterpret_cast<cuLaunchKernel_t>(Need(driver, "cuLaunchKernel", true)),
            reinterpret_cast<cuMemAlloc_v2_t>(Need(driver, "cuMemAlloc_v2", true)),
            reinterpret_cast<cuMemFree_v2_t>(Need(driver, "cuMemFree_v2", true))};
  wrapped = {reinterpret_cast<cuLaunchKernel_t>(Need(driver, "cuLaunchKernel")),
             reinterpret_cast<cuMemAlloc_v2_t>(Need(driver, "cuMemAlloc_v2")),
             reinterpret_cast<cuMemFree_v2_t>(Need(driver, "cuMemFree_v2"))};
  if (direct.launch == wrapped.launch) {
    std::fprintf(stderr, "gpushare-bench: not preloaded with libgpushare.so\n");
    return 2;
  }
  // Both must answer alike, or the comparison is of different work.
  grid_x = dlsym(driver, "fakeCudaBusyMicros") != nullptr ? 0 : 1;
  CUresult a = direct.launch(kernel, grid_x, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  CUresult b = wrapped.launch(kernel, grid_x, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  if (a != b) {
    std::fprintf(stderr, "gpushare-bench: launches answered %d and %d\n", a, b);
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  fs::remove_all(dir);
  return 0;
}
