#include "agent/staging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "blob/tree_testing.h"
#include "common/files.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

using blob::testing::CountingStore;
using blob::testing::RandomBytes;
using blob::testing::Write;

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-staging-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    store_ = *blob::FsChunkStore::Open((root_ / "chunks").string(), false);
    staging_ = (root_ / "data/staged").string();
    state_ = RandomBytes(2 << 20, 3);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Checkpoint N of a job: state.bin with block N rewritten, in ckpt-N.
  blob::Manifest Checkpoint(int n) {
    std::string state = state_;
    state.replace(static_cast<size_t>(n) * 100000, 4096, RandomBytes(4096, 100 + n));
    fs::path dir = root_ / ("src-" + std::to_string(n));
    Write(dir / ("ckpt-" + std::to_string(n)) / "state.bin", state);
    return *blob::StoreTree(dir.string(), *store_);
  }
  std::string Restored(const fs::path& dir, int n) {
    return *ReadFile((dir / ("ckpt-" + std::to_string(n)) / "state.bin").string());
  }
  std::string Source(int n) {
    return *ReadFile(
        (root_ / ("src-" + std::to_string(n)) / ("ckpt-" + std::to_string(n)) / "state.bin")
            .string());
  }

  fs::path root_;
  std::unique_ptr<blob::FsChunkStore> store_;
  std::string staging_, state_;
};

TEST_F(StagingTest, AStagedTreeIsTakenAsTheBaseOfARestore) {
  ASSERT_TRUE(StageTree(staging_, 7, Checkpoint(1), *store_).ok());
  EXPECT_EQ(fs::status(staging_).permissions() & fs::perms::all, fs::perms::owner_all);
  auto base = TakeStaged(staging_, 7, (root_ / "task/staged-base").string(), 1000);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(Restored(base->dir, 1), Source(1));
  EXPECT_FALSE(fs::exists(staging_ + "/job-7"));  // taken, not copied

  // The restore of checkpoint 2 over it reads a few chunks only.
  CountingStore counting(*store_);
  blob::RestoreStats stats;
  ASSERT_TRUE(
      blob::RestoreTree(Checkpoint(2), counting, (root_ / "out").string(), &*base, &stats).ok());
  EXPECT_EQ(Restored(root_ / "out", 2), Source(2));
  // Two 4 KiB blocks differ (checkpoint 1's and 2's): a few chunks each.
  EXPECT_LE(counting.reads.load(), 6);
  EXPECT_GT(stats.reused_bytes, static_cast<int64_t>(state_.size()) * 9 / 10);
}

TEST_F(StagingTest, NothingStagedIsNotFound) {
  EXPECT_EQ(TakeStaged(staging_, 7, (root_ / "b").string(), 0).status().code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(StageTree(staging_, 7, Checkpoint(1), *store_).ok());
  EXPECT_EQ(TakeStaged(staging_, 8, (root_ / "b").string(), 0).status().code(),
            StatusCode::kNotFound);
}

TEST_F(StagingTest, ANewerCheckpointIsStagedOverTheOlderOne) {
  ASSERT_TRUE(StageTree(staging_, 7, Checkpoint(1), *store_).ok());
  CountingStore counting(*store_);
  blob::RestoreStats stats;
  ASSERT_TRUE(StageTree(staging_, 7, Checkpoint(2), counting, &stats).ok());
  EXPECT_LE(counting.reads.load(), 6);
  EXPECT_EQ(stats.read_chunks, counting.reads.load());
  EXPECT_EQ(Restored(staging_ + "/job-7/tree", 2), Source(2));
  EXPECT_FALSE(fs::exists(staging_ + "/job-7/tree/ckpt-1"));
  EXPECT_FALSE(fs::exists(staging_ + "/job-7.new"));
  // The same one again reads nothing.
  const int before = counting.reads.load();
  ASSERT_TRUE(StageTree(staging_, 7, Checkpoint(2), counting).ok());
  EXPECT_EQ(counting.reads.load(), before);
}

TEST_F(StagingTest, TakingWaitsForTheStagingInProgress) {
  CountingStore slow(*store_);
  slow.delay = std::chrono::milliseconds(2);
  blob::Manifest m = Checkpoint(1);
  std::thread stager([&] { ASSERT_TRUE(StageTree(staging_, 7, m, slow).ok()); });
  while (slow.reads.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto base = TakeStaged(staging_, 7, (root_ / "task/staged-base").string(), 30'000);
  stager.join();
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(Restored(base->dir, 1), Source(1));
}

TEST_F(StagingTest, TakingWaitsForAnOrderTheStagerHasNotBegun) {
  // The Stager marks an order as it accepts it, before its thread gets to it.
  const std::string mark = staging_ + "/job-7.pending";
  fs::create_directories(staging_);
  Write(mark, "");
  blob::Manifest m = Checkpoint(1);
  std::thread stager([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_TRUE(StageTree(staging_, 7, m, *store_, nullptr, mark).ok());
  });
  auto base = TakeStaged(staging_, 7, (root_ / "task/staged-base").string(), 30'000);
  stager.join();
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(Restored(base->dir, 1), Source(1));
  EXPECT_FALSE(fs::exists(mark));
}

TEST_F(StagingTest, AStagingThatOutlastsTheWaitIsNotUsed) {
  CountingStore slow(*store_);
  slow.delay = std::chrono::milliseconds(5);
  blob::Manifest m = Checkpoint(1);
  std::thread stager([&] { ASSERT_TRUE(StageTree(staging_, 7, m, slow).ok()); });
  while (slow.reads.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(TakeStaged(staging_, 7, (root_ / "b").string(), 50).status().code(),
            StatusCode::kNotFound);
  stager.join();
  EXPECT_TRUE(fs::exists(staging_ + "/job-7/manifest.json"));
}

TEST_F(StagingTest, PruneRemovesOnlyOldStagedTrees) {
  ASSERT_TRUE(StageTree(staging_, 7, Checkpoint(1), *store_).ok());
  ASSERT_TRUE(StageTree(staging_, 8, Checkpoint(2), *store_).ok());
  struct timespec old[2] = {{1, 0}, {1, 0}};  // 1970
  ASSERT_EQ(::utimensat(AT_FDCWD, (staging_ + "/job-7").c_str(), old, 0), 0);
  EXPECT_EQ(PruneStaged(staging_, 60'000), 1);
  EXPECT_FALSE(fs::exists(staging_ + "/job-7"));
  EXPECT_TRUE(fs::exists(staging_ + "/job-8/manifest.json"));
}

}  // namespace
}  // namespace gpupool::agent
