// Auth: bearer tokens for the API and the agent channel.
//
// On first start the server makes an admin token (DATA_DIR/admin.token) and
// a join token for agents (DATA_DIR/join.token), both mode 0600. Only their
// SHA-256 hashes go into the store; the secrets live in those files alone.
// Authenticate() maps an "Authorization: Bearer <token>" header to who is
// calling. Single-threaded (the server's event loop).
#pragma once

#include <map>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"

namespace gpupool::server {

struct Principal {
  std::string subject;  // "admin", a user name, or "agent"
  std::string role;     // "admin", "member", "agent-join"
  bool is_admin() const { return role == "admin"; }
};

class Auth {
 public:
  struct Bootstrapped {
    std::string admin_token;  // set only when created by this call
    std::string join_token;   // the join token (read back from its file otherwise)
  };

  Auth(Store& store, const Clock& clock) : store_(store), clock_(clock) {}

  // Creates the admin and join tokens if the store has none yet.
  Result<Bootstrapped> Bootstrap(const std::string& data_dir);

  // `header` is the Authorization header value. Unauthenticated when missing,
  // malformed, unknown, revoked or expired.
  Result<Principal> Authenticate(const std::string& header);

  // The join token's secret, as written to DATA_DIR/join.token.
  const std::string& join_token() const { return join_token_; }

 private:
  Store& store_;
  const Clock& clock_;
  std::string join_token_;
  std::map<std::string, Principal> cache_;  // token hash -> principal
};

}  // namespace gpupool::server
