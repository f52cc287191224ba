// ProxyResponseGuard: a notebook server's cookies stay inside its session's
// proxy path, whatever way it tries to send one out of it.
#include "server/proxy_response_guard.h"

#include <gtest/gtest.h>

namespace gpupool::server {
namespace {

constexpr char kPrefix[] = "/v1/sessions/12/proxy/";

std::string Through(std::string_view response, size_t chunk = 0) {
  ProxyResponseGuard guard(kPrefix);
  std::string out;
  if (chunk == 0) chunk = response.size();
  for (size_t at = 0; at < response.size(); at += chunk) {
    auto part = guard.Feed(response.substr(at, chunk));
    EXPECT_TRUE(part.ok()) << part.status().ToString();
    if (part.ok()) out += *part;
  }
  return out;
}

TEST(ProxyResponseGuardTest, JupytersOwnCookiesPass) {
  const std::string r =
      "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
      "Set-Cookie: _xsrf=2|abc; Path=/v1/sessions/12/proxy/; SameSite=Lax\r\n"
      "Set-Cookie: username-x=\"2|u\"; expires=Sat, 01 Jan 2028 00:00:00 GMT; HttpOnly; "
      "Path=/v1/sessions/12/proxy/\r\n"
      "Set-Cookie: nopath=1\r\nSet-Cookie: exact=1; Path=/v1/sessions/12/proxy\r\n"
      "Content-Length: 5\r\n\r\nhello";
  EXPECT_EQ(Through(r), r);
  EXPECT_EQ(Through(r, 1), r) << "a response that arrives a byte at a time";
}

TEST(ProxyResponseGuardTest, CookiesOutsideTheSessionAreDropped) {
  const std::string bad[] = {
      "Set-Cookie: gpupool_dashboard=mine; Path=/v1/sessions/12/proxy/",  // a pool name
      "Set-Cookie: GPUPOOL_session=x",
      "Set-Cookie: __Host-gpupool_dashboard=mine; Secure; Path=/",  // the dashboard's
      "set-cookie: __secure-x=1; Secure; Path=/v1/sessions/12/proxy/",
      "Set-Cookie: a=1; Path=/",                               // the whole host
      "Set-Cookie: a=1; Path=/v1/",                            // shadows the API's
      "Set-Cookie: a=1; Path=/v1/sessions/13/proxy/",          // another session
      "Set-Cookie: a=1; Path=/v1/sessions/12/proxyx",          // not inside it
      "Set-Cookie: a=1; Path=/v1/sessions/12/proxy/; Path=/",  // the last Path counts
      "Set-Cookie: a=1; Domain=example.edu; Path=/v1/sessions/12/proxy/",
      "Set-Cookie: =1",
      "Clear-Site-Data: \"cookies\"",
      "Set-Cookie2: a=1",
  };
  for (const std::string& line : bad) {
    std::string r = "HTTP/1.1 200 OK\r\nX-A: 1\r\n" + line + "\r\nX-B: 2\r\n\r\nbody";
    EXPECT_EQ(Through(r), "HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: 2\r\n\r\nbody") << line;
  }
}

TEST(ProxyResponseGuardTest, AFoldedLineGoesWithItsHeader) {
  EXPECT_EQ(Through("HTTP/1.1 200 OK\r\nSet-Cookie: a=1;\r\n Path=/\r\nX: y\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nX: y\r\n\r\n");
  EXPECT_EQ(
      Through("HTTP/1.1 200 OK\r\nSet-Cookie: a=1;\r\n\t Path=/v1/sessions/12/proxy/\r\n\r\n"),
      "HTTP/1.1 200 OK\r\nSet-Cookie: a=1; Path=/v1/sessions/12/proxy/\r\n\r\n");
}

TEST(ProxyResponseGuardTest, InterimHeadsAreFilteredAndTheBodyIsNot) {
  // A 100 Continue, then the final head: both filtered; the body is not a
  // head, whatever it looks like.
  std::string r =
      "HTTP/1.1 100 Continue\r\nSet-Cookie: a=1; Path=/\r\n\r\n"
      "HTTP/1.1 200 OK\r\nSet-Cookie: b=1; Path=/\r\n\r\n"
      "Set-Cookie: c=1; Path=/\r\n\r\n";
  EXPECT_EQ(Through(r, 7),
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"
            "Set-Cookie: c=1; Path=/\r\n\r\n");
  // After a 101 the WebSocket's bytes pass as they came.
  std::string ws = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02hi";
  EXPECT_EQ(Through(ws), ws);
}

TEST(ProxyResponseGuardTest, AnEndlessHeadIsRefused) {
  ProxyResponseGuard guard(kPrefix);
  ASSERT_TRUE(guard.Feed("HTTP/1.1 200 OK\r\n").ok());
  std::string line = "X-Pad: " + std::string(1000, 'a') + "\r\n";
  Status last;
  for (int i = 0; i < 70 && last.ok(); ++i) {
    auto r = guard.Feed(line);
    if (r.ok()) {
      EXPECT_EQ(*r, "");
    }
    last = r.status();
  }
  EXPECT_EQ(last.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::server
