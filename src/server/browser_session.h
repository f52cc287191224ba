// Browser sessions of the web dashboard (docs/security.md#the-web-dashboard).
//
// Signing in from the dashboard (POST /v1/login with "browser": true) makes
// an ordinary token whose secret goes only into an HttpOnly cookie: page
// scripts never hold a credential. A request that authenticates with the
// cookie must, for anything but reading (GET, HEAD), carry the session's
// CSRF token in X-CSRF-Token; the CSRF token is derived from the secret
// (a hash of it), so only a page that was told it can send it, and it
// reveals nothing of the secret. A cookie-authenticated request with an
// Origin header from elsewhere is refused outright.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::server {

// The cookie's name. Over TLS it has the `__Host-` prefix: browsers then
// take it only from a secure response for exactly this host with Path=/,
// so no page of another port on the host (an interactive session's
// notebook) can set one of that name beside it, on another path, to shadow
// it.
inline constexpr char kBrowserSessionCookie[] = "gpupool_dashboard";
inline constexpr char kBrowserSessionCookieTls[] = "__Host-gpupool_dashboard";
inline const char* BrowserSessionCookieName(bool tls) {
  return tls ? kBrowserSessionCookieTls : kBrowserSessionCookie;
}
inline constexpr char kCsrfHeader[] = "x-csrf-token";

// The CSRF token of the session whose secret is `secret`.
std::string CsrfTokenFor(std::string_view secret);

// The Set-Cookie value that holds `secret` for `max_age_s` seconds (Secure
// over TLS), and the one that clears it.
std::string SessionCookie(std::string_view secret, int64_t max_age_s, bool tls);
std::string ClearedSessionCookie(bool tls);

// The session secret of a request that carries the cookie, checked for
// CSRF and origin; "" when it carries none; an error (PERMISSION_DENIED)
// when the cookie is there but the request may not use it.
Result<std::string> BrowserSessionSecret(const net::HttpRequest& req);

// What authenticates an API request, as an Authorization header value for
// Auth::Authenticate: the request's own header; without one, the session
// cookie's secret as "Bearer <secret>" (checked as above); else "".
Result<std::string> RequestCredentials(const net::HttpRequest& req);

}  // namespace gpupool::server
