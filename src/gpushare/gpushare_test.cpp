// libgpushare.so in real processes: a probe program (testing/cuda_probe.c)
// linked against the fake driver (tests/fake_cuda), run with the library
// preloaded as the sandbox does, allocates by every path a program can
// take; the task's cap must hold on each, across its processes, and not
// across tasks.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpushare/share_files.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct ProbeRun {
  int status = -1;
  std::string out, err;
};

class GpushareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpushare-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // One simulated 8 GiB GPU, as the fake NVML and the fake driver read it.
    Write(dir_ + "/gpus.json",
          R"J({"devices": [{"name": "NVIDIA A100 (simulated)", "memory_total_mib": 8192,)J"
          R"J( "uuid": "GPU-11111111-2222-3333-4444-555555555555"}]})J");
    fs::create_directories(dir_ + "/state");
    limits_ = Task("a", 1024);
  }
  void TearDown() override {
    for (pid_t p : background_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  // A task's limits file and empty usage ledger, as the agent writes them.
  std::string Task(const std::string& name, int cap_mib) {
    std::string usage = dir_ + "/usage-" + name;
    Write(usage, "");
    std::string limits = dir_ + "/limits-" + name;
    Write(limits, "gpushare 1\nmemory_bytes " + std::to_string(cap_mib * (1LL << 20)) + "\nusage " +
                      usage + "\n");
    return limits;
  }

  std::vector<std::string> Env(const std::string& limits, bool preload) const {
    std::vector<std::string> env = {"FAKE_NVML_CONFIG=" + dir_ + "/gpus.json",
                                    "FAKE_CUDA_STATE_DIR=" + dir_ + "/state",
                                    "GPUSHARE_LIMITS=" + limits, "PATH=/usr/bin:/bin"};
    if (preload) env.push_back("LD_PRELOAD=" GPUSHARE_LIB);
    // In the sanitizer build the probes are instrumented and the library
    // (never instrumented) is preloaded ahead of the sanitizer's runtime,
    // which only its link-order check minds.
    std::string asan = "ASAN_OPTIONS=verify_asan_link_order=0";
    if (const char* inherited = std::getenv("ASAN_OPTIONS")) asan += std::string(":") + inherited;
    env.push_back(asan);
    if (const char* ubsan = std::getenv("UBSAN_OPTIONS"))
      env.push_back(std::string("UBSAN_OPTIONS=") + ubsan);
    return env;
  }

  pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, int out_fd,
              int err_fd) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
  }

  ProbeRun Probe(const std::vector<std::string>& args, const std::string& limits,
                 bool preload = true) {
    std::vector<std::string> full = {CUDA_PROBE};
    full.insert(full.end(), args.begin(), args.end());
    std::string out = dir_ + "/out", err = dir_ + "/err";
    int o = ::open(out.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    int e = ::open(err.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    pid_t pid = Spawn(full, Env(limits, preload), o, e);
    ::close(o);
    ::close(e);
    ProbeRun r;
    ::waitpid(pid, &r.status, 0);
    std::stringstream so, se;
    so << std::ifstream(out).rdbuf();
    se << std::ifstream(err).rdbuf();
    r.out = so.str();
    r.err = se.str();
    return r;
  }

  // A process of task `limits` holding `mib` until the test ends.
  void Hold(int mib, const std::string& limits) {
    std::string ready = dir_ + "/held-" + std::to_string(background_.size());
    int null = ::open("/dev/null", O_WRONLY);
    background_.push_back(
        Spawn({CUDA_PROBE, "hold", std::to_string(mib), ready}, Env(limits, true), null, null));
    ::close(null);
    // The holder writes its answer after creating the file: wait for the line.
    std::string said;
    for (int i = 0; i < 30000 && (said.empty() || said.back() != '\n'); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::stringstream s;
      s << std::ifstream(ready).rdbuf();
      said = s.str();
    }
    ASSERT_EQ(said, "0\n") << "the holder's allocation failed";
  }

  std::string dir_, limits_;
  std::vector<pid_t> background_;
};

TEST_F(GpushareTest, EveryAllocationPathIsHeldToTheCap) {
  for (const char* path : {"direct", "legacy", "dlsym", "procaddr", "procaddr_v2", "ptsz", "pitch",
                           "managed", "async", "pool", "create", "array"}) {
    ProbeRun r = Probe({"fill", path, "64", "2048"}, limits_);
    ASSERT_EQ(r.status, 0) << path << ": " << r.err;
    // 2 = CUDA_ERROR_OUT_OF_MEMORY, as on a GPU of 1 GiB.
    EXPECT_THAT(r.out, HasSubstr("filled 1024 refused 2\n")) << path;
    EXPECT_THAT(r.out, HasSubstr("freed free 1073741824 total 1073741824")) << path;
    EXPECT_THAT(r.err, HasSubstr("the task's GPU memory cap is 1073741824 bytes")) << path;
  }
}

TEST_F(GpushareTest, WithoutTheLibraryTheSamePathsTakeMore) {
  // The contrast that shows the probe can pass the cap at all.
  for (const char* path : {"direct", "procaddr_v2", "create"}) {
    ProbeRun r = Probe({"fill", path, "64", "2048"}, limits_, /*preload=*/false);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("filled 2048 refused 0\n")) << path;
  }
}

TEST_F(GpushareTest, TheTaskSeesAGpuOfItsCap) {
  ProbeRun r = Probe({"info"}, limits_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "total 1073741824 free 1073741824 devtotal 1073741824\n");
  // No limits: the whole GPU.
  // A named file that is not there is an error, not "no limits".
  r = Probe({"fill", "direct", "64", "2048"}, dir_ + "/no-such-limits");
  EXPECT_THAT(r.out, HasSubstr("filled 0 refused 2\n"));
  EXPECT_THAT(r.err, HasSubstr("cannot open"));
  Write(dir_ + "/uncapped", "gpushare 1\n");
  r = Probe({"info"}, dir_ + "/uncapped");
  EXPECT_EQ(r.out, "total 8589934592 free 8589934592 devtotal 8589934592\n");
}

TEST_F(GpushareTest, NvmlShowsTheTaskItsCapAndItsOwnUse) {
  // The fake NVML's device: 8 GiB; the task holds 256 MiB of its 1 GiB.
  Hold(256, limits_);
  ProbeRun r = Probe({"nvml", FAKE_NVML_LIB}, limits_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "nvml total 1073741824 used 268435456 free 805306368\n");
  r = Probe({"nvml", FAKE_NVML_LIB}, limits_, /*preload=*/false);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "nvml total 8589934592 used 0 free 8589934592\n");
}

TEST_F(GpushareTest, AForkedChildSharesItsParentsCap) {
  ProbeRun r = Probe({"fork-fill", "direct", "64", "2048", "512"}, limits_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("filled 512 refused 2\n"));
}

TEST_F(GpushareTest, ProcessesOfATaskShareItsCapAndAKilledOneGivesItsShareBack) {
  Hold(768, limits_);
  ProbeRun r = Probe({"fill", "direct", "64", "2048"}, limits_);
  EXPECT_THAT(r.out, HasSubstr("filled 256 refused 2\n"));
  EXPECT_THAT(r.out, HasSubstr("freed free 268435456 total 1073741824"));
  // Killed without freeing anything.
  ::kill(background_.back(), SIGKILL);
  ::waitpid(background_.back(), nullptr, 0);
  background_.pop_back();
  r = Probe({"fill", "direct", "64", "2048"}, limits_);
  EXPECT_THAT(r.out, HasSubstr("filled 1024 refused 2\n"));
}

TEST_F(GpushareTest, AnotherTaskHasItsOwnCap) {
  Hold(768, limits_);
  std::string other = Task("b", 2048);
  ProbeRun r = Probe({"fill", "direct", "64", "4096"}, other);
  EXPECT_THAT(r.out, HasSubstr("filled 2048 refused 2\n"));
}

TEST_F(GpushareTest, LimitsThatCannotBeReadRefuseEveryAllocation) {
  Write(dir_ + "/bad", "gpushare 1\nmemory_bytes lots\n");
  ProbeRun r = Probe({"fill", "direct", "64", "2048"}, dir_ + "/bad");
  EXPECT_THAT(r.out, HasSubstr("filled 0 refused 2\n"));
  EXPECT_THAT(r.err, HasSubstr("limits line 2: memory_bytes"));
  EXPECT_THAT(r.err, HasSubstr("GPU memory allocations are refused"));
  // A ledger that is not there: refused too, not uncapped.
  Write(dir_ + "/noledger", "gpushare 1\nmemory_bytes 1048576\nusage " + dir_ + "/gone\n");
  r = Probe({"fill", "direct", "64", "2048"}, dir_ + "/noledger");
  EXPECT_THAT(r.out, HasSubstr("filled 0 refused 2\n"));
  EXPECT_THAT(r.err, HasSubstr("cannot open the usage ledger"));
}

TEST_F(GpushareTest, ProgramsThatNeverUseCudaAreUntouched) {
  int null = ::open("/dev/null", O_WRONLY);
  pid_t p = Spawn({"/bin/sh", "-c", "echo hi | tr h H > /dev/null; exit 7"}, Env(limits_, true),
                  null, null);
  ::close(null);
  int st = 0;
  ::waitpid(p, &st, 0);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 7);
}

// A library that finds the next definition of its own symbol through
// dlsym(RTLD_NEXT) (as allocators and profilers do) must still get it with
// our dlsym in front of glibc's.
TEST_F(GpushareTest, RtldNextStillMeansTheNextAfterTheCaller) {
  for (bool preload : {false, true}) {
    std::string out = dir_ + "/next";
    int o = ::open(out.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    pid_t p = Spawn({NEXT_MAIN}, Env(limits_, preload), o, o);
    ::close(o);
    int st = 0;
    ::waitpid(p, &st, 0);
    std::stringstream s;
    s << std::ifstream(out).rdbuf();
    EXPECT_EQ(s.str(), "12\n") << (preload ? "with" : "without") << " the interposer";
  }
}

TEST_F(GpushareTest, TheLibraryNeedsNoNewerGlibcThanItsArchitecturesFirst) {
  ProbeRun r;
  std::string out = dir_ + "/symbols";
  std::string cmd = "objdump -T " GPUSHARE_LIB " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::stringstream s;
  s << std::ifstream(out).rdbuf();
  std::string text = s.str();
  for (size_t at = text.find("GLIBC_2."); at != std::string::npos;
       at = text.find("GLIBC_2.", at + 1)) {
    int minor = std::atoi(text.c_str() + at + 8);
    EXPECT_LE(minor, 17) << text.substr(at, 12);
  }
  EXPECT_THAT(text, ::testing::Not(HasSubstr("GLIBCXX")));
}

// ---- The compute share's gate (launch.c) ------------------------------------

int64_t MonoNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The agent's side of one task's share files, by hand: the test writes the
// grant and reads the want.
class ShareGateTest : public GpushareTest {
 protected:
  void SetUp() override {
    GpushareTest::SetUp();
    want_path_ = dir_ + "/want";
    grant_path_ = dir_ + "/grant";
    for (const auto& p : {want_path_, grant_path_}) {
      int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
      ASSERT_EQ(::ftruncate(fd, GPUSHARE_SHARE_FILE_BYTES), 0);
      void* m =
          ::mmap(nullptr, GPUSHARE_SHARE_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      ASSERT_NE(m, MAP_FAILED);
      (p == want_path_ ? want_ : grant_) = static_cast<uint64_t*>(m);
    }
    limits_ = dir_ + "/limits-share";
    Write(limits_,
          "gpushare 1\nshare_milli 250\nwant " + want_path_ + "\ngrant " + grant_path_ + "\n");
  }
  void TearDown() override {
    StopBeating();
    ::munmap(want_, GPUSHARE_SHARE_FILE_BYTES);
    ::munmap(grant_, GPUSHARE_SHARE_FILE_BYTES);
    GpushareTest::TearDown();
  }

  void Grant(unsigned state, int64_t until = 0) {
    __atomic_store_n(&grant_[0], gpushare_grant_pack(state, static_cast<uint64_t>(until)),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&grant_[1], static_cast<uint64_t>(MonoNs()), __ATOMIC_RELEASE);
  }
  int64_t LastActive() const {
    return static_cast<int64_t>(__atomic_load_n(&want_[0], __ATOMIC_RELAXED));
  }
  // Keeps the beat fresh, as a live agent does, and runs `at` (time, grant
  // change) steps.
  void Beat(std::vector<std::pair<int64_t, std::function<void()>>> steps) {
    beating_ = true;
    beater_ = std::thread([this, steps = std::move(steps)] {
      size_t next = 0;
      while (beating_) {
        if (next < steps.size() && MonoNs() >= steps[next].first) steps[next++].second();
        __atomic_store_n(&grant_[1], static_cast<uint64_t>(MonoNs()), __ATOMIC_RELEASE);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void StopBeating() {
    beating_ = false;
    if (beater_.joinable()) beater_.join();
  }
  // `cuda_probe spin SECONDS START SYNC_EVERY` and its figures.
  std::map<std::string, double> Spin(double seconds, int64_t start, const std::string& limits,
                                     int sync_every = 0) {
    ProbeRun r =
        Probe({"spin", std::to_string(seconds), std::to_string(start), std::to_string(sync_every)},
              limits);
    EXPECT_EQ(r.status, 0) << r.err;
    std::map<std::string, double> figures;
    std::istringstream in(r.out);
    for (std::string k; in >> k;) in >> figures[k];
    last_err_ = r.err;
    return figures;
  }

  std::string want_path_, grant_path_, last_err_;
  uint64_t* want_ = nullptr;
  uint64_t* grant_ = nullptr;
  std::atomic<bool> beating_{false};
  std::thread beater_;
};

constexpr int64_t kMs = 1'000'000;

TEST_F(ShareGateTest, LaunchesStampTheWantFileAndAGrantWithoutAgentLetsThemRun) {
  // Zero-filled: FREE, and no beat. The task runs freely and says it wants.
  int64_t before = MonoNs();
  auto f = Spin(0.3, 0, limits_);
  EXPECT_GE(f["launches"], 50);
  EXPECT_GE(LastActive(), before);
  EXPECT_EQ(last_err_, "");
  // WAIT from an agent that stopped beating a second ago: as good as FREE.
  __atomic_store_n(&grant_[0], gpushare_grant_pack(GPUSHARE_GRANT_WAIT, 0), __ATOMIC_RELEASE);
  __atomic_store_n(&grant_[1], static_cast<uint64_t>(MonoNs() - 1100 * kMs), __ATOMIC_RELEASE);
  f = Spin(0.3, 0, limits_);
  EXPECT_GE(f["launches"], 50);
}

TEST_F(ShareGateTest, AWaitHoldsLaunchesBackAndARunLastsUntilItsEnd) {
  // WAIT until T+300 ms, RUN until T+400 ms, WAIT again, FREE at T+600 ms.
  const int64_t t = MonoNs() + 200 * kMs;
  Grant(GPUSHARE_GRANT_WAIT);
  Beat({{t + 300 * kMs, [&] { Grant(GPUSHARE_GRANT_RUN, t + 400 * kMs); }},
        {t + 450 * kMs, [&] { Grant(GPUSHARE_GRANT_WAIT); }},
        {t + 600 * kMs, [&] { Grant(GPUSHARE_GRANT_FREE); }}});
  auto f = Spin(0.5, t, limits_);
  StopBeating();
  // The first kernel ran no sooner than the RUN (+ its 1 ms).
  EXPECT_GE(f["first_us"], 300'000);
  // About 100 ms of kernels in the slice: none past its end but what was
  // queued (a few ms), and a kernel or two after FREE; fewer when the
  // machine is slow to wake the probe.
  EXPECT_LE(f["busy"], 110'000);
  EXPECT_GE(f["busy"], 30'000);
  // A waiting task counts as wanting: it stamped its want file while held.
  EXPECT_GE(LastActive(), t + 550 * kMs);
}

TEST_F(ShareGateTest, TheTasksOwnSynchronizesEmptyTheGatesQueue) {
  // A task that synchronizes after every launch (cuCtxSynchronize, then
  // cuStreamSynchronize of the stream it launched on) never has anything
  // queued when it launches: the gate, holding it to RUN's short queue,
  // must not synchronize again. The fake driver counts every synchronize it
  // sees; the probe's own are one per launch, one after its first and one
  // at its end. (Before, the gate took the task's launches as still queued
  // and synchronized on an empty queue, which made it lengthen the queue it
  // allows, so that on an H200 a 0.3 share's queue ran into its neighbour's
  // turns: 1:1.48 against 0.7 instead of 1:2.33.)
  Grant(GPUSHARE_GRANT_RUN, MonoNs() + 3600 * 1000 * kMs);
  for (int sync_every : {1, -1}) {
    auto f = Spin(0.2, 0, limits_, sync_every);
    EXPECT_GE(f["launches"], 20) << sync_every;
    EXPECT_EQ(f["syncs"], f["launches"] + 1) << sync_every;
  }
  // The contrast: synchronizing only every 8th launch leaves the gate to
  // bound the queue between, with synchronizes of its own.
  auto f = Spin(0.2, 0, limits_, 8);
  EXPECT_GT(f["syncs"], f["launches"] / 8 + 2);
}

TEST_F(ShareGateTest, WithoutItsGrantFileATaskIsNotHeldAndSaysSo) {
  Write(limits_, "gpushare 1\nwant " + want_path_ + "\ngrant " + dir_ + "/no-grant\n");
  auto f = Spin(0.2, 0, limits_);
  EXPECT_GE(f["launches"], 30);
  EXPECT_THAT(last_err_, HasSubstr("kernel launches are not held to the compute share"));
}

TEST_F(ShareGateTest, WithoutItsWantFileATaskIsStillHeldAndCountsAsIdle) {
  Write(limits_, "gpushare 1\nwant " + dir_ + "/no-want\ngrant " + grant_path_ + "\n");
  const int64_t t = MonoNs() + 200 * kMs;
  Grant(GPUSHARE_GRANT_WAIT);
  Beat({{t + 200 * kMs, [&] { Grant(GPUSHARE_GRANT_FREE); }}});
  auto f = Spin(0.1, t, limits_);
  EXPECT_GE(f["first_us"], 200'000);
  EXPECT_THAT(last_err_, HasSubstr("the task counts as idle"));
}

}  // namespace
