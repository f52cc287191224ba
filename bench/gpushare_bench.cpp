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
// --share adds the compute share's want and grant files to the task's
// limits (src/gpushare/share_files.h), so that every launch passes the
// gate, and measures the launch with the grant FREE and with it RUN (a
// slice that does not end during the run): the gate's cost when nothing
// holds the launch back. (The limits are read once per process, hence a
// flag, not another case in the same run.)
//
// dlsym on the driver hands out the wrappers (that is the interposer at
// work); glibc's own dlsym, found by version, the driver's functions.
//
// With the fake, the launch is one it refuses after its cheapest checks (a
// grid of 0), and the allocation pair goes through its shared state files
// (tens of microseconds); the capped wrapper adds its ledger's lock and
// records.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <benchmark/benchmark.h>

#include "gpushare/cuda_abi.h"
#include "gpushare/share_files.h"

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

// With --share: the task's grant, mapped as the agent maps it.
gpushare_grant_file* grant = nullptr;

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void LaunchGranted(benchmark::State& state, unsigned grant_state) {
  int64_t now = MonoNs();
  // A slice an hour long: it does not end during the run.
  uint64_t until = grant_state == GPUSHARE_GRANT_RUN ? now + 3600'000'000'000LL : 0;
  __atomic_store_n(&grant->grant, gpushare_grant_pack(grant_state, until), __ATOMIC_RELEASE);
  __atomic_store_n(&grant->beat_ns, static_cast<uint64_t>(now), __ATOMIC_RELEASE);
  Launch(state, wrapped);
}

void RegisterShareCases() {
  benchmark::RegisterBenchmark("Launch/through_gpushare_grant_free", LaunchGranted,
                               GPUSHARE_GRANT_FREE);
  benchmark::RegisterBenchmark("Launch/through_gpushare_grant_run", LaunchGranted,
                               GPUSHARE_GRANT_RUN);
}

// Makes a zero-filled share file; maps it when `map`.
gpushare_grant_file* MakeShareFile(const std::string& path, bool map) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::ftruncate(fd, GPUSHARE_SHARE_FILE_BYTES) != 0) {
    std::fprintf(stderr, "gpushare-bench: cannot make %s\n", path.c_str());
    std::exit(2);
  }
  void* p =
      map ? ::mmap(nullptr, GPUSHARE_SHARE_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
          : nullptr;
  ::close(fd);
  if (p == MAP_FAILED) std::exit(2);
  return static_cast<gpushare_grant_file*>(p);
}

// --name from argv, removed from it; whether it was there.
bool TakeSwitch(int& argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == name) {
      for (int j = i; j + 1 <= argc; ++j) argv[j] = argv[j + 1];
      --argc;
      return true;
    }
  }
  return false;
}

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
  bool share = TakeSwitch(argc, argv, "--share");
  if (fake.empty()) {
    std::fprintf(
        stderr, "usage: LD_PRELOAD=libgpushare.so gpupool-gpushare-bench --driver LIB [--share]\n");
    return 2;
  }
  // One simulated GPU, a 64 GiB cap and a ledger, in a scratch directory.
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("gpushare-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir / "state");
  std::ofstream(dir / "gpus.json") << R"({"devices": [{"name": "A100", "memory_total_mib": 81920,)"
                                      R"( "uuid": "GPU-11111111-2222-3333-4444-555555555555"}]})";
  std::ofstream(dir / "usage") << "";
  std::ofstream limits(dir / "limits");
  limits << "gpushare 1\nmemory_bytes " << (64LL << 30) << "\nusage " << (dir / "usage").string()
         << "\n";
  if (share) {
    MakeShareFile(dir / "want", false);
    grant = MakeShareFile(dir / "grant", true);
    limits << "want " << (dir / "want").string() << "\ngrant " << (dir / "grant").string() << "\n";
    RegisterShareCases();
  }
  limits.close();
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
