#include "agent/agent.h"

#include <pwd.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "agent/agent_config.h"
#include "agent/control_socket.h"
#include "agent/lending.h"
#include "agent/tasks.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/units.h"
#include "exec/executors.h"
#include "exec/process_tree.h"
#include "gpu/gpu_source.h"
#include "model/node.h"
#include "model/yaml.h"
#include "net/event_loop.h"
#include "net/http.h"
#include "net/websocket.h"
#include "proto/channel.h"
#include "proto/messages.h"

namespace gpupool::agent {
namespace {

constexpr size_t kMaxChunkBytes = 256 * 1024;  // output per logs message
constexpr int64_t kLendingTickMs = 1000;       // how often the policy is re-evaluated
constexpr size_t kMaxOutboxBytes = 16 << 20;   // stop reading output beyond this
const char* kVersion = "0.1.0";

// An empty GPU source, for machines without NVML.
class NoGpus : public GpuSource {
 public:
  explicit NoGpus(std::string why) : why_(std::move(why)) {}
  Result<GpuSnapshot> Read() override { return GpuSnapshot{}; }
  std::string Describe() const override { return "no GPUs (" + why_ + ")"; }

 private:
  std::string why_;
};

class Agent;

// Forwards a connection's callbacks to the agent while it is the current one.
class Link : public net::WsHandler {
 public:
  Link(Agent* agent, uint64_t generation) : agent_(agent), generation_(generation) {}
  void OnOpen(std::shared_ptr<net::WsConnection> conn) override;
  void OnMessage(std::string text) override;
  void OnClose(std::string reason) override;

 private:
  Agent* agent_;
  uint64_t generation_;
};

class Agent {
 public:
  Agent(AgentOptions options, net::EventLoop& loop)
      : options_(std::move(options)),
        loop_(loop),
        config_(DefaultAgentConfig(options_.data_dir)),
        tasks_({options_.data_dir, options_.kill_grace_ms, &config_.exec, &exec_env_,
                ::geteuid() == 0},
               loop, clock_, [this] { WakePoll(); }) {}

  Status Init() {
    std::error_code ec;
    std::filesystem::create_directories(options_.data_dir, ec);
    if (ec) return Status::Internal("cannot create " + options_.data_dir + ": " + ec.message());
    if (options_.name.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      options_.name = host;
    }
    if (!options_.simulate_gpus.empty()) {
      GP_ASSIGN_OR_RETURN(gpu_, OpenSimulatedGpus(options_.simulate_gpus, options_.name));
    } else {
      auto nvml = OpenNvml(options_.nvml_library);
      if (nvml.ok()) {
        gpu_ = *std::move(nvml);
      } else {
        GP_LOG(kWarn) << "no NVIDIA GPUs: " << nvml.status().message() << "; lending CPU only";
        gpu_ = std::make_unique<NoGpus>(nvml.status().message());
      }
    }
    GP_LOG(kInfo) << "GPUs: " << gpu_->Describe();
    if (!options_.config_file.empty()) {
      auto config = LoadAgentConfig(options_.config_file, options_.data_dir);
      if (!config.ok()) return Status::InvalidArgument(config.status().message());
      config_ = *std::move(config);
    }
    GP_ASSIGN_OR_RETURN(auto policy, PolicyInForce());
    lender_.SetPolicy(std::move(policy));
    if (auto snap = gpu_->Read(); snap.ok()) gpus_ = snap->gpus;
    GP_ASSIGN_OR_RETURN(std::set<uid_t> control_uids, ControlUids(config_.owner));
    GP_ASSIGN_OR_RETURN(
        control_, ControlServer::Listen(
                      loop_, ControlSocketPath(options_.data_dir), control_uids,
                      [this](const ControlPeer& peer, const nlohmann::json& request,
                             ControlReply reply) { OnControl(peer, request, std::move(reply)); }));
    ProbeExecutors();
    if (exec_env_.available.empty()) {
      // Taking jobs only to fail each one would black-hole the pool's work.
      std::string why;
      for (const auto& [name, reason] : exec_env_.unavailable) {
        why += (why.empty() ? "" : "; ") + name + ": " + reason;
      }
      return Status::FailedPrecondition("no allowed executor works on this machine (" + why + ")");
    }
    auto url = net::ParseUrl(options_.server_url);
    if (!url)
      return Status::InvalidArgument("--server: invalid URL \"" + options_.server_url + "\"");
    ws_url_ = "ws://" +
              (url->host.find(':') != std::string::npos ? "[" + url->host + "]" : url->host) + ":" +
              std::to_string(url->port) + url->path + "/v1/agent/connect";
    instance_ = RandomHex(8);
    LoadState();
    GP_RETURN_IF_ERROR(tasks_.Recover());
    return Status::Ok();
  }

  // Finds which executors work here and says which limits apply.
  void ProbeExecutors() {
    const exec::ExecConfig& c = config_.exec;
    bool root = ::geteuid() == 0;
    exec_env_ = exec::ProbeExecEnvironment(c, root ? c.first_uid : -1, root ? c.first_uid : -1);
    std::string offered;
    for (const std::string& name : exec_env_.available) {
      offered += (offered.empty() ? "" : ", ") + name;
    }
    GP_LOG(kInfo) << "executors: " << (offered.empty() ? "none" : offered)
                  << (offered.empty() ? "" : " (default " + exec_env_.default_executor() + ")")
                  << "; images: "
                  << (exec_env_.sandbox_images ? "skopeo + umoci"
                                               : "not available (no skopeo/umoci)");
    for (const auto& [name, why] : exec_env_.unavailable) {
      GP_LOG(kWarn) << "executor " << name << " is allowed but does not work: " << why;
    }
    GP_LOG(kInfo) << exec_env_.limits_mode;
    GP_LOG(kInfo) << "tasks run as "
                  << (root ? "uids " + std::to_string(c.first_uid) + "-" +
                                 std::to_string(c.first_uid + c.uid_count - 1) + ", one per task"
                           : "this agent's own account");
  }

  // The task's GPUs' device minor numbers, where NVML told them.
  // From the GPUs this connection's hello reported (the ones the server
  // placed on): static facts, so no NVML read per start order.
  std::vector<int> GpuMinors(const std::vector<std::string>& uuids) const {
    std::vector<int> minors;
    for (const std::string& uuid : uuids) {
      for (const GpuInfo& g : gpus_) {
        if (g.uuid == uuid && g.minor_number >= 0) minors.push_back(g.minor_number);
      }
    }
    return minors;
  }

  void Start() {
    LendingTick();
    Connect();
    SchedulePoll();
  }

  void Shutdown(std::function<void()> done) {
    if (shutting_down_) return;
    shutting_down_ = true;
    loop_.Cancel(lending_timer_);
    if (!options_.kill_tasks_on_exit || tasks_.running() == 0) return Finish(done);
    GP_LOG(kInfo) << "stopping " << tasks_.running() << " tasks before exit";
    tasks_.StopAll("the agent is shutting down");
    int64_t give_up = clock_.NowMs() + options_.kill_grace_ms + 3000;
    WaitForTasks(give_up, std::move(done));
  }

  // A control command from this process itself (SIGHUP: reload); the
  // answer goes to the log.
  void LocalCommand(const std::string& command) {
    OnControl({::geteuid(), ::getegid(), ::getpid()}, {{"command", command}},
              [command](const nlohmann::json& r) {
                if (r.value("ok", false)) {
                  GP_LOG(kInfo) << command << ": " << r.value("message", std::string());
                } else {
                  GP_LOG(kError) << command << ": " << r.value("error", std::string());
                }
              });
  }

  // ---- connection callbacks (from Link) ----
  bool Current(uint64_t generation) const { return generation == generation_; }

  void OnOpen(std::shared_ptr<net::WsConnection> conn) {
    conn_ = std::move(conn);
    proto::Hello h;
    h.node_name = options_.name;
    h.agent_instance = instance_;
    h.agent_version = kVersion;
    h.last_server_seq = in_.last_applied();
    h.cpu_milli = static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN)) * 1000;
    h.memory_mib =
        static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) / (1 << 20);
    auto snap = gpu_->Read();
    if (snap.ok()) {
      gpus_ = snap->gpus;
      h.gpus = snap->gpus;
      h.driver_version = snap->driver_version;
      h.cuda_version = snap->cuda_version;
    } else {
      GP_LOG(kWarn) << "cannot read GPUs: " << snap.status().message();
    }
    h.labels = options_.labels;
    for (const std::string& name : exec_env_.available) h.labels[ExecutorLabel(name)] = "true";
    if (exec_env_.sandbox_images) h.labels[kImagesLabel] = "true";
    h.owner_group = options_.owner_group;
    h.lending = lending_;
    sent_lending_ = lending_;
    h.tasks = tasks_.Reports();
    Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kHello),
          proto::Encode(h)});
  }

  void OnMessage(const std::string& text) {
    auto env = proto::DecodeEnvelope(text);
    if (!env.ok()) return Drop("malformed message from the server: " + env.status().message());
    if (!welcomed_) {
      if (env->type != proto::kWelcome) return Drop("expected welcome, got " + env->type);
      auto w = proto::DecodeWelcome(env->body);
      if (!w.ok()) return Drop("malformed welcome: " + w.status().message());
      return OnWelcome(*w);
    }
    Acked(env->ack);
    if (env->seq == 0) return;  // ack or other unsequenced message
    switch (in_.Check(env->seq)) {
      case proto::InboundSequence::Verdict::kDuplicate:
        return ScheduleAck();
      case proto::InboundSequence::Verdict::kGap:
        return Drop("sequence gap from the server");
      case proto::InboundSequence::Verdict::kApply:
        break;
    }
    Status s = ApplyOrder(*env);
    if (!s.ok())
      GP_LOG(kError) << "order " << env->seq << " (" << env->type << "): " << s.ToString();
    in_.MarkApplied(env->seq);
    SaveState();
    ScheduleAck();
  }

  void OnClose(const std::string& reason) {
    bool was = welcomed_;
    conn_.reset();
    welcomed_ = false;
    ++generation_;
    loop_.Cancel(heartbeat_timer_);
    if (shutting_down_) return;
    if (was) {
      GP_LOG(kWarn) << "disconnected from " << options_.server_url << ": " << reason;
    } else {
      GP_LOG(kDebug) << "cannot connect to " << options_.server_url << ": " << reason;
    }
    // Exponential backoff with jitter, so many agents do not return at once.
    backoff_ms_ = backoff_ms_ == 0 ? 100 : std::min(backoff_ms_ * 2, options_.max_backoff_ms);
    std::uniform_int_distribution<int64_t> jitter(0, backoff_ms_ / 2);
    loop_.RunAfter(backoff_ms_ + jitter(rng_), [this] { Connect(); });
  }

 private:
  void Connect() {
    if (shutting_down_) return;
    net::WsClientOptions o;
    o.url = ws_url_;
    o.headers["Authorization"] = "Bearer " + options_.join_token;
    o.idle_timeout_ms = 0;
    net::WsConnect(loop_, o, std::make_shared<Link>(this, generation_));
  }

  void OnWelcome(const proto::Welcome& w) {
    welcomed_ = true;
    backoff_ms_ = 0;
    node_id_ = w.node_id;
    GP_LOG(kInfo) << "connected to " << options_.server_url << " as node " << options_.name << " ("
                  << node_id_ << ")";
    if (!resumed_logs_) {
      // This agent process is new: ship output from where the server's copy ends.
      for (const auto& [id, t] : tasks_.tasks()) {
        auto it = w.log_offsets.find(id);
        tasks_.ResumeOutputAfter(id, it == w.log_offsets.end() ? -1 : it->second);
      }
      resumed_logs_ = true;
    }
    Acked(w.last_agent_seq);
    for (const proto::Envelope& e : outbox_.After(w.last_agent_seq)) {
      proto::Envelope copy = e;
      copy.ack = in_.last_applied();
      Send(copy);
    }
    heartbeat_ms_ = w.heartbeat_ms;
    Heartbeat();
    WakePoll();
  }

  // The server applied our messages up to `seq`.
  void Acked(int64_t seq) {
    outbox_.Ack(seq);
    ForgetAckedTasks(seq);
    if (leave_seq_ > 0 && seq >= leave_seq_ && leave_reply_) {
      GP_LOG(kInfo) << "left the pool; exiting";
      Reply(leave_reply_, true, "drained and left the pool; the agent exits");
      leave_reply_ = nullptr;
      Shutdown([this] { loop_.Stop(); });
    }
  }

  Status ApplyOrder(const proto::Envelope& env) {
    if (env.type == proto::kStart) {
      GP_ASSIGN_OR_RETURN(auto start, proto::DecodeStartTask(env.body));
      if (shutting_down_) return Status::Ok();
      if (!tasks_.tasks().count(start.attempt_id)) {
        // The policy is enforced here whatever the server thought.
        LendingRequest want{start.owner,
                            start.spec.group,
                            start.spec.max_runtime_ms,
                            start.gpu_uuids,
                            start.gpu_milli > 0 ? start.gpu_milli : 1000,
                            start.gpu_memory_mib};
        if (Status ok = LendingAdmits(lending_, want, gpus_); !ok.ok()) {
          GP_LOG(kInfo) << "refusing " << start.attempt_id << ": " << ok.message();
          SendLending(true);  // so that the server does not place it here again
          proto::TaskReport r{start.attempt_id, "refused", 0, 0, ok.message(), clock_.NowMs()};
          Push(proto::kTaskStatus, proto::Encode(r));
          return Status::Ok();
        }
      }
      GP_LOG(kInfo) << "starting " << start.attempt_id << " (" << start.spec.name << ")";
      Status s = tasks_.Start(start, GpuMinors(start.gpu_uuids));
      if (!s.ok()) {
        // Report it so the job does not wait forever.
        proto::TaskReport r{start.attempt_id, "failed", 127, 0, "cannot start: " + s.message(),
                            clock_.NowMs()};
        Push(proto::kTaskStatus, proto::Encode(r));
      }
      WakePoll();
      return s;
    }
    if (env.type == proto::kStop) {
      GP_ASSIGN_OR_RETURN(auto stop, proto::DecodeStopTask(env.body));
      GP_LOG(kInfo) << "stopping " << stop.attempt_id << ": " << stop.reason;
      tasks_.Stop(stop.attempt_id, stop.reason, stop.grace_ms);
      return Status::Ok();
    }
    return Status::InvalidArgument("unknown order type \"" + env.type + "\"");
  }

  void Push(std::string_view type, std::string body) {
    if (!welcomed_) {
      outbox_.Push(std::string(type), std::move(body));
      return;
    }
    std::string text = body;
    int64_t seq = outbox_.Push(std::string(type), std::move(body));
    Send({proto::kProtocolVersion, seq, in_.last_applied(), std::string(type), std::move(text)});
  }

  void Send(const proto::Envelope& e) {
    if (conn_) conn_->Send(proto::EncodeEnvelope(e));
  }

  void Drop(const std::string& why) {
    GP_LOG(kWarn) << why;
    if (conn_) conn_->Close(why.substr(0, 120));
  }

  void ScheduleAck() {
    if (ack_scheduled_) return;
    ack_scheduled_ = true;
    loop_.Post([this] {
      ack_scheduled_ = false;
      if (welcomed_)
        Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kAck), "{}"});
    });
  }

  void Heartbeat() {
    loop_.Cancel(heartbeat_timer_);
    if (!welcomed_) return;
    proto::Heartbeat hb;
    if (auto snap = gpu_->Read(); snap.ok()) hb.telemetry = snap->telemetry;
    hb.running_tasks = tasks_.running();
    Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kHeartbeat),
          proto::Encode(hb)});
    heartbeat_timer_ = loop_.RunAfter(heartbeat_ms_, [this] { Heartbeat(); });
  }

  // ---- tasks ----

  void WakePoll() {
    if (poll_posted_) return;
    poll_posted_ = true;
    loop_.Post([this] {
      poll_posted_ = false;
      PollTasks();
    });
  }

  void SchedulePoll() {
    poll_timer_ = loop_.RunAfter(options_.poll_ms, [this] {
      PollTasks();
      SchedulePoll();
    });
  }

  // Ships new output, then status changes. A task's output is shipped
  // completely before its final report, so the server has every line when it
  // sees the job finish.
  void PollTasks() {
    tasks_.Poll();
    for (const auto& [id, t] : tasks_.tasks()) {
      if (final_seq_.count(id)) continue;
      if (!ShipOutput(id)) continue;  // back-pressure: the rest waits in the file
      bool ended = tasks_.Ended(t);
      if (t.started && !ended && reported_running_.insert(id).second) {
        Push(proto::kTaskStatus, proto::Encode(tasks_.Report(t)));
      }
      if (ended) {
        proto::TaskReport r = tasks_.Report(t);
        GP_LOG(kInfo) << "task " << id << " " << r.state
                      << (r.state == "exited" ? " with code " + std::to_string(r.exit_code) : "")
                      << (r.reason.empty() ? "" : ": " + r.reason);
        Push(proto::kTaskStatus, proto::Encode(r));
        final_seq_[id] = outbox_.last_seq();
      }
    }
    CheckWaiters();
  }

  // Ships the task's complete unread output lines; false when the outbox is
  // too full to take all of them (the rest waits in the file).
  bool ShipOutput(const std::string& id) {
    const TaskState& t = tasks_.tasks().at(id);
    while (true) {
      if (outbox_.bytes() > kMaxOutboxBytes) return false;
      int64_t before = t.read_offset;
      auto records = tasks_.ReadOutput(id, kMaxChunkBytes);
      if (records.empty()) {
        if (t.read_offset == before) return true;  // nothing complete left
        continue;                                  // only the shim's own records
      }
      proto::LogChunk chunk;
      chunk.attempt_id = id;
      for (auto& r : records)
        chunk.lines.push_back({r.offset, std::move(r.stream), r.ts_ms, std::move(r.text)});
      Push(proto::kLogs, proto::Encode(chunk));
    }
  }

  void ForgetAckedTasks(int64_t acked) {
    for (auto it = final_seq_.begin(); it != final_seq_.end();) {
      if (it->second <= acked) {
        tasks_.Remove(it->first);
        reported_running_.erase(it->first);
        it = final_seq_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void WaitForTasks(int64_t give_up, std::function<void()> done) {
    PollTasks();
    if (tasks_.running() == 0 || clock_.NowMs() > give_up) {
      // Give the final reports a moment to reach the server.
      loop_.RunAfter(500, [this, done] { Finish(done); });
      return;
    }
    loop_.RunAfter(100, [this, give_up, done] { WaitForTasks(give_up, done); });
  }

  void Finish(const std::function<void()>& done) {
    control_.reset();
    loop_.Cancel(poll_timer_);
    loop_.Cancel(heartbeat_timer_);
    if (conn_) conn_->Close("agent shutting down");
    loop_.RunAfter(100, done);
  }

  // ---- the provider's policy and commands ----

  std::string PolicyOverridePath() const { return options_.data_dir + "/policy.yaml"; }

  // The policy in force: the one `gpupool agent policy set` left in the
  // data dir, else the config file's.
  Result<ProviderPolicy> PolicyInForce() const {
    auto text = ReadFile(PolicyOverridePath());
    if (!text.ok()) return config_.policy;
    auto policy = ParsePolicyText(*text);
    if (!policy.ok()) return policy.status().WithContext(PolicyOverridePath());
    GP_LOG(kInfo) << "policy: from " << PolicyOverridePath()
                  << " (set by `gpupool agent policy set`)";
    return policy;
  }

  std::string PolicySource() const {
    if (std::filesystem::exists(PolicyOverridePath())) return PolicyOverridePath();
    return options_.config_file.empty() ? "defaults (lends everything, always)"
                                        : options_.config_file;
  }

  // Root, this agent's account and the configured owner.
  static Result<std::set<uid_t>> ControlUids(const std::string& owner) {
    std::set<uid_t> uids = {0, ::geteuid()};
    if (owner.empty()) return uids;
    if (owner.find_first_not_of("0123456789") == std::string::npos) {
      uids.insert(static_cast<uid_t>(std::stoul(owner)));
      return uids;
    }
    struct passwd pw, *found = nullptr;
    char buf[4096];
    if (::getpwnam_r(owner.c_str(), &pw, buf, sizeof buf, &found) != 0 || found == nullptr) {
      return Status::InvalidArgument("owner: there is no user " + QuoteForError(owner) +
                                     " on this machine");
    }
    uids.insert(found->pw_uid);
    return uids;
  }

  // Re-evaluates what is lent (policy, windows, the owner's GPU use and
  // commands), vacates what may no longer run and tells the server what
  // changed. Runs every second, with or without a server. `grace_ms`: for
  // what this call vacates; 0 = the policy's reclaim_grace.
  void LendingTick(int64_t grace_ms = 0) {
    loop_.Cancel(lending_timer_);
    if (shutting_down_) return;
    int64_t now = clock_.NowMs();
    std::vector<Lender::RunningTask> running;
    for (const auto& [id, t] : tasks_.tasks()) {
      if (!tasks_.Ended(t) && t.vacate_reason.empty()) running.push_back({id, t.gpu_uuids});
    }
    std::set<int64_t> pool_pids;
    if (lender_.WantsTelemetry()) {
      // A failed read keeps the last sample rather than reclaiming on no evidence.
      if (auto snap = gpu_->Read(); snap.ok()) telemetry_ = snap->telemetry;
      for (const auto& [id, t] : tasks_.tasks()) {
        if (tasks_.Ended(t) || t.shim_pid <= 0) continue;
        for (pid_t p : exec::Descendants(t.shim_pid)) pool_pids.insert(p);
      }
    }
    NodeLending before = lending_;
    lending_ = lender_.Update(now, gpus_, telemetry_, pool_pids, running);
    auto vacate = lender_.ToVacate(lending_, running);
    int64_t grace = grace_ms != 0 ? grace_ms : lender_.policy().reclaim_grace_ms;
    for (const auto& [id, why] : vacate) {
      GP_LOG(kInfo) << "vacating " << id << ": " << why;
      tasks_.Vacate(id, why, grace);
    }
    if (evaluated_) RecordReclaims(before, vacate, running, now);
    evaluated_ = true;
    SendLending(false);
    lending_timer_ = loop_.RunAfter(kLendingTickMs, [this] { LendingTick(); });
  }

  // Sends the lending when it changed since the server last heard it.
  void SendLending(bool force) {
    if (!force && sent_lending_ && *sent_lending_ == lending_) return;
    Push(proto::kLending, proto::Encode(lending_));
    sent_lending_ = lending_;
  }

  // One reclaim event per reason for the GPUs (or, without GPUs, the
  // machine) that stopped being lent since `before`.
  void RecordReclaims(const NodeLending& before,
                      const std::vector<std::pair<std::string, std::string>>& vacated,
                      const std::vector<Lender::RunningTask>& running, int64_t now) {
    std::map<std::string, std::vector<std::string>> by_reason;
    for (const auto& [uuid, why] : lending_.not_lent) {
      if (before.gpus.count(uuid)) by_reason[why].push_back(uuid);
    }
    if (gpus_.empty() && lending_.mode == "closed" && before.mode != "closed") {
      by_reason["outside the availability windows"];
    }
    for (const auto& [why, uuids] : by_reason) {
      NodeEvent e;
      e.ts_ms = now;
      e.kind = why == "not lent by the policy" ? "policy" : "reclaim";
      e.reason = why;
      e.gpus = uuids;
      for (const auto& [id, vwhy] : vacated) {
        auto task = std::find_if(running.begin(), running.end(),
                                 [&](const Lender::RunningTask& t) { return t.attempt_id == id; });
        bool on_these =
            task != running.end() &&
            (task->gpu_uuids.empty() ||
             std::any_of(task->gpu_uuids.begin(), task->gpu_uuids.end(), [&](const std::string& u) {
               return std::find(uuids.begin(), uuids.end(), u) != uuids.end();
             }));
        if (on_these) e.attempts.push_back(id);
      }
      GP_LOG(kInfo) << e.kind << ": " << why << " (" << uuids.size() << " GPUs, "
                    << e.attempts.size() << " tasks vacated)";
      Push(proto::kNodeEvent, proto::Encode(e));
    }
  }

  void PushEvent(const std::string& kind, const std::string& reason) {
    NodeEvent e;
    e.ts_ms = clock_.NowMs();
    e.kind = kind;
    e.reason = reason;
    Push(proto::kNodeEvent, proto::Encode(e));
  }

  static void Reply(const ControlReply& reply, bool ok, const std::string& message,
                    nlohmann::json extra = nlohmann::json::object()) {
    extra["ok"] = ok;
    extra[ok ? "message" : "error"] = message;
    reply(extra);
  }

  void OnControl(const ControlPeer& peer, const nlohmann::json& request, ControlReply reply) {
    auto field = [&](const char* key) -> const nlohmann::json* {
      auto it = request.find(key);
      return it == request.end() ? nullptr : &*it;
    };
    const nlohmann::json* command = field("command");
    if (command == nullptr || !command->is_string()) {
      return Reply(reply, false, "command: must be a string");
    }
    std::string cmd = command->get<std::string>();
    GP_LOG(kInfo) << "control: " << cmd << " (uid " << peer.uid << ", pid " << peer.pid << ")";
    if (shutting_down_) return Reply(reply, false, "the agent is shutting down");
    if (cmd == "status") return reply(StatusJson());
    if (cmd == "pause") {
      lender_.Pause();
      PushEvent("pause", "paused by the owner");
      LendingTick();
      return Reply(reply, true,
                   "paused: no new work starts here; " + std::to_string(tasks_.running()) +
                       " running tasks go on");
    }
    if (cmd == "resume") {
      lender_.Resume();
      PushEvent("resume", "resumed by the owner");
      LendingTick();
      return Reply(reply, true,
                   "lending again: " + std::to_string(lending_.gpus.size()) + " GPUs lent (" +
                       lending_.mode + ")");
    }
    if (cmd == "reclaim") {
      const nlohmann::json* gpus = field("gpus");
      const nlohmann::json* now = field("now");
      std::vector<std::string> uuids;
      if (gpus != nullptr && !gpus->is_array()) return Reply(reply, false, "gpus: must be a list");
      if (gpus != nullptr) {
        for (const auto& g : *gpus) {
          auto uuid = g.is_string() ? FindGpu(g.get<std::string>()) : std::nullopt;
          if (!uuid) {
            return Reply(reply, false,
                         "no GPU " + g.dump() + " on this machine (" + DescribeGpus() + ")");
          }
          uuids.push_back(*uuid);
        }
      }
      bool at_once = now != nullptr && now->is_boolean() && now->get<bool>();
      return Reclaim(uuids, at_once, std::move(reply));
    }
    if (cmd == "leave") {
      lender_.Leave();
      PushEvent("leave", "the owner takes the node out of the pool");
      LendingTick();
      leave_reply_ = std::move(reply);
      GP_LOG(kInfo) << "leaving: draining " << tasks_.running() << " tasks";
      return CheckLeave();
    }
    if (cmd == "policy") {
      const nlohmann::json* yaml = field("yaml");
      if (yaml == nullptr) {  // reset to the config file's
        std::error_code ec;
        std::filesystem::remove(PolicyOverridePath(), ec);
        return ApplyPolicy(config_.policy, "the config file's policy", std::move(reply));
      }
      if (!yaml->is_string()) return Reply(reply, false, "yaml: must be a string");
      auto policy = ParsePolicyText(yaml->get<std::string>());
      if (!policy.ok()) {
        return Reply(reply, false, policy.status().message() + "; the previous policy stays");
      }
      if (Status s = WriteFileAtomic(PolicyOverridePath(), yaml->get<std::string>()); !s.ok()) {
        return Reply(reply, false, s.message());
      }
      return ApplyPolicy(*policy, "a new policy (saved in " + PolicyOverridePath() + ")",
                         std::move(reply));
    }
    if (cmd == "reload") {
      if (options_.config_file.empty()) return Reply(reply, false, "the agent has no --config");
      auto config = LoadAgentConfig(options_.config_file, options_.data_dir);
      if (!config.ok()) {
        return Reply(reply, false, config.status().message() + "; the previous config stays");
      }
      config_.policy = config->policy;
      config_.owner = config->owner;
      if (auto uids = ControlUids(config_.owner); uids.ok()) control_->SetAllowedUids(*uids);
      auto policy = PolicyInForce();
      if (!policy.ok()) return Reply(reply, false, policy.status().message());
      return ApplyPolicy(
          *policy, "the policy of " + PolicySource() + " (other config changes apply at restart)",
          std::move(reply));
    }
    Reply(reply, false,
          "unknown command " + QuoteForError(cmd) +
              " (one of: status, pause, resume, reclaim, leave, policy, reload)");
  }

  void ApplyPolicy(ProviderPolicy policy, const std::string& what, ControlReply reply) {
    lender_.SetPolicy(std::move(policy));
    PushEvent("policy", what);
    LendingTick();
    Reply(reply, true,
          "in force: " + what + "; " + std::to_string(lending_.gpus.size()) + " GPUs lent now (" +
              lending_.mode + ")");
  }

  void Reclaim(const std::vector<std::string>& uuids, bool at_once, ControlReply reply) {
    lender_.Reclaim(uuids);
    std::set<std::string> before;
    for (const auto& [id, t] : tasks_.tasks()) {
      if (!t.vacate_reason.empty()) before.insert(id);
    }
    LendingTick(at_once ? TaskManager::kKillNow : 0);
    Waiter w;
    w.started_ms = clock_.NowMs();
    int64_t grace = at_once ? 0 : lender_.policy().reclaim_grace_ms;
    w.deadline_ms = w.started_ms + grace + 5000;
    w.what = uuids.empty() ? "every GPU" : std::to_string(uuids.size()) + " GPUs";
    for (const auto& [id, t] : tasks_.tasks()) {
      if (!t.vacate_reason.empty() && !tasks_.Ended(t)) w.attempts.insert(id);
    }
    w.vacated.assign(w.attempts.begin(), w.attempts.end());
    w.reply = std::move(reply);
    waiters_.push_back(std::move(w));
    CheckWaiters();
  }

  // Answers reclaims whose tasks have all ended (their GPUs are free), and
  // a leave once the node is drained.
  void CheckWaiters() {
    int64_t now = clock_.NowMs();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      for (auto a = it->attempts.begin(); a != it->attempts.end();) {
        auto t = tasks_.tasks().find(*a);
        a = t == tasks_.tasks().end() || tasks_.Ended(t->second) ? it->attempts.erase(a) : ++a;
      }
      bool done = it->attempts.empty();
      if (!done && now < it->deadline_ms) {
        ++it;
        continue;
      }
      nlohmann::json extra = {{"vacated", it->vacated}, {"freed_ms", now - it->started_ms}};
      if (done) {
        Reply(it->reply, true,
              "reclaimed " + it->what +
                  (it->vacated.empty() ? "; nothing of the pool ran on them"
                                       : "; vacated " + std::to_string(it->vacated.size()) +
                                             " tasks in " + FormatDurationMs(now - it->started_ms)),
              extra);
      } else {
        Reply(it->reply, false, std::to_string(it->attempts.size()) + " tasks have not ended yet",
              extra);
      }
      it = waiters_.erase(it);
    }
    CheckLeave();
  }

  void CheckLeave() {
    if (!leave_reply_ || leave_seq_ > 0 || tasks_.running() > 0) return;
    Push(proto::kLeave, proto::Encode(proto::Leave{"the owner takes the node out of the pool"}));
    leave_seq_ = outbox_.last_seq();
    GP_LOG(kInfo) << "drained; deregistering";
  }

  std::optional<std::string> FindGpu(const std::string& name) const {
    for (const GpuInfo& g : gpus_) {
      if (g.uuid == name || std::to_string(g.index) == name) return g.uuid;
    }
    return std::nullopt;
  }

  std::string DescribeGpus() const {
    if (gpus_.empty()) return "it has none";
    std::string out;
    for (const GpuInfo& g : gpus_) {
      out += (out.empty() ? "GPUs: " : ", ") + std::to_string(g.index) + " " + g.uuid;
    }
    return out;
  }

  nlohmann::json StatusJson() const {
    nlohmann::json gpus = nlohmann::json::array(), tasks = nlohmann::json::array();
    for (const GpuInfo& g : gpus_) {
      nlohmann::json j = {{"index", g.index},
                          {"uuid", g.uuid},
                          {"name", DescribeGpu(g)},
                          {"memory_mib", g.memory_mib}};
      if (auto it = lending_.gpus.find(g.uuid); it != lending_.gpus.end()) {
        j["lent_mib"] = it->second;
      } else if (auto why = lending_.not_lent.find(g.uuid); why != lending_.not_lent.end()) {
        j["not_lent"] = why->second;
      }
      gpus.push_back(j);
    }
    for (const auto& [id, t] : tasks_.tasks()) {
      if (tasks_.Ended(t)) continue;
      nlohmann::json j = {{"attempt_id", id}, {"job_id", t.job_id}, {"gpus", t.gpu_uuids}};
      if (!t.vacate_reason.empty()) j["vacating"] = t.vacate_reason;
      tasks.push_back(j);
    }
    return {{"ok", true},
            {"node", options_.name},
            {"node_id", node_id_},
            {"server", options_.server_url},
            {"connected", welcomed_},
            {"mode", lending_.mode},
            {"next_change_ms", lending_.next_change_ms},
            {"gpus", gpus},
            {"tasks", tasks},
            {"lending", NodeLendingToJson(lending_)},
            {"policy", PolicyToJson(lender_.policy())},
            {"policy_source", PolicySource()}};
  }

  // ---- state file: the last server order applied ----

  std::string StatePath() const { return options_.data_dir + "/agent.json"; }

  void LoadState() {
    auto text = ReadFile(StatePath());
    if (!text.ok()) return;  // a new agent
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object() && j.contains("last_server_seq") &&
        j["last_server_seq"].is_number_integer()) {
      in_ = proto::InboundSequence(j["last_server_seq"].get<int64_t>());
    } else {
      GP_LOG(kWarn) << StatePath() << " is unreadable; starting from scratch";
    }
  }

  void SaveState() {
    std::string state =
        nlohmann::json{{"last_server_seq", in_.last_applied()}, {"node_id", node_id_}}.dump() +
        "\n";
    if (Status s = WriteFileAtomic(StatePath(), state); !s.ok()) GP_LOG(kError) << s.message();
  }

  AgentOptions options_;
  net::EventLoop& loop_;
  RealClock clock_;
  AgentConfig config_;
  exec::ExecEnvironment exec_env_;
  TaskManager tasks_;
  std::unique_ptr<GpuSource> gpu_;
  std::vector<GpuInfo> gpus_;  // as last reported in a hello
  std::string ws_url_;
  std::string instance_;
  std::string node_id_;
  std::shared_ptr<net::WsConnection> conn_;
  uint64_t generation_ = 0;
  bool welcomed_ = false;
  bool resumed_logs_ = false;
  bool shutting_down_ = false;
  bool ack_scheduled_ = false;
  bool poll_posted_ = false;
  int64_t backoff_ms_ = 0;
  int64_t heartbeat_ms_ = 5000;
  net::EventLoop::TimerId heartbeat_timer_ = 0;
  net::EventLoop::TimerId poll_timer_ = 0;
  proto::Outbox outbox_;
  proto::InboundSequence in_;
  std::set<std::string> reported_running_;
  std::map<std::string, int64_t> final_seq_;  // attempt -> seq of its final report
  std::mt19937_64 rng_{std::random_device{}()};

  // The provider's side.
  struct Waiter {  // a reclaim command waiting for its tasks to end
    std::set<std::string> attempts;
    std::vector<std::string> vacated;
    std::string what;
    int64_t started_ms = 0;
    int64_t deadline_ms = 0;
    ControlReply reply;
  };
  Lender lender_{ProviderPolicy{}};
  NodeLending lending_;
  std::optional<NodeLending> sent_lending_;  // what the server last heard
  bool evaluated_ = false;                   // lending_ holds a first evaluation
  std::vector<GpuTelemetry> telemetry_;      // the last sample, for idle-only lending
  net::EventLoop::TimerId lending_timer_ = 0;
  std::unique_ptr<ControlServer> control_;
  std::vector<Waiter> waiters_;
  ControlReply leave_reply_;
  int64_t leave_seq_ = 0;  // the seq of our leave message, once drained
};

void Link::OnOpen(std::shared_ptr<net::WsConnection> conn) {
  if (agent_->Current(generation_)) {
    agent_->OnOpen(std::move(conn));
  } else {
    conn->Close("superseded");
  }
}
void Link::OnMessage(std::string text) {
  if (agent_->Current(generation_)) agent_->OnMessage(text);
}
void Link::OnClose(std::string reason) {
  if (agent_->Current(generation_)) agent_->OnClose(reason);
}

}  // namespace

std::string ControlSocketPath(const std::string& data_dir) { return data_dir + "/control.sock"; }

std::string DefaultAgentDataDir() {
  if (::geteuid() == 0) return "/var/lib/gpupool-agent";
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && state[0] == '/') return std::string(state) + "/gpupool/agent";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && home[0] == '/' ? home : ".") +
         "/.local/state/gpupool/agent";
}

Result<std::map<std::string, std::string>> ParseLabelFlags(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> labels;
  for (const std::string& flag : flags) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("--label " + flag + ": " + why);
    };
    size_t eq = flag.find('=');
    if (eq == std::string::npos) return bad("expected KEY=VALUE, e.g. --label zone=eu-1");
    std::string key = flag.substr(0, eq);
    bool ok = !key.empty() && key.size() <= 128;
    for (char c : key) {
      ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-' || c == '/');
    }
    if (!ok) return bad("the key must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', '-', '/'");
    if (key.starts_with(kReservedLabelPrefix)) {
      return bad("labels starting with \"gpupool/\" are set by the agent itself");
    }
    if (!labels.emplace(key, flag.substr(eq + 1)).second) return bad("the key is given twice");
  }
  return labels;
}

int RunAgent(const AgentOptions& options) {
  SetLogComponent("agent " + options.name);
  net::EventLoop loop;
  Agent agent(options, loop);
  if (Status s = agent.Init(); !s.ok()) {
    std::cerr << "gpupool agent: " << s.message() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  agent.Start();
  bool stopping = false;
  loop.OnSignals({SIGHUP}, [&](int) { agent.LocalCommand("reload"); });
  loop.OnSignals({SIGINT, SIGTERM}, [&](int) {
    if (stopping) return;
    stopping = true;
    agent.Shutdown([&] { loop.Stop(); });
  });
  loop.Run();
  return 0;
}

}  // namespace gpupool::agent
