#include "sim/campus.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <vector>

namespace gpupool::sim {

namespace {

constexpr int64_t kSecond = 1000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kGiB = 1024;  // in MiB

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One random stream. Distributions are computed here from raw 64-bit draws
// (not std:: distributions, whose algorithms differ between libraries).
class Draw {
 public:
  Draw(uint64_t seed, uint64_t stream) : engine_(SplitMix64(seed ^ SplitMix64(stream))) {}
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Unit(); }
  // Uniform integer in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Unit() * static_cast<double>(hi - lo + 1));
  }
  double Exp(double mean) { return -mean * std::log1p(-Unit()); }
  double Normal() {
    const double u1 = 1.0 - Unit();  // (0, 1]
    const double u2 = Unit();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }
  size_t Pick(const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    double x = Unit() * total;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (x < weights[i]) return i;
      x -= weights[i];
    }
    return weights.size() - 1;
  }
  bool Chance(double p) { return Unit() < p; }

 private:
  std::mt19937_64 engine_;
};

// Stream ids.
constexpr uint64_t kLayoutStream = 1;
constexpr uint64_t kLoadStream = 2;
uint64_t LabStream(size_t lab, int part) { return 1000 + lab * 16 + static_cast<uint64_t>(part); }
uint64_t NodeStream(size_t node) { return 1000000 + node; }
enum LabPart { kBatch = 0, kInteractive = 1, kSweeps = 2, kDeadlines = 3 };

struct GpuKind {
  const char* model;
  int64_t memory_mib;
  int32_t compute_capability;
  double speed;
  double weight;
  std::vector<int> gpu_counts;
};

const std::vector<GpuKind>& Catalog() {
  static const std::vector<GpuKind> kCatalog = {
      {"A100", 80 * kGiB, 80, 2.0, 0.25, {4, 8}},
      {"V100", 32 * kGiB, 70, 1.0, 0.25, {4, 8}},
      {"RTX3090", 24 * kGiB, 86, 0.8, 0.30, {2, 4}},
      {"T4", 16 * kGiB, 75, 0.4, 0.20, {2, 4}},
  };
  return kCatalog;
}

std::string LabName(size_t i) {
  static const char* kNames[] = {"vision", "nlp",     "robotics", "bio",      "climate", "theory",
                                 "speech", "systems", "graphics", "security", "hci",     "astro"};
  if (i < std::size(kNames)) return kNames[i];
  return "lab" + std::to_string(i + 1);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Submission rhythm by hour of the week (time 0 = Monday 00:00).
double BatchRhythm(int64_t t_ms) {
  const int64_t day = (t_ms / kDay) % 7;
  const double hour = static_cast<double>(t_ms % kDay) / kHour;
  const bool weekend = day >= 5;
  double w = 0.25;
  if (hour >= 9 && hour < 18) {
    w = 2.0;
  } else if ((hour >= 7 && hour < 9) || (hour >= 18 && hour < 23)) {
    w = 1.0;
  }
  return weekend ? w * 0.4 : w;
}

double SessionRhythm(int64_t t_ms) {
  const int64_t day = (t_ms / kDay) % 7;
  const double hour = static_cast<double>(t_ms % kDay) / kHour;
  double w = 0.05;
  if (hour >= 9 && hour < 18) {
    w = 1.0;
  } else if ((hour >= 8 && hour < 9) || (hour >= 18 && hour < 21)) {
    w = 0.4;
  }
  return day >= 5 ? w * 0.2 : w;
}

// Mean of a rhythm over a week (it is constant within each hour).
template <typename F>
double WeekMean(F rhythm) {
  double sum = 0;
  for (int h = 0; h < 7 * 24; ++h) sum += rhythm(h * kHour + kHour / 2);
  return sum / (7 * 24);
}

// Sum over a weekday's hours (a Monday): the daily integral in rhythm-hours.
template <typename F>
double WeekdayHours(F rhythm) {
  double sum = 0;
  for (int h = 0; h < 24; ++h) sum += rhythm(h * kHour + kHour / 2);
  return sum;
}

// Arrivals in [0, horizon) of a Poisson process with rate `rate(t)` per ms,
// bounded by `rate_max`, by thinning.
template <typename F>
std::vector<int64_t> Arrivals(Draw& d, double rate_max, int64_t horizon_ms, F rate) {
  std::vector<int64_t> out;
  if (!(rate_max > 0)) return out;
  double t = 0;
  while (true) {
    t += d.Exp(1.0 / rate_max);
    if (t >= static_cast<double>(horizon_ms)) break;
    const auto ms = static_cast<int64_t>(t);
    if (d.Unit() * rate_max < rate(ms)) out.push_back(ms / kSecond * kSecond);
  }
  return out;
}

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// E[min(X, cap)] for X lognormal with the given median and sigma.
double CappedLogNormalMean(double median, double sigma, double cap) {
  const double mu = std::log(median);
  const double lc = std::log(cap);
  return std::exp(mu + sigma * sigma / 2) * NormalCdf((lc - mu - sigma * sigma) / sigma) +
         cap * (1 - NormalCdf((lc - mu) / sigma));
}

int64_t RoundUp(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

int64_t ClampDuration(double ms, int64_t lo, int64_t hi) {
  const auto v = static_cast<int64_t>(std::llround(ms / kSecond)) * kSecond;
  return std::clamp(v, lo, hi);
}

struct Lab {
  std::string name;
  std::vector<size_t> nodes;  // indexes into trace.nodes
  int max_gpus = 0;
  double capacity = 0;  // sum of GPUs x speed
  double multiplier = 1;
};

struct PendingJob {
  int64_t submit_ms;
  TraceJob job;
};

Status CheckOptions(const CampusOptions& o) {
  auto bad = [](const std::string& knob, const std::string& why) {
    return Status::InvalidArgument("campus: " + knob + ": " + why);
  };
  if (o.labs < 1 || o.labs > 100) return bad("labs", "must be 1 to 100");
  if (!(o.days > 0) || o.days > 366) return bad("days", "must be more than 0 and at most 366");
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes || o.max_nodes > 64) {
    return bad("nodes", "need 1 <= min_nodes <= max_nodes <= 64");
  }
  auto non_negative = [&](double v, const char* name) -> Status {
    if (!(v >= 0) || !std::isfinite(v)) return bad(name, "must be a number >= 0");
    return Status::Ok();
  };
  GP_RETURN_IF_ERROR(non_negative(o.load, "load"));
  GP_RETURN_IF_ERROR(non_negative(o.load_spread, "load_spread"));
  GP_RETURN_IF_ERROR(non_negative(o.deadlines_per_week, "deadlines_per_week"));
  GP_RETURN_IF_ERROR(non_negative(o.burst_days, "burst_days"));
  GP_RETURN_IF_ERROR(non_negative(o.interactive_per_day, "interactive_per_day"));
  GP_RETURN_IF_ERROR(non_negative(o.sweeps_per_week, "sweeps_per_week"));
  GP_RETURN_IF_ERROR(non_negative(o.leave_per_node_day, "leave_per_node_day"));
  if (o.load_spread > 5) return bad("load_spread", "must be at most 5");
  if (!(o.deadline_burst >= 1) || o.deadline_burst > 100) {
    return bad("deadline_burst", "must be 1 to 100");
  }
  if (!(o.gang_fraction >= 0 && o.gang_fraction <= 1))
    return bad("gang_fraction", "must be 0 to 1");
  if (!(o.checkpoint_fraction >= 0 && o.checkpoint_fraction <= 1)) {
    return bad("checkpoint_fraction", "must be 0 to 1");
  }
  if (!(o.batch_median_hours > 0) || o.batch_median_hours > 1000) {
    return bad("batch_median_hours", "must be more than 0");
  }
  if (!(o.batch_sigma > 0) || o.batch_sigma > 5) return bad("batch_sigma", "must be in (0, 5]");
  if (!(o.away_hours > 0) || o.away_hours > 24 * 366) return bad("away_hours", "must be > 0");
  return Status::Ok();
}

}  // namespace

std::string CampusOptionsJson(const CampusOptions& o) {
  nlohmann::json j = {{"seed", o.seed},
                      {"labs", o.labs},
                      {"days", o.days},
                      {"min_nodes", o.min_nodes},
                      {"max_nodes", o.max_nodes},
                      {"load", o.load},
                      {"load_spread", o.load_spread},
                      {"deadlines_per_week", o.deadlines_per_week},
                      {"burst_days", o.burst_days},
                      {"deadline_burst", o.deadline_burst},
                      {"gang_fraction", o.gang_fraction},
                      {"batch_median_hours", o.batch_median_hours},
                      {"batch_sigma", o.batch_sigma},
                      {"checkpoint_fraction", o.checkpoint_fraction},
                      {"interactive_per_day", o.interactive_per_day},
                      {"sweeps_per_week", o.sweeps_per_week},
                      {"leave_per_node_day", o.leave_per_node_day},
                      {"away_hours", o.away_hours}};
  return j.dump();
}

Result<Trace> GenerateCampus(const CampusOptions& o) {
  GP_RETURN_IF_ERROR(CheckOptions(o));
  Trace trace;
  trace.meta.seed = o.seed;
  trace.meta.generator = "campus";
  trace.meta.params = CampusOptionsJson(o);
  const auto horizon = static_cast<int64_t>(o.days * kDay);
  const auto& catalog = Catalog();
  std::vector<double> kind_weights;
  for (const auto& k : catalog) kind_weights.push_back(k.weight);

  // Machines.
  std::vector<Lab> labs(static_cast<size_t>(o.labs));
  std::vector<double> node_speed;
  {
    Draw d(o.seed, kLayoutStream);
    for (size_t l = 0; l < labs.size(); ++l) {
      Lab& lab = labs[l];
      lab.name = LabName(l);
      trace.groups.push_back({lab.name, 1, std::nullopt});
      const int64_t count = d.Range(o.min_nodes, o.max_nodes);
      for (int64_t k = 0; k < count; ++k) {
        const GpuKind& kind = catalog[d.Pick(kind_weights)];
        const int gpus = kind.gpu_counts[static_cast<size_t>(
            d.Range(0, static_cast<int64_t>(kind.gpu_counts.size()) - 1))];
        TraceNode n;
        n.name = lab.name + "-" + Lower(kind.model) + "-" + std::to_string(k + 1);
        n.owner_group = lab.name;
        n.gpus = gpus;
        n.gpu_model = kind.model;
        n.gpu_memory_mib = kind.memory_mib;
        n.compute_capability = kind.compute_capability;
        n.cpu_milli = int64_t{gpus} * 8 * 1000;
        n.memory_mib = int64_t{gpus} * 64 * kGiB;
        n.speed = kind.speed;
        lab.nodes.push_back(trace.nodes.size());
        lab.max_gpus = std::max(lab.max_gpus, gpus);
        lab.capacity += gpus * kind.speed;
        trace.nodes.push_back(std::move(n));
      }
    }
  }
  double min_speed = 1e9;
  for (const auto& n : trace.nodes) min_speed = std::min(min_speed, n.speed);

  // Lab load multipliers: evenly spaced on a log scale, shuffled, scaled to a
  // capacity-weighted mean of 1.
  {
    Draw d(o.seed, kLoadStream);
    const size_t n = labs.size();
    std::vector<double> w(n);
    for (size_t i = 0; i < n; ++i) {
      const double z = n == 1 ? 0.0
                              : -o.load_spread + 2.0 * o.load_spread * static_cast<double>(i) /
                                                     static_cast<double>(n - 1);
      w[i] = std::exp(z);
    }
    for (size_t i = n; i > 1; --i) {
      std::swap(w[i - 1], w[static_cast<size_t>(d.Range(0, static_cast<int64_t>(i) - 1))]);
    }
    double weighted = 0, cap = 0;
    for (size_t i = 0; i < n; ++i) {
      weighted += w[i] * labs[i].capacity;
      cap += labs[i].capacity;
    }
    for (size_t i = 0; i < n; ++i) labs[i].multiplier = w[i] * cap / weighted;
  }

  const double batch_mean = WeekMean(BatchRhythm);
  const double batch_peak = 2.0 / batch_mean;
  const double session_day = WeekdayHours(SessionRhythm);  // rhythm-hours per weekday
  const std::vector<int> gpu_choices = {1, 2, 4, 8};
  const std::vector<double> gpu_weights = {0.45, 0.20, 0.20, 0.15};
  const double median_ms = o.batch_median_hours * kHour;
  const int64_t batch_min = 5 * kMinute, batch_max = 72 * kHour;
  const double mean_duration =
      CappedLogNormalMean(median_ms, o.batch_sigma, static_cast<double>(batch_max));

  std::vector<PendingJob> jobs;
  for (size_t l = 0; l < labs.size(); ++l) {
    const Lab& lab = labs[l];
    auto nodes_with = [&](int g) {
      std::vector<size_t> out;
      for (size_t i : lab.nodes) {
        if (trace.nodes[i].gpus >= g) out.push_back(i);
      }
      return out;
    };
    // Deadlines and their rushes.
    std::vector<int64_t> deadlines;
    {
      Draw d(o.seed, LabStream(l, kDeadlines));
      const auto count = static_cast<int64_t>(std::llround(o.deadlines_per_week * o.days / 7.0));
      for (int64_t k = 0; k < count; ++k) {
        deadlines.push_back(static_cast<int64_t>(d.Unit() * static_cast<double>(horizon)));
      }
    }
    const auto burst_ms = static_cast<int64_t>(o.burst_days * kDay);
    auto burst = [&](int64_t t) {
      for (int64_t dl : deadlines) {
        if (t >= dl - burst_ms && t < dl) return o.deadline_burst;
      }
      return 1.0;
    };

    // Batch training.
    {
      Draw d(o.seed, LabStream(l, kBatch));
      double mean_gpus = 0;
      for (size_t k = 0; k < gpu_choices.size(); ++k) {
        const int g = std::min(gpu_choices[k], lab.max_gpus);
        const bool gang_possible = g >= 2 && nodes_with(g).size() >= 2;
        mean_gpus += gpu_weights[k] * g * (1.0 + (gang_possible ? o.gang_fraction : 0.0));
      }
      // Rushes move work before the deadlines; they do not add to it: the
      // rate is divided by the mean rush factor over the horizon (sampled
      // each minute).
      double burst_mean = 0;
      int64_t samples = 0;
      for (int64_t t = 0; t < horizon; t += 60 * kSecond, ++samples) burst_mean += burst(t);
      burst_mean = samples > 0 ? burst_mean / static_cast<double>(samples) : 1.0;
      // Work per ms the lab submits on average (GPU-ms at speed 1 per ms).
      const double work_rate = o.load * lab.multiplier * lab.capacity;
      const double rate = work_rate / (mean_gpus * mean_duration);  // jobs per ms
      auto at = Arrivals(
          d, rate * batch_peak * o.deadline_burst / burst_mean, horizon,
          [&](int64_t t) { return rate * BatchRhythm(t) / batch_mean * burst(t) / burst_mean; });
      for (int64_t t : at) {
        TraceJob j;
        j.submit_ms = t;
        j.group = lab.name;
        j.priority = sched::PriorityClass::kNormal;
        const int g = std::min(gpu_choices[d.Pick(gpu_weights)], lab.max_gpus);
        j.gpus = g;
        const auto eligible = nodes_with(g);
        if (g >= 2 && eligible.size() >= 2 && d.Chance(o.gang_fraction)) j.nodes = 2;
        const double u = d.Unit();
        if (j.nodes == 1 && u < 0.3) {
          int64_t mem = 0;
          for (size_t i : eligible) mem = std::max(mem, trace.nodes[i].gpu_memory_mib);
          j.gpu_memory_mib = mem;
        } else if (j.nodes == 1 && u < 0.4) {
          const size_t pick =
              eligible[static_cast<size_t>(d.Range(0, static_cast<int64_t>(eligible.size()) - 1))];
          j.gpu_models = {trace.nodes[pick].gpu_model};
        }
        j.cpu_milli = int64_t{g} * 4 * 1000;
        j.memory_mib = int64_t{g} * 32 * kGiB;
        j.duration_ms = ClampDuration(d.LogNormal(median_ms, o.batch_sigma), batch_min, batch_max);
        if (d.Chance(o.checkpoint_fraction)) {
          const int64_t intervals[] = {15 * kMinute, 30 * kMinute, kHour};
          j.checkpoint_interval_ms = intervals[d.Pick({0.25, 0.5, 0.25})];
        }
        if (d.Chance(0.7)) {
          const double bound = static_cast<double>(j.duration_ms) / min_speed * d.Uniform(1.2, 2.0);
          j.runtime_limit_ms = RoundUp(static_cast<int64_t>(bound), kHour);
        }
        jobs.push_back({t, std::move(j)});
      }
    }

    // Interactive sessions.
    {
      Draw d(o.seed, LabStream(l, kInteractive));
      const double per_day = o.interactive_per_day * std::sqrt(lab.multiplier);
      const double rate = per_day / (session_day * kHour);  // per ms at rhythm 1
      auto at = Arrivals(d, rate, horizon, [&](int64_t t) { return rate * SessionRhythm(t); });
      for (int64_t t : at) {
        TraceJob j;
        j.submit_ms = t;
        j.group = lab.name;
        j.priority = sched::PriorityClass::kInteractive;
        if (d.Chance(0.4)) {
          j.gpu_milli = 500;
          j.gpu_memory_mib = 12 * kGiB;
        } else {
          j.gpus = 1;
        }
        j.cpu_milli = 4000;
        j.memory_mib = 16 * kGiB;
        j.duration_ms = ClampDuration(d.LogNormal(40.0 * kMinute, 0.9), 5 * kMinute, 8 * kHour);
        j.runtime_limit_ms = RoundUp(j.duration_ms, kHour);
        jobs.push_back({t, std::move(j)});
      }
    }

    // Opportunistic sweeps.
    {
      Draw d(o.seed, LabStream(l, kSweeps));
      const double rate = o.sweeps_per_week * lab.multiplier / (7.0 * kDay);
      auto at = Arrivals(d, rate * batch_peak, horizon,
                         [&](int64_t t) { return rate * BatchRhythm(t) / batch_mean; });
      for (int64_t t : at) {
        const int64_t count = d.Range(8, 40);
        const bool share = d.Chance(0.3);
        for (int64_t k = 0; k < count; ++k) {
          TraceJob j;
          j.submit_ms = t + k * kSecond;
          j.group = lab.name;
          j.priority = sched::PriorityClass::kOpportunistic;
          if (share) {
            j.gpu_milli = 250;
            j.gpu_memory_mib = 4 * kGiB;
          } else {
            j.gpus = 1;
          }
          j.cpu_milli = 2000;
          j.memory_mib = 8 * kGiB;
          j.duration_ms = ClampDuration(d.LogNormal(20.0 * kMinute, 0.6), 2 * kMinute, 6 * kHour);
          j.checkpoint_interval_ms = 10 * kMinute;
          jobs.push_back({j.submit_ms, std::move(j)});
        }
      }
    }
  }

  std::stable_sort(jobs.begin(), jobs.end(), [](const PendingJob& a, const PendingJob& b) {
    return a.submit_ms < b.submit_ms;
  });
  int64_t id = 0;
  for (auto& p : jobs) {
    p.job.id = ++id;
    trace.jobs.push_back(std::move(p.job));
  }

  // Providers leaving and returning.
  if (o.leave_per_node_day > 0) {
    const double leave_mean = kDay / o.leave_per_node_day;
    for (size_t i = 0; i < trace.nodes.size(); ++i) {
      Draw d(o.seed, NodeStream(i));
      double t = d.Exp(leave_mean);
      int64_t back = -kSecond;  // the last return
      while (t < static_cast<double>(horizon)) {
        const int64_t leave = std::max(back + kSecond, static_cast<int64_t>(t) / kSecond * kSecond);
        const int64_t away = std::max<int64_t>(
            5 * kMinute, static_cast<int64_t>(d.Exp(o.away_hours * kHour)) / kSecond * kSecond);
        trace.events.push_back({NodeEventKind::kLeave, trace.nodes[i].name, leave});
        trace.events.push_back({NodeEventKind::kReturn, trace.nodes[i].name, leave + away});
        back = leave + away;
        t = static_cast<double>(back) + d.Exp(leave_mean);
      }
    }
    std::stable_sort(
        trace.events.begin(), trace.events.end(),
        [](const TraceNodeEvent& a, const TraceNodeEvent& b) { return a.at_ms < b.at_ms; });
  }
  return trace;
}

}  // namespace gpupool::sim
