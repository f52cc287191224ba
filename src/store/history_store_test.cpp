#include "store/history_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/sqlite_testing.h"
#include "telemetry/downsample.h"

namespace gpupool {
namespace {

namespace fs = std::filesystem;
using sqlite_testing::RawDb;
using sqlite_testing::TempDir;
using telemetry::Downsampler;
using telemetry::GpuBucket;
using telemetry::GpuPoint;
using telemetry::kNaN;
using telemetry::PoolBucket;
using telemetry::PoolPoint;

constexpr int64_t kMinute = 60'000;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;
// A day boundary, so every tier's buckets line up with it.
constexpr int64_t kT0 = 1'700'000'000'000 - 1'700'000'000'000 % kDay;

std::unique_ptr<HistoryStore> MustOpen(const std::string& path, HistoryOptions o = {}) {
  auto s = HistoryStore::Open(path, std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

GpuPoint Point(int64_t t, double util, int32_t samples = 1) {
  GpuPoint p;
  p.t_ms = t;
  p.samples = samples;
  p.utilization = util;
  p.utilization_max = util;
  p.memory_used_mib = 1000;
  p.memory_used_max_mib = 1500;
  p.memory_total_mib = 80'000;
  p.temperature_c = 55;
  p.power_w = 250;
  p.energy_j = static_cast<double>(t) / 1000;
  p.allocated = 0.5;
  return p;
}

PoolPoint Pool(int64_t t, double gpus, int32_t samples = 1) {
  PoolPoint p;
  p.t_ms = t;
  p.samples = samples;
  p.gpus = gpus;
  p.gpus_reporting = gpus;
  p.allocated_gpus = 1;
  p.utilization_sum = 2;
  p.power_w = 900;
  p.jobs_running = 3;
  p.jobs_pending = 4;
  p.nodes_connected = 1;
  return p;
}

// Points of tier `tier` (an index into the default tiers) every `step` in
// [from, to) for `gpus` GPUs of node `node`, and the pool's, utilization `util`.
Downsampler::Flushed Points(int tier, int64_t step, int64_t from, int64_t to, int gpus, double util,
                            const std::string& node = "n1") {
  Downsampler::Flushed f;
  for (int64_t t = from; t < to; t += step) {
    for (int g = 0; g < gpus; ++g) f.gpus.push_back(GpuBucket{tier, node, g, Point(t, util)});
    f.pool.push_back(PoolBucket{tier, Pool(t, gpus)});
  }
  return f;
}

int64_t Count(RawDb& db, const std::string& where) {
  return std::stoll(db.Scalar("SELECT COUNT(*) FROM gpu_points WHERE " + where));
}

TEST(HistoryStoreTest, WritesAndReadsBackWhatTheDownsamplerFlushed) {
  TempDir dir;
  const std::string path = dir.path() + "/telemetry.db";
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->warning(), "");

  Downsampler d(telemetry::DefaultTiers());
  for (int64_t t = kT0; t < kT0 + 2 * kMinute; t += 2'000) {
    for (int32_t gpu = 0; gpu < 2; ++gpu) {
      telemetry::GpuReading r;
      r.node = "n1";
      r.gpu = gpu;
      r.utilization_percent = static_cast<int32_t>((t - kT0) / 2'000 % 100);
      r.memory_used_mib = 100 * gpu;
      r.memory_total_mib = 81'920;
      r.temperature_c = -1;  // never known: NULL, read back as NaN
      r.power_mw = 200'000;
      r.energy_mj = t - kT0;
      r.allocated_milli = 250;
      d.AddGpu(t, r);
    }
    d.AddPool(t, {.gpus = 2, .gpus_reporting = 2, .allocated_gpus = 0.5, .jobs_running = 1});
  }
  auto flushed = d.Flush(kT0 + 2 * kMinute);
  ASSERT_EQ(flushed.gpus.size(), 2u * 12);  // 10 s tier only: the 5 min bucket is open
  ASSERT_TRUE(store->Write(flushed).ok());

  store.reset();  // read back from the file, not from memory
  store = MustOpen(path);
  auto series = store->Gpus("n1", {}, kT0, kT0 + 2 * kMinute, 10'000);
  ASSERT_TRUE(series.ok()) << series.status().ToString();
  ASSERT_EQ(series->size(), 2u);
  for (int32_t gpu = 0; gpu < 2; ++gpu) {
    const GpuSeries& s = (*series)[static_cast<size_t>(gpu)];
    EXPECT_EQ(s.node, "n1");
    EXPECT_EQ(s.gpu, gpu);
    EXPECT_EQ(s.step_ms, 10'000);
    ASSERT_EQ(s.points.size(), 12u);
    for (size_t i = 0; i < 12; ++i) {
      const GpuPoint& want = flushed.gpus[static_cast<size_t>(gpu) * 12 + i].point;
      const GpuPoint& got = s.points[i];
      EXPECT_EQ(got.t_ms, want.t_ms);
      EXPECT_EQ(got.samples, 5);
      EXPECT_DOUBLE_EQ(got.utilization, want.utilization);
      EXPECT_DOUBLE_EQ(got.utilization_max, want.utilization_max);
      EXPECT_DOUBLE_EQ(got.memory_used_mib, 100.0 * gpu);
      EXPECT_DOUBLE_EQ(got.memory_total_mib, 81'920);
      EXPECT_TRUE(std::isnan(got.temperature_c));
      EXPECT_DOUBLE_EQ(got.power_w, 200);
      EXPECT_DOUBLE_EQ(got.energy_j, want.energy_j);
      EXPECT_DOUBLE_EQ(got.allocated, 0.25);
    }
  }
  RawDb raw(path);
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM gpu_points WHERE temp IS NULL"), "24");
  EXPECT_EQ(raw.Scalar("SELECT DISTINCT tier FROM gpu_points"), "10000");  // the step

  auto pool = store->Pool(kT0, kT0 + 2 * kMinute, 10'000);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_EQ(pool->points.size(), 12u);
  EXPECT_EQ(pool->points[3].t_ms, kT0 + 30'000);
  EXPECT_DOUBLE_EQ(pool->points[3].gpus, 2);
  EXPECT_DOUBLE_EQ(pool->points[3].allocated_gpus, 0.5);
  EXPECT_DOUBLE_EQ(pool->points[3].jobs_running, 1);
  EXPECT_DOUBLE_EQ(pool->points[3].power_w, 0);

  // Half open: [since, until).
  auto part = store->Gpus("n1", {1}, kT0 + 10'000, kT0 + 30'000, 10'000);
  ASSERT_TRUE(part.ok());
  ASSERT_EQ(part->size(), 1u);
  ASSERT_EQ((*part)[0].points.size(), 2u);
  EXPECT_EQ((*part)[0].points[0].t_ms, kT0 + 10'000);
}

TEST(HistoryStoreTest, AWrittenPointIsReplacedNotDuplicated) {
  TempDir dir;
  auto store = MustOpen(dir.path() + "/t.db");
  ASSERT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kMinute, 1, 0.1)).ok());
  ASSERT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kMinute, 1, 0.7)).ok());
  auto s = store->Gpus("n1", {0}, kT0, kT0 + kMinute, 10'000);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ((*s)[0].points.size(), 6u);
  EXPECT_DOUBLE_EQ((*s)[0].points[0].utilization, 0.7);
}

TEST(HistoryStoreTest, PointsOfAnotherTierSetAreRefusedWhole) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto store = MustOpen(path);
  auto f = Points(0, 10'000, kT0, kT0 + kMinute, 1, 0.1);
  f.gpus.push_back(GpuBucket{2, "n1", 0, Point(kT0, 0.1)});
  Status st = store->Write(f);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tier 2"), std::string::npos) << st.message();
  f.gpus.back() = GpuBucket{1, "n1", 0, Point(kT0 + 10'000, 0.1)};  // not on the 5 min step
  st = store->Write(f);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("300000 ms step"), std::string::npos) << st.message();
  RawDb raw(path);
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM gpu_points"), "0");
}

// A week of history as the server keeps it: the 10 s tier for the last day
// (utilization 0.1), the 5 min tier for the week (0.5).
class HistoryQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MustOpen(dir_.path() + "/t.db");
    ASSERT_TRUE(store_);
    ASSERT_TRUE(store_->Write(Points(0, 10'000, now_ - kDay, now_, 2, 0.1)).ok());
    ASSERT_TRUE(store_->Write(Points(1, 5 * kMinute, now_ - 7 * kDay, now_, 2, 0.5)).ok());
  }
  TempDir dir_;
  std::unique_ptr<HistoryStore> store_;
  const int64_t now_ = kT0 + 30 * kDay;
};

TEST_F(HistoryQueryTest, AWeekAgoIsAnsweredFromTheFiveMinuteTier) {
  auto s = store_->Gpus("n1", {}, now_ - 7 * kDay, now_, 5 * kMinute);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].step_ms, 5 * kMinute);
  EXPECT_EQ((*s)[0].points.size(), 7u * 288);
  EXPECT_DOUBLE_EQ((*s)[0].points.front().utilization, 0.5);
  EXPECT_DOUBLE_EQ((*s)[0].points.back().utilization, 0.5);

  // A finer step cannot be had that far back: the tier's step is used.
  auto fine = store_->Gpus("n1", {0}, now_ - 7 * kDay, now_, 10'000);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ((*fine)[0].step_ms, 5 * kMinute);

  auto pool = store_->Pool(now_ - 7 * kDay, now_, kHour);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(pool->step_ms, kHour);
  ASSERT_EQ(pool->points.size(), 7u * 24);
  EXPECT_EQ(pool->points[0].samples, 12);
  EXPECT_DOUBLE_EQ(pool->points[0].gpus, 2);
}

TEST_F(HistoryQueryTest, TheLastHourIsAnsweredFromTheTenSecondTier) {
  auto s = store_->Gpus("n1", {0}, now_ - kHour, now_, 10'000);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)[0].step_ms, 10'000);
  ASSERT_EQ((*s)[0].points.size(), 360u);
  EXPECT_DOUBLE_EQ((*s)[0].points[0].utilization, 0.1);
  // Asked a step below the finest: the finest.
  auto finer = store_->Gpus("n1", {0}, now_ - kHour, now_, 1);
  ASSERT_TRUE(finer.ok());
  EXPECT_EQ((*finer)[0].step_ms, 10'000);
  EXPECT_EQ((*finer)[0].points.size(), 360u);
}

TEST_F(HistoryQueryTest, ACoarserStepIsResampledFromTheTierRead) {
  auto s = store_->Gpus("n1", {1}, now_ - kHour, now_, kMinute);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const GpuSeries& g = (*s)[0];
  EXPECT_EQ(g.step_ms, kMinute);
  ASSERT_EQ(g.points.size(), 60u);
  EXPECT_EQ(g.points[1].t_ms - g.points[0].t_ms, kMinute);
  EXPECT_EQ(g.points[0].samples, 6);
  EXPECT_DOUBLE_EQ(g.points[0].utilization, 0.1);  // the 10 s tier's
  // The last point's energy is that of the bucket's last 10 s point.
  EXPECT_DOUBLE_EQ(g.points.back().energy_j, static_cast<double>(now_ - 10'000) / 1000);

  // A step that is no multiple of the tier's is rounded up to one: 7 min
  // over the 5 min tier is 10 min.
  auto week = store_->Gpus("n1", {1}, now_ - 7 * kDay, now_, 7 * kMinute);
  ASSERT_TRUE(week.ok());
  EXPECT_EQ((*week)[0].step_ms, 10 * kMinute);
  EXPECT_EQ((*week)[0].points.size(), 7u * 144);
  EXPECT_EQ((*week)[0].points[0].samples, 2);
}

TEST_F(HistoryQueryTest, AskedGpusAreEachReturnedOnceInOrder) {
  auto s = store_->Gpus("n1", {5, 1, 0, 1}, now_ - kHour, now_, kMinute);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].gpu, 0);
  EXPECT_EQ((*s)[1].gpu, 1);
  EXPECT_EQ((*s)[2].gpu, 5);
  EXPECT_TRUE((*s)[2].points.empty());  // asked for, never reported
  auto other = store_->Gpus("n2", {}, now_ - kHour, now_, kMinute);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
}

TEST_F(HistoryQueryTest, BadArgumentsAreNamed) {
  auto expect_bad = [](const Status& st, const std::string& says) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
  };
  expect_bad(store_->Gpus("n1", {}, now_, now_, kMinute).status(), "since_ms");
  expect_bad(store_->Gpus("n1", {}, now_, now_ - kHour, kMinute).status(), "until_ms");
  expect_bad(store_->Pool(-1, now_, kMinute).status(), "since_ms");
  expect_bad(store_->Gpus("n1", {}, now_ - kHour, now_, 0).status(), "step_ms");
  expect_bad(store_->Pool(now_ - kHour, now_, -5).status(), "step_ms");
  expect_bad(store_->Gpus("", {}, now_ - kHour, now_, kMinute).status(), "node");
  expect_bad(store_->Gpus("n1", {-1}, now_ - kHour, now_, kMinute).status(), "gpus");
  // 40 days of the 5 min tier: 11 520 points.
  Status many = store_->Pool(now_ - 40 * kDay, now_, kMinute).status();
  expect_bad(many, "11520 points");
  expect_bad(many, "step_ms of at least 345600");
  EXPECT_TRUE(store_->Pool(now_ - 40 * kDay, now_, 345'600).ok());
}

TEST(HistoryStoreTest, PruneDeletesEachTiersPointsPastItsKeep) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto store = MustOpen(path);
  const int64_t now = kT0 + 40 * kDay;
  ASSERT_TRUE(store->Write(Points(0, 10'000, now - 2 * kDay, now, 2, 0.1)).ok());
  ASSERT_TRUE(store->Write(Points(1, 5 * kMinute, now - 35 * kDay, now, 2, 0.5)).ok());
  ASSERT_TRUE(store->Prune(now).ok());
  RawDb raw(path);
  EXPECT_EQ(Count(raw, "tier = 10000"), 2 * 8640);
  EXPECT_EQ(raw.Scalar("SELECT MIN(t_ms) FROM gpu_points WHERE tier = 10000"),
            std::to_string(now - kDay));
  EXPECT_EQ(Count(raw, "tier = 300000"), 2 * 30 * 288);
  EXPECT_EQ(raw.Scalar("SELECT MIN(t_ms) FROM pool_points WHERE tier = 300000"),
            std::to_string(now - 30 * kDay));
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM pool_points WHERE tier = 10000"), "8640");
}

TEST(HistoryStoreTest, TheSizeBoundKeepsTheFileSmallDeletingTheFinestOldestFirst) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  HistoryOptions o;
  o.max_bytes = 512 * 1024;
  auto store = MustOpen(path, o);
  int64_t now = kT0;
  int64_t written = 0;
  // Ten rounds of an hour of 10 s points for 16 GPUs (about 10 MB in all),
  // pruning after each as the server does.
  for (int round = 0; round < 10; ++round) {
    auto f = Points(0, 10'000, now, now + kHour, 16, 0.1);
    auto coarse = Points(1, 5 * kMinute, now, now + kHour, 16, 0.5);
    f.gpus.insert(f.gpus.end(), coarse.gpus.begin(), coarse.gpus.end());
    f.pool.insert(f.pool.end(), coarse.pool.begin(), coarse.pool.end());
    written += static_cast<int64_t>(f.gpus.size());
    ASSERT_TRUE(store->Write(f).ok());
    now += kHour;
    ASSERT_TRUE(store->Prune(now).ok());
    auto bytes = store->Bytes();
    ASSERT_TRUE(bytes.ok());
    EXPECT_LE(*bytes, o.max_bytes) << "round " << round;
    EXPECT_LE(static_cast<int64_t>(fs::file_size(path)), o.max_bytes) << "round " << round;
  }
  EXPECT_GT(written * 100, 10 * o.max_bytes);  // far more was written than is kept
  RawDb raw(path);
  // The newest 10 s points are kept, the oldest went; the 5 min tier is whole.
  EXPECT_EQ(raw.Scalar("SELECT MAX(t_ms) FROM gpu_points WHERE tier = 10000"),
            std::to_string(now - 10'000));
  EXPECT_GT(std::stoll(raw.Scalar("SELECT MIN(t_ms) FROM gpu_points WHERE tier = 10000")),
            kT0 + kHour);
  EXPECT_EQ(Count(raw, "tier = 300000"), 16 * 12 * 10);
  // A range the size bound cut from the 10 s tier is read from the 5 min one.
  auto s = store->Gpus("n1", {0}, kT0, kT0 + kHour, 10'000);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)[0].step_ms, 5 * kMinute);
  EXPECT_EQ((*s)[0].points.size(), 12u);
  // The cut survives a restart.
  store.reset();
  store = MustOpen(path, o);
  s = store->Gpus("n1", {0}, kT0, kT0 + kHour, 10'000);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].step_ms, 5 * kMinute);
}

TEST(HistoryStoreTest, ATinyBoundEmptiesTheFinestTierThenTheNext) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  HistoryOptions o;
  o.max_bytes = 1;  // below even the empty schema: everything goes, nothing loops
  auto store = MustOpen(path, o);
  ASSERT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kHour, 4, 0.1)).ok());
  ASSERT_TRUE(store->Write(Points(1, 5 * kMinute, kT0, kT0 + kHour, 4, 0.1)).ok());
  ASSERT_TRUE(store->Prune(kT0 + kHour).ok());
  RawDb raw(path);
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM gpu_points"), "0");
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM pool_points"), "0");
}

TEST(HistoryStoreTest, ADamagedFileIsMovedAsideAndAFreshOneCreated) {
  TempDir dir;
  const std::string path = dir.path() + "/telemetry.db";
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kHour, 8, 0.1)).ok());
  }
  // Damage every page after the first (the header stays a SQLite header).
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 8192u);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    std::string junk(size - 4096, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  EXPECT_NE(store->warning().find("moved it aside to " + path + ".damaged-"), std::string::npos)
      << store->warning();
  int asides = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    if (e.path().filename().string().starts_with("telemetry.db.damaged-")) {
      ++asides;
      EXPECT_EQ(fs::file_size(e.path()), size);  // kept as it was
    }
  }
  EXPECT_EQ(asides, 1);
  // The fresh history works.
  auto s = store->Pool(kT0, kT0 + kHour, 10'000);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->points.empty());
  ASSERT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kMinute, 1, 0.1)).ok());
}

TEST(HistoryStoreTest, AFileThatIsNoDatabaseIsMovedAside) {
  TempDir dir;
  const std::string path = dir.path() + "/telemetry.db";
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(10'000, 'x');
  }
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  EXPECT_NE(store->warning().find("moved it aside"), std::string::npos) << store->warning();
  EXPECT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kMinute, 1, 0.1)).ok());
}

TEST(HistoryStoreTest, AnotherProgramsDatabaseIsRefusedNotMoved) {
  TempDir dir;
  const std::string path = dir.path() + "/state.db";
  {
    RawDb raw(path);
    raw.Exec("CREATE TABLE jobs (id INTEGER PRIMARY KEY)");
  }
  auto store = HistoryStore::Open(path, {});
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
  RawDb raw(path);
  EXPECT_EQ(raw.Scalar("SELECT name FROM sqlite_master"), "jobs");
}

TEST(HistoryStoreTest, ChangedTiersKeepTheirOwnPointsAndDropTheRest) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(store->Write(Points(0, 10'000, kT0, kT0 + kHour, 2, 0.1)).ok());
    ASSERT_TRUE(store->Write(Points(1, 5 * kMinute, kT0, kT0 + kHour, 2, 0.5)).ok());
  }
  HistoryOptions o;
  o.tiers = {{kMinute, 7 * kDay}, {5 * kMinute, 90 * kDay}};
  auto store = MustOpen(path, o);
  ASSERT_TRUE(store);
  EXPECT_NE(store->warning().find("deleted " + std::to_string(2 * 360 + 360) + " points"),
            std::string::npos)
      << store->warning();
  RawDb raw(path);
  EXPECT_EQ(Count(raw, "tier = 10000"), 0);
  EXPECT_EQ(Count(raw, "tier = 300000"), 2 * 12);
  // The 5 min points are still found (now the second tier, under another keep).
  auto s = store->Gpus("n1", {0}, kT0, kT0 + kHour, 5 * kMinute);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].step_ms, 5 * kMinute);
  ASSERT_EQ((*s)[0].points.size(), 12u);
  EXPECT_DOUBLE_EQ((*s)[0].points[0].utilization, 0.5);
  // The new tier index 0 is the 1 min step.
  ASSERT_TRUE(store->Write(Points(0, kMinute, kT0, kT0 + kHour, 1, 0.2)).ok());
  EXPECT_EQ(Count(raw, "tier = 60000"), 60);
  store.reset();
  store = MustOpen(path, o);
  EXPECT_EQ(store->warning(), "");  // the same tiers: nothing to say
}

TEST(HistoryStoreTest, BadOptionsAreRefused) {
  TempDir dir;
  HistoryOptions o;
  o.tiers = {{5 * kMinute, kDay}, {10'000, kDay}};
  auto r = HistoryStore::Open(dir.path() + "/t.db", o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tiers[1]"), std::string::npos) << r.status().message();
  o = HistoryOptions{};
  o.max_bytes = 0;
  r = HistoryStore::Open(dir.path() + "/t.db", o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("max_bytes"), std::string::npos);
}

}  // namespace
}  // namespace gpupool
