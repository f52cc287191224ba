#include "model/resources.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(GpuModelMatches, WholeNameWithoutCase) {
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "nvidia a100-sxm4-80gb"));
  EXPECT_TRUE(GpuModelMatches("Tesla T4", "TESLA T4"));
}

TEST(GpuModelMatches, Words) {
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "A100"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "a100"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "NVIDIA"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "80gb"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "A100-SXM4"));
  EXPECT_TRUE(GpuModelMatches("Tesla T4", "T4"));
  EXPECT_TRUE(GpuModelMatches("Tesla T4", "t4"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA GeForce RTX 4090", "RTX 4090"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA GeForce RTX 4090", "4090"));
  EXPECT_TRUE(GpuModelMatches("NVIDIA H100 80GB HBM3", "H100"));
}

TEST(GpuModelMatches, PartsOfWordsDoNotMatch) {
  EXPECT_FALSE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "A10"));
  EXPECT_FALSE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "100"));
  EXPECT_FALSE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "A100-SXM"));
  EXPECT_FALSE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "SXM4-80"));
  EXPECT_FALSE(GpuModelMatches("NVIDIA A10", "A100"));
  EXPECT_FALSE(GpuModelMatches("Tesla T4", "T"));
  EXPECT_FALSE(GpuModelMatches("Tesla T4", "Tesla T4 16GB"));
  EXPECT_FALSE(GpuModelMatches("NVIDIA GeForce RTX 4090", "RTX 409"));
  EXPECT_FALSE(GpuModelMatches("Tesla V100", "T4"));
}

TEST(GpuModelMatches, EmptyNeverMatches) {
  EXPECT_FALSE(GpuModelMatches("Tesla T4", ""));
  EXPECT_FALSE(GpuModelMatches("", ""));
  EXPECT_FALSE(GpuModelMatches("", "T4"));
}

TEST(GpuModelMatches, SeparatorsAloneDoNotMatch) {
  EXPECT_FALSE(GpuModelMatches("NVIDIA A100-SXM4-80GB", "-"));
  EXPECT_FALSE(GpuModelMatches("NVIDIA A100-SXM4-80GB", " "));
  EXPECT_FALSE(GpuModelMatches("Tesla T4", " T4"));
}

TEST(DescribeGpu, NameMemoryAndSimulated) {
  GpuInfo gpu;
  gpu.name = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81'920;
  EXPECT_EQ(DescribeGpu(gpu), "NVIDIA A100-SXM4-80GB 80 GiB");
  gpu.name = "A100";
  gpu.simulated = true;
  EXPECT_EQ(DescribeGpu(gpu), "A100 80 GiB (simulated)");
  gpu.name = "Tesla T4";
  gpu.memory_mib = 15'360;
  gpu.simulated = false;
  EXPECT_EQ(DescribeGpu(gpu), "Tesla T4 15 GiB");
  gpu.memory_mib = 1536;
  EXPECT_EQ(DescribeGpu(gpu), "Tesla T4 1.5 GiB");
}

TEST(ShareMemoryCapBytes, AskedMemoryElseTheFractionOfTheGpu) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(ShareMemoryCapBytes(500, 8192, 0), 4096 * kMiB);
  EXPECT_EQ(ShareMemoryCapBytes(300, 8192, 0), 8192 * kMiB * 3 / 10);  // floor, in bytes
  EXPECT_EQ(ShareMemoryCapBytes(300, 8192, 1024), 1024 * kMiB);
  // Whole GPUs are not capped, nor is a share of a GPU of unknown memory.
  EXPECT_EQ(ShareMemoryCapBytes(1000, 8192, 0), 0);
  EXPECT_EQ(ShareMemoryCapBytes(0, 8192, 1024), 0);
  EXPECT_EQ(ShareMemoryCapBytes(500, 0, 0), 0);
}

TEST(Resources, DefaultIsNoRequirement) {
  Resources r;
  EXPECT_EQ(r.gpus, 0);
  EXPECT_EQ(r.gpu_memory_mib, 0);
  EXPECT_TRUE(r.gpu_models.empty());
  EXPECT_EQ(r.cpu_milli, 0);
  EXPECT_EQ(r.memory_mib, 0);
  Resources other = r;
  other.gpus = 1;
  EXPECT_NE(r, other);
}

}  // namespace
}  // namespace gpupool

namespace gpupool {
namespace {

TEST(MigProfile, StrictParse) {
  auto m = ParseMigProfile("3g.40gb");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->slices, 3);
  EXPECT_EQ(m->memory_gb, 40);
  EXPECT_EQ(FormatMigProfile(*m), "3g.40gb");
  EXPECT_FALSE(ParseMigProfile("3g.40gb+me").ok());
  EXPECT_FALSE(ParseMigProfile("3g.40GB").ok());
  EXPECT_FALSE(ParseMigProfile("99999g.1gb").ok());
}

TEST(MigProfile, WhatDriversReport) {
  auto me = MigProfileOf("1g.10gb+me");
  ASSERT_TRUE(me.has_value());
  EXPECT_EQ(FormatMigProfile(*me), "1g.10gb");
  auto ci = MigProfileOf("2c.3g.20gb");
  ASSERT_TRUE(ci.has_value());
  EXPECT_EQ(ci->slices, 2);
  EXPECT_EQ(ci->memory_gb, 20);
  EXPECT_FALSE(MigProfileOf("4c.3g.20gb").has_value());  // more slices than its instance
  EXPECT_FALSE(MigProfileOf("NVIDIA A100").has_value());
}

TEST(MigProfile, FitsWhenBothSlicesAndMemoryAreEnough) {
  Resources::Mig want{3, 40};
  EXPECT_TRUE(MigFits({3, 40}, want));
  EXPECT_TRUE(MigFits({7, 80}, want));
  EXPECT_FALSE(MigFits({4, 20}, want));  // more slices, less memory
  EXPECT_FALSE(MigFits({2, 80}, want));
}

TEST(DescribeGpu, MigInstance) {
  GpuInfo g;
  g.name = "NVIDIA A100-SXM4-80GB";
  g.memory_mib = 40192;
  g.parent_uuid = "GPU-1";
  g.mig_profile = "3g.40gb";
  EXPECT_EQ(DescribeGpu(g).rfind("NVIDIA A100-SXM4-80GB MIG 3g.40gb ", 0), 0u) << DescribeGpu(g);
}

}  // namespace
}  // namespace gpupool
