// `gpupool sim campus` and `gpupool sim trace`: generate (or load) a campus
// trace, simulate it pooled and/or per lab, and write the results.
//
// Contract: SummaryJson is pure; RunCampusModes and the drivers read the wall
// clock, only to report how long a run took; WriteOutputs and the drivers
// touch the file system. Call from one thread.
//
// Outputs in DIR (every CSV has a `mode` column):
//   summary.json    seed, trace summary, wall time, metrics per mode
//                   (metrics.h), and with both modes a comparison
//   timeseries.csv  per time bucket: GPUs present, allocated, utilized, jobs waiting
//   groups.csv      per mode and group: owned GPUs, jobs, GPU-hours, delays
//   jobs.csv        per mode and job: submit, first start, end, delay, attempts
//   attempts.csv    per mode and attempt: nodes, start, end, how it ended, work lost
//   utilization.svg GPU allocation over the submission window, one line per mode
//   queue-delay.svg mean queueing delay per lab, one bar per mode
//   interactive.svg sessions started within a minute, per lab and mode
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/campus.h"
#include "sim/des.h"
#include "sim/metrics.h"
#include "sim/trace.h"

namespace gpupool::sim {

// "pooled", "per-lab" or "both".
Result<std::vector<SimMode>> ParseModes(std::string_view text);

struct ModeRun {
  SimResult result;
  ModeMetrics metrics;
  double wall_seconds = 0;  // the simulation alone
  SimOptions options;       // what it ran with
};

// Simulates `trace` in each mode, timing each run.
Result<std::vector<ModeRun>> RunCampusModes(const Trace& trace, const std::vector<SimMode>& modes,
                                            const SimOptions& options);

// The summary.json document. `wall_seconds` < 0 leaves wall times out (for
// comparisons in tests).
nlohmann::ordered_json SummaryJson(const Trace& trace, const std::vector<ModeRun>& runs,
                                   const std::string& source, double wall_seconds);

// Writes every output above into `dir` (creating it).
Status WriteOutputs(const std::string& dir, const Trace& trace, const std::vector<ModeRun>& runs,
                    const std::string& source, double wall_seconds);

struct CampusCommand {
  CampusOptions campus;
  SimOptions sim;
  std::string modes = "both";
  std::string out_dir;
  std::string write_trace;  // also write the generated trace here (JSONL); empty = no
};

struct TraceCommand {
  std::string trace_path;
  SimOptions sim;
  std::string modes = "both";
  std::string out_dir;
  std::optional<uint64_t> seed;  // recorded; the trace's own seed when absent
};

// Return the process exit code: 0 ok, 1 a failure, 2 bad input (printed to stderr).
int RunCampusCommand(const CampusCommand& cmd);
int RunTraceCommand(const TraceCommand& cmd);

}  // namespace gpupool::sim
