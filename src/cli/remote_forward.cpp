// gpupool session connect: local ports forwarded into a session, like
// ssh -L. Each connection accepted on 127.0.0.1:LOCAL gets its own
// WebSocket to /v1/jobs/{id}/connect (server/session_gateway.h) whose
// binary messages carry the raw bytes; each side stops being read while the
// other holds too much, and resumes as it drains. Runs until a signal, or
// until the session ends (a close reason says so, or the job is seen not
// running any more).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/command_util.h"
#include "cli/remote_ws.h"
#include "cli/session_commands.h"
#include "net/tcp_stream.h"

namespace gpupool::cli {

namespace {

constexpr size_t kHighWater = 1 << 20;
constexpr size_t kLowWater = 256 << 10;
constexpr int64_t kPollIntervalMs = 3'000;
// How long open tunnels get to close when the command ends.
constexpr int64_t kShutdownMs = 3'000;

struct Forward {
  uint16_t local = 0;
  std::string remote;  // "8888" or "jupyter"
  std::string query;   // "port=8888" or "target=jupyter"
};

Result<Forward> ParseForward(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--port \"" + text + "\": " + why +
                                   " (expected LOCAL:REMOTE, e.g. 8888:8888, 0:jupyter)");
  };
  size_t colon = text.find(':');
  std::string local = colon == std::string::npos ? text : text.substr(0, colon);
  std::string remote = colon == std::string::npos ? text : text.substr(colon + 1);
  auto port = [](const std::string& s, int min) -> int {
    if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    int v = std::stoi(s);
    return v >= min && v <= 65535 ? v : -1;
  };
  Forward f;
  int l = port(local, 0);
  if (l < 0) return bad("the local port must be 0 (any free one) to 65535");
  f.local = static_cast<uint16_t>(l);
  if (remote == "jupyter") {
    f.remote = remote;
    f.query = "target=jupyter";
    return f;
  }
  int r = port(remote, 1);
  if (r < 0) return bad("the remote port must be 1 to 65535, or jupyter");
  f.remote = std::to_string(r);
  f.query = "port=" + f.remote;
  return f;
}

class Pipe;

// What the whole command does when one tunnel learns something.
class Session {
 public:
  virtual ~Session() = default;
  virtual void PipeOpened(const std::shared_ptr<Pipe>& pipe) = 0;
  // Both of its connections have ended.
  virtual void PipeClosed() = 0;
  // The forward cannot work (the server refused it for good): stop, exit 1.
  virtual void Refused(const std::string& message) = 0;
  // A tunnel ended abnormally; ends everything when the session is over.
  virtual void TunnelEnded(const std::string& message) = 0;
};

// One accepted connection and its WebSocket. The two net handlers below
// forward their callbacks here; all on the loop thread.
class Pipe : public std::enable_shared_from_this<Pipe> {
 public:
  Pipe(net::EventLoop& loop, net::WsClientOptions options, Session& session)
      : loop_(loop), options_(std::move(options)), session_(session) {}

  void TcpOpen(std::shared_ptr<net::RawConnection> conn);
  void TcpData(std::string_view bytes) {
    if (!ws_) return;
    ws_->SendBinary(std::string(bytes));
    if (!tcp_paused_ && ws_->queued_bytes() > kHighWater) SetTcpPaused(true);
  }
  void TcpSent() {
    if (ws_ && ws_paused_ && tcp_ && tcp_->queued_bytes() < kLowWater) {
      ws_paused_ = false;
      ws_->PauseReading(false);
    }
  }
  void TcpClosed() {
    tcp_.reset();
    tcp_done_ = true;
    if (ws_) ws_->Close("");
    MaybeDone();
  }

  void WsOpen(std::shared_ptr<net::WsConnection> conn) {
    ws_ = std::move(conn);
    opened_ = true;
    if (!tcp_ || shutting_down_) return ws_->Close("");  // nothing to relay any more
    SetTcpPaused(false);
  }
  void WsData(std::string bytes) {
    if (!tcp_) return;
    tcp_->Write(std::move(bytes));
    if (!ws_paused_ && tcp_->queued_bytes() > kHighWater) {
      ws_paused_ = true;
      ws_->PauseReading(true);
    }
  }
  void WsSent() {
    if (tcp_ && tcp_paused_ && ws_ && ws_->queued_bytes() < kLowWater) SetTcpPaused(false);
  }
  void WsClosed(const std::string& reason) {
    ws_.reset();
    ws_done_ = true;
    WsEnd end = DescribeWsEnd(reason, opened_);
    if (tcp_) {
      // Unpaused: a paused connection holds itself until its close is done.
      SetTcpPaused(false);
      tcp_->Close();  // after what it has queued
    }
    MaybeDone();
    if (end.message.empty() || shutting_down_) return;
    // 4xx: the server will refuse every connection alike (an undeclared
    // port, another user's job, a job that is not running).
    if (!opened_ && end.http_status >= 400 && end.http_status < 500)
      return session_.Refused(end.message);
    session_.TunnelEnded(end.message);
  }

  // The command ends: both connections close (cleanly, unpaused, so
  // that nothing is left holding itself when the loop stops).
  void Shutdown() {
    shutting_down_ = true;
    if (tcp_) {
      SetTcpPaused(false);
      tcp_->Close();
    }
    if (ws_) {
      ws_->PauseReading(false);
      ws_->Close("");
    }
  }

 private:
  void SetTcpPaused(bool paused) {
    tcp_paused_ = paused;
    if (tcp_) tcp_->PauseReading(paused);
  }

  void MaybeDone() {
    if (!tcp_done_ || !ws_done_ || reported_done_) return;
    reported_done_ = true;
    session_.PipeClosed();
  }

  net::EventLoop& loop_;
  net::WsClientOptions options_;
  Session& session_;
  std::shared_ptr<net::RawConnection> tcp_;
  std::shared_ptr<net::WsConnection> ws_;
  bool opened_ = false, tcp_paused_ = false, ws_paused_ = false;
  bool tcp_done_ = false, ws_done_ = false, reported_done_ = false, shutting_down_ = false;
};

class PipeTcpSide : public net::RawHandler {
 public:
  explicit PipeTcpSide(std::shared_ptr<Pipe> pipe) : pipe_(std::move(pipe)) {}
  void OnOpen(std::shared_ptr<net::RawConnection> conn) override { pipe_->TcpOpen(conn); }
  void OnData(std::string_view bytes) override { pipe_->TcpData(bytes); }
  void OnSent() override { pipe_->TcpSent(); }
  void OnClose(std::string) override { pipe_->TcpClosed(); }

 private:
  std::shared_ptr<Pipe> pipe_;
};

class PipeWsSide : public net::WsHandler {
 public:
  explicit PipeWsSide(std::shared_ptr<Pipe> pipe) : pipe_(std::move(pipe)) {}
  void OnOpen(std::shared_ptr<net::WsConnection> conn) override { pipe_->WsOpen(std::move(conn)); }
  void OnMessage(std::string) override {}
  void OnBinary(std::string bytes) override { pipe_->WsData(std::move(bytes)); }
  void OnSent() override { pipe_->WsSent(); }
  void OnClose(std::string reason) override { pipe_->WsClosed(reason); }

 private:
  std::shared_ptr<Pipe> pipe_;
};

void Pipe::TcpOpen(std::shared_ptr<net::RawConnection> conn) {
  tcp_ = std::move(conn);
  session_.PipeOpened(shared_from_this());
  // Nothing to send the bytes to until the WebSocket is open.
  SetTcpPaused(true);
  net::WsConnect(loop_, options_, std::make_shared<PipeWsSide>(shared_from_this()));
}

// Asks the server every few seconds whether the job still runs, off the
// loop thread (ApiClient blocks), and tells the loop when it does not.
class JobWatcher {
 public:
  JobWatcher(net::EventLoop& loop, Endpoint endpoint, int64_t job_id,
             std::function<void(std::string)> on_end)
      : thread_([this, &loop, endpoint = std::move(endpoint), job_id, on_end = std::move(on_end)] {
          Run(loop, endpoint, job_id, on_end);
        }) {}
  ~JobWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Run(net::EventLoop& loop, const Endpoint& endpoint, int64_t job_id,
           const std::function<void(std::string)>& on_end) {
    ApiClient api(endpoint);
    const std::string id = std::to_string(job_id);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(kPollIntervalMs),
                         [this] { return stop_; }))
          return;
      }
      auto job = api.Get("/v1/jobs/" + id, 10'000);
      std::string ended;
      if (!job.ok()) {
        // The server may be restarting: only its refusals end the forwarding.
        StatusCode c = job.status().code();
        if (c == StatusCode::kNotFound || c == StatusCode::kPermissionDenied ||
            c == StatusCode::kUnauthenticated)
          ended = job.status().message();
      } else if (Str(*job, "state") != "running") {
        std::string reason = Str(*job, "reason");
        ended = "session ended: job " + id + " is " + Str(*job, "state") +
                (reason.empty() ? "" : " (" + reason + ")");
      }
      if (!ended.empty()) {
        loop.Post([on_end, ended] { on_end(ended); });
        return;
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  std::thread thread_;  // last: starts once the rest is built
};

// Owns the listeners; ends the command, letting open tunnels close first.
class Forwarder : public Session {
 public:
  explicit Forwarder(net::EventLoop& loop) : loop_(loop) {}

  void Listen(std::unique_ptr<net::TcpListener> l) { listeners_.push_back(std::move(l)); }

  void PipeOpened(const std::shared_ptr<Pipe>& pipe) override {
    ++live_;
    std::erase_if(pipes_, [](const std::weak_ptr<Pipe>& p) { return p.expired(); });
    pipes_.push_back(pipe);
    if (ended_) pipe->Shutdown();
  }
  void PipeClosed() override {
    --live_;
    if (ended_ && live_ == 0) loop_.Stop();
  }
  void Refused(const std::string& message) override { End(1, message); }
  void TunnelEnded(const std::string& message) override {
    if (SaysSessionEnded(message)) return End(1, message);
    std::cerr << "gpupool: a forwarded connection ended: " << message << "\n";
  }

  void End(int code, const std::string& message) {
    if (ended_) return;
    ended_ = true;
    code_ = code;
    if (!message.empty()) std::cerr << "gpupool: " << message << "\n";
    for (auto& l : listeners_) l->Close();
    for (auto& weak : pipes_) {
      if (auto p = weak.lock()) p->Shutdown();
    }
    if (live_ == 0) return loop_.Stop();
    loop_.RunAfter(kShutdownMs, [this] { loop_.Stop(); });
  }
  int code() const { return code_; }

  // Before the loop goes (listeners belong to it).
  void Clear() { listeners_.clear(); }

 private:
  net::EventLoop& loop_;
  std::vector<std::unique_ptr<net::TcpListener>> listeners_;
  std::vector<std::weak_ptr<Pipe>> pipes_;
  int live_ = 0;
  bool ended_ = false;
  int code_ = 0;
};

}  // namespace

int CmdSessionConnect(const GlobalFlags& g, const std::string& id,
                      const std::vector<std::string>& ports) {
  auto job_id = ParseJobId(id);
  if (!job_id.ok()) return ReportError(job_id.status());
  std::vector<Forward> forwards;
  for (const std::string& p : ports) {
    auto f = ParseForward(p);
    if (!f.ok()) return ReportError(f.status());
    forwards.push_back(*f);
  }
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  const std::string job_path = "/v1/jobs/" + std::to_string(*job_id);
  auto job = api->Get(job_path);
  if (!job.ok()) return ReportError(job.status());
  if (Str(*job, "state") != "running") {
    std::string reason = Str(*job, "reason");
    return ReportError(Status::FailedPrecondition("job " + id + " is " + Str(*job, "state") +
                                                  (reason.empty() ? "" : " (" + reason + ")")));
  }
  bool jupyter = false;
  if (auto s = job->find("spec"); s != job->end() && s->contains("session")) {
    jupyter = Str((*s)["session"], "kind") == "jupyter";
  }
  std::string jupyter_token;
  if (forwards.empty()) {
    if (!jupyter) {
      return ReportError(Status::InvalidArgument(
          "job " + id + " is not a Jupyter session: say which ports to forward, e.g. " +
          "gpupool session connect " + id + " -p 8888:8888"));
    }
    forwards.push_back(*ParseForward("0:jupyter"));
  }
  for (const Forward& f : forwards) {
    if (f.remote != "jupyter" || !jupyter_token.empty()) continue;
    auto link =
        api->Post("/v1/sessions/" + std::to_string(*job_id) + "/link", nlohmann::json::object());
    if (!link.ok()) return ReportError(link.status());
    jupyter_token = Str(*link, "jupyter_token");
  }

  net::EventLoop loop;
  Forwarder forwarder(loop);
  for (const Forward& f : forwards) {
    const std::string target = job_path + "/connect?" + f.query;
    auto options = GatewayOptions(api->endpoint(), target);
    if (!options.ok()) return ReportError(options.status());
    // Each connection's options anew: of several servers, the one that
    // answered last (the job watcher's calls follow a failover).
    auto listener = net::TcpListen(
        loop, "127.0.0.1", f.local, [&loop, &forwarder, e = api->endpoint(), target] {
          return std::make_shared<PipeTcpSide>(
              std::make_shared<Pipe>(loop, *GatewayOptions(e, target), forwarder));
        });
    if (!listener.ok()) {
      return ReportError(
          Status(listener.status().code(), "cannot listen on 127.0.0.1:" + std::to_string(f.local) +
                                               ": " + listener.status().message()));
    }
    uint16_t port = (*listener)->port();
    std::cout << "Forwarding 127.0.0.1:" << port << " -> job " << id
              << (f.remote == "jupyter" ? " jupyter" : " port " + f.remote) << "\n";
    if (f.remote == "jupyter") {
      std::cout << "Jupyter: http://127.0.0.1:" << port << "/v1/sessions/" << id
                << "/proxy/?token=" << jupyter_token << "\n";
    }
    forwarder.Listen(*std::move(listener));
  }
  std::cout << std::flush;

  loop.OnSignals({SIGINT, SIGTERM, SIGHUP}, [&forwarder](int) { forwarder.End(0, ""); });
  int code;
  {
    JobWatcher watcher(loop, api->endpoint(), *job_id,
                       [&forwarder](std::string why) { forwarder.End(1, why); });
    loop.Run();
    code = forwarder.code();
  }  // joins the watcher before the loop goes
  forwarder.Clear();
  return code;
}

}  // namespace gpupool::cli
