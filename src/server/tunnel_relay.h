// TunnelRelay: moves bytes between a user's connection (a WebSocket from
// the CLI, or a browser's connection taken over by the Jupyter proxy) and
// a stream through an agent's channel (AgentHub::OpenTunnel), with
// back-pressure both ways:
//  - bytes from the user that the stream cannot take yet are kept, and the
//    user's connection stops being read until the stream has room;
//  - bytes from the agent are granted back (TunnelStream::Consumed) only
//    once the user's connection has written them, so a slow user holds the
//    agent at one window.
// Whichever side ends first ends the other; the agent's reason (e.g. "the
// session ended: ...") reaches the user. Single-threaded (the loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "server/agent_hub.h"

namespace gpupool::server {

class TunnelRelay : public std::enable_shared_from_this<TunnelRelay> {
 public:
  // The user's side, as the relay drives it.
  struct User {
    std::function<void(std::string bytes)> send;
    std::function<size_t()> queued;  // bytes sent but not yet written
    std::function<void(bool paused)> pause_reading;
    // The stream ended: reason "" for a clean end.
    std::function<void(const std::string& reason)> close;
  };

  // `on_bytes` is told of every byte moved, either way (idle tracking).
  TunnelRelay(User user, std::function<void(size_t)> on_bytes)
      : user_(std::move(user)), on_bytes_(std::move(on_bytes)) {}
  ~TunnelRelay();

  // Opens the stream; Unavailable when the node's agent is not connected.
  Status Start(AgentHub& hub, const std::string& node_id, const proto::TunnelTarget& target);

  // From the user's side.
  void FromUser(std::string_view bytes);
  void UserDrained();  // the user's connection wrote what it had queued
  void UserClosed();

  uint64_t bytes_to_user() const { return bytes_to_user_; }

 private:
  void FromAgent(std::string_view bytes);
  void StreamWritable();
  void StreamClosed(const std::string& reason);
  void Flush();

  User user_;
  std::function<void(size_t)> on_bytes_;
  std::shared_ptr<TunnelStream> stream_;
  std::string pending_;   // from the user, not yet taken by the stream
  size_t ungranted_ = 0;  // sent to the user, not yet granted back to the agent
  bool user_paused_ = false;
  bool user_closed_ = false;
  bool stream_closed_ = false;
  uint64_t bytes_to_user_ = 0;
};

}  // namespace gpupool::server
