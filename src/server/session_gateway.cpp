#include "server/session_gateway.h"

#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/log.h"
#include "common/units.h"
#include "server/authz.h"
#include "server/browser_session.h"
#include "server/http_errors.h"
#include "server/proxy_response_guard.h"
#include "server/tunnel_relay.h"

namespace gpupool::server {

namespace {

using nlohmann::json;

constexpr int64_t kLinkLifetimeMs = 60'000;
constexpr int64_t kCookieLifetimeMs = 12 * 3'600'000;
constexpr const char* kCookieName = "gpupool_session";

// {"v1","jobs","12","exec"} and the like: the job id and the operation.
struct Route {
  int64_t job_id = 0;
  std::string op;  // "connect", "exec", "link", "login", "proxy"
};

std::optional<Route> ParseRoute(std::string_view path) {
  auto parts = net::SplitPath(path);
  if (parts.size() < 4 || parts[0] != "v1") return std::nullopt;
  bool jobs = parts[1] == "jobs", sessions = parts[1] == "sessions";
  if (!jobs && !sessions) return std::nullopt;
  Route r;
  for (char c : parts[2]) {
    if (c < '0' || c > '9' || r.job_id > 1'000'000'000'000) return std::nullopt;
    r.job_id = r.job_id * 10 + (c - '0');
  }
  if (r.job_id <= 0) return std::nullopt;
  r.op = std::string(parts[3]);
  if (jobs && parts.size() == 4 && (r.op == "connect" || r.op == "exec")) return r;
  if (sessions && parts.size() == 4 && (r.op == "link" || r.op == "login")) return r;
  if (sessions && r.op == "proxy") return r;
  return std::nullopt;
}

std::string ProxyPrefix(int64_t job_id) {
  return "/v1/sessions/" + std::to_string(job_id) + "/proxy/";
}

// The host part of a Host header ("lab.example.edu:8470", "[::1]:8470"), or
// "" when it is not a plain host name or address.
std::string HostOf(std::string_view host_header) {
  std::string_view host = host_header;
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos) return "";
    host = host.substr(0, close + 1);
  } else if (size_t colon = host.find(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host.empty() || host.size() > 255) return "";
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
    if (!ok) return "";
  }
  return std::string(host);
}

std::string HttpError(int status, const std::string& text) {
  std::string reason = status == 502 ? "Bad Gateway" : "Service Unavailable";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " +
         std::to_string(text.size() + 1) + "\r\n\r\n" + text + "\n";
}

// The relay's view of a user's connection, WebSocket or raw: `send` writes
// to it; both kinds have queued_bytes() and PauseReading().
template <typename Conn>
TunnelRelay::User UserOf(std::weak_ptr<Conn> weak, void (Conn::*send)(std::string),
                         std::function<void(const std::string&)> close) {
  TunnelRelay::User user;
  user.send = [weak, send](std::string bytes) {
    if (auto c = weak.lock()) (c.get()->*send)(std::move(bytes));
  };
  user.queued = [weak]() -> size_t {
    auto c = weak.lock();
    return c ? c->queued_bytes() : 0;
  };
  user.pause_reading = [weak](bool paused) {
    if (auto c = weak.lock()) c->PauseReading(paused);
  };
  user.close = std::move(close);
  return user;
}

}  // namespace

// A CLI's WebSocket relayed to a stream into the job (connect, exec).
class SessionGateway::WsTunnel : public net::WsHandler,
                                 public std::enable_shared_from_this<WsTunnel> {
 public:
  // Without `target` (exec), the first text message gives the command.
  WsTunnel(SessionGateway& gw, Target where, std::optional<proto::TunnelTarget> target)
      : gw_(gw), where_(std::move(where)), target_(std::move(target)) {}

  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    conn_ = std::move(conn);
    if (target_) Begin(*target_);
  }

  void OnMessage(std::string text) override {
    if (relay_ || closed_) return Refuse("text messages are only for the command, first");
    auto j = json::parse(text, nullptr, false);
    if (!j.is_object()) return Refuse("the first message must be the command as a JSON object");
    j["attempt"] = where_.attempt_id;
    j["kind"] = "exec";
    auto target = proto::DecodeTunnelTarget(j.dump());
    if (!target.ok()) return Refuse(target.status().message());
    Begin(*target);
  }

  void OnBinary(std::string bytes) override {
    if (relay_) relay_->FromUser(bytes);
  }
  void OnSent() override {
    if (relay_) relay_->UserDrained();
  }
  void OnClose(std::string) override {
    closed_ = true;
    if (relay_) relay_->UserClosed();
  }

 private:
  void Begin(const proto::TunnelTarget& target) {
    std::weak_ptr<net::WsConnection> weak = conn_;
    relay_ = gw_.NewRelay(where_.job.id, UserOf(weak, &net::WsConnection::SendBinary,
                                                [weak](const std::string& reason) {
                                                  // A close frame's reason holds at most 123 bytes.
                                                  if (auto c = weak.lock())
                                                    c->Close(reason.substr(0, 120));
                                                }));
    if (Status s = relay_->Start(gw_.hub_, where_.node_id, target); !s.ok()) {
      relay_.reset();
      Refuse(s.message());
    }
  }

  void Refuse(const std::string& why) {
    if (conn_) conn_->Close(why.substr(0, 120));
  }

  SessionGateway& gw_;
  Target where_;
  std::optional<proto::TunnelTarget> target_;
  std::shared_ptr<net::WsConnection> conn_;
  std::shared_ptr<TunnelRelay> relay_;
  bool closed_ = false;
};

// A browser's connection to the Jupyter proxy, relayed to the session's
// notebook server from its first request on.
class SessionGateway::ProxyConnection : public net::RawHandler {
 public:
  ProxyConnection(SessionGateway& gw, Target where, std::string request)
      : gw_(gw), where_(std::move(where)), request_(std::move(request)) {}

  void OnOpen(std::shared_ptr<net::RawConnection> conn) override {
    conn_ = conn;
    std::weak_ptr<net::RawConnection> weak = conn;
    auto user = UserOf(weak, &net::RawConnection::Write, [this, weak](const std::string& reason) {
      auto c = weak.lock();
      if (!c) return;
      // Before any answer, the browser gets the reason as an error page.
      if (!reason.empty() && relay_ && relay_->bytes_to_user() == 0)
        c->Write(HttpError(502, reason));
      c->Close();
    });
    // What the notebook server answers goes through the guard first.
    user.send = [weak, guard = std::make_shared<ProxyResponseGuard>(ProxyPrefix(where_.job.id))](
                    std::string bytes) {
      auto c = weak.lock();
      if (!c) return;
      auto out = guard->Feed(bytes);
      if (!out.ok()) {
        c->Write(HttpError(502, out.status().message()));
        c->Close();
      } else if (!out->empty()) {
        c->Write(*std::move(out));
      }
    };
    relay_ = gw_.NewRelay(where_.job.id, std::move(user));
    proto::TunnelTarget target;
    target.attempt_id = where_.attempt_id;
    target.kind = proto::TunnelTarget::Kind::kJupyter;
    if (Status s = relay_->Start(gw_.hub_, where_.node_id, target); !s.ok()) {
      relay_.reset();
      conn->Write(HttpError(503, s.message()));
      conn->Close();
      return;
    }
    relay_->FromUser(request_);
    request_.clear();
  }
  void OnData(std::string_view bytes) override {
    if (relay_) relay_->FromUser(bytes);
  }
  void OnSent() override {
    if (relay_) relay_->UserDrained();
  }
  void OnClose(std::string) override {
    if (relay_) relay_->UserClosed();
    conn_.reset();
  }

 private:
  SessionGateway& gw_;
  Target where_;
  std::string request_;
  std::shared_ptr<net::RawConnection> conn_;  // the handle keeps the connection ours
  std::shared_ptr<TunnelRelay> relay_;
};

SessionGateway::SessionGateway(net::EventLoop& loop, Pool& pool, Auth& auth, AgentHub& hub,
                               const Clock& clock)
    : loop_(loop), pool_(pool), auth_(auth), hub_(hub), clock_(clock) {
  // Sessions that run already (a server restart): idle from now on.
  JobQuery q;
  q.states = {JobState::kRunning};
  for (;;) {
    auto jobs = pool_.ListJobs(q);
    if (!jobs.ok()) {
      GP_LOG(kError) << "sessions: cannot list running jobs: " << jobs.status().ToString();
      break;
    }
    for (const Job& j : *jobs) Track(j);
    if (jobs->size() < static_cast<size_t>(q.limit)) break;
    q.after_id = jobs->back().id;
  }
}

SessionGateway::~SessionGateway() = default;

std::shared_ptr<TunnelRelay> SessionGateway::NewRelay(int64_t job_id, TunnelRelay::User user) {
  Touch(job_id);
  return std::make_shared<TunnelRelay>(std::move(user), [this, job_id](size_t) { Touch(job_id); });
}

bool SessionGateway::Handles(const std::string& path) { return ParseRoute(path).has_value(); }

Result<Principal> SessionGateway::Caller(const net::HttpRequest& req, int64_t job_id,
                                         Credentials accepted) {
  if (accepted == Credentials::kOrDashboard) {
    GP_ASSIGN_OR_RETURN(std::string credentials, RequestCredentials(req));
    return auth_.Authenticate(credentials);
  }
  std::string header = req.Header("authorization");
  if (!header.empty() || accepted == Credentials::kBearer) return auth_.Authenticate(header);
  std::string cookie = net::CookieValue(req.Header("cookie"), kCookieName);
  auto it = cookie.empty() ? cookies_.end() : cookies_.find(cookie);
  if (it == cookies_.end() || it->second.job_id != job_id ||
      it->second.expires_ms <= clock_.MonoMs()) {
    return Status::Unauthenticated("sign in to this session first: run `gpupool session open " +
                                   std::to_string(job_id) + "` and open the link it prints");
  }
  return it->second.who;
}

Result<SessionGateway::Target> SessionGateway::Resolve(const Principal& who, int64_t job_id) {
  auto d = pool_.GetJob(job_id);
  if (!d.ok()) return d.status();
  const Job& job = d->job;
  Resource object{job.owner, job.spec.group};
  if (Decide(who, Action::kJobRead, object) == Decision::kNotYours)
    return Status::NotFound("job " + std::to_string(job_id) + " does not exist");
  GP_RETURN_IF_ERROR(Authorize(who, Action::kJobConnect, object));
  if (job.state != JobState::kRunning) {
    return Status::FailedPrecondition("job " + std::to_string(job_id) + " is " +
                                      std::string(JobStateName(job.state)) +
                                      (IsTerminal(job.state) ? "" : "; connect once it runs") +
                                      (job.reason.empty() ? "" : " (" + job.reason + ")"));
  }
  for (const Attempt& a : d->attempts) {
    if (a.id != job.current_attempt) continue;
    return Target{job, a.node_id, a.id};
  }
  return Status::FailedPrecondition("job " + std::to_string(job_id) + " has no running attempt");
}

Status SessionGateway::CheckPort(const Job& job, int port) const {
  const auto& s = job.spec.session;
  if (s && (s->any_port || std::find(s->ports.begin(), s->ports.end(), port) != s->ports.end()))
    return Status::Ok();
  std::string declared;
  if (s) {
    for (int p : s->ports) declared += (declared.empty() ? "" : ", ") + std::to_string(p);
  }
  return Status::PermissionDenied(
      "port " + std::to_string(port) + " is not one job " + std::to_string(job.id) + " declared (" +
      (declared.empty() ? "it declared none" : "it declared " + declared) +
      "); start the session with --port " + std::to_string(port) + ", or --any-port");
}

std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> SessionGateway::Upgrade(
    const net::HttpRequest& req) {
  auto route = ParseRoute(req.path);
  if (!route || (route->op != "connect" && route->op != "exec"))
    return ErrorResponse(Status::NotFound("no WebSocket endpoint at " + req.path));
  auto who = Caller(req, route->job_id, Credentials::kBearer);
  if (!who.ok()) return ErrorResponse(who.status());
  auto where = Resolve(*who, route->job_id);
  if (!where.ok()) return ErrorResponse(where.status());
  if (route->op == "exec")
    return std::make_shared<WsTunnel>(*this, *std::move(where), std::nullopt);

  proto::TunnelTarget target;
  target.attempt_id = where->attempt_id;
  auto q = req.query.find("target");
  auto p = req.query.find("port");
  if (q != req.query.end() && q->second == "jupyter") {
    const auto& s = where->job.spec.session;
    if (!s || s->kind != SessionKind::kJupyter) {
      return ErrorResponse(Status::FailedPrecondition("job " + std::to_string(route->job_id) +
                                                      " is not a Jupyter session"));
    }
    target.kind = proto::TunnelTarget::Kind::kJupyter;
  } else if (q != req.query.end()) {
    return ErrorResponse(Status::InvalidArgument("query parameter target: must be jupyter"));
  } else {
    auto port = QueryInt(req, "port", 0, 1, 65535);
    if (!port.ok()) return ErrorResponse(port.status());
    if (p == req.query.end())
      return ErrorResponse(
          Status::InvalidArgument("query parameter port (or target=jupyter) is required"));
    if (Status s = CheckPort(where->job, static_cast<int>(*port)); !s.ok()) return ErrorResponse(s);
    target.port = static_cast<int>(*port);
  }
  return std::make_shared<WsTunnel>(*this, *std::move(where), target);
}

Result<SessionGateway::Target> SessionGateway::ResolveProxy(const net::HttpRequest& req,
                                                            int64_t job_id) {
  GP_ASSIGN_OR_RETURN(Principal who, Caller(req, job_id, Credentials::kOrSessionCookie));
  GP_ASSIGN_OR_RETURN(Target where, Resolve(who, job_id));
  const auto& s = where.job.spec.session;
  if (!s || s->kind != SessionKind::kJupyter) {
    return Status::FailedPrecondition("job " + std::to_string(job_id) +
                                      " is not a Jupyter session");
  }
  return where;
}

std::shared_ptr<net::RawHandler> SessionGateway::Takeover(const net::HttpRequest& req) {
  auto route = ParseRoute(req.path);
  if (!route || route->op != "proxy" || !CheckSessionHost(req, route->job_id).ok()) return nullptr;
  auto where = ResolveProxy(req, route->job_id);
  if (!where.ok()) return nullptr;  // Handle answers with the refusal
  // Jupyter serves under the same prefix (its base_url), so the request goes
  // as it came, with Jupyter's token instead of the caller's credentials.
  net::HttpRequest out = req;
  out.headers.erase("authorization");
  if (auto c = out.headers.find("cookie"); c != out.headers.end()) {
    c->second = net::WithoutCookie(
        net::WithoutCookie(net::WithoutCookie(c->second, kCookieName), kBrowserSessionCookie),
        kBrowserSessionCookieTls);
    if (c->second.empty()) out.headers.erase(c);
  }
  out.headers["authorization"] = "token " + where->job.spec.session->jupyter_token;
  bool upgrade = !req.Header("upgrade").empty();
  // One request per connection, so every request is checked here.
  if (!upgrade) out.headers["connection"] = "close";
  out.headers.erase("keep-alive");
  return std::make_shared<ProxyConnection>(*this, *std::move(where),
                                           net::SerializeHttpRequest(out));
}

net::HttpResponse SessionGateway::Handle(const net::HttpRequest& req) {
  auto route = ParseRoute(req.path);
  if (!route) return ErrorResponse(Status::NotFound("no such endpoint: " + req.path));
  const int64_t now = clock_.MonoMs();
  const std::string id = std::to_string(route->job_id);
  if (route->op == "link") {
    if (req.method != "POST")
      return ErrorResponse(Status::InvalidArgument("use POST to make a sign-in link"));
    auto who = Caller(req, route->job_id, Credentials::kOrDashboard);
    if (!who.ok()) return ErrorResponse(who.status());
    auto where = Resolve(*who, route->job_id);
    if (!where.ok()) return ErrorResponse(where.status());
    if (!where->job.spec.session || where->job.spec.session->kind != SessionKind::kJupyter) {
      return ErrorResponse(Status::FailedPrecondition("job " + id + " is not a Jupyter session"));
    }
    std::string code = RandomHex(16);
    codes_[code] = Login{*who, route->job_id, now + kLinkLifetimeMs};
    // The token serves the owner's own tunnel to Jupyter (session connect);
    // the browser's way is the link, and the dashboard (no bearer token)
    // never gets the token.
    nlohmann::json body = {
        {"url", SessionsBase(req, route->job_id) + "/v1/sessions/" + id + "/login?code=" + code},
        {"expires_in_s", kLinkLifetimeMs / 1000}};
    if (!req.Header("authorization").empty())
      body["jupyter_token"] = where->job.spec.session->jupyter_token;
    return JsonResponse(200, body);
  }
  if (route->op == "connect" || route->op == "exec") {
    return ErrorResponse(
        Status::InvalidArgument(req.path + " is a WebSocket endpoint: connect with an upgrade"));
  }
  // Logins and the proxy are on the sessions' own origin only.
  return ErrorResponse(Status::NotFound("interactive sessions are served on their own address: " +
                                        SessionsBase(req, route->job_id) + req.path));
}

Status SessionGateway::CheckSessionsUrl(const std::string& url) {
  if (!url.starts_with("https://") && !url.starts_with("http://"))
    return Status::InvalidArgument("--sessions-url must start with https:// (or http://), not \"" +
                                   url + "\"");
  const size_t host = url.find("://") + 3;
  const size_t path = url.find('/', host);
  const size_t id = url.find("{id}");
  if (id != std::string::npos && (id > path || url.find("{id}", id + 1) != std::string::npos)) {
    return Status::InvalidArgument("--sessions-url: {id} may stand once, in the host name (\"" +
                                   url + "\")");
  }
  if (path != std::string::npos && path + 1 != url.size())
    return Status::InvalidArgument("--sessions-url names a host, not a path (\"" + url + "\")");
  return Status::Ok();
}

Status SessionGateway::CheckSessionHost(const net::HttpRequest& req, int64_t job_id) const {
  if (origin_.url.find("{id}") == std::string::npos) return Status::Ok();
  std::string base = SessionsBase(req, job_id);
  // Host names compared without case, and without the scheme's default
  // port, which browsers leave out of the Host header.
  const std::string default_port = base.starts_with("https://") ? ":443" : ":80";
  auto authority = [&](std::string a) {
    a = net::AsciiLower(a);
    if (a.ends_with(default_port)) a.resize(a.size() - default_port.size());
    return a;
  };
  if (authority(req.Header("host")) == authority(base.substr(base.find("://") + 3)))
    return Status::Ok();
  return Status::NotFound("session " + std::to_string(job_id) + " is served at " + base + req.path);
}

std::string SessionGateway::SessionsBase(const net::HttpRequest& req, int64_t job_id) const {
  if (!origin_.url.empty()) {
    std::string url = origin_.url;
    if (url.ends_with("/")) url.pop_back();
    if (size_t at = url.find("{id}"); at != std::string::npos)
      url.replace(at, 4, std::to_string(job_id));
    return url;
  }
  std::string host = HostOf(req.Header("host"));
  if (host.empty()) host = "localhost";
  return (origin_.tls ? "https://" : "http://") + host + ":" + std::to_string(origin_.port);
}

net::HttpResponse SessionGateway::HandleOnSessionsOrigin(const net::HttpRequest& req) {
  auto route = ParseRoute(req.path);
  if (!route || (route->op != "login" && route->op != "proxy")) {
    return ErrorResponse(Status::NotFound(
        "this address serves interactive sessions only (their sign-in links and Jupyter); the "
        "API and the dashboard are on the server's main address"));
  }
  if (Status s = CheckSessionHost(req, route->job_id); !s.ok()) return ErrorResponse(s);
  const int64_t now = clock_.MonoMs();
  const std::string id = std::to_string(route->job_id);
  if (route->op == "login") {
    auto c = req.query.find("code");
    auto it = c == req.query.end() ? codes_.end() : codes_.find(c->second);
    if (it == codes_.end() || it->second.job_id != route->job_id || it->second.expires_ms <= now) {
      if (it != codes_.end()) codes_.erase(it);
      return ErrorResponse(Status::Unauthenticated(
          "this sign-in link was used already or has expired; run `gpupool session open " + id +
          "` for a new one"));
    }
    Login login = std::move(it->second);
    codes_.erase(it);  // one use only
    login.expires_ms = now + kCookieLifetimeMs;
    std::string secret = RandomHex(24);
    cookies_[secret] = std::move(login);
    net::HttpResponse r;
    r.status = 302;
    r.content_type = "text/plain; charset=utf-8";
    r.headers["location"] = ProxyPrefix(route->job_id);
    r.headers["set-cookie"] = std::string(kCookieName) + "=" + secret + "; Path=/v1/sessions/" +
                              id + "/; HttpOnly; SameSite=Lax" + (req.tls ? "; Secure" : "");
    r.body = "signed in; continue to " + ProxyPrefix(route->job_id) + "\n";
    return r;
  }
  // The proxy, when Takeover declined: say why.
  auto where = ResolveProxy(req, route->job_id);
  if (!where.ok()) return ErrorResponse(where.status());
  return ErrorResponse(Status::Unavailable("the session changed meanwhile; retry"));
}

net::HttpHandlers SessionGateway::SessionsOriginHandlers() {
  net::HttpHandlers handlers;
  handlers.on_request = [this](net::HttpRequest req, net::Responder r) {
    r(HandleOnSessionsOrigin(req));
  };
  handlers.on_takeover = [this](const net::HttpRequest& req) { return Takeover(req); };
  handlers.on_upgrade = [](const net::HttpRequest& req)
      -> std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> {
    return ErrorResponse(
        Status::NotFound("no WebSocket endpoint at " + req.path + " on the sessions' address"));
  };
  return handlers;
}

void SessionGateway::Track(const Job& job) {
  const auto& s = job.spec.session;
  if (s && job.state == JobState::kRunning && s->idle_timeout_ms > 0) {
    sessions_.try_emplace(job.id, Tracked{clock_.MonoMs(), s->idle_timeout_ms});
    return;
  }
  sessions_.erase(job.id);
  if (IsTerminal(job.state)) {
    std::erase_if(cookies_, [&](const auto& kv) { return kv.second.job_id == job.id; });
  }
}

void SessionGateway::JobChanged(int64_t job_id) {
  auto d = pool_.GetJob(job_id);
  if (d.ok()) Track(d->job);
}

void SessionGateway::Touch(int64_t job_id) {
  auto it = sessions_.find(job_id);
  if (it != sessions_.end()) it->second.last_active_ms = clock_.MonoMs();
}

void SessionGateway::CheckIdle() {
  const int64_t now = clock_.MonoMs();
  std::erase_if(codes_, [&](const auto& kv) { return kv.second.expires_ms <= now; });
  std::erase_if(cookies_, [&](const auto& kv) { return kv.second.expires_ms <= now; });
  std::vector<std::pair<int64_t, int64_t>> idle;
  for (const auto& [job, t] : sessions_) {
    if (now - t.last_active_ms >= t.idle_timeout_ms) idle.emplace_back(job, t.idle_timeout_ms);
  }
  for (const auto& [job, timeout] : idle) {
    sessions_.erase(job);
    std::string reason = "stopped: idle for " + FormatDurationMs(timeout) +
                         " (session.idle_timeout); its GPUs are free again";
    GP_LOG(kInfo) << "session " << job << " " << reason;
    auto r = pool_.StopForGood(job, reason, true);
    if (!r.ok())
      GP_LOG(kError) << "cannot stop idle session " << job << ": " << r.status().ToString();
  }
}

}  // namespace gpupool::server
