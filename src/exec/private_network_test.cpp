// PrivateNetwork::Attach and the order of a sandbox's network setup:
// bubblewrap's sandbox child brings its namespace's loopback up itself,
// possibly after bubblewrap reported the child's pid, and pasta, which
// brings lo up first thing, must not start before (private_network.h).
//
// A child of the test's, in new user and network namespaces, stands in for
// bubblewrap's sandbox child; a script that only leaves a mark stands in
// for pasta. Needs user namespaces (skipped without).
#include "exec/private_network.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/files.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Brings the calling process's loopback up, as bubblewrap's child does.
bool BringLoopbackUp() {
  int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags |= IFF_UP;
  ok = ok && ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  ::close(s);
  return ok;
}

// The stand-in for bubblewrap's sandbox child: a process in a user and a
// network namespace of its own, whose loopback stays down until it does
// its setup. Told 'u' on its pipe, it does the setup at once; 'w', once a
// stand-in pasta has started or 300 ms have passed, whichever is first. It
// answers what it found then: 'u' (it brought lo up itself, nothing had
// started before) or 'p' (pasta had started first: bubblewrap's own setup
// would have failed). Its pipe closed, it exits.
class FakeSandbox {
 public:
  explicit FakeSandbox(std::string pasta_mark) : mark_(std::move(pasta_mark)) {
    int to[2], from[2];
    if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to[1]);
      ::close(from[0]);
      Run(to[0], from[1]);
    }
    ::close(to[0]);
    ::close(from[1]);
    to_ = to[1];
    from_ = from[0];
    char c = 0;
    ready_ = ::read(from_, &c, 1) == 1 && c == 'r';
  }
  ~FakeSandbox() { End(); }

  // Whether it got namespaces of its own.
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  int OpenNetns() const {
    return ::open(("/proc/" + std::to_string(pid_) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  }
  // Sends a command; returns the answer (0: none).
  char Tell(char command) {
    if (::write(to_, &command, 1) != 1) return 0;
    char c = 0;
    return ::read(from_, &c, 1) == 1 ? c : 0;
  }
  // Starts the delayed setup ('w') without waiting for its answer.
  void SetUpLater() {
    char command = 'w';
    ASSERT_EQ(::write(to_, &command, 1), 1);
  }
  char Answer() {
    char c = 0;
    return ::read(from_, &c, 1) == 1 ? c : 0;
  }
  void End() {
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    to_ = from_ = -1;
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  [[noreturn]] void Run(int in, int out) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) _exit(3);
    (void)!::write(out, "r", 1);
    char c = 0;
    while (::read(in, &c, 1) == 1) {
      if (c == 'w') {
        for (int i = 0; i < 300 && ::access(mark_.c_str(), F_OK) != 0; ++i) ::usleep(1000);
      }
      bool pasta_first = ::access(mark_.c_str(), F_OK) == 0;
      char answer = !BringLoopbackUp() ? 'e' : pasta_first ? 'p' : 'u';
      (void)!::write(out, &answer, 1);
    }
    _exit(0);
  }

  std::string mark_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  bool ready_ = false;
};

class PrivateNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-private-network-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    mark_ = dir_ + "/pasta-started";
    // pasta's stand-in: leaves its mark and exits (Attach then fails:
    // "pasta exited"); what matters here is when it started.
    plan_.pasta = dir_ + "/pasta";
    ASSERT_TRUE(WriteFileAtomic(plan_.pasta, "#!/bin/sh\necho started > " + mark_ + "\n").ok());
    ASSERT_EQ(::chmod(plan_.pasta.c_str(), 0755), 0);
    plan_.timeout_ms = 20'000;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  bool PastaStarted() const { return ::access(mark_.c_str(), F_OK) == 0; }

  std::string dir_, mark_;
  PrivateNetworkPlan plan_;
};

TEST_F(PrivateNetworkTest, PastaStartsOnlyOnceTheSandboxBroughtItsLoopbackUp) {
  FakeSandbox sandbox(mark_);
  if (!sandbox.ready()) GTEST_SKIP() << "no user namespaces here";
  int netns = sandbox.OpenNetns();
  ASSERT_GE(netns, 0);
  // The sandbox's setup comes late, as bubblewrap's child may on a busy
  // machine: after its pid was reported and Attach began.
  sandbox.SetUpLater();
  auto net = PrivateNetwork::Attach(netns, sandbox.pid(), plan_);
  ::close(netns);
  EXPECT_EQ(sandbox.Answer(), 'u') << "pasta started before the sandbox's own loopback setup";
  EXPECT_TRUE(PastaStarted());
  ASSERT_FALSE(net.ok());  // the stand-in exits at once
  EXPECT_THAT(net.status().message(), HasSubstr("pasta exited"));
}

TEST_F(PrivateNetworkTest, PastaNeverStartsWhileTheLoopbackStaysDown) {
  FakeSandbox sandbox(mark_);
  if (!sandbox.ready()) GTEST_SKIP() << "no user namespaces here";
  int netns = sandbox.OpenNetns();
  ASSERT_GE(netns, 0);
  plan_.timeout_ms = 200;
  auto net = PrivateNetwork::Attach(netns, sandbox.pid(), plan_);
  ::close(netns);
  ASSERT_FALSE(net.ok());
  EXPECT_EQ(net.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(net.status().message(), HasSubstr("did not bring the job's loopback up in time"));
  EXPECT_FALSE(PastaStarted());
  EXPECT_EQ(sandbox.Tell('u'), 'u');  // its own setup still works
}

TEST_F(PrivateNetworkTest, ASandboxThatEndsBeforeItsLoopbackIsUpEndsTheWait) {
  FakeSandbox sandbox(mark_);
  if (!sandbox.ready()) GTEST_SKIP() << "no user namespaces here";
  int netns = sandbox.OpenNetns();
  ASSERT_GE(netns, 0);
  pid_t pid = sandbox.pid();
  sandbox.End();  // as bubblewrap's child does when its setup fails
  auto net = PrivateNetwork::Attach(netns, pid, plan_);
  ::close(netns);
  ASSERT_FALSE(net.ok());
  EXPECT_EQ(net.status().code(), StatusCode::kAborted) << net.status().ToString();
  EXPECT_FALSE(PastaStarted());
}

}  // namespace
}  // namespace gpupool::exec
