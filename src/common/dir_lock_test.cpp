#include "common/dir_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace gpupool {
namespace {

class DirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-dirlock-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs Acquire in a forked child (record locks are per process) and
  // returns its exit status: 0 locked, 1 refused with the expected message,
  // 2 refused with another message.
  int AcquireInChild(const std::string& expect_in_message) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto lock = DirLock::Acquire(dir_, "agent");
      if (lock.ok()) _exit(0);
      bool matches = lock.status().message().find(expect_in_message) != std::string::npos;
      _exit(matches ? 1 : 2);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  std::string dir_;
};

TEST_F(DirLockTest, ASecondProcessIsRefusedWithTheHoldersPid) {
  auto lock = DirLock::Acquire(dir_, "agent");
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_EQ(AcquireInChild(dir_ + " is in use by another gpupool agent (pid " +
                           std::to_string(::getpid()) + ")"),
            1);
}

TEST_F(DirLockTest, ReleasedWhenTheHolderGoes) {
  {
    auto lock = DirLock::Acquire(dir_, "agent");
    ASSERT_TRUE(lock.ok());
  }
  EXPECT_EQ(AcquireInChild(""), 0);
}

TEST_F(DirLockTest, AForkWithoutExecDoesNotHoldIt) {
  // The agent forks its shims without exec; they outlive an agent restart,
  // which must be able to lock again.
  int hold[2];
  ASSERT_EQ(::pipe(hold), 0);
  auto lock = DirLock::Acquire(dir_, "agent");
  ASSERT_TRUE(lock.ok());
  pid_t shim = ::fork();
  if (shim == 0) {
    ::close(hold[1]);
    char c;
    while (::read(hold[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  ::close(hold[0]);
  *lock = DirLock();  // the "agent" exits; its fork lives on
  EXPECT_EQ(AcquireInChild(""), 0);
  ::close(hold[1]);
  ::waitpid(shim, nullptr, 0);
}

}  // namespace
}  // namespace gpupool
