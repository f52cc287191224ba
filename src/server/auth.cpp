#include "server/auth.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "common/files.h"
#include "common/ids.h"
#include "common/log.h"

namespace gpupool::server {

namespace {

constexpr std::string_view kBearer = "Bearer ";
constexpr size_t kMaxTokenBytes = 512;

// "gpj_<secret>.<fingerprint hex>" -> "gpj_<secret>": the fingerprint is for
// the agent, the secret for the server.
std::string_view SecretPart(std::string_view token) { return token.substr(0, token.find('.')); }

std::string JoinTokenFor(std::string_view secret, const std::string& ca_fingerprint) {
  std::string out(secret);
  if (!ca_fingerprint.empty()) {
    std::string_view hex = ca_fingerprint;
    if (hex.starts_with("sha256:")) hex.remove_prefix(7);
    out += ".";
    out += hex;
  }
  return out;
}

// Revokes the token stored under `hash`, if there is one.
Status RevokeTokenHash(Tx& tx, const std::string& hash) {
  GP_ASSIGN_OR_RETURN(auto token, tx.GetToken(hash));
  if (!token) return Status::Ok();
  token->revoked = true;
  return tx.PutToken(*token);
}

// One read in its own transaction.
template <typename T>
Result<T> ReadTx(Store& store, const std::function<Result<T>(Tx&)>& read) {
  std::optional<T> out;
  GP_RETURN_IF_ERROR(store.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(out, read(tx));
    return Status::Ok();
  }));
  return *std::move(out);
}

}  // namespace

std::string TokenId(const TokenRecord& t) { return t.hash.substr(0, 12); }

Status CheckName(std::string_view name, std::string_view what) {
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  };
  bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), ok_char) &&
            name.front() != '.' && name.front() != '-' && name.front() != '_';
  if (ok) return Status::Ok();
  return Status::InvalidArgument(std::string(what) +
                                 ": 1 to 64 letters, digits, '_', '.' or '-', starting with a "
                                 "letter or digit");
}

Result<Auth::Bootstrapped> Auth::Bootstrap(const std::string& data_dir,
                                           const std::string& ca_fingerprint) {
  Bootstrapped out;
  std::string join_path = data_dir + "/join.token";
  std::string admin_path = data_dir + "/admin.token";
  std::string join_secret;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    int64_t now = clock_.NowMs();
    GP_ASSIGN_OR_RETURN(auto done, tx.GetMeta("auth/bootstrapped"));
    if (!done) {
      out.admin_token = "gpt_" + RandomHex(32);
      join_secret = "gpj_" + RandomHex(32);
      GP_RETURN_IF_ERROR(tx.PutToken(
          {Sha256Hex(out.admin_token), "admin", "admin", now, 0, false, "bootstrap", "*"}));
      GP_RETURN_IF_ERROR(
          tx.PutToken({Sha256Hex(join_secret), "join", "agent-join", now, 0, false, "join", "*"}));
      // Files first: if writing them fails the transaction rolls back and the
      // next start tries again.
      GP_RETURN_IF_ERROR(WriteFileAtomic(admin_path, out.admin_token + "\n", {0600, true}));
      GP_RETURN_IF_ERROR(WriteFileAtomic(join_path, join_secret + "\n", {0600, true}));
      GP_RETURN_IF_ERROR(tx.PutMeta("auth/bootstrapped", "1"));
    }
    // The join secret in the database too: every server of a pool on
    // PostgreSQL hands out the same join token (kept from pools made
    // before, which had it in their file only).
    GP_ASSIGN_OR_RETURN(auto shared, tx.GetMeta("auth/join_secret"));
    if (!join_secret.empty()) {
      GP_RETURN_IF_ERROR(tx.PutMeta("auth/join_secret", join_secret));
    } else if (shared) {
      join_secret = *shared;
    }
    // The bootstrap token's subject is the first admin user (pools made before
    // users existed get that user now).
    GP_ASSIGN_OR_RETURN(auto admin, tx.GetUser("admin"));
    if (!admin) GP_RETURN_IF_ERROR(tx.PutUser({"admin", "admin", "", false, now}));
    return Status::Ok();
  }));
  if (join_secret.empty()) {
    GP_ASSIGN_OR_RETURN(std::string stored, ReadFileTrimmed(join_path));
    join_secret = std::string(SecretPart(stored));
    GP_RETURN_IF_ERROR(
        store_.Transact([&](Tx& tx) { return tx.PutMeta("auth/join_secret", join_secret); }));
  }
  join_path_ = join_path;
  ca_fingerprint_ = ca_fingerprint;
  join_token_ = JoinTokenFor(join_secret, ca_fingerprint);
  // Keep the file as agents should use it (with the fingerprint, or without
  // one when TLS was turned off).
  GP_RETURN_IF_ERROR(WriteFileAtomic(join_path, join_token_ + "\n", {0600, true}));
  out.join_token = join_token_;
  return out;
}

Result<std::string> Auth::RotateJoinToken() {
  std::string secret = "gpj_" + RandomHex(32);
  std::string token = JoinTokenFor(secret, ca_fingerprint_);
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    int64_t now = clock_.NowMs();
    GP_RETURN_IF_ERROR(RevokeTokenHash(tx, Sha256Hex(SecretPart(join_token_))));
    GP_RETURN_IF_ERROR(
        tx.PutToken({Sha256Hex(secret), "join", "agent-join", now, 0, false, "join", "*"}));
    GP_RETURN_IF_ERROR(tx.PutMeta("auth/join_secret", secret));
    // Last: if writing the file fails, the transaction rolls back and the old
    // token stays in force.
    return WriteFileAtomic(join_path_, token + "\n", {0600, true});
  }));
  join_token_ = token;
  cache_.clear();
  return token;
}

Result<Principal> Auth::Authenticate(std::string_view header) {
  if (header.empty())
    return Status::Unauthenticated("missing Authorization: Bearer <token> header");
  if (!header.starts_with(kBearer)) {
    return Status::Unauthenticated("the Authorization header must be \"Bearer <token>\"");
  }
  std::string_view token = header.substr(kBearer.size());
  if (token.empty() || token.size() > kMaxTokenBytes) {
    return Status::Unauthenticated("invalid or expired token");
  }
  return Lookup(Sha256Hex(SecretPart(token)));
}

Result<Principal> Auth::Lookup(const std::string& hash) {
  const int64_t now = clock_.NowMs();
  if (auto it = cache_.find(hash); it != cache_.end()) {
    if (it->second.expires_ms == 0 || it->second.expires_ms > now) return it->second.principal;
    cache_.erase(it);
    return Status::Unauthenticated("invalid or expired token");
  }
  std::optional<TokenRecord> rec;
  std::optional<UserRecord> user;
  std::vector<GroupRecord> groups;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(rec, tx.GetToken(hash));
    if (!rec) return Status::Ok();
    GP_ASSIGN_OR_RETURN(user, tx.GetUser(rec->subject));
    GP_ASSIGN_OR_RETURN(groups, tx.ListGroups());
    return Status::Ok();
  }));
  // The lookup is by hash, so timing tells an attacker nothing about the
  // secret; the comparison is constant-time all the same.
  if (!rec || rec->hash.size() != hash.size() ||
      CRYPTO_memcmp(rec->hash.data(), hash.data(), hash.size()) != 0 || rec->revoked ||
      (rec->expires_ms && rec->expires_ms <= now)) {
    return Status::Unauthenticated("invalid or expired token");
  }
  GP_ASSIGN_OR_RETURN(Role role, ParseRole(rec->role));
  GP_ASSIGN_OR_RETURN(uint32_t scopes, ParseScopes(rec->scopes));
  Principal p;
  if (role == Role::kAgent || role == Role::kJoin) {
    p.subject = rec->subject;
    p.role = role;
    p.scopes = scopes;
  } else {
    // A user's token acts with the user's current role.
    if (!user) return Status::Unauthenticated("the token's user no longer exists");
    GP_ASSIGN_OR_RETURN(p, UserPrincipal(*user, groups, scopes));
  }
  p.token_id = TokenId(*rec);
  cache_[hash] = Cached{p, rec->expires_ms};
  return p;
}

Result<Principal> Auth::UserPrincipal(const UserRecord& u, const std::vector<GroupRecord>& groups,
                                      uint32_t scopes) {
  if (u.disabled) return Status::Unauthenticated("user " + u.name + " is disabled");
  Principal p;
  p.subject = u.name;
  p.scopes = scopes;
  GP_ASSIGN_OR_RETURN(p.role, ParseUserRole(u.role));
  for (const GroupRecord& g : groups) {
    if (!std::binary_search(g.members.begin(), g.members.end(), p.subject)) continue;
    p.groups.push_back(g.name);
    if (g.shared_jobs) p.shared_groups.push_back(g.name);
  }
  return p;
}

Result<Principal> Auth::PrincipalForProxyUser(const std::string& user, const std::string& peer) {
  if (Status s = CheckName(user, "user"); !s.ok()) {
    return Status::Unauthenticated("the single sign-on header names no valid user: " + s.message());
  }
  std::optional<UserRecord> record;
  std::vector<GroupRecord> groups;
  bool created = false;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(record, tx.GetUser(user));
    if (!record) {
      record = UserRecord{user, "member", "", false, clock_.NowMs()};
      GP_RETURN_IF_ERROR(tx.PutUser(*record));
      created = true;
    }
    GP_ASSIGN_OR_RETURN(groups, tx.ListGroups());
    return Status::Ok();
  }));
  if (created) Audit("server", "user.add", user, "first single sign-on request", peer);
  GP_ASSIGN_OR_RETURN(Principal p, UserPrincipal(*record, groups, kAllScopes));
  p.token_id = "sso:" + user;
  return p;
}

// ---- tokens

Result<IssuedToken> Auth::IssueToken(const std::string& prefix, const std::string& subject,
                                     Role role, const std::string& name, uint32_t scopes,
                                     int64_t ttl_ms) {
  if (name.size() > 128) return Status::InvalidArgument("name: at most 128 bytes");
  IssuedToken out;
  out.secret = prefix + RandomHex(32);
  int64_t now = clock_.NowMs();
  out.record = TokenRecord{Sha256Hex(out.secret),
                           subject,
                           std::string(RoleName(role)),
                           now,
                           ttl_ms > 0 ? now + ttl_ms : 0,
                           false,
                           name,
                           ScopesToString(scopes)};
  out.id = TokenId(out.record);
  return out;
}

Result<IssuedToken> Auth::CreateToken(const std::string& subject, Role role,
                                      const std::string& name, uint32_t scopes, int64_t ttl_ms) {
  GP_ASSIGN_OR_RETURN(IssuedToken t, IssueToken("gpt_", subject, role, name, scopes, ttl_ms));
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(RequireUser(tx, subject).status());
    return tx.PutToken(t.record);
  }));
  return t;
}

Result<std::vector<TokenRecord>> Auth::ListTokens(const std::string& subject) {
  return ReadTx<std::vector<TokenRecord>>(store_, [&](Tx& tx) { return tx.ListTokens(subject); });
}

Result<TokenRecord> Auth::RevokeToken(const std::string& id, const Principal& by) {
  std::optional<TokenRecord> found;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto all, tx.ListTokens(by.is_admin() ? "" : by.subject));
    for (TokenRecord& t : all) {
      if (TokenId(t) == id && t.role != "agent" && t.role != "agent-join") found = t;
    }
    if (!found) return Status::NotFound("token " + id + " does not exist");
    found->revoked = true;
    return tx.PutToken(*found);
  }));
  cache_.clear();
  return *found;
}

// ---- users

Result<UserRecord> Auth::RequireUser(Tx& tx, const std::string& name) {
  GP_ASSIGN_OR_RETURN(auto user, tx.GetUser(name));
  if (!user) return Status::NotFound("user " + name + " does not exist");
  return *user;
}

Result<UserRecord> Auth::AddUser(const std::string& name, Role role,
                                 const std::string& password_hash) {
  GP_RETURN_IF_ERROR(CheckName(name, "name"));
  if (role == Role::kAgent || role == Role::kJoin)
    return Status::InvalidArgument("role: must be admin, provider or member");
  UserRecord u{name, std::string(RoleName(role)), password_hash, false, clock_.NowMs()};
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto existing, tx.GetUser(name));
    if (existing) return Status::AlreadyExists("user " + name + " already exists");
    return tx.PutUser(u);
  }));
  return u;
}

Result<std::vector<UserRecord>> Auth::ListUsers() {
  return ReadTx<std::vector<UserRecord>>(store_, [](Tx& tx) { return tx.ListUsers(); });
}

Result<std::optional<UserRecord>> Auth::GetUser(const std::string& name) {
  return ReadTx<std::optional<UserRecord>>(store_, [&](Tx& tx) { return tx.GetUser(name); });
}

Result<UserRecord> Auth::SetDisabled(const std::string& name, bool disabled) {
  UserRecord u;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(u, RequireUser(tx, name));
    u.disabled = disabled;
    GP_RETURN_IF_ERROR(tx.PutUser(u));
    if (!disabled) return Status::Ok();
    GP_ASSIGN_OR_RETURN(auto tokens, tx.ListTokens(name));
    for (TokenRecord& t : tokens) {
      if (t.revoked || t.role == "agent" || t.role == "agent-join") continue;
      t.revoked = true;
      GP_RETURN_IF_ERROR(tx.PutToken(t));
    }
    return Status::Ok();
  }));
  cache_.clear();
  return u;
}

Result<UserRecord> Auth::SetPasswordHash(const std::string& name, const std::string& hash) {
  UserRecord u;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(u, RequireUser(tx, name));
    u.password_hash = hash;
    return tx.PutUser(u);
  }));
  return u;
}

// ---- groups

Result<GroupRecord> Auth::AddGroup(const std::string& name, bool shared_jobs) {
  GP_RETURN_IF_ERROR(CheckName(name, "name"));
  // Every job that names no group is in "default": a lab of that name would
  // make them all its own (its members could see and submit as everyone's).
  if (name == "default") {
    return Status::InvalidArgument(
        "name: \"default\" is the group of every job that names none; a lab cannot take it");
  }
  GroupRecord g{name, {}, shared_jobs, clock_.NowMs()};
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto existing, tx.GetGroup(name));
    if (existing) return Status::AlreadyExists("group " + name + " already exists");
    return tx.PutGroup(g);
  }));
  return g;
}

Result<GroupRecord> Auth::ChangeMembers(const std::string& name,
                                        const std::vector<std::string>& add,
                                        const std::vector<std::string>& remove,
                                        std::optional<bool> shared_jobs) {
  GroupRecord g;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto found, tx.GetGroup(name));
    if (!found) return Status::NotFound("group " + name + " does not exist");
    g = *std::move(found);
    for (const std::string& user : add) {
      GP_RETURN_IF_ERROR(RequireUser(tx, user).status().WithContext("add"));
      g.members.push_back(user);
    }
    for (const std::string& user : remove) std::erase(g.members, user);
    std::sort(g.members.begin(), g.members.end());
    g.members.erase(std::unique(g.members.begin(), g.members.end()), g.members.end());
    if (shared_jobs) g.shared_jobs = *shared_jobs;
    return tx.PutGroup(g);
  }));
  cache_.clear();
  return g;
}

Result<std::vector<GroupRecord>> Auth::ListGroups() {
  return ReadTx<std::vector<GroupRecord>>(store_, [](Tx& tx) { return tx.ListGroups(); });
}

Result<bool> Auth::IsLab(const std::string& name) {
  GP_ASSIGN_OR_RETURN(auto group, ReadTx<std::optional<GroupRecord>>(
                                      store_, [&](Tx& tx) { return tx.GetGroup(name); }));
  return group.has_value();
}

// ---- agents

Result<IssuedToken> Auth::EnrollAgent(const std::string& node, const std::string& owner,
                                      const std::string& cert_serial,
                                      const std::string& cert_fingerprint) {
  GP_RETURN_IF_ERROR(CheckName(node, "node"));
  GP_ASSIGN_OR_RETURN(IssuedToken t,
                      IssueToken("gpn_", node, Role::kAgent, "agent " + node, kAllScopes, 0));
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto old, tx.GetAgentCredential(node));
    if (old && old->revoked) {
      return Status::FailedPrecondition("node " + node +
                                        " was revoked; an admin must allow it to enroll again "
                                        "(gpupool admin node allow " +
                                        node + ")");
    }
    if (old) {
      // The earlier credential stops working.
      GP_RETURN_IF_ERROR(RevokeTokenHash(tx, old->token_hash));
    }
    GP_RETURN_IF_ERROR(tx.PutToken(t.record));
    return tx.PutAgentCredential(AgentCredential{node, t.record.hash, cert_serial, cert_fingerprint,
                                                 owner, clock_.NowMs(), false, 0});
  }));
  cache_.clear();
  return t;
}

Result<AgentCredential> Auth::RevokeAgent(const std::string& node) {
  AgentCredential c;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto found, tx.GetAgentCredential(node));
    if (!found) return Status::NotFound("node " + node + " has no enrollment");
    c = *std::move(found);
    c.revoked = true;
    c.revoked_ms = clock_.NowMs();
    GP_RETURN_IF_ERROR(RevokeTokenHash(tx, c.token_hash));
    return tx.PutAgentCredential(c);
  }));
  cache_.clear();
  return c;
}

Result<AgentCredential> Auth::AllowAgent(const std::string& node) {
  AgentCredential c;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto found, tx.GetAgentCredential(node));
    if (!found) return Status::NotFound("node " + node + " has no enrollment");
    c = *std::move(found);
    c.revoked = false;
    return tx.PutAgentCredential(c);
  }));
  return c;
}

Result<std::optional<AgentCredential>> Auth::GetAgentCredential(const std::string& node) {
  return ReadTx<std::optional<AgentCredential>>(
      store_, [&](Tx& tx) { return tx.GetAgentCredential(node); });
}

Result<std::vector<AgentCredential>> Auth::ListAgentCredentials() {
  return ReadTx<std::vector<AgentCredential>>(store_,
                                              [](Tx& tx) { return tx.ListAgentCredentials(); });
}

// ---- audit

void Auth::Audit(const std::string& actor, const std::string& action, const std::string& target,
                 const std::string& detail, const std::string& peer, bool ok) {
  AuditEntry e{0, clock_.NowMs(), actor, action, target, detail, peer, ok};
  Status s = store_.Transact([&](Tx& tx) { return tx.AppendAudit(e).status(); });
  if (!s.ok()) GP_LOG(kError) << "audit log: cannot record " << action << ": " << s.ToString();
  GP_LOG(kInfo) << "audit: " << actor << " " << action << " " << target << (ok ? "" : " (refused)")
                << (detail.empty() ? "" : ": " + detail);
}

Result<std::vector<AuditEntry>> Auth::ListAudit(int64_t after_id, int64_t before_id,
                                                int32_t limit) {
  return ReadTx<std::vector<AuditEntry>>(
      store_, [&](Tx& tx) { return tx.ListAudit(after_id, before_id, limit); });
}

}  // namespace gpupool::server
