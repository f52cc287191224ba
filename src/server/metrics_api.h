// MetricsApi: the server's Prometheus metrics (docs/operator-guide.md#metrics).
//
// GET /metrics answers in Prometheus' text format to a token that may
// "read the metrics" (server/authz.h: any user's token with the `metrics`
// scope; a token with `*` has it). `gpupool server --metrics-listen
// HOST:PORT` serves the same text without a token on a second, plain-HTTP
// address, for a scraper on a network the operator trusts; nothing else is
// served there.
//
// What it shows: the pool at the moment of the scrape (jobs by state,
// class and group; the queue; nodes by status; agents connected; every
// GPU's last telemetry beside what the pool holds on it; the blob store's
// size as of its last garbage collection), what the server counted since
// it started (metrics/server_metrics.h: API requests, scheduling passes,
// queue waits, checkpoints, migrations, reclaims; and jobs finished), and
// the process (metrics/process_families.h).
//
// Bounded labels: `group` is a lab (a group in the store), a group of the
// scheduler config or "default"; any other group a job names (a user may
// write anything there) is counted as "other". Node names and GPU models
// come from agents and are escaped by the text format.
//
// Single-threaded: the event loop (Pool and BlobApi are read there).
#pragma once

#include <set>
#include <string>

#include "common/clock.h"
#include "metrics/pool_families.h"
#include "metrics/server_metrics.h"
#include "net/http.h"
#include "server/api_module.h"
#include "server/auth.h"
#include "server/blob_api.h"
#include "server/pool.h"

namespace gpupool::server {

class MetricsApi final : public ApiModule {
 public:
  // `blobs` may be null (no blob store size then).
  MetricsApi(Pool& pool, Auth& auth, const Clock& clock, metrics::ServerMetrics& events,
             const BlobApi* blobs);

  void AddRoutes(ApiRoutes& routes) override;

  // The whole exposition now: 200 with the text, or 500 naming what could
  // not be read.
  net::HttpResponse Scrape();
  // What the pool counted in a committed transaction (PoolHooks::counted).
  void Counted(const PoolCounts& counts);

 private:
  Result<metrics::PoolSample> Sample();
  // The groups a label may name (see above).
  Result<std::set<std::string>> KnownGroups();

  Pool& pool_;
  Auth& auth_;
  const Clock& clock_;
  metrics::ServerMetrics& events_;
  const BlobApi* blobs_;
};

}  // namespace gpupool::server
