// A blocking HTTP/1.1 client for the CLI and tests. One connection per
// call; thread-safe (calls share nothing but cached TLS contexts, which are
// read-only once made).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "net/http.h"
#include "net/tls.h"

namespace gpupool::net {

struct HttpCall {
  std::string base_url;  // "http://127.0.0.1:8470" or "https://..."
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

}  // namespace gpupool::net
