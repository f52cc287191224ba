// ServersApi: the servers of the pool (docs/api.md#servers, `gpupool admin
// servers`):
//
//   GET /v1/admin/servers   {"store": "postgresql" | "sqlite", "epoch": N,
//                           "lease_ms": L, "servers": [{"id", "address",
//                           "version", "role", "started_ms", "seen_ago_ms"}]}
//
// On PostgreSQL the list is every server that took part in the election in
// the last hour (store/pg_leader.h): the leader ("leader"), the standbys
// heard of within a lease ("standby") and those silent for longer
// ("unreachable": stopped by kill, crashed, or cut off from the database;
// a server stopped cleanly leaves the list). On SQLite it is this server
// alone. Only the leader answers it; a standby sends the call on to the
// leader (server/standby.h). Admins only.
//
// Threading: on the event loop; the list is one query on the election's
// connection, which the loop's lease renewals also use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/api_module.h"
#include "store/pg_leader.h"

namespace gpupool::server {

struct ServersApiOptions {
  std::string store;  // "postgresql" or "sqlite"
  int64_t lease_ms = 0;
  // The servers and the current epoch.
  std::function<Result<std::vector<ServerSeen>>(int64_t* epoch)> list;
};

class ServersApi : public ApiModule {
 public:
  explicit ServersApi(ServersApiOptions options) : options_(std::move(options)) {}
  void AddRoutes(ApiRoutes& routes) override;

 private:
  ServersApiOptions options_;
};

// The list on PostgreSQL: the election's (`leader` outlives the module).
ServersApiOptions ElectedServers(PgLeader& leader, int64_t lease_ms);
// On SQLite: this server alone, always the leader, at *address (filled in
// once it listens; outlives the module).
ServersApiOptions OneServer(std::string id, const std::string* address, int64_t started_ms);

// A server's role from what the database last heard of it.
std::string_view ServerRole(const ServerSeen& s, int64_t lease_ms);

}  // namespace gpupool::server
