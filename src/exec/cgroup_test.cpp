#include "exec/cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>

namespace gpupool::exec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGiB = int64_t{1} << 30;

// A plain directory tree standing in for a cgroup2 mount: the files are
// ordinary files, so writes are only recorded, never acted on (a pid
// written to cgroup.procs does not leave the other cgroup.procs, and
// rmdir fails while the files are there).
class FakeCgroupfs {
 public:
  FakeCgroupfs() {
    char tmpl[] = "/tmp/gpupool-cgroup-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    root_ = dir_ + "/cgroup";
    self_file_ = dir_ + "/self-cgroup";
    std::filesystem::create_directories(root_);
  }
  ~FakeCgroupfs() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& root() const { return root_; }
  const std::string& self_file() const { return self_file_; }
  std::string Path(const std::string& rel) const { return rel.empty() ? root_ : root_ + "/" + rel; }

  // A cgroup directory `rel` (relative to the mount) as the kernel would
  // show it: cgroup.controllers, cgroup.procs, cgroup.subtree_control and,
  // unless it is the hierarchy's root, cgroup.type.
  void MakeCgroup(const std::string& rel, const std::string& controllers, bool is_root = false) {
    std::filesystem::create_directories(Path(rel));
    Write(rel + "/cgroup.controllers", controllers + "\n");
    Write(rel + "/cgroup.procs", "");
    Write(rel + "/cgroup.subtree_control", "");
    if (!is_root) {
      Write(rel + "/cgroup.type", "domain\n");
      // As systemd marks a Delegate=yes unit's cgroup.
      ::setxattr(Path(rel).c_str(), "trusted.delegate", "1", 1, 0);
    }
  }
  void Undelegate(const std::string& rel) const {
    ::removexattr(Path(rel).c_str(), "trusted.delegate");
  }

  void Write(const std::string& rel, const std::string& content) const {
    std::ofstream(Path(rel), std::ios::trunc) << content;
  }
  std::string Read(const std::string& rel) const {
    std::ifstream in(Path(rel));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool Exists(const std::string& rel) const { return std::filesystem::exists(Path(rel)); }
  void SetSelf(const std::string& content) const {
    std::ofstream(self_file_, std::ios::trunc) << content;
  }

  Result<CgroupTree> Open(const std::string& setting = "auto") const {
    return CgroupTree::Open(setting, root_, self_file_);
  }

 private:
  std::string dir_, root_, self_file_;
};

// A typical delegated service cgroup on a pure cgroup v2 machine.
class CgroupTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_.MakeCgroup("", "cpuset cpu io memory hugetlb pids rdma misc", /*is_root=*/true);
    fs_.MakeCgroup("system.slice", "cpu io memory pids");
    fs_.MakeCgroup("system.slice/gpupool.service", "cpu io memory pids");
    fs_.SetSelf("0::/system.slice/gpupool.service\n");
  }
  std::string Service() const { return fs_.Path("system.slice/gpupool.service"); }

  FakeCgroupfs fs_;
};

TEST_F(CgroupTreeTest, AutoRefusesACgroupNobodyDelegated) {
  // A root agent started from a login shell: its session's cgroup is
  // writable to root but was never handed to it.
  fs_.Undelegate("system.slice/gpupool.service");
  auto tree = fs_.Open("auto");
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(tree.status().message(),
              HasSubstr("was not delegated to it (no trusted.delegate attribute)"));
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/cgroup.subtree_control"), "");
  // Named explicitly, the operator vouches for it.
  EXPECT_TRUE(fs_.Open(Service()).ok());
}

TEST_F(CgroupTreeTest, AutoOpensTheAgentsOwnCgroup) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(tree->path(), Service());
  EXPECT_TRUE(tree->has_cpu());
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/cgroup.subtree_control"), "+memory +pids +cpu");
  EXPECT_FALSE(fs_.Exists("system.slice/gpupool.service/agent"));  // no processes to move

  auto resolved = CgroupTree::Resolve("auto", fs_.root(), fs_.self_file());
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, Service());
}

TEST_F(CgroupTreeTest, MovesItsProcessesIntoTheAgentLeaf) {
  fs_.Write("system.slice/gpupool.service/cgroup.procs", "101\n102\n");
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/agent/cgroup.procs"), "101\n102\n");
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/cgroup.subtree_control"), "+memory +pids +cpu");
}

TEST_F(CgroupTreeTest, AutoFromTheAgentLeafUsesItsParent) {
  // After an agent restart in place, /proc/self/cgroup names the leaf.
  fs_.MakeCgroup("system.slice/gpupool.service/agent", "");
  fs_.SetSelf("0::/system.slice/gpupool.service/agent\n");
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(tree->path(), Service());
}

TEST_F(CgroupTreeTest, TheHierarchyRootKeepsItsProcesses) {
  fs_.Write("cgroup.procs", "1\n2\n");
  fs_.SetSelf("0::/\n");
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(tree->path(), fs_.root());
  EXPECT_FALSE(fs_.Exists("agent"));
  EXPECT_EQ(fs_.Read("cgroup.subtree_control"), "+memory +pids +cpu");
}

TEST_F(CgroupTreeTest, OpensAnAbsolutePath) {
  auto tree = fs_.Open(Service() + "/");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(tree->path(), Service());
}

TEST_F(CgroupTreeTest, WithoutCpuEnablesMemoryAndPids) {
  fs_.Write("system.slice/gpupool.service/cgroup.controllers", "memory pids\n");
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_FALSE(tree->has_cpu());
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/cgroup.subtree_control"), "+memory +pids");
  auto task = tree->CreateTask("1", Limits{.cpu_milli = 1500});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(task->path() + "/cpu.max"));
}

TEST_F(CgroupTreeTest, SaysWhichControllerIsMissing) {
  fs_.Write("system.slice/gpupool.service/cgroup.controllers", "cpu pids\n");
  auto tree = fs_.Open("auto");
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(tree.status().message(),
            "cgroup v2 at " + Service() +
                " has no memory controller (available: cpu pids); the parent cgroup must enable "
                "them for it (delegation, e.g. systemd Delegate=yes)");
  EXPECT_FALSE(fs_.Exists("system.slice/gpupool.service/agent"));

  fs_.Write("system.slice/gpupool.service/cgroup.controllers", "\n");
  tree = fs_.Open("auto");
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(tree.status().message(),
              HasSubstr("has no memory controller and no pids controller (available: none)"));
}

TEST(CgroupTreeOpenTest, ExplainsTheHybridLayout) {
  // Like this machine: /sys/fs/cgroup is a tmpfs of cgroup v1 mounts, and
  // cgroup2 at unified/ offers only hugetlb.
  FakeCgroupfs fs;
  std::filesystem::create_directories(fs.Path("memory"));
  fs.MakeCgroup("unified", "hugetlb", /*is_root=*/true);
  fs.SetSelf("4:memory:/process_api/x\n1:cpu:/\n0::/\n");
  auto tree = fs.Open("auto");
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().message(),
            "cgroup v2 at " + fs.Path("unified") +
                " has no memory controller and no pids controller (available: hugetlb); this "
                "machine has the hybrid layout, with memory and pids under cgroup v1");
  EXPECT_EQ(fs.Read("unified/cgroup.subtree_control"), "");  // nothing changed
}

TEST(CgroupTreeOpenTest, ExplainsOtherUnusableSettings) {
  FakeCgroupfs fs;
  // cgroup v1 only: no "0::" line, no cgroup2 anywhere.
  fs.SetSelf("4:memory:/\n1:cpu:/\n");
  auto tree = fs.Open("auto");
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(tree.status().message(), HasSubstr("cgroup v1 only"));

  fs.SetSelf("0::/\n");
  tree = fs.Open("auto");
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().message(), "no cgroup v2 mounted at " + fs.root() +
                                         " (no cgroup.controllers): this machine uses cgroup v1");

  tree = CgroupTree::Open("auto", fs.root(), fs.Path("no-such-file"));
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(tree.status().message(), HasSubstr("cannot tell the agent's cgroup"));

  tree = fs.Open("none");
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().message(), "turned off in the agent's config (cgroup: none)");

  tree = fs.Open("sys/fs/cgroup");
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().code(), StatusCode::kInvalidArgument);

  tree = fs.Open(fs.Path("missing"));
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().message(), "no cgroup directory " + fs.Path("missing"));

  tree = fs.Open(fs.root());
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().message(),
            fs.root() + " is not a cgroup v2 directory (no cgroup.controllers)");
}

TEST_F(CgroupTreeTest, CreateTaskWritesTheLimits) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  auto task = tree->CreateTask(
      "42-1", Limits{.memory_bytes = 4 * kGiB, .cpu_milli = 1500, .pids = 64, .disk_bytes = kGiB});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  const std::string dir = "system.slice/gpupool.service/task-42-1";
  EXPECT_EQ(task->path(), fs_.Path(dir));
  EXPECT_EQ(task->procs_file(), fs_.Path(dir + "/cgroup.procs"));
  EXPECT_EQ(fs_.Read(dir + "/memory.max"), "4294967296");
  EXPECT_EQ(fs_.Read(dir + "/pids.max"), "64");
  EXPECT_EQ(fs_.Read(dir + "/cpu.max"), "150000 100000");
  // Written only where the kernel offers them.
  EXPECT_FALSE(fs_.Exists(dir + "/memory.swap.max"));
  EXPECT_FALSE(fs_.Exists(dir + "/memory.oom.group"));
}

TEST_F(CgroupTreeTest, CreateTaskWithoutLimitsWritesMax) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  // As the kernel shows a new cgroup (here made in advance: plain files
  // do not appear by themselves).
  const std::string dir = "system.slice/gpupool.service/task-b";
  std::filesystem::create_directories(fs_.Path(dir));
  fs_.Write(dir + "/memory.swap.max", "max\n");
  fs_.Write(dir + "/memory.oom.group", "0\n");
  auto task = tree->CreateTask("b", Limits{});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_EQ(fs_.Read(dir + "/memory.max"), "max");
  EXPECT_EQ(fs_.Read(dir + "/pids.max"), "max");
  EXPECT_EQ(fs_.Read(dir + "/cpu.max"), "max");
  EXPECT_EQ(fs_.Read(dir + "/memory.swap.max"), "0");
  EXPECT_EQ(fs_.Read(dir + "/memory.oom.group"), "1");

  // Below the kernel's minimum quota (1 ms per 100 ms period).
  task = tree->CreateTask("c", Limits{.cpu_milli = 5});
  ASSERT_TRUE(task.ok());
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/task-c/cpu.max"), "1000 100000");
}

TEST_F(CgroupTreeTest, TaskNamesAreOnePathComponent) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok());
  for (const char* bad : {"", ".", "..", "a/b", "../x"}) {
    auto task = tree->CreateTask(bad, Limits{});
    ASSERT_FALSE(task.ok()) << bad;
    EXPECT_EQ(task.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(tree->FindTask(bad).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(CgroupTreeTest, FindTaskReopensAnExistingOne) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok());
  auto missing = tree->FindTask("7-1");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(tree->CreateTask("7-1", Limits{.pids = 10}).ok());
  auto found = tree->FindTask("7-1");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->path(), Service() + "/task-7-1");
}

TEST_F(CgroupTreeTest, ReadsUsageAndEvents) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok());
  auto task = tree->CreateTask("u", Limits{});
  ASSERT_TRUE(task.ok());
  // Nothing to read yet.
  EXPECT_EQ(task->MemoryCurrent(), -1);
  EXPECT_EQ(task->CpuUsageMs(), -1);
  EXPECT_EQ(task->OomKills(), 0);
  EXPECT_EQ(task->PidsMaxEvents(), 0);
  EXPECT_THAT(task->Pids(), IsEmpty());

  const std::string dir = "system.slice/gpupool.service/task-u/";
  fs_.Write(dir + "memory.current", "123456789\n");
  fs_.Write(dir + "cpu.stat",
            "usage_usec 2500999\nuser_usec 2000000\nsystem_usec 500999\nnr_periods 0\n");
  fs_.Write(dir + "memory.events", "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n");
  fs_.Write(dir + "pids.events", "max 7\n");
  fs_.Write(dir + "cgroup.procs", "300\n301\n");
  EXPECT_EQ(task->MemoryCurrent(), 123456789);
  EXPECT_EQ(task->CpuUsageMs(), 2500);
  EXPECT_EQ(task->OomKills(), 2);
  EXPECT_EQ(task->PidsMaxEvents(), 7);
  EXPECT_THAT(task->Pids(), ElementsAre(300, 301));

  fs_.Write(dir + "memory.events", "low 0\nhigh 0\nmax 0\noom 0\n");  // an older kernel
  EXPECT_EQ(task->OomKills(), 0);
}

TEST_F(CgroupTreeTest, KillWritesCgroupKill) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok());
  auto task = tree->CreateTask("k", Limits{});
  ASSERT_TRUE(task.ok());
  fs_.Write("system.slice/gpupool.service/task-k/cgroup.kill", "");
  task->Kill();
  EXPECT_EQ(fs_.Read("system.slice/gpupool.service/task-k/cgroup.kill"), "1");
}

TEST_F(CgroupTreeTest, KillWithoutCgroupKillSignalsEachProcess) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok());
  auto task = tree->CreateTask("k", Limits{});
  ASSERT_TRUE(task.ok());
  pid_t child = ::fork();
  if (child == 0) {
    while (true) ::pause();
  }
  fs_.Write("system.slice/gpupool.service/task-k/cgroup.procs", std::to_string(child) + "\n");
  task->Kill();  // the fake file never empties: gives up after its rounds
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST_F(CgroupTreeTest, RemoveTakesChildCgroupsAndIsIdempotent) {
  auto tree = fs_.Open("auto");
  ASSERT_TRUE(tree.ok());
  auto task = tree->CreateTask("r", Limits{.pids = 5});
  ASSERT_TRUE(task.ok());
  std::filesystem::create_directories(task->path() + "/inner/deeper");  // the job's own cgroups

  // A real cgroup's files go with its rmdir; here they make the directory
  // non-empty, an error Remove reports.
  Status busy = task->Remove();
  EXPECT_FALSE(busy.ok());
  EXPECT_THAT(busy.message(), HasSubstr("cannot remove cgroup " + task->path()));

  for (const auto& e : std::filesystem::directory_iterator(task->path())) {
    if (e.is_regular_file()) std::filesystem::remove(e.path());
  }
  EXPECT_TRUE(task->Remove().ok());
  EXPECT_FALSE(std::filesystem::exists(task->path()));
  EXPECT_TRUE(task->Remove().ok());  // already gone
  EXPECT_EQ(tree->FindTask("r").status().code(), StatusCode::kNotFound);
}

// The real machine. Opening "auto" here must either work or say why not;
// where cgroup2 is mounted at /sys/fs/cgroup/unified without the memory
// controller (the hybrid layout of this project's build machine), it must
// say exactly that.
TEST(CgroupTreeRealTest, AutoOnThisMachineWorksOrSaysWhy) {
  const std::string unified = "/sys/fs/cgroup/unified/cgroup.controllers";
  std::ifstream in(unified);
  std::string controllers, word;
  bool unified_without_memory = false;
  if (in && !std::filesystem::exists("/sys/fs/cgroup/cgroup.controllers")) {
    std::getline(in, controllers);
    unified_without_memory = true;
    for (std::istringstream ws(controllers); ws >> word;) {
      if (word == "memory") unified_without_memory = false;
    }
  }
  auto resolved = CgroupTree::Resolve("auto");
  if (unified_without_memory) {
    auto tree = CgroupTree::Open("auto");
    ASSERT_FALSE(tree.ok());
    EXPECT_THAT(tree.status().message(),
                HasSubstr("cgroup v2 at /sys/fs/cgroup/unified has no memory controller"));
    EXPECT_THAT(tree.status().message(), HasSubstr("hybrid layout"));
    std::cout << "[ real     ] " << tree.status().message() << "\n";
  } else if (!resolved.ok()) {
    // Open fails at the same check, before changing anything.
    auto tree = CgroupTree::Open("auto");
    ASSERT_FALSE(tree.ok());
    EXPECT_FALSE(tree.status().message().empty());
    EXPECT_EQ(tree.status().message(), resolved.status().message());
    std::cout << "[ real     ] " << tree.status().message() << "\n";
  } else {
    // Usable: Open would move this test's whole cgroup (the terminal, the
    // build) into a leaf and enable controllers, so it is not called here.
    EXPECT_FALSE(resolved->empty());
    std::cout << "[ real     ] usable: " << *resolved << "\n";
  }
}

}  // namespace
}  // namespace gpupool::exec
