#include "agent/policy.h"

#include <date/tz.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agent/policy_testing.h"
#include "model/yaml.h"

namespace gpupool::agent {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using namespace policy_testing;

TEST(Windows, NoWindowsMeansAlwaysOpen) {
  WindowState w = EvaluateWindows(ProviderPolicy{}, Utc(2026, 11, 25, 12, 0));
  EXPECT_TRUE(w.open);
  EXPECT_FALSE(w.next_change_ms.has_value());
}

TEST(Windows, WeeknightsAndWeekendsInBerlin) {
  ProviderPolicy p = Policy(kEvenings);
  // Wednesday noon (CET, UTC+1): closed until 19:00 local, 18:00 UTC.
  WindowState noon = EvaluateWindows(p, At("Europe/Berlin", 2026, 11, 25, 12, 0));
  EXPECT_FALSE(noon.open);
  EXPECT_EQ(noon.next_change_ms, Utc(2026, 11, 25, 18, 0));
  // Wednesday 20:00: open until Thursday 08:00.
  WindowState evening = EvaluateWindows(p, At("Europe/Berlin", 2026, 11, 25, 20, 0));
  EXPECT_TRUE(evening.open);
  EXPECT_EQ(evening.next_change_ms, At("Europe/Berlin", 2026, 11, 26, 8, 0));
  // Friday night runs into the weekend and on to Monday 08:00: one window.
  WindowState friday = EvaluateWindows(p, At("Europe/Berlin", 2026, 11, 27, 23, 0));
  EXPECT_TRUE(friday.open);
  EXPECT_EQ(friday.next_change_ms, At("Europe/Berlin", 2026, 11, 30, 8, 0));
  // Monday 07:59 still open; 08:00 closed.
  EXPECT_TRUE(EvaluateWindows(p, At("Europe/Berlin", 2026, 11, 30, 7, 59)).open);
  EXPECT_FALSE(EvaluateWindows(p, At("Europe/Berlin", 2026, 11, 30, 8, 0)).open);
  // Without the Sunday night, Sunday's all-day window ends at midnight.
  ProviderPolicy no_sunday_night = Policy(R"(
windows:
  timezone: Europe/Berlin
  weekly:
    - {days: [mon, tue, wed, thu, fri], from: "19:00", to: "08:00"}
    - {days: [sat, sun]}
)");
  WindowState sunday = EvaluateWindows(no_sunday_night, At("Europe/Berlin", 2026, 11, 29, 23, 0));
  EXPECT_TRUE(sunday.open);
  EXPECT_EQ(sunday.next_change_ms, At("Europe/Berlin", 2026, 11, 30, 0, 0));
}

TEST(Windows, TheSameInstantIsOpenInOneZoneAndClosedInAnother) {
  const char* office = R"(
windows:
  timezone: %s
  weekly: [{days: [mon, tue, wed, thu, fri], from: "09:00", to: "17:00"}]
)";
  char ny[256], tokyo[256];
  std::snprintf(ny, sizeof ny, office, "America/New_York");
  std::snprintf(tokyo, sizeof tokyo, office, "Asia/Tokyo");
  int64_t t = Utc(2026, 11, 25, 15, 0);  // 10:00 in New York, 00:00 in Tokyo
  EXPECT_TRUE(EvaluateWindows(Policy(ny), t).open);
  WindowState tk = EvaluateWindows(Policy(tokyo), t);
  EXPECT_FALSE(tk.open);
  EXPECT_EQ(tk.next_change_ms, At("Asia/Tokyo", 2026, 11, 26, 9, 0));
}

TEST(Windows, SpringForwardGapOpensAtTheFirstValidMinute) {
  // Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
  ProviderPolicy p = Policy(R"(
windows:
  timezone: Europe/Berlin
  weekly: [{days: [sun], from: "02:30", to: "06:00"}]
)");
  WindowState before = EvaluateWindows(p, Utc(2026, 3, 29, 0, 30));  // 01:30 CET
  EXPECT_FALSE(before.open);
  EXPECT_EQ(before.next_change_ms, Utc(2026, 3, 29, 1, 0));  // 03:00 CEST
  WindowState in = EvaluateWindows(p, Utc(2026, 3, 29, 1, 0));
  EXPECT_TRUE(in.open);
  EXPECT_EQ(in.next_change_ms, Utc(2026, 3, 29, 4, 0));  // 06:00 CEST
}

TEST(Windows, FallBackTakesTheFirstOccurrenceAndNightsKeepTheirWallClock) {
  // Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
  ProviderPolicy p = Policy(R"(
windows:
  timezone: Europe/Berlin
  weekly: [{days: [sun], from: "02:30", to: "04:00"}]
)");
  WindowState w = EvaluateWindows(p, Utc(2026, 10, 25, 0, 0));  // 02:00 CEST
  EXPECT_FALSE(w.open);
  EXPECT_EQ(w.next_change_ms, Utc(2026, 10, 25, 0, 30));  // the first 02:30 (CEST)
  // The window lasts from the first 02:30 to 04:00 CET: 2.5 hours.
  WindowState in = EvaluateWindows(p, Utc(2026, 10, 25, 0, 30));
  EXPECT_TRUE(in.open);
  EXPECT_EQ(in.next_change_ms, Utc(2026, 10, 25, 3, 0));
  // A night window across the spring change ends at 08:00 local: 12 hours.
  ProviderPolicy nights = Policy(kEvenings);
  WindowState sat = EvaluateWindows(nights, At("Europe/Berlin", 2026, 3, 27, 20, 0));  // Fri
  EXPECT_TRUE(sat.open);
  EXPECT_EQ(sat.next_change_ms, Utc(2026, 3, 30, 6, 0));  // Monday 08:00 CEST
}

TEST(Windows, ClosedAllWeekHasNoNextChange) {
  ProviderPolicy p = Policy(R"(
windows: {weekly: [{days: [mon], from: "10:00", to: "11:00"}]}
)");
  EXPECT_EQ(p.timezone, "UTC");
  WindowState w = EvaluateWindows(p, Utc(2026, 11, 23, 10, 30));  // a Monday
  EXPECT_TRUE(w.open);
  EXPECT_EQ(w.next_change_ms, Utc(2026, 11, 23, 11, 0));
  WindowState after = EvaluateWindows(p, Utc(2026, 11, 23, 11, 0));
  EXPECT_FALSE(after.open);
  EXPECT_EQ(after.next_change_ms, Utc(2026, 11, 30, 10, 0));
}

// ---- parsing -----------------------------------------------------------------

TEST(PolicyParse, EveryField) {
  ProviderPolicy p = Policy(R"(
gpus: [0, GPU-aaaa]
gpu_memory: 50%
fractional: false
idle_only: {max_utilization: 5, for: 10m}
users: {allow: [alice, bob], deny: [mallory]}
groups: {deny: [rivals]}
max_runtime: 24h
reclaim_grace: 90s
allow_host_network: true
max_job_output: 100MiB
)");
  EXPECT_TRUE(p.allow_host_network);
  EXPECT_FALSE(Policy("fractional: true").allow_host_network);  // off unless said
  EXPECT_EQ(p.gpus, (std::vector<std::string>{"0", "GPU-aaaa"}));
  EXPECT_EQ(p.gpu_memory_percent, 50);
  EXPECT_EQ(p.sharing, GpuSharing::kNone);
  EXPECT_EQ(p.idle_max_utilization, 5);
  EXPECT_EQ(p.idle_for_ms, 600'000);
  EXPECT_EQ(p.allow_users, (std::set<std::string>{"alice", "bob"}));
  EXPECT_EQ(p.deny_users, std::set<std::string>{"mallory"});
  EXPECT_EQ(p.deny_groups, std::set<std::string>{"rivals"});
  EXPECT_EQ(p.max_runtime_ms, 24 * 3'600'000);
  EXPECT_EQ(p.reclaim_grace_ms, 90'000);
  EXPECT_EQ(p.max_job_output_bytes, 100 << 20);
  EXPECT_EQ(PolicyToJson(p)["max_job_output"], "100 MiB");
  EXPECT_EQ(Policy("gpu_memory: 20GiB").gpu_memory_mib, 20 * 1024);
  EXPECT_EQ(Policy("gpu_memory: 20GiB").max_job_output_bytes, 0);  // the server's
}

TEST(PolicyParse, SharingAndItsOlderSpelling) {
  EXPECT_EQ(Policy("sharing: none").sharing, GpuSharing::kNone);
  EXPECT_EQ(Policy("sharing: interposer").sharing, GpuSharing::kInterposer);
  EXPECT_EQ(Policy("sharing: mps").sharing, GpuSharing::kMps);
  EXPECT_EQ(Policy("gpu_memory: 20GiB").sharing, std::nullopt);  // the default
  // fractional stays: false is none, true the default.
  EXPECT_EQ(Policy("fractional: false").sharing, GpuSharing::kNone);
  EXPECT_EQ(Policy("fractional: true").sharing, std::nullopt);
  EXPECT_THAT(PolicyError("sharing: mig"),
              HasSubstr("policy.sharing: must be none, interposer or mps, got \"mig\""));
  EXPECT_THAT(PolicyError("sharing: true"), HasSubstr("policy.sharing: must be none, interposer"));
  EXPECT_THAT(PolicyError("sharing: mps\nfractional: true"),
              HasSubstr("policy.sharing: give sharing or its older spelling fractional, not both"));
  // The policy's sharing holds only where libgpushare.so is usable.
  for (const char* text : {"sharing: interposer", "sharing: mps", "gpus: [0]"}) {
    EXPECT_EQ(EffectiveSharing(Policy(text), false), GpuSharing::kNone) << text;
  }
  EXPECT_EQ(EffectiveSharing(Policy("gpus: [0]"), true), GpuSharing::kInterposer);
  EXPECT_EQ(EffectiveSharing(Policy("sharing: mps"), true), GpuSharing::kMps);
  EXPECT_EQ(EffectiveSharing(Policy("sharing: none"), true), GpuSharing::kNone);
  EXPECT_EQ(PolicyToJson(Policy("sharing: mps"))["sharing"], "mps");
}

TEST(PolicyParse, ErrorsNameTheField) {
  EXPECT_THAT(PolicyError("windows: {timezone: Mars/Olympus, weekly: [{days: [mon]}]}"),
              HasSubstr("policy.windows.timezone: unknown time zone \"Mars/Olympus\""));
  EXPECT_THAT(PolicyError("windows: {weekly: [{days: [monday]}]}"),
              HasSubstr("policy.windows.weekly[0].days[0]: unknown day \"monday\""));
  EXPECT_THAT(PolicyError("windows: {weekly: [{days: [mon], from: \"25:00\"}]}"),
              HasSubstr("policy.windows.weekly[0].from: must be a time of day"));
  EXPECT_THAT(PolicyError("windows: {weekly: [{days: [mon], from: \"7:00\"}]}"),
              HasSubstr("policy.windows.weekly[0].from: must be a time of day"));
  EXPECT_THAT(PolicyError("windows: {timezone: UTC}"),
              HasSubstr("policy.windows.weekly: is required"));
  EXPECT_THAT(PolicyError("gpu_memory: 150%"),
              HasSubstr("policy.gpu_memory: a share must be from 1% to 100%"));
  EXPECT_THAT(PolicyError("gpu_memory: 40"), HasSubstr("policy.gpu_memory"));
  EXPECT_THAT(PolicyError("idle_only: {max_utilization: 10}"),
              HasSubstr("policy.idle_only.for: is required"));
  EXPECT_THAT(PolicyError("idle_only: {for: 5m, max_utilization: 101}"),
              HasSubstr("policy.idle_only.max_utilization: must be a whole percent"));
  EXPECT_THAT(PolicyError("users: [alice]"), HasSubstr("policy.users: expected a mapping"));
  EXPECT_THAT(PolicyError("users: {permit: [alice]}"),
              HasSubstr("policy.users.permit: unknown field"));
  EXPECT_THAT(PolicyError("max_runtime: forever"), HasSubstr("policy.max_runtime"));
  EXPECT_THAT(PolicyError("max_job_output: lots"), HasSubstr("policy.max_job_output"));
  EXPECT_THAT(PolicyError("max_job_output: 0MiB"),
              HasSubstr("policy.max_job_output: must be more than 0"));
  EXPECT_THAT(PolicyError("max_job_output: 5"), HasSubstr("policy.max_job_output: must be a size"));
  EXPECT_THAT(PolicyError("gpus: []"), HasSubstr("policy.gpus: must name at least one GPU"));
  EXPECT_THAT(PolicyError("lend: all"), HasSubstr("policy.lend: unknown field"));
  EXPECT_THAT(PolicyError("allow_host_network: sometimes"),
              HasSubstr("policy.allow_host_network: must be true or false"));
}

// ---- idle-only lending -----------------------------------------------------------

const std::set<std::string> kBoth = {"GPU-aaaa", "GPU-bbbb"};

TEST(IdleTracker, LendsAfterTheQuietPeriodAndReclaimsWhenTheOwnerStarts) {
  ProviderPolicy p = Policy("idle_only: {max_utilization: 10, for: 5m}");
  IdleTracker idle(p);
  const int64_t t0 = Utc(2026, 11, 25, 12, 0);
  // Quiet from t0, but not yet for 5 minutes.
  auto v = idle.Observe(t0, {Sample("GPU-aaaa", 3)}, {}, {});
  EXPECT_TRUE(v.lendable.empty());
  v = idle.Observe(t0 + 4 * 60'000, {Sample("GPU-aaaa", 8)}, {}, {});
  EXPECT_TRUE(v.lendable.empty());
  v = idle.Observe(t0 + 5 * 60'000, {Sample("GPU-aaaa", 2)}, {}, {});
  EXPECT_EQ(v.lendable, std::set<std::string>{"GPU-aaaa"});
  // A pool job runs on it at full load: still lent.
  v = idle.Observe(t0 + 6 * 60'000, {Sample("GPU-aaaa", 100, {4242})}, {4242}, {});
  EXPECT_EQ(v.lendable, std::set<std::string>{"GPU-aaaa"});
  EXPECT_TRUE(v.why_not.empty());
  // The owner starts their own process: not lendable at once.
  v = idle.Observe(t0 + 6 * 60'000 + 1000, {Sample("GPU-aaaa", 100, {4242, 777})}, {4242}, {});
  EXPECT_EQ(v.why_not["GPU-aaaa"], "its owner runs process 777 on it");
  EXPECT_TRUE(v.lendable.empty());
  // The owner's process ends; the quiet period starts over.
  v = idle.Observe(t0 + 7 * 60'000, {Sample("GPU-aaaa", 0)}, {}, {});
  EXPECT_TRUE(v.lendable.empty());
  EXPECT_THAT(v.why_not["GPU-aaaa"], HasSubstr("not yet idle"));
  v = idle.Observe(t0 + 12 * 60'000, {Sample("GPU-aaaa", 0)}, {}, {});
  EXPECT_EQ(v.lendable, std::set<std::string>{"GPU-aaaa"});
}

TEST(IdleTracker, BusyOrUnknownUtilizationIsNotIdle) {
  ProviderPolicy p = Policy("idle_only: {max_utilization: 10, for: 1m}");
  IdleTracker idle(p);
  const int64_t t0 = Utc(2026, 11, 25, 12, 0);
  idle.Observe(t0, {Sample("GPU-aaaa", 5), Sample("GPU-bbbb", -1)}, {}, {});
  auto v = idle.Observe(t0 + 30'000, {Sample("GPU-aaaa", 50), Sample("GPU-bbbb", -1)}, {}, {});
  v = idle.Observe(t0 + 90'000, {Sample("GPU-aaaa", 5), Sample("GPU-bbbb", -1)}, {}, {});
  EXPECT_TRUE(v.lendable.empty());  // a's quiet period restarted at 90 s; b is unknown
  v = idle.Observe(t0 + 150'000, {Sample("GPU-aaaa", 5), Sample("GPU-bbbb", -1)}, {}, {});
  EXPECT_EQ(v.lendable, std::set<std::string>{"GPU-aaaa"});
  // Without idle-only, every GPU is lendable whatever it does.
  ProviderPolicy always;
  IdleTracker off(always);
  v = off.Observe(t0, {Sample("GPU-aaaa", 100, {1}), Sample("GPU-bbbb", -1)}, {}, {});
  EXPECT_EQ(v.lendable, kBoth);
  EXPECT_TRUE(v.why_not.empty());
}

TEST(IdleTracker, AGpuHoldingPoolWorkStaysLentUntilTheOwnerShowsUp) {
  ProviderPolicy p = Policy("idle_only: {max_utilization: 10, for: 10m}");
  IdleTracker idle(p);
  const int64_t t0 = Utc(2026, 11, 25, 12, 0);
  // Just after an agent restart: a pool task holds GPU a at full load (its
  // processes are not listed); GPU b is busy with nobody's listed process.
  auto v = idle.Observe(t0, {Sample("GPU-aaaa", 100), Sample("GPU-bbbb", 100)}, {}, {"GPU-aaaa"});
  EXPECT_EQ(v.lendable, std::set<std::string>{"GPU-aaaa"});
  EXPECT_THAT(v.why_not["GPU-bbbb"], HasSubstr("in use by its owner (utilization over 10%)"));
  // The task ends: the GPU was idle all along as far as lending goes.
  v = idle.Observe(t0 + 1000, {Sample("GPU-aaaa", 0), Sample("GPU-bbbb", 0)}, {}, {});
  EXPECT_EQ(v.lendable, std::set<std::string>{"GPU-aaaa"});
  EXPECT_THAT(v.why_not["GPU-bbbb"], HasSubstr("not yet idle for the 10m"));
  // The owner's process on a GPU the pool holds: not lendable (taken back).
  v = idle.Observe(t0 + 2000, {Sample("GPU-aaaa", 90, {31337})}, {}, {"GPU-aaaa"});
  EXPECT_TRUE(v.lendable.empty());
  EXPECT_EQ(v.why_not["GPU-aaaa"], "its owner runs process 31337 on it");
}

}  // namespace
}  // namespace gpupool::agent
