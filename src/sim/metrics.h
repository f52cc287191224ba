// What a campus simulation measured: utilization, queueing delay, lost work,
// fairness, from the records of a run (des.h).
//
// Contract: pure functions of their arguments (no I/O, no clock, no
// globals); safe from any thread on caller-owned values.
//
// Definitions (times in the JSON are seconds, GPU-time in GPU-hours):
//  - The window is [0, W): W is the last submission rounded up to the hour.
//    Rates are averaged over the window, so the drain after the last
//    submission (long in per-lab mode) does not dilute them.
//  - allocation: GPU time held by attempts / GPU time of the nodes present.
//  - utilization: the same, counting only GPU time whose work was kept:
//    time since an attempt's last checkpoint, when it was preempted or its
//    machine left, and the time spent vacating, are lost, not utilized.
//  - saturation: the instants when some job waits that could run in its pool
//    (the scheduler did not call it unsatisfiable). Allocation at saturation
//    and the mean number of unallocated GPUs then (idle while work waits:
//    fragmented, or stranded on another lab's machines) are averaged over
//    them.
//  - queueing delay: first start - submit. A job that never started counts
//    with the delay it had when the run ended (censored), and is counted in
//    `never_started`. Completion time: end - submit, completed jobs only.
//  - interactive sessions served within 1 minute: first start - submit <= 60 s,
//    of all sessions submitted.
//  - migrations: attempts killed by a provider leaving whose job next ran on
//    other nodes; displaced jobs completed: of the jobs displaced at least
//    once, those that finished.
//  - fairness: Jain's index (sum x)^2 / (n sum x^2) over the groups of
//    (a) x = GPU-hours used in the window / the group's part of the GPUs it
//    owns (groups that own none are left out), and (b) x = the part of the
//    group's submitted work (GPU-hours at speed 1) completed by the end of
//    the window (groups that submitted nothing are left out). 1 is equal.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/des.h"
#include "sim/trace.h"

namespace gpupool::sim {

// ---------------------------------------------------------------------------
// Building blocks.

// The p-th percentile (0..100), interpolating linearly between the closest
// ranks (as numpy's default). 0 for an empty list.
double Percentile(std::vector<double> values, double p);
double Mean(const std::vector<double>& values);  // 0 for an empty list

// Jain's fairness index of non-negative values: (sum x)^2 / (n * sum x^2),
// in [1/n, 1]. 1 for an empty list or all zeros.
double JainIndex(const std::vector<double>& values);

// A step function: `value` holds from `t_ms` until the next step's t_ms (the
// last one holds forever). Steps are in time order.
struct Step {
  int64_t t_ms = 0;
  double value = 0;
};
// Time-weighted mean over [from, to); before the first step the value is 0.
double StepMean(const std::vector<Step>& steps, int64_t from, int64_t to);

// `value` is active on [start, end).
struct Interval {
  int64_t start = 0;
  int64_t end = 0;
  double value = 0;
};
// The integral of the sum of active values over [from, to) (value x ms).
double IntervalIntegral(const std::vector<Interval>& intervals, int64_t from, int64_t to);
// The mean of the sum of active values over each bucket [from + k b, from +
// (k+1) b) that starts before `to` (the last one is cut at `to`).
std::vector<double> BucketMeans(const std::vector<Interval>& intervals, int64_t from, int64_t to,
                                int64_t bucket_ms);

// ---------------------------------------------------------------------------
// The metrics of one run.

struct ClassMetrics {
  int64_t jobs = 0;
  int64_t never_started = 0;
  int64_t completed = 0;
  double delay_mean_s = 0, delay_p50_s = 0, delay_p95_s = 0, delay_p99_s = 0;
  double jct_mean_s = 0, jct_p50_s = 0, jct_p95_s = 0;
};

struct GroupMetrics {
  std::string group;
  double owned_gpus = 0;
  int64_t jobs = 0;
  int64_t completed = 0;
  double owned_speed_gpus = 0;     // sum over its GPUs of their speed
  double submitted_gpu_hours = 0;  // work asked for, at speed 1
  // The load it puts on its own machines: submitted work / (owned_speed_gpus
  // x the window). Above 1, the lab cannot keep up alone.
  double own_load = 0;
  double used_gpu_hours = 0;   // GPU time held in the window, on any node
  double served_fraction = 0;  // of the submitted work, completed by the window's end
  double delay_mean_s = 0, delay_p50_s = 0, delay_p95_s = 0;
  int64_t interactive = 0;
  int64_t interactive_within_1min = 0;
};

struct SeriesPoint {
  int64_t t_ms = 0;  // bucket start
  double capacity_gpus = 0;
  double allocated_gpus = 0;
  double useful_gpus = 0;
  double waiting_jobs = 0;
};

struct ModeMetrics {
  std::string mode;
  std::optional<uint64_t> seed;
  int64_t window_ms = 0;
  int64_t end_ms = 0;
  bool drained = true;
  int64_t decide_calls = 0;
  int64_t event_times = 0;
  double gpus_total = 0;
  // Over the window, percent.
  double allocation_pct = 0;
  double utilization_pct = 0;
  double saturated_time_pct = 0;
  double allocation_at_saturation_pct = 0;
  double unallocated_gpus_while_waiting = 0;
  // Over the window, GPU-hours.
  double capacity_gpu_hours = 0;
  double allocated_gpu_hours = 0;
  double useful_gpu_hours = 0;
  // Over the whole run.
  double lost_gpu_hours_preemption = 0;
  double lost_gpu_hours_departure = 0;
  int64_t jobs = 0;
  int64_t completed = 0;
  int64_t unfinished = 0;
  double makespan_h = 0;  // last completion
  ClassMetrics interactive, normal, opportunistic;
  int64_t interactive_within_1min = 0;
  double interactive_within_1min_pct = 0;
  int64_t preemptions = 0;
  std::map<std::string, int64_t> preemptions_by_reason;  // "interactive", "guarantee", "owner"
  int64_t displacements = 0;
  int64_t migrations = 0;
  int64_t displaced_jobs = 0;
  int64_t displaced_jobs_completed = 0;
  double jain_usage_over_share = 1;
  double jain_served_over_demand = 1;
  std::vector<GroupMetrics> groups;  // trace group order
  std::vector<SeriesPoint> series;   // over [0, end_ms), `bucket_ms` apart
};

// A bucket size for time series: about `span_ms` / 400, rounded up to one
// of 1, 5, 15, 30 min, 1, 2, 6, 12, 24 h.
int64_t SeriesBucketMs(int64_t span_ms);

ModeMetrics ComputeMetrics(const Trace& trace, const SimResult& run, int64_t bucket_ms);

// summary.json's object for one mode (without the series).
nlohmann::ordered_json MetricsJson(const ModeMetrics& m);

}  // namespace gpupool::sim
