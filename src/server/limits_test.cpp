// The server's own limits: pending jobs per user, storage quotas (Pool with
// StorageQuotas over a real SQLite store), the upload backlog, failed-login
// throttling and rate limit parsing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "server/login_throttle.h"
#include "server/pool.h"
#include "server/rate_limiter.h"
#include "server/storage_quotas.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

std::string ManifestId(char digit) { return std::string(64, digit); }

class LimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("limits_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store_ = *SqliteStore::Open((dir_ / "state.db").string());
    Use(PoolOptions{}, StorageQuotasOptions{});
  }
  void TearDown() override {
    pool_.reset();
    quotas_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Use(PoolOptions pool_options, StorageQuotasOptions quota_options) {
    pool_.reset();
    quotas_ = std::make_unique<StorageQuotas>(*store_, clock_, quota_options);
    PoolHooks hooks;
    hooks.outbox_ready = [](const std::string&) {};
    hooks.job_changed = [](int64_t) {};
    hooks.schedule_needed = [] {};
    hooks.manifest_stored = [this](const std::string& id) { return manifests_.count(id) > 0; };
    hooks.within_quota = [this](Tx& tx, const std::string& owner, const std::string& group,
                                std::string_view what, const std::function<Status()>& change) {
      return quotas_->Guard(tx, owner, group, what, change);
    };
    pool_ = std::make_unique<Pool>(*store_, clock_, pool_options, hooks);
  }

  JobSpec Spec(const std::string& inputs = "", const std::string& group = "default") {
    JobSpec s;
    s.name = "j";
    s.run = "true";
    s.resources.gpus = 1;
    s.inputs = inputs;
    s.group = group;
    return s;
  }
  int64_t CountJobs() {
    int64_t n = -1;
    EXPECT_TRUE(store_
                    ->Transact([&](Tx& tx) -> Status {
                      GP_ASSIGN_OR_RETURN(n, tx.CountJobs(JobQuery{}));
                      return Status::Ok();
                    })
                    .ok());
    return n;
  }
  int64_t Used(StorageHolderKind kind, const std::string& name) {
    auto s = quotas_->Standing({kind, name});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? s->used : -1;
  }
  // A node with one GPU; the oldest pending job (which must be `job`) is
  // placed on it (attempt JOB.1) and runs.
  void Run(int64_t job) {
    if (node_.empty()) {
      proto::Hello h;
      h.node_name = "a";
      h.agent_instance = "i1";
      h.cpu_milli = 8000;
      h.memory_mib = 32768;
      h.gpus.push_back({0, "gpu0", "A100", 81920, 8, 0, true});
      node_ = pool_->AgentHello(h)->node_id;
    }
    ASSERT_GE(*pool_->Schedule(), 1);
    proto::TaskReport r{std::to_string(job) + ".1", proto::TaskState::kRunning, 0, 0, "", 0};
    ASSERT_TRUE(
        pool_->AgentMessage(node_, ++seq_, std::string(proto::kTaskStatus), proto::Encode(r)).ok());
  }
  void Finish(int64_t job) {
    proto::TaskReport r{std::to_string(job) + ".1", proto::TaskState::kExited, 0, 0, "", 0};
    ASSERT_TRUE(
        pool_->AgentMessage(node_, ++seq_, std::string(proto::kTaskStatus), proto::Encode(r)).ok());
    ASSERT_EQ(pool_->GetJob(job)->job.state, JobState::kSucceeded);
  }
  CheckpointRequest Ckpt(int64_t job, char manifest, int64_t bytes) {
    manifests_.insert(ManifestId(manifest));
    CheckpointRequest r;
    r.job_id = job;
    r.attempt_id = std::to_string(job) + ".1";
    r.manifest = ManifestId(manifest);
    r.bytes = bytes;
    r.files = 1;
    return r;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StorageQuotas> quotas_;
  std::unique_ptr<Pool> pool_;
  std::set<std::string> manifests_;
  std::string node_;
  int64_t seq_ = 0;
};

TEST_F(LimitsTest, PendingJobsPerUserAreCappedAndARefusalStoresNothing) {
  PoolOptions o;
  o.max_pending_jobs_per_user = 3;
  Use(o, {});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool_->Submit(Spec(), "alice").ok());
  auto refused = pool_->Submit(Spec(), "alice");
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "user alice has 3 pending jobs, the limit (--max-pending-jobs-per-user); wait for "
            "some to start or cancel some");
  EXPECT_EQ(CountJobs(), 3);
  // Only pending jobs count: one that started makes room for one more.
  Run(1);
  ASSERT_TRUE(pool_->Submit(Spec(), "alice").ok());
  EXPECT_EQ(pool_->Submit(Spec(), "alice").status().code(), StatusCode::kResourceExhausted);
  // Per user: others are not held back.
  ASSERT_TRUE(pool_->Submit(Spec(), "bob").ok());
  // Cancelling makes room too.
  ASSERT_TRUE(pool_->Cancel(2).ok());
  EXPECT_TRUE(pool_->Submit(Spec(), "alice").ok());
  EXPECT_EQ(CountJobs(), 6);
}

TEST_F(LimitsTest, InputsCountOncePerHolderAcrossJobsAndFreeWhenJobsEnd) {
  StorageQuotasOptions q;
  q.default_user_bytes = 1000;
  Use(PoolOptions{}, q);
  manifests_ = {ManifestId('a'), ManifestId('b')};
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('a')), "alice", 600).ok());
  // The same inputs again: stored once, counted once.
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('a')), "alice", 600).ok());
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 600);
  // Other inputs in another job: the user's total decides, not the job's.
  auto refused = pool_->Submit(Spec(ManifestId('b')), "alice", 600);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("storage quota exceeded: the inputs of this job needs 600 B more, but "
                        "user alice stores 600 B of the 1000 B it may (the server's "
                        "--user-storage-quota)"));
  EXPECT_EQ(CountJobs(), 2);
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 600);
  // Another user has a quota of their own.
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('b')), "bob", 600).ok());
  // Ending both jobs frees the inputs.
  ASSERT_TRUE(pool_->Cancel(1).ok());
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 600);
  ASSERT_TRUE(pool_->Cancel(2).ok());
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 0);
  EXPECT_TRUE(pool_->Submit(Spec(ManifestId('b')), "alice", 600).ok());
}

TEST_F(LimitsTest, AGroupQuotaSetByAnAdminBoundsEveryMembersJobs) {
  manifests_ = {ManifestId('a'), ManifestId('b')};
  ASSERT_TRUE(quotas_->Set({StorageHolderKind::kGroup, "vision"}, 1000).ok());
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('a'), "vision"), "alice", 700).ok());
  auto refused = pool_->Submit(Spec(ManifestId('b'), "vision"), "bob", 700);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("group vision stores 700 B of the 1000 B it may (set by an admin: "
                        "gpupool admin quota)"));
  // Other groups are not bound by it; clearing it lifts it.
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('b'), "nlp"), "bob", 700).ok());
  ASSERT_TRUE(quotas_->Set({StorageHolderKind::kGroup, "vision"}, std::nullopt).ok());
  EXPECT_TRUE(pool_->Submit(Spec(ManifestId('b'), "vision"), "bob", 700).ok());
  auto standing = quotas_->Standing({StorageHolderKind::kGroup, "vision"});
  ASSERT_TRUE(standing.ok());
  EXPECT_EQ(standing->used, 1400);
  EXPECT_FALSE(standing->limit.has_value());
}

TEST_F(LimitsTest, ACheckpointOverQuotaIsRefusedAndThePreviousOneStays) {
  StorageQuotasOptions q;
  q.default_user_bytes = 1000;
  Use(PoolOptions{}, q);
  ASSERT_TRUE(pool_->Submit(Spec(), "alice").ok());
  Run(1);
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, 'c', 400)).ok());
  auto refused = pool_->AddCheckpoint(Ckpt(1, 'd', 700));
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("checkpoint of attempt 1.1 needs 700 B more"));
  auto kept = pool_->ListCheckpoints(1);
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ(kept->front().manifest, ManifestId('c'));
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 400);
  // A smaller one fits; the job goes on checkpointing.
  EXPECT_TRUE(pool_->AddCheckpoint(Ckpt(1, 'e', 500)).ok());
}

TEST_F(LimitsTest, RetentionFreesTheOldestBeforeTheNewOneIsMeasured) {
  PoolOptions o;
  o.checkpoint_keep = 1;
  StorageQuotasOptions q;
  q.default_user_bytes = 1000;
  Use(o, q);
  ASSERT_TRUE(pool_->Submit(Spec(), "alice").ok());
  Run(1);
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, 'c', 600)).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, 'd', 700)).ok());
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 700);
}

TEST_F(LimitsTest, AFinishedJobsCheckpointsCanBeDeletedToFreeTheQuota) {
  StorageQuotasOptions q;
  q.default_user_bytes = 1000;
  Use(PoolOptions{}, q);
  ASSERT_TRUE(pool_->Submit(Spec(), "alice").ok());
  Run(1);
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, 'c', 400)).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(1, 'd', 500)).ok());
  auto live = pool_->DeleteCheckpoints(1, 0);
  EXPECT_EQ(live.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(live.status().message(), HasSubstr("job 1 is running"));
  Finish(1);
  // Finished jobs keep their checkpoints, and they keep counting.
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 900);
  EXPECT_EQ(pool_->DeleteCheckpoints(1, 7).status().code(), StatusCode::kNotFound);
  auto one = pool_->DeleteCheckpoints(1, 1);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 500);
  auto rest = pool_->DeleteCheckpoints(1, 0);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 1u);
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 0);
  EXPECT_TRUE(pool_->ListCheckpoints(1)->empty());
}

TEST_F(LimitsTest, UploadsInFlightCountUntilNamedOrAged) {
  StorageQuotasOptions q;
  q.upload_window_ms = 60'000;
  Use(PoolOptions{}, q);
  ASSERT_TRUE(quotas_->Set({StorageHolderKind::kUser, "alice"}, 1000).ok());
  auto allowance = quotas_->Allowance("alice", "");
  ASSERT_TRUE(allowance.ok());
  ASSERT_TRUE(quotas_->Admit(*allowance, 600).ok());
  auto second = quotas_->Admit(*allowance, 600);
  ASSERT_EQ(second.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(second.message(),
              HasSubstr("this upload needs 600 B more, but user alice stores 0 B (+600 B "
                        "uploaded and not in a job yet, or freed and not collected yet) of the "
                        "1000 B it may (set by an admin"));
  EXPECT_EQ(quotas_->Standing({StorageHolderKind::kUser, "alice"})->transient, 600);
  // Named by a job, the bytes are stored, no longer in flight.
  manifests_ = {ManifestId('a')};
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('a')), "alice", 600).ok());
  EXPECT_EQ(quotas_->Standing({StorageHolderKind::kUser, "alice"})->transient, 0);
  allowance = quotas_->Allowance("alice", "");
  EXPECT_TRUE(quotas_->Admit(*allowance, 300).ok());
  EXPECT_EQ(quotas_->Admit(*allowance, 300).code(), StatusCode::kResourceExhausted);
  // What no job named for a window is collected: it stops counting.
  clock_.AdvanceMs(61'000);
  EXPECT_TRUE(quotas_->Admit(*allowance, 300).ok());
  // Users without a limit are not tracked.
  auto bob = quotas_->Allowance("bob", "");
  ASSERT_TRUE(bob.ok());
  EXPECT_TRUE(bob->rooms.empty());
  EXPECT_TRUE(quotas_->Admit(*bob, int64_t{1} << 50).ok());
}

TEST_F(LimitsTest, UploadSubmitCancelInALoopCannotPassTheQuotaOnDisk) {
  StorageQuotasOptions q;
  q.default_user_bytes = 1000;
  q.upload_window_ms = 60'000;
  Use(PoolOptions{}, q);
  manifests_ = {ManifestId('a'), ManifestId('b'), ManifestId('c')};
  auto allowance = quotas_->Allowance("alice", "");
  ASSERT_TRUE(quotas_->Admit(*allowance, 600).ok());
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('a')), "alice", 600).ok());
  ASSERT_TRUE(pool_->Cancel(1).ok());
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 0);
  // Her stored total is 0, but the cancelled job's inputs are on disk until
  // collected: a new upload must fit beside them.
  allowance = quotas_->Allowance("alice", "");
  auto again = quotas_->Admit(*allowance, 600);
  ASSERT_EQ(again.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(again.message(), HasSubstr("stores 0 B (+600 B uploaded"));
  EXPECT_EQ(quotas_->Standing({StorageHolderKind::kUser, "alice"})->transient, 600);
  EXPECT_TRUE(quotas_->Admit(*allowance, 400).ok());
  // Checkpoints replaced by retention count the same way.
  clock_.AdvanceMs(61'000);
  PoolOptions keep_one;
  keep_one.checkpoint_keep = 1;
  Use(keep_one, q);
  ASSERT_TRUE(pool_->Submit(Spec(), "alice").ok());
  Run(2);
  allowance = quotas_->Allowance("alice", "");
  ASSERT_TRUE(quotas_->Admit(*allowance, 500).ok());
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(2, 'b', 500)).ok());
  allowance = quotas_->Allowance("alice", "");
  ASSERT_TRUE(quotas_->Admit(*allowance, 500).ok());          // 500 stored + 500 new
  ASSERT_TRUE(pool_->AddCheckpoint(Ckpt(2, 'c', 500)).ok());  // replaces b
  EXPECT_EQ(Used(StorageHolderKind::kUser, "alice"), 500);
  allowance = quotas_->Allowance("alice", "");
  EXPECT_EQ(quotas_->Admit(*allowance, 500).code(), StatusCode::kResourceExhausted);
  clock_.AdvanceMs(61'000);  // b's chunks are collected by now
  EXPECT_TRUE(quotas_->Admit(*allowance, 500).ok());
}

TEST_F(LimitsTest, ListShowsHoldersThatStoreUploadOrHaveAQuota) {
  manifests_ = {ManifestId('a')};
  ASSERT_TRUE(pool_->Submit(Spec(ManifestId('a'), "vision"), "alice", 10).ok());
  ASSERT_TRUE(quotas_->Set({StorageHolderKind::kUser, "carol"}, 5).ok());
  auto list = quotas_->List();
  ASSERT_TRUE(list.ok());
  std::vector<std::string> names;
  for (const StorageStanding& s : *list) {
    names.push_back(std::string(StorageHolderKindName(s.holder.kind)) + ":" + s.holder.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"user:alice", "user:carol", "group:vision"}));
  EXPECT_EQ((*list)[1].limit, std::optional<int64_t>(5));
  EXPECT_FALSE((*list)[1].limit_is_default);
  EXPECT_EQ(quotas_->Set({StorageHolderKind::kUser, ""}, 1).code(), StatusCode::kInvalidArgument);
}

TEST(LoginThrottleTest, FailuresAreLimitedPerAddressAndPerUserAndSuccessCostsNothing) {
  FakeClock clock;
  LoginLimits limits;
  limits.per_address = {1.0, 4};
  limits.per_user = {1.0 / 60, 2};
  LoginThrottle t(clock, limits);
  // Right passwords never run out.
  for (int i = 0; i < 20; ++i) {
    ASSERT_FALSE(t.Begin("10.0.0.1", "alice").has_value()) << i;
    t.Succeeded("10.0.0.1", "alice");
  }
  // Two failures for alice, then her name is refused from anywhere.
  EXPECT_FALSE(t.Begin("10.0.0.1", "alice").has_value());
  EXPECT_FALSE(t.Begin("10.0.0.2", "alice").has_value());
  auto refused = t.Begin("10.0.0.3", "alice");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused->status.message(),
              HasSubstr("too many failed logins for user alice (at most 2 at once, then 1 a "
                        "minute: --login-failures-per-user); try again in 60 s"));
  EXPECT_EQ(refused->retry_after_ms, 60'000);
  // Bob is not locked out by alice's failures; 10.0.0.3 did not spend a try.
  EXPECT_FALSE(t.Begin("10.0.0.3", "bob").has_value());
  // One address trying many names runs out of its own budget.
  EXPECT_FALSE(t.Begin("10.0.0.3", "carol").has_value());
  EXPECT_FALSE(t.Begin("10.0.0.3", "dave").has_value());
  EXPECT_FALSE(t.Begin("10.0.0.3", "erin").has_value());
  auto by_address = t.Begin("10.0.0.3", "frank");
  ASSERT_TRUE(by_address.has_value());
  EXPECT_THAT(by_address->status.message(),
              HasSubstr("too many failed logins from 10.0.0.3 (at most 4 at once, then 1 a "
                        "second: --login-failures-per-address)"));
  // Time refills both.
  clock.AdvanceMs(60'000);
  EXPECT_FALSE(t.Begin("10.0.0.3", "alice").has_value());
}

TEST(RateLimitTest, ParsesRatesPerSecondMinuteAndHour) {
  auto s = ParseRateLimit("50/s,200");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->per_second, 50);
  EXPECT_DOUBLE_EQ(s->burst, 200);
  auto m = ParseRateLimit("1/m");
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->per_second, 1.0 / 60);
  EXPECT_DOUBLE_EQ(m->burst, 4);
  auto h = ParseRateLimit("30/h,5");
  ASSERT_TRUE(h.ok());
  EXPECT_DOUBLE_EQ(h->per_second, 30.0 / 3600);
  EXPECT_EQ(DescribeRateLimit(*h), "5 at once, then 30 an hour");
  EXPECT_EQ(DescribeRateLimit(*ParseRateLimit("0/s")), "no limit");
  for (const char* bad : {"", "5", "5/d", "-1/s", "5/s,", "5/s,0", "5/sx", "x/s", "5/s,2,3"}) {
    EXPECT_EQ(ParseRateLimit(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace gpupool::server
