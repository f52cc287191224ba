// Plain HTTP request/response values shared by the server and the client.
// No Beast types here: net/ converts at its edges.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::net {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // as sent: "/v1/jobs?state=running"
  std::string path;                            // decoded path without the query: "/v1/jobs"
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string peer;  // "127.0.0.1:53422"

  bool tls = false;  // arrived over TLS (https, wss)
  // Set only when the client presented a certificate that verified against
  // the server's client_ca_file (EKU clientAuth); empty otherwise.
  std::string client_cert_fingerprint;  // "sha256:<64 lower-case hex>"
  std::string client_cert_cn;           // the subject's common name
  std::string client_cert_serial;       // lower-case hex

  // The header's value, or empty when absent. `name` is lower-case.
  std::string Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::map<std::string, std::string> headers;
  std::string body;
};

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or "".
std::string CookieValue(std::string_view header, std::string_view name);
// The Cookie header without cookie `name`.
std::string WithoutCookie(std::string_view header, std::string_view name);

// The request as HTTP/1.1 bytes: request line with its target, the headers
// (with Content-Length set to the body's size), the body. For relaying a
// request to a backend.
std::string SerializeHttpRequest(const HttpRequest& req);

// "/v1/jobs//42/" -> {"v1", "jobs", "42"}: the non-empty segments of a
// path, as views into it.
std::vector<std::string_view> SplitPath(std::string_view path);

// Percent-decoding of a path or query component ('+' is a space in queries).
std::string UrlDecode(std::string_view s, bool plus_is_space);
std::string UrlEncode(std::string_view s);

// `s` with ASCII letters lowered (header names, URL schemes).
std::string AsciiLower(std::string_view s);

// Splits "http://host:port/prefix" into its parts. Schemes http and ws
// (default port 80), https and wss (default port 443).
struct Url {
  std::string scheme;  // "http", "https", "ws" or "wss", lower-case
  std::string host;
  uint16_t port = 0;
  std::string path;  // "" or "/prefix"
};
std::optional<Url> ParseUrl(std::string_view text);

// A gpupool server's error response ({"error": {"code": "NOT_FOUND",
// "message": ...}}) as the Status it was made from; a body without one is
// judged by the HTTP status alone. `what` names the call for the message
// when the body has none.
Status ErrorStatus(const HttpResponse& response, std::string_view what);

}  // namespace gpupool::net
