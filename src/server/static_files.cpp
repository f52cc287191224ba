#include "server/static_files.h"

#include <filesystem>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "common/safe_fs.h"
#include "net/http.h"
#include "server/http_errors.h"

namespace gpupool::server {

namespace {

// A path segment a dashboard file may have: letters, digits, '-', '_' and
// '.', not first. Anything else (a hidden file, "..", an encoded byte) is
// refused before the file system is asked.
bool IsPlainSegment(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.size() > 255) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string DefaultWebDir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return "";
  std::filesystem::path dir =
      (exe.parent_path().parent_path() / "share" / "gpupool" / "web").lexically_normal();
  return std::filesystem::is_regular_file(dir / "index.html", ec) ? dir.string() : "";
}

std::string ContentTypeFor(const std::string& file) {
  static const std::map<std::string, std::string, std::less<>> kTypes = {
      {"html", "text/html; charset=utf-8"},
      {"js", "text/javascript; charset=utf-8"},
      {"mjs", "text/javascript; charset=utf-8"},
      {"css", "text/css; charset=utf-8"},
      {"json", "application/json"},
      {"map", "application/json"},
      {"svg", "image/svg+xml"},
      {"png", "image/png"},
      {"ico", "image/x-icon"},
      {"woff2", "font/woff2"},
      {"txt", "text/plain; charset=utf-8"},
  };
  size_t dot = file.rfind('.');
  size_t slash = file.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return "application/octet-stream";
  auto it = kTypes.find(std::string_view(file).substr(dot + 1));
  return it == kTypes.end() ? "application/octet-stream" : it->second;
}

Result<std::unique_ptr<StaticFiles>> StaticFiles::Open(StaticFilesOptions options) {
  UniqueFd dir(::open(options.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return Status::FailedPrecondition("--web-dir " + options.dir + ": " + std::strerror(errno));
  }
  return std::unique_ptr<StaticFiles>(new StaticFiles(std::move(options), std::move(dir)));
}

void StaticFiles::AddRoutes(ApiRoutes& t) {
  t.AddPublic("GET", "/ui",
              [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
                Serve(options_.index_file, respond);
              });
  t.AddPublic("GET", "/ui/{file...}",
              [this](net::HttpRequest&, const Principal&, const PathParams& params,
                     Respond respond) { Serve(params.find("file")->second, respond); });
}

void StaticFiles::Serve(const std::string& file, Respond respond) const {
  // One answer for every refusal: it must not tell what exists.
  const Status not_found = Status::NotFound("no such file: /ui/" + file);
  const auto segments = net::SplitPath(file);
  if (segments.empty() || segments.size() > 16) return (*respond)(ErrorResponse(not_found));
  for (std::string_view s : segments) {
    if (!IsPlainSegment(s)) return (*respond)(ErrorResponse(not_found));
  }
  auto body = ReadFileBeneath(dir_.get(), file, options_.max_file_bytes);
  if (!body.ok()) return (*respond)(ErrorResponse(not_found));
  net::HttpResponse r;
  r.status = 200;
  r.content_type = ContentTypeFor(file);
  r.body = *std::move(body);
  r.headers["x-content-type-options"] = "nosniff";
  r.headers["content-security-policy"] =
      "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
  r.headers["cache-control"] = "no-cache";
  // No other page of this origin (a session's Jupyter, through the proxy)
  // keeps a handle on a dashboard window it opened.
  r.headers["cross-origin-opener-policy"] = "same-origin";
  r.headers["referrer-policy"] = "no-referrer";
  (*respond)(std::move(r));
}

}  // namespace gpupool::server
