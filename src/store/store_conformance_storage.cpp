// The Store conformance suite (store/store_conformance.h): the storage
// facet (StorageTx): what each user and group stores, and their quotas.
// (The manifests garbage collection keeps are in store_conformance_jobs.cpp,
// with the checkpoints that name them.)
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

}  // namespace

namespace {

StorageHolder User(std::string name) { return {StorageHolderKind::kUser, std::move(name)}; }
StorageHolder Group(std::string name) { return {StorageHolderKind::kGroup, std::move(name)}; }

// Checkpoint 1 of `job`'s first attempt, its tree named by `digit`.
Checkpoint SizedCheckpoint(int64_t job, char digit, int64_t bytes) {
  Checkpoint c = MakeCheckpoint(job, MakeAttemptId(job, 1), digit, 1);
  c.bytes = bytes;
  return c;
}

}  // namespace

TEST_P(StoreConformanceTest, StorageCountsInputsOfLiveJobsAndKeptCheckpointsOnce) {
  auto used = [&](const StorageHolder& h) -> int64_t {
    auto u = InTx(store(), [&](Tx& tx) { return tx.StorageUsed(h); });
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    return u.ok() ? u->bytes : -1;
  };
  JobSpec inputs_a = RunSpec();
  inputs_a.group = "vision";
  inputs_a.inputs = std::string(64, 'a');
  Job j1 = MakeJob("alice", inputs_a, JobState::kPending);
  j1.input_bytes = 100;
  Job j2 = MakeJob("alice", inputs_a, JobState::kRunning);  // the same inputs again
  j2.input_bytes = 100;
  JobSpec inputs_b = inputs_a;
  inputs_b.inputs = std::string(64, 'b');
  Job j3 = MakeJob("bob", inputs_b, JobState::kScheduled);
  j3.input_bytes = 50;
  JobSpec plain = RunSpec();  // group "default", no inputs
  Job j4 = MakeJob("alice", plain, JobState::kRunning);
  Job j5 = MakeJob("carol", inputs_b, JobState::kSucceeded);  // finished: inputs not counted
  j5.input_bytes = 70;
  for (Job* j : {&j1, &j2, &j3, &j4, &j5}) {
    CONF_ASSERT_OK_AND_ASSIGN(*j, Insert(store(), *j));
  }
  EXPECT_EQ(used(User("alice")), 100);
  EXPECT_EQ(used(User("bob")), 50);
  EXPECT_EQ(used(User("carol")), 0);
  EXPECT_EQ(used(Group("vision")), 150);
  EXPECT_EQ(used(Group("default")), 0);

  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(SizedCheckpoint(j1.id, 'c', 1000)).status());
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(SizedCheckpoint(j2.id, 'c', 1000)).status());  // same tree
    return tx.AddCheckpoint(SizedCheckpoint(j4.id, 'd', 7)).status();
  }));
  EXPECT_EQ(used(User("alice")), 1107);
  EXPECT_EQ(used(Group("vision")), 1150);
  EXPECT_EQ(used(Group("default")), 7);

  // A transaction that fails counts nothing.
  Status failed = store().Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(SizedCheckpoint(j3.id, 'e', 5000)).status());
    return Status::Aborted("no");
  });
  EXPECT_EQ(failed.code(), StatusCode::kAborted);
  EXPECT_EQ(used(User("bob")), 50);

  // Inputs stop counting when the last live job naming them ends;
  // checkpoints when the last one naming their tree is deleted.
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    j1.state = JobState::kSucceeded;
    return tx.UpdateJob(j1);
  }));
  EXPECT_EQ(used(User("alice")), 1107);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    j2.state = JobState::kCancelled;
    GP_RETURN_IF_ERROR(tx.UpdateJob(j2));
    j2.reason = "updated again while terminal";
    return tx.UpdateJob(j2);
  }));
  EXPECT_EQ(used(User("alice")), 1007);
  EXPECT_EQ(used(Group("vision")), 1050);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.DeleteCheckpoint(j1.id, 1); }));
  EXPECT_EQ(used(User("alice")), 1007);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.DeleteCheckpoint(j2.id, 1); }));
  EXPECT_EQ(used(User("alice")), 7);
  EXPECT_EQ(used(Group("vision")), 50);

  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListStorageUsage(); }));
  std::vector<StorageUsage> want = {{User("alice"), 7, 1},
                                    {User("bob"), 50, 1},
                                    {Group("default"), 7, 1},
                                    {Group("vision"), 50, 1}};
  EXPECT_EQ(all, want);
}

TEST_P(StoreConformanceTest, StorageQuotasPutGetListReplaceDelete) {
  StorageQuota alice{User("alice"), 1 << 20, 5};
  StorageQuota vision{Group("vision"), int64_t{5} << 40, 6};
  StorageQuota alice_group{Group("alice"), 3, 7};  // a group of the same name is another holder
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutStorageQuota(vision));
    GP_RETURN_IF_ERROR(tx.PutStorageQuota(alice));
    return tx.PutStorageQuota(alice_group);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(
      auto got, InTx(store(), [](Tx& tx) { return tx.GetStorageQuota(User("alice")); }));
  EXPECT_EQ(got, std::optional<StorageQuota>(alice));
  CONF_ASSERT_OK_AND_ASSIGN(auto none,
                            InTx(store(), [](Tx& tx) { return tx.GetStorageQuota(User("bob")); }));
  EXPECT_FALSE(none.has_value());
  alice.bytes = 2 << 20;
  alice.set_ms = 9;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutStorageQuota(alice); }));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListStorageQuotas(); }));
  EXPECT_EQ(all, (std::vector<StorageQuota>{alice, alice_group, vision}));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.DeleteStorageQuota(User("alice")));
    return tx.DeleteStorageQuota(User("nobody"));
  }));
  CONF_ASSERT_OK_AND_ASSIGN(all, InTx(store(), [](Tx& tx) { return tx.ListStorageQuotas(); }));
  EXPECT_EQ(all, (std::vector<StorageQuota>{alice_group, vision}));
}

}  // namespace gpupool

namespace gpupool {

// Who pays for stored bytes, as jobs pay: a lab for its manifests, a user
// for hers that no lab holds (jobs of no lab, or of a group that is not
// one).
TEST_P(StoreConformanceTest, StoredBytesArePaidByTheJobsAccounts) {
  GroupRecord vision;
  vision.name = "vision";
  vision.members = {"alice"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutGroup(vision); }));
  JobSpec lab = RunSpec();
  lab.group = "vision";
  JobSpec open = RunSpec();
  open.group = "open-queue";  // not a lab
  CONF_ASSERT_OK_AND_ASSIGN(Job lab_job,
                            Insert(store(), MakeJob("alice", lab, JobState::kRunning)));
  CONF_ASSERT_OK_AND_ASSIGN(Job own_job,
                            Insert(store(), MakeJob("alice", RunSpec(), JobState::kRunning)));
  CONF_ASSERT_OK_AND_ASSIGN(Job bob_job, Insert(store(), MakeJob("bob", open, JobState::kRunning)));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(SizedCheckpoint(lab_job.id, 'c', 1000)).status());
    GP_RETURN_IF_ERROR(tx.AddCheckpoint(SizedCheckpoint(own_job.id, 'd', 7)).status());
    return tx.AddCheckpoint(SizedCheckpoint(bob_job.id, 'e', 50)).status();
  }));
  using Rows = std::vector<std::pair<std::string, int64_t>>;
  CONF_ASSERT_OK_AND_ASSIGN(auto paid, InTx(store(), [](Tx& tx) { return tx.StorageByAccount(); }));
  EXPECT_EQ(paid, (Rows{{"group:vision", 1000}, {"user:alice", 7}, {"user:bob", 50}}));
  // Deleted, a checkpoint is paid by no one.
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.DeleteCheckpoint(lab_job.id, 1); }));
  CONF_ASSERT_OK_AND_ASSIGN(paid, InTx(store(), [](Tx& tx) { return tx.StorageByAccount(); }));
  EXPECT_EQ(paid, (Rows{{"user:alice", 7}, {"user:bob", 50}}));
}

}  // namespace gpupool
