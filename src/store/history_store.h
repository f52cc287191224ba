// HistoryStore: the server's telemetry history (GPU and pool points of
// telemetry/downsample.h, per tier) in a SQLite database of its own,
// DATA_DIR/telemetry.db, apart from state.db: backups of the state stay
// small, and losing this file costs only history.
//
// Contract:
// - Open() creates the file and its parent directory if missing (WAL mode,
//   synchronous=NORMAL, or FULL with HistoryOptions::fsync; incremental
//   auto-vacuum). It checks the file (PRAGMA quick_check) and, rather than
//   refusing to start over history, moves a damaged file, one that is not a
//   database, or one written by a newer schema aside to
//   "<path>.damaged-<ms>" (with its -wal and -shm) and creates a fresh one;
//   warning() then says so for the caller to log. A file written with other
//   tiers is accepted: the points of tiers no longer configured are
//   deleted, and warning() says how many.
// - Tables: gpu_points (tier, node, gpu, t_ms) and pool_points (tier, t_ms),
//   one row per point, NULL for NaN; `tier` holds the tier's step in ms, so
//   a tier's rows keep their meaning when other tiers are added or removed.
//   meta holds the tiers written with, the newest time seen, and per tier
//   the time before which its points are missing though its keep reaches
//   further (cut by the size bound, or the tier added by a change of tiers).
// - Write() stores a Flush's points in one transaction (a point already
//   stored is replaced). A bucket of a tier index the options do not have,
//   or whose time is not a multiple of its tier's step (a Downsampler made
//   with other tiers), is InvalidArgument and nothing is written.
// - Prune(now) deletes each tier's points older than now - keep; then, while
//   Bytes() is over max_bytes, the oldest points of the finest tier (then of
//   the next) in batches of about an eighth of the tier's span; then returns
//   the freed pages to the file system (incremental vacuum and a WAL
//   checkpoint), so the file stays near max_bytes. Call it every minute or
//   so: cost is proportional to what it deletes, plus a few index probes
//   per GPU.
// - Gpus() and Pool() read [since_ms, until_ms) of one tier: the finest tier
//   whose data reach back to since_ms (its keep, counted back from the later
//   of until_ms and the newest time the store has seen, and none missing
//   after since_ms, see meta), or else the coarsest tier. Points are
//   resampled to step_ms when it is coarser than the tier's step (step_ms
//   rounded up to a multiple of it; buckets aligned to the epoch); the
//   series' step_ms is the step used. (A tier finer than step_ms needs costs
//   more rows read but gives the same means and maxima, a step nearer the
//   one asked, and the latest minutes, which a coarser tier has not yet
//   been given.) Bad arguments are InvalidArgument naming them: since_ms
//   < 0 or >= until_ms, step_ms <= 0, an empty node, a negative GPU index,
//   or more than kHistoryMaxPoints points per series.
//   Gpus() with an empty list returns each GPU of the node that has a point
//   in the range; with a list, one series per GPU listed (sorted, each once),
//   empty when it has no points.
// - Errors: SQLite failures are Internal (Unavailable when busy), damage met
//   after Open is DataLoss.
//
// Threading: one thread at a time (the server's telemetry worker): the
// connection is opened without SQLite's mutex and holds a statement cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "telemetry/downsample.h"
#include "telemetry/points.h"

namespace gpupool {

// The most points a query returns per series.
inline constexpr int64_t kHistoryMaxPoints = 10'000;

struct HistoryOptions {
  std::vector<telemetry::Tier> tiers = telemetry::DefaultTiers();
  // The bound on Bytes(); the finest points go first.
  int64_t max_bytes = 1LL << 30;
  // fsync the WAL at every commit (synchronous=FULL): history is rarely
  // worth it.
  bool fsync = false;
};

struct GpuSeries {
  std::string node;
  int32_t gpu = 0;
  int64_t step_ms = 0;  // the step of the points (see Gpus())
  std::vector<telemetry::GpuPoint> points;
};

struct PoolSeries {
  int64_t step_ms = 0;
  std::vector<telemetry::PoolPoint> points;
};

class HistoryStore {
 public:
  static Result<std::unique_ptr<HistoryStore>> Open(const std::string& path,
                                                    HistoryOptions options);
  ~HistoryStore();
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // What Open had to do that the operator should hear of (a damaged file
  // moved aside, points of old tiers deleted); "" when nothing.
  const std::string& warning() const;

  Status Write(const telemetry::Downsampler::Flushed& flushed);
  Status Prune(int64_t now_ms);

  Result<std::vector<GpuSeries>> Gpus(const std::string& node, const std::vector<int32_t>& gpus,
                                      int64_t since_ms, int64_t until_ms, int64_t step_ms);
  Result<PoolSeries> Pool(int64_t since_ms, int64_t until_ms, int64_t step_ms);

  // The database's size in use: (page_count - freelist_count) * page_size.
  Result<int64_t> Bytes();

 private:
  struct Impl;
  explicit HistoryStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool
