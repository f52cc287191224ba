// Helpers for the provider policy's tests (policy_test, lending_test).
#pragma once

#include <date/tz.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "agent/policy.h"
#include "model/yaml.h"

namespace gpupool::agent::policy_testing {

inline ProviderPolicy Policy(std::string_view yaml) {
  auto j = ParseYamlDocument(yaml, {});
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  auto p = ParseProviderPolicy(*j);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : ProviderPolicy{};
}

inline std::string PolicyError(std::string_view yaml) {
  auto j = ParseYamlDocument(yaml, {});
  if (!j.ok()) return j.status().message();
  auto p = ParseProviderPolicy(*j);
  return p.ok() ? "(accepted)" : p.status().message();
}

// ms since the epoch of a wall-clock time in `zone`, e.g. At("Europe/Berlin", 2026, 11, 25, 12, 0).
inline int64_t At(const char* zone, int y, unsigned mo, unsigned d, int h, int mi) {
  auto local =
      date::local_days{date::year{y} / mo / d} + std::chrono::hours(h) + std::chrono::minutes(mi);
  auto sys = date::locate_zone(zone)->to_sys(local, date::choose::earliest);
  return std::chrono::duration_cast<std::chrono::milliseconds>(sys.time_since_epoch()).count();
}

inline int64_t Utc(int y, unsigned mo, unsigned d, int h, int mi) {
  return At("UTC", y, mo, d, h, mi);
}

// Nights before a working day, and weekends. (A window that starts on
// Sunday evening covers Monday morning; Sunday's all-day window ends at
// midnight.)
constexpr const char* kEvenings = R"(
windows:
  timezone: Europe/Berlin
  weekly:
    - {days: [sun, mon, tue, wed, thu, fri], from: "19:00", to: "08:00"}
    - {days: [sat, sun]}
)";

inline std::vector<GpuInfo> Gpus() {
  GpuInfo a{0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", 81920, 8, 0, false};
  GpuInfo b{1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", 81920, 8, 0, false};
  return {a, b};
}

inline GpuTelemetry Sample(const std::string& uuid, int util, std::vector<int64_t> pids = {}) {
  GpuTelemetry t;
  t.uuid = uuid;
  t.utilization_percent = util;
  for (int64_t pid : pids) t.processes.push_back({pid, 1000});
  return t;
}

}  // namespace gpupool::agent::policy_testing
