#include "cli/client.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "common/files.h"
#include "net/http_client.h"

namespace gpupool::cli {

using nlohmann::json;

std::string ConfigPath() {
  if (const char* p = std::getenv("GPUPOOL_CONFIG"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    return std::string(x) + "/gpupool/config.json";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/gpupool/config.json";
}

Result<Endpoint> ResolveEndpoint(const Endpoint& flags) {
  Endpoint e;
  auto take = [](std::string& field, const std::string& value) {
    if (!value.empty()) field = value;
  };
  if (auto text = ReadFile(ConfigPath()); text.ok()) {
    json j = json::parse(*text, nullptr, false);
    if (j.is_object()) {
      auto str = [&](const char* key) {
        return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
      };
      e.server = str("server");
      e.token = str("token");
      e.tls.ca_fingerprint = str("ca_fingerprint");
      e.tls.ca_file = str("ca_file");
      e.tls.insecure = j.value("insecure", false);
    }
  }
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  take(e.server, env("GPUPOOL_SERVER"));
  take(e.token, env("GPUPOOL_TOKEN"));
  take(e.tls.ca_fingerprint, env("GPUPOOL_CA_FINGERPRINT"));
  take(e.tls.ca_file, env("GPUPOOL_CA_FILE"));
  take(e.server, flags.server);
  take(e.token, flags.token);
  take(e.tls.ca_fingerprint, flags.tls.ca_fingerprint);
  take(e.tls.ca_file, flags.tls.ca_file);
  e.tls.insecure = e.tls.insecure || flags.tls.insecure;
  if (e.server.empty()) {
    return Status::FailedPrecondition(
        "no server: run `gpupool login --server URL`, pass --server URL, set GPUPOOL_SERVER, or "
        "start a local pool with `gpupool dev`");
  }
  while (!e.server.empty() && e.server.back() == '/') e.server.pop_back();
  return e;
}

Status WriteConfig(const std::string& path, const Endpoint& e) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  json j = {{"server", e.server}, {"token", e.token}};
  if (!e.tls.ca_fingerprint.empty()) j["ca_fingerprint"] = e.tls.ca_fingerprint;
  if (!e.tls.ca_file.empty()) j["ca_file"] = e.tls.ca_file;
  if (e.tls.insecure) j["insecure"] = true;
  // 0600: the file holds a token.
  return WriteFileAtomic(path, j.dump(2) + "\n", {0600, false});
}

Result<json> ApiClient::Get(const std::string& target, int64_t timeout_ms) {
  return Call("GET", target, "", timeout_ms);
}

Result<json> ApiClient::Post(const std::string& target, const json& body) {
  return Call("POST", target, body.dump(), 30'000);
}

Result<json> ApiClient::Call(const std::string& method, const std::string& target,
                             const std::string& body, int64_t timeout_ms) {
  net::HttpCall call;
  call.base_url = e_.server;
  call.method = method;
  call.target = target;
  call.body = body;
  call.timeout_ms = timeout_ms;
  call.tls = e_.tls;
  if (!e_.token.empty()) call.headers["Authorization"] = "Bearer " + e_.token;
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, net::Fetch(call));
  json j = json::parse(r.body, nullptr, false);
  if (r.status >= 200 && r.status < 300) {
    if (j.is_discarded()) return Status::Internal("the server sent invalid JSON");
    return j;
  }
  std::string message = "HTTP " + std::to_string(r.status);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message")) {
    message = j["error"]["message"].get<std::string>();
  }
  switch (r.status) {
    case 400:
      return Status::InvalidArgument(message);
    case 401:
      return Status::Unauthenticated(message + " (check --token or GPUPOOL_TOKEN)");
    case 403:
      return Status::PermissionDenied(message);
    case 429:
      return Status::ResourceExhausted(message);
    case 404:
    case 410:  // gone for good (a job's logs that retention removed)
      return Status::NotFound(message);
    case 409:
      return Status::FailedPrecondition(message);
    case 503:
      return Status::Unavailable(message);
    default:
      return Status::Internal(message);
  }
}

}  // namespace gpupool::cli
