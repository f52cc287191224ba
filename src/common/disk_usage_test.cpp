#include "common/disk_usage.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// What is below `dir`, not `dir` itself (the shim's disk limit).
int64_t Below(const std::string& dir, int64_t stop_after = 0) {
  return DiskUsage(dir, {.count_root = false, .stop_after = stop_after});
}

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpupool-tree-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, int64_t bytes, off_t at = 0) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  std::string chunk(64 * 1024, 'x');
  for (int64_t done = 0; done < bytes;) {
    size_t n = static_cast<size_t>(std::min<int64_t>(bytes - done, chunk.size()));
    ASSERT_EQ(::pwrite(fd, chunk.data(), n, at + done), static_cast<ssize_t>(n));
    done += static_cast<int64_t>(n);
  }
  ::fsync(fd);  // blocks are allocated (delayed allocation would show 0)
  ::close(fd);
}

int64_t BlocksOf(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

TEST(DiskUsageTest, CountsBlocksOnceAndFollowsNoLinks) {
  TempDir dir;
  EXPECT_EQ(Below(dir.path()), 0);
  WriteBytes(dir / "a", kMiB);
  ASSERT_EQ(::mkdir((dir / "sub").c_str(), 0755), 0);
  WriteBytes(dir / "sub/b", kMiB);
  ASSERT_EQ(::link((dir / "a").c_str(), (dir / "sub/a-again").c_str()), 0);
  // Sparse: 100 MiB long, one 4 KiB block written.
  int fd = ::open((dir / "sparse").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100 * kMiB), 0);
  ::close(fd);
  WriteBytes(dir / "sparse", 4096, 50 * kMiB);
  ASSERT_EQ(::symlink("/usr", (dir / "usr-link").c_str()), 0);

  int64_t expected = BlocksOf(dir / "a") + BlocksOf(dir / "sub") + BlocksOf(dir / "sub/b") +
                     BlocksOf(dir / "sparse") + BlocksOf(dir / "usr-link");
  EXPECT_EQ(Below(dir.path()), expected);
  EXPECT_GE(expected, 2 * kMiB);
  EXPECT_LT(expected, 3 * kMiB);  // the hard link and the sparse file's hole cost nothing

  EXPECT_EQ(Below(dir / "sub"), BlocksOf(dir / "sub/b") + BlocksOf(dir / "a"));
  EXPECT_EQ(Below(dir / "missing"), 0);
}

TEST(DiskUsageTest, StopsPastTheLimit) {
  TempDir dir;
  for (int i = 0; i < 10; ++i) WriteBytes(dir / ("f" + std::to_string(i)), kMiB);
  int64_t all = Below(dir.path());
  EXPECT_GE(all, 10 * kMiB);
  EXPECT_EQ(Below(dir.path(), 0), all);
  int64_t some = Below(dir.path(), 3 * kMiB);
  EXPECT_GT(some, 3 * kMiB);
  EXPECT_LE(some, 4 * kMiB + 64 * 1024);  // stopped at the first file past the limit
  EXPECT_EQ(Below(dir.path(), 100 * kMiB), all);
}

TEST(DiskUsageTest, DoesNotEnterOtherMounts) {
  TempDir dir;
  WriteBytes(dir / "a", kMiB);
  ASSERT_EQ(::mkdir((dir / "mnt").c_str(), 0755), 0);
  int64_t before = Below(dir.path());
  if (::mount("tmpfs", (dir / "mnt").c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  WriteBytes(dir / "mnt/big", 4 * kMiB);
  int64_t with_mount = Below(dir.path());
  ::umount2((dir / "mnt").c_str(), MNT_DETACH);
  // The mount point is skipped, with whatever it holds.
  EXPECT_EQ(with_mount, before - BlocksOf(dir / "mnt"));
}

TEST(DiskUsageTest, CountsTheRootWhenAsked) {
  TempDir dir;
  WriteBytes(dir / "a", kMiB);
  // The whole tree (an image bundle's size): the directory's own blocks too.
  EXPECT_EQ(DiskUsage(dir.path()), Below(dir.path()) + BlocksOf(dir.path()));
  // A file is its own blocks.
  EXPECT_EQ(DiskUsage(dir / "a"), BlocksOf(dir / "a"));
  EXPECT_EQ(Below(dir / "a"), 0);
  EXPECT_EQ(DiskUsage(dir / "missing"), 0);
}

TEST(DiskUsageTest, DoesNotFollowASymlinkedRootOrDirectory) {
  TempDir dir, elsewhere;
  WriteBytes(elsewhere / "big", 4 * kMiB);
  ASSERT_EQ(::mkdir((dir / "sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), (dir / "sub/link").c_str()), 0);
  // The link costs its own blocks (none, for a short target), never the
  // tree it points at, neither below a directory nor as the root itself.
  EXPECT_LT(Below(dir.path()), kMiB);
  EXPECT_EQ(DiskUsage(dir / "sub/link"), BlocksOf(dir / "sub/link"));
  EXPECT_EQ(Below(dir / "sub/link"), 0);
}

}  // namespace
}  // namespace gpupool
