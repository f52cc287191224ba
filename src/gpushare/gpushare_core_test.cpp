// The parts of libgpushare.so that need no driver: the limits file, the
// task's usage ledger across processes, the table of allocations.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpushare/allocs.h"
#include "gpushare/ledger.h"
#include "gpushare/limits.h"

namespace {

using ::testing::HasSubstr;

std::string ParseError(const std::string& text) {
  gpushare_limits l;
  char err[256] = "";
  EXPECT_EQ(gpushare_parse_limits(text.data(), text.size(), &l, err, sizeof err), -1) << text;
  return err;
}

TEST(Limits, EveryKeyAndItsDefaults) {
  std::string text =
      "gpushare 1\n# the agent's\nmemory_bytes 1073741824\n  share_milli 300 \nmode strict\n"
      "usage /gpupool/share/usage\n";
  gpushare_limits l;
  char err[256];
  ASSERT_EQ(gpushare_parse_limits(text.data(), text.size(), &l, err, sizeof err), 0) << err;
  EXPECT_EQ(l.memory_bytes, 1073741824u);
  EXPECT_EQ(l.share_milli, 300u);
  EXPECT_EQ(l.mode, GPUSHARE_STRICT);
  EXPECT_STREQ(l.usage_path, "/gpupool/share/usage");
  std::string bare = "gpushare 1\n";
  ASSERT_EQ(gpushare_parse_limits(bare.data(), bare.size(), &l, err, sizeof err), 0);
  EXPECT_EQ(l.memory_bytes, 0u);
  EXPECT_EQ(l.share_milli, 1000u);
  EXPECT_EQ(l.mode, GPUSHARE_WORK_CONSERVING);
}

TEST(Limits, ErrorsNameTheLineAndWhatWasWrong) {
  EXPECT_THAT(ParseError(""), HasSubstr("no \"gpushare 1\""));
  EXPECT_THAT(ParseError("gpushare 2\n"), HasSubstr("line 1: the first line must be"));
  EXPECT_THAT(ParseError("gpushare 1\nmemory_bytes -5\n"), HasSubstr("line 2: memory_bytes"));
  EXPECT_THAT(ParseError("gpushare 1\nmemory_bytes 99999999999999999999999\n"),
              HasSubstr("memory_bytes"));
  EXPECT_THAT(ParseError("gpushare 1\nshare_milli 0\n"), HasSubstr("share_milli must be 1 to"));
  EXPECT_THAT(ParseError("gpushare 1\nshare_milli 1001\n"), HasSubstr("share_milli"));
  EXPECT_THAT(ParseError("gpushare 1\nmode greedy\n"), HasSubstr("mode must be"));
  EXPECT_THAT(ParseError("gpushare 1\nusage relative\n"), HasSubstr("absolute path"));
  EXPECT_THAT(ParseError("gpushare 1\nswap 1\n"), HasSubstr("line 2: unknown key swap"));
  EXPECT_THAT(ParseError("gpushare 1\nmemory_bytes\n"), HasSubstr("without a value"));
  EXPECT_THAT(ParseError("gpushare 1\nmemory_bytes 5\n"), HasSubstr("needs a usage ledger"));
  EXPECT_THAT(ParseError(std::string("gpushare 1\nmode str\0ict\n", 24)), HasSubstr("NUL"));
}

TEST(Limits, TheComputeShareFilesGoTogether) {
  std::string text =
      "gpushare 1\nshare_milli 250\nwant /gpupool/share/want\n"
      "grant /gpupool/share/grant\n";
  gpushare_limits l;
  char err[256];
  ASSERT_EQ(gpushare_parse_limits(text.data(), text.size(), &l, err, sizeof err), 0) << err;
  EXPECT_STREQ(l.want_path, "/gpupool/share/want");
  EXPECT_STREQ(l.grant_path, "/gpupool/share/grant");
  std::string bare = "gpushare 1\n";
  ASSERT_EQ(gpushare_parse_limits(bare.data(), bare.size(), &l, err, sizeof err), 0);
  EXPECT_STREQ(l.want_path, "");
  EXPECT_STREQ(l.grant_path, "");
  EXPECT_THAT(ParseError("gpushare 1\nwant /w\n"), HasSubstr("want and grant go together"));
  EXPECT_THAT(ParseError("gpushare 1\ngrant /g\n"), HasSubstr("want and grant go together"));
  EXPECT_THAT(ParseError("gpushare 1\nwant w\ngrant /g\n"),
              HasSubstr("line 2: want must be an absolute path"));
  EXPECT_THAT(ParseError("gpushare 1\nwant /w\ngrant g\n"),
              HasSubstr("line 3: grant must be an absolute path"));
  EXPECT_THAT(ParseError("gpushare 1\nwant /" + std::string(600, 'x') + "\ngrant /g\n"),
              HasSubstr("want must be"));
}

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpushare-ledger-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/usage";
    int fd = ::open(path_.c_str(), O_CREAT | O_WRONLY, 0600);  // empty, as the agent makes it
    ASSERT_GE(fd, 0);
    ::close(fd);
    char err[256];
    ledger_ = gpushare_ledger_open(path_.c_str(), err, sizeof err);
    ASSERT_NE(ledger_, nullptr) << err;
  }
  void TearDown() override {
    gpushare_ledger_close(ledger_);
    std::filesystem::remove_all(dir_);
  }
  std::string dir_, path_;
  gpushare_ledger* ledger_ = nullptr;
};

const unsigned char kGpuA[16] = {1, 2, 3};
const unsigned char kGpuB[16] = {9, 9, 9};

TEST_F(LedgerTest, GpusAreKeptApartByUuid) {
  EXPECT_EQ(std::filesystem::file_size(path_), gpushare_ledger_bytes());
  int a = gpushare_ledger_device(ledger_, kGpuA);
  int b = gpushare_ledger_device(ledger_, kGpuB);
  EXPECT_NE(a, b);
  EXPECT_EQ(gpushare_ledger_device(ledger_, kGpuA), a);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, a, 600, 1000), 0);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, b, 900, 1000), 0);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, a, 401, 1000), -1);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, a, 400, 1000), 0);
  EXPECT_EQ(gpushare_ledger_used(ledger_, a), 1000u);
  gpushare_ledger_release(ledger_, a, 5000);  // never below zero
  EXPECT_EQ(gpushare_ledger_used(ledger_, a), 0u);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, a, 1001, 1000), -1);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, a, 2, 0), 0);  // no cap
}

// A child process of the task: charges through its own mapping of the file.
pid_t ChildCharging(const std::string& path, uint64_t bytes, int report_fd) {
  pid_t pid = ::fork();
  if (pid == 0) {
    char err[256];
    gpushare_ledger* l = gpushare_ledger_open(path.c_str(), err, sizeof err);
    int dev = gpushare_ledger_device(l, kGpuA);
    char ok = gpushare_ledger_charge(l, dev, bytes, 1000) == 0 ? 'y' : 'n';
    (void)!::write(report_fd, &ok, 1);
    ::pause();
    _exit(0);
  }
  return pid;
}

TEST_F(LedgerTest, ProcessesShareTheCapAndADeadOnesShareIsFreed) {
  int dev = gpushare_ledger_device(ledger_, kGpuA);
  ASSERT_EQ(gpushare_ledger_charge(ledger_, dev, 300, 1000), 0);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t child = ChildCharging(path_, 600, p[1]);
  char ok = 0;
  ASSERT_EQ(::read(p[0], &ok, 1), 1);
  EXPECT_EQ(ok, 'y');
  EXPECT_EQ(gpushare_ledger_used(ledger_, dev), 900u);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, dev, 200, 1000), -1);
  // Killed without freeing: its share comes back once it is gone.
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, dev, 700, 1000), 0);
  EXPECT_EQ(gpushare_ledger_used(ledger_, dev), 1000u);
  // A second child is refused what is not left.
  pid_t second = ChildCharging(path_, 1, p[1]);
  ASSERT_EQ(::read(p[0], &ok, 1), 1);
  EXPECT_EQ(ok, 'n');
  ::kill(second, SIGKILL);
  ::waitpid(second, nullptr, 0);
  gpushare_ledger_drop_self(ledger_);
  EXPECT_EQ(gpushare_ledger_used(ledger_, dev), 0u);
  ::close(p[0]);
  ::close(p[1]);
}

// exec replaces the process image (and its device memory) but keeps the
// pid and start time: the new image's first use starts the record again.
TEST_F(LedgerTest, ANewImageOfTheSameProcessStartsFromNothing) {
  int dev = gpushare_ledger_device(ledger_, kGpuA);
  ASSERT_EQ(gpushare_ledger_charge(ledger_, dev, 800, 1000), 0);
  char err[256];
  gpushare_ledger* after_exec = gpushare_ledger_open(path_.c_str(), err, sizeof err);
  ASSERT_NE(after_exec, nullptr) << err;
  EXPECT_EQ(gpushare_ledger_charge(after_exec, dev, 900, 1000), 0);
  EXPECT_EQ(gpushare_ledger_used(after_exec, dev), 900u);
  gpushare_ledger_close(after_exec);
}

TEST_F(LedgerTest, ALockHeldByADeadProcessIsTakenOver) {
  // The lock word is the first field: a process killed while holding it.
  pid_t dead = ::fork();
  if (dead == 0) _exit(0);
  ::waitpid(dead, nullptr, 0);
  int fd = ::open(path_.c_str(), O_WRONLY);
  int32_t owner = dead;
  ASSERT_EQ(::pwrite(fd, &owner, sizeof owner, 0), static_cast<ssize_t>(sizeof owner));
  ::close(fd);
  int dev = gpushare_ledger_device(ledger_, kGpuA);
  EXPECT_EQ(gpushare_ledger_charge(ledger_, dev, 10, 1000), 0);
}

TEST(Allocs, RemembersWhatEachAllocationTookUntilItIsFreed) {
  uint64_t before = gpushare_allocs_count();
  for (uint64_t i = 1; i <= 5000; ++i) {
    ASSERT_EQ(gpushare_allocs_add(GPUSHARE_DEVPTR, i * 4096, static_cast<int>(i % 3), i), 0);
  }
  ASSERT_EQ(gpushare_allocs_add(GPUSHARE_HANDLE, 4096, 7, 99), 0);  // same key, other kind
  EXPECT_EQ(gpushare_allocs_count(), before + 5001);
  int dev = -1;
  uint64_t bytes = 0;
  ASSERT_EQ(gpushare_allocs_take(GPUSHARE_DEVPTR, 4096, &dev, &bytes), 1);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(bytes, 1u);
  EXPECT_EQ(gpushare_allocs_take(GPUSHARE_DEVPTR, 4096, &dev, &bytes), 0);
  ASSERT_EQ(gpushare_allocs_take(GPUSHARE_HANDLE, 4096, &dev, &bytes), 1);
  EXPECT_EQ(bytes, 99u);
  for (uint64_t i = 2; i <= 5000; ++i) {
    ASSERT_EQ(gpushare_allocs_take(GPUSHARE_DEVPTR, i * 4096, &dev, &bytes), 1) << i;
    EXPECT_EQ(bytes, i);
  }
  EXPECT_EQ(gpushare_allocs_count(), before);
}

TEST(Allocs, AForkedChildStartsEmpty) {
  ASSERT_EQ(gpushare_allocs_add(GPUSHARE_DEVPTR, 12345, 0, 10), 0);
  pid_t child = ::fork();
  if (child == 0) _exit(gpushare_allocs_count() == 0 ? 0 : 1);
  int st = 0;
  ::waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  int dev;
  uint64_t bytes;
  EXPECT_EQ(gpushare_allocs_take(GPUSHARE_DEVPTR, 12345, &dev, &bytes), 1);
}

}  // namespace
