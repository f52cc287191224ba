// Plain types of the telemetry history (telemetry/downsample.h): what the
// server samples (a GPU's or the pool's reading at one moment) and what it
// keeps (a point: the readings of one bucket of time, reduced).
//
// Units: times in milliseconds since the Unix epoch; a point's utilization
// and allocation are fractions (0..1), its power in watts and its energy in
// joules, while a reading keeps the agent's units (percent, mW, mJ, milli-GPUs).
// A point's field is NaN when no reading in its bucket knew it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gpupool::telemetry {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One resolution of the history: buckets `step_ms` wide, kept `keep_ms`.
struct Tier {
  int64_t step_ms = 0;
  int64_t keep_ms = 0;
  friend bool operator==(const Tier&, const Tier&) = default;
};

// Default: 10 s for a day, 5 min for 30 days.
inline std::vector<Tier> DefaultTiers() {
  constexpr int64_t kDayMs = 24LL * 60 * 60 * 1000;
  return {{10'000, kDayMs}, {5 * 60'000, 30 * kDayMs}};
}

// The series key of a GPU share's own processes (attempt "7.1": "share:7.1"),
// kept beside the nodes' GPUs (node names have no ':'): memory_used_mib is
// what the share's processes hold, memory_total_mib its cap; the other
// readings are not known.
inline std::string ShareSeriesKey(const std::string& attempt_id) { return "share:" + attempt_id; }

// One GPU at one moment (the agent's last heartbeat); -1 = not known.
struct GpuReading {
  std::string node;  // the node's name, or a share's series key (above)
  int32_t gpu = 0;
  int32_t utilization_percent = -1;
  int64_t memory_used_mib = -1;
  int64_t memory_total_mib = 0;  // 0 = not known
  int32_t temperature_c = -1;
  int64_t power_mw = -1;
  int64_t energy_mj = -1;  // the device's counter since its driver loaded
  int32_t allocated_milli = 0;
};

// One GPU over one bucket [t_ms, t_ms + step): means of the known readings
// (NaN when none was known), maxima where said, the last energy.
struct GpuPoint {
  int64_t t_ms = 0;
  int32_t samples = 0;
  double utilization = kNaN;  // 0..1, mean
  double utilization_max = kNaN;
  double memory_used_mib = kNaN;  // mean
  double memory_used_max_mib = kNaN;
  double memory_total_mib = kNaN;
  double temperature_c = kNaN;
  double power_w = kNaN;
  double energy_j = kNaN;   // the last known reading of the bucket
  double allocated = kNaN;  // 0..1, mean of allocated_milli / 1000
};

// The pool at one moment.
struct PoolReading {
  int64_t gpus = 0;
  int64_t gpus_reporting = 0;
  double allocated_gpus = 0;   // sum of allocated_milli / 1000
  double utilization_sum = 0;  // sum of known utilizations, 0..gpus
  double power_w = 0;
  int64_t jobs_running = 0;
  int64_t jobs_pending = 0;
  int64_t nodes_connected = 0;
};

// The pool over one bucket [t_ms, t_ms + step): means of its readings.
struct PoolPoint {
  int64_t t_ms = 0;
  int32_t samples = 0;
  double gpus = kNaN;
  double gpus_reporting = kNaN;
  double allocated_gpus = kNaN;
  double utilization_sum = kNaN;
  double power_w = kNaN;
  double jobs_running = kNaN;
  double jobs_pending = kNaN;
  double nodes_connected = kNaN;
};

}  // namespace gpupool::telemetry
