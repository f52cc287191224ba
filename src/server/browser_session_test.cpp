#include "server/browser_session.h"

#include <gtest/gtest.h>

namespace gpupool::server {
namespace {

net::HttpRequest Request(const std::string& method, const std::string& cookie) {
  net::HttpRequest req;
  req.method = method;
  req.path = "/v1/jobs";
  req.tls = true;
  req.headers["host"] = "pool.example:8470";
  if (!cookie.empty()) req.headers["cookie"] = cookie;
  return req;
}

TEST(BrowserSession, TheCookieIsHttpOnlyStrictAndSecureOverTls) {
  EXPECT_EQ(SessionCookie("s3cret", 3600, true),
            "__Host-gpupool_dashboard=s3cret; Path=/; HttpOnly; SameSite=Strict; Max-Age=3600; "
            "Secure");
  EXPECT_EQ(SessionCookie("s3cret", 60, false),
            "gpupool_dashboard=s3cret; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
  EXPECT_EQ(ClearedSessionCookie(true),
            "__Host-gpupool_dashboard=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure");
}

TEST(BrowserSession, ReadsNeedNoCsrfTokenAndNoCookieIsNoSession) {
  auto none = BrowserSessionSecret(Request("POST", ""));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  auto other = BrowserSessionSecret(Request("GET", "theme=dark; gpupool_dashboardx=1"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, "");
  auto read = BrowserSessionSecret(Request("GET", "theme=dark; __Host-gpupool_dashboard=abc"));
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "abc");
}

TEST(BrowserSession, OverTlsOnlyTheHostPrefixedCookieCounts) {
  // A cookie of the plain name (a page of another port on the host could
  // set one) is no session over TLS; without TLS it is the only name.
  auto plain = BrowserSessionSecret(Request("GET", "gpupool_dashboard=planted"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "");
  net::HttpRequest req = Request("GET", "gpupool_dashboard=abc; __Host-gpupool_dashboard=x");
  req.tls = false;
  auto insecure = BrowserSessionSecret(req);
  ASSERT_TRUE(insecure.ok());
  EXPECT_EQ(*insecure, "abc");
}

TEST(BrowserSession, AChangeNeedsTheSessionsOwnCsrfToken) {
  net::HttpRequest req = Request("POST", "__Host-gpupool_dashboard=abc");
  auto missing = BrowserSessionSecret(req);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(missing.status().message().find("X-CSRF-Token"), std::string::npos);
  req.headers["x-csrf-token"] = CsrfTokenFor("another session");
  EXPECT_FALSE(BrowserSessionSecret(req).ok());
  req.headers["x-csrf-token"] = CsrfTokenFor("abc").substr(1);
  EXPECT_FALSE(BrowserSessionSecret(req).ok());
  req.headers["x-csrf-token"] = CsrfTokenFor("abc");
  auto ok = BrowserSessionSecret(req);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "abc");
  // The token reveals nothing of the secret it is made from.
  EXPECT_EQ(CsrfTokenFor("abc").find("abc"), std::string::npos);
}

TEST(BrowserSession, AnotherOriginIsRefusedEvenForReads) {
  net::HttpRequest req = Request("GET", "__Host-gpupool_dashboard=abc");
  req.headers["origin"] = "https://evil.example";
  EXPECT_EQ(BrowserSessionSecret(req).status().code(), StatusCode::kPermissionDenied);
  req.headers["origin"] = "http://pool.example:8470";  // not over TLS: another origin
  EXPECT_FALSE(BrowserSessionSecret(req).ok());
  req.headers["origin"] = "https://pool.example:8470";
  EXPECT_TRUE(BrowserSessionSecret(req).ok());
}

}  // namespace
}  // namespace gpupool::server
