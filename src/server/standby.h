// A standby: a server on PostgreSQL whose database another server leads
// (store/pg_leader.h). It listens on the API address all the same, so that
// clients and agents that reach it are sent on:
//   GET /healthz   200 {"role": "standby", "leader": URL, "epoch": N}
//   anything else  307 to the same path and query at the leader's URL (503
//                  with Retry-After while no server leads), WebSocket
//                  upgrades (the agents' channel, tunnels) included;
// and it takes part in the election every lease/3 until it leads. Then it
// closes its listener and RunServer starts the full server on the same
// port, rebuilding what a leader keeps in memory from the database and
// from the agents as they reconnect.
//
// Threading: runs its own event loop on the caller's thread until it leads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "net/event_loop.h"
#include "net/tls.h"
#include "store/pg_leader.h"

namespace gpupool::server {

// A server's URL: http(s)://HOST:PORT, an IPv6 host in brackets.
std::string ApiUrl(bool tls, const std::string& host, uint16_t port);

struct StandbyOptions {
  std::string host;
  uint16_t port = 0;  // 0: any free port
  std::optional<net::TlsServerConfig> tls;
  int64_t lease_ms = 6000;
};

struct Led {
  uint16_t port = 0;  // the port it listened on: the full server takes it
  int64_t epoch = 0;  // the epoch this server leads in
};
// Returns once this server leads.
Result<Led> StandBy(PgLeader& leader, const StandbyOptions& options);
// StandBy, then a check that the database at `store_url` is still of a
// schema this binary may write (a newer server may have migrated it
// meanwhile): refused, with why, if not.
Result<Led> LeadWhenElected(PgLeader& leader, const StandbyOptions& options,
                            const std::string& store_url);

// A name for this server process, unique in the pool: HOST:PID:RANDOM.
std::string ServerProcessId();

// The leader's side: renews the lease every lease/3 on a thread of its
// own, so that an event loop stuck on a database that stopped answering
// cannot keep it from stopping. If another server has taken the lease, or
// it could not be renewed before it ran out (by this machine's clock, from
// the start of the last renewal that succeeded), the server stops at once
// (exit status 3) after saying so: its transactions are fenced already,
// and a supervisor (systemd) starts it again as a standby. A failed
// renewal is retried every lease/10 until then; each takes at most lease/3
// (store/pg_leader.h), so the server stops at most that long after its
// lease ended, and never writes after it (the fencing epoch).
class LeaseKeeper {
 public:
  LeaseKeeper(PgLeader& leader, int64_t epoch, int64_t lease_ms);
  // Stops renewing (a clean shutdown: Resign next).
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  void Run();
  // Renews once; the wait until the next renewal.
  int64_t Renew();
  PgLeader& leader_;
  const int64_t epoch_, lease_ms_;
  int64_t renewed_ms_;  // keeper thread only
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace gpupool::server
