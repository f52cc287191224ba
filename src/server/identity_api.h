// IdentityApi: the REST endpoints for identities and credentials (see
// docs/api.md#identities): login, whoami, users, groups (labs), tokens, the
// audit log, agent enrollment, and revoking nodes.
//
// Every call is authorized through server/authz.h. Password hashing runs on
// a worker thread; its result comes back to the event loop. Single-threaded
// otherwise (the server's event loop).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "net/pki.h"
#include "server/api_module.h"
#include "server/auth.h"
#include "server/login_throttle.h"
#include "server/worker_pool.h"

namespace gpupool::server {

struct IdentityApiOptions {
  int64_t login_token_ttl_ms = 30LL * 24 * 3600 * 1000;  // tokens from `gpupool login`
  int64_t browser_session_ttl_ms = 12LL * 3600 * 1000;   // the dashboard's sign-ins, at most
  // As long as the pool CA lives: the server's record of each node's
  // certificate, not its expiry, is what revokes it, and agents have no
  // renewal to miss.
  int64_t agent_cert_days = 3650;
  LoginLimits login_limits;  // failed password logins per address and per user
  // The pool CA (TLS on): enrollment signs agents' client certificates with it.
  std::optional<net::PemPair> ca;
  std::string ca_fingerprint;
};

class IdentityApi : public ApiModule {
 public:
  // Called after a node's credential was revoked (close its connection,
  // requeue its work).
  using RevokedHook = std::function<void(const std::string& node, const std::string& reason)>;

  IdentityApi(net::EventLoop& loop, Auth& auth, const Clock& clock, IdentityApiOptions options,
              RevokedHook on_revoked);

  // The endpoints, each with the action it needs; POST /v1/login is public.
  void AddRoutes(ApiRoutes& routes) override;

 private:
  void Login(const net::HttpRequest& req, Respond respond);
  void Logout(const net::HttpRequest& req, const Principal& who, Respond respond);
  void ListUsers(const net::HttpRequest& req, Respond respond);
  void SetDisabled(const net::HttpRequest& req, const Principal& who, const std::string& name,
                   bool disable, Respond respond);
  void GroupMembers(const std::string& name, Respond respond);
  void RevokeToken(const net::HttpRequest& req, const Principal& who, const std::string& id,
                   Respond respond);
  void ListAgents(const net::HttpRequest& req, const Principal& who, Respond respond);
  void AllowNode(const net::HttpRequest& req, const Principal& who, const std::string& node,
                 Respond respond);
  void RotateJoinToken(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Whoami(const net::HttpRequest& req, const Principal& who, Respond respond);
  void AddUser(const net::HttpRequest& req, const Principal& who, Respond respond);
  void SetPassword(const net::HttpRequest& req, const Principal& who, const std::string& user,
                   Respond respond);
  void CreateToken(const net::HttpRequest& req, const Principal& who, Respond respond);
  void ListTokens(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Enroll(const net::HttpRequest& req, const Principal& who, Respond respond);
  void RevokeNode(const net::HttpRequest& req, const Principal& who, const std::string& node,
                  Respond respond);
  void ChangeGroup(const net::HttpRequest& req, const Principal& who, const std::string& name,
                   Respond respond);
  void AddGroup(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Audit(const net::HttpRequest& req, Respond respond);

  // Hashes `password` on the worker, then calls `then(hash)` on the loop.
  void HashOffLoop(std::string password, Respond respond,
                   std::function<void(const std::string& hash)> then);

  net::EventLoop& loop_;
  Auth& auth_;
  const Clock& clock_;
  IdentityApiOptions options_;
  RevokedHook on_revoked_;
  LoginThrottle login_throttle_;
  WorkerPool hasher_{1};
};

}  // namespace gpupool::server
