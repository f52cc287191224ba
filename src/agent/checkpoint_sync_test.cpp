#include "agent/checkpoint_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpupool-ckpt-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ParseCommitName, AcceptsOnlyCanonicalNumbers) {
  EXPECT_EQ(ParseCommitName("ckpt-0"), 0);
  EXPECT_EQ(ParseCommitName("ckpt-12"), 12);
  EXPECT_EQ(ParseCommitName("ckpt-9223372036854775807"), INT64_MAX);
  for (const char* bad : {"ckpt-", "ckpt-012", "ckpt--1", "ckpt-1a", "ckpt-9223372036854775808",
                          ".staging-3", "ckpt_3", "CKPT-3", "ckpt-3/"}) {
    EXPECT_EQ(ParseCommitName(bad), std::nullopt) << bad;
  }
}

TEST(NewestCommit, TakesTheHighestCommittedDirectoryOnly) {
  TempDir d;
  EXPECT_EQ(NewestCommit(d.path()), std::nullopt);
  EXPECT_EQ(NewestCommit(d.path() + "/absent"), std::nullopt);
  fs::create_directory(d.path() + "/ckpt-2");
  fs::create_directory(d.path() + "/ckpt-10");
  fs::create_directory(d.path() + "/.staging-11");  // not committed yet
  std::ofstream(d.path() + "/ckpt-12") << "a file, not a checkpoint";
  fs::create_directory_symlink("/etc", d.path() + "/ckpt-13");  // could point anywhere
  fs::create_directory(d.path() + "/ckpt-014");                 // not canonical
  EXPECT_EQ(NewestCommit(d.path()), (Commit{10, "ckpt-10"}));
  fs::rename(d.path() + "/.staging-11", d.path() + "/ckpt-11");  // the job commits
  EXPECT_EQ(NewestCommit(d.path()), (Commit{11, "ckpt-11"}));
}

// An upload function the test controls: records what it was asked, and
// answers from a script of statuses (then succeeds).
class ScriptedUpload {
 public:
  explicit ScriptedUpload(std::vector<Status> script = {}) : script_(std::move(script)) {}

  UploadFn fn() {
    return [this](const std::string&, const Commit& c) -> Result<UploadResult> {
      {
        std::unique_lock lock(mu_);
        calls_.push_back(c.number);
        cv_.wait(lock, [this] { return !held_; });
        if (next_ < script_.size()) return script_[next_++];
      }
      return UploadResult{c.number * 100, "m", {}};
    };
  }
  void Hold(bool held) {
    {
      std::lock_guard lock(mu_);
      held_ = held;
    }
    cv_.notify_all();
  }
  std::vector<int64_t> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  void WaitForCalls(size_t n) {
    for (int i = 0; i < 500 && calls().size() < n; ++i) ::usleep(10'000);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  std::vector<Status> script_;
  size_t next_ = 0;
  std::vector<int64_t> calls_;
};

TEST(CheckpointUploader, AnOfferMadeDuringAnUploadReplacesOlderWaitingOnes) {
  ScriptedUpload up;
  up.Hold(true);
  CheckpointUploader u("/nonexistent", up.fn());
  u.Offer({1, "ckpt-1"});
  up.WaitForCalls(1);
  u.Offer({2, "ckpt-2"});
  u.Offer({3, "ckpt-3"});
  u.Offer({3, "ckpt-3"});  // not newer: ignored
  EXPECT_TRUE(u.busy());
  up.Hold(false);
  ASSERT_TRUE(u.WaitIdle(5000));
  EXPECT_THAT(up.calls(), ElementsAre(1, 3));
  EXPECT_EQ(u.uploaded(), 3);
  auto outcomes = u.TakeOutcomes();
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[1].commit.number, 3);
  ASSERT_TRUE(outcomes[1].result.ok());
  EXPECT_EQ(outcomes[1].result->checkpoint, 300);
  EXPECT_TRUE(u.TakeOutcomes().empty());
}

TEST(CheckpointUploader, RetriesWhileTheServerIsAway) {
  ScriptedUpload up({Status::Unavailable("connection refused"),
                     Status::DeadlineExceeded("timed out"), Status::Internal("HTTP 500")});
  CheckpointUploader u("/nonexistent", up.fn(), /*max_backoff_ms=*/20);
  u.Offer({4, "ckpt-4"});
  ASSERT_TRUE(u.WaitIdle(5000));
  EXPECT_THAT(up.calls(), ElementsAre(4, 4, 4, 4));
  EXPECT_EQ(u.uploaded(), 4);
  auto outcomes = u.TakeOutcomes();
  ASSERT_EQ(outcomes.size(), 1u);  // the transient failures are not outcomes
  EXPECT_TRUE(outcomes[0].result.ok());
}

TEST(CheckpointUploader, GivesUpOnPermanentErrors) {
  ScriptedUpload up({Status::NotFound("ckpt-5 is gone")});
  CheckpointUploader u("/nonexistent", up.fn());
  u.Offer({5, "ckpt-5"});
  ASSERT_TRUE(u.WaitIdle(5000));
  EXPECT_EQ(u.uploaded(), 0);
  EXPECT_FALSE(u.fenced());
  auto outcomes = u.TakeOutcomes();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].result.status().code(), StatusCode::kNotFound);
  u.Offer({6, "ckpt-6"});  // a newer one still goes
  ASSERT_TRUE(u.WaitIdle(5000));
  EXPECT_EQ(u.uploaded(), 6);
}

TEST(CheckpointUploader, AFencedAttemptUploadsNothingMore) {
  ScriptedUpload up({Status::Aborted("attempt 3.1 is not the live attempt of job 3")});
  CheckpointUploader u("/nonexistent", up.fn());
  u.Offer({1, "ckpt-1"});
  ASSERT_TRUE(u.WaitIdle(5000));
  EXPECT_TRUE(u.fenced());
  u.Offer({2, "ckpt-2"});
  EXPECT_FALSE(u.busy());
  ASSERT_TRUE(u.WaitIdle(1000));
  EXPECT_THAT(up.calls(), ElementsAre(1));
  EXPECT_EQ(u.uploaded(), 0);
}

TEST(CheckpointUploader, StopsRetryingWhenDestroyed) {
  ScriptedUpload up(std::vector<Status>(1000, Status::Unavailable("down")));
  {
    CheckpointUploader u("/nonexistent", up.fn(), /*max_backoff_ms=*/10'000);
    u.Offer({1, "ckpt-1"});
    up.WaitForCalls(2);
    EXPECT_TRUE(u.busy());
  }  // must not wait out the backoff
  EXPECT_LE(up.calls().size(), 4u);
}

}  // namespace
}  // namespace gpupool::agent
