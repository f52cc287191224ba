#include "server/servers_api.h"

#include <nlohmann/json.hpp>

#include "common/version.h"
#include "server/http_errors.h"

namespace gpupool::server {

using nlohmann::json;

std::string_view ServerRole(const ServerSeen& s, int64_t lease_ms) {
  if (s.leading) return "leader";
  // A standby ticks every lease/3: one lease without a word is three
  // missed ticks.
  return s.seen_ago_ms > lease_ms ? "unreachable" : "standby";
}

ServersApiOptions ElectedServers(PgLeader& leader, int64_t lease_ms) {
  return {.store = "postgresql", .lease_ms = lease_ms, .list = [&leader](int64_t* epoch) {
            return leader.Servers(epoch);
          }};
}

ServersApiOptions OneServer(std::string id, const std::string* address, int64_t started_ms) {
  return {.store = "sqlite",
          .lease_ms = 0,
          .list = [id = std::move(id), address,
                   started_ms](int64_t*) -> Result<std::vector<ServerSeen>> {
            return std::vector<ServerSeen>{{.id = id,
                                            .address = *address,
                                            .version = kVersion,
                                            .started_ms = started_ms,
                                            .seen_ago_ms = 0,
                                            .leading = true}};
          }};
}

void ServersApi::AddRoutes(ApiRoutes& t) {
  t.Add("GET", "/v1/admin/servers", Access::kAuthorizedFirst, Action::kAdminister,
        [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
          int64_t epoch = 0;
          auto seen = options_.list(&epoch);
          if (!seen.ok()) return (*respond)(ErrorResponse(seen.status()));
          json servers = json::array();
          for (const ServerSeen& s : *seen) {
            servers.push_back({{"id", s.id},
                               {"address", s.address},
                               {"version", s.version},
                               {"role", ServerRole(s, options_.lease_ms)},
                               {"started_ms", s.started_ms},
                               {"seen_ago_ms", s.seen_ago_ms}});
          }
          (*respond)(JsonResponse(200, {{"store", options_.store},
                                        {"epoch", epoch},
                                        {"lease_ms", options_.lease_ms},
                                        {"servers", std::move(servers)}}));
        });
}

}  // namespace gpupool::server
