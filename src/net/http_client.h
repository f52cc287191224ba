// A blocking HTTP/1.1 client for the CLI and tests. One connection per
// call; thread-safe (calls share nothing).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::net {

struct HttpCall {
  std::string base_url;  // "http://127.0.0.1:8470"
  std::string method = "GET";
  std::string target;  // "/v1/jobs?state=running"
  std::map<std::string, std::string> headers;
  std::string body;
  int64_t timeout_ms = 30'000;
};

// Returns the response for any HTTP status; an error only when no response
// arrived (Unavailable: cannot connect; DeadlineExceeded: timeout).
Result<HttpResponse> Fetch(const HttpCall& call);

}  // namespace gpupool::net
