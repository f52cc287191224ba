// gpupool-agent-load: many simulated agents in one process, for measuring
// what the server spends on idle agents (docs/performance.md).
//
// Every simulated agent enrolls (POST /v1/agent/enroll with the join token)
// and is a real WebSocket to ws://HOST:PORT/v1/agent/connect with its node
// token, speaking the real agent protocol (proto/messages.h): hello with two
// simulated GPUs, wait for welcome, then heartbeats with GPU telemetry every
// --heartbeat-ms, each agent at its own random phase so they spread out.
// Reliable server orders are applied in seq order and acked; a `start` order
// is answered with task_status running, then exited 0 (no process is run),
// at once or, with --task-ms, that long after (the task is then held: listed
// in the hello of a reconnect, as a real agent's running tasks are, and a
// `stop` ends it). The final report counts the jobs started more than once
// (two attempts of one job: what a failover must not cause).
// Connections are opened at --ramp-per-s so the server sees no thundering
// herd; a dropped agent reconnects after a jittered back-off, resending its
// unacked reports like a real agent.
//
// All agents share one EventLoop thread. The run ends after --duration-s (or
// on SIGINT/SIGTERM); the exit code is 0 when every agent was welcomed.
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/ids.h"
#include "net/event_loop.h"
#include "net/http.h"
#include "net/http_client.h"
#include "net/reconnect.h"
#include "net/server_list.h"
#include "net/websocket.h"
#include "proto/channel.h"
#include "proto/messages.h"

namespace gpupool::bench {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Reports' timestamps: Unix ms.
int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Options {
  std::string server = "http://127.0.0.1:8470";
  std::string join_token;
  std::string join_token_file;
  int agents = 100;
  int gpus = 2;  // simulated A100s per agent
  int64_t heartbeat_ms = 5000;
  double duration_s = 60;
  double ramp_per_s = 200;
  double report_s = 10;
  std::string ready_file;  // written once every agent has been welcomed
  std::string name_prefix = "load-";
  int64_t task_ms = 0;  // how long a started task "runs"
};

struct Stats {
  int64_t welcomed_ever = 0;  // agents welcomed at least once
  int64_t connected = 0;      // agents welcomed and still connected
  int64_t welcomes = 0;       // welcome frames (reconnects count again)
  int64_t heartbeats = 0;
  int64_t disconnects = 0;       // welcomed connections that closed
  int64_t connect_failures = 0;  // connections that closed before welcome
  int64_t frames_in = 0;
  int64_t orders = 0;               // reliable server messages applied
  std::vector<int64_t> welcome_ms;  // connect start -> welcome, first time
  std::set<std::string> close_reasons;
  std::map<int64_t, std::set<std::string>> attempts_of_job;  // every start seen
};

class Load;

// One simulated agent: a node with two simulated GPUs and no processes.
class SimAgent {
 public:
  SimAgent(Load& load, int index);
  void Connect();
  void OnOpen(std::shared_ptr<net::WsConnection> conn);
  void OnMessage(const std::string& text);
  void OnClose(const std::string& reason);
  void Stop();
  bool Current(uint64_t generation) const { return generation == generation_; }
  bool welcomed_ever() const { return welcomed_ever_; }
  const std::string& name() const { return name_; }
  void set_token(std::string token) { token_ = std::move(token); }

 private:
  void OnWelcome(const proto::Welcome& w);
  void ApplyOrder(const proto::Envelope& env);
  void Heartbeat();
  void Push(std::string_view type, std::string body);
  void Send(const proto::Envelope& e);

  Load& load_;
  int index_;
  std::string name_;
  std::string instance_;
  std::string token_;  // its node token, from enrolling
  std::vector<GpuInfo> gpus_;
  std::shared_ptr<net::WsConnection> conn_;
  uint64_t generation_ = 0;
  bool welcomed_ = false;
  bool welcomed_ever_ = false;
  net::Reconnect reconnect_;  // which of the pool's servers, and when
  bool stopped_ = false;
  int64_t connect_started_ms_ = 0;
  int64_t heartbeat_ms_ = 5000;
  net::EventLoop::TimerId heartbeat_timer_ = 0;
  proto::Outbox outbox_;
  proto::InboundSequence in_;
  std::set<std::string> started_;        // attempts this agent "ran"
  std::map<std::string, int64_t> held_;  // running attempts (--task-ms) -> job id
};

// Routes one connection's callbacks to its agent, dropping those of a
// connection the agent has since replaced.
class Link : public net::WsHandler {
 public:
  Link(SimAgent* agent, uint64_t generation) : agent_(agent), generation_(generation) {}
  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    if (agent_->Current(generation_)) {
      agent_->OnOpen(std::move(conn));
    } else {
      conn->Close("superseded");
    }
  }
  void OnMessage(std::string text) override {
    if (agent_->Current(generation_)) agent_->OnMessage(text);
  }
  void OnClose(std::string reason) override {
    if (agent_->Current(generation_)) agent_->OnClose(reason);
  }

 private:
  SimAgent* agent_;
  uint64_t generation_;
};

class Load {
 public:
  // --server may list a pool's servers (net/server_list.h): each simulated
  // agent moves on to the next when its connection fails or closes, as a
  // real agent does.
  Load(Options o, net::EventLoop& loop) : o_(std::move(o)), loop_(loop) {
    for (const std::string& server : net::SplitServerList(o_.server)) {
      auto url = net::ParseUrl(server);
      if (!url) {
        ws_urls_.clear();
        break;
      }
      ws_urls_.push_back("ws://" + url->host + ":" + std::to_string(url->port) + url->path +
                         "/v1/agent/connect");
    }
  }

  bool Init() {
    if (ws_urls_.empty()) {
      std::cerr << "gpupool-agent-load: --server: invalid URL \"" << o_.server << "\"\n";
      return false;
    }
    agents_.reserve(o_.agents);
    for (int i = 0; i < o_.agents; ++i) {
      agents_.push_back(std::make_unique<SimAgent>(*this, i));
      // Each simulated agent enrolls, as a real one does on its first start,
      // and connects with its own node token.
      auto token = Enroll(agents_.back()->name());
      if (!token.ok()) {
        std::cerr << "gpupool-agent-load: enrolling " << agents_.back()->name() << ": "
                  << token.status().message() << "\n";
        return false;
      }
      agents_.back()->set_token(*token);
    }
    return true;
  }

  Result<std::string> Enroll(const std::string& node) {
    net::HttpCall call;
    call.base_url = o_.server;
    call.method = "POST";
    call.target = "/v1/agent/enroll";
    call.headers["Authorization"] = "Bearer " + o_.join_token.substr(0, o_.join_token.find('.'));
    call.body = nlohmann::json{{"node", node}}.dump();
    GP_ASSIGN_OR_RETURN(net::HttpResponse r, net::Fetch(call));
    if (r.status != 201) return net::ErrorStatus(r, "POST /v1/agent/enroll");
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("token")) return Status::Internal("no token in the answer");
    return j["token"].get<std::string>();
  }

  void Start() {
    start_ms_ = NowMs();
    // Ramp: agent i connects at i / ramp_per_s seconds.
    for (int i = 0; i < o_.agents; ++i) {
      int64_t at = o_.ramp_per_s > 0 ? static_cast<int64_t>(i * 1000.0 / o_.ramp_per_s) : 0;
      SimAgent* a = agents_[i].get();
      loop_.RunAfter(at, [a] { a->Connect(); });
    }
    ScheduleReport();
    loop_.RunAfter(static_cast<int64_t>(o_.duration_s * 1000),
                   [this] { Finish("duration reached"); });
  }

  void Finish(const std::string& why) {
    if (finishing_) return;
    finishing_ = true;
    std::cout << "agent-load: stopping (" << why << ")" << std::endl;
    Report("final");
    for (auto& a : agents_) a->Stop();
    loop_.RunAfter(500, [this] { loop_.Stop(); });
  }

  bool AllWelcomed() const { return stats_.welcomed_ever == o_.agents; }

  void NoteWelcome(bool first, int64_t connect_ms) {
    ++stats_.welcomes;
    ++stats_.connected;
    if (!first) return;
    ++stats_.welcomed_ever;
    stats_.welcome_ms.push_back(connect_ms);
    if (AllWelcomed()) {
      all_welcomed_ms_ = NowMs() - start_ms_;
      std::cout << "agent-load: all " << o_.agents << " agents welcomed after " << all_welcomed_ms_
                << " ms" << std::endl;
      if (!o_.ready_file.empty()) {
        std::ofstream(o_.ready_file, std::ios::trunc) << all_welcomed_ms_ << "\n";
      }
    }
  }

  void Report(const char* label) {
    std::vector<int64_t> w = stats_.welcome_ms;
    std::sort(w.begin(), w.end());
    auto pct = [&](double p) -> int64_t {
      if (w.empty()) return 0;
      size_t i = static_cast<size_t>(p * static_cast<double>(w.size() - 1) + 0.5);
      return w[std::min(i, w.size() - 1)];
    };
    std::cout << "agent-load: " << label << " t=" << (NowMs() - start_ms_) / 1000.0
              << "s agents=" << o_.agents << " welcomed=" << stats_.welcomed_ever
              << " connected=" << stats_.connected << " welcomes=" << stats_.welcomes
              << " heartbeats=" << stats_.heartbeats << " disconnects=" << stats_.disconnects
              << " connect_failures=" << stats_.connect_failures
              << " frames_in=" << stats_.frames_in << " orders=" << stats_.orders
              << " welcome_ms_p50=" << pct(0.5) << " welcome_ms_p99=" << pct(0.99);
    int64_t twice = 0;
    for (const auto& [job, attempts] : stats_.attempts_of_job) twice += attempts.size() > 1;
    std::cout << " jobs_started=" << stats_.attempts_of_job.size()
              << " jobs_started_twice=" << twice << std::endl;
    if (label == std::string("final") && !stats_.close_reasons.empty()) {
      std::cout << "agent-load: close reasons:";
      for (const auto& r : stats_.close_reasons) std::cout << " [" << r << "]";
      std::cout << std::endl;
    }
  }

  const Options& options() const { return o_; }
  net::EventLoop& loop() { return loop_; }
  const std::string& ws_url(size_t server) const { return ws_urls_[server % ws_urls_.size()]; }
  size_t servers() const { return ws_urls_.size(); }
  Stats& stats() { return stats_; }
  std::mt19937_64& rng() { return rng_; }
  bool finishing() const { return finishing_; }

 private:
  void ScheduleReport() {
    if (o_.report_s <= 0) return;
    loop_.RunAfter(static_cast<int64_t>(o_.report_s * 1000), [this] {
      if (finishing_) return;
      Report("progress");
      ScheduleReport();
    });
  }

  Options o_;
  net::EventLoop& loop_;
  std::vector<std::string> ws_urls_;
  std::vector<std::unique_ptr<SimAgent>> agents_;
  Stats stats_;
  std::mt19937_64 rng_{std::random_device{}()};
  int64_t start_ms_ = 0;
  int64_t all_welcomed_ms_ = -1;
  bool finishing_ = false;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", like NVML's UUIDs.
std::string FakeGpuUuid() {
  std::string h = RandomHex(16);
  return "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" +
         h.substr(16, 4) + "-" + h.substr(20, 12);
}

SimAgent::SimAgent(Load& load, int index)
    : load_(load),
      index_(index),
      name_(load.options().name_prefix + std::to_string(index)),
      instance_(RandomHex(8)),
      reconnect_(load.servers(), 100, 10'000, 2'000) {  // the agent's (agent/agent.cpp)
  for (int g = 0; g < load.options().gpus; ++g) {
    GpuInfo gpu;
    gpu.index = g;
    gpu.uuid = FakeGpuUuid();
    gpu.name = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    gpu.cc_major = 8;
    gpu.cc_minor = 0;
    gpu.simulated = true;
    gpus_.push_back(std::move(gpu));
  }
}

void SimAgent::Connect() {
  if (stopped_ || load_.finishing()) return;
  connect_started_ms_ = NowMs();
  net::WsClientOptions o;
  o.url = load_.ws_url(reconnect_.server());
  o.headers["Authorization"] = "Bearer " + token_;
  o.idle_timeout_ms = 0;
  net::WsConnect(load_.loop(), o, std::make_shared<Link>(this, generation_));
}

void SimAgent::OnOpen(std::shared_ptr<net::WsConnection> conn) {
  conn_ = std::move(conn);
  proto::Hello h;
  h.node_name = name_;
  h.agent_instance = instance_;
  h.agent_version = "0.1.0-load";
  h.last_server_seq = in_.last_applied();
  h.cpu_milli = 32'000;
  h.memory_mib = 256'000;
  h.gpus = gpus_;
  h.driver_version = "550.54.15";
  h.cuda_version = "12.4";
  h.labels["load"] = "true";
  // The tasks it holds: those still "running" (--task-ms).
  for (const auto& [attempt, job] : held_) {
    h.tasks.emplace_back(attempt, proto::TaskState::kRunning, 0, 0, "", WallMs());
  }
  Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kHello),
        proto::Encode(h)});
}

void SimAgent::OnMessage(const std::string& text) {
  ++load_.stats().frames_in;
  auto env = proto::DecodeEnvelope(text);
  if (!env.ok()) {
    if (conn_) conn_->Close("malformed message");
    return;
  }
  if (!welcomed_) {
    if (env->type != proto::kWelcome) {
      if (conn_) conn_->Close("expected welcome");
      return;
    }
    auto w = proto::DecodeWelcome(env->body);
    if (!w.ok()) {
      if (conn_) conn_->Close("malformed welcome");
      return;
    }
    return OnWelcome(*w);
  }
  outbox_.Ack(env->ack);
  if (env->seq == 0) return;  // ack
  switch (in_.Check(env->seq)) {
    case proto::InboundSequence::Verdict::kDuplicate:
      Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kAck), "{}"});
      return;
    case proto::InboundSequence::Verdict::kGap:
      if (conn_) conn_->Close("sequence gap from the server");
      return;
    case proto::InboundSequence::Verdict::kApply:
      break;
  }
  in_.MarkApplied(env->seq);
  ++load_.stats().orders;
  ApplyOrder(*env);
  // Reports pushed by ApplyOrder carry the ack; an explicit ack covers stops.
  Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kAck), "{}"});
}

void SimAgent::OnClose(const std::string& reason) {
  conn_.reset();
  ++generation_;
  load_.loop().Cancel(heartbeat_timer_);
  Stats& st = load_.stats();
  if (welcomed_) {
    ++st.disconnects;
    --st.connected;
  } else {
    ++st.connect_failures;
  }
  welcomed_ = false;
  if (st.close_reasons.size() < 20) st.close_reasons.insert(reason.substr(0, 100));
  if (stopped_ || load_.finishing()) return;
  // As a real agent (agent/agent.cpp): net/reconnect.h's policy.
  load_.loop().RunAfter(reconnect_.Failed(reason, load_.rng()), [this] { Connect(); });
}

void SimAgent::Stop() {
  stopped_ = true;
  load_.loop().Cancel(heartbeat_timer_);
  if (conn_) conn_->Close("load generator stopping");
}

void SimAgent::OnWelcome(const proto::Welcome& w) {
  welcomed_ = true;
  reconnect_.Connected();
  bool first = !welcomed_ever_;
  welcomed_ever_ = true;
  load_.NoteWelcome(first, NowMs() - connect_started_ms_);
  outbox_.Ack(w.last_agent_seq);
  for (proto::Envelope e : outbox_.After(w.last_agent_seq)) {
    e.ack = in_.last_applied();
    Send(e);
  }
  heartbeat_ms_ = load_.options().heartbeat_ms > 0 ? load_.options().heartbeat_ms : w.heartbeat_ms;
  // A random phase spreads the heartbeats of agents that connected together.
  std::uniform_int_distribution<int64_t> phase(0, std::max<int64_t>(heartbeat_ms_ - 1, 0));
  heartbeat_timer_ = load_.loop().RunAfter(phase(load_.rng()), [this] { Heartbeat(); });
}

void SimAgent::ApplyOrder(const proto::Envelope& env) {
  if (env.type == proto::kStop) {
    auto stop = proto::DecodeStopTask(env.body);
    if (stop.ok() && held_.erase(stop->attempt_id) > 0) {
      Push(proto::kTaskStatus,
           proto::Encode(proto::TaskReport{stop->attempt_id, proto::TaskState::kFailed, 0, 15,
                                           "stopped: " + stop->reason, WallMs()}));
    }
    return;
  }
  if (env.type != proto::kStart) return;
  auto start = proto::DecodeStartTask(env.body);
  if (!start.ok()) return;
  if (!started_.insert(start->attempt_id).second) return;  // idempotent
  load_.stats().attempts_of_job[start->job_id].insert(start->attempt_id);
  proto::TaskReport running{start->attempt_id, proto::TaskState::kRunning, 0, 0, "", WallMs()};
  Push(proto::kTaskStatus, proto::Encode(running));
  auto exit = [this, attempt = start->attempt_id] {
    proto::TaskReport exited{attempt, proto::TaskState::kExited, 0, 0, "", WallMs()};
    Push(proto::kTaskStatus, proto::Encode(exited));
  };
  const int64_t task_ms = load_.options().task_ms;
  if (task_ms <= 0) return exit();
  held_[start->attempt_id] = start->job_id;
  load_.loop().RunAfter(task_ms, [this, attempt = start->attempt_id, exit] {
    if (held_.erase(attempt) > 0) exit();
  });
}

void SimAgent::Heartbeat() {
  if (!welcomed_ || stopped_) return;
  proto::Heartbeat hb;
  std::uniform_int_distribution<int32_t> util(0, 100);
  for (const GpuInfo& g : gpus_) {
    GpuTelemetry t;
    t.uuid = g.uuid;
    t.memory_used_mib = 1024;
    t.utilization_percent = util(load_.rng());
    t.temperature_c = 40 + index_ % 20;
    t.power_mw = 60'000;
    hb.telemetry.push_back(std::move(t));
  }
  hb.running_tasks = 0;
  Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kHeartbeat),
        proto::Encode(hb)});
  ++load_.stats().heartbeats;
  heartbeat_timer_ = load_.loop().RunAfter(heartbeat_ms_, [this] { Heartbeat(); });
}

void SimAgent::Push(std::string_view type, std::string body) {
  int64_t seq = outbox_.Push(std::string(type), std::move(body));
  if (welcomed_) {
    proto::Envelope e = outbox_.After(seq - 1).front();
    e.ack = in_.last_applied();
    Send(e);
  }
}

void SimAgent::Send(const proto::Envelope& e) {
  if (conn_) conn_->Send(proto::EncodeEnvelope(e));
}

// Each connection needs a descriptor: lift the soft limit to the hard one.
void RaiseFdLimit(int agents) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(rl.rlim_cur) < agents + 64) {
    std::cerr << "gpupool-agent-load: warning: the descriptor limit (" << rl.rlim_cur
              << ") is below " << agents + 64 << "\n";
  }
}

}  // namespace
}  // namespace gpupool::bench

int main(int argc, char** argv) {
  using gpupool::bench::Options;
  Options o;
  CLI::App app{
      "gpupool-agent-load: N simulated agents over the real agent protocol, in one process"};
  app.add_option("--server", o.server, "server URL")->capture_default_str();
  app.add_option("--join-token", o.join_token, "join token (or GPUPOOL_JOIN_TOKEN)");
  app.add_option("--join-token-file", o.join_token_file, "read the join token from this file");
  app.add_option("--agents", o.agents, "simulated agents")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--gpus", o.gpus, "simulated A100s per agent (each in every heartbeat)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--heartbeat-ms", o.heartbeat_ms,
                 "heartbeat interval (0: as the server's welcome says)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  app.add_option("--duration-s", o.duration_s, "run this long, then disconnect and exit")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86'400.0));
  app.add_option("--ramp-per-s", o.ramp_per_s, "new connections per second (0: all at once)")
      ->capture_default_str();
  app.add_option("--report-s", o.report_s, "print progress this often (0: never)")
      ->capture_default_str();
  app.add_option("--ready-file", o.ready_file,
                 "write this file once every agent has been welcomed");
  app.add_option("--task-ms", o.task_ms,
                 "a started task runs this long before it exits 0 (0: it exits at once)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--name-prefix", o.name_prefix, "node names are PREFIX<i>")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (o.join_token.empty()) {
    if (const char* t = std::getenv("GPUPOOL_JOIN_TOKEN")) o.join_token = t;
  }
  if (!o.join_token_file.empty()) {
    std::ifstream in(o.join_token_file);
    if (!in || !(in >> o.join_token)) {
      std::cerr << "gpupool-agent-load: cannot read the join token from " << o.join_token_file
                << "\n";
      return 2;
    }
  }
  if (o.join_token.empty()) {
    std::cerr
        << "gpupool-agent-load: a join token is required (--join-token or --join-token-file)\n";
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  gpupool::bench::RaiseFdLimit(o.agents);

  gpupool::net::EventLoop loop;
  gpupool::bench::Load load(o, loop);
  if (!load.Init()) return 2;
  loop.OnSignals({SIGINT, SIGTERM}, [&](int) { load.Finish("signal"); });
  load.Start();
  loop.Run();
  return load.AllWelcomed() ? 0 : 1;
}
