#include "agent/enrollment.h"

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"
#include "net/http.h"
#include "net/http_client.h"
#include "net/pki.h"
#include "net/server_list.h"

namespace gpupool::agent {

using nlohmann::json;

Result<JoinToken> ParseJoinToken(std::string_view token) {
  JoinToken out;
  size_t dot = token.find('.');
  out.secret = std::string(token.substr(0, dot));
  if (out.secret.empty()) return Status::InvalidArgument("join token: empty");
  if (dot != std::string_view::npos) {
    auto fp = net::NormalizeFingerprint(token.substr(dot + 1));
    if (!fp.ok()) {
      return Status::InvalidArgument(
          "join token: the part after '.' must be the pool CA's SHA-256 fingerprint (64 hex "
          "digits); copy the whole token from `gpupool admin join-token`");
    }
    out.ca_fingerprint = *fp;
  }
  return out;
}

namespace {

struct Paths {
  explicit Paths(const std::string& data_dir) : dir(data_dir + "/credentials") {}
  std::string dir;
  std::string state() const { return dir + "/node.json"; }
  std::string key() const { return dir + "/client.key"; }
  std::string cert() const { return dir + "/client.crt"; }
};

// The server-side check of the server: a pin, a CA file, or nothing.
net::TlsClientConfig ServerCheck(const EnrollOptions& o, const std::string& pin) {
  net::TlsClientConfig tls;
  tls.ca_file = o.ca_file;
  tls.insecure = o.insecure;
  if (o.ca_file.empty() && !o.insecure) tls.ca_fingerprint = pin;
  return tls;
}

Result<AgentCredentials> Enroll(const EnrollOptions& o, const Paths& paths) {
  GP_ASSIGN_OR_RETURN(JoinToken join, ParseJoinToken(o.join_token));
  const std::vector<std::string> servers = net::SplitServerList(o.server_url);
  auto url = net::ParseUrl(servers.empty() ? o.server_url : servers.front());
  bool tls_on = url && (url->scheme == "https" || url->scheme == "wss");
  if (tls_on && join.ca_fingerprint.empty() && o.ca_file.empty() && !o.insecure) {
    GP_LOG(kWarn) << "the join token carries no CA fingerprint; trusting the system's CAs";
  }
  AgentCredentials creds;
  creds.tls = ServerCheck(o, join.ca_fingerprint);
  net::PemPair csr;
  if (tls_on) {
    GP_ASSIGN_OR_RETURN(csr, net::CreateKeyAndCsr(o.node_name));
  }
  net::HttpCall call;
  call.base_url = o.server_url;
  call.method = "POST";
  call.target = "/v1/agent/enroll";
  call.headers["Authorization"] = "Bearer " + join.secret;
  call.headers["Content-Type"] = "application/json";
  json body = {{"node", o.node_name}};
  if (tls_on) body["csr"] = csr.cert;
  call.body = body.dump();
  call.tls = creds.tls;
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, net::Fetch(call));
  if (r.status != 201) return net::ErrorStatus(r, "enrolling node " + o.node_name);
  json answer = json::parse(r.body, nullptr, false);
  if (!answer.is_object() || !answer.contains("token") || !answer["token"].is_string())
    return Status::Internal("enrolling: the server's answer has no token");
  creds.node_token = answer["token"].get<std::string>();
  std::error_code ec;
  std::filesystem::create_directories(paths.dir, ec);
  if (ec) return Status::Internal("cannot create " + paths.dir + ": " + ec.message());
  ::chmod(paths.dir.c_str(), 0700);
  if (tls_on) {
    std::string cert = answer.value("certificate", "");
    if (cert.empty()) return Status::Internal("enrolling: the server sent no client certificate");
    GP_RETURN_IF_ERROR(WriteFileAtomic(paths.key(), csr.key, {0600, true}));
    GP_RETURN_IF_ERROR(WriteFileAtomic(paths.cert(), cert, {0644, true}));
    creds.tls.client_cert_file = paths.cert();
    creds.tls.client_key_file = paths.key();
  }
  // Last: its presence says the enrollment is complete.
  json state = {{"node", o.node_name},
                {"server", o.server_url},
                {"token", creds.node_token},
                {"ca_fingerprint", join.ca_fingerprint}};
  GP_RETURN_IF_ERROR(WriteFileAtomic(paths.state(), state.dump(2) + "\n", {0600, true}));
  GP_LOG(kInfo) << "enrolled as node " << o.node_name << " at " << o.server_url
                << (tls_on ? " (client certificate in " + paths.cert() + ")" : "");
  return creds;
}

}  // namespace

Result<AgentCredentials> LoadOrEnroll(const EnrollOptions& o) {
  Paths paths(o.data_dir);
  auto text = ReadFile(paths.state());
  if (text.ok()) {
    json j = json::parse(*text, nullptr, false);
    bool same = j.is_object() && j.value("node", "") == o.node_name &&
                j.value("server", "") == o.server_url && j.contains("token") &&
                j["token"].is_string();
    if (same) {
      AgentCredentials creds;
      creds.node_token = j["token"].get<std::string>();
      creds.tls = ServerCheck(o, j.value("ca_fingerprint", ""));
      if (std::filesystem::exists(paths.cert())) {
        creds.tls.client_cert_file = paths.cert();
        creds.tls.client_key_file = paths.key();
      }
      return creds;
    }
    GP_LOG(kInfo) << paths.state() << " is for another node name or server: enrolling again";
  }
  if (o.join_token.empty()) {
    return Status::FailedPrecondition(
        "this agent is not enrolled yet: give it the pool's join token (--join-token-file; "
        "`gpupool admin join-token` prints it)");
  }
  return Enroll(o, paths);
}

}  // namespace gpupool::agent
