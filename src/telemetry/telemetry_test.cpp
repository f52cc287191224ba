#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "telemetry/downsample.h"
#include "telemetry/points.h"

namespace gpupool::telemetry {
namespace {

// Two tiers small enough to reason about: 10 s buckets and 60 s buckets.
std::vector<Tier> TestTiers() { return {{10'000, 600'000}, {60'000, 3'600'000}}; }

GpuReading Reading(const std::string& node, int32_t gpu, int32_t util_percent) {
  GpuReading r;
  r.node = node;
  r.gpu = gpu;
  r.utilization_percent = util_percent;
  r.memory_used_mib = 1000;
  r.memory_total_mib = 80'000;
  r.temperature_c = 50;
  r.power_mw = 300'000;
  r.energy_mj = 1'000'000;
  r.allocated_milli = 500;
  return r;
}

std::vector<GpuBucket> OfTier(const std::vector<GpuBucket>& all, int tier) {
  std::vector<GpuBucket> out;
  for (const GpuBucket& b : all) {
    if (b.tier == tier) out.push_back(b);
  }
  return out;
}

TEST(TiersTest, DefaultsAreValidAndBadTiersAreNamed) {
  auto d = DefaultTiers();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].step_ms, 10'000);
  EXPECT_EQ(d[0].keep_ms, 86'400'000);
  EXPECT_EQ(d[1].step_ms, 300'000);
  EXPECT_EQ(d[1].keep_ms, 30LL * 86'400'000);
  EXPECT_TRUE(ValidateTiers(d).ok());

  EXPECT_EQ(ValidateTiers({}).code(), StatusCode::kInvalidArgument);
  Status zero = ValidateTiers({{10'000, 1000}, {0, 1000}});
  EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("tiers[1].step_ms"), std::string::npos) << zero.message();
  EXPECT_NE(ValidateTiers({{10'000, 0}}).message().find("tiers[0].keep_ms"), std::string::npos);
  Status order = ValidateTiers({{60'000, 1000}, {10'000, 1000}});
  EXPECT_NE(order.message().find("finest"), std::string::npos) << order.message();
}

TEST(BucketStartTest, FloorsAlsoBeforeTheEpoch) {
  EXPECT_EQ(BucketStart(0, 10), 0);
  EXPECT_EQ(BucketStart(19, 10), 10);
  EXPECT_EQ(BucketStart(20, 10), 20);
  EXPECT_EQ(BucketStart(-1, 10), -10);
  EXPECT_EQ(BucketStart(-10, 10), -10);
}

TEST(DownsamplerTest, EveryReadingGoesIntoTheBucketOfEveryTier) {
  Downsampler d(TestTiers());
  d.AddGpu(61'000, Reading("n1", 0, 10));  // 10 s bucket 60 s, 60 s bucket 60 s
  d.AddGpu(75'000, Reading("n1", 0, 30));  // 10 s bucket 70 s, 60 s bucket 60 s
  auto f = d.Flush(120'000);
  auto fine = OfTier(f.gpus, 0);
  auto coarse = OfTier(f.gpus, 1);
  ASSERT_EQ(fine.size(), 2u);
  EXPECT_EQ(fine[0].point.t_ms, 60'000);
  EXPECT_EQ(fine[1].point.t_ms, 70'000);
  EXPECT_EQ(fine[0].point.samples, 1);
  EXPECT_DOUBLE_EQ(fine[0].point.utilization, 0.10);
  EXPECT_DOUBLE_EQ(fine[1].point.utilization, 0.30);
  ASSERT_EQ(coarse.size(), 1u);
  EXPECT_EQ(coarse[0].node, "n1");
  EXPECT_EQ(coarse[0].gpu, 0);
  EXPECT_EQ(coarse[0].point.t_ms, 60'000);
  EXPECT_EQ(coarse[0].point.samples, 2);
  EXPECT_DOUBLE_EQ(coarse[0].point.utilization, 0.20);
  EXPECT_DOUBLE_EQ(coarse[0].point.utilization_max, 0.30);
}

TEST(DownsamplerTest, MeansIgnoreUnknownValuesAndMaximaAndLastEnergyAreKept) {
  Downsampler d({{60'000, 600'000}});
  GpuReading a = Reading("n", 1, 20);
  a.memory_used_mib = 1000;
  a.temperature_c = 40;
  a.power_mw = 100'000;
  a.energy_mj = 5'000;
  a.allocated_milli = 1000;
  GpuReading b = Reading("n", 1, -1);  // utilization not known
  b.memory_used_mib = 3000;
  b.temperature_c = -1;
  b.power_mw = -1;
  b.energy_mj = 9'000;
  b.allocated_milli = 0;
  b.memory_total_mib = 0;
  GpuReading c = Reading("n", 1, 60);
  c.memory_used_mib = -1;
  c.temperature_c = 60;
  c.power_mw = 300'000;
  c.energy_mj = -1;  // not known: the last known (b's) stays
  c.allocated_milli = 500;
  d.AddGpu(1'000, a);
  d.AddGpu(2'000, b);
  d.AddGpu(3'000, c);
  auto f = d.Flush(60'000);
  ASSERT_EQ(f.gpus.size(), 1u);
  const GpuPoint& p = f.gpus[0].point;
  EXPECT_EQ(p.samples, 3);
  EXPECT_DOUBLE_EQ(p.utilization, 0.40);  // (20 + 60) / 2, not / 3
  EXPECT_DOUBLE_EQ(p.utilization_max, 0.60);
  EXPECT_DOUBLE_EQ(p.memory_used_mib, 2000);
  EXPECT_DOUBLE_EQ(p.memory_used_max_mib, 3000);
  EXPECT_DOUBLE_EQ(p.memory_total_mib, 80'000);
  EXPECT_DOUBLE_EQ(p.temperature_c, 50);
  EXPECT_DOUBLE_EQ(p.power_w, 200);
  EXPECT_DOUBLE_EQ(p.energy_j, 9);
  EXPECT_DOUBLE_EQ(p.allocated, 0.5);  // (1 + 0 + 0.5) / 3: allocation is always known
}

TEST(DownsamplerTest, NothingKnownIsNaN) {
  Downsampler d({{10'000, 600'000}});
  GpuReading r;
  r.node = "n";
  d.AddGpu(5'000, r);
  auto f = d.Flush(10'000);
  ASSERT_EQ(f.gpus.size(), 1u);
  const GpuPoint& p = f.gpus[0].point;
  EXPECT_EQ(p.samples, 1);
  EXPECT_TRUE(std::isnan(p.utilization));
  EXPECT_TRUE(std::isnan(p.utilization_max));
  EXPECT_TRUE(std::isnan(p.memory_used_mib));
  EXPECT_TRUE(std::isnan(p.memory_used_max_mib));
  EXPECT_TRUE(std::isnan(p.memory_total_mib));
  EXPECT_TRUE(std::isnan(p.temperature_c));
  EXPECT_TRUE(std::isnan(p.power_w));
  EXPECT_TRUE(std::isnan(p.energy_j));
  EXPECT_DOUBLE_EQ(p.allocated, 0);
}

TEST(DownsamplerTest, EnergyIsTheLatestReadingEvenOutOfOrder) {
  Downsampler d({{60'000, 600'000}});
  GpuReading late = Reading("n", 0, 10);
  late.energy_mj = 7'000;
  GpuReading early = Reading("n", 0, 10);
  early.energy_mj = 3'000;
  d.AddGpu(50'000, late);
  d.AddGpu(10'000, early);  // same bucket, arrives after
  auto f = d.Flush(60'000);
  ASSERT_EQ(f.gpus.size(), 1u);
  EXPECT_EQ(f.gpus[0].point.samples, 2);
  EXPECT_DOUBLE_EQ(f.gpus[0].point.energy_j, 7);
}

TEST(DownsamplerTest, FlushReturnsOnlyBucketsThatEndedAndForgetsThem) {
  Downsampler d({{10'000, 600'000}});
  d.AddGpu(10'000, Reading("n", 0, 10));
  d.AddGpu(19'999, Reading("n", 0, 30));
  d.AddPool(15'000, PoolReading{.gpus = 4});
  EXPECT_TRUE(d.Flush(19'999).empty());  // the bucket ends at 20 000
  EXPECT_EQ(d.open_buckets(), 2u);
  auto f = d.Flush(20'000);
  ASSERT_EQ(f.gpus.size(), 1u);
  EXPECT_EQ(f.gpus[0].point.samples, 2);
  ASSERT_EQ(f.pool.size(), 1u);
  EXPECT_EQ(f.pool[0].point.t_ms, 10'000);
  EXPECT_DOUBLE_EQ(f.pool[0].point.gpus, 4);
  EXPECT_EQ(d.open_buckets(), 0u);
  EXPECT_TRUE(d.Flush(30'000).empty());  // forgotten: not returned twice
}

TEST(DownsamplerTest, AReadingForALaterBucketFinishesTheOpenOne) {
  Downsampler d({{10'000, 600'000}});
  d.AddGpu(1'000, Reading("n", 0, 10));
  d.AddGpu(11'000, Reading("n", 0, 20));
  d.AddGpu(21'000, Reading("n", 0, 30));
  EXPECT_EQ(d.open_buckets(), 1u);
  EXPECT_EQ(d.finished_buckets(), 2u);
  auto f = d.Flush(20'000);  // the 20 s bucket is still open
  ASSERT_EQ(f.gpus.size(), 2u);
  EXPECT_EQ(f.gpus[0].point.t_ms, 0);
  EXPECT_EQ(f.gpus[1].point.t_ms, 10'000);
  EXPECT_EQ(d.finished_buckets(), 0u);
  EXPECT_EQ(d.open_buckets(), 1u);
}

TEST(DownsamplerTest, LateReadingsNeverReopenAFlushedBucket) {
  Downsampler d(TestTiers());
  d.AddGpu(5'000, Reading("n", 0, 10));
  auto first = d.Flush(10'000);
  ASSERT_EQ(OfTier(first.gpus, 0).size(), 1u);
  // Late for the 10 s tier (its 0 s bucket was flushed), still in time for the
  // open 60 s bucket.
  d.AddGpu(9'000, Reading("n", 0, 50));
  EXPECT_EQ(d.dropped(), 1);
  // A GPU that had no point in the flushed bucket is held to the same line:
  // the bucket is closed for everyone.
  d.AddGpu(9'500, Reading("other", 3, 50));
  EXPECT_EQ(d.dropped(), 2);
  d.AddPool(9'000, PoolReading{.gpus = 1});
  EXPECT_EQ(d.dropped(), 3);
  auto second = d.Flush(60'000);
  EXPECT_TRUE(OfTier(second.gpus, 0).empty());
  auto coarse = OfTier(second.gpus, 1);
  ASSERT_EQ(coarse.size(), 2u);
  EXPECT_EQ(coarse[0].node, "n");
  EXPECT_EQ(coarse[0].point.samples, 2);
  EXPECT_DOUBLE_EQ(coarse[0].point.utilization, 0.30);
  EXPECT_EQ(coarse[1].node, "other");
  ASSERT_EQ(second.pool.size(), 1u);
  EXPECT_EQ(second.pool[0].tier, 1);
}

TEST(DownsamplerTest, AReadingOlderThanItsGpusOpenBucketIsDropped) {
  Downsampler d({{10'000, 600'000}});
  d.AddGpu(1'000, Reading("n", 0, 10));
  d.AddGpu(12'000, Reading("n", 0, 20));  // finishes the 0 s bucket (not flushed yet)
  d.AddGpu(2'000, Reading("n", 0, 90));   // would be a second 0 s point: dropped
  EXPECT_EQ(d.dropped(), 1);
  auto f = d.Flush(20'000);
  ASSERT_EQ(f.gpus.size(), 2u);
  EXPECT_EQ(f.gpus[0].point.t_ms, 0);
  EXPECT_EQ(f.gpus[0].point.samples, 1);
  EXPECT_DOUBLE_EQ(f.gpus[0].point.utilization, 0.10);
}

TEST(DownsamplerTest, MemoryIsOneOpenBucketPerTierPerGpu) {
  Downsampler d(TestTiers());
  int64_t t = 0;
  for (int round = 0; round < 1000; ++round, t += 2'000) {  // 2000 s of readings
    for (int gpu = 0; gpu < 8; ++gpu) d.AddGpu(t, Reading("n", gpu, gpu * 10));
    d.AddPool(t, PoolReading{.gpus = 8});
    EXPECT_LE(d.open_buckets(), 2u * (8 + 1));
    if (round % 5 == 4) {
      (void)d.Flush(t);  // every 10 s, as the server does
      EXPECT_LE(d.finished_buckets(), 2u * (8 + 1));
    }
  }
  EXPECT_EQ(d.open_buckets(), 2u * (8 + 1));
  // GPUs that stop reporting are forgotten once their buckets are flushed.
  (void)d.Flush(t + 60'000);
  EXPECT_EQ(d.open_buckets(), 0u);
  EXPECT_EQ(d.finished_buckets(), 0u);
}

TEST(DownsamplerTest, FlushIsSortedAndPoolMeansAreKept) {
  Downsampler d({{10'000, 600'000}});
  d.AddGpu(1'000, Reading("b", 1, 10));
  d.AddGpu(1'000, Reading("a", 2, 10));
  d.AddGpu(1'000, Reading("a", 0, 10));
  d.AddPool(1'000, {.gpus = 8,
                    .gpus_reporting = 6,
                    .allocated_gpus = 2.5,
                    .utilization_sum = 3,
                    .power_w = 1000,
                    .jobs_running = 2,
                    .jobs_pending = 4,
                    .nodes_connected = 2});
  d.AddPool(2'000, {.gpus = 8,
                    .gpus_reporting = 8,
                    .allocated_gpus = 3.5,
                    .utilization_sum = 5,
                    .power_w = 2000,
                    .jobs_running = 4,
                    .jobs_pending = 0,
                    .nodes_connected = 2});
  auto f = d.Flush(10'000);
  ASSERT_EQ(f.gpus.size(), 3u);
  EXPECT_EQ(f.gpus[0].node + std::to_string(f.gpus[0].gpu), "a0");
  EXPECT_EQ(f.gpus[1].node + std::to_string(f.gpus[1].gpu), "a2");
  EXPECT_EQ(f.gpus[2].node + std::to_string(f.gpus[2].gpu), "b1");
  ASSERT_EQ(f.pool.size(), 1u);
  const PoolPoint& p = f.pool[0].point;
  EXPECT_EQ(p.samples, 2);
  EXPECT_DOUBLE_EQ(p.gpus, 8);
  EXPECT_DOUBLE_EQ(p.gpus_reporting, 7);
  EXPECT_DOUBLE_EQ(p.allocated_gpus, 3);
  EXPECT_DOUBLE_EQ(p.utilization_sum, 4);
  EXPECT_DOUBLE_EQ(p.power_w, 1500);
  EXPECT_DOUBLE_EQ(p.jobs_running, 3);
  EXPECT_DOUBLE_EQ(p.jobs_pending, 2);
  EXPECT_DOUBLE_EQ(p.nodes_connected, 2);
}

GpuPoint Point(int64_t t, int32_t samples, double util, double util_max, double energy) {
  GpuPoint p;
  p.t_ms = t;
  p.samples = samples;
  p.utilization = util;
  p.utilization_max = util_max;
  p.energy_j = energy;
  p.allocated = 0.5;
  return p;
}

TEST(ResampleTest, MergesIntoCoarserBucketsWeightedBySamples) {
  std::vector<GpuPoint> in = {
      Point(0, 1, 0.0, 0.1, 10),           // bucket 0
      Point(10'000, 3, 0.4, 0.9, 20),      // bucket 0
      Point(20'000, 2, kNaN, kNaN, kNaN),  // bucket 0: nothing known but samples
      Point(30'000, 2, 0.5, 0.5, 40),      // bucket 30 000
      Point(50'000, 2, 0.7, 0.8, kNaN),    // bucket 30 000
  };
  auto out = Resample(in, 30'000);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].t_ms, 0);
  EXPECT_EQ(out[0].samples, 6);
  EXPECT_DOUBLE_EQ(out[0].utilization, (0.0 * 1 + 0.4 * 3) / 4);  // NaN adds no weight
  EXPECT_DOUBLE_EQ(out[0].utilization_max, 0.9);
  EXPECT_DOUBLE_EQ(out[0].energy_j, 20);
  EXPECT_DOUBLE_EQ(out[0].allocated, 0.5);
  EXPECT_EQ(out[1].t_ms, 30'000);
  EXPECT_EQ(out[1].samples, 4);
  EXPECT_DOUBLE_EQ(out[1].utilization, 0.6);
  EXPECT_DOUBLE_EQ(out[1].utilization_max, 0.8);
  EXPECT_DOUBLE_EQ(out[1].energy_j, 40);  // the last known
  EXPECT_TRUE(std::isnan(out[1].temperature_c));

  EXPECT_EQ(Resample(in, 0).size(), in.size());
  EXPECT_TRUE(Resample(std::vector<GpuPoint>{}, 30'000).empty());
}

TEST(ResampleTest, ResamplingStoredPointsMatchesDownsamplingDirectly) {
  // The 10 s points resampled to 60 s equal the 60 s tier's points.
  Downsampler d(TestTiers());
  for (int64_t t = 0; t < 180'000; t += 3'000) {
    GpuReading r = Reading("n", 0, static_cast<int32_t>((t / 3'000) % 100));
    r.energy_mj = t;
    d.AddGpu(t, r);
    d.AddPool(t, {.gpus = 8, .power_w = static_cast<double>(t % 7'000)});
  }
  auto f = d.Flush(180'000);
  std::vector<GpuPoint> fine;
  std::vector<GpuPoint> coarse;
  for (const GpuBucket& b : f.gpus) (b.tier == 0 ? fine : coarse).push_back(b.point);
  std::vector<PoolPoint> pool_fine;
  std::vector<PoolPoint> pool_coarse;
  for (const PoolBucket& b : f.pool) (b.tier == 0 ? pool_fine : pool_coarse).push_back(b.point);
  auto merged = Resample(fine, 60'000);
  ASSERT_EQ(merged.size(), coarse.size());
  for (size_t i = 0; i < merged.size(); ++i) {
    EXPECT_EQ(merged[i].t_ms, coarse[i].t_ms);
    EXPECT_EQ(merged[i].samples, coarse[i].samples);
    EXPECT_NEAR(merged[i].utilization, coarse[i].utilization, 1e-12);
    EXPECT_DOUBLE_EQ(merged[i].utilization_max, coarse[i].utilization_max);
    EXPECT_DOUBLE_EQ(merged[i].energy_j, coarse[i].energy_j);
  }
  auto pool_merged = Resample(pool_fine, 60'000);
  ASSERT_EQ(pool_merged.size(), pool_coarse.size());
  for (size_t i = 0; i < pool_merged.size(); ++i) {
    EXPECT_EQ(pool_merged[i].samples, pool_coarse[i].samples);
    EXPECT_NEAR(pool_merged[i].power_w, pool_coarse[i].power_w, 1e-9);
    EXPECT_DOUBLE_EQ(pool_merged[i].gpus, 8);
  }
}

}  // namespace
}  // namespace gpupool::telemetry
