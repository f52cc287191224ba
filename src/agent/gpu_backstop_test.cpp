#include "agent/gpu_backstop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGiB = int64_t{1} << 30;

GpuTelemetry Gpu(const std::string& uuid, std::vector<GpuProcess> processes) {
  GpuTelemetry g;
  g.uuid = uuid;
  g.processes = std::move(processes);
  return g;
}

TEST(GpuBackstop, ATaskWithinItsCapAndContextAllowancesIsLeftAlone) {
  CappedTask t{"7.1", 4 * kGiB, {"GPU-a"}, {100, 101}};
  // 4 GiB of allocations plus each process's 400 MiB context.
  auto telemetry = {Gpu("GPU-a", {{100, 2048 + 400}, {101, 2048 + 400}, {999, 70000}})};
  EXPECT_THAT(TasksOverGpuMemoryCap({t}, telemetry), IsEmpty());
}

TEST(GpuBackstop, ATaskPastItsCapOnAnyOfItsGpusIsNamedOnce) {
  CappedTask within{"7.1", 4 * kGiB, {"GPU-a"}, {100}};
  CappedTask over{"8.1", 4 * kGiB, {"GPU-a", "GPU-b"}, {200, 201}};
  auto telemetry = {Gpu("GPU-a", {{100, 4000}, {200, 100}}),
                    Gpu("GPU-b", {{200, 3000}, {201, 3000}})};
  auto verdicts = TasksOverGpuMemoryCap({within, over}, telemetry);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].attempt_id, "8.1");
  EXPECT_THAT(verdicts[0].reason, HasSubstr("used 5.9 GiB of GPU memory on GPU-b"));
  EXPECT_THAT(verdicts[0].reason, HasSubstr("over its cap of 4 GiB"));
}

TEST(GpuBackstop, OthersProcessesAndMissingFiguresCountNothing) {
  CappedTask t{"7.1", 1 * kGiB, {"GPU-a"}, {100}};
  // Another task's (or the owner's) process; a figure NVML does not have;
  // a GPU it does not report at all.
  auto telemetry = {Gpu("GPU-a", {{300, 50000}, {100, -1}})};
  EXPECT_THAT(TasksOverGpuMemoryCap({t}, telemetry), IsEmpty());
  CappedTask elsewhere{"9.1", 1 * kGiB, {"GPU-z"}, {100}};
  EXPECT_THAT(TasksOverGpuMemoryCap({elsewhere}, telemetry), IsEmpty());
}

TEST(GpuBackstop, SharesAreReportedWithTheirCapAndTheirOwnProcessesUse) {
  CappedTask t{"7.1", 4 * kGiB, {"GPU-a", "GPU-z"}, {100, 101}};
  // GPU-z is not in the sample: its use is not known.
  auto telemetry = {Gpu("GPU-a", {{100, 1000}, {101, 24}, {300, 50000}, {102, -1}})};
  std::vector<ShareUse> uses = ShareUses({t}, telemetry);
  EXPECT_EQ(uses,
            (std::vector<ShareUse>{{"7.1", "GPU-a", 4096, 1024}, {"7.1", "GPU-z", 4096, -1}}));
}

TEST(GpuBackstop, OneMibPastTheAllowanceIsOver) {
  CappedTask t{"7.1", 1 * kGiB, {"GPU-a"}, {100}};
  auto at = {Gpu("GPU-a", {{100, 1024 + kGpuContextAllowanceMib}})};
  EXPECT_THAT(TasksOverGpuMemoryCap({t}, at), IsEmpty());
  auto past = {Gpu("GPU-a", {{100, 1024 + kGpuContextAllowanceMib + 1}})};
  EXPECT_THAT(TasksOverGpuMemoryCap({t}, past),
              ElementsAre(::testing::Field(&CapVerdict::attempt_id, "7.1")));
}

}  // namespace
}  // namespace gpupool::agent
