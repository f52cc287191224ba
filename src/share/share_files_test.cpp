// The agent's side of the share files, against the library's layout.
#include "share/share_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "gpushare/share_files.h"

namespace gpupool::share {
namespace {

namespace fs = std::filesystem;

class ShareFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/share-files-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ShareFilesTest, TheAgentReadsWantsAndWritesGrantsInTheLibrarysLayout) {
  auto files = TaskShareFiles::Create(dir_ + "/want", dir_ + "/grant");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(fs::file_size(dir_ + "/want"), GPUSHARE_SHARE_FILE_BYTES);
  EXPECT_EQ(files->ReadLastActiveNs(), 0);

  // The task's side: both mapped, as libgpushare maps them.
  int wfd = ::open((dir_ + "/want").c_str(), O_RDWR);
  int gfd = ::open((dir_ + "/grant").c_str(), O_RDONLY);
  auto* want = static_cast<gpushare_want_file*>(
      ::mmap(nullptr, GPUSHARE_SHARE_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0));
  auto* grant = static_cast<const gpushare_grant_file*>(
      ::mmap(nullptr, GPUSHARE_SHARE_FILE_BYTES, PROT_READ, MAP_SHARED, gfd, 0));
  ASSERT_NE(want, MAP_FAILED);
  ASSERT_NE(grant, MAP_FAILED);
  EXPECT_EQ(grant->grant, 0u);  // zero-filled: FREE, and stale (beat 0)
  EXPECT_EQ(grant->beat_ns, 0u);

  __atomic_store_n(&want->last_active_ns, 123456789012345ULL, __ATOMIC_RELAXED);
  EXPECT_EQ(files->ReadLastActiveNs(), 123456789012345LL);

  files->WriteGrant({GrantState::kRun, 5'000'000'000'000}, 4'000'000'000'000);
  EXPECT_EQ(gpushare_grant_state_of(grant->grant), GPUSHARE_GRANT_RUN);
  EXPECT_EQ(gpushare_grant_until(grant->grant), 5'000'000'000'000u);
  EXPECT_EQ(grant->beat_ns, 4'000'000'000'000u);
  files->WriteGrant({GrantState::kWait, 0}, 4'000'000'000'001);
  EXPECT_EQ(gpushare_grant_state_of(grant->grant), GPUSHARE_GRANT_WAIT);
  EXPECT_EQ(gpushare_grant_until(grant->grant), 0u);

  // A task that truncates its own want file reads as never active, and
  // the agent does not fault.
  ::munmap(want, GPUSHARE_SHARE_FILE_BYTES);
  ASSERT_EQ(::ftruncate(wfd, 0), 0);
  EXPECT_EQ(files->ReadLastActiveNs(), 0);
  ::munmap(const_cast<gpushare_grant_file*>(grant), GPUSHARE_SHARE_FILE_BYTES);
  ::close(wfd);
  ::close(gfd);
}

TEST_F(ShareFilesTest, CreateEmptiesFilesLeftOver) {
  {
    auto files = TaskShareFiles::Create(dir_ + "/want", dir_ + "/grant");
    ASSERT_TRUE(files.ok());
    files->WriteGrant({GrantState::kWait, 0}, 7);
  }
  auto again = TaskShareFiles::Create(dir_ + "/want", dir_ + "/grant");
  ASSERT_TRUE(again.ok());
  int gfd = ::open((dir_ + "/grant").c_str(), O_RDONLY);
  gpushare_grant_file g{};
  ASSERT_EQ(::pread(gfd, &g, sizeof g, 0), static_cast<ssize_t>(sizeof g));
  ::close(gfd);
  EXPECT_EQ(g.grant, 0u);
  EXPECT_EQ(g.beat_ns, 0u);
  EXPECT_FALSE(TaskShareFiles::Create(dir_ + "/no/such/dir/want", dir_ + "/grant").ok());
}

TEST(MonotonicNs, IsTheLibrarysClock) {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t before = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  int64_t now = MonotonicNs();
  EXPECT_GE(now, before);
  EXPECT_LT(now - before, 1'000'000'000);
}

}  // namespace
}  // namespace gpupool::share
