// TelemetryApi: the pool's telemetry history, recorded without Prometheus
// and served to the dashboard (docs/api.md#telemetry).
//
// Recording: every `sample_ms` (the agents' heartbeat period) the server
// reads each connected node's last heartbeat (Pool::ListNodes) and the
// queue's counts, and feeds one reading per GPU and one of the pool to a
// telemetry::Downsampler (10 s buckets for a day, 5 min for 30 days by
// default). Buckets that have closed are written to the history store
// (store/history_store.h: DATA_DIR/telemetry.db, its own SQLite file,
// bounded in size) on a worker thread; once a minute the store is pruned.
// A server restart loses the buckets still open (at most one step of each
// tier); the history written stays.
//
// Serving (all on the worker thread; the store is used by that thread
// only):
//   GET /v1/nodes/{name}/telemetry?since=&until=&step=   (read the pool)
//   GET /v1/pool/telemetry?since=&until=&step=           (read the pool)
//   GET /v1/jobs/{id}/telemetry                          (read this job)
// `since` and `until` are milliseconds since the epoch or a duration back
// from now ("24h"); by default the last hour until now. `step` is a
// duration; by default the range in at most 500 points. A job's
// telemetry is its attempts' GPUs (every rank's) over each attempt's time,
// and for an attempt that holds a GPU share, what the share's own processes
// held (its series under telemetry::ShareSeriesKey, recorded from the
// shares its agent reports, which the pool accepts only for attempts that
// hold that GPU on that node: a hostile agent cannot write another job's).
//
// What a hostile user cannot do: read a job's telemetry they may not read
// (404, as for the job), or make the server read unbounded history (at
// most 10,000 points per series; the store refuses more and says how to
// ask for fewer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "net/event_loop.h"
#include "server/api_module.h"
#include "server/pool.h"
#include "server/worker_pool.h"
#include "store/history_store.h"
#include "telemetry/downsample.h"

namespace gpupool::server {

struct TelemetryOptions {
  int64_t sample_ms = 5000;  // a reading this often
  std::vector<telemetry::Tier> tiers = telemetry::DefaultTiers();
  int64_t prune_every_ms = 60'000;  // what the store's Prune asks
};

// "10s:1d,5m:30d" -> tiers, finest first. InvalidArgument says what is wrong:
// a step or keep that is not a duration, a step that does not divide the
// next tier's, a keep shorter than its step.
Result<std::vector<telemetry::Tier>> ParseTiers(std::string_view text);

class TelemetryApi final : public ApiModule {
 public:
  // `store` must outlive this; it is used from this module's worker thread only.
  TelemetryApi(net::EventLoop& loop, Pool& pool, const Clock& clock, HistoryStore& store,
               TelemetryOptions options);
  ~TelemetryApi() override;

  // Starts the sampling timer (on the loop).
  void Start();
  // One reading of every connected GPU and of the pool now, and the write
  // of the buckets that closed (also what the timer does).
  void Sample();

  void AddRoutes(ApiRoutes& routes) override;

 private:
  void NodeHistory(const net::HttpRequest& req, const std::string& node, Respond respond);
  void PoolHistory(const net::HttpRequest& req, Respond respond);
  void JobHistory(const Principal& who, int64_t job, Respond respond);

  net::EventLoop& loop_;
  Pool& pool_;
  const Clock& clock_;
  HistoryStore& store_;
  TelemetryOptions options_;
  telemetry::Downsampler downsampler_;
  int64_t last_prune_ms_ = 0;
  net::EventLoop::TimerId timer_{};
  bool started_ = false;
  // Last member: its thread is joined before the rest goes.
  WorkerPool worker_{1};
};

}  // namespace gpupool::server
