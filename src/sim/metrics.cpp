#include "sim/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace gpupool::sim {

namespace {

constexpr double kMsPerHour = 3600.0 * 1000.0;
constexpr int64_t kHourMs = 3600LL * 1000;

double GpuHours(double milli_ms) { return milli_ms / 1000.0 / kMsPerHour; }

ClassMetrics ClassOf(const std::vector<const JobRecord*>& jobs, int64_t end_ms) {
  ClassMetrics c;
  std::vector<double> delays, jcts;
  for (const JobRecord* j : jobs) {
    ++c.jobs;
    if (j->first_start_ms >= 0) {
      delays.push_back(static_cast<double>(j->first_start_ms - j->submit_ms) / 1000.0);
    } else {
      ++c.never_started;
      delays.push_back(static_cast<double>(std::max<int64_t>(0, end_ms - j->submit_ms)) / 1000.0);
    }
    if (j->end_ms >= 0) {
      ++c.completed;
      jcts.push_back(static_cast<double>(j->end_ms - j->submit_ms) / 1000.0);
    }
  }
  c.delay_mean_s = Mean(delays);
  c.delay_p50_s = Percentile(delays, 50);
  c.delay_p95_s = Percentile(delays, 95);
  c.delay_p99_s = Percentile(delays, 99);
  c.jct_mean_s = Mean(jcts);
  c.jct_p50_s = Percentile(jcts, 50);
  c.jct_p95_s = Percentile(jcts, 95);
  return c;
}

nlohmann::ordered_json ClassJson(const ClassMetrics& c) {
  return {
      {"jobs", c.jobs},
      {"never_started", c.never_started},
      {"completed", c.completed},
      {"queue_delay_s",
       {{"mean", c.delay_mean_s},
        {"p50", c.delay_p50_s},
        {"p95", c.delay_p95_s},
        {"p99", c.delay_p99_s}}},
      {"completion_time_s", {{"mean", c.jct_mean_s}, {"p50", c.jct_p50_s}, {"p95", c.jct_p95_s}}}};
}

}  // namespace

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double JainIndex(const std::vector<double>& v) {
  double sum = 0, sq = 0;
  for (double x : v) {
    sum += x;
    sq += x * x;
  }
  if (v.empty() || sq <= 0) return 1.0;
  return sum * sum / (static_cast<double>(v.size()) * sq);
}

double StepMean(const std::vector<Step>& steps, int64_t from, int64_t to) {
  if (to <= from) return 0;
  double acc = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t a = std::max(from, steps[i].t_ms);
    const int64_t b = std::min(
        to, i + 1 < steps.size() ? steps[i + 1].t_ms : std::numeric_limits<int64_t>::max());
    if (b > a) acc += steps[i].value * static_cast<double>(b - a);
  }
  return acc / static_cast<double>(to - from);
}

double IntervalIntegral(const std::vector<Interval>& intervals, int64_t from, int64_t to) {
  double acc = 0;
  for (const Interval& iv : intervals) {
    const int64_t a = std::max(from, iv.start);
    const int64_t b = std::min(to, iv.end);
    if (b > a) acc += iv.value * static_cast<double>(b - a);
  }
  return acc;
}

std::vector<double> BucketMeans(const std::vector<Interval>& intervals, int64_t from, int64_t to,
                                int64_t bucket_ms) {
  std::vector<double> out;
  if (to <= from || bucket_ms <= 0) return out;
  const size_t n = static_cast<size_t>((to - from + bucket_ms - 1) / bucket_ms);
  out.assign(n, 0.0);
  for (const Interval& iv : intervals) {
    int64_t a = std::max(from, iv.start);
    const int64_t b = std::min(to, iv.end);
    while (a < b) {
      const auto k = static_cast<size_t>((a - from) / bucket_ms);
      const int64_t bucket_end = from + static_cast<int64_t>(k + 1) * bucket_ms;
      const int64_t e = std::min(b, bucket_end);
      out[k] += iv.value * static_cast<double>(e - a);
      a = e;
    }
  }
  for (size_t k = 0; k < n; ++k) {
    const int64_t start = from + static_cast<int64_t>(k) * bucket_ms;
    const int64_t len = std::min(to, start + bucket_ms) - start;
    out[k] /= static_cast<double>(len);
  }
  return out;
}

int64_t SeriesBucketMs(int64_t span_ms) {
  const int64_t kMin = 60 * 1000;
  const int64_t options[] = {kMin,        5 * kMin,    15 * kMin,    30 * kMin,   kHourMs,
                             2 * kHourMs, 6 * kHourMs, 12 * kHourMs, 24 * kHourMs};
  for (int64_t b : options) {
    if (span_ms / b <= 400) return b;
  }
  return 24 * kHourMs;
}

ModeMetrics ComputeMetrics(const Trace& trace, const SimResult& run, int64_t bucket_ms) {
  ModeMetrics m;
  m.mode = std::string(SimModeName(run.mode));
  m.seed = run.seed;
  m.window_ms = (std::max<int64_t>(run.last_submit_ms, 1) + kHourMs - 1) / kHourMs * kHourMs;
  m.end_ms = run.end_ms;
  m.drained = run.drained;
  m.decide_calls = run.decide_calls;
  m.event_times = run.event_times;
  int64_t total_milli = 0;
  for (const auto& n : trace.nodes) total_milli += int64_t{n.gpus} * 1000;
  m.gpus_total = static_cast<double>(total_milli) / 1000.0;

  // The state as a step function, from t = 0 (all nodes present, idle).
  std::vector<Step> cap, alloc, waiting;
  if (run.samples.empty() || run.samples.front().t_ms > 0) {
    cap.push_back({0, static_cast<double>(total_milli)});
    alloc.push_back({0, 0});
    waiting.push_back({0, 0});
  }
  for (const StateSample& s : run.samples) {
    cap.push_back({s.t_ms, static_cast<double>(s.capacity_milli)});
    alloc.push_back({s.t_ms, static_cast<double>(s.allocated_milli)});
    waiting.push_back({s.t_ms, static_cast<double>(s.waiting_jobs)});
  }
  const int64_t w = m.window_ms;
  const double cap_int = StepMean(cap, 0, w) * static_cast<double>(w);
  const double alloc_int = StepMean(alloc, 0, w) * static_cast<double>(w);
  std::vector<Interval> useful, held;
  for (const AttemptRecord& a : run.attempts) {
    const auto milli = static_cast<double>(a.gpu_milli);
    useful.push_back({a.start_ms, a.useful_end_ms, milli});
    held.push_back({a.start_ms, a.end_ms, milli});
    const double lost = GpuHours(milli * static_cast<double>(a.end_ms - a.useful_end_ms));
    if (a.end == AttemptEnd::kPreempted) {
      m.lost_gpu_hours_preemption += lost;
      ++m.preemptions_by_reason[a.preempted_for];
    }
    if (a.end == AttemptEnd::kNodeLeft) m.lost_gpu_hours_departure += lost;
  }
  const double useful_int = IntervalIntegral(useful, 0, w);
  m.capacity_gpu_hours = GpuHours(cap_int);
  m.allocated_gpu_hours = GpuHours(alloc_int);
  m.useful_gpu_hours = GpuHours(useful_int);
  if (cap_int > 0) {
    m.allocation_pct = 100.0 * alloc_int / cap_int;
    m.utilization_pct = 100.0 * useful_int / cap_int;
  }

  // Saturation: the instants with a job that could run waiting.
  {
    double sat_ms = 0, sat_cap = 0, sat_alloc = 0;
    for (size_t i = 0; i < cap.size(); ++i) {
      if (waiting[i].value <= 0) continue;
      const int64_t a = std::max<int64_t>(0, cap[i].t_ms);
      const int64_t b = std::min(w, i + 1 < cap.size() ? cap[i + 1].t_ms : w);
      if (b <= a) continue;
      const auto d = static_cast<double>(b - a);
      sat_ms += d;
      sat_cap += cap[i].value * d;
      sat_alloc += alloc[i].value * d;
    }
    if (w > 0) m.saturated_time_pct = 100.0 * sat_ms / static_cast<double>(w);
    if (sat_cap > 0) m.allocation_at_saturation_pct = 100.0 * sat_alloc / sat_cap;
    if (sat_ms > 0) m.unallocated_gpus_while_waiting = (sat_cap - sat_alloc) / sat_ms / 1000.0;
  }

  // Jobs.
  std::vector<const JobRecord*> by_class[3];
  std::map<std::string, std::vector<const JobRecord*>> by_group;
  for (const JobRecord& j : run.jobs) {
    ++m.jobs;
    if (j.end_ms >= 0) {
      ++m.completed;
      m.makespan_h = std::max(m.makespan_h, static_cast<double>(j.end_ms) / kMsPerHour);
    }
    by_class[static_cast<int>(j.priority)].push_back(&j);
    by_group[j.group].push_back(&j);
    m.preemptions += j.preemptions;
    m.displacements += j.displacements;
    m.migrations += j.migrations;
    if (j.displacements > 0) {
      ++m.displaced_jobs;
      if (j.end_ms >= 0) ++m.displaced_jobs_completed;
    }
    if (j.priority == sched::PriorityClass::kInteractive && j.first_start_ms >= 0 &&
        j.first_start_ms - j.submit_ms <= 60 * 1000) {
      ++m.interactive_within_1min;
    }
  }
  m.unfinished = m.jobs - m.completed;
  m.interactive = ClassOf(by_class[0], run.end_ms);
  m.normal = ClassOf(by_class[1], run.end_ms);
  m.opportunistic = ClassOf(by_class[2], run.end_ms);
  if (m.interactive.jobs > 0) {
    m.interactive_within_1min_pct = 100.0 * static_cast<double>(m.interactive_within_1min) /
                                    static_cast<double>(m.interactive.jobs);
  }

  // Groups.
  std::map<std::string, double> used;
  for (const AttemptRecord& a : run.attempts) {
    used[a.group] +=
        IntervalIntegral({{a.start_ms, a.end_ms, static_cast<double>(a.gpu_milli)}}, 0, w);
  }
  double owned_total = 0;
  for (const auto& g : trace.groups)
    owned_total += static_cast<double>(OwnedGpuMilli(trace, g.name));
  std::vector<double> usage_over_share, served;
  for (const auto& g : trace.groups) {
    GroupMetrics gm;
    gm.group = g.name;
    const auto owned = static_cast<double>(OwnedGpuMilli(trace, g.name));
    gm.owned_gpus = owned / 1000.0;
    gm.used_gpu_hours = GpuHours(used[g.name]);
    double submitted = 0, done = 0;
    std::vector<double> delays;
    for (const JobRecord* j : by_group[g.name]) {
      ++gm.jobs;
      const double work = static_cast<double>(j->work_ms) * static_cast<double>(j->gpu_milli);
      submitted += work;
      if (j->end_ms >= 0) {
        ++gm.completed;
        if (j->end_ms <= w) done += work;
      }
      const int64_t start = j->first_start_ms >= 0 ? j->first_start_ms : run.end_ms;
      delays.push_back(static_cast<double>(std::max<int64_t>(0, start - j->submit_ms)) / 1000.0);
      if (j->priority == sched::PriorityClass::kInteractive) {
        ++gm.interactive;
        if (j->first_start_ms >= 0 && j->first_start_ms - j->submit_ms <= 60 * 1000) {
          ++gm.interactive_within_1min;
        }
      }
    }
    gm.submitted_gpu_hours = GpuHours(submitted);
    for (const auto& n : trace.nodes) {
      if (n.owner_group == g.name) gm.owned_speed_gpus += n.gpus * n.speed;
    }
    if (gm.owned_speed_gpus > 0 && w > 0) {
      gm.own_load =
          gm.submitted_gpu_hours / (gm.owned_speed_gpus * static_cast<double>(w) / kMsPerHour);
    }
    gm.served_fraction = submitted > 0 ? done / submitted : 0;
    gm.delay_mean_s = Mean(delays);
    gm.delay_p50_s = Percentile(delays, 50);
    gm.delay_p95_s = Percentile(delays, 95);
    if (owned > 0 && owned_total > 0) {
      usage_over_share.push_back(gm.used_gpu_hours / (owned / owned_total));
    }
    if (submitted > 0) served.push_back(gm.served_fraction);
    m.groups.push_back(std::move(gm));
  }
  m.jain_usage_over_share = JainIndex(usage_over_share);
  m.jain_served_over_demand = JainIndex(served);

  // Series over the whole run.
  if (bucket_ms > 0 && run.end_ms > 0) {
    const int64_t to = run.end_ms;
    const auto u = BucketMeans(useful, 0, to, bucket_ms);
    for (size_t k = 0; k < u.size(); ++k) {
      const int64_t a = static_cast<int64_t>(k) * bucket_ms;
      const int64_t b = std::min(to, a + bucket_ms);
      SeriesPoint p;
      p.t_ms = a;
      p.capacity_gpus = StepMean(cap, a, b) / 1000.0;
      p.allocated_gpus = StepMean(alloc, a, b) / 1000.0;
      p.useful_gpus = u[k] / 1000.0;
      p.waiting_jobs = StepMean(waiting, a, b);
      m.series.push_back(p);
    }
  }
  return m;
}

nlohmann::ordered_json MetricsJson(const ModeMetrics& m) {
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const auto& g : m.groups) {
    groups.push_back({{"group", g.group},
                      {"owned_gpus", g.owned_gpus},
                      {"owned_speed_gpus", g.owned_speed_gpus},
                      {"own_load", g.own_load},
                      {"jobs", g.jobs},
                      {"completed", g.completed},
                      {"submitted_gpu_hours", g.submitted_gpu_hours},
                      {"used_gpu_hours", g.used_gpu_hours},
                      {"served_fraction", g.served_fraction},
                      {"queue_delay_s",
                       {{"mean", g.delay_mean_s}, {"p50", g.delay_p50_s}, {"p95", g.delay_p95_s}}},
                      {"interactive", g.interactive},
                      {"interactive_within_1min", g.interactive_within_1min}});
  }
  nlohmann::ordered_json j = {
      {"mode", m.mode},
      {"seed", m.seed ? nlohmann::ordered_json(*m.seed) : nlohmann::ordered_json(nullptr)},
      {"window_h", static_cast<double>(m.window_ms) / kMsPerHour},
      {"end_h", static_cast<double>(m.end_ms) / kMsPerHour},
      {"drained", m.drained},
      {"gpus_total", m.gpus_total},
      {"allocation_pct", m.allocation_pct},
      {"utilization_pct", m.utilization_pct},
      {"saturated_time_pct", m.saturated_time_pct},
      {"allocation_at_saturation_pct", m.allocation_at_saturation_pct},
      {"unallocated_gpus_while_waiting", m.unallocated_gpus_while_waiting},
      {"capacity_gpu_hours", m.capacity_gpu_hours},
      {"allocated_gpu_hours", m.allocated_gpu_hours},
      {"useful_gpu_hours", m.useful_gpu_hours},
      {"lost_gpu_hours",
       {{"preemption", m.lost_gpu_hours_preemption}, {"departure", m.lost_gpu_hours_departure}}},
      {"jobs", m.jobs},
      {"completed", m.completed},
      {"unfinished", m.unfinished},
      {"makespan_h", m.makespan_h},
      {"interactive_within_1min", m.interactive_within_1min},
      {"interactive_within_1min_pct", m.interactive_within_1min_pct},
      {"preemptions", m.preemptions},
      {"preemptions_by_reason", m.preemptions_by_reason},
      {"displacements", m.displacements},
      {"migrations", m.migrations},
      {"displaced_jobs", m.displaced_jobs},
      {"displaced_jobs_completed", m.displaced_jobs_completed},
      {"jain_usage_over_share", m.jain_usage_over_share},
      {"jain_served_over_demand", m.jain_served_over_demand},
      {"classes",
       {{"interactive", ClassJson(m.interactive)},
        {"normal", ClassJson(m.normal)},
        {"opportunistic", ClassJson(m.opportunistic)}}},
      {"groups", groups},
      {"scheduler_passes", m.decide_calls},
      {"event_times", m.event_times},
  };
  return j;
}

}  // namespace gpupool::sim
