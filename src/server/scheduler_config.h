// The scheduler's configuration file (`gpupool server --scheduler-config
// FILE`): fair-share weights and guarantees per group, the usage half-life,
// preemption and backfill settings. See docs/operator-guide.md.
//
//   half_life: 7d               # decayed usage halves this often (0 = never decays)
//   anti_thrash_window: 30m     # never preempt a job preempted less than this ago
//   groups:
//     vision: {weight: 2, guaranteed_gpus: 4}
//   model_speed: {A100: 2.0, T4: 0.5}
//   backfill_reservations: 8    # 0 = no backfill
//   preemption: true
//   placement: gpupool         # any sched::PolicyNames() name, as `gpupool sim --policy`
//
// Parsing is strict, like job specs: unknown fields, wrong types and values
// out of range are InvalidArgument naming the field path
// ("groups.vision.weight: must be an integer from 1 to 1000000, got 0").
// Every field is optional; absent ones keep sched::SchedulerConfig's defaults.
// Pure functions (LoadSchedulerConfig reads one file); thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "sched/scheduler.h"

namespace gpupool::server {

// Parses YAML (or JSON) text.
Result<sched::SchedulerConfig> ParseSchedulerConfig(std::string_view text);

// Reads and parses `path`; errors are prefixed with the path.
Result<sched::SchedulerConfig> LoadSchedulerConfig(const std::string& path);

}  // namespace gpupool::server
