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

namespace {

// "https://a:8470/" and "https://a:8470" are one server.
std::string SameServerForm(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// What the config file keeps for one server.
Endpoint EntryFromJson(const json& j) {
  Endpoint e;
  if (!j.is_object()) return e;
  auto str = [&](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  };
  e.server = SameServerForm(str("server"));
  e.token = str("token");
  e.tls.ca_fingerprint = str("ca_fingerprint");
  e.tls.ca_file = str("ca_file");
  e.tls.insecure =
      j.contains("insecure") && j["insecure"].is_boolean() && j["insecure"].get<bool>();
  return e;
}

json EntryToJson(const Endpoint& e) {
  json j = json::object();
  if (!e.token.empty()) j["token"] = e.token;
  if (!e.tls.ca_fingerprint.empty()) j["ca_fingerprint"] = e.tls.ca_fingerprint;
  if (!e.tls.ca_file.empty()) j["ca_file"] = e.tls.ca_file;
  if (e.tls.insecure) j["insecure"] = true;
  return j;
}

json ReadConfigJson() {
  auto text = ReadFile(ConfigPath());
  if (!text.ok()) return json::object();
  json j = json::parse(*text, nullptr, false);
  return j.is_object() ? j : json::object();
}

// The file's credentials for `server`: its entry under "servers", or the
// top-level fields when they are that server's (files written before
// "servers" existed). Nothing for a server the file does not know.
Endpoint StoredFor(const json& config, const std::string& server) {
  if (config.contains("servers") && config["servers"].is_object()) {
    for (const auto& [url, entry] : config["servers"].items()) {
      if (SameServerForm(url) != server) continue;
      Endpoint e = EntryFromJson(entry);
      e.server = server;
      return e;
    }
  }
  Endpoint top = EntryFromJson(config);
  if (top.server == server) return top;
  Endpoint none;
  none.server = server;
  return none;
}

}  // namespace

Result<Endpoint> ResolveEndpoint(const Endpoint& flags) {
  const json config = ReadConfigJson();
  const std::string env_server = SameServerForm(Env("GPUPOOL_SERVER"));
  std::string server = SameServerForm(flags.server);
  if (server.empty()) server = env_server;
  if (server.empty()) server = EntryFromJson(config).server;
  if (server.empty()) {
    return Status::FailedPrecondition(
        "no server: run `gpupool login --server URL`, pass --server URL, set GPUPOOL_SERVER, or "
        "start a local pool with `gpupool dev`");
  }
  // A pin or token belongs to the server it was given with: the file's to
  // the server it was stored for; the environment's to GPUPOOL_SERVER (or,
  // when that is unset, to whichever server is used); the flags' to the
  // server used.
  Endpoint e = StoredFor(config, server);
  auto take = [](std::string& field, const std::string& value) {
    if (!value.empty()) field = value;
  };
  if (env_server.empty() || env_server == server) {
    take(e.token, Env("GPUPOOL_TOKEN"));
    take(e.tls.ca_fingerprint, Env("GPUPOOL_CA_FINGERPRINT"));
    take(e.tls.ca_file, Env("GPUPOOL_CA_FILE"));
  }
  take(e.token, flags.token);
  take(e.tls.ca_fingerprint, flags.tls.ca_fingerprint);
  take(e.tls.ca_file, flags.tls.ca_file);
  e.tls.insecure = e.tls.insecure || flags.tls.insecure;
  return e;
}

Status WriteConfig(const std::string& path, const Endpoint& e) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  json j = json::object();
  if (auto text = ReadFile(path); text.ok()) {
    json old = json::parse(*text, nullptr, false);
    if (old.is_object() && old.contains("servers") && old["servers"].is_object())
      j["servers"] = old["servers"];
    // A file from before "servers": keep its server's credentials too.
    Endpoint top = EntryFromJson(old);
    if (!top.server.empty() && top.server != SameServerForm(e.server) &&
        !(j.contains("servers") && j["servers"].contains(top.server))) {
      j["servers"][top.server] = EntryToJson(top);
    }
  }
  const std::string server = SameServerForm(e.server);
  const json entry = EntryToJson(e);
  j["servers"][server] = entry;
  // The top level names the default server (the one used when neither
  // --server nor GPUPOOL_SERVER names one) and repeats its credentials,
  // which is all that gpupool versions before "servers" read.
  j["server"] = server;
  for (const char* key : {"token", "ca_fingerprint", "ca_file", "insecure"})
    j.erase(std::string(key));
  for (const auto& [key, value] : entry.items()) j[key] = value;
  // 0600: the file holds tokens.
  return WriteFileAtomic(path, j.dump(2) + "\n", {0600, false});
}

Result<json> ApiClient::Get(const std::string& target, int64_t timeout_ms) {
  return Call("GET", target, "", timeout_ms);
}

Result<json> ApiClient::Post(const std::string& target, const json& body, int64_t timeout_ms) {
  return Call("POST", target, body.dump(), timeout_ms);
}

Result<json> ApiClient::Put(const std::string& target, const json& body) {
  return Call("PUT", target, body.dump(), 30'000);
}

Result<json> ApiClient::Delete(const std::string& target) {
  return Call("DELETE", target, "", 30'000);
}

Result<net::HttpResponse> ApiClient::Send(const std::string& method, const std::string& target,
                                          const std::string& body, int64_t timeout_ms) {
  net::HttpCall call;
  call.base_url = e_.server;
  call.method = method;
  call.target = target;
  call.body = body;
  call.timeout_ms = timeout_ms;
  call.tls = e_.tls;
  if (!e_.token.empty()) call.headers["Authorization"] = "Bearer " + e_.token;
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, keep_ ? keep_->Fetch(call) : net::Fetch(call));
  if (r.status >= 200 && r.status < 300) return r;
  json j = json::parse(r.body, nullptr, false);
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
    case 413:
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

Result<std::string> ApiClient::GetBytes(const std::string& target, int64_t timeout_ms) {
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, Send("GET", target, "", timeout_ms));
  return std::move(r.body);
}

Result<json> ApiClient::Call(const std::string& method, const std::string& target,
                             const std::string& body, int64_t timeout_ms) {
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, Send(method, target, body, timeout_ms));
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return Status::Internal("the server sent invalid JSON");
  return j;
}

}  // namespace gpupool::cli
