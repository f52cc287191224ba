// The CLI's view of a pool: where the server is, which token to use, and
// JSON calls to the REST API with errors turned into Status values.
//
// The server URL comes from, in order: --server, GPUPOOL_SERVER, the config
// file's default server ($GPUPOOL_CONFIG, or $XDG_CONFIG_HOME/gpupool/
// config.json, or ~/.config/gpupool/config.json, mode 0600, which `gpupool
// login` and `gpupool dev` write). The token and how to check the server's
// certificate belong to a server: the flags (--token, --ca-fingerprint,
// --ca-file, --insecure) apply to the server used; the environment's
// (GPUPOOL_TOKEN, GPUPOOL_CA_FINGERPRINT, GPUPOOL_CA_FILE) to GPUPOOL_SERVER,
// or to the server used when GPUPOOL_SERVER is unset; the file's only to
// the server they were stored with. So another pool named by --server or
// GPUPOOL_SERVER is never checked against this pool's CA pin, nor sent this
// pool's token.
//
// The file keeps one entry per server ("servers": {URL: {token,
// ca_fingerprint, ca_file, insecure}}) and, at the top level, the default
// server with its entry repeated (what versions before "servers" read).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "net/http.h"
#include "net/http_client.h"
#include "net/tls.h"

namespace gpupool::cli {

struct Endpoint {
  std::string server;  // "https://gpupool.example.edu:8470"
  std::string token;
  // For https: ca_fingerprint pins the pool CA, or ca_file trusts a CA bundle.
  net::TlsClientConfig tls;
};

std::string ConfigPath();
// Resolves the endpoint as above; a field set in `flags` wins.
Result<Endpoint> ResolveEndpoint(const Endpoint& flags);
// Stores `e` as the file's entry for e.server and makes it the default
// server, keeping the entries of other servers.
Status WriteConfig(const std::string& path, const Endpoint& e);

class ApiClient {
 public:
  explicit ApiClient(Endpoint e) : e_(std::move(e)) {}
  // With `keep_alive`, calls share connections kept open between them
  // (net::KeepAliveClient; copies of this client share them too): for
  // programs that make many calls. A POST whose kept connection the server
  // closed meanwhile fails (Unavailable) rather than being sent twice.
  ApiClient(Endpoint e, bool keep_alive)
      : e_(std::move(e)), keep_(keep_alive ? std::make_shared<net::KeepAliveClient>() : nullptr) {}
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
  std::shared_ptr<net::KeepAliveClient> keep_;
};

}  // namespace gpupool::cli
