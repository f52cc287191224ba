// AgentHub: the server end of the agent channel (see proto/messages.h).
//
// One Session per agent WebSocket. A session waits for `hello`, lets the
// Pool reconcile, answers `welcome`, then applies the agent's reliable
// messages in seq order (duplicates skipped, a gap closes the connection so
// the agent resends) and sends the node's outbox, resending what the agent
// had not applied. Acks are coalesced: one ack frame per loop turn.
//
// A newer connection for the same node replaces the older one. Single-
// threaded: everything runs on the server's event loop.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>

#include "net/event_loop.h"
#include "net/http.h"
#include "net/websocket.h"
#include "server/auth.h"
#include "server/pool.h"

namespace gpupool::server {

class AgentHub {
 public:
  // A connection that sends nothing for `silence_limit_ms` (agents heartbeat
  // more often) is closed, so a dead peer whose socket lingers is noticed.
  // `require_client_cert`: agents must also present the client certificate
  // issued at their enrollment (mutual TLS).
  AgentHub(net::EventLoop& loop, Pool& pool, Auth& auth, int64_t silence_limit_ms,
           bool require_client_cert = false)
      : loop_(loop),
        pool_(pool),
        auth_(auth),
        silence_limit_ms_(silence_limit_ms),
        require_client_cert_(require_client_cert) {}

  // For HttpHandlers::on_upgrade of GET /v1/agent/connect.
  std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> Upgrade(
      const net::HttpRequest& req);

  // Pool hook: the node's outbox has new orders.
  void OutboxReady(const std::string& node_id);

  size_t sessions() const { return by_node_.size(); }
  // Closes every session (server shutdown).
  void CloseAll();
  // Closes the session of node `node_name`, if it is connected.
  void Disconnect(const std::string& node_name, const std::string& why);

 private:
  class Session;
  friend class Session;

  net::EventLoop& loop_;
  Pool& pool_;
  Auth& auth_;
  int64_t silence_limit_ms_;
  bool require_client_cert_;
  std::map<std::string, std::weak_ptr<Session>> by_node_;
};

}  // namespace gpupool::server
