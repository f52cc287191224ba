#include "server/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "common/dir_lock.h"
#include "common/files.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/version.h"
#include "net/http_server.h"
#include "net/repeating.h"
#include "server/accounting_api.h"
#include "server/agent_hub.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/backup_api.h"
#include "server/blob_api.h"
#include "server/blob_service.h"
#include "server/budget_keeper.h"
#include "server/http_errors.h"
#include "server/identity_api.h"
#include "server/metrics_api.h"
#include "server/node_control_api.h"
#include "server/pool_summary.h"
#include "server/quota_api.h"
#include "server/scheduler_config.h"
#include "server/selftest_api.h"
#include "server/server_tls.h"
#include "server/servers_api.h"
#include "server/session_gateway.h"
#include "server/standby.h"
#include "server/static_files.h"
#include "server/telemetry_api.h"
#include "store/history_store.h"
#include "store/pg_leader.h"
#include "store/pg_store.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

// Log retention runs a minute after the start, then this often (it is cheap
// when there is nothing to remove; `gpupool admin gc` runs it at once).
constexpr int64_t kLogGcFirstMs = 60'000;
constexpr int64_t kLogGcIntervalMs = 10 * 60'000;

using HostPort = std::pair<std::string, uint16_t>;

// `listen` as a host and a port; errors name `flag`.
Result<HostPort> SplitHostPort(const std::string& listen, const std::string& flag) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument(flag + ": expected HOST:PORT such as 127.0.0.1:8470");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
  }
  if (port < 0 || port > 65535)
    return Status::InvalidArgument(flag + ": invalid port in \"" + listen + "\"");
  return std::make_pair(host, static_cast<uint16_t>(port));
}

// What a listener on `host` and `port` is reached at: scheme://host:port,
// an IPv6 address in brackets.

// Where the server listens: the API (--listen), the metrics (--metrics-listen,
// if given) and interactive sessions (--sessions-listen; by default the
// API's host and its port + 1, or any free port with port 0).
struct ListenAt {
  HostPort api;
  std::optional<HostPort> metrics;
  HostPort sessions;
};

Result<ListenAt> ListenAddresses(const ServerOptions& options) {
  ListenAt at;
  GP_ASSIGN_OR_RETURN(at.api, SplitHostPort(options.listen, "--listen"));
  if (!options.metrics_listen.empty()) {
    GP_ASSIGN_OR_RETURN(at.metrics, SplitHostPort(options.metrics_listen, "--metrics-listen"));
  }
  if (!options.sessions_listen.empty()) {
    GP_ASSIGN_OR_RETURN(at.sessions, SplitHostPort(options.sessions_listen, "--sessions-listen"));
  } else if (at.api.second == 65535) {
    return Status::InvalidArgument(
        "--listen port 65535 leaves no next port for interactive sessions; set "
        "--sessions-listen HOST:PORT");
  } else {
    at.sessions = {at.api.first, at.api.second == 0 ? 0 : at.api.second + 1};
  }
  if (!options.sessions_url.empty())
    GP_RETURN_IF_ERROR(SessionGateway::CheckSessionsUrl(options.sessions_url));
  return at;
}

// Whether --store names PostgreSQL; InvalidArgument for a scheme that is
// neither that nor empty (SQLite).
Result<bool> IsPostgresStore(const std::string& url) {
  if (url.empty()) return false;
  if (url.starts_with("postgres://") || url.starts_with("postgresql://")) return true;
  return Status::InvalidArgument("--store: " + PgStore::Redacted(url) +
                                 ": expected a postgres:// or postgresql:// URL (or none, for "
                                 "SQLite in the data directory)");
}

// The state database. PostgreSQL: connected and migrated. SQLite: checked
// first (PRAGMA quick_check) and migrated; a damaged one is refused with
// how to restore it.
Result<std::unique_ptr<Store>> OpenState(const ServerOptions& options,
                                         const std::shared_ptr<std::atomic<int64_t>>& epoch) {
  GP_ASSIGN_OR_RETURN(bool postgres, IsPostgresStore(options.store_url));
  if (postgres) {
    // Fenced: every transaction checks that this server still leads.
    PgOptions pg_options;
    pg_options.fence_epoch = [epoch] { return epoch->load(); };
    GP_ASSIGN_OR_RETURN(auto pg, PgStore::Open(options.store_url, pg_options));
    return std::unique_ptr<Store>(std::move(pg));
  }
  const std::string path = options.data_dir + "/state.db";
  SqliteOptions sqlite_opts;
  sqlite_opts.fsync_every_commit = options.fsync;
  sqlite_opts.check_integrity = true;
  auto store = SqliteStore::Open(path, sqlite_opts);
  if (store.ok()) return std::unique_ptr<Store>(*std::move(store));
  if (store.status().code() != StatusCode::kDataLoss) return store.status();
  return Status::DataLoss(
      store.status().message() +
      "\nThe server will not run on a damaged database. Restore the latest backup "
      "(docs/operator-guide.md#backup-and-restore):\n  gpupool admin restore --data-dir " +
      options.data_dir +
      " BACKUP.db\n(the damaged file is kept beside it as state.db.before-restore-*), then start "
      "the server again.");
}

// The --metrics-listen address's server (none without one): GET /metrics
// and nothing else, without a token, plain HTTP.
Result<std::unique_ptr<net::HttpServer>> StartMetricsListener(net::EventLoop& loop,
                                                              const std::optional<HostPort>& addr,
                                                              MetricsApi& metrics) {
  if (!addr) return std::unique_ptr<net::HttpServer>();
  net::HttpHandlers handlers;
  handlers.on_request = [&metrics](net::HttpRequest req, net::Responder r) {
    if (req.method == "GET" && req.path == "/metrics") return r(metrics.Scrape());
    r(ErrorResponse(Status::NotFound("only GET /metrics is served on this address")));
  };
  handlers.on_upgrade = [](const net::HttpRequest&)
      -> std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> {
    return ErrorResponse(Status::NotFound("only GET /metrics is served on this address"));
  };
  net::HttpServerOptions opts;
  opts.host = addr->first;
  opts.port = addr->second;
  opts.max_body_bytes = 4096;
  GP_ASSIGN_OR_RETURN(auto server, net::HttpServer::Start(loop, opts, handlers));
  const std::string url = ApiUrl(false, addr->first, server->port()) + "/metrics";
  GP_LOG(kInfo) << "metrics on " << url;
  std::cout << "gpupool server metrics on " << url << std::endl;
  return server;
}

// The interactive sessions' own origin: their sign-in links and Jupyter
// proxies and nothing else, with the server's TLS (server/session_gateway.h).
Result<std::unique_ptr<net::HttpServer>> StartSessionsListener(net::EventLoop& loop,
                                                               const HostPort& addr,
                                                               const std::optional<ServerTls>& tls,
                                                               const ServerOptions& options,
                                                               SessionGateway& gateway) {
  const std::string& public_url = options.sessions_url;
  net::HttpServerOptions opts;
  opts.host = addr.first;
  opts.port = addr.second;
  opts.max_body_bytes = 1 << 20;  // the proxy relays bodies unread; this is for what it answers
  if (tls) opts.tls = tls->config;
  GP_ASSIGN_OR_RETURN(auto server,
                      net::HttpServer::Start(loop, opts, gateway.SessionsOriginHandlers()));
  gateway.ServeSessionsAt({.url = public_url, .tls = tls.has_value(), .port = server->port()});
  const std::string url = ApiUrl(tls.has_value(), addr.first, server->port());
  // Beside server.url: for scripts and tests that start a server on port 0.
  (void)WriteFileAtomic(options.data_dir + "/sessions.url", url + "\n");
  GP_LOG(kInfo) << "interactive sessions on " << url
                << (public_url.empty() ? "" : " (reached at " + public_url + ")");
  return server;
}

// The telemetry history: its store (DATA_DIR/telemetry.db) and the module
// that records and serves it.
struct Telemetry {
  std::unique_ptr<HistoryStore> store;
  std::unique_ptr<TelemetryApi> api;
};

Result<Telemetry> OpenTelemetry(const ServerOptions& options,
                                const std::vector<telemetry::Tier>& tiers, net::EventLoop& loop,
                                Pool& pool, const Clock& clock) {
  HistoryOptions history_options;
  history_options.tiers = tiers;
  history_options.max_bytes = options.telemetry_max_bytes;
  Telemetry t;
  GP_ASSIGN_OR_RETURN(t.store,
                      HistoryStore::Open(options.data_dir + "/telemetry.db", history_options));
  if (!t.store->warning().empty()) GP_LOG(kWarn) << "telemetry history: " << t.store->warning();
  TelemetryOptions telemetry_options;
  telemetry_options.sample_ms = options.pool.heartbeat_ms;
  telemetry_options.tiers = tiers;
  t.api = std::make_unique<TelemetryApi>(loop, pool, clock, *t.store, telemetry_options);
  return t;
}

void ReportLogRetention(const Result<LogGcStats>& stats) {
  if (!stats.ok()) {
    GP_LOG(kError) << "log retention failed: " << stats.status().ToString();
  } else if (stats->jobs_removed > 0) {
    GP_LOG(kInfo) << "log retention: removed the logs of " << stats->jobs_removed << " jobs ("
                  << stats->by_retention << " ended too long ago, " << stats->by_budget
                  << " over the budget), " << stats->bytes_removed << " bytes; kept "
                  << stats->kept.stored_bytes << " bytes of " << stats->kept.jobs << " jobs";
  }
}

// Everything RunServer needs before it starts anything, from its options,
// each checked. A failure has said why on stderr and carries the exit code
// (2: a bad option; 1: this machine refused).
struct Startup {
  int exit_code = 0;
  std::unique_ptr<StaticFiles> static_files;
  PoolOptions pool_options;
  std::optional<DirLock> lock;  // one server per data directory
  ListenAt listen;
  std::vector<telemetry::Tier> tiers;
  std::unique_ptr<Store> store;
  // On PostgreSQL: the epoch this server leads in (0 until it does).
  std::shared_ptr<std::atomic<int64_t>> epoch;
  std::optional<ServerTls> tls;
};

Startup Prepare(const ServerOptions& options) {
  Startup s;
  auto fail = [&s](int code) {
    s.exit_code = code;
    return std::move(s);
  };
  // A bad config stops the server before it touches the data directory.
  const std::string web_dir = options.web_dir.empty() ? DefaultWebDir() : options.web_dir;
  if (!web_dir.empty()) {
    auto opened = StaticFiles::Open({.dir = web_dir});
    if (!opened.ok()) {
      std::cerr << "gpupool server: " << opened.status().message() << "\n";
      return fail(2);
    }
    s.static_files = *std::move(opened);
  }
  s.pool_options = options.pool;
  if (!options.scheduler_config.empty()) {
    auto config = LoadSchedulerConfig(options.scheduler_config);
    if (!config.ok()) {
      std::cerr << "gpupool server: --scheduler-config " << config.status().message() << "\n";
      return fail(2);
    }
    s.pool_options.scheduler = *std::move(config);
    GP_LOG(kInfo) << "scheduler config " << options.scheduler_config << ": "
                  << s.pool_options.scheduler.groups.size() << " groups, half-life "
                  << s.pool_options.scheduler.half_life_ms << " ms, preemption "
                  << (s.pool_options.scheduler.preemption ? "on" : "off");
  }

  if (auto store_kind = IsPostgresStore(options.store_url); !store_kind.ok()) {
    std::cerr << "gpupool server: " << store_kind.status().message() << "\n";
    return fail(2);
  }
  auto addresses = ListenAddresses(options);
  if (!addresses.ok()) {
    std::cerr << "gpupool server: " << addresses.status().message() << "\n";
    return fail(2);
  }
  auto tiers = ParseTiers(options.telemetry_tiers);
  if (!tiers.ok()) {
    std::cerr << "gpupool server: --telemetry-tiers: " << tiers.status().message() << "\n";
    return fail(2);
  }

  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    std::cerr << "gpupool server: cannot create " << options.data_dir << ": " << ec.message()
              << "\n";
    return fail(1);
  }
  ::chmod(options.data_dir.c_str(), 0700);
  // One server per data directory: two would both schedule the same jobs.
  auto lock = DirLock::Acquire(options.data_dir, "server");
  if (!lock.ok()) {
    std::cerr << "gpupool server: " << lock.status().message() << "\n";
    return fail(1);
  }
  if (!options.store_url.empty()) s.epoch = std::make_shared<std::atomic<int64_t>>(0);
  auto store = OpenState(options, s.epoch);
  if (!store.ok()) {
    std::cerr << "gpupool server: " << store.status().message() << "\n";
    return fail(1);
  }
  if (options.insecure) {
    std::cerr << "gpupool server: WARNING: --insecure: serving plain HTTP. Tokens, job specs, "
                 "logs and checkpoints cross the network unencrypted and agents cannot check "
                 "whom they talk to. For development on one machine only.\n";
    GP_LOG(kWarn) << "--insecure: TLS is off";
  } else {
    std::vector<std::string> sans = options.tls_sans;
    const std::string& host = addresses->api.first;
    if (host != "0.0.0.0" && host != "::" && !host.empty()) sans.push_back(host);
    if (!options.store_url.empty()) {
      // Every server of the pool has its CA (an unfenced connection of its
      // own: a standby does this too).
      auto unfenced = PgStore::Open(options.store_url);
      Status shared =
          unfenced.ok() ? ShareCaThroughStore(**unfenced, options.data_dir) : unfenced.status();
      if (!shared.ok()) {
        std::cerr << "gpupool server: TLS: the pool CA: " << shared.ToString() << "\n";
        return fail(1);
      }
    }
    auto made = SetUpServerTls(options.data_dir, sans, options.tls_cert_file, options.tls_key_file);
    if (!made.ok()) {
      std::cerr << "gpupool server: TLS: " << made.status().ToString() << "\n";
      return fail(1);
    }
    s.tls = *std::move(made);
  }
  s.lock = *std::move(lock);
  s.listen = *std::move(addresses);
  s.tiers = *std::move(tiers);
  s.store = *std::move(store);
  return s;
}

// Scheduling passes on the loop, coalesced (at most one queued) and spaced:
// the next pass starts no sooner than twice the last pass's duration after
// it (at most 100 ms), so an idle pool schedules at once and a long queue
// cannot take more than about a third of the loop.
class SchedulePacer {
 public:
  SchedulePacer(net::EventLoop& loop, const Clock& clock, metrics::ServerMetrics& metrics)
      : loop_(loop), clock_(clock), metrics_(metrics) {}
  void SetPool(Pool& pool) { pool_ = &pool; }
  // PoolHooks::schedule_needed.
  void Needed() {
    if (queued_) return;
    queued_ = true;
    if (int64_t wait = next_pass_ms_ - clock_.NowMs(); wait > 0) {
      loop_.RunAfter(wait, [this] { Pass(); });
    } else {
      loop_.Post([this] { Pass(); });
    }
  }

 private:
  void Pass() {
    queued_ = false;
    auto t0 = std::chrono::steady_clock::now();
    auto placed = pool_->Schedule();
    if (!placed.ok()) GP_LOG(kError) << "scheduling pass failed: " << placed.status().ToString();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    metrics_.SchedulingPass(took.count());
    next_pass_ms_ =
        clock_.NowMs() + std::min<int64_t>(static_cast<int64_t>(2000 * took.count()), 100);
  }

  net::EventLoop& loop_;
  const Clock& clock_;
  metrics::ServerMetrics& metrics_;
  Pool* pool_ = nullptr;
  bool queued_ = false;
  int64_t next_pass_ms_ = 0;
};

// The server's periodic work on the loop: node checks (and a warning when
// the system clock was stepped), idle sessions, blob garbage collection,
// log retention and the accrual of running work's charges, each run again
// an interval after its last run ended.
class Housekeeping {
 public:
  struct Parts {
    Pool& pool;
    const SteadyWallClock& clock;
    SessionGateway& gateway;
    BlobApi& blob_api;
    LogGc& log_gc;
    AccountingService& accounting;
    BudgetKeeper& budgets;
    std::function<void()> schedule_needed;
  };
  Housekeeping(net::EventLoop& loop, const ServerOptions& options, Parts parts)
      : parts_(std::move(parts)),
        node_checks_(loop, 1000, options.schedule_interval_ms,
                     [this](const net::Repeating::Done& done) {
                       CheckNodes();
                       done();
                     }),
        idle_sessions_(loop, 1000, 1000,
                       [this](const net::Repeating::Done& done) {
                         parts_.gateway.CheckIdle();
                         done();
                       }),
        blob_gc_(loop, options.blob_gc_interval_ms, options.blob_gc_interval_ms,
                 [this](net::Repeating::Done done) {
                   parts_.blob_api.CollectGarbage([done = std::move(done)](Result<GcStats> stats) {
                     if (!stats.ok())
                       GP_LOG(kError) << "blob gc failed: " << stats.status().ToString();
                     done();
                   });
                 }),
        log_retention_(loop, kLogGcFirstMs, kLogGcIntervalMs,
                       [this](net::Repeating::Done done) {
                         parts_.log_gc.Collect([done = std::move(done)](Result<LogGcStats> stats) {
                           ReportLogRetention(stats);
                           done();
                         });
                       }),
        accrual_(loop, 0, parts_.accounting.tick_ms(), [this](const net::Repeating::Done& done) {
          if (auto posted = parts_.accounting.Tick(); !posted.ok())
            GP_LOG(kError) << "accounting: " << posted.status().ToString();
          if (Status s = parts_.budgets.Evaluate(); !s.ok())
            GP_LOG(kError) << "budgets: " << s.ToString();
          done();
        }) {}

 private:
  void CheckNodes() {
    if (Status s = parts_.pool.CheckNodes(); !s.ok())
      GP_LOG(kError) << "node check failed: " << s.ToString();
    if (int64_t skew_s = parts_.clock.SystemClockSkewMs() / 1000;
        std::abs(skew_s - reported_skew_s_) > 1) {
      reported_skew_s_ = skew_s;
      GP_LOG(kWarn) << "the system clock was stepped: it is " << skew_s
                    << " s off the server's own clock since the start; the server keeps "
                       "measuring durations on the monotonic clock and shows its own times "
                       "until it restarts";
    }
    parts_.schedule_needed();
  }

  Parts parts_;
  int64_t reported_skew_s_ = 0;
  net::Repeating node_checks_, idle_sessions_, blob_gc_, log_retention_, accrual_;
};

// SIGHUP: reads --scheduler-config again (groups, weights, guarantees, ...).
// A file that does not parse is reported and the config in force stays.
void ReloadSchedulerConfig(const ServerOptions& options, Pool& pool) {
  if (options.scheduler_config.empty()) {
    GP_LOG(kWarn) << "SIGHUP: no --scheduler-config to reload";
    return;
  }
  auto config = LoadSchedulerConfig(options.scheduler_config);
  if (!config.ok()) {
    GP_LOG(kError) << "SIGHUP: --scheduler-config " << config.status().message()
                   << "; keeping the config in force";
    return;
  }
  GP_LOG(kInfo) << "SIGHUP: scheduler config reloaded from " << options.scheduler_config << ": "
                << config->groups.size() << " groups";
  pool.SetSchedulerConfig(*std::move(config));
}

// What budgets and spending limits do to jobs, through the pool (set once
// the pool exists). A job whose attempt is already leaving is left alone:
// stopping it for good again would cancel it before its checkpoint.
BudgetHooks BudgetHooksFor(Pool*& pool, PoolHooks& hooks) {
  BudgetHooks b;
  b.stop_and_requeue = [&pool](int64_t job, const std::string& reason) {
    if (auto s = pool->StopAndRequeue(job, reason); !s.ok())
      GP_LOG(kError) << "budget: stopping job " << job << ": " << s.status().ToString();
  };
  b.stop_for_good = [&pool](int64_t job, const std::string& reason) {
    auto d = pool->GetJob(job);
    if (!d.ok() || IsTerminal(d->job.state)) return;
    for (const Attempt& a : d->attempts)
      if (a.id == d->job.current_attempt && IsStopping(a.state)) return;
    GP_LOG(kInfo) << "job " << job << ": " << reason;
    if (auto s = pool->StopForGood(job, reason, /*checkpoint_first=*/true); !s.ok())
      GP_LOG(kError) << "stopping job " << job << ": " << s.status().ToString();
  };
  b.limits_changed = [&hooks] { hooks.schedule_needed(); };
  b.job_event = [&pool](int64_t job, const std::string& text) {
    if (Status s = pool->AddPoolEvent(job, text); !s.ok())
      GP_LOG(kError) << "budget: an event for job " << job << ": " << s.ToString();
  };
  return b;
}

// The API's modules that need only the pool's core parts (server/api_module.h).
struct ApiModules {
  ApiModules(const ServerOptions& options, Pool& pool, Auth& auth, const Clock& clock,
             StorageQuotas& quotas, AccountingService& accounting, BudgetKeeper& budgets,
             Store& store)
      : quota(auth, quotas),
        money(auth, accounting, budgets, store, clock),
        node_control(auth, pool),
        summary(pool),
        selftest(),
        backup(auth, clock,
               {.db_path = options.store_url.empty() ? options.data_dir + "/state.db" : "",
                .backup_dir = options.data_dir + "/backups"}) {}
  void AddTo(Api& api) {
    api.AddModule(quota);
    api.AddModule(money);
    api.AddModule(node_control);
    api.AddModule(summary);
    api.AddModule(backup);
    api.AddModule(selftest);
  }
  QuotaApi quota;
  AccountingApi money;
  NodeControlApi node_control;
  SummaryApi summary;
  SelftestApi selftest;
  BackupApi backup;
};

// The main listener: the API, the dashboard's files, the agents' channel
// and the users' tunnels. Writes DATA_DIR/server.url and says where it is.
Result<std::unique_ptr<net::HttpServer>> StartApiListener(net::EventLoop& loop,
                                                          const ServerOptions& options,
                                                          const Startup& startup, Api& api,
                                                          AgentHub& hub, SessionGateway& gateway) {
  net::HttpHandlers handlers;
  handlers.on_request = [&](net::HttpRequest req, net::Responder r) {
    if (SessionGateway::Handles(req.path)) return r(gateway.Handle(req));
    api.Handle(std::move(req), std::move(r));
  };
  handlers.on_upgrade = [&](const net::HttpRequest& req)
      -> std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> {
    if (SessionGateway::Handles(req.path)) return gateway.Upgrade(req);
    if (req.path != "/v1/agent/connect")
      return ErrorResponse(Status::NotFound("no WebSocket endpoint here"));
    return hub.Upgrade(req);
  };
  const auto& [host, port] = startup.listen.api;
  const std::optional<ServerTls>& tls = startup.tls;
  net::HttpServerOptions opts;
  opts.max_body_bytes = std::max(options.max_request_body, kMinRequestBody);
  opts.max_body_setting = "--max-request-body";
  opts.host = host;
  opts.port = port;
  if (tls) opts.tls = tls->config;
  GP_ASSIGN_OR_RETURN(auto http, net::HttpServer::Start(loop, opts, handlers));
  const std::string url = ApiUrl(tls.has_value(), host, http->port());
  // Lets `gpupool dev` and scripts find a server started on port 0.
  (void)WriteFileAtomic(options.data_dir + "/server.url", url + "\n");
  GP_LOG(kInfo) << "listening on " << url << " (data in " << options.data_dir << ")";
  std::cout << "gpupool server listening on " << url << std::endl;
  if (tls && !tls->ca_fingerprint.empty()) {
    std::cout << "pool CA fingerprint: " << tls->ca_fingerprint << " (" << options.data_dir
              << "/tls/ca.crt)" << std::endl;
  }
  return http;
}

}  // namespace

// On PostgreSQL: stands by until this server leads (server/standby.h);
// the full server then takes the standby's port. nullptr on SQLite.
Result<std::unique_ptr<PgLeader>> Lead(const ServerOptions& options, Startup& startup,
                                       const std::string& id) {
  if (!startup.epoch) return std::unique_ptr<PgLeader>();
  GP_ASSIGN_OR_RETURN(auto leader, PgLeader::Connect({.url = options.store_url,
                                                      .id = id,
                                                      .address = "",
                                                      .version = kVersion,
                                                      .lease_ms = options.leader_lease_ms}));
  StandbyOptions standby{.host = startup.listen.api.first,
                         .port = startup.listen.api.second,
                         .tls = std::nullopt,
                         .lease_ms = options.leader_lease_ms};
  if (startup.tls) standby.tls = startup.tls->config;
  GP_ASSIGN_OR_RETURN(Led led, LeadWhenElected(*leader, standby, options.store_url));
  startup.listen.api.second = led.port;
  startup.epoch->store(led.epoch);
  return leader;
}

int RunServer(const ServerOptions& options) {
  SetLogComponent("server");
  Startup startup = Prepare(options);
  if (startup.exit_code != 0) return startup.exit_code;
  const std::string server_id = ServerProcessId();
  auto leader = Lead(options, startup, server_id);
  if (!leader.ok()) {
    std::cerr << "gpupool server: " << leader.status().message() << "\n";
    return 1;
  }
  const auto& static_files = startup.static_files;
  const PoolOptions& pool_options = startup.pool_options;
  const auto& metrics_addr = startup.listen.metrics;
  const std::optional<ServerTls>& tls = startup.tls;
  Store& store = *startup.store;

  // Everything the server stores and subtracts runs on a wall clock that
  // cannot jump (common/clock.h): a system clock stepped by an operator or
  // NTP neither loses nodes, nor requeues, expires or charges anything.
  RealClock system_clock;
  SteadyWallClock clock(system_clock);
  Auth auth(store, clock);
  auto boot = auth.Bootstrap(options.data_dir, tls ? tls->ca_fingerprint : "");
  if (!boot.ok()) {
    std::cerr << "gpupool server: " << boot.status().ToString() << "\n";
    return 1;
  }
  if (!boot->admin_token.empty()) {
    std::cout << "Created the admin user's token (shown once; also in " << options.data_dir
              << "/admin.token):\n  " << boot->admin_token << "\n"
              << "Agents join with the token in " << options.data_dir << "/join.token\n"
              << std::flush;
  }

  BlobServiceOptions blob_options;
  blob_options.dir = options.blob_dir.empty() ? options.data_dir + "/blobs" : options.blob_dir;
  blob_options.fsync = options.fsync;
  auto blobs = BlobService::Open(blob_options);
  if (!blobs.ok()) {
    std::cerr << "gpupool server: " << blobs.status().ToString() << "\n";
    return 1;
  }

  net::EventLoop loop;
  metrics::ServerMetrics server_metrics;
  MetricsApi* metrics_ptr = nullptr;
  AgentHub* hub_ptr = nullptr;
  Api* api_ptr = nullptr;
  SessionGateway* gateway_ptr = nullptr;
  SchedulePacer pacer(loop, clock, server_metrics);
  PoolHooks hooks;
  hooks.outbox_ready = [&](const std::string& node) { hub_ptr->OutboxReady(node); };
  hooks.job_changed = [&](int64_t job) {
    api_ptr->JobChanged(job);
    if (gateway_ptr) gateway_ptr->JobChanged(job);
  };
  hooks.schedule_needed = [&] { pacer.Needed(); };
  hooks.manifest_stored = [&](const std::string& id) { return (*blobs)->HasManifest(id); };
  hooks.counted = [&](const PoolCounts& counts) {
    if (metrics_ptr) metrics_ptr->Counted(counts);
  };
  StorageQuotasOptions quota_options = options.storage;
  quota_options.upload_window_ms = options.blob_gc_grace_ms;
  StorageQuotas quotas(store, clock, quota_options);
  hooks.within_quota = [&](Tx& tx, const std::string& owner, const std::string& group,
                           std::string_view what, const std::function<Status()>& change) {
    return quotas.Guard(tx, owner, group, what, change);
  };
  AccountingOptions accounting_options = options.accounting;
  accounting_options.half_life_ms = pool_options.scheduler.half_life_ms;
  AccountingService accounting(store, clock, accounting_options);
  if (Status s = accounting.LoadPrices(); !s.ok()) {
    std::cerr << "gpupool server: reading prices: " << s.ToString() << "\n";
    return 1;
  }
  hooks.attempt_closed = [&](Tx& tx, const Job& job, const Attempt& attempt) {
    return accounting.AttemptClosed(tx, job, attempt);
  };
  Pool* pool_ptr = nullptr;
  BudgetKeeper budgets(store, clock, accounting, BudgetHooksFor(pool_ptr, hooks));
  hooks.held_accounts = [&] { return budgets.Held(); };
  hooks.account_of = [&](const Job& job) { return accounting.AccountOf(job); };
  hooks.usage_prices = [&] { return accounting.CachedPrices(); };
  hooks.lending_bonus = [&] { return accounting.LendingBonus(); };
  Pool pool(store, clock, pool_options, hooks);
  pool_ptr = &pool;
  pacer.SetPool(pool);
  if (Status s = pool.Recover(); !s.ok()) {
    std::cerr << "gpupool server: " << s.ToString() << "\n";
    return 1;
  }
  // Log retention (server/job_logs.h): now and then, and with every admin gc.
  LogCollector log_collector(store, clock, pool_options.logs);
  LogGc log_gc(loop, log_collector);
  BlobApiOptions blob_api_options;
  blob_api_options.gc_grace_ms = options.blob_gc_grace_ms;
  blob_api_options.collect_logs = [&](std::function<void(Result<LogGcStats>)> done) {
    log_gc.Collect(std::move(done));
  };
  // Agents read only their own node's blobs (agent_blob_scope.h).
  AgentBlobScope agent_blobs(store, **blobs, clock);
  BlobApi blob_api(loop, pool, **blobs, clock, blob_api_options, {&agent_blobs, &auth}, &quotas);
  IdentityApiOptions identity_options;
  identity_options.login_limits = options.login_limits;
  if (tls) {
    identity_options.ca = tls->ca;
    identity_options.ca_fingerprint = tls->ca_fingerprint;
  }
  IdentityApi identity(loop, auth, clock, identity_options,
                       [&](const std::string& node, const std::string& reason) {
                         hub_ptr->Disconnect(node, "credential revoked");
                         if (Status s = pool.RevokeNode(node, reason); !s.ok())
                           GP_LOG(kError) << "revoking node " << node << ": " << s.ToString();
                         hooks.schedule_needed();
                       });
  // Before the Api: its modules outlive it.
  auto telemetry = OpenTelemetry(options, startup.tiers, loop, pool, clock);
  if (!telemetry.ok()) {
    std::cerr << "gpupool server: telemetry history: " << telemetry.status().ToString() << "\n";
    return 1;
  }
  ApiOptions api_options = options.api;
  if (*leader) {
    api_options.role = "leader";
    api_options.epoch = startup.epoch->load();
  }
  api_options.observe = [&](std::string_view route, std::string_view method, int status,
                            double seconds) {
    server_metrics.ApiRequest(route, method, status, seconds);
  };
  MetricsApi metrics_api(pool, auth, clock, server_metrics, &blob_api);
  metrics_ptr = &metrics_api;
  Api api(loop, pool, auth, clock, api_options, &blob_api, &identity);
  api.AddModule(metrics_api);
  api.AddModule(*telemetry->api);
  telemetry->api->Start();
  ApiModules modules(options, pool, auth, clock, quotas, accounting, budgets, store);
  modules.AddTo(api);
  std::string api_url;  // known once it listens
  ServersApi servers_api(*leader ? ElectedServers(**leader, options.leader_lease_ms)
                                 : OneServer(server_id, &api_url, system_clock.NowMs()));
  api.AddModule(servers_api);
  if (static_files) api.AddModule(*static_files);
  AgentHubOptions hub_options;
  hub_options.blob_scope = &agent_blobs;
  AgentHub hub(loop, pool, auth, 3 * options.pool.heartbeat_ms, tls && options.agent_mtls,
               hub_options);
  SessionGateway gateway(loop, pool, auth, hub, clock);
  api_ptr = &api;
  hub_ptr = &hub;
  gateway_ptr = &gateway;

  auto http = StartApiListener(loop, options, startup, api, hub, gateway);
  if (!http.ok()) {
    std::cerr << "gpupool server: cannot listen on " << options.listen << ": "
              << http.status().message() << "\n";
    return 1;
  }
  api_url = ApiUrl(tls.has_value(), startup.listen.api.first, (*http)->port());
  auto sessions_http = StartSessionsListener(loop, startup.listen.sessions, tls, options, gateway);
  if (!sessions_http.ok()) {
    std::cerr << "gpupool server: cannot listen for interactive sessions on "
              << startup.listen.sessions.first << ":" << startup.listen.sessions.second << ": "
              << sessions_http.status().message()
              << " (choose another address with --sessions-listen HOST:PORT)\n";
    return 1;
  }
  auto metrics_http = StartMetricsListener(loop, metrics_addr, metrics_api);
  if (!metrics_http.ok()) {
    std::cerr << "gpupool server: cannot listen on --metrics-listen " << options.metrics_listen
              << ": " << metrics_http.status().message() << "\n";
    return 1;
  }

  Housekeeping housekeeping(
      loop, options,
      {pool, clock, gateway, blob_api, log_gc, accounting, budgets, hooks.schedule_needed});
  hooks.schedule_needed();
  loop.OnSignals({SIGHUP}, [&](int) {
    ReloadSchedulerConfig(options, pool);
    hooks.schedule_needed();
  });
  std::optional<LeaseKeeper> lease;
  if (*leader) lease.emplace(**leader, startup.epoch->load(), options.leader_lease_ms);
  loop.OnSignals({SIGINT, SIGTERM}, [&](int sig) {
    GP_LOG(kInfo) << "signal " << sig << ": shutting down";
    if (*leader) {
      lease.reset();
      (void)(*leader)->Resign();  // a standby takes over at once
    }
    hub.CloseAll();
    (*http)->Close();
    (*sessions_http)->Close();
    if (*metrics_http) (*metrics_http)->Close();
    loop.RunAfter(200, [&] { loop.Stop(); });
  });
  loop.Run();
  return 0;
}

}  // namespace gpupool::server
