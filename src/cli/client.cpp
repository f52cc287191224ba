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

Result<Endpoint> ResolveEndpoint(const std::string& server_flag, const std::string& token_flag) {
  Endpoint e;
  if (auto text = ReadFile(ConfigPath()); text.ok()) {
    json j = json::parse(*text, nullptr, false);
    if (j.is_object()) {
      if (j.contains("server") && j["server"].is_string()) e.server = j["server"];
      if (j.contains("token") && j["token"].is_string()) e.token = j["token"];
    }
  }
  if (const char* s = std::getenv("GPUPOOL_SERVER"); s && *s) e.server = s;
  if (const char* t = std::getenv("GPUPOOL_TOKEN"); t && *t) e.token = t;
  if (!server_flag.empty()) e.server = server_flag;
  if (!token_flag.empty()) e.token = token_flag;
  if (e.server.empty()) {
    return Status::FailedPrecondition(
        "no server: pass --server URL, set GPUPOOL_SERVER, or start a local pool with `gpupool "
        "dev`");
  }
  while (!e.server.empty() && e.server.back() == '/') e.server.pop_back();
  return e;
}

Status WriteConfig(const std::string& path, const Endpoint& e) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  return WriteFileAtomic(path, json{{"server", e.server}, {"token", e.token}}.dump(2) + "\n",
                         {0600, false});
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
    case 404:
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
