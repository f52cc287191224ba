// The CLI's view of a pool: where the server is, which token to use, and
// JSON calls to the REST API with errors turned into Status values.
//
// The server URL, token and how to check the server's certificate come
// from, in order: the --server/--token/--ca-fingerprint/--ca-file/--insecure
// flags, the GPUPOOL_SERVER/GPUPOOL_TOKEN/GPUPOOL_CA_FINGERPRINT/
// GPUPOOL_CA_FILE environment variables, and the config file
// ($GPUPOOL_CONFIG, or $XDG_CONFIG_HOME/gpupool/config.json, or
// ~/.config/gpupool/config.json, mode 0600) that `gpupool login` and
// `gpupool dev` write.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "net/http.h"
#include "net/tls.h"

namespace gpupool::cli {

struct Endpoint {
  std::string server;  // "https://gpupool.example.edu:8470"
  std::string token;
  // For https: ca_fingerprint pins the pool CA, or ca_file trusts a CA bundle.
  net::TlsClientConfig tls;
};

std::string ConfigPath();
// Resolves the endpoint: each field set in `flags` wins over the
// environment, which wins over the file.
Result<Endpoint> ResolveEndpoint(const Endpoint& flags);
Status WriteConfig(const std::string& path, const Endpoint& e);

class ApiClient {
 public:
  explicit ApiClient(Endpoint e) : e_(std::move(e)) {}
  // Returns the parsed JSON body of a 2xx answer; otherwise an error with the
  // server's message (HTTP 400 -> InvalidArgument, 404 -> NotFound, ...).
  Result<nlohmann::json> Get(const std::string& target, int64_t timeout_ms = 30'000);
  Result<nlohmann::json> Post(const std::string& target, const nlohmann::json& body,
                              int64_t timeout_ms = 30'000);
  Result<nlohmann::json> Put(const std::string& target, const nlohmann::json& body);
  Result<nlohmann::json> Delete(const std::string& target);
  // The raw body of a 2xx answer (a backup's bytes), errors as Call's.
  Result<std::string> GetBytes(const std::string& target, int64_t timeout_ms = 120'000);
  const Endpoint& endpoint() const { return e_; }

 private:
  Result<nlohmann::json> Call(const std::string& method, const std::string& target,
                              const std::string& body, int64_t timeout_ms);
  Result<net::HttpResponse> Send(const std::string& method, const std::string& target,
                                 const std::string& body, int64_t timeout_ms);
  Endpoint e_;
};

}  // namespace gpupool::cli
