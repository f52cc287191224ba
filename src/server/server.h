// RunServer: wires the store, auth, pool, API and agent hub onto one event
// loop and serves until SIGINT or SIGTERM. Used by `gpupool server` and
// `gpupool dev`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/accounting_service.h"
#include "server/api.h"
#include "server/login_throttle.h"
#include "server/pool.h"
#include "server/storage_quotas.h"

namespace gpupool::server {

struct ServerOptions {
  std::string data_dir;                   // created if missing (mode 0700)
  std::string listen = "127.0.0.1:8470";  // HOST:PORT; port 0 picks a free one
  PoolOptions pool;
  int64_t schedule_interval_ms = 2000;  // a pass at least this often
  bool fsync = false;                   // flush every commit and upload to disk (power-loss safe)
  // Where the pool's state lives: empty = SQLite in DATA_DIR/state.db; a
  // postgres:// or postgresql:// URL = that PostgreSQL database
  // (store/pg_store.h; docs/operator-guide.md#postgresql).
  std::string store_url;
  // On PostgreSQL: how long a leader's lease lasts (renewed every third of
  // it); a standby takes over within about this long of the leader's death.
  int64_t leader_lease_ms = 6000;
  // Where checkpoints and job inputs are kept: empty = DATA_DIR/blobs.
  // Several servers of one pool name the same directory, one every server
  // reaches (NFS; docs/operator-guide.md#postgresql).
  std::string blob_dir;
  // YAML file with fair-share groups, quotas and preemption settings
  // (server/scheduler_config.h); empty = the defaults. Replaces pool.scheduler.
  std::string scheduler_config;
  // Blob garbage collection (docs/operator-guide.md): unreachable blobs
  // younger than the grace are kept; a collection runs this often.
  // (Checkpoints kept per job: pool.checkpoint_keep.)
  int64_t blob_gc_grace_ms = 3'600'000;
  int64_t blob_gc_interval_ms = 3'600'000;

  // TLS (docs/operator-guide.md#tls). On by default with the pool's own CA
  // (DATA_DIR/tls); `insecure` serves plain HTTP (development only).
  bool insecure = false;
  std::string tls_cert_file, tls_key_file;  // the operator's own certificate instead
  std::vector<std::string> tls_sans;        // more names for the server certificate
  // Agents must present the client certificate issued at enrollment.
  bool agent_mtls = true;
  ApiOptions api;  // rate limits, reverse-proxy single sign-on

  // The server's own limits (docs/operator-guide.md#limits). Pending jobs
  // per user: pool.max_pending_jobs_per_user.
  size_t max_request_body = 16 << 20;  // --max-request-body (at least kMinRequestBody)
  LoginLimits login_limits;            // --login-failures-per-address, -per-user
  // --user-storage-quota, --group-storage-quota (the upload window is the
  // blob GC grace).
  StorageQuotasOptions storage;
  // Money (server/accounting_service.h): --ledger-period, --lending-credit,
  // --accrual-interval, --lending-fair-share.
  AccountingOptions accounting;
  // The web dashboard's files, served under /ui (server/static_files.h);
  // empty = none.
  std::string web_dir;
  // HOST:PORT of a second, plain-HTTP listener that serves only GET
  // /metrics, without a token (server/metrics_api.h); empty = none.
  std::string metrics_listen;
  // Interactive sessions' own origin (server/session_gateway.h): HOST:PORT
  // of the listener that serves only their sign-in links and Jupyter
  // proxies; empty = --listen's host with its port + 1 (0 with port 0).
  std::string sessions_listen;
  // The URL browsers reach that listener at, when it is not the host they
  // name the server by with the listener's port (a reverse proxy, a name of
  // its own); empty = that.
  std::string sessions_url;
  // Telemetry history (server/telemetry_api.h) in DATA_DIR/telemetry.db:
  // "STEP:KEEP,..." tiers (--telemetry-tiers, default 10s:1d,5m:30d) and
  // the file's bound (--telemetry-max-size).
  std::string telemetry_tiers = "10s:1d,5m:30d";
  int64_t telemetry_max_bytes = 1LL << 30;
};

// Chunk uploads send up to 8 MiB of records in one request.
inline constexpr size_t kMinRequestBody = 9 << 20;

// Returns the process exit code.
int RunServer(const ServerOptions& options);

}  // namespace gpupool::server
