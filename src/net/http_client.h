// A blocking HTTP/1.1 client for the CLI and tests. Fetch: one connection
// per call; KeepAliveClient: connections kept between calls. Thread-safe
// (calls share nothing but cached TLS contexts, which are read-only once
// made, and a KeepAliveClient's idle connections, under its lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/http.h"
#include "net/tls.h"

namespace gpupool::net {

struct HttpCall {
  // "http://127.0.0.1:8470" or "https://...", or a list of a pool's servers
  // "https://a:8470,https://b:8470" (net/server_list.h).
  std::string base_url;
  std::string method = "GET";
  std::string target;  // "/v1/jobs?state=running"
  std::map<std::string, std::string> headers;
  std::string body;
  int64_t timeout_ms = 30'000;
  // How to check the server (and which client certificate to present) when
  // base_url is https://; ignored for http://.
  TlsClientConfig tls;
};

// Returns the response for any HTTP status; an error only when no response
// arrived (Unavailable: cannot connect, or the TLS handshake failed;
// Unauthenticated: the server's certificate did not verify, e.g. "TLS: the
// server's certificate chain does not contain the pinned CA sha256:...;
// refusing to connect to https://..." (retrying will not help);
// DeadlineExceeded: timeout; InvalidArgument: a bad URL or TLS
// configuration, such as an unreadable certificate file).
Result<HttpResponse> Fetch(const HttpCall& call);

struct HttpConnection;
namespace internal {
class ClientTls;
}

// Fetch over connections kept open between calls (HTTP/1.1 keep-alive), for
// clients that make many calls (the load tool, scripts). Each call takes an
// idle connection to its base_url made with the same TLS settings (a call
// with another pin never rides a connection checked otherwise) or opens
// one, and gives it back
// after a complete exchange both sides agreed to keep. A connection idle
// longer than kMaxIdleMs is dropped (the server closes idle ones after
// 120 s). A call that fails on a kept connection before any answer (the
// server closed it meanwhile) is made again on a new connection, once,
// unless it was sent and is not idempotent: a POST that may have been acted
// on fails (Unavailable) rather than run twice. Errors as Fetch's.
class KeepAliveClient {
 public:
  static constexpr int64_t kMaxIdleMs = 30'000;
  static constexpr size_t kMaxIdleConnections = 16;

  KeepAliveClient();
  ~KeepAliveClient();
  KeepAliveClient(const KeepAliveClient&) = delete;
  KeepAliveClient& operator=(const KeepAliveClient&) = delete;

  Result<HttpResponse> Fetch(const HttpCall& call);
  // How many connections it has opened (for tests and benchmarks).
  int64_t connections_opened() const;

 private:
  Result<HttpResponse> FetchOne(const HttpCall& call);
  std::unique_ptr<HttpConnection> TakeIdle(const std::string& base_url,
                                           const std::shared_ptr<internal::ClientTls>& tls);
  void GiveBack(std::unique_ptr<HttpConnection> c);

  std::mutex mu_;
  std::vector<std::unique_ptr<HttpConnection>> idle_;
  std::atomic<int64_t> opened_{0};
};

}  // namespace gpupool::net
