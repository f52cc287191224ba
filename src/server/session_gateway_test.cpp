// The session gateway over a real HTTP server, agent hub and SQLite store,
// with a scripted agent on the channel (its tunnel end is a real
// proto::TunnelMux) and users connecting over real WebSockets.
#include "server/session_gateway.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>

#include "proto/channel.h"
#include "proto/tunnel_mux.h"
#include "server/api_testing.h"

namespace gpupool::server {
namespace {

using proto::TunnelTarget;

// The agent's end of the channel: says hello for node "a" with attempt 1.1
// running, then answers tunnel streams as `behaviour` says.
class ScriptedAgent : public net::WsHandler {
 public:
  // kAnswer: a notebook server that answers `answer` to any request.
  enum class Behaviour { kEcho, kCloseWithReason, kAnswer };
  explicit ScriptedAgent(Behaviour b) : behaviour_(b) {}

  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    conn_ = std::move(conn);
    proto::Hello h = NodeAHello();
    proto::TaskReport running;
    running.attempt_id = "1.1";
    running.state = proto::TaskState::kRunning;
    h.tasks.push_back(running);
    conn_->Send(proto::EncodeEnvelope(
        {proto::kProtocolVersion, 0, 0, std::string(proto::kHello), proto::Encode(h)}));
  }
  void OnMessage(std::string text) override {
    auto env = proto::DecodeEnvelope(text);
    if (env.ok() && env->type == proto::kWelcome) welcomed = true;
  }
  void OnBinary(std::string bytes) override {
    auto f = proto::DecodeTunnelFrame(bytes);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(mux_.OnFrame(*f).ok());
    Pump();
  }
  void OnSent() override { Pump(); }
  void OnClose(std::string) override {}

  std::atomic<bool> welcomed{false};
  std::mutex mu;
  std::vector<TunnelTarget> targets;  // guarded by mu
  std::string received;               // every stream's bytes; guarded by mu
  std::string close_reason = "session ended: the provider reclaimed the GPU (test)";
  std::string answer;

 private:
  void Pump() {
    // Echo what was held back while the stream's buffer was full.
    for (auto& [id, bytes] : held_) {
      size_t took = mux_.Write(id, bytes);
      mux_.Consumed(id, took);
      bytes.erase(0, took);
    }
    while (conn_ && conn_->queued_bytes() < 64 * 1024) {
      auto f = mux_.NextFrame();
      if (!f) break;
      conn_->SendBinary(proto::EncodeTunnelFrame(*f));
    }
  }

  Behaviour behaviour_;
  std::shared_ptr<net::WsConnection> conn_;
  std::map<uint32_t, std::string> held_;
  std::set<uint32_t> answered_;
  proto::TunnelMux mux_{
      proto::TunnelMuxOptions{.opens_odd = false},
      proto::TunnelMux::Events{[this](uint32_t id, const std::string& target) {
                                 auto t = proto::DecodeTunnelTarget(target);
                                 ASSERT_TRUE(t.ok()) << t.status().ToString();
                                 {
                                   std::lock_guard lock(mu);
                                   targets.push_back(*t);
                                 }
                                 if (behaviour_ == Behaviour::kCloseWithReason)
                                   mux_.Close(id, close_reason);
                               },
                               [this](uint32_t id, std::string_view data) {
                                 if (behaviour_ == Behaviour::kAnswer) {
                                   mux_.Consumed(id, data.size());
                                   if (answered_.insert(id).second) {
                                     mux_.Write(id, answer);
                                     mux_.Close(id);
                                   }
                                   return;
                                 }
                                 // Echo; bytes the stream cannot take yet are granted back only
                                 // once written, so the user is held at one window.
                                 {
                                   std::lock_guard lock(mu);
                                   received.append(data);
                                 }
                                 std::string& held = held_[id];
                                 held.append(data);
                                 size_t took = mux_.Write(id, held);
                                 mux_.Consumed(id, took);
                                 held.erase(0, took);
                               },
                               [this](uint32_t id, const std::string&) { mux_.Close(id); }}};
};

// A user's WebSocket, recording what arrives.
class UserSocket : public net::WsHandler {
 public:
  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    std::lock_guard lock(mu);
    conn_ = std::move(conn);
    opened = true;
  }
  void OnMessage(std::string) override {}
  void OnBinary(std::string bytes) override {
    std::lock_guard lock(mu);
    received += bytes;
  }
  void OnClose(std::string reason) override {
    std::lock_guard lock(mu);
    close_reason = std::move(reason);
    closed = true;
  }
  std::mutex mu;
  std::shared_ptr<net::WsConnection> conn_;
  bool opened = false, closed = false;
  std::string received, close_reason;
};

class SessionGatewayTest : public ApiTestServer {
 protected:
  // Job 1 of alice, a shell session declaring port 8123, running on node a
  // (attempt 1.1) with a scripted agent connected.
  void StartSession(ScriptedAgent::Behaviour b = ScriptedAgent::Behaviour::kEcho,
                    SessionSpec session = {}) {
    JobSpec spec;
    if (session.ports.empty()) session.ports = {8123};
    spec.session = session;
    node_ = PlaceJob(spec);
    agent_side_ = std::make_shared<ScriptedAgent>(b);
    agent_side_->answer = agent_side_answer_;
    OnLoop([&] {
      net::WsClientOptions o;
      o.url = "ws://127.0.0.1:" + std::to_string(http_->port()) + "/v1/agent/connect";
      o.headers["Authorization"] = "Bearer " + agent_;
      net::WsConnect(loop_, o, agent_side_);
      return 0;
    });
    WaitFor([&] { return agent_side_->welcomed.load(); });
    WaitFor([&] { return Json(Call("GET", "/v1/jobs/1", alice_))["state"] == "running"; });
  }

  std::shared_ptr<UserSocket> ConnectUser(const std::string& target, const std::string& token) {
    auto user = std::make_shared<UserSocket>();
    OnLoop([&] {
      net::WsClientOptions o;
      o.url = "ws://127.0.0.1:" + std::to_string(http_->port()) + target;
      o.headers["Authorization"] = "Bearer " + token;
      net::WsConnect(loop_, o, user);
      return 0;
    });
    WaitFor([&] {
      std::lock_guard lock(user->mu);
      return user->opened || user->closed;
    });
    return user;
  }

  template <typename F>
  void WaitFor(F pred, int timeout_ms = 10'000) {
    for (int i = 0; i < timeout_ms / 5 && !pred(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(pred()) << "timed out";
  }

  // A request to a URL on either address (a sign-in link is one).
  static net::HttpResponse Get(const std::string& url, std::map<std::string, std::string> headers) {
    size_t path = url.find('/', url.find("://") + 3);
    net::HttpCall c;
    c.base_url = url.substr(0, path);
    c.method = "GET";
    c.target = url.substr(path);
    c.headers = std::move(headers);
    c.timeout_ms = 5000;
    auto r = net::Fetch(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : net::HttpResponse{};
  }

  std::string node_;
  std::shared_ptr<ScriptedAgent> agent_side_;
  std::string agent_side_answer_;  // for Behaviour::kAnswer
};

TEST_F(SessionGatewayTest, ConnectRelaysBytesBothWaysThroughTheAgentChannel) {
  StartSession();
  auto user = ConnectUser("/v1/jobs/1/connect?port=8123", alice_);
  ASSERT_TRUE(user->opened) << user->close_reason;
  // 3 MiB, far more than a window: the relay's back-pressure paces it.
  std::string sent;
  for (int i = 0; i < 3 * 1024; ++i) sent += std::string(1024, static_cast<char>('a' + i % 26));
  OnLoop([&] {
    for (size_t off = 0; off < sent.size(); off += 100'000)
      user->conn_->SendBinary(sent.substr(off, 100'000));
    return 0;
  });
  WaitFor(
      [&] {
        std::lock_guard lock(user->mu);
        return user->received.size() >= sent.size();
      },
      30'000);
  {
    std::lock_guard lock(user->mu);
    EXPECT_TRUE(user->received == sent);
  }
  std::lock_guard lock(agent_side_->mu);
  ASSERT_EQ(agent_side_->targets.size(), 1u);
  EXPECT_EQ(agent_side_->targets[0].attempt_id, "1.1");
  EXPECT_EQ(agent_side_->targets[0].kind, TunnelTarget::Kind::kTcp);
  EXPECT_EQ(agent_side_->targets[0].port, 8123);
}

TEST_F(SessionGatewayTest, OnlyTheOwnerAndAdminsMayConnectAndOnlyToDeclaredPorts) {
  StartSession();
  // Another member does not even see the job.
  auto bob = ConnectUser("/v1/jobs/1/connect?port=8123", bob_);
  EXPECT_FALSE(bob->opened);
  EXPECT_NE(bob->close_reason.find("HTTP 404"), std::string::npos) << bob->close_reason;
  auto bob_exec = ConnectUser("/v1/jobs/1/exec", bob_);
  EXPECT_FALSE(bob_exec->opened);
  EXPECT_NE(bob_exec->close_reason.find("HTTP 404"), std::string::npos);
  // An undeclared port is refused, naming the declared ones.
  auto other_port = ConnectUser("/v1/jobs/1/connect?port=22", alice_);
  EXPECT_FALSE(other_port->opened);
  EXPECT_NE(other_port->close_reason.find("HTTP 403"), std::string::npos);
  EXPECT_NE(other_port->close_reason.find("port 22 is not one job 1 declared (it declared 8123)"),
            std::string::npos)
      << other_port->close_reason;
  // Jupyter is only for Jupyter sessions.
  auto jupyter = ConnectUser("/v1/jobs/1/connect?target=jupyter", alice_);
  EXPECT_NE(jupyter->close_reason.find("not a Jupyter session"), std::string::npos);
  // No token.
  auto anonymous = ConnectUser("/v1/jobs/1/connect?port=8123", "");
  EXPECT_NE(anonymous->close_reason.find("HTTP 401"), std::string::npos);
  // Admins may.
  auto admin = ConnectUser("/v1/jobs/1/connect?port=8123", admin_);
  EXPECT_TRUE(admin->opened) << admin->close_reason;
  // No stream reached the agent for any refusal.
  WaitFor([&] {
    std::lock_guard lock(agent_side_->mu);
    return agent_side_->targets.size() == 1;
  });
}

TEST_F(SessionGatewayTest, AJobThatDoesNotRunIsRefusedWithItsState) {
  JobSpec spec;
  spec.name = "s";
  spec.run = "sleep 100";
  spec.resources.gpus = 64;  // never placed
  spec.session = SessionSpec{};
  ASSERT_TRUE(OnLoop([&] { return pool_->Submit(spec, "alice").ok(); }));
  auto user = ConnectUser("/v1/jobs/1/exec", alice_);
  EXPECT_FALSE(user->opened);
  EXPECT_NE(user->close_reason.find("HTTP 409"), std::string::npos) << user->close_reason;
  EXPECT_NE(user->close_reason.find("job 1 is pending; connect once it runs"), std::string::npos)
      << user->close_reason;
}

TEST_F(SessionGatewayTest, TheAgentsReasonForEndingAStreamReachesTheUser) {
  StartSession(ScriptedAgent::Behaviour::kCloseWithReason);
  auto user = ConnectUser("/v1/jobs/1/connect?port=8123", alice_);
  WaitFor([&] {
    std::lock_guard lock(user->mu);
    return user->closed;
  });
  std::lock_guard lock(user->mu);
  EXPECT_EQ(user->close_reason, agent_side_->close_reason);
}

TEST_F(SessionGatewayTest, ExecSendsTheCommandAsTheStreamsTargetAndRefusesBadOnes) {
  StartSession();
  auto user = ConnectUser("/v1/jobs/1/exec", alice_);
  ASSERT_TRUE(user->opened);
  OnLoop([&] {
    user->conn_->Send(R"({"argv":["bash","-l"],"tty":true,"rows":30,"cols":100,"term":"xterm"})");
    return 0;
  });
  WaitFor([&] {
    std::lock_guard lock(agent_side_->mu);
    return agent_side_->targets.size() == 1;
  });
  {
    std::lock_guard lock(agent_side_->mu);
    const TunnelTarget& t = agent_side_->targets[0];
    EXPECT_EQ(t.kind, TunnelTarget::Kind::kExec);
    EXPECT_EQ(t.attempt_id, "1.1");
    EXPECT_EQ(t.argv, (std::vector<std::string>{"bash", "-l"}));
    EXPECT_TRUE(t.tty);
    EXPECT_EQ(t.rows, 30);
    EXPECT_EQ(t.cols, 100);
  }
  // A command that is not one closes the socket, saying why.
  auto bad = ConnectUser("/v1/jobs/1/exec", alice_);
  ASSERT_TRUE(bad->opened);
  OnLoop([&] {
    bad->conn_->Send(R"({"argv":[],"tty":false})");
    return 0;
  });
  WaitFor([&] {
    std::lock_guard lock(bad->mu);
    return bad->closed;
  });
  std::lock_guard lock(bad->mu);
  EXPECT_NE(bad->close_reason.find("argv"), std::string::npos) << bad->close_reason;
}

TEST_F(SessionGatewayTest, AnIdleSessionIsStoppedAndTrafficKeepsItAlive) {
  SessionSpec s;
  s.idle_timeout_ms = 10 * 60'000;
  StartSession(ScriptedAgent::Behaviour::kEcho, s);
  clock_.AdvanceMs(9 * 60'000);
  OnLoop([&] {
    gateway_->CheckIdle();
    gateway_->Touch(1);  // traffic at 9 minutes
    return 0;
  });
  clock_.AdvanceMs(9 * 60'000);
  OnLoop([&] {
    gateway_->CheckIdle();
    return 0;
  });
  EXPECT_EQ(Json(Call("GET", "/v1/jobs/1", alice_))["state"], "running");
  clock_.AdvanceMs(2 * 60'000);
  OnLoop([&] {
    gateway_->CheckIdle();
    return 0;
  });
  auto job = Json(Call("GET", "/v1/jobs/1", alice_));
  EXPECT_EQ(job["state"], "cancelled");
  EXPECT_EQ(job["reason"], "stopped: idle for 10m (session.idle_timeout); its GPUs are free again");
}

TEST_F(SessionGatewayTest, AnIdleSessionThatCheckpointsLeavesFirstThenEnds) {
  SessionSpec s;
  s.idle_timeout_ms = 60'000;
  JobSpec spec;
  spec.session = s;
  spec.session->ports = {8123};
  spec.checkpoint = CheckpointSpec{};
  spec.checkpoint->grace_ms = 5000;
  node_ = PlaceJob(spec);
  OnLoop([&] {
    proto::TaskReport r;
    r.attempt_id = "1.1";
    r.state = proto::TaskState::kRunning;
    EXPECT_TRUE(
        pool_->AgentMessage(node_, 1, std::string(proto::kTaskStatus), proto::Encode(r)).ok());
    gateway_->JobChanged(1);
    return 0;
  });
  clock_.AdvanceMs(61'000);
  OnLoop([&] {
    gateway_->CheckIdle();
    return 0;
  });
  // Stopped like a preemption (checkpoint signal, upload), still running.
  auto job = Json(Call("GET", "/v1/jobs/1", alice_));
  EXPECT_EQ(job["state"], "running");
  auto stops = OnLoop([&] {
    std::vector<proto::StopTask> out;
    for (const auto& m : *pool_->PendingOrders(node_, 0)) {
      if (m.type == proto::kStop) out.push_back(*proto::DecodeStopTask(m.body));
    }
    return out;
  });
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_TRUE(stops[0].requeue);
  EXPECT_EQ(stops[0].grace_ms, 5000);
  // Once it has left, the job ends, cancelled, and is not requeued.
  OnLoop([&] {
    proto::TaskReport r;
    r.attempt_id = "1.1";
    r.state = proto::TaskState::kExited;
    r.exit_code = 143;
    EXPECT_TRUE(
        pool_->AgentMessage(node_, 2, std::string(proto::kTaskStatus), proto::Encode(r)).ok());
    return 0;
  });
  job = Json(Call("GET", "/v1/jobs/1", alice_));
  EXPECT_EQ(job["state"], "cancelled");
  EXPECT_NE(job["reason"].get<std::string>().find("idle for 1m"), std::string::npos) << job;
}

TEST_F(SessionGatewayTest, SignInLinksWorkOnceAndCookiesOnlyForTheirSession) {
  SessionSpec s;
  s.kind = SessionKind::kJupyter;
  s.jupyter_token = "tok";
  StartSession(ScriptedAgent::Behaviour::kEcho, s);
  // Links are for Jupyter sessions, and the owner's.
  EXPECT_EQ(Call("POST", "/v1/sessions/1/link", bob_).status, 404);
  auto link = Call("POST", "/v1/sessions/1/link", alice_);
  ASSERT_EQ(link.status, 200) << link.body;
  // The link is on the sessions' own address, as the caller named the host.
  std::string url = Json(link)["url"];
  EXPECT_TRUE(url.starts_with(sessions_base_ + "/v1/sessions/1/login?code=")) << url;
  EXPECT_EQ(Json(link)["jupyter_token"], "tok");
  // Its path on the API's address is no way in: it says where sessions are.
  auto misdirected = Call("GET", url.substr(sessions_base_.size()), "");
  EXPECT_EQ(misdirected.status, 404);
  EXPECT_NE(ErrorMessage(misdirected).find(sessions_base_), std::string::npos) << misdirected.body;
  auto login = Get(url, {});
  ASSERT_EQ(login.status, 302) << login.body;
  EXPECT_EQ(login.headers["location"], "/v1/sessions/1/proxy/");
  std::string cookie = login.headers["set-cookie"].substr(0, login.headers["set-cookie"].find(';'));
  EXPECT_NE(login.headers["set-cookie"].find("Path=/v1/sessions/1/; HttpOnly"), std::string::npos);
  EXPECT_EQ(Get(url, {}).status, 401);  // once only
  // Expired links are refused too.
  std::string url2 = Json(Call("POST", "/v1/sessions/1/link", alice_))["url"];
  clock_.AdvanceMs(61'000);
  EXPECT_EQ(Get(url2, {}).status, 401);
  // Without the cookie, the proxy says how to sign in; a cookie for
  // another session does not open this one.
  auto anon = Get(sessions_base_ + "/v1/sessions/1/proxy/api", {});
  EXPECT_EQ(anon.status, 401);
  EXPECT_NE(ErrorMessage(anon).find("gpupool session open 1"), std::string::npos);
  EXPECT_EQ(Get(sessions_base_ + "/v1/sessions/2/proxy/api", {{"cookie", cookie}}).status, 401);
}

TEST_F(SessionGatewayTest, TheSessionsAddressServesNothingElse) {
  StartSession();
  // Not the API, not links, not tunnels: a notebook page on this origin
  // reaches none of them, whatever credentials its browser holds.
  for (const char* path : {"/v1/jobs", "/v1/whoami", "/ui/", "/v1/jobs/1/connect?port=8123"}) {
    auto r = Get(sessions_base_ + path, {{"authorization", "Bearer " + alice_}});
    EXPECT_EQ(r.status, 404) << path << ": " << r.body;
  }
  net::HttpCall c;
  c.base_url = sessions_base_;
  c.method = "POST";
  c.target = "/v1/sessions/1/link";
  c.headers["authorization"] = "Bearer " + alice_;
  auto r = net::Fetch(c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  // And the proxy is not on the API's address.
  EXPECT_EQ(Call("GET", "/v1/sessions/1/proxy/api", alice_).status, 404);
}

TEST_F(SessionGatewayTest, ANotebookServersCookiesStayInsideItsSession) {
  SessionSpec s;
  s.kind = SessionKind::kJupyter;
  s.jupyter_token = "jtok";
  agent_side_answer_ =
      "HTTP/1.1 200 OK\r\nSet-Cookie: gpupool_dashboard=evil; Path=/\r\n"
      "Set-Cookie: _xsrf=1; Path=/v1/sessions/1/proxy/\r\nClear-Site-Data: \"cookies\"\r\n"
      "Set-Cookie: a=evil; Path=/v1/\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
  StartSession(ScriptedAgent::Behaviour::kAnswer, s);
  auto r =
      Get(sessions_base_ + "/v1/sessions/1/proxy/tree", {{"authorization", "Bearer " + alice_}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(r.headers["set-cookie"], "_xsrf=1; Path=/v1/sessions/1/proxy/");
  EXPECT_EQ(r.headers.count("clear-site-data"), 0u);
}

TEST_F(SessionGatewayTest, WithAHostNamePerSessionEachIsServedOnlyOnItsOwn) {
  SessionSpec s;
  s.kind = SessionKind::kJupyter;
  s.jupyter_token = "jtok";
  agent_side_answer_ = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
  StartSession(ScriptedAgent::Behaviour::kAnswer, s);
  const std::string port = std::to_string(sessions_http_->port());
  OnLoop([&] {
    gateway_->ServeSessionsAt(
        {.url = "http://{id}.sessions.test:" + port, .tls = false, .port = sessions_http_->port()});
    return 0;
  });
  std::string url = Json(Call("POST", "/v1/sessions/1/link", alice_))["url"];
  const std::string own = "1.sessions.test:" + port;
  ASSERT_TRUE(url.starts_with("http://" + own + "/v1/sessions/1/login?code=")) << url;
  // The listener is reached at 127.0.0.1 here; the Host header names the
  // session's host, as a browser's does through DNS.
  const std::string path = url.substr(url.find("/v1/"));
  auto other = Get(sessions_base_ + path, {{"host", "2.sessions.test:" + port}});
  EXPECT_EQ(other.status, 404);
  EXPECT_NE(ErrorMessage(other).find("http://" + own), std::string::npos) << other.body;
  EXPECT_EQ(Get(sessions_base_ + path, {{"host", "127.0.0.1:" + port}}).status, 404);
  EXPECT_EQ(Get(sessions_base_ + path, {{"host", own}}).status, 302);  // the code still worked
  // The proxy too: session 1 is not reached from session 2's host.
  const std::string proxy = sessions_base_ + "/v1/sessions/1/proxy/tree";
  EXPECT_EQ(Get(proxy, {{"host", "2.sessions.test:" + port}, {"authorization", "Bearer " + alice_}})
                .status,
            404);
  auto mine =
      Get(proxy, {{"host", "1.SESSIONS.test:" + port}, {"authorization", "Bearer " + alice_}});
  EXPECT_EQ(mine.status, 200) << mine.body;
  EXPECT_EQ(mine.body, "ok");
  // A URL with the scheme's default port: browsers send the host alone.
  OnLoop([&] {
    gateway_->ServeSessionsAt(
        {.url = "http://{id}.sessions.test:80", .tls = false, .port = sessions_http_->port()});
    return 0;
  });
  auto plain = Get(proxy, {{"host", "1.sessions.test"}, {"authorization", "Bearer " + alice_}});
  EXPECT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(Get(proxy, {{"host", "2.sessions.test"}, {"authorization", "Bearer " + alice_}}).status,
            404);
}

TEST(SessionsUrl, WhatIsAcceptedAndWhatIsNot) {
  EXPECT_TRUE(SessionGateway::CheckSessionsUrl("https://sessions.example.edu:8471").ok());
  EXPECT_TRUE(SessionGateway::CheckSessionsUrl("https://{id}.sessions.example.edu/").ok());
  for (const char* bad : {"ftp://x", "sessions.example.edu", "https://x/{id}",
                          "https://{id}.{id}.x", "https://x/prefix"}) {
    Status st = SessionGateway::CheckSessionsUrl(bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("--sessions-url"), std::string::npos) << bad;
  }
}

TEST_F(SessionGatewayTest, TheProxySendsJupyterItsTokenInsteadOfTheCallersCredentials) {
  SessionSpec s;
  s.kind = SessionKind::kJupyter;
  s.jupyter_token = "jtok";
  StartSession(ScriptedAgent::Behaviour::kEcho, s);
  // The scripted agent echoes, so the answer is the request Jupyter got.
  net::HttpCall c;
  c.base_url = sessions_base_;
  c.method = "GET";
  c.target = "/v1/sessions/1/proxy/api/status?x=1";
  c.headers["authorization"] = "Bearer " + alice_;
  c.headers["cookie"] = "gpupool_session=abc; _xsrf=keep; gpupool_dashboard=dash";
  c.timeout_ms = 3000;
  (void)net::Fetch(c);  // an echo is no HTTP answer; what reached the agent matters
  WaitFor([&] {
    std::lock_guard lock(agent_side_->mu);
    return agent_side_->received.find("\r\n\r\n") != std::string::npos;
  });
  std::lock_guard lock(agent_side_->mu);
  EXPECT_EQ(agent_side_->targets[0].kind, TunnelTarget::Kind::kJupyter);
  const std::string& req = agent_side_->received;
  EXPECT_TRUE(req.starts_with("GET /v1/sessions/1/proxy/api/status?x=1 HTTP/1.1\r\n")) << req;
  EXPECT_NE(req.find("authorization: token jtok\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("connection: close\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("cookie: _xsrf=keep\r\n"), std::string::npos) << req;
  EXPECT_EQ(req.find(alice_), std::string::npos) << "the user's token reached Jupyter";
  EXPECT_EQ(req.find("gpupool_session"), std::string::npos) << req;
  EXPECT_EQ(req.find("gpupool_dashboard"), std::string::npos) << "the dashboard's session reached "
                                                                 "Jupyter";
}

}  // namespace
}  // namespace gpupool::server
