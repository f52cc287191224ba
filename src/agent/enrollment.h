// Enrollment: how an agent gets its own credential.
//
// The pool's join token ("gpj_<secret>.<CA fingerprint hex>", from
// `gpupool admin join-token`) is good for one thing: POST /v1/agent/enroll.
// The agent pins the CA fingerprint it carries (as kubeadm and k3s do), makes
// a P-256 key and a CSR for its node name, and gets back a node token and,
// over TLS, a client certificate signed by the pool CA. Those live in
// DATA_DIR/credentials (mode 0700; key and token 0600) and are used for the
// agent channel and every blob transfer; the join token is not needed again
// while they exist.
//
// Blocking; runs once before the agent starts.
#pragma once

#include <string>

#include "common/status.h"
#include "net/tls.h"

namespace gpupool::agent {

// The join token split into the secret (sent to the server) and the CA
// fingerprint ("sha256:<hex>", "" when the token carries none).
struct JoinToken {
  std::string secret;
  std::string ca_fingerprint;
};
// InvalidArgument when the fingerprint part is not 64 hex digits.
Result<JoinToken> ParseJoinToken(std::string_view token);

struct AgentCredentials {
  std::string node_token;
  net::TlsClientConfig tls;  // the pin (or CA file) and the client certificate
};

struct EnrollOptions {
  std::string server_url;
  std::string join_token;
  std::string data_dir;
  std::string node_name;
  std::string ca_file;    // trust this CA bundle instead of the join token's pin
  bool insecure = false;  // no check of the server's certificate (development)
};

// The credentials saved in DATA_DIR/credentials for this node and server, or
// new ones from enrolling. Unavailable when the server cannot be reached;
// the server's refusal (a wrong join token, a revoked node) otherwise.
Result<AgentCredentials> LoadOrEnroll(const EnrollOptions& options);

}  // namespace gpupool::agent
