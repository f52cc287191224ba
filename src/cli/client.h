// The CLI's view of a pool: where the server is, which token to use, and
// JSON calls to the REST API with errors turned into Status values.
//
// The server URL and token come from, in order: --server/--token flags, the
// GPUPOOL_SERVER/GPUPOOL_TOKEN environment variables, and the config file
// ($GPUPOOL_CONFIG, or $XDG_CONFIG_HOME/gpupool/config.json, or
// ~/.config/gpupool/config.json) that `gpupool dev` writes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace gpupool::cli {

struct Endpoint {
  std::string server;  // "http://127.0.0.1:8470"
  std::string token;
};

std::string ConfigPath();
// Resolves the endpoint; flags win over the environment over the file.
Result<Endpoint> ResolveEndpoint(const std::string& server_flag, const std::string& token_flag);
Status WriteConfig(const std::string& path, const Endpoint& e);

class ApiClient {
 public:
  explicit ApiClient(Endpoint e) : e_(std::move(e)) {}
  // Returns the parsed JSON body of a 2xx answer; otherwise an error with the
  // server's message (HTTP 400 -> InvalidArgument, 404 -> NotFound, ...).
  Result<nlohmann::json> Get(const std::string& target, int64_t timeout_ms = 30'000);
  Result<nlohmann::json> Post(const std::string& target, const nlohmann::json& body);
  const Endpoint& endpoint() const { return e_; }

 private:
  Result<nlohmann::json> Call(const std::string& method, const std::string& target,
                              const std::string& body, int64_t timeout_ms);
  Endpoint e_;
};

}  // namespace gpupool::cli
