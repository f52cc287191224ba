#include "agent/share_loop.h"

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <cstdlib>
#include <filesystem>

#include "gpushare/share_files.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

constexpr const char* kGpuA = "GPU-aaaa";
constexpr const char* kGpuB = "GPU-bbbb";

// A started share task on `gpu`, its directory under `root`.
TaskState ShareState(const std::string& root, const std::string& id, const std::string& gpu,
                     int32_t milli) {
  TaskState t;
  t.attempt_id = id;
  t.paths.dir = root + "/" + id;
  t.started = true;
  t.gpu_uuids = {gpu};
  t.gpu_share_milli = milli;
  return t;
}

class ShareLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/share-loop-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A task with its gpushare directory made, as the executor's Prepare does.
  ShareTask Task(const std::string& id, const std::string& gpu, uint32_t milli) {
    fs::create_directories(dir_ + "/" + id + "/gpushare");
    std::map<std::string, TaskState> one{{id, ShareState(dir_, id, gpu, milli)}};
    return ShareTasksOf(one).at(0);
  }
  static void Stamp(const ShareTask& t, uint64_t ns) {
    int fd = ::open(t.want_path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, &ns, sizeof ns, 0), static_cast<ssize_t>(sizeof ns));
    ::close(fd);
  }
  static gpushare_grant_file Grant(const ShareTask& t) {
    gpushare_grant_file g{};
    int fd = ::open(t.grant_path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, &g, sizeof g, 0), static_cast<ssize_t>(sizeof g));
    ::close(fd);
    return g;
  }

  std::string dir_;
  net::EventLoop loop_;
  int64_t now_ = 1'000'000'000'000;
  ShareLoop shares_{loop_, [this] { return now_; }};
};

TEST_F(ShareLoopTest, OnlyRunningSharesOfOneGpuAreShareTasks) {
  std::map<std::string, TaskState> tasks;
  tasks["a"] = ShareState(dir_, "a", kGpuA, 250);
  tasks["strict"] = ShareState(dir_, "strict", kGpuA, 500);
  tasks["strict"].gpu_share_strict = true;
  tasks["whole"] = ShareState(dir_, "whole", kGpuA, 1000);
  tasks["none"] = ShareState(dir_, "none", kGpuA, 0);
  tasks["two"] = ShareState(dir_, "two", kGpuA, 500);
  tasks["two"].gpu_uuids.push_back(kGpuB);
  tasks["waiting"] = ShareState(dir_, "waiting", kGpuA, 500);
  tasks["waiting"].started = false;
  tasks["exited"] = ShareState(dir_, "exited", kGpuA, 500);
  tasks["exited"].job_exited = true;
  tasks["lost"] = ShareState(dir_, "lost", kGpuA, 500);
  tasks["lost"].shim_gone = true;
  tasks["ended"] = ShareState(dir_, "ended", kGpuA, 500);
  tasks["ended"].result = TaskResult{};

  std::vector<ShareTask> shares = ShareTasksOf(tasks);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0], (ShareTask{"a", kGpuA, 250, false, dir_ + "/a/gpushare/want",
                                  dir_ + "/a/gpushare/grant"}));
  EXPECT_EQ(shares[1].id, "strict");
  EXPECT_TRUE(shares[1].strict);
}

TEST_F(ShareLoopTest, OneArbiterPerSharedGpuAndATimerOnlyWhileThereAreShares) {
  EXPECT_FALSE(shares_.ticking());
  shares_.Sync({});
  EXPECT_FALSE(shares_.ticking());

  ShareTask a = Task("a", kGpuA, 250), b = Task("b", kGpuA, 750), c = Task("c", kGpuB, 500);
  shares_.Sync({a, b, c});
  EXPECT_TRUE(shares_.ticking());
  EXPECT_THAT(shares_.Gpus(), ElementsAre(kGpuA, kGpuB));
  EXPECT_THAT(shares_.Tasks(), ElementsAre("a", "b", "c"));
  // Sync wrote a first round of grants, with the beat.
  EXPECT_EQ(Grant(a).beat_ns, static_cast<uint64_t>(now_));

  shares_.Sync({a, c});  // b ended
  EXPECT_THAT(shares_.Gpus(), ElementsAre(kGpuA, kGpuB));
  EXPECT_THAT(shares_.Tasks(), ElementsAre("a", "c"));
  shares_.Sync({a});  // so did c: its GPU's arbiter goes
  EXPECT_THAT(shares_.Gpus(), ElementsAre(kGpuA));
  EXPECT_TRUE(shares_.ticking());
  shares_.Sync({});
  EXPECT_TRUE(shares_.Gpus().empty());
  EXPECT_FALSE(shares_.ticking());
}

TEST_F(ShareLoopTest, TheGrantsFollowTheWants) {
  ShareTask a = Task("a", kGpuA, 250), b = Task("b", kGpuA, 750);
  shares_.Sync({a, b});
  // Neither active: both run freely.
  EXPECT_EQ(gpushare_grant_state_of(Grant(a).grant), GPUSHARE_GRANT_FREE);
  EXPECT_EQ(gpushare_grant_state_of(Grant(b).grant), GPUSHARE_GRANT_FREE);

  // a alone launches: it keeps the GPU, b waits for its turn.
  now_ += 5'000'000;
  Stamp(a, now_);
  shares_.TickOnce();
  EXPECT_EQ(gpushare_grant_state_of(Grant(a).grant), GPUSHARE_GRANT_FREE);
  EXPECT_EQ(gpushare_grant_state_of(Grant(b).grant), GPUSHARE_GRANT_WAIT);
  EXPECT_EQ(Grant(b).beat_ns, static_cast<uint64_t>(now_));

  // Both launch: turns, one holds RUN and the other WAITs.
  now_ += 5'000'000;
  Stamp(a, now_);
  Stamp(b, now_);
  shares_.TickOnce();
  unsigned sa = gpushare_grant_state_of(Grant(a).grant);
  unsigned sb = gpushare_grant_state_of(Grant(b).grant);
  EXPECT_EQ(std::min(sa, sb), static_cast<unsigned>(GPUSHARE_GRANT_RUN));
  EXPECT_EQ(std::max(sa, sb), static_cast<unsigned>(GPUSHARE_GRANT_WAIT));
}

TEST_F(ShareLoopTest, ATaskWhoseFilesCannotBeOpenedIsLeftOut) {
  ShareTask a = Task("a", kGpuA, 250);
  ShareTask gone{
      "gone", kGpuA, 500, false, dir_ + "/gone/gpushare/want", dir_ + "/gone/gpushare/grant"};
  shares_.Sync({a, gone});
  EXPECT_THAT(shares_.Tasks(), ElementsAre("a"));
  shares_.Sync({a, gone});  // not retried (nor logged again)
  EXPECT_THAT(shares_.Tasks(), ElementsAre("a"));
  shares_.Stop();
  EXPECT_FALSE(shares_.ticking());
  EXPECT_TRUE(shares_.Tasks().empty());
}

}  // namespace
}  // namespace gpupool::agent
