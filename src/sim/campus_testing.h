// Helpers for the campus engines' tests (des_test.cpp, pool_sim_test.cpp):
// traces written as JSON lines, and a DES run. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sim/des.h"
#include "sim/trace.h"

namespace gpupool::sim::campus_testing {

inline constexpr int64_t kMin = 60LL * 1000;
inline constexpr int64_t kHour = 60 * kMin;

inline Trace Parse(const std::string& text) {
  auto t = ParseTrace("test.jsonl", text);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Trace{};
}

// The trace through the DES (des.h).
inline SimResult Des(const Trace& t, SimMode mode = SimMode::kPooled) {
  SimOptions o;
  o.mode = mode;
  auto r = Simulate(t, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SimResult{};
}

inline std::vector<const AttemptRecord*> AttemptsOf(const SimResult& r, int64_t job) {
  std::vector<const AttemptRecord*> out;
  for (const auto& a : r.attempts) {
    if (a.job_id == job) out.push_back(&a);
  }
  return out;
}

inline const std::string kLab = R"({"type":"group","name":"lab"})"
                                "\n";

inline std::string Node(const std::string& name, int gpus, double speed,
                        const std::string& owner = "lab", const std::string& model = "V100") {
  return R"({"type":"node","name":")" + name + R"(","owner_group":")" + owner + R"(","gpus":)" +
         std::to_string(gpus) + R"(,"gpu_model":")" + model +
         R"(","gpu_memory":"32GiB","cpus":64,"memory":"256GiB","speed":)" + std::to_string(speed) +
         "}\n";
}

inline std::string Job(int64_t id, const std::string& rest, const std::string& group = "lab") {
  return R"({"type":"job","id":)" + std::to_string(id) + R"(,"group":")" + group + R"(",)" + rest +
         "}\n";
}

}  // namespace gpupool::sim::campus_testing
