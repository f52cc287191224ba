#include "server/browser_session.h"

#include <openssl/crypto.h>

#include "common/ids.h"

namespace gpupool::server {

std::string CsrfTokenFor(std::string_view secret) {
  return Sha256Hex("gpupool browser session csrf\n" + std::string(secret));
}

std::string SessionCookie(std::string_view secret, int64_t max_age_s, bool tls) {
  // SameSite=Strict: no other site's page makes the browser send it.
  return std::string(BrowserSessionCookieName(tls)) + "=" + std::string(secret) +
         "; Path=/; HttpOnly; SameSite=Strict; Max-Age=" + std::to_string(max_age_s) +
         (tls ? "; Secure" : "");
}

std::string ClearedSessionCookie(bool tls) { return SessionCookie("", 0, tls); }

namespace {

bool Reads(const std::string& method) { return method == "GET" || method == "HEAD"; }

// Whether the Origin header names the host the request was sent to.
bool SameOrigin(const net::HttpRequest& req, const std::string& origin) {
  const std::string host = req.Header("host");
  if (host.empty()) return false;
  return origin == (req.tls ? "https://" : "http://") + host;
}

}  // namespace

Result<std::string> BrowserSessionSecret(const net::HttpRequest& req) {
  std::string secret = net::CookieValue(req.Header("cookie"), BrowserSessionCookieName(req.tls));
  if (secret.empty()) return std::string();
  const std::string origin = req.Header("origin");
  if (!origin.empty() && !SameOrigin(req, origin)) {
    return Status::PermissionDenied("a browser session is not usable from " + origin);
  }
  if (!Reads(req.method)) {
    const std::string csrf = req.Header(kCsrfHeader);
    const std::string want = CsrfTokenFor(secret);
    if (csrf.size() != want.size() || CRYPTO_memcmp(csrf.data(), want.data(), want.size()) != 0) {
      return Status::PermissionDenied(
          "a change through a browser session needs the session's X-CSRF-Token header");
    }
  }
  return secret;
}

Result<std::string> RequestCredentials(const net::HttpRequest& req) {
  std::string header = req.Header("authorization");
  if (!header.empty()) return header;
  GP_ASSIGN_OR_RETURN(std::string secret, BrowserSessionSecret(req));
  return secret.empty() ? std::string() : "Bearer " + secret;
}

}  // namespace gpupool::server
