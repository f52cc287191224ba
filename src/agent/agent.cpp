#include "agent/agent.h"

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "agent/agent_config.h"
#include "agent/agent_setup.h"
#include "agent/agent_state.h"
#include "agent/enrollment.h"
#include "agent/provider.h"
#include "agent/selftest.h"
#include "agent/staging.h"
#include "agent/task_gpus.h"
#include "agent/tasks.h"
#include "agent/tunnel_endpoint.h"
#include "common/clock.h"
#include "common/dir_lock.h"
#include "common/files.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/units.h"
#include "common/version.h"
#include "exec/executors.h"
#include "gpu/gpu_source.h"
#include "model/node.h"
#include "net/event_loop.h"
#include "net/reconnect.h"
#include "net/websocket.h"
#include "proto/channel.h"
#include "proto/messages.h"

namespace gpupool::agent {
namespace {

constexpr size_t kMaxChunkBytes = 256 * 1024;  // output per logs message
constexpr size_t kMaxOutboxBytes = 16 << 20;   // stop reading output beyond this
// Tunnel frames are queued on the connection only while less than this is
// queued, so the agent's own messages wait behind at most this much.
constexpr size_t kTunnelQueueBytes = 64 * 1024;

BlobAccess BlobAccessFor(const AgentOptions& o, const AgentCredentials& creds) {
  return {o.server_url,        creds.node_token,        creds.tls, o.data_dir + "/chunk-cache",
          o.chunk_cache_bytes, StagingDirIn(o.data_dir)};
}

class Agent;

// Forwards a connection's callbacks to the agent while it is the current one.
class Link : public net::WsHandler {
 public:
  Link(Agent* agent, uint64_t generation) : agent_(agent), generation_(generation) {}
  void OnOpen(std::shared_ptr<net::WsConnection> conn) override;
  void OnMessage(std::string text) override;
  void OnBinary(std::string bytes) override;
  void OnSent() override;
  void OnPong() override;
  void OnClose(std::string reason) override;

 private:
  Agent* agent_;
  uint64_t generation_;
};

class Agent {
 public:
  Agent(AgentOptions options, AgentCredentials creds, net::EventLoop& loop, const Clock& clock)
      : options_(std::move(options)),
        creds_(std::move(creds)),
        loop_(loop),
        clock_(clock),
        config_(DefaultAgentConfig(options_.data_dir)),
        tasks_({options_.data_dir, options_.kill_grace_ms, &config_.exec, &exec_env_,
                ::geteuid() == 0, BlobAccessFor(options_, creds_), options_.kill_tasks_on_exit},
               loop, clock_, [this] { WakePoll(); }),
        provider_({options_.data_dir, options_.config_file}, config_, loop, clock_, tasks_,
                  {[this](std::string_view type, std::string body) {
                     return Push(type, std::move(body));
                   },
                   [this] { return Describe(); }, [this] { Shutdown([this] { loop_.Stop(); }); }}) {
  }

  Status Init() {
    std::error_code ec;
    std::filesystem::create_directories(options_.data_dir, ec);
    if (ec) return Status::Internal("cannot create " + options_.data_dir + ": " + ec.message());
    if (options_.name.empty()) options_.name = DefaultNodeName();
    GP_RETURN_IF_ERROR(LoadConfig());
    GP_ASSIGN_OR_RETURN(gpu_, OpenGpus(options_.simulate_gpus, options_.name, options_.nvml_library,
                                       config_.exec.gpu_driver_dir));
    GP_LOG(kInfo) << "GPUs: " << gpu_->Describe();
    TunnelEndpoint::Options tunnels;
    tunnels.docker = config_.exec.docker.engine;
    tunnels.podman = config_.exec.podman.engine;
    tunnels.wake = [this] { PumpTunnels(); };
    tunnels_ = std::make_unique<TunnelEndpoint>(loop_, tasks_, std::move(tunnels));
    if (!options_.advertise_addr.empty()) {
      if (Status s = CheckAdvertiseAddr(options_.advertise_addr); !s.ok()) {
        return Status::InvalidArgument("--advertise-addr: " + s.message());
      }
      GP_LOG(kInfo) << "other nodes of multi-node jobs reach this one at "
                    << options_.advertise_addr;
    }
    if (auto snap = gpu_->Read(); snap.ok()) gpus_ = snap->gpus;
    GP_RETURN_IF_ERROR(provider_.Init(gpus_, gpu_.get(), interposer_usable_));
    exec_env_ = ProbeExecutors(config_.exec, ::geteuid() == 0);
    if (exec_env_.available.empty()) {
      // Taking jobs only to fail each one would black-hole the pool's work.
      std::string why;
      for (const auto& [name, reason] : exec_env_.unavailable) {
        why += (why.empty() ? "" : "; ") + name + ": " + reason;
      }
      return Status::FailedPrecondition("no allowed executor works on this machine (" + why + ")");
    }
    // One server, or a pool's several (net/server_list.h): the agent
    // connects to one and moves on to the next when it cannot connect or
    // loses the connection (a standby refuses the channel with a redirect).
    GP_ASSIGN_OR_RETURN(ws_urls_, AgentChannelUrls(options_.server_url));
    reconnect_ = net::Reconnect(ws_urls_.size(), 100, options_.max_backoff_ms, 2'000);
    instance_ = RandomHex(8);
    LoadState();
    GP_RETURN_IF_ERROR(tasks_.Recover());
    return Status::Ok();
  }

  // The config file, with the flags that override it on top.
  Status LoadConfig() {
    auto config = ResolveAgentConfig(options_.config_file, options_.data_dir,
                                     {options_.max_image_bytes, options_.gpu_driver_dir,
                                      options_.gpushare_library, options_.mps_control});
    if (!config.ok()) return Status::InvalidArgument(config.status().message());
    config_ = *std::move(config);
    if (options_.advertise_addr.empty()) options_.advertise_addr = config_.advertise_addr;
    if (!config_.exec.gpu_driver_dir.empty()) {
      GP_LOG(kInfo) << "NVIDIA driver libraries: " << config_.exec.gpu_driver_dir
                    << " (for NVML and for every job with GPUs)";
    }
    auto sharing = ResolveGpuSharing(config_.exec);
    interposer_usable_ = sharing.ok();
    if (sharing.ok()) {
      GP_LOG(kInfo) << *sharing;
    } else {
      GP_LOG(kWarn) << sharing.status().message();
    }
    return Status::Ok();
  }

  void Start() {
    provider_.Start();
    Connect();
    SchedulePoll();
  }

  void Shutdown(std::function<void()> done) {
    if (shutting_down_) return;
    shutting_down_ = true;
    provider_.Stop();
    if (!options_.kill_tasks_on_exit || tasks_.running() == 0) return Finish(done);
    GP_LOG(kInfo) << "stopping " << tasks_.running() << " tasks before exit";
    tasks_.StopAll("the agent is shutting down");
    int64_t give_up = clock_.MonoMs() + options_.kill_grace_ms + 3000;
    WaitForTasks(give_up, std::move(done));
  }

  void LocalCommand(const std::string& command) { provider_.LocalCommand(command); }

  // ---- connection callbacks (from Link) ----
  bool Current(uint64_t generation) const { return generation == generation_; }

  void OnOpen(std::shared_ptr<net::WsConnection> conn) {
    conn_ = std::move(conn);
    local_addr_ = conn_->local();
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
      provider_.SetGpus(gpus_);
      h.gpus = snap->gpus;
      h.driver_version = snap->driver_version;
      h.cuda_version = snap->cuda_version;
    } else {
      GP_LOG(kWarn) << "cannot read GPUs: " << snap.status().message();
    }
    h.labels = options_.labels;
    for (const std::string& name : exec_env_.available) h.labels[ExecutorLabel(name)] = "true";
    if (exec_env_.sandbox_images) h.labels[kImagesLabel] = "true";
    for (const auto& [key, value] : SelftestLabels(options_.data_dir)) h.labels[key] = value;
    h.owner_group = options_.owner_group;
    h.lending = provider_.LendingForHello();
    h.tasks = tasks_.Reports();
    // The hello is also a lease renewal request (proto::Lease): the welcome
    // renews every lease from the moment it was sent.
    hello_sent_ms_ = clock_.MonoMs();
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
    if (env->seq == 0) {
      if (env->type == proto::kLease) return OnLeaseAnswer(env->body);
      return;  // ack or other unsequenced message
    }
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
    ScheduleAck();
  }

  // A tunnel frame (agent/tunnel_endpoint.h).
  void OnBinary(const std::string& bytes) {
    if (!tunnels_) return;
    if (Status s = tunnels_->OnMessage(bytes); !s.ok()) return Drop(s.message());
    PumpTunnels();
  }

  // Sends tunnel frames while the connection's queue is short: they take
  // what the agent's own messages leave, never delaying those much.
  void PumpTunnels() {
    if (!tunnels_) return;
    while (conn_ && conn_->queued_bytes() < kTunnelQueueBytes) {
      auto frame = tunnels_->NextFrame();
      if (!frame) return;
      conn_->SendBinary(std::move(*frame));
    }
  }

  // The server answered a ping. Leases are not renewed by pongs: a pong
  // says nothing of when the server read the ping.
  void OnPong() {}

  void OnClose(const std::string& reason) {
    bool was = welcomed_;
    conn_.reset();
    welcomed_ = false;
    ++generation_;
    loop_.Cancel(heartbeat_timer_);
    loop_.Cancel(lease_ping_timer_);
    // The server forgets the streams with the connection: so does the agent.
    if (tunnels_) tunnels_->Reset();
    if (shutting_down_) return;
    if (was) {
      GP_LOG(kWarn) << "disconnected from " << options_.server_url << ": " << reason;
    } else {
      GP_LOG(kDebug) << "cannot connect to " << options_.server_url << ": " << reason;
    }
    // The next server of the pool, soon, or a back-off (net/reconnect.h).
    loop_.RunAfter(reconnect_.Failed(reason, rng_), [this] { Connect(); });
  }

 private:
  void Connect() {
    if (shutting_down_) return;
    net::WsClientOptions o;
    o.url = ws_urls_[reconnect_.server()];
    o.headers["Authorization"] = "Bearer " + creds_.node_token;
    o.tls = creds_.tls;
    o.idle_timeout_ms = 0;
    net::WsConnect(loop_, o, std::make_shared<Link>(this, generation_));
  }

  void OnWelcome(const proto::Welcome& w) {
    welcomed_ = true;
    reconnect_.Connected();
    node_id_ = w.node_id;
    compact_logs_ = w.log_records;
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
    if (w.attempt_lease_ms != tasks_.lease_ms()) {
      GP_LOG(kInfo) << (w.attempt_lease_ms > 0
                            ? "jobs stop after " + FormatDurationMs(w.attempt_lease_ms) +
                                  " without the server (attempt lease)"
                            : std::string("the server grants no attempt leases"));
    }
    tasks_.SetLease(w.attempt_lease_ms);
    tasks_.RenewLeases(hello_sent_ms_);
    LeasePing();
    Heartbeat();
    WakePoll();
  }

  // The server applied our messages up to `seq`.
  void Acked(int64_t seq) {
    outbox_.Ack(seq);
    ForgetAckedTasks(seq);
    provider_.Acked(seq);
  }

  // Tells the server this node will not run `start`, and why.
  Status Refuse(const proto::StartTask& start, const Status& why) {
    GP_LOG(kInfo) << "refusing " << start.attempt_id << ": " << why.message();
    proto::TaskReport r{start.attempt_id, proto::TaskState::kRefused, 0, 0, why.message(),
                        clock_.NowMs()};
    Push(proto::kTaskStatus, proto::Encode(r));
    return Status::Ok();
  }

  Status ApplyOrder(const proto::Envelope& env) {
    if (env.type == proto::kStart) {
      GP_ASSIGN_OR_RETURN(auto start, proto::DecodeStartTask(env.body));
      if (shutting_down_) return Status::Ok();
      bool held = tasks_.tasks().count(start.attempt_id) > 0;
      if (!held) {
        // The policy is enforced here whatever the server thought.
        if (Status ok = provider_.Admit(start); !ok.ok()) return Refuse(start, ok);
      }
      GP_LOG(kInfo) << "starting " << start.attempt_id << " (" << start.spec.name << ")"
                    << (start.gang ? " as rank " + std::to_string(start.gang->rank) + " of " +
                                         std::to_string(start.gang->nodes)
                                   : "");
      // The output the task may leave: the server's limit, or less by the
      // provider's policy (the shim enforces it, agent/output_log.h).
      if (!held) start.max_output_bytes = provider_.OutputLimit(start.max_output_bytes);
      // Rank 0 of a torch gang: the master is chosen here, before Start
      // keeps it with the task, and reported at once (in the sandbox's
      // private network: once the job listens on it, see TaskState): the
      // server starts the other ranks with it.
      bool choose_master = NeedsMaster(start) && !held;
      Status s = tasks_.ChooseMaster(start, AdvertiseAddr());
      // The task's GPUs as this connection's hello reported them (the ones
      // the server placed on): device minors and a share's memory cap. A
      // task already held keeps what it started with.
      auto gpus = held ? Result<TaskGpus>(TaskGpus{}) : TaskGpusFor(start, gpus_);
      if (s.ok() && !gpus.ok()) s = gpus.status();
      if (s.ok() && !held) {
        // A share: its cap must fit beside its neighbours'; on an MPS GPU
        // its daemon runs before the task does, and serves one user at a
        // time (agent/mps.h).
        if (Status m = provider_.PrepareShare(start, *gpus); !m.ok()) return Refuse(start, m);
      }
      if (s.ok()) s = tasks_.Start(start, *gpus);
      if (s.ok() && choose_master) {
        proto::TaskReport r = tasks_.Report(tasks_.tasks().at(start.attempt_id));
        r.state = proto::TaskState::kStarting;
        GP_LOG(kInfo) << start.attempt_id << ": the gang's master is " << r.master_addr << " port "
                      << r.master_port;
        Push(proto::kTaskStatus, proto::Encode(r));
      }
      if (!s.ok()) {
        // Report it so the job does not wait forever.
        proto::TaskReport r{
            start.attempt_id, proto::TaskState::kFailed, 127, 0, "cannot start: " + s.message(),
            clock_.NowMs()};
        Push(proto::kTaskStatus, proto::Encode(r));
      }
      WakePoll();
      return s;
    }
    if (env.type == proto::kStage) {
      GP_ASSIGN_OR_RETURN(auto stage, proto::DecodeStageCheckpoint(env.body));
      if (shutting_down_) return Status::Ok();
      GP_LOG(kInfo) << "staging job " << stage.job_id << " checkpoint " << stage.checkpoint;
      stager_.Stage(stage);
      return Status::Ok();
    }
    if (env.type == proto::kOwnerCommand) {
      GP_ASSIGN_OR_RETURN(auto command, proto::DecodeOwnerCommand(env.body));
      if (!shutting_down_) provider_.FromServer(command);
      return Status::Ok();
    }
    if (env.type == proto::kStop) {
      GP_ASSIGN_OR_RETURN(auto stop, proto::DecodeStopTask(env.body));
      GP_LOG(kInfo) << "stopping " << stop.attempt_id << ": " << stop.reason;
      if (stop.requeue) {
        tasks_.StopToRequeue(stop.attempt_id, stop.reason, stop.grace_ms);
      } else {
        tasks_.Stop(stop.attempt_id, stop.reason, stop.grace_ms);
      }
      return Status::Ok();
    }
    return Status::InvalidArgument("unknown order type \"" + env.type + "\"");
  }

  // Queues a reliable message (sent now when connected); returns its seq.
  int64_t Push(std::string_view type, std::string body) {
    if (!welcomed_) return outbox_.Push(std::string(type), std::move(body));
    std::string text = body;
    int64_t seq = outbox_.Push(std::string(type), std::move(body));
    Send({proto::kProtocolVersion, seq, in_.last_applied(), std::string(type), std::move(text)});
    return seq;
  }

  void Send(const proto::Envelope& e) {
    // What a message acknowledges is on disk before the server sees it, so
    // a restarted agent never takes an acknowledged order again. Saved here
    // rather than after each order: a burst of orders costs one write (an
    // order applied but not yet acknowledged comes again after a restart,
    // and applying one twice changes nothing).
    if (e.ack > saved_seq_) SaveState();
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

  // While the server grants leases, the agent asks for a renewal four
  // times per lease (proto::Lease), whatever the heartbeat interval.
  void LeasePing() {
    loop_.Cancel(lease_ping_timer_);
    const int64_t lease = tasks_.lease_ms();
    if (!welcomed_ || lease <= 0) return;
    Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kLease),
          proto::Encode(proto::Lease{clock_.MonoMs()})});
    lease_ping_timer_ = loop_.RunAfter(std::max<int64_t>(lease / 4, 50), [this] { LeasePing(); });
  }

  // The server answered a renewal request: every lease now lasts until the
  // request's send time plus the lease. An answer stamped in the future is
  // not ours.
  void OnLeaseAnswer(const std::string& body) {
    auto lease = proto::DecodeLease(body);
    if (!lease.ok()) return Drop("malformed lease answer: " + lease.status().message());
    if (lease->sent_ms > clock_.MonoMs()) return Drop("a lease answer from the future");
    tasks_.RenewLeases(lease->sent_ms);
  }

  void Heartbeat() {
    loop_.Cancel(heartbeat_timer_);
    if (!welcomed_) return;
    proto::Heartbeat hb;
    if (auto snap = gpu_->Read(); snap.ok()) hb.telemetry = snap->telemetry;
    hb.running_tasks = tasks_.running();
    hb.shares = provider_.share_uses();
    Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kHeartbeat),
          proto::Encode(hb)});
    heartbeat_timer_ = loop_.RunAfter(heartbeat_ms_, [this] { Heartbeat(); });
  }

  // ---- tasks ----

  // Where the other ranks of a gang reach this node.
  std::string AdvertiseAddr() const {
    return options_.advertise_addr.empty() ? local_addr_ : options_.advertise_addr;
  }

  // A wake is about the tasks whose shims spoke; the timer (SchedulePoll)
  // reads every task's new output. A node can hold hundreds of tasks: a
  // wake that read them all made each start cost in proportion to them.
  void WakePoll() {
    if (poll_posted_) return;
    poll_posted_ = true;
    loop_.Post([this] {
      poll_posted_ = false;
      std::set<std::string> woken = tasks_.TakeWoken();
      PollTasks(&woken);
    });
  }

  void SchedulePoll() {
    poll_timer_ = loop_.RunAfter(options_.poll_ms, [this] {
      PollTasks();
      SchedulePoll();
    });
  }

  // Ships new output, then status changes, of every task or of `only`. A
  // task's output is shipped completely before its final report, so the
  // server has every line when it sees the job finish.
  void PollTasks(const std::set<std::string>* only = nullptr) {
    if (only == nullptr) tasks_.Poll();
    // Rank 0 masters that listen now: the server starts the other ranks.
    for (const std::string& id : tasks_.TakeAnnouncedMasters()) {
      auto it = tasks_.tasks().find(id);
      if (it == tasks_.tasks().end() || tasks_.Ended(it->second)) continue;
      proto::TaskReport r = tasks_.Report(it->second);
      GP_LOG(kInfo) << id << ": the gang's master listens at " << r.master_addr << " port "
                    << r.master_port;
      Push(proto::kTaskStatus, proto::Encode(r));
    }
    auto poll = [&](const std::string& id, const TaskState& t) {
      if (final_reported_.count(id)) return;
      // That it runs goes ahead of its output: a job whose output is held
      // back (a flood) still shows as running.
      if (t.started && !tasks_.Ended(t) && reported_running_.insert(id).second) {
        Push(proto::kTaskStatus, proto::Encode(tasks_.Report(t)));
      }
      if (!ShipOutput(id)) return;  // back-pressure: the rest waits in the file
      if (tasks_.Ended(t)) {
        proto::TaskReport r = tasks_.Report(t);
        GP_LOG(kInfo) << "task " << id << " " << proto::TaskStateName(r.state)
                      << (r.state == proto::TaskState::kExited
                              ? " with code " + std::to_string(r.exit_code)
                              : "")
                      << (r.reason.empty() ? "" : ": " + r.reason);
        Push(proto::kTaskStatus, proto::Encode(r));
        final_reported_.insert(id);
        finals_by_seq_.emplace(outbox_.last_seq(), id);
      }
    };
    if (only == nullptr) {
      for (const auto& [id, t] : tasks_.tasks()) poll(id, t);
    } else {
      for (const std::string& id : *only) {
        if (auto it = tasks_.tasks().find(id); it != tasks_.tasks().end()) poll(id, it->second);
      }
    }
    provider_.TasksChanged();
    // Sessions whose task ended tell their users why.
    if (tunnels_) tunnels_->CheckTasks();
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
      chunk.compact = compact_logs_;
      for (auto& r : records)
        chunk.lines.push_back({r.offset, std::move(r.stream), r.ts_ms, std::move(r.text)});
      Push(proto::kLogs, proto::Encode(chunk));
    }
  }

  void ForgetAckedTasks(int64_t acked) {
    // In the order of their final reports: an ack forgets what it covers
    // without looking at the rest.
    while (!finals_by_seq_.empty() && finals_by_seq_.begin()->first <= acked) {
      const std::string id = finals_by_seq_.begin()->second;
      finals_by_seq_.erase(finals_by_seq_.begin());
      tasks_.Remove(id);
      reported_running_.erase(id);
      final_reported_.erase(id);
    }
  }

  void WaitForTasks(int64_t give_up, std::function<void()> done) {
    PollTasks();
    if (tasks_.running() == 0 || clock_.MonoMs() > give_up) {
      // Give the final reports a moment to reach the server.
      loop_.RunAfter(500, [this, done] { Finish(done); });
      return;
    }
    loop_.RunAfter(100, [this, give_up, done] { WaitForTasks(give_up, done); });
  }

  void Finish(const std::function<void()>& done) {
    // MPS daemons no running task uses would outlive the agent.
    provider_.ReleaseIdleMps();
    loop_.Cancel(poll_timer_);
    loop_.Cancel(heartbeat_timer_);
    loop_.Cancel(lease_ping_timer_);
    if (conn_) conn_->Close("agent shutting down");
    loop_.RunAfter(100, done);
  }

  // The agent's part of `gpupool agent status`.
  nlohmann::json Describe() const {
    return {{"node", options_.name},
            {"node_id", node_id_},
            {"server", options_.server_url},
            {"connected", welcomed_}};
  }

  // ---- state file: the last server order applied ----

  void LoadState() {
    auto loaded = state_file_.Load();
    if (!loaded.ok()) {
      GP_LOG(kWarn) << loaded.status().message() << "; starting from scratch";
    } else if (*loaded) {
      in_ = proto::InboundSequence((*loaded)->last_server_seq);
      saved_seq_ = in_.last_applied();
    }
  }

  void SaveState() {
    if (Status s = state_file_.Save({in_.last_applied(), node_id_}); !s.ok()) {
      GP_LOG(kError) << s.message();
      return;
    }
    saved_seq_ = in_.last_applied();
  }

  AgentOptions options_;
  AgentCredentials creds_;  // the node token and TLS settings (agent/enrollment.h)
  net::EventLoop& loop_;
  const Clock& clock_;  // every time the agent reads (RunAgent's)
  AgentConfig config_;
  exec::ExecEnvironment exec_env_;
  bool interposer_usable_ = false;  // libgpushare.so can be injected (ResolveGpuSharing)
  TaskManager tasks_;
  std::unique_ptr<GpuSource> gpu_;
  std::vector<GpuInfo> gpus_;         // as last reported in a hello
  std::vector<std::string> ws_urls_;  // one per server of the pool
  // At most 2 s after meeting a standby (made in Init, with ws_urls_).
  net::Reconnect reconnect_{1, 100, 10'000, 2'000};
  std::string instance_;
  std::string node_id_;
  std::shared_ptr<net::WsConnection> conn_;
  std::string local_addr_;     // this end of the connection to the server
  int64_t hello_sent_ms_ = 0;  // MonoMs of the last hello (a lease renewal request)
  net::EventLoop::TimerId lease_ping_timer_ = 0;
  uint64_t generation_ = 0;
  bool welcomed_ = false;
  bool resumed_logs_ = false;
  bool compact_logs_ = false;  // the server takes compact logs messages (proto::LogChunk)
  bool shutting_down_ = false;
  bool ack_scheduled_ = false;
  bool poll_posted_ = false;
  int64_t heartbeat_ms_ = 5000;
  net::EventLoop::TimerId heartbeat_timer_ = 0;
  net::EventLoop::TimerId poll_timer_ = 0;
  proto::Outbox outbox_;
  proto::InboundSequence in_;
  int64_t saved_seq_ = 0;  // the last order the state file says was applied
  AgentStateFile state_file_{options_.data_dir + "/agent.json"};
  std::set<std::string> reported_running_;
  // Tasks whose final report is sent, and by that report's seq (forgotten
  // once the server acknowledges it).
  std::set<std::string> final_reported_;
  std::map<int64_t, std::string> finals_by_seq_;
  std::mt19937_64 rng_{std::random_device{}()};
  Provider provider_;
  Stager stager_{StagingDirIn(options_.data_dir), BlobAccessFor(options_, creds_)};
  std::unique_ptr<TunnelEndpoint> tunnels_;  // made in Init, with the config
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
void Link::OnBinary(std::string bytes) {
  if (agent_->Current(generation_)) agent_->OnBinary(bytes);
}
void Link::OnSent() {
  if (agent_->Current(generation_)) agent_->PumpTunnels();
}
void Link::OnPong() {
  if (agent_->Current(generation_)) agent_->OnPong();
}
void Link::OnClose(std::string reason) {
  if (agent_->Current(generation_)) agent_->OnClose(reason);
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  RealClock clock;
  return RunAgent(options, clock);
}

int RunAgent(const AgentOptions& options, const Clock& clock) {
  SetLogComponent("agent " + options.name);
  if (!options.advertise_addr.empty()) {
    if (Status s = CheckAdvertiseAddr(options.advertise_addr); !s.ok()) {
      std::cerr << "gpupool agent: --advertise-addr: " << s.message() << "\n";
      return 2;
    }
  }
  // One agent per data directory: a second one would run every task twice.
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  auto lock = DirLock::Acquire(options.data_dir, "agent");
  if (!lock.ok()) {
    std::cerr << "gpupool agent: " << lock.status().message() << "\n";
    return 1;
  }
  auto creds = Credentials(options);
  if (!creds.ok()) {
    std::cerr << "gpupool agent: " << creds.status().message() << "\n";
    return creds.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  net::EventLoop loop;
  Agent agent(options, *creds, loop, clock);
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
