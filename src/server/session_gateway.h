// SessionGateway: users' ways into their running jobs and interactive
// sessions, all through the agents' own outbound channels (providers accept
// no inbound connection):
//
//   GET /v1/jobs/{id}/connect?port=P     WebSocket: a TCP stream to port P
//   GET /v1/jobs/{id}/connect?target=jupyter   ... to the session's Jupyter
//   GET /v1/jobs/{id}/exec               WebSocket: the first (text) message
//       is the command {"argv":[...],"tty":true,"rows":24,"cols":80,
//       "term":"xterm"}; then binary messages carry proto/exec_stream.h
//   POST /v1/sessions/{id}/link          a one-time sign-in link (60 s) on
//       the sessions' origin
//
// and on the sessions' own origin (the --sessions-listen address), nothing
// else:
//
//   GET  /v1/sessions/{id}/login?code=C  sets the proxy's cookie, redirects
//   /v1/sessions/{id}/proxy/...          the session's Jupyter, any method,
//       WebSocket upgrades included (the connection is taken over and
//       relayed; each request is sent with Connection: close, so every
//       request on a connection is checked here, and the response head
//       goes through ProxyResponseGuard)
//
// A notebook page is code its notebook server (a job, an agent) chose: on
// an origin of its own it cannot make requests to the API or the dashboard
// with the user's cookie (the dashboard refuses another origin), nor read
// their pages (docs/security.md, "Interactive sessions").
//
// Only the job's owner and admins may connect (authz kJobConnect). A tunnel
// reaches only the ports the session declared (session.ports) unless it
// allows any (session.any_port). A refusal reaches a WebSocket client as an
// HTTP error before the upgrade.
//
// Idle sessions: every byte through a job's tunnels marks it active. A
// running session with no traffic for its session.idle_timeout is stopped
// (Pool::StopForGood, checkpointing first when its spec checkpoints), which
// frees its GPUs. Activity is kept in memory: after a server restart a
// session's idle time counts from the restart.
//
// Single-threaded: the server's event loop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>

#include "common/clock.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "server/agent_hub.h"
#include "server/auth.h"
#include "server/pool.h"
#include "server/tunnel_relay.h"

namespace gpupool::server {

class SessionGateway {
 public:
  SessionGateway(net::EventLoop& loop, Pool& pool, Auth& auth, AgentHub& hub, const Clock& clock);
  ~SessionGateway();

  // Where browsers reach the sessions' origin.
  struct SessionsOrigin {
    // --sessions-url; empty: http(s)://HOST:port, HOST the one the request
    // for the link named the server by (its Host header). With "{id}" in
    // its host ("https://{id}.sessions.example.edu"), every session has a
    // host name, so an origin, of its own: the sessions' listener then
    // serves a session only to requests that name its host.
    std::string url;
    bool tls = false;
    uint16_t port = 0;  // the sessions listener's
  };
  void ServeSessionsAt(SessionsOrigin origin) { origin_ = std::move(origin); }
  // Session `job_id`'s origin as the client of `req` reaches it.
  std::string SessionsBase(const net::HttpRequest& req, int64_t job_id) const;
  // Whether --sessions-url is usable: http(s), and "{id}" at most once, in
  // its host. InvalidArgument says what is wrong.
  static Status CheckSessionsUrl(const std::string& url);

  // True for the paths above: the server sends them here.
  static bool Handles(const std::string& path);

  // HttpHandlers::on_upgrade for /v1/jobs/{id}/connect and /exec.
  std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> Upgrade(
      const net::HttpRequest& req);
  // The API's address: links; logins and the proxy are told where they are.
  net::HttpResponse Handle(const net::HttpRequest& req);
  // The sessions' address: HttpHandlers::on_takeover, the proxy when the
  // request may pass, else nullptr (HandleOnSessionsOrigin then answers
  // with the refusal).
  std::shared_ptr<net::RawHandler> Takeover(const net::HttpRequest& req);
  // The sessions' address: logins, and refusals of the proxy.
  net::HttpResponse HandleOnSessionsOrigin(const net::HttpRequest& req);
  // Every handler of the sessions' listener (it serves nothing else).
  net::HttpHandlers SessionsOriginHandlers();

  // Pool hook: keeps the set of running sessions for idle checks.
  void JobChanged(int64_t job_id);
  // Stops sessions idle past their timeout; called about once a second.
  void CheckIdle();

  // Marks a job active (bytes moved through one of its tunnels).
  void Touch(int64_t job_id);

 private:
  struct Target {
    Job job;
    std::string node_id;
    std::string attempt_id;
  };
  struct Login {  // a one-time code, or a cookie's session
    Principal who;
    int64_t job_id = 0;
    int64_t expires_ms = 0;
  };
  struct Tracked {
    int64_t last_active_ms = 0;
    int64_t idle_timeout_ms = 0;
  };
  class WsTunnel;
  class ProxyConnection;

  // What a route accepts besides a bearer token: nothing (tunnels and
  // shells), the web dashboard's cookie (a sign-in link: a POST, so the
  // cookie comes with its CSRF token), or the session's own cookie set at
  // login (the proxy).
  enum class Credentials : uint8_t { kBearer, kOrDashboard, kOrSessionCookie };
  Result<Principal> Caller(const net::HttpRequest& req, int64_t job_id, Credentials accepted);
  // The job's running attempt, if `who` may connect to it.
  Result<Target> Resolve(const Principal& who, int64_t job_id);
  Result<Target> ResolveProxy(const net::HttpRequest& req, int64_t job_id);
  // With a host name per session: OK when `req` names session `job_id`'s.
  Status CheckSessionHost(const net::HttpRequest& req, int64_t job_id) const;
  Status CheckPort(const Job& job, int port) const;
  void Track(const Job& job);
  // A relay for one of the job's tunnels; its bytes mark the job active.
  std::shared_ptr<TunnelRelay> NewRelay(int64_t job_id, TunnelRelay::User user);

  net::EventLoop& loop_;
  Pool& pool_;
  Auth& auth_;
  AgentHub& hub_;
  const Clock& clock_;
  SessionsOrigin origin_;
  std::map<std::string, Login> codes_;    // one-time sign-in codes
  std::map<std::string, Login> cookies_;  // the proxy's cookies
  std::map<int64_t, Tracked> sessions_;   // running sessions
};

}  // namespace gpupool::server
