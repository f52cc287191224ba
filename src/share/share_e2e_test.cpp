// Compute shares end to end at the library's level: share_harness
// (testing/share_harness.cpp) plays the agent (arbiter, want and grant
// files) for probes that keep one fake GPU busy (cuda_probe spin: 1 ms
// kernels) under libgpushare.so. Device time is the fake driver's count of
// what each process reserved on the GPU's shared timeline.
//
// The bounds are for a loaded 2-core machine: the figures they hold are
// ratios of device time, which scheduling delays do not skew (a late tick
// or a late wake-up leaves the GPU idle for everyone); the one wall-clock
// bound (the give-back) is five times the target. The figures
// themselves are printed (and are in docs/performance.md).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

struct TaskFigures {
  int exit = -1;
  double first_us = 0, launches = 0, wall_us = 0, busy_us = 0;
  double Busy() const { return busy_us / wall_us; }
};

struct HarnessRun {
  int status = -1;
  std::string output;
  std::map<std::string, TaskFigures> tasks;
};

// Runs the harness with `tasks` (NAME:SHARE:MODE:START_MS:SECONDS).
HarnessRun Harness(const std::vector<std::string>& tasks, bool gate = true) {
  char tmpl[] = "/tmp/share-e2e-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  std::string cmd = std::string(SHARE_HARNESS) +
                    " --probe " CUDA_PROBE " --preload " GPUSHARE_LIB " --dir " + tmpl;
  for (const auto& t : tasks) cmd += " --task " + t;
  if (!gate) cmd += " --no-gate";
  HarnessRun run;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[512];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) run.output += buf;
  run.status = p != nullptr ? ::pclose(p) : -1;
  std::filesystem::remove_all(tmpl);
  std::istringstream in(run.output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string tag, name, key;
    if (!(words >> tag >> name) || tag != "task") continue;
    std::map<std::string, std::string> kv;
    for (std::string value; words >> key >> value;) kv[key] = value;
    TaskFigures& f = run.tasks[name];
    f.exit = std::stoi(kv["exit"]);
    f.first_us = std::stod(kv["first_us"]);
    f.launches = std::stod(kv["launches"]);
    f.wall_us = std::stod(kv["wall_us"]);
    f.busy_us = std::stod(kv["busy"]);
  }
  std::printf("%s", run.output.c_str());
  return run;
}

void ExpectAllRan(const HarnessRun& run, size_t tasks) {
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_EQ(run.tasks.size(), tasks) << run.output;
  for (const auto& [name, f] : run.tasks) {
    ASSERT_EQ(f.exit, 0) << name << "\n" << run.output;
    ASSERT_GT(f.busy_us, 0) << name << "\n" << run.output;
  }
}

TEST(ComputeShare, BusySharesGetDeviceTimeInProportion) {
  HarnessRun run = Harness({"a:250:wc:0:4", "b:750:wc:0:4"});
  ExpectAllRan(run, 2);
  double ratio = run.tasks["b"].busy_us / run.tasks["a"].busy_us;
  std::printf("figure: 250:750 device time ratio 1:%.2f\n", ratio);
  // Correctness, not the figure: shares in proportion, not first come first
  // served (1:1, the test below). The ±10% target is the benchmark's
  // (docs/performance.md); a late agent tick on a loaded machine moves it.
  EXPECT_GE(ratio, 2.0);
  EXPECT_LE(ratio, 4.5);
}

TEST(ComputeShare, WithoutTheGateTheFakeGpuIsFirstComeFirstServed) {
  // The contrast that shows the ratio above is the gate's doing.
  HarnessRun run = Harness({"a:250:wc:0:2", "b:750:wc:0:2"}, /*gate=*/false);
  ExpectAllRan(run, 2);
  EXPECT_LT(run.tasks["b"].busy_us / run.tasks["a"].busy_us, 1.5);
}

TEST(ComputeShare, AWorkConservingShareAloneHasTheWholeGpu) {
  HarnessRun run = Harness({"a:250:wc:0:3"});
  ExpectAllRan(run, 1);
  std::printf("figure: a 0.25 share alone is busy %.1f%% of its time\n",
              100 * run.tasks["a"].Busy());
  // Far more than its 0.25, and more than a strict share alone may have
  // (0.275, the test below). Alone on an idle machine it is busy ~99% of its
  // time (docs/performance.md); a probe starved of CPU on a loaded one
  // launches less (0.52 seen under two builds and the suite at once).
  EXPECT_GE(run.tasks["a"].Busy(), 0.40);
}

TEST(ComputeShare, AStrictShareAloneGetsItsShare) {
  // At most its share: the library stops launching at its slice's end, and
  // at most one short queue (~2 ms of 100) runs past it; so +10% of 0.25
  // above. Below, much more room (-40%): within its slice the task drains
  // its queue every ~2 ms, which costs the fake driver ~0.1 ms a time (a
  // real one ~10 µs), and a late tick or wake-up on a loaded machine only
  // shortens its slices; 0.15 still tells a task held to its share from
  // one that misses turns (<= 0.125) or runs freely (~1).
  HarnessRun run = Harness({"s:250:strict:0:4"});
  ExpectAllRan(run, 1);
  std::printf("figure: a strict 0.25 share alone is busy %.1f%% of its time\n",
              100 * run.tasks["s"].Busy());
  EXPECT_GE(run.tasks["s"].Busy(), 0.10);
  EXPECT_LE(run.tasks["s"].Busy(), 0.275);
}

TEST(ComputeShare, AWorkConservingShareGivesTheGpuBackWhenItsNeighbourWakes) {
  // a runs alone (freely) for a second, then b wakes: b's first kernel must
  // be done within a second (the target, 200 ms, is measured, not held to
  // the minute here), and b then gets about its half.
  HarnessRun run = Harness({"a:500:wc:0:3", "b:500:wc:1000:1"});
  ExpectAllRan(run, 2);
  const TaskFigures& b = run.tasks["b"];
  std::printf("figure: give-back: b's first 1 ms kernel done %.1f ms after it woke\n",
              b.first_us / 1000);
  EXPECT_LT(b.first_us, 1'000'000);
  EXPECT_GE(b.Busy(), 0.20);  // not starved by a, which had the GPU
}

}  // namespace
