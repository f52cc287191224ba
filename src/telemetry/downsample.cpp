#include "telemetry/downsample.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <tuple>

namespace gpupool::telemetry {
namespace {

double MeanOf(double total, int32_t n) { return n > 0 ? total / n : kNaN; }

// max() that treats NaN as "nothing known yet".
double MaxKnown(double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return std::max(a, b);
}

// A sample-weighted mean over points; a point whose value is NaN adds nothing.
struct WeightedMean {
  double total = 0;
  double weight = 0;
  void Add(double v, int32_t samples) {
    if (std::isnan(v)) return;
    // A stored point has at least one sample; count one if it claims none.
    double w = samples > 0 ? samples : 1;
    total += v * w;
    weight += w;
  }
  double Get() const { return weight > 0 ? total / weight : kNaN; }
};

}  // namespace

int64_t BucketStart(int64_t t_ms, int64_t step_ms) {
  int64_t r = t_ms % step_ms;
  if (r < 0) r += step_ms;  // C++ rounds toward zero; buckets are floor-aligned
  return t_ms - r;
}

Status ValidateTiers(const std::vector<Tier>& tiers) {
  if (tiers.empty()) return Status::InvalidArgument("tiers: at least one tier is needed");
  for (size_t i = 0; i < tiers.size(); ++i) {
    const Tier& t = tiers[i];
    std::string where = "tiers[" + std::to_string(i) + "]";
    if (t.step_ms <= 0) {
      return Status::InvalidArgument(where + ".step_ms: must be positive (is " +
                                     std::to_string(t.step_ms) + ")");
    }
    if (t.keep_ms <= 0) {
      return Status::InvalidArgument(where + ".keep_ms: must be positive (is " +
                                     std::to_string(t.keep_ms) + ")");
    }
    if (i > 0 && t.step_ms <= tiers[i - 1].step_ms) {
      return Status::InvalidArgument(where +
                                     ".step_ms: tiers must go from the finest step to "
                                     "the coarsest, each step larger than the one before");
    }
  }
  return Status::Ok();
}

Downsampler::Downsampler(std::vector<Tier> tiers)
    : tiers_(std::move(tiers)), state_(tiers_.size()) {}

void Downsampler::AddGpu(int64_t t_ms, const GpuReading& r) {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    TierState& st = state_[i];
    if (t_ms < st.closed_before) {
      ++dropped_;
      continue;
    }
    const int64_t start = BucketStart(t_ms, tiers_[i].step_ms);
    auto [it, added] = st.gpus.try_emplace(GpuKey(r.node, r.gpu));
    GpuAcc& acc = it->second;
    if (added) {
      acc.start = start;
    } else if (start < acc.start) {
      // Its bucket was finished by a later reading and may already be in
      // `finished_gpus`: adding to it would write a second, partial point.
      ++dropped_;
      continue;
    } else if (start > acc.start) {
      st.finished_gpus.push_back({static_cast<int>(i), r.node, r.gpu, ToPoint(acc)});
      acc = GpuAcc{};
      acc.start = start;
    }
    ++acc.samples;
    if (r.utilization_percent >= 0) {
      double u = r.utilization_percent / 100.0;
      acc.util.total += u;
      ++acc.util.n;
      acc.util_max = MaxKnown(acc.util_max, u);
    }
    if (r.memory_used_mib >= 0) {
      double m = static_cast<double>(r.memory_used_mib);
      acc.mem.total += m;
      ++acc.mem.n;
      acc.mem_max = MaxKnown(acc.mem_max, m);
    }
    if (r.memory_total_mib > 0) {
      acc.mem_total.total += static_cast<double>(r.memory_total_mib);
      ++acc.mem_total.n;
    }
    if (r.temperature_c >= 0) {
      acc.temp.total += r.temperature_c;
      ++acc.temp.n;
    }
    if (r.power_mw >= 0) {
      acc.power.total += static_cast<double>(r.power_mw) / 1000.0;
      ++acc.power.n;
    }
    if (r.energy_mj >= 0 && (std::isnan(acc.energy_j) || t_ms >= acc.energy_t)) {
      acc.energy_j = static_cast<double>(r.energy_mj) / 1000.0;
      acc.energy_t = t_ms;
    }
    acc.alloc.total += std::max(r.allocated_milli, 0) / 1000.0;
    ++acc.alloc.n;
  }
}

void Downsampler::AddPool(int64_t t_ms, const PoolReading& r) {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    TierState& st = state_[i];
    if (t_ms < st.closed_before) {
      ++dropped_;
      continue;
    }
    const int64_t start = BucketStart(t_ms, tiers_[i].step_ms);
    if (!st.pool) {
      st.pool.emplace();
      st.pool->start = start;
    } else if (start < st.pool->start) {
      ++dropped_;  // as in AddGpu
      continue;
    } else if (start > st.pool->start) {
      st.finished_pool.push_back({static_cast<int>(i), ToPoint(*st.pool)});
      *st.pool = PoolAcc{};
      st.pool->start = start;
    }
    PoolAcc& acc = *st.pool;
    ++acc.samples;
    auto add = [](Sum& s, double v) {
      s.total += v;
      ++s.n;
    };
    add(acc.gpus, static_cast<double>(r.gpus));
    add(acc.reporting, static_cast<double>(r.gpus_reporting));
    add(acc.allocated, r.allocated_gpus);
    add(acc.util, r.utilization_sum);
    add(acc.power, r.power_w);
    add(acc.running, static_cast<double>(r.jobs_running));
    add(acc.pending, static_cast<double>(r.jobs_pending));
    add(acc.nodes, static_cast<double>(r.nodes_connected));
  }
}

Downsampler::Flushed Downsampler::Flush(int64_t now_ms) {
  Flushed out;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    TierState& st = state_[i];
    const int64_t step = tiers_[i].step_ms;
    const int tier = static_cast<int>(i);

    // Finished buckets normally all ended, but a reading stamped ahead of
    // `now` may have finished one that has not: it waits.
    auto gpu_due = [&](const GpuBucket& b) { return b.point.t_ms + step <= now_ms; };
    auto split = std::stable_partition(st.finished_gpus.begin(), st.finished_gpus.end(), gpu_due);
    std::move(st.finished_gpus.begin(), split, std::back_inserter(out.gpus));
    st.finished_gpus.erase(st.finished_gpus.begin(), split);
    for (auto it = st.gpus.begin(); it != st.gpus.end();) {
      if (it->second.start + step > now_ms) {
        ++it;
        continue;
      }
      out.gpus.push_back({tier, it->first.first, it->first.second, ToPoint(it->second)});
      it = st.gpus.erase(it);
    }

    auto pool_due = [&](const PoolBucket& b) { return b.point.t_ms + step <= now_ms; };
    auto psplit = std::stable_partition(st.finished_pool.begin(), st.finished_pool.end(), pool_due);
    std::move(st.finished_pool.begin(), psplit, std::back_inserter(out.pool));
    st.finished_pool.erase(st.finished_pool.begin(), psplit);
    if (st.pool && st.pool->start + step <= now_ms) {
      out.pool.push_back({tier, ToPoint(*st.pool)});
      st.pool.reset();
    }

    st.closed_before = std::max(st.closed_before, BucketStart(now_ms, step));
  }
  std::sort(out.gpus.begin(), out.gpus.end(), [](const GpuBucket& a, const GpuBucket& b) {
    return std::tie(a.tier, a.node, a.gpu, a.point.t_ms) <
           std::tie(b.tier, b.node, b.gpu, b.point.t_ms);
  });
  std::sort(out.pool.begin(), out.pool.end(), [](const PoolBucket& a, const PoolBucket& b) {
    return std::tie(a.tier, a.point.t_ms) < std::tie(b.tier, b.point.t_ms);
  });
  return out;
}

size_t Downsampler::open_buckets() const {
  size_t n = 0;
  for (const TierState& st : state_) n += st.gpus.size() + (st.pool ? 1 : 0);
  return n;
}

size_t Downsampler::finished_buckets() const {
  size_t n = 0;
  for (const TierState& st : state_) n += st.finished_gpus.size() + st.finished_pool.size();
  return n;
}

GpuPoint Downsampler::ToPoint(const GpuAcc& a) {
  GpuPoint p;
  p.t_ms = a.start;
  p.samples = a.samples;
  p.utilization = MeanOf(a.util.total, a.util.n);
  p.utilization_max = a.util_max;
  p.memory_used_mib = MeanOf(a.mem.total, a.mem.n);
  p.memory_used_max_mib = a.mem_max;
  p.memory_total_mib = MeanOf(a.mem_total.total, a.mem_total.n);
  p.temperature_c = MeanOf(a.temp.total, a.temp.n);
  p.power_w = MeanOf(a.power.total, a.power.n);
  p.energy_j = a.energy_j;
  p.allocated = MeanOf(a.alloc.total, a.alloc.n);
  return p;
}

PoolPoint Downsampler::ToPoint(const PoolAcc& a) {
  PoolPoint p;
  p.t_ms = a.start;
  p.samples = a.samples;
  p.gpus = MeanOf(a.gpus.total, a.gpus.n);
  p.gpus_reporting = MeanOf(a.reporting.total, a.reporting.n);
  p.allocated_gpus = MeanOf(a.allocated.total, a.allocated.n);
  p.utilization_sum = MeanOf(a.util.total, a.util.n);
  p.power_w = MeanOf(a.power.total, a.power.n);
  p.jobs_running = MeanOf(a.running.total, a.running.n);
  p.jobs_pending = MeanOf(a.pending.total, a.pending.n);
  p.nodes_connected = MeanOf(a.nodes.total, a.nodes.n);
  return p;
}

std::vector<GpuPoint> Resample(const std::vector<GpuPoint>& points, int64_t step_ms) {
  if (step_ms <= 0) return points;
  std::vector<GpuPoint> out;
  size_t i = 0;
  while (i < points.size()) {
    const int64_t start = BucketStart(points[i].t_ms, step_ms);
    GpuPoint m;
    m.t_ms = start;
    WeightedMean util, mem, total, temp, power, alloc;
    for (; i < points.size() && BucketStart(points[i].t_ms, step_ms) == start; ++i) {
      const GpuPoint& p = points[i];
      m.samples += p.samples;
      util.Add(p.utilization, p.samples);
      mem.Add(p.memory_used_mib, p.samples);
      total.Add(p.memory_total_mib, p.samples);
      temp.Add(p.temperature_c, p.samples);
      power.Add(p.power_w, p.samples);
      alloc.Add(p.allocated, p.samples);
      m.utilization_max = MaxKnown(m.utilization_max, p.utilization_max);
      m.memory_used_max_mib = MaxKnown(m.memory_used_max_mib, p.memory_used_max_mib);
      if (!std::isnan(p.energy_j)) m.energy_j = p.energy_j;
    }
    m.utilization = util.Get();
    m.memory_used_mib = mem.Get();
    m.memory_total_mib = total.Get();
    m.temperature_c = temp.Get();
    m.power_w = power.Get();
    m.allocated = alloc.Get();
    out.push_back(m);
  }
  return out;
}

std::vector<PoolPoint> Resample(const std::vector<PoolPoint>& points, int64_t step_ms) {
  if (step_ms <= 0) return points;
  std::vector<PoolPoint> out;
  size_t i = 0;
  while (i < points.size()) {
    const int64_t start = BucketStart(points[i].t_ms, step_ms);
    PoolPoint m;
    m.t_ms = start;
    WeightedMean gpus, reporting, allocated, util, power, running, pending, nodes;
    for (; i < points.size() && BucketStart(points[i].t_ms, step_ms) == start; ++i) {
      const PoolPoint& p = points[i];
      m.samples += p.samples;
      gpus.Add(p.gpus, p.samples);
      reporting.Add(p.gpus_reporting, p.samples);
      allocated.Add(p.allocated_gpus, p.samples);
      util.Add(p.utilization_sum, p.samples);
      power.Add(p.power_w, p.samples);
      running.Add(p.jobs_running, p.samples);
      pending.Add(p.jobs_pending, p.samples);
      nodes.Add(p.nodes_connected, p.samples);
    }
    m.gpus = gpus.Get();
    m.gpus_reporting = reporting.Get();
    m.allocated_gpus = allocated.Get();
    m.utilization_sum = util.Get();
    m.power_w = power.Get();
    m.jobs_running = running.Get();
    m.jobs_pending = pending.Get();
    m.nodes_connected = nodes.Get();
    out.push_back(m);
  }
  return out;
}

}  // namespace gpupool::telemetry
