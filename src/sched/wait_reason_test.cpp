// The renderer of waiting reasons and explanations: one case per kind, with
// the texts users read (the scheduler's tests check which kind a snapshot
// gives; these check what each kind says).
#include "sched/wait_reason.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace gpupool::sched {
namespace {

WaitReason Of(WaitKind kind, WaitRequest r = {}, int64_t count = 0) {
  WaitReason w;
  w.kind = kind;
  w.request = std::move(r);
  w.count = count;
  return w;
}

WaitRequest Gpus(int32_t n) {
  WaitRequest r;
  r.gpus = n;
  return r;
}

TEST(WaitReasonTextTest, Resources) {
  WaitRequest r = Gpus(2);
  r.gpu_models = {"A100"};
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kResources, r)), "waiting for 2 free GPUs of model A100");
  r = Gpus(1);
  r.gpu_memory_mib = 40 * 1024;
  r.min_compute_capability = 80;
  r.gpu_models = {"A100", "H100", "L40"};
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kResources, r)),
            "waiting for 1 free GPU of model A100, H100 or L40 with 40 GiB and compute "
            "capability >= 8.0");
  WaitRequest share;
  share.gpu_milli = 250;
  share.gpu_memory_mib = 1000;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kResources, share)),
            "waiting for a 0.25 GPU share with 1000 MiB free");
  WaitRequest mig = Gpus(1);
  mig.mig_slices = 1;
  mig.mig_memory_gb = 10;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kResources, mig)),
            "waiting for a free MIG instance of at least 1g.10gb");
  WaitRequest cpu;
  cpu.node_labels = {{"rack", "r1"}, {"zone", "b"}};
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kResources, cpu)),
            "waiting for free CPU and memory on a node labelled rack=r1,zone=b");
  WaitRequest gang = Gpus(4);
  gang.nodes = 3;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kResources, gang)),
            "waiting for 3 nodes with 4 free GPUs each");
}

TEST(WaitReasonTextTest, ResourcesWithPreferenceAndReservation) {
  WaitReason w = Of(WaitKind::kResources, Gpus(4));
  w.reserved_in_ms = 3'600'000;
  EXPECT_EQ(WaitReasonText(w), "waiting for 4 free GPUs; reserved: expected to start in 1h");
  w.preferred_models = {"A100"};
  w.prefer_left_ms = 4 * 60'000 + 1;
  w.reserved_in_ms = 90 * 60'000;
  EXPECT_EQ(WaitReasonText(w),
            "waiting for 4 free GPUs (preferring A100 for 5m more); reserved: expected to start "
            "in 1h30m");
  w.reserved_in_ms = 0;
  w.prefer_left_ms = 1500;
  EXPECT_EQ(WaitReasonText(w), "waiting for 4 free GPUs (preferring A100 for 2s more)");
}

TEST(WaitReasonTextTest, WaitingKinds) {
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kPlacementLimit, Gpus(1))),
            "waiting for the next scheduling pass (placement limit reached)");
  WaitReason p = Of(WaitKind::kPreempting, Gpus(1), 1);
  p.node = "gpu-07";
  EXPECT_EQ(WaitReasonText(p),
            "waiting for 1 preempted attempt to checkpoint and leave node gpu-07");
  p.count = 3;
  EXPECT_EQ(WaitReasonText(p),
            "waiting for 3 preempted attempts to checkpoint and leave node gpu-07");
  WaitReason v = Of(WaitKind::kVictimsLeaving, Gpus(1));
  v.jobs = {12};
  EXPECT_EQ(WaitReasonText(v),
            "waiting for job 12 to leave (preempted for it: checkpoint and requeue)");
  v.jobs = {12, 15};
  EXPECT_EQ(WaitReasonText(v),
            "waiting for jobs 12, 15 to leave (preempted for it: checkpoint and requeue)");
}

TEST(WaitReasonTextTest, UnsatisfiableKinds) {
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kExcludedNodes, Gpus(1), 3)),
            "no node it may use can host it; 3 nodes that could are excluded for it");
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kExcludedNodes, Gpus(1), 1)),
            "no node it may use can host it; 1 node that could is excluded for it");
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoReadyNode, Gpus(1))), "no node is ready");
  WaitRequest labelled = Gpus(1);
  labelled.node_labels = {{"a", "1"}, {"b", "2"}};
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoLabelledNode, labelled)),
            "no ready node is labelled a=1,b=2");
  WaitRequest mig = Gpus(1);
  mig.mig_slices = 3;
  mig.mig_memory_gb = 40;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoMigInstance, mig)),
            "no node has a MIG instance of at least 3g.40gb");
  mig.gpu_models = {"A100"};
  mig.min_compute_capability = 90;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoMigInstance, mig)),
            "no node has a MIG instance of at least 3g.40gb of model A100 with compute "
            "capability >= 9.0");
  WaitRequest model = Gpus(1);
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoGpuModel, model)), "no node has a GPU");
  model.gpu_models = {"H100"};
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoGpuModel, model)), "no node has a GPU of model H100");
  WaitRequest memory = Gpus(1);
  memory.gpu_memory_mib = 200'000;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoGpuMemory, memory)), "no node has a GPU with 195.3 GiB");
  WaitRequest cc = Gpus(1);
  cc.min_compute_capability = 90;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoGpuCapability, cc)),
            "no node has a GPU with compute capability >= 9.0");
  WaitRequest many = Gpus(8);
  many.gpu_models = {"A100"};
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kTooFewGpus, many, 4)),
            "no node has 8 GPUs of model A100 (the most on one node is 4)");
  WaitRequest cpu;
  cpu.cpu_milli = 96'000;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoCpu, cpu)), "no node has 96 CPUs");
  WaitRequest mem;
  mem.memory_mib = 2 * 1024 * 1024;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoMemory, mem)), "no node has 2 TiB of memory");
  WaitRequest gang = Gpus(1);
  gang.nodes = 3;
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kGangTooFewNodes, gang, 2)),
            "the gang needs 3 nodes that can each host one rank; 2 can");
  EXPECT_EQ(WaitReasonText(Of(WaitKind::kNoSingleNode, Gpus(2))),
            "no single node has all of the requested GPUs, CPUs and memory");
}

TEST(WaitReasonTextTest, NoteIsAppended) {
  WaitReason w = Of(WaitKind::kNoReadyNode);
  w.note = "node a: its provider does not lend to group x";
  EXPECT_EQ(WaitReasonText(w), "no node is ready; node a: its provider does not lend to group x");
}

TEST(WaitReasonTextTest, EveryKindHasANameAndAText) {
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(WaitKind::kNoSingleNode); ++k) {
    const auto kind = static_cast<WaitKind>(k);
    const std::string name(WaitKindName(kind));
    EXPECT_NE(name, "unknown") << k;
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_FALSE(WaitReasonText(Of(kind, Gpus(1), 1)).empty()) << name;
  }
  EXPECT_FALSE(WaitKindUnsatisfiable(WaitKind::kResources));
  EXPECT_FALSE(WaitKindUnsatisfiable(WaitKind::kPreempting));
  EXPECT_TRUE(WaitKindUnsatisfiable(WaitKind::kNoGpuModel));
  EXPECT_TRUE(WaitKindUnsatisfiable(WaitKind::kExcludedNodes));
}

TEST(WaitTextMemoTest, SameTextsAsTheRenderer) {
  // More distinct reasons than the memo holds, repeated, interleaved: every
  // text is the renderer's for the reason asked, whatever the memo holds.
  std::vector<WaitReason> reasons;
  for (int i = 1; i <= 40; ++i) {
    WaitReason w =
        Of(i % 3 == 0 ? WaitKind::kTooFewGpus : WaitKind::kResources, Gpus(i % 7 + 1), i % 5);
    w.reserved_in_ms = (i % 4) * 60'000;
    reasons.push_back(w);
  }
  WaitTextMemo memo;
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < reasons.size(); ++k) {
      const WaitReason& w = reasons[(k * 7 + static_cast<size_t>(round)) % reasons.size()];
      EXPECT_EQ(memo.Text(w), WaitReasonText(w));
    }
  }
  WaitReason a = Of(WaitKind::kResources, Gpus(1));
  WaitReason b = a;
  b.note = "x";
  EXPECT_EQ(memo.Text(a), "waiting for 1 free GPU");
  EXPECT_EQ(memo.Text(b), "waiting for 1 free GPU; x");
}

QueueEntry Entry(bool borrowing) {
  QueueEntry e;
  e.position = 7;
  e.group = "vision";
  e.priority = PriorityClass::kNormal;
  e.borrowing = borrowing;
  e.usage_percent = 31;
  e.share_percent = 25;
  e.group_milli = borrowing ? 4500 : 2000;
  e.guaranteed_milli = 4000;
  return e;
}

TEST(ExplanationTextTest, UsesTheGivenPosition) {
  EXPECT_EQ(ExplanationText(3, Entry(false)),
            "position 3 (normal): group vision: 31% of recent use, fair share 25%; within its "
            "guarantee (2.000 of 4.000 GPUs with the jobs ahead of it)");
  EXPECT_EQ(ExplanationText(1, Entry(true)),
            "position 1 (normal): group vision: 31% of recent use, fair share 25%; would borrow "
            "beyond its guarantee (4.500 of 4.000 GPUs with the jobs ahead of it)");
}

TEST(WaitingToJsonTest, KindParametersAndQueue) {
  WaitRequest r = Gpus(2);
  r.gpu_models = {"A100"};
  WaitReason w = Of(WaitKind::kResources, r);
  w.preferred_models = {"A100"};
  w.prefer_left_ms = 60'000;
  w.reserved_in_ms = 3'600'000;
  const nlohmann::json j = WaitingToJson(w, Entry(true));
  EXPECT_EQ(j["kind"], "resources");
  EXPECT_EQ(j["unsatisfiable"], false);
  EXPECT_EQ(j["request"]["gpus"], 2);
  EXPECT_EQ(j["request"]["gpu_models"], nlohmann::json::array({"A100"}));
  EXPECT_FALSE(j["request"].contains("mig"));
  EXPECT_EQ(j["prefer_left_ms"], 60'000);
  EXPECT_EQ(j["reserved_in_ms"], 3'600'000);
  EXPECT_FALSE(j.contains("note"));
  EXPECT_EQ(j["queue"]["class"], "normal");
  EXPECT_EQ(j["queue"]["group"], "vision");
  EXPECT_EQ(j["queue"]["borrowing"], true);
  EXPECT_EQ(j["queue"]["group_gpu_milli"], 4500);
  EXPECT_EQ(j["queue"]["guaranteed_gpu_milli"], 4000);
  EXPECT_EQ(j["queue"]["usage_percent"], 31);
  EXPECT_EQ(j["queue"]["share_percent"], 25);

  WaitReason v = Of(WaitKind::kVictimsLeaving, Gpus(1));
  v.jobs = {4, 9};
  const nlohmann::json jv = WaitingToJson(v, Entry(false));
  EXPECT_EQ(jv["kind"], "victims_leaving");
  EXPECT_EQ(jv["jobs"], nlohmann::json::array({4, 9}));
  EXPECT_FALSE(jv.contains("reserved_in_ms"));

  WaitReason x = Of(WaitKind::kExcludedNodes, Gpus(1), 2);
  x.note = "why";
  const nlohmann::json jx = WaitingToJson(x, Entry(false));
  EXPECT_EQ(jx["unsatisfiable"], true);
  EXPECT_EQ(jx["excluded_hosts"], 2);
  EXPECT_EQ(jx["note"], "why");
}

}  // namespace
}  // namespace gpupool::sched
