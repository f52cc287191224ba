#include "exec/process_tree.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::exec {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int64_t kMiB = int64_t{1} << 20;

// Forks a child that runs `body` and then sleeps until it is killed.
pid_t Fork(const std::function<void()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    while (true) ::pause();
  }
  return pid;
}

// A process tree for one test: a root process (its own process group, a
// child subreaper) whose `setup` forks the tree. Every process reports
// itself on a shared pipe as (tag, pid) when it is ready. The destructor
// kills the whole group.
class TestTree {
 public:
  explicit TestTree(const std::function<void(TestTree&)>& setup) {
    if (::pipe2(fds_, O_CLOEXEC) != 0) std::abort();
    root_ = Fork([&] {
      ::setpgid(0, 0);
      ::prctl(PR_SET_CHILD_SUBREAPER, 1);
      setup(*this);
      Report('R');
    });
    ::setpgid(root_, root_);  // also from here, so the group exists before any kill
  }
  ~TestTree() {
    ::kill(-root_, SIGKILL);
    ::waitpid(root_, nullptr, 0);
    ::close(fds_[0]);
    ::close(fds_[1]);
  }

  pid_t root() const { return root_; }

  // In a tree process: says "I am `tag`".
  void Report(char tag) {
    Message m{tag, ::getpid()};
    (void)!::write(fds_[1], &m, sizeof m);
  }

  // In the test: waits until the tags in `tags` have all reported, returns
  // their pids by tag.
  std::map<char, pid_t> Await(const std::string& tags) {
    std::map<char, pid_t> got;
    while (got.size() < tags.size()) {
      pollfd p{fds_[0], POLLIN, 0};
      if (::poll(&p, 1, 20'000) != 1) break;
      Message m;
      if (::read(fds_[0], &m, sizeof m) != sizeof m) break;
      got[m.tag] = m.pid;
    }
    return got;
  }

 private:
  struct Message {
    char tag;
    pid_t pid;
  };
  int fds_[2] = {-1, -1};
  pid_t root_ = 0;
};

std::vector<pid_t> Sorted(std::vector<pid_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Field 3 (state) and 4 (ppid) of /proc/PID/stat; state 0 when gone.
struct ProcState {
  char state = 0;
  pid_t ppid = 0;
};
ProcState ReadProcState(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return {};
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  ProcState s;
  if (p == nullptr || std::sscanf(p + 1, " %c %d", &s.state, &s.ppid) != 2) return {};
  return s;
}

// Waits (up to 10 s) until pid is a zombie or gone.
bool AwaitDead(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    char s = ReadProcState(pid).state;
    if (s == 0 || s == 'Z' || s == 'X') return true;
    ::usleep(10'000);
  }
  return false;
}

void BurnCpuMs(int64_t ms) {
  timespec ts{};
  do {
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  } while (ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000 < ms);
}

TEST(DescendantsTest, FindsNestedChildrenAndAReparentedOrphan) {
  TestTree tree([](TestTree& t) {
    Fork([&] { t.Report('A'); });
    Fork([&] {
      Fork([&] { t.Report('b'); });  // B's child
      t.Report('B');
    });
    // C double-forks: D outlives C and is re-parented to the subreaper.
    pid_t c = ::fork();
    if (c == 0) {
      pid_t parent = ::getpid();
      Fork([&] {
        while (::getppid() == parent) ::usleep(1000);
        t.Report('D');
      });
      _exit(0);
    }
    ::waitpid(c, nullptr, 0);
  });
  auto pids = tree.Await("ABbDR");
  ASSERT_EQ(pids.size(), 5u);
  EXPECT_EQ(ReadProcState(pids['D']).ppid, tree.root());

  std::vector<pid_t> found = Descendants(tree.root());
  EXPECT_THAT(found, UnorderedElementsAre(pids['A'], pids['B'], pids['b'], pids['D']));
  // Parents come before their children.
  auto pos = [&](pid_t p) { return std::find(found.begin(), found.end(), p) - found.begin(); };
  EXPECT_LT(pos(pids['B']), pos(pids['b']));

  // The /proc scan finds the same set.
  EXPECT_EQ(Sorted(DescendantsFromStat(tree.root())), Sorted(found));
  // Its direct children only: not B's child.
  EXPECT_THAT(Children(tree.root()), UnorderedElementsAre(pids['A'], pids['B'], pids['D']));
  EXPECT_THAT(Children(pids['B']), UnorderedElementsAre(pids['b']));
  EXPECT_THAT(Children(pids['b']), IsEmpty());

  // From further up, the root is included.
  std::vector<pid_t> mine = Descendants(::getpid());
  EXPECT_THAT(mine, Contains(tree.root()));
  EXPECT_THAT(mine, Contains(pids['D']));
}

TEST(DescendantsTest, FindsChildrenOfEveryThread) {
  TestTree tree([](TestTree& t) {
    // Forked from a second thread, which stays alive: the child is listed
    // in that thread's children file, not the main thread's.
    std::thread([&] {
      Fork([&] { t.Report('T'); });
      while (true) ::pause();
    }).detach();
  });
  auto pids = tree.Await("TR");
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_THAT(Descendants(tree.root()), UnorderedElementsAre(pids['T']));
  EXPECT_THAT(DescendantsFromStat(tree.root()), UnorderedElementsAre(pids['T']));
}

TEST(DescendantsTest, EmptyWithoutChildrenOrProcess) {
  TestTree tree([](TestTree&) {});
  ASSERT_EQ(tree.Await("R").size(), 1u);
  EXPECT_THAT(Descendants(tree.root()), IsEmpty());
  EXPECT_THAT(DescendantsFromStat(tree.root()), IsEmpty());
  EXPECT_THAT(Descendants(0), IsEmpty());
  EXPECT_THAT(Descendants(-1), IsEmpty());
  EXPECT_THAT(Descendants(999'999'999), IsEmpty());  // above any pid_max
  EXPECT_EQ(MeasureTree(999'999'999), TreeUsage{});
}

TEST(MeasureTreeTest, CountsResidentMemoryOfChildren) {
  constexpr size_t kSize = 64 * kMiB;
  TestTree tree([&](TestTree& t) {
    Fork([&] {
      void* p = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) _exit(1);
      std::memset(p, 1, kSize);
      t.Report('M');
    });
  });
  auto pids = tree.Await("MR");
  ASSERT_EQ(pids.size(), 2u);
  TreeUsage u = MeasureTree(tree.root());
  EXPECT_EQ(u.processes, 1);
  EXPECT_GE(u.rss_bytes, static_cast<int64_t>(kSize));
  EXPECT_LT(u.rss_bytes, static_cast<int64_t>(kSize) + 512 * kMiB);  // not wildly off
}

TEST(MeasureTreeTest, CountsCpuOfLiveAndReapedChildren) {
  TestTree busy([](TestTree& t) {
    Fork([&] {
      BurnCpuMs(300);
      t.Report('S');
    });
  });
  // A helper that did its work and was waited for by its parent: its time
  // is in the parent's cutime.
  TestTree reaped([](TestTree& t) {
    Fork([&] {
      pid_t w = ::fork();
      if (w == 0) {
        BurnCpuMs(300);
        _exit(0);
      }
      ::waitpid(w, nullptr, 0);
      t.Report('P');
    });
  });
  ASSERT_EQ(busy.Await("SR").size(), 2u);
  ASSERT_EQ(reaped.Await("PR").size(), 2u);
  TreeUsage u = MeasureTree(busy.root());
  EXPECT_EQ(u.processes, 1);
  EXPECT_GE(u.cpu_ms, 250);  // clock ticks are 10 ms
  TreeUsage r = MeasureTree(reaped.root());
  EXPECT_EQ(r.processes, 1);
  EXPECT_GE(r.cpu_ms, 250);
}

TEST(SignalTreeTest, SignalsAllButTheSpared) {
  TestTree tree([](TestTree& t) {
    Fork([&] { t.Report('A'); });
    Fork([&] {
      Fork([&] { t.Report('b'); });
      t.Report('B');
    });
  });
  auto pids = tree.Await("ABbR");
  ASSERT_EQ(pids.size(), 4u);
  EXPECT_EQ(SignalTree(tree.root(), SIGTERM, {pids['B']}), 2);
  EXPECT_TRUE(AwaitDead(pids['A']));
  EXPECT_TRUE(AwaitDead(pids['b']));
  ::usleep(50'000);
  EXPECT_EQ(ReadProcState(pids['B']).state, 'S');    // spared, still sleeping
  EXPECT_EQ(ReadProcState(tree.root()).state, 'S');  // the root is never signalled

  SignalTree(tree.root(), SIGKILL);
  EXPECT_TRUE(AwaitDead(pids['B']));
  EXPECT_EQ(ReadProcState(tree.root()).state, 'S');
  EXPECT_EQ(SignalTree(999'999'999, SIGKILL), 0);
}

TEST(SignalTreeTest, CatchesChildrenForkedWhileSignalling) {
  TestTree tree([](TestTree& t) {
    Fork([&] {
      t.Report('F');
      for (int i = 0; i < 300; ++i) Fork([] {});  // keeps forking sleepers
    });
  });
  auto pids = tree.Await("FR");
  ASSERT_EQ(pids.size(), 2u);
  ::usleep(1000);
  EXPECT_GT(SignalTree(tree.root(), SIGKILL), 0);
  // Nothing is left alive under the root: a child forked just before its
  // parent died was found in a later round.
  for (pid_t pid : Descendants(tree.root())) {
    EXPECT_TRUE(AwaitDead(pid)) << pid;
  }
}

}  // namespace
}  // namespace gpupool::exec
