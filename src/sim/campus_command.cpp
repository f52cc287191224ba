#include "sim/campus_command.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/log.h"
#include "sim/openb.h"
#include "sim/pool_sim.h"
#include "sim/svg.h"

namespace gpupool::sim {

namespace {

constexpr double kMsPerHour = 3600.0 * 1000.0;

double Seconds(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

const ModeRun* Find(const std::vector<ModeRun>& runs, SimMode mode) {
  for (const auto& r : runs) {
    if (r.result.mode == mode) return &r;
  }
  return nullptr;
}

double RelativePct(double ours, double base) {
  return base > 0 ? 100.0 * (ours - base) / base : 0.0;
}

// "42 s", "3.5 min", "2.1 h".
std::string HumanSeconds(double s) {
  std::ostringstream o;
  o.precision(s < 60 ? 0 : 1);
  o << std::fixed;
  if (s < 60) {
    o << s << " s";
  } else if (s < 3600) {
    o << s / 60 << " min";
  } else {
    o << s / 3600 << " h";
  }
  return o.str();
}

Status WriteText(const std::string& path, const std::string& text) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return Status::Internal(parent.string() + ": cannot create: " + ec.message());
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status::Internal(path + ": write failed");
  return Status::Ok();
}

std::string Csv(double v) {
  std::ostringstream o;
  o.precision(6);
  o << v;
  return o.str();
}

std::string TimeseriesCsv(const std::vector<ModeRun>& runs) {
  std::string s = "mode,t_h,capacity_gpus,allocated_gpus,useful_gpus,waiting_jobs\n";
  for (const auto& r : runs) {
    for (const auto& p : r.metrics.series) {
      s += r.metrics.mode + "," + Csv(static_cast<double>(p.t_ms) / kMsPerHour) + "," +
           Csv(p.capacity_gpus) + "," + Csv(p.allocated_gpus) + "," + Csv(p.useful_gpus) + "," +
           Csv(p.waiting_jobs) + "\n";
    }
  }
  return s;
}

std::string GroupsCsv(const std::vector<ModeRun>& runs) {
  std::string s =
      "mode,group,owned_gpus,own_load,jobs,completed,submitted_gpu_hours,used_gpu_hours,"
      "served_fraction,"
      "delay_mean_s,delay_p50_s,delay_p95_s,interactive,interactive_within_1min\n";
  for (const auto& r : runs) {
    for (const auto& g : r.metrics.groups) {
      s += r.metrics.mode + "," + g.group + "," + Csv(g.owned_gpus) + "," + Csv(g.own_load) + "," +
           std::to_string(g.jobs) + "," + std::to_string(g.completed) + "," +
           Csv(g.submitted_gpu_hours) + "," + Csv(g.used_gpu_hours) + "," + Csv(g.served_fraction) +
           "," + Csv(g.delay_mean_s) + "," + Csv(g.delay_p50_s) + "," + Csv(g.delay_p95_s) + "," +
           std::to_string(g.interactive) + "," + std::to_string(g.interactive_within_1min) + "\n";
    }
  }
  return s;
}

std::string JobsCsv(const std::vector<ModeRun>& runs) {
  std::string s =
      "mode,job_id,group,class,submit_s,gpu_milli,work_s,first_start_s,end_s,queue_delay_s,"
      "attempts,preemptions,displacements,migrations\n";
  for (const auto& r : runs) {
    const std::string mode(SimModeName(r.result.mode));
    for (const auto& j : r.result.jobs) {
      s += mode + "," + std::to_string(j.job_id) + "," + j.group + "," +
           std::string(sched::PriorityClassName(j.priority)) + "," + Csv(Seconds(j.submit_ms)) +
           "," + std::to_string(j.gpu_milli) + "," + Csv(Seconds(j.work_ms)) + "," +
           (j.first_start_ms >= 0 ? Csv(Seconds(j.first_start_ms)) : "") + "," +
           (j.end_ms >= 0 ? Csv(Seconds(j.end_ms)) : "") + "," +
           (j.first_start_ms >= 0 ? Csv(Seconds(j.first_start_ms - j.submit_ms)) : "") + "," +
           std::to_string(j.attempts) + "," + std::to_string(j.preemptions) + "," +
           std::to_string(j.displacements) + "," + std::to_string(j.migrations) + "\n";
    }
  }
  return s;
}

std::string AttemptsCsv(const std::vector<ModeRun>& runs) {
  std::string s =
      "mode,attempt_id,group,class,nodes,gpu_milli,speed,start_s,end_s,useful_end_s,end,"
      "preempted_for,preemptor_job,lost_work_s,migrated,backfilled\n";
  for (const auto& r : runs) {
    const std::string mode(SimModeName(r.result.mode));
    for (const auto& a : r.result.attempts) {
      std::string nodes;
      for (const auto& n : a.nodes) nodes += (nodes.empty() ? "" : ";") + n;
      s += mode + "," + a.attempt_id + "," + a.group + "," +
           std::string(sched::PriorityClassName(a.priority)) + "," + nodes + "," +
           std::to_string(a.gpu_milli) + "," + Csv(a.speed) + "," + Csv(Seconds(a.start_ms)) + "," +
           Csv(Seconds(a.end_ms)) + "," + Csv(Seconds(a.useful_end_ms)) + "," +
           std::string(AttemptEndName(a.end)) + "," + a.preempted_for + "," +
           (a.preemptor_job_id > 0 ? std::to_string(a.preemptor_job_id) : "") + "," +
           Csv(Seconds(a.lost_work_ms)) + "," + (a.migrated ? "1" : "0") + "," +
           (a.backfilled ? "1" : "0") + "\n";
    }
  }
  return s;
}

std::string SeedText(const Trace& trace) {
  return trace.meta.seed ? "seed " + std::to_string(*trace.meta.seed) : "no seed";
}

// "4 GPUs": what a lab owns, under its name in the bar charts.
std::string OwnedText(const Trace& trace, size_t group) {
  const int64_t milli = OwnedGpuMilli(trace, trace.groups[group].name);
  return std::to_string(milli / 1000) + (milli == 1000 ? " GPU" : " GPUs");
}

std::string UtilizationSvg(const Trace& trace, const std::vector<ModeRun>& runs) {
  LineChart c;
  const int64_t window = runs.front().metrics.window_ms;
  c.title = "GPU allocation over time, pooled vs per lab (" + SeedText(trace) + ")";
  c.x_label = "time (days; day 0 is a Monday)";
  c.y_label = "GPUs allocated (% of GPUs present)";
  c.x_min = 0;
  c.x_max = static_cast<double>(window) / (24 * kMsPerHour);
  c.x_step = c.x_max <= 14 ? 1 : 0;
  c.y_min = 0;
  c.y_max = 100;
  c.y_step = 10;
  c.y_suffix = "%";
  for (const auto& r : runs) {
    LineSeries s;
    s.name = r.metrics.mode;
    const auto& series = r.metrics.series;
    for (size_t i = 0; i < series.size(); ++i) {
      const auto& p = series[i];
      if (p.t_ms >= window) break;
      const int64_t next = i + 1 < series.size() ? series[i + 1].t_ms : r.metrics.end_ms;
      const double mid = static_cast<double>(p.t_ms + next) / 2.0 / (24 * kMsPerHour);
      const double pct = p.capacity_gpus > 0 ? 100.0 * p.allocated_gpus / p.capacity_gpus : 0.0;
      s.points.push_back({mid, pct});
    }
    std::ostringstream note;
    note.precision(1);
    note << std::fixed << "mean " << r.metrics.allocation_pct << "%";
    s.note = note.str();
    c.series.push_back(std::move(s));
  }
  return LineChartSvg(c);
}

std::string QueueDelaySvg(const Trace& trace, const std::vector<ModeRun>& runs) {
  BarChart c;
  double top = 0;
  for (const auto& r : runs) {
    c.series.push_back(r.metrics.mode);
    for (const auto& g : r.metrics.groups) top = std::max(top, g.delay_mean_s);
  }
  const bool hours = top >= 2 * 3600;
  const double unit = hours ? 3600 : 60;
  c.title = "Mean queueing delay per lab, all classes (" + SeedText(trace) + ")";
  c.y_label = std::string("mean queueing delay (") + (hours ? "hours" : "minutes") + ")";
  for (size_t gi = 0; gi < trace.groups.size(); ++gi) {
    BarGroup g;
    g.label = trace.groups[gi].name;
    g.sublabel = OwnedText(trace, gi);
    for (const auto& r : runs) {
      const double s = gi < r.metrics.groups.size() ? r.metrics.groups[gi].delay_mean_s : 0;
      g.values.push_back(s / unit);
      g.value_labels.push_back(HumanSeconds(s));
    }
    c.groups.push_back(std::move(g));
  }
  return BarChartSvg(c);
}

std::string InteractiveSvg(const Trace& trace, const std::vector<ModeRun>& runs) {
  BarChart c;
  c.title = "Interactive sessions started within 1 minute, per lab (" + SeedText(trace) + ")";
  c.y_label = "sessions started within 1 min (%)";
  c.y_suffix = "%";
  c.y_max = 100;
  for (const auto& r : runs) c.series.push_back(r.metrics.mode);
  for (size_t gi = 0; gi < trace.groups.size(); ++gi) {
    BarGroup g;
    g.label = trace.groups[gi].name;
    g.sublabel = OwnedText(trace, gi);
    for (const auto& r : runs) {
      const GroupMetrics* gm = gi < r.metrics.groups.size() ? &r.metrics.groups[gi] : nullptr;
      const double pct = gm && gm->interactive > 0
                             ? 100.0 * static_cast<double>(gm->interactive_within_1min) /
                                   static_cast<double>(gm->interactive)
                             : 0.0;
      g.values.push_back(pct);
      g.value_labels.push_back(gm ? std::to_string(gm->interactive_within_1min) + "/" +
                                        std::to_string(gm->interactive)
                                  : "");
    }
    c.groups.push_back(std::move(g));
  }
  return BarChartSvg(c);
}

std::optional<nlohmann::ordered_json> Comparison(const std::vector<ModeRun>& runs) {
  const ModeRun* pooled = Find(runs, SimMode::kPooled);
  const ModeRun* lab = Find(runs, SimMode::kPerLab);
  if (!pooled || !lab) return std::nullopt;
  const ModeMetrics& p = pooled->metrics;
  const ModeMetrics& l = lab->metrics;
  auto pair = [](double a, double b) {
    return nlohmann::ordered_json{{"pooled", a},
                                  {"per_lab", b},
                                  {"gain_points", a - b},
                                  {"gain_relative_pct", RelativePct(a, b)}};
  };
  nlohmann::ordered_json delays = nlohmann::ordered_json::object();
  for (size_t i = 0; i < p.groups.size() && i < l.groups.size(); ++i) {
    delays[p.groups[i].group] = {{"pooled", p.groups[i].delay_mean_s},
                                 {"per_lab", l.groups[i].delay_mean_s}};
  }
  return nlohmann::ordered_json{
      {"utilization_pct", pair(p.utilization_pct, l.utilization_pct)},
      {"allocation_pct", pair(p.allocation_pct, l.allocation_pct)},
      {"allocation_at_saturation_pct",
       pair(p.allocation_at_saturation_pct, l.allocation_at_saturation_pct)},
      {"interactive_within_1min",
       {{"pooled", p.interactive_within_1min},
        {"per_lab", l.interactive_within_1min},
        {"sessions", p.interactive.jobs},
        {"gain_relative_pct", RelativePct(static_cast<double>(p.interactive_within_1min),
                                          static_cast<double>(l.interactive_within_1min))}}},
      {"normal_queue_delay_p50_s",
       {{"pooled", p.normal.delay_p50_s}, {"per_lab", l.normal.delay_p50_s}}},
      {"normal_queue_delay_p95_s",
       {{"pooled", p.normal.delay_p95_s}, {"per_lab", l.normal.delay_p95_s}}},
      {"queue_delay_mean_s_by_lab", delays},
      {"jain_served_over_demand", pair(p.jain_served_over_demand, l.jain_served_over_demand)}};
}

void PrintRun(const ModeRun& r) {
  const ModeMetrics& m = r.metrics;
  std::cout.precision(1);
  std::cout << std::fixed << "mode=" << m.mode
            << " seed=" << (m.seed ? std::to_string(*m.seed) : "none") << " gpus=" << m.gpus_total
            << " jobs=" << m.jobs << " allocation=" << m.allocation_pct
            << "% utilization=" << m.utilization_pct
            << "% interactive<=1min=" << m.interactive_within_1min << "/" << m.interactive.jobs
            << " (" << m.interactive_within_1min_pct
            << "%) normal_delay_p50=" << HumanSeconds(m.normal.delay_p50_s)
            << " p95=" << HumanSeconds(m.normal.delay_p95_s) << " preemptions=" << m.preemptions
            << " migrations=" << m.migrations << " unfinished=" << m.unfinished;
  std::cout.precision(2);
  std::cout << " sim_wall=" << r.wall_seconds << "s\n";
}

int Finish(const Trace& trace, const std::vector<SimMode>& modes, const SimOptions& sim,
           const std::string& out_dir, const std::string& source, const char* cmd,
           std::chrono::steady_clock::time_point start) {
  // The server's info lines for each event (a node left, a gang's
  // rendezvous) would bury the results: through the pool, only warnings
  // are logged unless debug logging was asked for.
  if (sim.engine == SimEngine::kPool && !LogEnabled(LogLevel::kDebug)) {
    SetLogLevel(LogLevel::kWarn);
  }
  auto runs = RunCampusModes(trace, modes, sim);
  if (!runs.ok()) {
    std::cerr << "gpupool sim " << cmd << ": " << runs.status().message() << "\n";
    // A trace the engine cannot run (a policy the DES does not model, a job
    // the server refuses) is bad input.
    return runs.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (Status s = WriteOutputs(out_dir, trace, *runs, source, wall); !s.ok()) {
    std::cerr << "gpupool sim " << cmd << ": " << s.message() << "\n";
    return 1;
  }
  for (const auto& r : *runs) PrintRun(r);
  std::cout.precision(2);
  std::cout << std::fixed << "wall=" << wall << "s out=" << out_dir << "\n";
  return 0;
}

}  // namespace

Result<std::vector<SimMode>> ParseModes(std::string_view text) {
  if (text == "both") return std::vector<SimMode>{SimMode::kPooled, SimMode::kPerLab};
  GP_ASSIGN_OR_RETURN(SimMode m, ParseSimMode(text));
  return std::vector<SimMode>{m};
}

Result<std::vector<ModeRun>> RunCampusModes(const Trace& trace, const std::vector<SimMode>& modes,
                                            const SimOptions& options) {
  std::vector<ModeRun> runs;
  for (SimMode mode : modes) {
    const auto start = std::chrono::steady_clock::now();
    SimOptions o = options;
    o.mode = mode;
    auto result = o.engine == SimEngine::kPool ? SimulateThroughPool(trace, o) : Simulate(trace, o);
    if (!result.ok()) return result.status().WithContext(std::string(SimModeName(mode)));
    ModeRun run;
    run.result = std::move(*result);
    run.options = o;
    int64_t window = 0;
    for (const auto& j : trace.jobs) window = std::max(window, j.submit_ms);
    run.metrics = ComputeMetrics(trace, run.result, SeriesBucketMs(window));
    run.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    runs.push_back(std::move(run));
  }
  return runs;
}

nlohmann::ordered_json SummaryJson(const Trace& trace, const std::vector<ModeRun>& runs,
                                   const std::string& source, double wall_seconds) {
  int64_t gpus = 0;
  for (const auto& n : trace.nodes) gpus += n.gpus;
  int64_t by_class[3] = {0, 0, 0};
  double work = 0;
  for (const auto& j : trace.jobs) {
    ++by_class[static_cast<int>(j.priority)];
    work += static_cast<double>(j.duration_ms) * static_cast<double>(j.GpuMilli()) / 1000.0 /
            kMsPerHour;
  }
  int64_t leaves = 0;
  for (const auto& e : trace.events) leaves += e.kind == NodeEventKind::kLeave ? 1 : 0;
  nlohmann::ordered_json j;
  j["seed"] = trace.meta.seed ? nlohmann::ordered_json(*trace.meta.seed) : nullptr;
  j["source"] = source;
  if (!trace.meta.params.empty()) {
    j["generator"] = trace.meta.generator;
    j["generator_params"] = nlohmann::ordered_json::parse(trace.meta.params, nullptr, false);
  }
  j["trace"] = {{"groups", trace.groups.size()},
                {"nodes", trace.nodes.size()},
                {"gpus", gpus},
                {"jobs", trace.jobs.size()},
                {"interactive", by_class[0]},
                {"normal", by_class[1]},
                {"opportunistic", by_class[2]},
                {"submitted_gpu_hours_at_speed_1", work},
                {"node_departures", leaves}};
  if (wall_seconds >= 0) j["wall_seconds"] = wall_seconds;
  nlohmann::ordered_json modes = nlohmann::ordered_json::object();
  for (const auto& r : runs) {
    auto m = MetricsJson(r.metrics);
    if (wall_seconds >= 0) m["sim_wall_seconds"] = r.wall_seconds;
    const SimOptions& o = r.options;
    m["options"] = {{"engine", SimEngineName(o.engine)},
                    {"tick_ms", o.tick_ms},
                    {"preempt_grace_ms", o.preempt_grace_ms},
                    {"half_life_ms", o.half_life_ms},
                    {"anti_thrash_window_ms", o.anti_thrash_window_ms},
                    {"candidates", o.candidates},
                    {"placement", sched::PlacementScoreName(o.placement)},
                    {"max_reservations", o.max_reservations},
                    {"preemption", o.mode == SimMode::kPerLab ? o.preemption && o.per_lab_preemption
                                                              : o.preemption}};
    modes[r.metrics.mode] = std::move(m);
  }
  j["modes"] = std::move(modes);
  if (auto c = Comparison(runs)) j["comparison"] = std::move(*c);
  return j;
}

Status WriteOutputs(const std::string& dir, const Trace& trace, const std::vector<ModeRun>& runs,
                    const std::string& source, double wall_seconds) {
  if (runs.empty()) return Status::InvalidArgument("no mode was simulated");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal(dir + ": cannot create: " + ec.message());
  GP_RETURN_IF_ERROR(WriteText(dir + "/summary.json",
                               SummaryJson(trace, runs, source, wall_seconds).dump(2) + "\n"));
  GP_RETURN_IF_ERROR(WriteText(dir + "/timeseries.csv", TimeseriesCsv(runs)));
  GP_RETURN_IF_ERROR(WriteText(dir + "/groups.csv", GroupsCsv(runs)));
  GP_RETURN_IF_ERROR(WriteText(dir + "/jobs.csv", JobsCsv(runs)));
  GP_RETURN_IF_ERROR(WriteText(dir + "/attempts.csv", AttemptsCsv(runs)));
  GP_RETURN_IF_ERROR(WriteText(dir + "/utilization.svg", UtilizationSvg(trace, runs)));
  GP_RETURN_IF_ERROR(WriteText(dir + "/queue-delay.svg", QueueDelaySvg(trace, runs)));
  GP_RETURN_IF_ERROR(WriteText(dir + "/interactive.svg", InteractiveSvg(trace, runs)));
  return Status::Ok();
}

int RunCampusCommand(const CampusCommand& cmd) {
  const auto start = std::chrono::steady_clock::now();
  auto modes = ParseModes(cmd.modes);
  if (!modes.ok()) {
    std::cerr << "gpupool sim campus: " << modes.status().message() << "\n";
    return 2;
  }
  auto trace = GenerateCampus(cmd.campus);
  if (!trace.ok()) {
    std::cerr << "gpupool sim campus: " << trace.status().message() << "\n";
    return 2;
  }
  if (!cmd.write_trace.empty()) {
    if (Status s = WriteText(cmd.write_trace, FormatTrace(*trace)); !s.ok()) {
      std::cerr << "gpupool sim campus: " << s.message() << "\n";
      return 1;
    }
  }
  return Finish(*trace, *modes, cmd.sim, cmd.out_dir, "campus", "campus", start);
}

int RunTraceCommand(const TraceCommand& cmd) {
  const auto start = std::chrono::steady_clock::now();
  auto modes = ParseModes(cmd.modes);
  if (!modes.ok()) {
    std::cerr << "gpupool sim trace: " << modes.status().message() << "\n";
    return 2;
  }
  auto text = ReadFile(cmd.trace_path);
  if (!text.ok()) {
    std::cerr << "gpupool sim trace: " << text.status().message() << "\n";
    return 1;
  }
  auto trace = ParseTrace(cmd.trace_path, *text);
  if (!trace.ok()) {
    std::cerr << "gpupool sim trace: " << trace.status().message() << "\n";
    return 2;
  }
  if (cmd.seed) trace->meta.seed = *cmd.seed;
  return Finish(*trace, *modes, cmd.sim, cmd.out_dir, "trace " + cmd.trace_path, "trace", start);
}

}  // namespace gpupool::sim
