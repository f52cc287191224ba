#include "net/http.h"

#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>

namespace gpupool::net {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

}  // namespace

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j;
  }
  return parts;
}

std::string SerializeHttpRequest(const HttpRequest& req) {
  // The body is whole and de-chunked: its framing is Content-Length, for a
  // body, for the methods that carry one (an empty POST still says 0), and
  // when the request said it.
  bool has_length = !req.body.empty() || req.method == "POST" || req.method == "PUT" ||
                    req.method == "PATCH" || req.headers.count("content-length") > 0;
  size_t size = req.method.size() + req.target.size() + 16 + req.body.size();
  for (const auto& [name, value] : req.headers) size += name.size() + value.size() + 4;
  std::string out;
  out.reserve(size + 32);
  out.append(req.method).append(" ").append(req.target).append(" HTTP/1.1\r\n");
  for (const auto& [name, value] : req.headers) {
    if (name == "content-length" || name == "transfer-encoding") continue;
    out.append(name).append(": ").append(value).append("\r\n");
  }
  if (has_length) {
    out.append("content-length: ").append(std::to_string(req.body.size())).append("\r\n");
  }
  out.append("\r\n").append(req.body);
  return out;
}

std::string HttpRequest::Header(std::string_view name) const {
  auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]);
      int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);  // malformed escapes are kept as they are
    }
  }
  return out;
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (IsUnreserved(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<Url> ParseUrl(std::string_view text) {
  Url url;
  size_t sep = text.find("://");
  if (sep == std::string_view::npos) return std::nullopt;
  url.scheme = AsciiLower(text.substr(0, sep));
  bool tls = url.scheme == "https" || url.scheme == "wss";
  if (!tls && url.scheme != "http" && url.scheme != "ws") return std::nullopt;
  std::string_view rest = text.substr(sep + 3);
  size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return std::nullopt;  // no userinfo

  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return std::nullopt;
      port_text = after.substr(1);
      if (port_text.empty()) return std::nullopt;
    }
  } else {
    size_t colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return std::nullopt;
    }
  }
  if (url.host.empty()) return std::nullopt;

  url.port = tls ? 443 : 80;
  if (!port_text.empty()) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return std::nullopt;
    }
    url.port = static_cast<uint16_t>(value);
  }

  // "http://h/" and "http://h" both mean no prefix; "/api/" means "/api".
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  if (path == "/") path = {};
  url.path = std::string(path);
  return url;
}

namespace {

StatusCode CodeForHttpStatus(int status) {
  switch (status) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return StatusCode::kFailedPrecondition;
    case 429:
      return StatusCode::kResourceExhausted;
    case 503:
      return StatusCode::kUnavailable;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      return StatusCode::kInternal;
  }
}

std::optional<StatusCode> CodeNamed(std::string_view name) {
  for (int c = 1;; ++c) {
    std::string_view known = StatusCodeName(static_cast<StatusCode>(c));
    if (known == "UNKNOWN") return std::nullopt;
    if (known == name) return static_cast<StatusCode>(c);
  }
}

}  // namespace

Status ErrorStatus(const HttpResponse& response, std::string_view what) {
  auto j = nlohmann::json::parse(response.body, nullptr, false);
  StatusCode code = CodeForHttpStatus(response.status);
  std::string message = std::string(what) + ": HTTP " + std::to_string(response.status);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const nlohmann::json& e = j["error"];
    if (e.contains("message") && e["message"].is_string()) message = e["message"];
    if (e.contains("code") && e["code"].is_string()) {
      code = CodeNamed(e["code"].get<std::string>()).value_or(code);
    }
  }
  return Status(code, message);
}

namespace {

// The items of a Cookie header ("a=1; b=2" -> "a=1", "b=2").
std::vector<std::string_view> CookieItems(std::string_view header) {
  std::vector<std::string_view> out;
  while (!header.empty()) {
    size_t end = std::min(header.find(';'), header.size());
    std::string_view item = header.substr(0, end);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (!item.empty()) out.push_back(item);
    header.remove_prefix(std::min(end + 1, header.size()));
  }
  return out;
}

bool IsCookie(std::string_view item, std::string_view name) {
  return item.size() > name.size() && item.starts_with(name) && item[name.size()] == '=';
}

}  // namespace

std::string CookieValue(std::string_view header, std::string_view name) {
  for (std::string_view item : CookieItems(header)) {
    if (IsCookie(item, name)) return std::string(item.substr(name.size() + 1));
  }
  return "";
}

std::string WithoutCookie(std::string_view header, std::string_view name) {
  std::string out;
  for (std::string_view item : CookieItems(header)) {
    if (IsCookie(item, name)) continue;
    if (!out.empty()) out += "; ";
    out += item;
  }
  return out;
}

}  // namespace gpupool::net
