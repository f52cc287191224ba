#include "agent/lending.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/policy_testing.h"

namespace gpupool::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using namespace policy_testing;

LendingRequest Request(std::vector<std::string> gpus = {"GPU-aaaa"}) {
  LendingRequest r;
  r.user = "alice";
  r.group = "vision";
  r.max_runtime_ms = 3'600'000;
  r.gpu_uuids = std::move(gpus);
  return r;
}

// The start check the agent makes: the lending Update gives, then LendingAdmits.
std::string Check(Lender& lender, const LendingRequest& r, int64_t now,
                  const std::vector<GpuTelemetry>& telemetry = {}) {
  Status s = LendingAdmits(lender.Update(now, Gpus(), telemetry, {}, {}), r, Gpus());
  return s.ok() ? "ok" : s.message();
}

constexpr const char* kEvenings = R"(
windows:
  timezone: Europe/Berlin
  weekly:
    - {days: [mon, tue, wed, thu, fri], from: "19:00", to: "08:00"}
)";

TEST(Lender, SharesOnlyWhereThePolicyAndTheLibraryAllow) {
  int64_t now = At("UTC", 2026, 11, 25, 12, 0);
  LendingRequest share = Request();
  share.gpu_milli = 300;
  share.gpu_memory_mib = 1024;
  Lender mps(Policy("sharing: mps"), true);
  EXPECT_EQ(mps.Update(now, Gpus(), {}, {}, {}).sharing, GpuSharing::kMps);
  EXPECT_EQ(Check(mps, share, now), "ok");
  Lender none(Policy("sharing: none"), true);
  EXPECT_EQ(none.Update(now, Gpus(), {}, {}, {}).sharing, GpuSharing::kNone);
  EXPECT_THAT(Check(none, share, now),
              HasSubstr("it lends whole GPUs only (its policy's sharing is none)"));
  EXPECT_EQ(Check(none, Request(), now), "ok");  // a whole GPU
  // No usable libgpushare.so: never an uncapped share, whatever the policy.
  for (const char* text : {"sharing: interposer", "sharing: mps", "gpus: [0, 1]"}) {
    Lender bare(Policy(text), false);
    EXPECT_EQ(bare.Update(now, Gpus(), {}, {}, {}).sharing, GpuSharing::kNone) << text;
    EXPECT_THAT(Check(bare, share, now), HasSubstr("whole GPUs only")) << text;
  }
  Lender later(Policy("sharing: interposer"), false);
  later.SetInterposerUsable(true);
  EXPECT_EQ(Check(later, share, now), "ok");
}

TEST(Lender, UsersAndGroupsOutsideTheAllowedSetAreRefused) {
  Lender l(Policy("users: {allow: [alice, bob], deny: [bob]}\ngroups: {deny: [rivals]}"), true);
  int64_t now = Utc(2026, 11, 25, 12, 0);
  EXPECT_EQ(Check(l, Request(), now), "ok");
  LendingRequest carol = Request();
  carol.user = "carol";
  EXPECT_THAT(Check(l, carol, now),
              HasSubstr("refused by the provider's policy: it does not lend to user \"carol\" "
                        "(lends to: alice, bob)"));
  LendingRequest bob = Request();
  bob.user = "bob";  // allowed and denied: denied wins
  EXPECT_THAT(Check(l, bob, now), HasSubstr("it does not lend to user \"bob\""));
  LendingRequest rival = Request();
  rival.group = "rivals";
  EXPECT_THAT(Check(l, rival, now), HasSubstr("it does not lend to group \"rivals\""));
  rival.gpu_uuids.clear();  // CPU-only work is refused alike
  EXPECT_THAT(Check(l, rival, now), HasSubstr("it does not lend to group \"rivals\""));
}

TEST(Lender, TheHostNetworkOnlyWhereThePolicyAllowsIt) {
  int64_t now = Utc(2026, 11, 25, 12, 0);
  LendingRequest host = Request();
  host.host_network = true;
  Lender closed(Policy("fractional: true"), true);
  EXPECT_EQ(Check(closed, Request(), now), "ok");
  EXPECT_THAT(Check(closed, host, now),
              HasSubstr("refused by the provider's policy: it does not allow network: host"));
  host.gpu_uuids.clear();  // as the server checks it, without GPUs
  EXPECT_THAT(Check(closed, host, now), HasSubstr("allow_host_network is off"));
  Lender open(Policy("allow_host_network: true"), true);
  EXPECT_EQ(Check(open, host, now), "ok");
  // The server learns it from the lending the agent reports.
  NodeLending l = open.Update(now, Gpus(), {}, {}, {});
  auto back = NodeLendingFromJson(NodeLendingToJson(l), "lending");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->host_network);
}

TEST(Lender, RuntimeWindowsGpusSharesAndMemory) {
  int64_t noon = At("Europe/Berlin", 2026, 11, 25, 12, 0);
  int64_t night = At("Europe/Berlin", 2026, 11, 25, 22, 0);
  Lender l(Policy(std::string(kEvenings) + "max_runtime: 8h\ngpus: [1]\nfractional: false\n"),
           true);
  NodeLending day = l.Update(noon, Gpus(), {}, {}, {});
  EXPECT_EQ(day.mode, "closed");
  EXPECT_EQ(day.next_change_ms, At("Europe/Berlin", 2026, 11, 25, 19, 0));
  EXPECT_THAT(Check(l, Request({"GPU-bbbb"}), noon), HasSubstr("outside its availability windows"));
  EXPECT_EQ(Check(l, Request({"GPU-bbbb"}), night), "ok");
  EXPECT_THAT(Check(l, Request({"GPU-aaaa"}), night),
              HasSubstr("GPU GPU-aaaa is not lent (not lent by the policy)"));
  LendingRequest endless = Request({"GPU-bbbb"});
  endless.max_runtime_ms = 0;
  EXPECT_THAT(Check(l, endless, night), HasSubstr("max_runtime at most 8h (the job gives none)"));
  LendingRequest share = Request({"GPU-bbbb"});
  share.gpu_milli = 500;
  EXPECT_THAT(Check(l, share, night), HasSubstr("it lends whole GPUs only"));

  Lender half(Policy("gpu_memory: 50%"), true);
  EXPECT_THAT(Check(half, Request(), noon),
              HasSubstr("it lends only 40 GiB of GPU GPU-aaaa: shares only"));
  LendingRequest small = Request();
  small.gpu_milli = 250;
  small.gpu_memory_mib = 20 * 1024;
  EXPECT_EQ(Check(half, small, noon), "ok");
  small.gpu_memory_mib = 41 * 1024;
  EXPECT_THAT(Check(half, small, noon),
              HasSubstr("the share asks 41 GiB of GPU memory; 40 GiB is lent"));
}

TEST(Lender, AWindowClosingVacatesEveryLentTask) {
  Lender l(Policy(std::string(kEvenings) + "reclaim_grace: 20s"), true);
  std::vector<Lender::RunningTask> running = {{"1.1", {"GPU-aaaa"}}, {"2.1", {}}};
  int64_t late = At("Europe/Berlin", 2026, 11, 26, 7, 59);
  NodeLending before = l.Update(late, Gpus(), {}, {}, running);
  EXPECT_EQ(before.mode, "lending");
  EXPECT_EQ(before.next_change_ms, At("Europe/Berlin", 2026, 11, 26, 8, 0));
  EXPECT_TRUE(l.ToVacate(before, running).empty());
  NodeLending after = l.Update(before.next_change_ms, Gpus(), {}, {}, running);
  EXPECT_EQ(after.mode, "closed");
  EXPECT_TRUE(after.gpus.empty());
  EXPECT_THAT(l.ToVacate(after, running),
              ElementsAre(Pair("1.1", "GPU GPU-aaaa: outside the availability windows"),
                          Pair("2.1", "outside the availability windows")));
}

TEST(Lender, AnOwnerProcessOnALentGpuReclaimsItWithinOneSample) {
  Lender l(Policy("idle_only: {max_utilization: 10, for: 2m}"), true);
  const int64_t t0 = Utc(2026, 11, 25, 12, 0);
  std::vector<Lender::RunningTask> none;
  l.Update(t0, Gpus(), {Sample("GPU-aaaa", 0), Sample("GPU-bbbb", 0)}, {}, none);
  NodeLending idle =
      l.Update(t0 + 120'000, Gpus(), {Sample("GPU-aaaa", 0), Sample("GPU-bbbb", 0)}, {}, none);
  EXPECT_EQ(idle.gpus.size(), 2u);
  // A pool job takes GPU a (its process 500); then the owner starts 777 there.
  std::vector<Lender::RunningTask> running = {{"3.1", {"GPU-aaaa"}}};
  NodeLending busy =
      l.Update(t0 + 121'000, Gpus(), {Sample("GPU-aaaa", 100, {500}), Sample("GPU-bbbb", 0)}, {500},
               running);
  EXPECT_TRUE(l.ToVacate(busy, running).empty());
  NodeLending owner =
      l.Update(t0 + 122'000, Gpus(), {Sample("GPU-aaaa", 100, {500, 777}), Sample("GPU-bbbb", 0)},
               {500}, running);
  EXPECT_EQ(owner.gpus.count("GPU-aaaa"), 0u);
  EXPECT_EQ(owner.gpus.count("GPU-bbbb"), 1u);
  EXPECT_THAT(l.ToVacate(owner, running),
              ElementsAre(Pair("3.1", "GPU GPU-aaaa: its owner runs process 777 on it")));
}

TEST(Lender, PauseResumeReclaimAndLeave) {
  Lender l(ProviderPolicy{}, true);
  const int64_t now = Utc(2026, 11, 25, 12, 0);
  std::vector<Lender::RunningTask> running = {{"1.1", {"GPU-aaaa"}}, {"2.1", {"GPU-bbbb"}}};
  l.Pause();
  NodeLending paused = l.Update(now, Gpus(), {}, {}, running);
  EXPECT_EQ(paused.mode, "paused");
  EXPECT_THAT(Check(l, Request(), now), HasSubstr("the provider paused lending"));
  EXPECT_TRUE(l.ToVacate(paused, running).empty());  // running work goes on

  l.Resume();
  l.Reclaim({"GPU-bbbb"});
  NodeLending one = l.Update(now, Gpus(), {}, {}, running);
  EXPECT_EQ(one.mode, "lending");
  EXPECT_EQ(one.not_lent["GPU-bbbb"], "reclaimed by the owner");
  EXPECT_THAT(l.ToVacate(one, running),
              ElementsAre(Pair("2.1", "GPU GPU-bbbb: reclaimed by the owner")));
  EXPECT_EQ(Check(l, Request({"GPU-aaaa"}), now), "ok");

  l.Reclaim({});  // everything, CPU-only work included
  std::vector<Lender::RunningTask> cpu = {{"4.1", {}}};
  EXPECT_THAT(l.ToVacate(l.Update(now, Gpus(), {}, {}, cpu), cpu),
              ElementsAre(Pair("4.1", "reclaimed by the owner")));
  l.Resume();
  EXPECT_EQ(l.Update(now, Gpus(), {}, {}, {}).gpus.size(), 2u);

  l.Leave();
  l.Resume();  // a leaving node stays leaving
  l.Pause();
  EXPECT_EQ(l.Update(now, Gpus(), {}, {}, {}).mode, "leaving");
  EXPECT_THAT(Check(l, Request(), now), HasSubstr("the node is leaving the pool"));
}

TEST(Lender, ANewPolicyTakesEffectAtTheNextUpdate) {
  Lender l(ProviderPolicy{}, true);
  const int64_t now = Utc(2026, 11, 25, 12, 0);
  std::vector<Lender::RunningTask> running = {{"1.1", {"GPU-aaaa"}}};
  EXPECT_TRUE(l.ToVacate(l.Update(now, Gpus(), {}, {}, running), running).empty());
  l.SetPolicy(Policy("gpus: [GPU-bbbb]"));
  EXPECT_THAT(l.ToVacate(l.Update(now, Gpus(), {}, {}, running), running),
              ElementsAre(Pair("1.1", "GPU GPU-aaaa: not lent by the policy")));
}

}  // namespace
}  // namespace gpupool::agent
