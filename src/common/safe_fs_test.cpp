#include "common/safe_fs.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

namespace gpupool {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SafeFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-safe-fs-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    fs::create_directories(root_ / "a/b/c");
    fs::create_directories(root_ / "outside");
    std::ofstream(root_ / "outside/secret") << "secret";
    std::ofstream(root_ / "a/file") << "file";
    fd_ = UniqueFd(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid());
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
  UniqueFd fd_;
};

using OpenFn = Result<UniqueFd> (*)(int, std::string_view);

// Both ways of opening beneath keep the same contract.
class OpenBeneathTest : public SafeFsTest, public ::testing::WithParamInterface<OpenFn> {};

TEST_P(OpenBeneathTest, OpensPlainPathsAndRefusesSymlinksAndEscapes) {
  OpenFn open = GetParam();
  auto fd = open(fd_.get(), "a/b/c");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  struct stat got, want;
  ASSERT_EQ(::fstat(fd->get(), &got), 0);
  ASSERT_EQ(::stat((root_ / "a/b/c").c_str(), &want), 0);
  EXPECT_EQ(got.st_ino, want.st_ino);
  EXPECT_TRUE(open(fd_.get(), "").ok());  // the directory itself

  // A symlink anywhere on the way, to inside or outside: refused.
  fs::create_directory_symlink(root_ / "outside", root_ / "a/b/out");
  fs::create_directory_symlink("c", root_ / "a/b/in");
  for (const char* p : {"a/b/out", "a/b/in", "a/b/in/.", "a/b/out/x"}) {
    auto r = open(fd_.get(), p);
    EXPECT_FALSE(r.ok()) << p;
  }
  EXPECT_EQ(open(fd_.get(), "a/b/out").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(open(fd_.get(), "a/file").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(open(fd_.get(), "a/missing").status().code(), StatusCode::kNotFound);
  for (const char* p : {"..", "a/../..", "/etc", "a//b", "a/./b", "a/"}) {
    EXPECT_EQ(open(fd_.get(), p).status().code(), StatusCode::kInvalidArgument) << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Both, OpenBeneathTest,
                         ::testing::Values(&OpenDirBeneath, &OpenDirByComponents));

TEST_F(SafeFsTest, TheKernelHereHasOpenat2) {
  // Linux >= 5.6; the fallback is tested above either way.
  EXPECT_TRUE(HaveOpenat2());
}

TEST_F(SafeFsTest, AnEntrySwappedAfterItsListingIsNotOpened) {
  UniqueFd a(::openat(fd_.get(), "a", O_RDONLY | O_DIRECTORY));
  auto listed = StatEntry(a.get(), "b");
  ASSERT_TRUE(listed.ok());
  // b becomes a symlink to outside: the open says so instead of following.
  fs::rename(root_ / "a/b", root_ / "a/b.moved");
  fs::create_directory_symlink(root_ / "outside", root_ / "a/b");
  auto opened = OpenEntry(a.get(), "b", *listed);
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("changed while being read"));
  // b becomes another directory: the inode differs.
  fs::remove(root_ / "a/b");
  fs::create_directory(root_ / "a/b");
  EXPECT_EQ(OpenEntry(a.get(), "b", *listed).status().code(), StatusCode::kFailedPrecondition);
  // A file swapped for a FIFO: opened without blocking, then refused.
  auto file = StatEntry(a.get(), "file");
  ASSERT_TRUE(file.ok());
  fs::remove(root_ / "a/file");
  ASSERT_EQ(::mkfifo((root_ / "a/file").c_str(), 0644), 0);
  EXPECT_EQ(OpenEntry(a.get(), "file", *file).status().code(), StatusCode::kFailedPrecondition);
  // Gone: NotFound.
  fs::remove(root_ / "a/file");
  EXPECT_EQ(OpenEntry(a.get(), "file", *file).status().code(), StatusCode::kNotFound);
}

TEST_F(SafeFsTest, ListsSortedAndReadsLinks) {
  fs::create_symlink("../outside/secret", root_ / "a/link");
  UniqueFd a(::openat(fd_.get(), "a", O_RDONLY | O_DIRECTORY));
  auto names = ListDir(a.get());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"b", "file", "link"}));
  EXPECT_EQ(*ReadLinkAt(a.get(), "link"), "../outside/secret");
  EXPECT_EQ(ReadLinkAt(a.get(), "file").status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SafeFsTest, MakeDirAndOpenOrMakeNeverFollowTheLastComponent) {
  fs::create_directory_symlink(root_ / "outside", root_ / "a/link");
  UniqueFd a(::openat(fd_.get(), "a", O_RDONLY | O_DIRECTORY));
  EXPECT_EQ(MakeDirAt(a.get(), "link", 0700, true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(MakeDirAt(a.get(), "b", 0700, false).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MakeDirAt(a.get(), "b", 0700, true).ok());
  EXPECT_TRUE(MakeDirAt(a.get(), "new", 0700, false).ok());
  EXPECT_EQ(OpenOrMakeDirPath((root_ / "a/link").string(), 0700).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(OpenOrMakeDirPath((root_ / "x/y/z").string(), 0700).ok());
  EXPECT_TRUE(fs::is_directory(root_ / "x/y/z"));
  EXPECT_TRUE(OpenOrMakeDirPath((root_ / "x/y/z/").string(), 0700).ok());
  // The parents are the caller's: a symlink there is followed.
  EXPECT_TRUE(OpenOrMakeDirPath((root_ / "a/link/made").string(), 0700).ok());
  EXPECT_TRUE(fs::is_directory(root_ / "outside/made"));
}

TEST_F(SafeFsTest, ChownTreeChangesLinksNotWhatTheyPointTo) {
  if (::geteuid() != 0) {
    // Only root gives files away; an ordinary user gets a clear error.
    EXPECT_FALSE(ChownTree(fd_.get(), 190001, 190001).ok());
    return;
  }
  fs::create_symlink(root_ / "outside/secret", root_ / "a/b/link");
  UniqueFd a(::openat(fd_.get(), "a", O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(ChownTree(a.get(), 190001, 190002).ok());
  struct stat st;
  for (const char* p : {"a", "a/b", "a/b/c", "a/file"}) {
    ASSERT_EQ(::lstat((root_ / p).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 190001u) << p;
    EXPECT_EQ(st.st_gid, 190002u) << p;
  }
  ASSERT_EQ(::lstat((root_ / "a/b/link").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 190001u);
  ASSERT_EQ(::stat((root_ / "outside/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // the target stays root's
}

// ---- identities -----------------------------------------------------------

TEST_F(SafeFsTest, AnUnsetIdentityChangesNothing) {
  auto id = ScopedFsIdentity::Assume(FsIdentity{});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(::setfsuid(static_cast<uid_t>(-1)), static_cast<int>(::geteuid()));
}

TEST_F(SafeFsTest, TheThreadOpensAsTheAccountAndOnlyThatThread) {
  constexpr int kUid = 190123;
  const std::string secret = (root_ / "outside/secret").string();
  ::chmod(secret.c_str(), 0640);  // root:root; group 0 may read
  if (::geteuid() != 0) {
    EXPECT_EQ(ScopedFsIdentity::Assume({kUid, kUid}).status().code(),
              StatusCode::kPermissionDenied);
    return;
  }
  // This thread's supplementary groups hold root's group, whose members may
  // read the file: the identity must drop them too.
  gid_t zero = 0;
  ASSERT_EQ(::syscall(SYS_setgroups, 1, &zero), 0);
  // Another thread, started before, opens while this one holds the identity.
  std::promise<void> go;
  std::future<bool> other_reads = std::async(std::launch::async, [&, ready = go.get_future()] {
    ready.wait();
    int fd = ::open(secret.c_str(), O_RDONLY);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  });
  {
    struct Go {  // the other thread is let go however this scope ends
      std::promise<void>& p;
      bool gone = false;
      void Now() {
        if (!std::exchange(gone, true)) p.set_value();
      }
      ~Go() { Now(); }
    };
    auto id = ScopedFsIdentity::Assume({kUid, kUid});
    Go release{go};
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(::open(secret.c_str(), O_RDONLY), -1);
    EXPECT_EQ(errno, EACCES);
    release.Now();
    EXPECT_TRUE(other_reads.get());  // still root, while this thread is not
  }
  // Restored: root again, with its groups.
  int fd = ::open(secret.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  gid_t groups[4];
  ASSERT_EQ(::getgroups(4, groups), 1);
  EXPECT_EQ(groups[0], 0u);
  EXPECT_EQ(::setfsuid(static_cast<uid_t>(-1)), 0);
}

}  // namespace
}  // namespace gpupool
