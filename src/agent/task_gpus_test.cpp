// TaskGpusFor: the device minors of a start order's GPUs and the memory cap
// of a share (the rule in task_gpus.h).
#include "agent/task_gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<GpuInfo> NodeGpus() {
  GpuInfo a;
  a.uuid = "GPU-A";
  a.memory_mib = 8192;
  a.minor_number = 0;
  GpuInfo b;
  b.uuid = "GPU-B";
  b.memory_mib = 81920;
  b.minor_number = 3;
  GpuInfo sim;
  sim.uuid = "GPU-SIM-1";
  sim.memory_mib = 24576;
  sim.simulated = true;  // no device node
  return {a, b, sim};
}

proto::StartTask Share(const std::string& uuid, int32_t milli, int64_t memory_mib = 0) {
  proto::StartTask t;
  t.gpu_uuids = {uuid};
  t.gpu_milli = milli;
  t.gpu_memory_mib = memory_mib;
  t.spec.resources.gpu_milli = milli;
  t.spec.resources.gpu_memory_mib = memory_mib;
  return t;
}

TEST(TaskGpusTest, AShareIsCappedAtItsFractionOfTheGpusMemory) {
  auto gpus = TaskGpusFor(Share("GPU-A", 500), NodeGpus());
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_THAT(gpus->minors, ElementsAre(0));
  ASSERT_TRUE(gpus->share.has_value());
  EXPECT_EQ(gpus->share->memory_bytes, 4 * kGiB);
  EXPECT_EQ(gpus->share->share_milli, 500);

  // Rounded down to the byte: a third of 80 GiB.
  auto third = TaskGpusFor(Share("GPU-B", 333), NodeGpus());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->share->memory_bytes, (int64_t{81920} << 20) * 333 / 1000);
  EXPECT_EQ(third->share->memory_bytes, 28604482191);
  EXPECT_THAT(third->minors, ElementsAre(3));
}

TEST(TaskGpusTest, AShareWithGpuMemoryIsCappedThere) {
  auto gpus = TaskGpusFor(Share("GPU-A", 500, 1024), NodeGpus());
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(gpus->share, (exec::GpuShare{kGiB, 500}));
  // More than the fraction's memory: the reservation is the cap.
  auto more = TaskGpusFor(Share("GPU-A", 100, 6144), NodeGpus());
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->share, (exec::GpuShare{6 * kGiB, 100}));
}

TEST(TaskGpusTest, WholeGpusGetNoCapEvenWithGpuMemory) {
  proto::StartTask whole;
  whole.gpu_uuids = {"GPU-A", "GPU-B"};
  whole.gpu_milli = 1000;
  whole.spec.resources.gpus = 2;
  whole.spec.resources.gpu_memory_mib = 4096;  // the least memory each GPU must have
  auto gpus = TaskGpusFor(whole, NodeGpus());
  ASSERT_TRUE(gpus.ok());
  EXPECT_THAT(gpus->minors, ElementsAre(0, 3));
  EXPECT_EQ(gpus->share, std::nullopt);

  // An older server's 0 means whole GPUs too.
  whole.gpu_milli = 0;
  EXPECT_EQ(TaskGpusFor(whole, NodeGpus())->share, std::nullopt);
  // No GPUs at all.
  EXPECT_EQ(*TaskGpusFor(proto::StartTask{}, NodeGpus()), TaskGpus{});
}

TEST(TaskGpusTest, AMigInstanceUsesItsParentsNodeAndNamesItsInstance) {
  std::vector<GpuInfo> node = NodeGpus();
  GpuInfo mig;
  mig.uuid = "MIG-1";
  mig.memory_mib = 9728;
  mig.minor_number = 5;  // the parent's /dev/nvidia5
  mig.parent_uuid = "GPU-P";
  mig.mig_profile = "1g.10gb";
  mig.mig_slices = 1;
  mig.mig_gpu_instance = 9;
  mig.mig_compute_instance = 0;
  node.push_back(mig);
  proto::StartTask t;
  t.gpu_uuids = {"MIG-1"};
  t.gpu_milli = 1000;
  t.spec.resources.gpus = 1;
  t.spec.resources.mig = {1, 10};
  auto gpus = TaskGpusFor(t, node);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_THAT(gpus->minors, ElementsAre(5));
  EXPECT_THAT(gpus->mig, ElementsAre(exec::MigInstance{5, 9, 0}));
  EXPECT_EQ(gpus->share, std::nullopt);  // the hardware holds it, not the interposer
  // A whole GPU has no instance.
  t.gpu_uuids = {"GPU-B"};
  EXPECT_TRUE(TaskGpusFor(t, node)->mig.empty());
}

TEST(TaskGpusTest, AnOrderWithoutGpuMilliTakesTheSharesFromTheSpec) {
  proto::StartTask t = Share("GPU-A", 250);
  t.gpu_milli = 0;  // a server that sends none
  auto gpus = TaskGpusFor(t, NodeGpus());
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(gpus->share, (exec::GpuShare{2 * kGiB, 250}));
  // The order's memory wins over the spec's; the spec's fills in for none.
  t.gpu_memory_mib = 0;
  t.spec.resources.gpu_memory_mib = 512;
  EXPECT_EQ(TaskGpusFor(t, NodeGpus())->share, (exec::GpuShare{kGiB / 2, 250}));
}

TEST(TaskGpusTest, SimulatedGpusHaveNoMinorButSharesOfThemAreCapped) {
  auto gpus = TaskGpusFor(Share("GPU-SIM-1", 500), NodeGpus());
  ASSERT_TRUE(gpus.ok());
  EXPECT_TRUE(gpus->minors.empty());
  EXPECT_EQ(gpus->share, (exec::GpuShare{12 * kGiB, 500}));
}

TEST(TaskGpusTest, AShareWhoseCapCannotBeKnownFails) {
  auto unknown = TaskGpusFor(Share("GPU-GONE", 500), NodeGpus());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(unknown.status().message(), HasSubstr("GPU-GONE is not one of this node's"));
  // With its memory given, the GPU's own does not matter.
  EXPECT_TRUE(TaskGpusFor(Share("GPU-GONE", 500, 1024), NodeGpus()).ok());

  std::vector<GpuInfo> no_memory = NodeGpus();
  no_memory[0].memory_mib = 0;
  auto blind = TaskGpusFor(Share("GPU-A", 500), no_memory);
  ASSERT_FALSE(blind.ok());
  EXPECT_THAT(blind.status().message(), HasSubstr("memory of the share's GPU GPU-A is not known"));

  proto::StartTask two = Share("GPU-A", 500);
  two.gpu_uuids.push_back("GPU-B");
  auto bad = TaskGpusFor(two, NodeGpus());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("exactly one GPU"));
}

TEST(ShareCapFits, CapsMayFillTheLentMemoryButNotPassIt) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_TRUE(ShareCapFits("GPU-a", 4 * kGiB, {4 * kGiB}, 8192).ok());
  EXPECT_TRUE(ShareCapFits("GPU-a", 8 * kGiB, {}, 8192).ok());
  Status st = ShareCapFits("GPU-a", 4 * kGiB, {6 * kGiB}, 8192);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "the share's GPU memory cap of 4 GiB does not fit on GPU GPU-a: the caps of the 1 "
            "shares there already take 6 GiB of the 8 GiB lent");
  // Only what is lent counts.
  EXPECT_FALSE(ShareCapFits("GPU-a", 3 * kGiB, {2 * kGiB}, 4096).ok());
}

}  // namespace
}  // namespace gpupool::agent
