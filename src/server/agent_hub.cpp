#include "server/agent_hub.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "proto/channel.h"
#include "proto/tunnel_mux.h"
#include "server/http_errors.h"

namespace gpupool::server {

namespace {
// Tunnel frames are queued on the connection only while less than this is
// waiting to be written (a JSON order waits behind at most this much).
constexpr size_t kTunnelQueueLimit = 64 * 1024;

// Budgets and cooldowns run on the monotonic clock: a wall-clock jump
// neither lifts nor extends them.
int64_t MonoMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

class AgentHub::Session : public net::WsHandler, public std::enable_shared_from_this<Session> {
 public:
  // `node`: the node the agent's credential belongs to.
  Session(AgentHub& hub, std::string node)
      : hub_(hub),
        credential_node_(std::move(node)),
        budget_(hub.options_.channel, MonoMs()),
        mux_(proto::TunnelMuxOptions{},
             proto::TunnelMux::Events{
                 [this](uint32_t id, const std::string&) {
                   // Only the server opens streams.
                   mux_.Close(id, "agents may not open streams");
                 },
                 [this](uint32_t id, std::string_view data) {
                   auto it = streams_.find(id);
                   if (it == streams_.end() || !it->second.data)
                     return mux_.Consumed(id, data.size());
                   auto fn = it->second.data;
                   fn(data);
                 },
                 [this](uint32_t id, const std::string& reason) { EndStream(id, reason); }}) {}

  class Stream : public TunnelStream {
   public:
    Stream(std::weak_ptr<Session> session, uint32_t id) : session_(std::move(session)), id_(id) {}
    ~Stream() override { Close(); }
    size_t Write(std::string_view bytes) override {
      auto s = session_.lock();
      if (!s || s->closed_) return 0;
      size_t took = s->mux_.Write(id_, bytes);
      if (took < bytes.size()) {
        auto it = s->streams_.find(id_);
        if (it != s->streams_.end()) it->second.blocked = true;
      }
      s->SchedulePump();
      return took;
    }
    void Consumed(size_t bytes) override {
      auto s = session_.lock();
      if (!s || s->closed_) return;
      s->mux_.Consumed(id_, bytes);
      s->SchedulePump();
    }
    void Close() override {
      auto s = session_.lock();
      if (closed_ || !s || s->closed_) return;
      closed_ = true;
      s->mux_.Close(id_);
      // Nothing more is delivered to a stream its owner closed.
      if (auto it = s->streams_.find(id_); it != s->streams_.end()) it->second = {};
      s->SchedulePump();
    }

   private:
    std::weak_ptr<Session> session_;
    uint32_t id_;
    bool closed_ = false;
  };

  uint32_t Open(const proto::TunnelTarget& target, TunnelStream::Events events) {
    uint32_t id = mux_.Open(proto::EncodeTunnelTarget(target));
    GP_LOG(kDebug) << "node " << node_name_ << ": tunnel stream " << id << " to "
                   << proto::TunnelTargetKindName(target.kind) << " of attempt "
                   << target.attempt_id;
    streams_[id] =
        StreamEntry{std::move(events.data), std::move(events.writable), std::move(events.closed)};
    SchedulePump();
    return id;
  }

  size_t max_message_bytes() const override {
    return std::max(hub_.options_.channel.max_text_bytes, hub_.options_.channel.max_binary_bytes);
  }

  void OnBinary(std::string bytes) override {
    if (closed_ || refused_) return;
    heard_ = true;
    if (auto v = budget_.OnBinary(bytes.size(), MonoMs()); !v.refuse.empty())
      return Refuse("agent.flood", v.refuse);
    if (node_id_.empty()) return Fail("tunnel frame before hello");
    auto frame = proto::DecodeTunnelFrame(bytes);
    if (!frame.ok()) return Fail("malformed tunnel frame: " + frame.status().message());
    if (Status s = mux_.OnFrame(*frame); !s.ok()) return Fail("tunnel: " + s.message());
    SchedulePump();
  }

  void OnSent() override { Pump(); }

  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    conn_ = std::move(conn);
    std::weak_ptr<Session> weak = shared_from_this();
    hello_timer_ = hub_.loop_.RunAfter(15'000, [weak] {
      if (auto self = weak.lock(); self && self->node_id_.empty())
        self->Fail("no hello within 15s");
    });
    WatchSilence();
  }

  // Closes the connection when a whole silence period passes without a frame.
  void WatchSilence() {
    std::weak_ptr<Session> weak = shared_from_this();
    silence_timer_ = hub_.loop_.RunAfter(hub_.silence_limit_ms_, [weak] {
      auto self = weak.lock();
      if (!self || self->closed_) return;
      if (!self->heard_) {
        return self->Fail("nothing received for " +
                          std::to_string(self->hub_.silence_limit_ms_ / 1000) + "s");
      }
      self->heard_ = false;
      self->WatchSilence();
    });
  }

  void OnMessage(std::string text) override {
    if (closed_ || refused_) return;
    heard_ = true;
    auto verdict = budget_.OnText(text.size(), MonoMs());
    if (!verdict.refuse.empty()) return Refuse("agent.flood", verdict.refuse);
    if (verdict.pause_ms > 0) PauseFor(verdict.pause_ms);
    auto env = proto::DecodeEnvelope(text);
    if (!env.ok()) return Fail("malformed message: " + env.status().message());
    if (node_id_.empty()) return HandleHello(*env);

    if (env->ack > acked_) {
      acked_ = env->ack;
      Status s = hub_.pool_.AgentAcked(node_id_, acked_);
      if (!s.ok()) return Fail("cannot record ack: " + s.ToString());
    }
    if (env->seq == 0) {
      if (env->type == proto::kHeartbeat) {
        auto hb = proto::DecodeHeartbeat(env->body);
        if (!hb.ok()) return Fail("malformed heartbeat: " + hb.status().message());
        hub_.pool_.AgentHeartbeat(node_id_, *hb);
      } else if (env->type == proto::kLease) {
        // Recorded and answered at once: the agent's deadline counts from
        // when it sent the request (node_liveness.h).
        auto lease = proto::DecodeLease(env->body);
        if (!lease.ok()) return Fail("malformed lease request: " + lease.status().message());
        hub_.pool_.AgentLeaseRequested(node_id_);
        Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kLease),
              proto::Encode(*lease)});
      } else if (env->type != proto::kAck) {
        return Fail("unexpected unsequenced message \"" + env->type + "\"");
      }
      return;
    }
    switch (in_.Check(env->seq)) {
      case proto::InboundSequence::Verdict::kDuplicate:
        ScheduleAck();
        return;
      case proto::InboundSequence::Verdict::kGap:
        return Fail("sequence gap: got " + std::to_string(env->seq) + " after " +
                    std::to_string(in_.last_applied()));
      case proto::InboundSequence::Verdict::kApply:
        break;
    }
    // Decoded once, here; the pool takes the typed message.
    auto message = proto::DecodeAgentReport(env->type, env->body);
    Status s =
        message.ok() ? hub_.pool_.AgentMessage(node_id_, env->seq, *message) : message.status();
    if (s.code() == StatusCode::kInvalidArgument) {
      // A malformed message would be resent forever; skip it, loudly.
      GP_LOG(kError) << "node " << node_id_ << ": rejected message " << env->seq << " ("
                     << env->type << "): " << s.message();
    } else if (!s.ok()) {
      return Fail("cannot apply message: " + s.ToString());
    }
    in_.MarkApplied(env->seq);
    ScheduleAck();
  }

  void OnClose(std::string reason) override {
    if (closed_) return;
    if (reason.starts_with(net::kMessageTooBig) && !refused_) {
      refused_ = true;
      hub_.Refuse(credential_node_, conn_ ? conn_->peer() : "", "agent.flood", reason);
    }
    closed_ = true;
    hub_.loop_.Cancel(resume_timer_);
    auto streams = std::move(streams_);
    streams_.clear();
    for (auto& [id, entry] : streams) {
      if (entry.closed) entry.closed("the node's agent disconnected (" + reason + ")");
    }
    hub_.loop_.Cancel(hello_timer_);
    hub_.loop_.Cancel(silence_timer_);
    if (node_id_.empty()) return;
    auto it = hub_.by_node_.find(node_id_);
    if (it != hub_.by_node_.end() && it->second.lock().get() == this) {
      hub_.by_node_.erase(it);
      GP_LOG(kInfo) << "agent " << node_name_ << " (" << node_id_ << ") disconnected: " << reason;
      Status s = hub_.pool_.AgentDisconnected(node_id_);
      if (!s.ok())
        GP_LOG(kError) << "cannot mark node " << node_id_ << " offline: " << s.ToString();
    }
  }

  // Sends outbox messages the agent has not been sent on this connection.
  void Flush() {
    flush_scheduled_ = false;
    if (closed_ || node_id_.empty()) return;
    auto orders = hub_.pool_.PendingOrders(node_id_, sent_);
    if (!orders.ok()) return Fail("cannot read outbox: " + orders.status().ToString());
    for (const OutboxMessage& m : *orders) {
      if (m.type == proto::kStage && hub_.options_.blob_scope != nullptr) {
        // The node may read what it is told to stage.
        if (auto stage = proto::DecodeStageCheckpoint(m.body); stage.ok())
          hub_.options_.blob_scope->GrantStage(node_name_, stage->manifest);
      }
      Send({proto::kProtocolVersion, m.seq, in_.last_applied(), m.type, m.body});
      sent_ = m.seq;
    }
  }

  void ScheduleFlush() {
    if (flush_scheduled_) return;
    flush_scheduled_ = true;
    std::weak_ptr<Session> weak = shared_from_this();
    hub_.loop_.Post([weak] {
      if (auto self = weak.lock()) self->Flush();
    });
  }

  const std::string& node_name() const { return node_name_; }
  bool ready() const { return !closed_ && !node_id_.empty(); }

  void Fail(const std::string& why) {
    GP_LOG(kWarn) << "agent connection " << (conn_ ? conn_->peer() : "?") << " "
                  << (node_name_.empty() ? "" : "(" + node_name_ + ") ") << "closed: " << why;
    if (conn_) conn_->Close(why.substr(0, 120));  // close frames carry at most 123 bytes
  }

  // Closes the connection for something the agent may not do; audited, and
  // the node may not reconnect for a while.
  void Refuse(const std::string& action, const std::string& why) {
    if (refused_) return;
    refused_ = true;  // what still arrives before the close is ignored
    hub_.Refuse(credential_node_, conn_ ? conn_->peer() : "", action, why);
    Fail(why);
  }

 private:
  void HandleHello(const proto::Envelope& env) {
    if (env.type != proto::kHello) return Fail("expected hello, got \"" + env.type + "\"");
    auto hello = proto::DecodeHello(env.body);
    if (!hello.ok()) return Fail("malformed hello: " + hello.status().message());
    if (hello->node_name != credential_node_) {
      return Refuse("agent.hello", "this agent's credential belongs to node " + credential_node_ +
                                       ", not " + hello->node_name);
    }
    if (Status s = hub_.CheckClaims(*hello); !s.ok()) {
      if (s.code() != StatusCode::kInvalidArgument)
        return Fail("cannot check the hello: " + s.ToString());
      return Refuse("agent.hello", "refused hello: " + s.message());
    }
    // A newer connection from the same node replaces the old one.
    auto existing = hub_.by_node_.end();
    auto welcome = hub_.pool_.AgentHello(*hello);
    if (!welcome.ok()) return Fail("cannot register node: " + welcome.status().ToString());
    node_id_ = welcome->node_id;
    node_name_ = hello->node_name;
    hub_.gpu_owners_.Claim(node_name_, hello->gpus);
    existing = hub_.by_node_.find(node_id_);
    if (existing != hub_.by_node_.end()) {
      if (auto old = existing->second.lock()) {
        old->node_id_.clear();  // so its close does not mark the node offline
        old->Fail("replaced by a newer connection");
      }
    }
    hub_.by_node_[node_id_] = weak_from_this();
    hub_.loop_.Cancel(hello_timer_);
    in_ = proto::InboundSequence(welcome->last_agent_seq);
    sent_ = hello->last_server_seq;
    acked_ = hello->last_server_seq;
    Send({proto::kProtocolVersion, 0, in_.last_applied(), std::string(proto::kWelcome),
          proto::Encode(*welcome)});
    GP_LOG(kInfo) << "agent " << node_name_ << " (" << node_id_ << ") connected from "
                  << conn_->peer() << " with " << hello->gpus.size() << " GPUs, "
                  << hello->tasks.size() << " tasks";
    Flush();
  }

  // Stops reading the connection for `ms` (JSON bytes over their budget).
  void PauseFor(int64_t ms) {
    if (!conn_) return;
    conn_->PauseReading(true);
    hub_.loop_.Cancel(resume_timer_);
    std::weak_ptr<Session> weak = shared_from_this();
    resume_timer_ = hub_.loop_.RunAfter(ms, [weak] {
      auto self = weak.lock();
      if (!self || self->closed_ || !self->conn_) return;
      self->heard_ = true;  // the silence was ours
      self->conn_->PauseReading(false);
    });
  }

  void ScheduleAck() {
    if (ack_scheduled_) return;
    ack_scheduled_ = true;
    std::weak_ptr<Session> weak = shared_from_this();
    hub_.loop_.Post([weak] {
      auto self = weak.lock();
      if (!self || self->closed_) return;
      self->ack_scheduled_ = false;
      self->Send(
          {proto::kProtocolVersion, 0, self->in_.last_applied(), std::string(proto::kAck), "{}"});
    });
  }

  void Send(const proto::Envelope& e) {
    if (conn_ && !closed_) conn_->Send(proto::EncodeEnvelope(e));
  }

  struct StreamEntry {
    std::function<void(std::string_view)> data;
    std::function<void()> writable;
    std::function<void(const std::string&)> closed;
    bool blocked = false;  // a Write took less than offered
  };

  void EndStream(uint32_t id, const std::string& reason) {
    GP_LOG(kDebug) << "node " << node_name_ << ": tunnel stream " << id << " ended by the agent"
                   << (reason.empty() ? "" : ": " + reason);
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    auto closed = std::move(it->second.closed);
    streams_.erase(it);
    if (closed) closed(reason);
  }

  void SchedulePump() {
    if (pump_scheduled_ || closed_) return;
    pump_scheduled_ = true;
    std::weak_ptr<Session> weak = shared_from_this();
    hub_.loop_.Post([weak] {
      if (auto self = weak.lock()) {
        self->pump_scheduled_ = false;
        self->Pump();
      }
    });
  }

  // Sends tunnel frames while the connection's queue is short, then tells
  // streams that were full that they have room again.
  void Pump() {
    if (closed_ || !conn_) return;
    while (conn_->queued_bytes() < kTunnelQueueLimit) {
      auto frame = mux_.NextFrame();
      if (!frame) break;
      conn_->SendBinary(proto::EncodeTunnelFrame(*frame));
    }
    std::vector<std::function<void()>> wake;
    for (auto& [id, entry] : streams_) {
      if (entry.blocked && mux_.buffered(id) < kStreamResumeBytes) {
        entry.blocked = false;
        if (entry.writable) wake.push_back(entry.writable);
      }
    }
    for (auto& fn : wake) fn();
  }

  static constexpr size_t kStreamResumeBytes = 512 * 1024;  // half of a stream's buffer

  AgentHub& hub_;
  std::string credential_node_;
  ChannelBudget budget_;
  net::EventLoop::TimerId resume_timer_ = 0;
  proto::TunnelMux mux_;
  std::map<uint32_t, StreamEntry> streams_;
  bool pump_scheduled_ = false;
  std::shared_ptr<net::WsConnection> conn_;
  std::string node_id_;
  std::string node_name_;
  proto::InboundSequence in_;
  int64_t sent_ = 0;   // highest outbox seq sent on this connection
  int64_t acked_ = 0;  // highest outbox seq the agent acked
  bool closed_ = false;
  bool refused_ = false;  // closing for something the agent may not do
  bool ack_scheduled_ = false;
  bool flush_scheduled_ = false;
  bool heard_ = false;  // a frame arrived in the current silence period
  net::EventLoop::TimerId hello_timer_ = 0;
  net::EventLoop::TimerId silence_timer_ = 0;
};

std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> AgentHub::Upgrade(
    const net::HttpRequest& req) {
  auto who = auth_.Authenticate(req.Header("authorization"));
  if (!who.ok()) return ErrorResponse(who.status());
  if (who->role == Role::kJoin) {
    return ErrorResponse(Status::PermissionDenied(
        "the join token only enrolls agents (POST /v1/agent/enroll); connect with the node's own "
        "credential"));
  }
  if (Status s = Authorize(*who, Action::kAgentConnect, {who->subject}); !s.ok())
    return ErrorResponse(s);
  if (auto it = cooldown_.find(who->subject); it != cooldown_.end()) {
    int64_t left_ms = it->second - MonoMs();
    if (left_ms > 0) {
      net::HttpResponse r = ErrorResponse(Status::ResourceExhausted(
          "node " + who->subject + " was disconnected for breaking the agent channel's rules " +
          "(see `gpupool admin audit`); it may reconnect in " +
          std::to_string((left_ms + 999) / 1000) + "s"));
      r.headers["retry-after"] = std::to_string((left_ms + 999) / 1000);
      return r;
    }
    cooldown_.erase(it);
  }
  if (require_client_cert_) {
    // Mutual TLS: the certificate presented must be the one issued with
    // this node's token.
    auto cred = auth_.GetAgentCredential(who->subject);
    if (!cred.ok()) return ErrorResponse(cred.status());
    if (req.client_cert_serial.empty()) {
      return ErrorResponse(Status::Unauthenticated(
          "this server requires agents to present their client certificate (mutual TLS)"));
    }
    if (!*cred || (*cred)->revoked || (*cred)->cert_serial != req.client_cert_serial) {
      return ErrorResponse(Status::Unauthenticated("the client certificate is not node " +
                                                   who->subject + "'s current certificate"));
    }
  }
  return std::make_shared<Session>(*this, who->subject);
}

void AgentHub::Refuse(const std::string& node, const std::string& peer, const std::string& action,
                      const std::string& why) {
  GP_LOG(kWarn) << "refused agent " << node << " (" << action << "): " << why;
  auth_.Audit("node:" + node, action, node, why, peer, false);
  cooldown_[node] = MonoMs() + options_.channel.cooldown_ms;
}

Status AgentHub::RebuildGpuOwners() {
  GP_ASSIGN_OR_RETURN(auto nodes, pool_.ListNodes());
  std::map<std::string, std::vector<std::string>> by_node;
  for (const NodeStatus& n : nodes) {
    if (n.node.state == NodeState::kLeft) continue;
    GP_ASSIGN_OR_RETURN(auto cred, auth_.GetAgentCredential(n.node.name));
    if (cred && cred->revoked) continue;
    auto& uuids = by_node[n.node.name];
    for (const GpuInfo& g : n.node.gpus) uuids.push_back(g.uuid);
  }
  gpu_owners_.Reset(by_node);
  gpu_owners_built_ = true;
  return Status::Ok();
}

Status AgentHub::CheckClaims(const proto::Hello& hello) {
  GP_RETURN_IF_ERROR(CheckHelloClaims(hello, options_.claims));
  if (!gpu_owners_built_) GP_RETURN_IF_ERROR(RebuildGpuOwners());
  auto conflict = gpu_owners_.Conflict(hello.node_name, hello.gpus);
  if (conflict) {
    // Its holder may have left or been revoked since: look again.
    GP_RETURN_IF_ERROR(RebuildGpuOwners());
    conflict = gpu_owners_.Conflict(hello.node_name, hello.gpus);
  }
  if (!conflict) return Status::Ok();
  const auto& [i, holder] = *conflict;
  return Status::InvalidArgument(
      "gpus[" + std::to_string(i) + "].uuid: " + hello.gpus[i].uuid + " is node " + holder +
      "'s GPU; a GPU that moved is released when its old node leaves (`gpupool agent leave`) or "
      "is revoked (`gpupool admin node revoke " +
      holder + "`)");
}

void AgentHub::Disconnect(const std::string& node_name, const std::string& why) {
  auto sessions = by_node_;
  for (auto& [id, weak] : sessions) {
    auto s = weak.lock();
    if (s && s->node_name() == node_name) s->Fail(why);
  }
}

Result<std::shared_ptr<TunnelStream>> AgentHub::OpenTunnel(const std::string& node_id,
                                                           const proto::TunnelTarget& target,
                                                           TunnelStream::Events events) {
  auto it = by_node_.find(node_id);
  std::shared_ptr<Session> s = it == by_node_.end() ? nullptr : it->second.lock();
  if (!s || !s->ready()) {
    return Status::Unavailable("the agent of the job's node is not connected; try again later");
  }
  uint32_t id = s->Open(target, std::move(events));
  return std::shared_ptr<TunnelStream>(std::make_shared<Session::Stream>(s, id));
}

void AgentHub::OutboxReady(const std::string& node_id) {
  auto it = by_node_.find(node_id);
  if (it == by_node_.end()) return;
  if (auto s = it->second.lock()) s->ScheduleFlush();
}

void AgentHub::CloseAll() {
  auto sessions = by_node_;
  for (auto& [id, weak] : sessions) {
    if (auto s = weak.lock()) s->Fail("server shutting down");
  }
}

}  // namespace gpupool::server
