// AgentHub: the server end of the agent channel (see proto/messages.h).
//
// One Session per agent WebSocket. A session waits for `hello`, lets the
// Pool reconcile, answers `welcome`, then applies the agent's reliable
// messages in seq order (duplicates skipped, a gap closes the connection so
// the agent resends) and sends the node's outbox, resending what the agent
// had not applied. Acks are coalesced: one ack frame per loop turn.
//
// Binary messages carry tunnel frames (proto/tunnel_mux.h) of the streams
// the server opens into tasks (OpenTunnel). Frames are sent only while the
// connection's queue is short, so the reliable messages, sent at once,
// wait behind at most that much tunnel data.
//
// A newer connection for the same node replaces the older one. Single-
// threaded: everything runs on the server's event loop.
//
// An agent is held to what its node may do (docs/security.md, "Agents"):
//   - its hello must name its credential's node and make only believable
//     claims (CheckHelloClaims: GPU counts, memory; no GPU UUID listed twice
//     or held by another node, unless that node left or was revoked);
//   - its connection has a budget (ChannelBudget: message sizes, messages
//     and tunnel frames per second; JSON bytes are paced by pausing reads);
// A refusal closes the connection with the reason, is written to the audit
// log (actor "node:NAME", action agent.hello / agent.flood), and keeps the
// node from reconnecting for ChannelLimits::cooldown_ms (429). What the
// Pool refuses of an accepted connection (reports about other nodes'
// attempts) it audits itself. Stage orders sent grant their manifest to
// the node (AgentBlobScope::GrantStage).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>

#include "net/event_loop.h"
#include "net/http.h"
#include "net/websocket.h"
#include "proto/tunnel_target.h"
#include "server/agent_blob_scope.h"
#include "server/agent_limits.h"
#include "server/auth.h"
#include "server/pool.h"

namespace gpupool::server {

// One byte stream through an agent's channel (proto/tunnel_mux.h), opened
// by the server to reach into a task (a session's port, its Jupyter, a
// command run in it). Events run on the loop thread; none follows `closed`.
class TunnelStream {
 public:
  struct Events {
    // Bytes from the agent, in order; call Consumed once they are used (the
    // agent sends at most one window ahead of what was consumed).
    std::function<void(std::string_view bytes)> data;
    // Buffered bytes went out: Write takes more again.
    std::function<void()> writable;
    // The agent ended its side (reason "" for a clean end, else why), or
    // the channel closed.
    std::function<void(const std::string& reason)> closed;
  };
  virtual ~TunnelStream() = default;
  // Queues bytes for the agent; returns how many it took (fewer when the
  // stream's buffer is full: `writable` follows).
  virtual size_t Write(std::string_view bytes) = 0;
  virtual void Consumed(size_t bytes) = 0;
  // Ends our side once the queued bytes are sent.
  virtual void Close() = 0;
};

struct AgentHubOptions {
  ChannelLimits channel;
  NodeClaimLimits claims;
  // Told of every stage order sent, so the node may read what it stages.
  AgentBlobScope* blob_scope = nullptr;
};

class AgentHub {
 public:
  // A connection that sends nothing for `silence_limit_ms` (agents heartbeat
  // more often) is closed, so a dead peer whose socket lingers is noticed.
  // `require_client_cert`: agents must also present the client certificate
  // issued at their enrollment (mutual TLS).
  AgentHub(net::EventLoop& loop, Pool& pool, Auth& auth, int64_t silence_limit_ms,
           bool require_client_cert = false, AgentHubOptions options = {})
      : loop_(loop),
        pool_(pool),
        auth_(auth),
        silence_limit_ms_(silence_limit_ms),
        require_client_cert_(require_client_cert),
        options_(options) {}

  // For HttpHandlers::on_upgrade of GET /v1/agent/connect.
  std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> Upgrade(
      const net::HttpRequest& req);

  // Pool hook: the node's outbox has new orders.
  void OutboxReady(const std::string& node_id);

  // Opens a stream to `target` through node `node_id`'s channel.
  // Unavailable when its agent is not connected.
  Result<std::shared_ptr<TunnelStream>> OpenTunnel(const std::string& node_id,
                                                   const proto::TunnelTarget& target,
                                                   TunnelStream::Events events);

  size_t sessions() const { return by_node_.size(); }
  // Closes every session (server shutdown).
  void CloseAll();
  // Closes the session of node `node_name`, if it is connected.
  void Disconnect(const std::string& node_name, const std::string& why);

 private:
  class Session;
  friend class Session;

  // CheckHelloClaims, then that no GPU of the hello is another node's.
  Status CheckClaims(const proto::Hello& hello);
  // Who holds which GPU: every node's but those that left or were revoked.
  Status RebuildGpuOwners();
  // Refuses node `node`'s connection: audit, cooldown (the caller closes).
  void Refuse(const std::string& node, const std::string& peer, const std::string& action,
              const std::string& why);

  net::EventLoop& loop_;
  Pool& pool_;
  Auth& auth_;
  int64_t silence_limit_ms_;
  bool require_client_cert_;
  AgentHubOptions options_;
  std::map<std::string, std::weak_ptr<Session>> by_node_;
  GpuOwners gpu_owners_;
  bool gpu_owners_built_ = false;
  // Node name -> until when (monotonic ms) it may not reconnect.
  std::map<std::string, int64_t> cooldown_;
};

}  // namespace gpupool::server
