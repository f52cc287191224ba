// A standby: a server on PostgreSQL whose database another server leads
// (store/pg_leader.h). It listens on the API address all the same, so that
// clients and agents that reach it are sent on:
//   GET /healthz   200 {"role": "standby", "leader": URL, "epoch": N, "id": ID}
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

#include <cstdint>
#include <optional>
#include <string>

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

// The leader's side: renews the lease on `loop` every lease/3. If another
// server has taken it, or it could not be renewed before it ran out (by
// this machine's clock, from the last renewal), the server stops at once
// (exit status 3) after saying so: its transactions are fenced already, and
// a supervisor (systemd) starts it again as a standby.
class LeaseKeeper {
 public:
  LeaseKeeper(net::EventLoop& loop, PgLeader& leader, int64_t epoch, int64_t lease_ms);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  void Renew();
  net::EventLoop& loop_;
  PgLeader& leader_;
  int64_t epoch_, lease_ms_, renewed_ms_;
  net::EventLoop::TimerId timer_ = 0;
};

}  // namespace gpupool::server
