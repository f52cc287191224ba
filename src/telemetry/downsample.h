// Downsampler: turns readings taken every few seconds into one point per
// bucket of each tier (telemetry/points.h), so the history keeps a bounded
// number of points however often the server samples. Resample merges
// stored points into coarser buckets, to answer a query at a step coarser
// than the tier it reads.
//
// Contract:
// - Tiers are valid when ValidateTiers accepts them: at least one, each
//   step and keep positive, steps strictly increasing (finest first). A
//   Downsampler of invalid tiers is a programmer error.
// - Buckets are aligned to the epoch: a reading at t goes into the bucket
//   [t - t mod step, t - t mod step + step) of every tier.
// - A point's means ignore unknown values (-1; 0 for memory_total_mib), its
//   maxima are those of the known values, its energy is the known reading
//   with the latest t; `samples` counts every reading of the bucket.
// - Flush(now) returns every bucket whose end is <= now and forgets it.
//   After that, a reading falling into a bucket that ended by that `now`
//   is dropped (counted in dropped()): a flushed bucket is never re-opened,
//   since writing it again would replace the stored point with a partial one.
//   A reading older than its GPU's open bucket is dropped too.
// - Memory: at most one open bucket per tier per GPU (and one for the pool).
//   A reading for a later bucket finishes the open one, which waits for the
//   next Flush; flushing every finest step keeps that list to about one
//   bucket per GPU. A GPU that stops reporting is forgotten once its last
//   bucket is flushed.
// - Deterministic: time is passed in; Flush's output is sorted by (tier,
//   node, gpu, t) and (tier, t).
//
// Threading: none; one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "telemetry/points.h"

namespace gpupool::telemetry {

// InvalidArgument naming the first bad tier.
Status ValidateTiers(const std::vector<Tier>& tiers);

// One GPU's point in tier `tier` (an index into the Downsampler's tiers).
struct GpuBucket {
  int tier = 0;
  std::string node;
  int32_t gpu = 0;
  GpuPoint point;
};

struct PoolBucket {
  int tier = 0;
  PoolPoint point;
};

class Downsampler {
 public:
  explicit Downsampler(std::vector<Tier> tiers);

  void AddGpu(int64_t t_ms, const GpuReading& reading);
  void AddPool(int64_t t_ms, const PoolReading& reading);

  struct Flushed {
    std::vector<GpuBucket> gpus;
    std::vector<PoolBucket> pool;
    bool empty() const { return gpus.empty() && pool.empty(); }
  };
  Flushed Flush(int64_t now_ms);

  const std::vector<Tier>& tiers() const { return tiers_; }
  // Buckets still taking readings, over all tiers (GPUs and pool).
  size_t open_buckets() const;
  // Buckets finished by a later reading, waiting for Flush.
  size_t finished_buckets() const;
  // Readings dropped (once per tier) for falling into a flushed bucket.
  int64_t dropped() const { return dropped_; }

 private:
  // Running sum of the known values of one field.
  struct Sum {
    double total = 0;
    int32_t n = 0;
  };
  struct GpuAcc {
    int64_t start = 0;
    int32_t samples = 0;
    Sum util, mem, mem_total, temp, power, alloc;
    double util_max = kNaN;
    double mem_max = kNaN;
    double energy_j = kNaN;
    int64_t energy_t = 0;  // the time of energy_j's reading
  };
  struct PoolAcc {
    int64_t start = 0;
    int32_t samples = 0;
    Sum gpus, reporting, allocated, util, power, running, pending, nodes;
  };
  using GpuKey = std::pair<std::string, int32_t>;
  struct TierState {
    // Readings before this are dropped: their buckets ended by the last Flush.
    int64_t closed_before = std::numeric_limits<int64_t>::min();
    std::map<GpuKey, GpuAcc> gpus;  // the open bucket of each GPU
    std::optional<PoolAcc> pool;
    std::vector<GpuBucket> finished_gpus;
    std::vector<PoolBucket> finished_pool;
  };

  static GpuPoint ToPoint(const GpuAcc& a);
  static PoolPoint ToPoint(const PoolAcc& a);

  std::vector<Tier> tiers_;
  std::vector<TierState> state_;
  int64_t dropped_ = 0;
};

// Merges consecutive points (sorted by t) falling into the same bucket of
// `step_ms` (aligned to the epoch; a point's bucket is that of its t_ms)
// into one: sample-weighted means of the known values, the maximum of the
// maxima, the last known energy, the sum of samples. step_ms <= 0 returns
// the points unchanged.
std::vector<GpuPoint> Resample(const std::vector<GpuPoint>& points, int64_t step_ms);
std::vector<PoolPoint> Resample(const std::vector<PoolPoint>& points, int64_t step_ms);

// The start of the bucket of `step_ms` holding t_ms (floor, also for t < 0).
int64_t BucketStart(int64_t t_ms, int64_t step_ms);

}  // namespace gpupool::telemetry
