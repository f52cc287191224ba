#include "server/proxy_response_guard.h"

#include <cctype>

#include "net/http.h"

namespace gpupool::server {

namespace {

constexpr size_t kMaxHeadBytes = 64 * 1024;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Whether a Set-Cookie value stays within `prefix` (a path ending in '/').
bool CookieAllowed(std::string_view value, std::string_view prefix) {
  size_t semi = value.find(';');
  std::string_view pair = Trim(value.substr(0, semi));
  std::string name = net::AsciiLower(Trim(pair.substr(0, pair.find('='))));
  if (name.empty() || StartsWith(name, "gpupool") || StartsWith(name, "__host-") ||
      StartsWith(name, "__secure-")) {
    return false;
  }
  std::string_view bare = prefix.substr(0, prefix.size() - 1);  // the prefix without its '/'
  while (semi != std::string_view::npos) {
    value.remove_prefix(semi + 1);
    semi = value.find(';');
    std::string_view attr = Trim(value.substr(0, semi));
    size_t eq = attr.find('=');
    std::string key = net::AsciiLower(Trim(attr.substr(0, eq)));
    std::string_view arg = eq == std::string_view::npos ? "" : Trim(attr.substr(eq + 1));
    if (key == "domain") return false;
    // No Path: the browser takes the request's directory, inside the prefix.
    if (key == "path" && arg != bare && !StartsWith(arg, prefix)) return false;
  }
  return true;
}

}  // namespace

ProxyResponseGuard::ProxyResponseGuard(std::string path_prefix) : prefix_(std::move(path_prefix)) {
  if (prefix_.empty() || prefix_.back() != '/') prefix_ += '/';
}

bool ProxyResponseGuard::HeaderAllowed(std::string_view line) const {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return true;
  std::string name = net::AsciiLower(Trim(line.substr(0, colon)));
  if (name == "clear-site-data" || name == "set-cookie2") return false;
  if (name == "set-cookie") return CookieAllowed(line.substr(colon + 1), prefix_);
  return true;
}

Result<std::string> ProxyResponseGuard::Feed(std::string_view bytes) {
  if (passing_) return std::string(bytes);
  head_.append(bytes);
  std::string out;
  for (;;) {
    size_t end = head_.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (head_.size() > kMaxHeadBytes) {
        return Status::InvalidArgument("the notebook server's response head is over 64 KiB");
      }
      return out;
    }
    std::string_view head(head_.data(), end + 2);  // its lines, each ending in CRLF
    // The status line first, as it came.
    size_t eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    out.append(status_line).append("\r\n");
    // Each header whole: a folded one (obs-fold) is unfolded first, as a
    // browser would read it, and passed on unfolded (RFC 9112, 5.2).
    std::string header;
    auto flush = [&] {
      if (!header.empty() && HeaderAllowed(header)) out.append(header).append("\r\n");
      header.clear();
    };
    for (size_t at = eol + 2; at < head.size();) {
      size_t next = head.find("\r\n", at);
      std::string_view line = head.substr(at, next - at);
      at = next + 2;
      if (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
        header.append(" ").append(Trim(line));
        continue;
      }
      flush();
      header = line;
    }
    flush();
    out.append("\r\n");
    // "HTTP/1.1 1xx": an interim head; another follows. 101 switches protocols.
    bool interim =
        status_line.size() >= 12 && status_line[9] == '1' && status_line.substr(9, 3) != "101";
    head_.erase(0, end + 4);
    if (!interim) {
      passing_ = true;
      out.append(head_);
      head_.clear();
      head_.shrink_to_fit();
      return out;
    }
  }
}

}  // namespace gpupool::server
