// The server process itself: CPU time, memory, open file descriptors,
// start time and uptime, under the names every Prometheus client library
// uses (process_cpu_seconds_total, process_resident_memory_bytes, ...), so
// that existing dashboards and alerts work; and gpupool_build_info.
//
// ReadProcessSample reads Linux's /proc for the calling process.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::metrics {

struct ProcessSample {
  double cpu_seconds = 0;  // user + system
  int64_t resident_bytes = 0;
  int64_t virtual_bytes = 0;
  int64_t open_fds = 0;
  int64_t max_fds = 0;            // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
};

Result<ProcessSample> ReadProcessSample();

// `now_seconds`: the wall clock, for the uptime.
// The process families in the text format (metrics/families.h).
std::string ProcessText(const ProcessSample& p, double now_seconds, std::string_view version);

}  // namespace gpupool::metrics
