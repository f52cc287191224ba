// Auth: identities and credentials. Users, groups (labs), API tokens, the
// agents' enrollment credentials and the audit log, over the Store.
//
// Tokens are 256-bit random secrets ("gpt_" + 64 hex digits; agents' node
// tokens "gpn_", the join token "gpj_"), shown once and stored only as their
// SHA-256. A token's public id is the first 12 hex digits of that hash.
// On first start Bootstrap() creates the user "admin" and its token
// (DATA_DIR/admin.token) and the join token (DATA_DIR/join.token), both mode
// 0600. Over TLS the join token file also carries the pool CA's fingerprint
// ("gpj_<secret>.<fingerprint hex>") so that agents can pin it.
//
// Authenticate() maps an "Authorization: Bearer <token>" header to a
// Principal (server/authz.h). Results are cached until a change to users,
// groups or tokens. Single-threaded (the server's event loop).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/authz.h"
#include "store/store.h"

namespace gpupool::server {

// A token just made: `secret` is shown to its owner once and never again.
struct IssuedToken {
  std::string secret;
  std::string id;
  TokenRecord record;
};

// The public id of a token record (12 hex digits of its hash).
std::string TokenId(const TokenRecord& t);

// Names of users, groups and nodes: 1-64 of [A-Za-z0-9_.-], starting with a
// letter or digit. InvalidArgument names `what`.
Status CheckName(std::string_view name, std::string_view what);

class Auth {
 public:
  struct Bootstrapped {
    std::string admin_token;  // set only when created by this call
    std::string join_token;   // as agents use it (with the CA fingerprint over TLS)
  };

  Auth(Store& store, const Clock& clock) : store_(store), clock_(clock) {}

  // Creates the admin user, its token and the join token if the store has
  // none yet. `ca_fingerprint` ("sha256:<hex>", or "" without TLS) goes into
  // the join token agents are given.
  Result<Bootstrapped> Bootstrap(const std::string& data_dir, const std::string& ca_fingerprint);

  // `header` is the Authorization header value. Unauthenticated when missing,
  // malformed, unknown, revoked or expired, or when its user is disabled.
  Result<Principal> Authenticate(std::string_view header);

  // A principal for `user` named by a trusted reverse proxy's header
  // (single sign-on): an unknown user is created as a member, a disabled one
  // is refused.
  Result<Principal> PrincipalForProxyUser(const std::string& user, const std::string& peer);

  // The join token as agents are given it.
  const std::string& join_token() const { return join_token_; }
  // Replaces the join token (DATA_DIR/join.token too); the old one stops
  // working at once. Enrolled agents keep their own credentials.
  Result<std::string> RotateJoinToken();

  // ---- tokens
  // `ttl_ms` 0 = never expires. `role` is the subject's role.
  Result<IssuedToken> CreateToken(const std::string& subject, Role role, const std::string& name,
                                  uint32_t scopes, int64_t ttl_ms);
  // The tokens of `subject` ("" = everyone's), oldest first.
  Result<std::vector<TokenRecord>> ListTokens(const std::string& subject);
  // NotFound unless `id` names one token that `by` may revoke (its own, or
  // any for admins).
  Result<TokenRecord> RevokeToken(const std::string& id, const Principal& by);

  // ---- users
  Result<UserRecord> AddUser(const std::string& name, Role role, const std::string& password_hash);
  Result<std::vector<UserRecord>> ListUsers();
  Result<std::optional<UserRecord>> GetUser(const std::string& name);
  // Disabling also revokes every token of the user.
  Result<UserRecord> SetDisabled(const std::string& name, bool disabled);
  Result<UserRecord> SetPasswordHash(const std::string& name, const std::string& hash);

  // ---- groups (labs)
  Result<GroupRecord> AddGroup(const std::string& name, bool shared_jobs);
  // Adds and removes members (each must be a user); returns the group.
  Result<GroupRecord> ChangeMembers(const std::string& name, const std::vector<std::string>& add,
                                    const std::vector<std::string>& remove,
                                    std::optional<bool> shared_jobs);
  Result<std::vector<GroupRecord>> ListGroups();
  // Whether `name` is a lab (a group made with AddGroup).
  Result<bool> IsLab(const std::string& name);

  // ---- agents
  // Issues node `node`'s credential, replacing an earlier one: a node token
  // (returned) and the record of its certificate (serial/fingerprint, "" when
  // enrolled without TLS). FailedPrecondition when the node was revoked.
  // Whether the caller may replace an existing credential is the API's
  // decision (authz: kNodeManage on a provider's node).
  Result<IssuedToken> EnrollAgent(const std::string& node, const std::string& owner,
                                  const std::string& cert_serial,
                                  const std::string& cert_fingerprint);
  // Revokes the node's token and certificate; it cannot enroll again until
  // AllowAgent.
  Result<AgentCredential> RevokeAgent(const std::string& node);
  Result<AgentCredential> AllowAgent(const std::string& node);
  Result<std::optional<AgentCredential>> GetAgentCredential(const std::string& node);
  Result<std::vector<AgentCredential>> ListAgentCredentials();

  // ---- audit
  // Appends to the audit log; a failure is logged, never returned (the
  // action it records already happened).
  void Audit(const std::string& actor, const std::string& action, const std::string& target,
             const std::string& detail, const std::string& peer = "", bool ok = true);
  Result<std::vector<AuditEntry>> ListAudit(int64_t after_id, int64_t before_id, int32_t limit);

 private:
  Result<IssuedToken> IssueToken(const std::string& prefix, const std::string& subject, Role role,
                                 const std::string& name, uint32_t scopes, int64_t ttl_ms);
  Result<Principal> Lookup(const std::string& hash);
  // The principal of user `u` with `scopes`; Unauthenticated when disabled.
  static Result<Principal> UserPrincipal(const UserRecord& u,
                                         const std::vector<GroupRecord>& groups, uint32_t scopes);
  Result<UserRecord> RequireUser(Tx& tx, const std::string& name);

  struct Cached {
    Principal principal;
    int64_t expires_ms = 0;  // 0 = never
  };

  Store& store_;
  const Clock& clock_;
  std::string join_token_;
  std::string join_path_;                             // DATA_DIR/join.token
  std::string ca_fingerprint_;                        // what join tokens carry
  std::map<std::string, Cached, std::less<>> cache_;  // token hash -> principal
};

}  // namespace gpupool::server
