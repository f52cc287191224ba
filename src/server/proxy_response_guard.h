// ProxyResponseGuard: what the Jupyter proxy (server/session_gateway.h) lets
// through from a session's notebook server to the browser's response head.
//
// Sessions have an origin of their own (--sessions-listen), but browsers
// keep cookies per host, not per port: a cookie a hostile notebook server
// sets would also reach the dashboard's origin on the same host. So every
// Set-Cookie must stay inside the session's own proxy path (Jupyter's
// `_xsrf` and login cookies do: their path is Jupyter's base_url), may not
// name another domain, and may not take a name of the pool's own
// (gpupool_*) or a `__Host-`/`__Secure-` one (which could shadow the
// dashboard's cookie); `Clear-Site-Data` (which would clear the host's
// cookies, the dashboard's included) is dropped too. What is dropped is
// dropped silently: a notebook server keeps working without it.
//
// The proxy sends one request per connection, so one response comes back:
// the guard filters the heads up to the final one (1xx interim heads
// included) and passes everything after it, a WebSocket's frames after a
// 101, unread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::server {

class ProxyResponseGuard {
 public:
  // path_prefix: the session's proxy prefix, "/v1/sessions/12/proxy/".
  explicit ProxyResponseGuard(std::string path_prefix);

  // The bytes to pass on for the next bytes from the notebook server (empty
  // while a head is incomplete). An error for a head over 64 KiB.
  Result<std::string> Feed(std::string_view bytes);

  // Whether a response header line ("Name: value") may reach the browser.
  bool HeaderAllowed(std::string_view line) const;

 private:
  std::string prefix_;
  std::string head_;  // an incomplete head, or heads
  bool passing_ = false;
};

}  // namespace gpupool::server
