#include "exec/limits.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::exec {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
// An account no process uses, outside the agent's default task range
// (190000-190999), so RLIMIT_NPROC counts only this test's processes.
constexpr uid_t kTestUid = 189'777;

TEST(RlimitsForTest, WithACgroupOnlyFileSizeAndCore) {
  Limits all{.memory_bytes = 4 * kGiB, .cpu_milli = 2000, .pids = 64, .disk_bytes = 10 * kGiB};
  EXPECT_THAT(
      RlimitsFor(all, /*cgroup=*/true),
      ElementsAre(Rlimit{RLIMIT_CORE, 0}, Rlimit{RLIMIT_FSIZE, static_cast<uint64_t>(10 * kGiB)}));
  EXPECT_THAT(RlimitsFor(Limits{}, true), ElementsAre(Rlimit{RLIMIT_CORE, 0}));
  EXPECT_THAT(RlimitsFor(Limits{.pids = 64}, true), ElementsAre(Rlimit{RLIMIT_CORE, 0}));
}

TEST(RlimitsForTest, WithoutACgroupAlsoProcessesButNeverMemory) {
  Limits all{.memory_bytes = 4 * kGiB, .cpu_milli = 2000, .pids = 64, .disk_bytes = 10 * kGiB};
  EXPECT_THAT(
      RlimitsFor(all, /*cgroup=*/false),
      ElementsAre(Rlimit{RLIMIT_CORE, 0}, Rlimit{RLIMIT_FSIZE, static_cast<uint64_t>(10 * kGiB)},
                  Rlimit{RLIMIT_NPROC, 64}));
  EXPECT_THAT(RlimitsFor(Limits{}, false), ElementsAre(Rlimit{RLIMIT_CORE, 0}));
  EXPECT_THAT(RlimitsFor(Limits{.memory_bytes = kGiB}, false), ElementsAre(Rlimit{RLIMIT_CORE, 0}));
  EXPECT_THAT(RlimitsFor(Limits{.pids = 8}, false),
              ElementsAre(Rlimit{RLIMIT_CORE, 0}, Rlimit{RLIMIT_NPROC, 8}));
  EXPECT_THAT(RlimitsFor(Limits{.disk_bytes = kMiB}, false),
              ElementsAre(Rlimit{RLIMIT_CORE, 0}, Rlimit{RLIMIT_FSIZE, kMiB}));
}

// In a forked child: the limits, then the unprivileged account, as the
// shim's child does (exec/launch.cpp).
bool BecomeTestUser(const std::vector<Rlimit>& rlimits) {
  gid_t gid = kTestUid;
  return ApplyRlimits(rlimits) && ::setgroups(1, &gid) == 0 &&
         ::setresgid(kTestUid, kTestUid, kTestUid) == 0 &&
         ::setresuid(kTestUid, kTestUid, kTestUid) == 0;
}

// Issue 19: the provider's limits are a ceiling a job's request cannot
// raise, and the limits of jobs that ask for nothing.
TEST(TaskLimitsTest, RequestsWithinTheProvidersLimitsNeverAbove) {
  Limits provider{.memory_bytes = 16LL << 30, .cpu_milli = 4000, .pids = 512, .disk_bytes = 0};
  std::vector<std::string> notes;
  Limits asked{.memory_bytes = 8LL << 30, .cpu_milli = 0, .pids = 99999, .disk_bytes = 1LL << 50};
  Limits l = TaskLimits(asked, provider, &notes);
  EXPECT_EQ(l.memory_bytes, 8LL << 30);  // below the ceiling: as asked
  EXPECT_EQ(l.cpu_milli, 4000);          // asked nothing: the provider's
  EXPECT_EQ(l.pids, 512);                // always the provider's
  EXPECT_EQ(l.disk_bytes, 1LL << 50);    // no ceiling: as asked
  EXPECT_TRUE(notes.empty());

  provider.disk_bytes = 100LL << 30;
  asked.memory_bytes = 64LL << 30;
  asked.cpu_milli = 64000;
  l = TaskLimits(asked, provider, &notes);
  EXPECT_EQ(l.memory_bytes, 16LL << 30);
  EXPECT_EQ(l.cpu_milli, 4000);
  EXPECT_EQ(l.disk_bytes, 100LL << 30);
  EXPECT_THAT(notes, ElementsAre("asked for 64 GiB of memory; this machine lends at most 16 GiB",
                                 "asked for 64 cores of CPU; this machine lends at most 4 cores",
                                 "asked for 1 PiB of disk; this machine lends at most 100 GiB"));
}

TEST(ApplyRlimitsTest, NprocStopsAForkLoop) {
  ASSERT_EQ(::getuid(), 0u) << "needs root, to become an unprivileged account";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t child = ::fork();
  if (child == 0) {
    if (!BecomeTestUser(RlimitsFor(Limits{.pids = 8}, /*cgroup=*/false))) _exit(2);
    std::vector<pid_t> kids;
    int err = 0;
    for (int i = 0; i < 100; ++i) {
      pid_t p = ::fork();
      if (p == 0) {
        while (true) ::pause();
      }
      if (p < 0) {
        err = errno;
        break;
      }
      kids.push_back(p);
    }
    int msg[2] = {static_cast<int>(kids.size()), err};
    (void)!::write(fds[1], msg, sizeof msg);
    for (pid_t k : kids) ::kill(k, SIGKILL);
    for (pid_t k : kids) ::waitpid(k, nullptr, 0);
    _exit(0);
  }
  ::close(fds[1]);
  int msg[2] = {-1, -1};
  ASSERT_EQ(::read(fds[0], msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(msg[0], 7);  // 8 processes of the account, itself included
  EXPECT_EQ(msg[1], EAGAIN);
}

TEST(ApplyRlimitsTest, WritingPastFileSizeRaisesSigxfsz) {
  ASSERT_EQ(::getuid(), 0u) << "needs root, to become an unprivileged account";
  char tmpl[] = "/tmp/gpupool-limits-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::string file = dir + "/out";
  pid_t child = ::fork();
  if (child == 0) {
    if (!BecomeTestUser(RlimitsFor(Limits{.disk_bytes = kMiB}, /*cgroup=*/true))) _exit(2);
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) _exit(3);
    std::string chunk(64 * 1024, 'x');
    for (int i = 0; i < 32; ++i) {  // 2 MiB
      if (::write(fd, chunk.data(), chunk.size()) < 0) _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGXFSZ);
  EXPECT_FALSE(WCOREDUMP(status));  // RLIMIT_CORE 0
  EXPECT_EQ(std::filesystem::file_size(file), static_cast<uintmax_t>(kMiB));
  EXPECT_EQ(DescribeWaitStatus(status), "killed by signal SIGXFSZ (file size limit exceeded)");
  std::filesystem::remove_all(dir);
}

TEST(ApplyRlimitsTest, ReportsFailure) {
  pid_t child = ::fork();
  if (child == 0) {
    errno = 0;
    bool ok = ApplyRlimits({{-1, 1}});
    _exit(!ok && errno == EINVAL ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(ApplyRlimits({}));
}

// Wait statuses as the kernel encodes them.
int Exited(int code) { return code << 8; }
int Signaled(int sig, bool core = false) { return sig | (core ? 0x80 : 0); }

TEST(DescribeWaitStatusTest, ExitsNeedNoReason) {
  EXPECT_EQ(DescribeWaitStatus(Exited(0)), "");
  EXPECT_EQ(DescribeWaitStatus(Exited(3)), "");
  EXPECT_EQ(DescribeWaitStatus(Exited(137)), "");
}

TEST(DescribeWaitStatusTest, SignalsAreNamedAndExplained) {
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGSEGV)), "killed by signal SIGSEGV (segmentation fault)");
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGSEGV, true)),
            "killed by signal SIGSEGV (segmentation fault), core dumped");
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGXFSZ)),
            "killed by signal SIGXFSZ (file size limit exceeded)");
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGKILL)), "killed by signal SIGKILL");
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGABRT)), "killed by signal SIGABRT (aborted)");
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGBUS)), "killed by signal SIGBUS (bus error)");
  EXPECT_EQ(DescribeWaitStatus(Signaled(SIGRTMIN + 2)), "killed by signal SIGRTMIN+2");
  EXPECT_EQ(DescribeWaitStatus(Signaled(99)), "killed by signal 99");
  EXPECT_EQ(DescribeWaitStatus((SIGSTOP << 8) | 0x7f), "stopped by signal SIGSTOP");
}

TEST(DescribeWaitStatusTest, ARealSignal) {
  pid_t child = ::fork();
  if (child == 0) {
    while (true) ::pause();
  }
  ::kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(DescribeWaitStatus(status), "killed by signal SIGTERM (terminated)");
}

TEST(ReasonsTest, Wording) {
  EXPECT_EQ(MemoryLimitReason(4 * kGiB), "exceeded its memory limit of 4 GiB");
  EXPECT_EQ(MemoryLimitReason(1536 * kMiB), "exceeded its memory limit of 1.5 GiB");
  EXPECT_EQ(DiskLimitReason(10 * kGiB), "exceeded its disk limit of 10 GiB (work directory)");
  EXPECT_EQ(PidsLimitNote(64), "hit its limit of 64 processes");
  EXPECT_EQ(PidsLimitNote(1), "hit its limit of 1 process");
}

TEST(DescribeLimitsModeTest, CgroupOrRlimits) {
  char tmpl[] = "/tmp/gpupool-limits-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::ofstream(dir + "/cgroup.controllers") << "cpu memory pids\n";
  std::ofstream(dir + "/cgroup.procs") << "";
  std::ofstream(dir + "/cgroup.subtree_control") << "";
  auto tree = CgroupTree::Open(dir);
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(DescribeLimitsMode(tree), "limits: cgroup v2 at " + dir + " (memory, pids, cpu)");

  std::ofstream(dir + "/cgroup.controllers") << "memory pids\n";
  tree = CgroupTree::Open(dir);
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(DescribeLimitsMode(tree), "limits: cgroup v2 at " + dir + " (memory, pids)");
  std::filesystem::remove_all(dir);

  Result<CgroupTree> none = Status::FailedPrecondition(
      "cgroup v2 at /sys/fs/cgroup/unified has no memory controller (available: hugetlb)");
  EXPECT_EQ(DescribeLimitsMode(none),
            "limits: rlimits (no usable cgroup v2: cgroup v2 at /sys/fs/cgroup/unified has no "
            "memory controller (available: hugetlb)); memory watched every 100 ms");
  EXPECT_THAT(DescribeLimitsMode(none, 250), EndsWith("); memory watched every 250 ms"));
}

}  // namespace
}  // namespace gpupool::exec
