#include "server/identity_api.h"

#include <nlohmann/json.hpp>

#include "common/json_reader.h"
#include "common/units.h"
#include "server/browser_session.h"
#include "server/http_errors.h"
#include "server/passwords.h"

namespace gpupool::server {

using nlohmann::json;

namespace {

// The page of `items` the request asks for (?offset=N&limit=M, all of them
// by default).
template <typename T, typename ToJson>
Result<json> PageOf(const net::HttpRequest& req, const std::vector<T>& items, const char* key,
                    ToJson to_json) {
  GP_ASSIGN_OR_RETURN(OffsetPage page, QueryOffsetPage(req));
  return page.Json(key, static_cast<int64_t>(items.size()),
                   [&](int64_t i) { return json(to_json(items[i])); });
}

json UserToJson(const UserRecord& u) {
  return {{"name", u.name},
          {"role", u.role},
          {"disabled", u.disabled},
          {"password_login", !u.password_hash.empty()},
          {"created_ms", u.created_ms}};
}

json GroupRecordToJson(const GroupRecord& g) {
  return {{"name", g.name},
          {"members", g.members},
          {"shared_jobs", g.shared_jobs},
          {"created_ms", g.created_ms}};
}

json TokenToJson(const TokenRecord& t, int64_t now) {
  return {{"id", TokenId(t)},
          {"user", t.subject},
          {"name", t.name},
          {"scopes", t.scopes},
          {"created_ms", t.created_ms},
          {"expires_ms", t.expires_ms ? json(t.expires_ms) : json(nullptr)},
          {"revoked", t.revoked},
          {"expired", t.expires_ms != 0 && t.expires_ms <= now}};
}

json CredentialToJson(const AgentCredential& c) {
  return {{"node", c.node_name},
          {"owner", c.owner},
          {"cert_serial", c.cert_serial},
          {"cert_fingerprint", c.cert_fingerprint},
          {"enrolled_ms", c.enrolled_ms},
          {"revoked", c.revoked},
          {"revoked_ms", c.revoked_ms ? json(c.revoked_ms) : json(nullptr)}};
}

json AuditToJson(const AuditEntry& e) {
  return {{"id", e.id},         {"ts_ms", e.ts_ms},   {"actor", e.actor}, {"action", e.action},
          {"target", e.target}, {"detail", e.detail}, {"peer", e.peer},   {"ok", e.ok}};
}

void Fail(const Respond& respond, const Status& s) { (*respond)(ErrorResponse(s)); }

// "expires_in": "30d" (or absent = `fallback`); "never" = 0.
Result<int64_t> ReadTtl(JsonReader& r, int64_t fallback) {
  if (!r.Has("expires_in")) return fallback;
  std::string text = r.Str("expires_in");
  if (text == "never") return 0;
  auto ms = ParseDurationMs(text);
  if (!ms.ok() || *ms <= 0) {
    return Status::InvalidArgument(
        "expires_in: a duration such as \"12h\" or \"90d\", or \"never\"");
  }
  return *ms;
}

}  // namespace

IdentityApi::IdentityApi(net::EventLoop& loop, Auth& auth, const Clock& clock,
                         IdentityApiOptions options, RevokedHook on_revoked)
    : loop_(loop),
      auth_(auth),
      clock_(clock),
      options_(std::move(options)),
      on_revoked_(std::move(on_revoked)),
      login_throttle_(clock, options_.login_limits) {}

void IdentityApi::AddRoutes(ApiRoutes& t) {
  using R = net::HttpRequest;
  using P = PathParams;
  constexpr Access kFirst = Access::kAuthorizedFirst, kInHandler = Access::kHandlerAuthorizes;
  t.AddPublic("POST", "/v1/login",
              [this](R& req, const Principal&, const P&, Respond respond) { Login(req, respond); });
  t.Add("GET", "/v1/whoami", Access::kAnyToken, Action::kJobRead,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          Whoami(req, who, respond);
        });
  t.Add("POST", "/v1/logout", Access::kAnyToken, Action::kOwnTokens,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          Logout(req, who, respond);
        });
  t.Add("GET", "/v1/users", kFirst, Action::kAdminister,
        [this](R& req, const Principal&, const P&, Respond respond) { ListUsers(req, respond); });
  t.Add("POST", "/v1/users", kInHandler, Action::kAdminister,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          AddUser(req, who, respond);
        });
  for (const char* verb : {"disable", "enable"}) {
    t.Add("POST", std::string("/v1/users/{user}/") + verb, kFirst, Action::kAdminister,
          [this, disable = std::string_view(verb) == "disable"](R& req, const Principal& who,
                                                                const P& params, Respond respond) {
            SetDisabled(req, who, params.find("user")->second, disable, respond);
          });
  }
  t.Add("POST", "/v1/users/{user}/password", kInHandler, Action::kOwnTokens,
        [this](R& req, const Principal& who, const P& params, Respond respond) {
          SetPassword(req, who, params.find("user")->second, respond);
        });
  t.Add("POST", "/v1/groups", kInHandler, Action::kAdminister,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          AddGroup(req, who, respond);
        });
  t.Add("POST", "/v1/groups/{group}/members", kInHandler, Action::kAdminister,
        [this](R& req, const Principal& who, const P& params, Respond respond) {
          ChangeGroup(req, who, params.find("group")->second, respond);
        });
  t.Add("GET", "/v1/groups/{group}/members", kFirst, Action::kPoolRead,
        [this](R&, const Principal&, const P& params, Respond respond) {
          GroupMembers(params.find("group")->second, respond);
        });
  t.Add("POST", "/v1/tokens", kInHandler, Action::kOwnTokens,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          CreateToken(req, who, respond);
        });
  t.Add("GET", "/v1/tokens", kInHandler, Action::kOwnTokens,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          ListTokens(req, who, respond);
        });
  t.Add("POST", "/v1/tokens/{token}/revoke", kFirst, Action::kOwnTokens,
        [this](R& req, const Principal& who, const P& params, Respond respond) {
          RevokeToken(req, who, params.find("token")->second, respond);
        });
  t.Add("GET", "/v1/audit", kFirst, Action::kAdminister,
        [this](R& req, const Principal&, const P&, Respond respond) { Audit(req, respond); });
  t.Add("POST", "/v1/agent/enroll", kInHandler, Action::kAgentEnroll,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          Enroll(req, who, respond);
        });
  t.Add("GET", "/v1/agents", kFirst, Action::kPoolRead,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          ListAgents(req, who, respond);
        });
  t.Add("POST", "/v1/nodes/{node}/revoke", kInHandler, Action::kNodeManage,
        [this](R& req, const Principal& who, const P& params, Respond respond) {
          RevokeNode(req, who, params.find("node")->second, respond);
        });
  t.Add("POST", "/v1/nodes/{node}/allow", kFirst, Action::kAdminister,
        [this](R& req, const Principal& who, const P& params, Respond respond) {
          AllowNode(req, who, params.find("node")->second, respond);
        });
  t.Add("GET", "/v1/join-token", kFirst, Action::kAdminister,
        [this](R&, const Principal&, const P&, Respond respond) {
          (*respond)(JsonResponse(
              200, {{"token", auth_.join_token()}, {"ca_fingerprint", options_.ca_fingerprint}}));
        });
  t.Add("POST", "/v1/join-token/rotate", kFirst, Action::kAdminister,
        [this](R& req, const Principal& who, const P&, Respond respond) {
          RotateJoinToken(req, who, respond);
        });
}

void IdentityApi::ListUsers(const net::HttpRequest& req, Respond respond) {
  auto users = auth_.ListUsers();
  if (!users.ok()) return Fail(respond, users.status());
  auto page = PageOf(req, *users, "users", UserToJson);
  if (!page.ok()) return Fail(respond, page.status());
  (*respond)(JsonResponse(200, *page));
}

void IdentityApi::SetDisabled(const net::HttpRequest& req, const Principal& who,
                              const std::string& name, bool disable, Respond respond) {
  if (disable && name == who.subject)
    return Fail(respond, Status::FailedPrecondition("you cannot disable yourself"));
  auto u = auth_.SetDisabled(name, disable);
  if (!u.ok()) return Fail(respond, u.status());
  auth_.Audit(who.subject, disable ? "user.disable" : "user.enable", name,
              disable ? "every token of the user revoked" : "", req.peer);
  (*respond)(JsonResponse(200, UserToJson(*u)));
}

void IdentityApi::GroupMembers(const std::string& name, Respond respond) {
  auto groups = auth_.ListGroups();
  if (!groups.ok()) return Fail(respond, groups.status());
  for (const GroupRecord& g : *groups) {
    if (g.name == name) return (*respond)(JsonResponse(200, GroupRecordToJson(g)));
  }
  Fail(respond, Status::NotFound("group " + name + " does not exist (gpupool admin group add)"));
}

void IdentityApi::RevokeToken(const net::HttpRequest& req, const Principal& who,
                              const std::string& id, Respond respond) {
  auto t = auth_.RevokeToken(id, who);
  if (!t.ok()) return Fail(respond, t.status());
  auth_.Audit(who.subject, "token.revoke", t->subject + "/" + TokenId(*t), t->name, req.peer);
  (*respond)(JsonResponse(200, TokenToJson(*t, clock_.NowMs())));
}

void IdentityApi::ListAgents(const net::HttpRequest& req, const Principal& who, Respond respond) {
  auto creds = auth_.ListAgentCredentials();
  if (!creds.ok()) return Fail(respond, creds.status());
  std::erase_if(*creds, [&](const AgentCredential& c) {
    return Decide(who, Action::kNodeManage, {c.owner}) != Decision::kAllowed;
  });
  auto page = PageOf(req, *creds, "agents", CredentialToJson);
  if (!page.ok()) return Fail(respond, page.status());
  (*respond)(JsonResponse(200, *page));
}

void IdentityApi::AllowNode(const net::HttpRequest& req, const Principal& who,
                            const std::string& node, Respond respond) {
  auto c = auth_.AllowAgent(node);
  if (!c.ok()) return Fail(respond, c.status());
  auth_.Audit(who.subject, "agent.allow", node, "may enroll again", req.peer);
  (*respond)(JsonResponse(200, CredentialToJson(*c)));
}

void IdentityApi::RotateJoinToken(const net::HttpRequest& req, const Principal& who,
                                  Respond respond) {
  auto token = auth_.RotateJoinToken();
  if (!token.ok()) return Fail(respond, token.status());
  auth_.Audit(who.subject, "join-token.rotate", "join token",
              "the old one no longer enrolls agents", req.peer);
  (*respond)(JsonResponse(200, {{"token", *token}, {"ca_fingerprint", options_.ca_fingerprint}}));
}

void IdentityApi::Whoami(const net::HttpRequest& req, const Principal& who, Respond respond) {
  json out = {{"subject", who.subject},
              {"role", RoleName(who.role)},
              {"scopes", ScopesToString(who.scopes)},
              {"groups", who.groups},
              {"token_id", who.token_id}};
  // A dashboard page that was reloaded learns its session's CSRF token again.
  if (req.Header("authorization").empty()) {
    if (auto secret = BrowserSessionSecret(req); secret.ok() && !secret->empty())
      out["csrf"] = CsrfTokenFor(*secret);
  }
  (*respond)(JsonResponse(200, out));
}

void IdentityApi::Logout(const net::HttpRequest& req, const Principal& who, Respond respond) {
  // The token that made this request ends, whichever kind it is.
  if (!who.token_id.empty()) {
    auto revoked = auth_.RevokeToken(who.token_id, who);
    if (!revoked.ok()) return Fail(respond, revoked.status());
  }
  net::HttpResponse out = JsonResponse(200, {{"signed_out", who.subject}});
  out.headers["set-cookie"] = ClearedSessionCookie(req.tls);
  (*respond)(std::move(out));
}

void IdentityApi::Login(const net::HttpRequest& req, Respond respond) {
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::string user = r.Str("user");
  std::string password = r.Str("password");
  // The web dashboard's sign-in: the token goes into an HttpOnly cookie,
  // never into the answer (server/browser_session.h).
  const bool browser = r.Bool("browser", false, false);
  std::string name = r.Str("name", false, browser ? "browser" : "login");
  auto ttl = ReadTtl(r, browser ? options_.browser_session_ttl_ms : options_.login_token_ttl_ms);
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  if (!ttl.ok()) return Fail(respond, ttl.status());
  if (browser && (*ttl == 0 || *ttl > options_.browser_session_ttl_ms))
    *ttl = options_.browser_session_ttl_ms;
  // Counted as a failure until the password proves right.
  const std::string address = PeerHost(req.peer);
  // Refusals are not audited: they check nothing, and writing a row for
  // each would let a flood of them grow the database.
  if (auto refused = login_throttle_.Begin(address, user)) {
    net::HttpResponse out = ErrorResponse(refused->status);
    out.headers["retry-after"] = std::to_string((refused->retry_after_ms + 999) / 1000);
    return (*respond)(std::move(out));
  }
  auto record = auth_.GetUser(user);
  if (!record.ok()) return Fail(respond, record.status());
  // Unknown, disabled and password-less users are checked against a dummy
  // hash, so that their answer takes as long as a wrong password's.
  std::string hash = *record && !(*record)->disabled ? (*record)->password_hash : "";
  std::string peer = req.peer;
  int64_t ttl_ms = *ttl;
  const bool tls = req.tls;
  hasher_.Submit([this, respond, user, password = std::move(password), hash, peer, ttl_ms, name,
                  browser, tls]() mutable {
    static const std::string kDummy = HashPassword("not a real password").value_or("");
    bool ok = VerifyPassword(password, hash.empty() ? kDummy : hash) && !hash.empty();
    loop_.Post([this, respond, user, ok, peer, ttl_ms, name, browser, tls] {
      auto current = auth_.GetUser(user);
      if (!ok || !current.ok() || !*current || (*current)->disabled) {
        auth_.Audit(user, "login", user, "wrong user name or password", peer, false);
        return Fail(respond, Status::Unauthenticated("wrong user name or password"));
      }
      login_throttle_.Succeeded(PeerHost(peer), user);
      auto role = ParseUserRole((*current)->role);
      if (!role.ok()) return Fail(respond, role.status());
      auto token = auth_.CreateToken(user, *role, name, kAllScopes, ttl_ms);
      if (!token.ok()) return Fail(respond, token.status());
      auth_.Audit(user, "login", user, "token " + token->id, peer);
      const json expires =
          token->record.expires_ms ? json(token->record.expires_ms) : json(nullptr);
      if (browser) {
        net::HttpResponse out = JsonResponse(200, {{"user", user},
                                                   {"role", (*current)->role},
                                                   {"csrf", CsrfTokenFor(token->secret)},
                                                   {"expires_ms", expires}});
        out.headers["set-cookie"] = SessionCookie(token->secret, ttl_ms / 1000, tls);
        out.headers["cache-control"] = "no-store";
        return (*respond)(std::move(out));
      }
      (*respond)(JsonResponse(200, {{"token", token->secret},
                                    {"id", token->id},
                                    {"user", user},
                                    {"role", (*current)->role},
                                    {"expires_ms", expires}}));
    });
  });
}

void IdentityApi::HashOffLoop(std::string password, Respond respond,
                              std::function<void(const std::string&)> then) {
  hasher_.Submit([this, password = std::move(password), respond, then = std::move(then)] {
    auto hash = HashPassword(password);
    loop_.Post([respond, hash = std::move(hash), then] {
      if (!hash.ok()) return Fail(respond, hash.status().WithContext("password"));
      then(*hash);
    });
  });
}

void IdentityApi::AddUser(const net::HttpRequest& req, const Principal& who, Respond respond) {
  if (Status s = Authorize(who, Action::kAdminister); !s.ok()) return Fail(respond, s);
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::string name = r.Str("name");
  std::string role_name = r.Str("role", false, "member");
  std::string password = r.Str("password", false);
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  if (Status s = CheckName(name, "name"); !s.ok()) return Fail(respond, s);
  auto role = ParseUserRole(role_name);
  if (!role.ok()) return Fail(respond, role.status());
  auto add = [this, respond, name, role = *role, who, peer = req.peer](const std::string& hash) {
    auto u = auth_.AddUser(name, role, hash);
    if (!u.ok()) return Fail(respond, u.status());
    auth_.Audit(who.subject, "user.add", name, "role " + u->role, peer);
    (*respond)(JsonResponse(201, UserToJson(*u)));
  };
  if (password.empty()) return add("");
  HashOffLoop(std::move(password), respond, add);
}

void IdentityApi::SetPassword(const net::HttpRequest& req, const Principal& who,
                              const std::string& user, Respond respond) {
  Action a = user == who.subject ? Action::kOwnTokens : Action::kAdminister;
  if (Status s = Authorize(who, a); !s.ok()) return Fail(respond, s);
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::string password = r.Str("password");
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  HashOffLoop(std::move(password), respond,
              [this, respond, user, who, peer = req.peer](const std::string& hash) {
                auto u = auth_.SetPasswordHash(user, hash);
                if (!u.ok()) return Fail(respond, u.status());
                auth_.Audit(who.subject, "user.password", user, "", peer);
                (*respond)(JsonResponse(200, UserToJson(*u)));
              });
}

void IdentityApi::AddGroup(const net::HttpRequest& req, const Principal& who, Respond respond) {
  if (Status s = Authorize(who, Action::kAdminister); !s.ok()) return Fail(respond, s);
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::string name = r.Str("name");
  bool shared = r.Bool("shared_jobs", false, false);
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  auto g = auth_.AddGroup(name, shared);
  if (!g.ok()) return Fail(respond, g.status());
  auth_.Audit(who.subject, "group.add", name, shared ? "members share jobs" : "", req.peer);
  (*respond)(JsonResponse(201, GroupRecordToJson(*g)));
}

void IdentityApi::ChangeGroup(const net::HttpRequest& req, const Principal& who,
                              const std::string& name, Respond respond) {
  if (Status s = Authorize(who, Action::kAdminister); !s.ok()) return Fail(respond, s);
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::vector<std::string> add = r.StrList("add", false);
  std::vector<std::string> remove = r.StrList("remove", false);
  std::optional<bool> shared;
  if (r.Has("shared_jobs")) shared = r.Bool("shared_jobs");
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  auto g = auth_.ChangeMembers(name, add, remove, shared);
  if (!g.ok()) return Fail(respond, g.status());
  std::string detail;
  for (const auto& u : add) detail += "+" + u + " ";
  for (const auto& u : remove) detail += "-" + u + " ";
  if (shared) detail += *shared ? "shared_jobs=true" : "shared_jobs=false";
  auth_.Audit(who.subject, "group.members", name, detail, req.peer);
  (*respond)(JsonResponse(200, GroupRecordToJson(*g)));
}

void IdentityApi::CreateToken(const net::HttpRequest& req, const Principal& who, Respond respond) {
  auto body = ParseJsonObject(req.body.empty() ? "{}" : req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::string user = r.Str("user", false, who.subject);
  std::string name = r.Str("name", false);
  std::string scopes_text = r.Str("scopes", false, "*");
  auto ttl = ReadTtl(r, 90LL * 24 * 3600 * 1000);
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  if (!ttl.ok()) return Fail(respond, ttl.status());
  auto scopes = ParseScopes(scopes_text);
  if (!scopes.ok()) return Fail(respond, scopes.status());
  Action a = user == who.subject ? Action::kOwnTokens : Action::kAdminister;
  if (Status s = Authorize(who, a); !s.ok()) return Fail(respond, s);
  // A token never holds more than the token that made it.
  if (user == who.subject) *scopes &= who.scopes;
  if (who.role == Role::kAgent || who.role == Role::kJoin)
    return Fail(respond, Status::PermissionDenied("agents cannot create tokens"));
  auto record = auth_.GetUser(user);
  if (!record.ok()) return Fail(respond, record.status());
  if (!*record) return Fail(respond, Status::NotFound("user " + user + " does not exist"));
  auto role = ParseUserRole((*record)->role);
  if (!role.ok()) return Fail(respond, role.status());
  auto t = auth_.CreateToken(user, *role, name, *scopes, *ttl);
  if (!t.ok()) return Fail(respond, t.status());
  auth_.Audit(who.subject, "token.create", user + "/" + t->id,
              "scopes " + t->record.scopes + (name.empty() ? "" : ", " + name), req.peer);
  json out = TokenToJson(t->record, clock_.NowMs());
  out["token"] = t->secret;
  (*respond)(JsonResponse(201, out));
}

void IdentityApi::ListTokens(const net::HttpRequest& req, const Principal& who, Respond respond) {
  std::string user = who.subject;
  if (auto it = req.query.find("user"); it != req.query.end()) user = it->second;
  if (req.query.count("all")) user = "";
  Action a = user == who.subject ? Action::kOwnTokens : Action::kAdminister;
  if (Status s = Authorize(who, a); !s.ok()) return Fail(respond, s);
  auto tokens = auth_.ListTokens(user);
  if (!tokens.ok()) return Fail(respond, tokens.status());
  std::erase_if(*tokens,
                [](const TokenRecord& t) { return t.role == "agent" || t.role == "agent-join"; });
  const int64_t now = clock_.NowMs();
  auto page =
      PageOf(req, *tokens, "tokens", [now](const TokenRecord& t) { return TokenToJson(t, now); });
  if (!page.ok()) return Fail(respond, page.status());
  (*respond)(JsonResponse(200, *page));
}

void IdentityApi::Enroll(const net::HttpRequest& req, const Principal& who, Respond respond) {
  if (Status s = Authorize(who, Action::kAgentEnroll); !s.ok()) return Fail(respond, s);
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  std::string node = r.Str("node");
  std::string csr = r.Str("csr", false);
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  if (Status s = CheckName(node, "node"); !s.ok()) return Fail(respond, s);
  // Enrolling again replaces a node's credential: a provider's node only by
  // that provider (or an admin).
  auto existing = auth_.GetAgentCredential(node);
  if (!existing.ok()) return Fail(respond, existing.status());
  if (*existing && !(*existing)->owner.empty()) {
    if (Status s = Authorize(who, Action::kNodeManage, {(*existing)->owner}); !s.ok())
      return Fail(respond, s.WithContext("node " + node + " is enrolled by " + (*existing)->owner));
  }
  std::string owner = who.role == Role::kProvider ? who.subject : "";
  std::string cert, serial, fingerprint;
  if (options_.ca) {
    if (csr.empty()) {
      return Fail(respond, Status::InvalidArgument(
                               "csr: this server uses TLS; enrollment needs a certificate "
                               "signing request for the node's client certificate"));
    }
    auto signed_cert =
        net::SignClientCsr(*options_.ca, csr, node, static_cast<int>(options_.agent_cert_days));
    if (!signed_cert.ok()) return Fail(respond, signed_cert.status().WithContext("csr"));
    auto info = net::ReadCert(*signed_cert);
    if (!info.ok()) return Fail(respond, info.status());
    cert = *signed_cert;
    serial = info->serial;
    fingerprint = info->fingerprint;
  }
  auto t = auth_.EnrollAgent(node, owner, serial, fingerprint);
  if (!t.ok()) {
    auth_.Audit(who.subject, "agent.enroll", node, t.status().message(), req.peer, false);
    return Fail(respond, t.status());
  }
  auth_.Audit(who.subject, "agent.enroll", node,
              serial.empty() ? "node token" : "client certificate serial " + serial, req.peer);
  (*respond)(JsonResponse(201, {{"node", node},
                                {"token", t->secret},
                                {"certificate", cert},
                                {"ca_fingerprint", options_.ca_fingerprint}}));
}

void IdentityApi::RevokeNode(const net::HttpRequest& req, const Principal& who,
                             const std::string& node, Respond respond) {
  auto cred = auth_.GetAgentCredential(node);
  if (!cred.ok()) return Fail(respond, cred.status());
  if (!*cred) return Fail(respond, Status::NotFound("node " + node + " has no enrollment"));
  if (Status s = Authorize(who, Action::kNodeManage, {(*cred)->owner}); !s.ok())
    return Fail(respond, s);
  auto c = auth_.RevokeAgent(node);
  if (!c.ok()) return Fail(respond, c.status());
  std::string reason = "revoked by " + who.subject;
  auth_.Audit(who.subject, "agent.revoke", node, "running attempts requeued", req.peer);
  on_revoked_(node, reason);
  (*respond)(JsonResponse(200, CredentialToJson(*c)));
}

void IdentityApi::Audit(const net::HttpRequest& req, Respond respond) {
  auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
  auto below = QueryNewestBefore(req);
  auto limit = QueryInt(req, "limit", 100, 1, 10000);
  for (const Status& s : {after.status(), below.status(), limit.status()}) {
    if (!s.ok()) return Fail(respond, s);
  }
  auto entries = auth_.ListAudit(*after, *below, static_cast<int32_t>(*limit));
  if (!entries.ok()) return Fail(respond, entries.status());
  json arr = json::array();
  for (const AuditEntry& e : *entries) arr.push_back(AuditToJson(e));
  json body = {{"entries", arr}};
  AddNextPage(body, *after, *below, *limit, entries->size(),
              entries->empty() ? 0 : entries->back().id);
  (*respond)(JsonResponse(200, body));
}

}  // namespace gpupool::server
