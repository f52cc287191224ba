// WebSocket connections (text frames carrying JSON), server and client side,
// behind small interfaces so code outside net/ needs no Beast.
//
// All callbacks run on the EventLoop thread. Send() queues the frame and
// returns at once; frames are written in order. After OnClose no further
// callback arrives for that connection.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "net/event_loop.h"
#include "net/tls.h"

namespace gpupool::net {

class WsConnection {
 public:
  virtual ~WsConnection() = default;
  virtual void Send(std::string text) = 0;
  // A binary message (tunnel frames); queued with the text ones, in order.
  virtual void SendBinary(std::string bytes) = 0;
  // Starts a close handshake; OnClose follows.
  virtual void Close(std::string reason) = 0;
  // Bytes queued but not yet written; lets senders apply back-pressure.
  virtual size_t queued_bytes() const = 0;
  virtual std::string peer() const = 0;
  // This end's address, without a port ("10.0.0.5", "fd00::5"): the
  // address the peer reached us at, e.g. the interface a client's route to
  // its server leaves through. "" when unknown.
  virtual std::string local() const { return ""; }
  // Sends a ping frame (unless one is still being sent); the peer's pong
  // reaches WsHandler::OnPong. Shows that the peer still reads.
  virtual void Ping() {}
  // Flow control: while paused no further message is read (OnMessage and
  // OnBinary stop; TCP back-pressure reaches the peer). A message already
  // being read when reading paused is held and delivered first on resume:
  // none is lost, repeated or reordered. Resuming delivers from a posted
  // task, never from inside PauseReading. Pings and the close handshake are
  // still handled once reading resumes (a peer that closes is noticed only
  // then). Dropping the WsConnection while paused closes the connection.
  virtual void PauseReading(bool paused) = 0;
};

class WsHandler {
 public:
  virtual ~WsHandler() = default;
  virtual void OnOpen(std::shared_ptr<WsConnection> conn) = 0;
  virtual void OnMessage(std::string text) = 0;
  // A binary message arrived; handlers that expect none drop it.
  virtual void OnBinary(std::string /*bytes*/) {}
  // A pong frame arrived (the answer to WsConnection::Ping).
  virtual void OnPong() {}
  // A queued message was written to the socket (queued_bytes() dropped):
  // senders holding data back for back-pressure may queue more. Once per
  // message; not after Close() was called, never after OnClose. Send may be
  // called from here.
  virtual void OnSent() {}
  // `reason` says why: the peer's close reason, an I/O error, or a timeout
  // (kMessageTooBig... when the peer sent a message over the limit).
  // Also called, without OnOpen, when connecting or the handshake fails.
  virtual void OnClose(std::string reason) = 0;
  // Server side: the largest message this handler takes (0: the server's
  // max_body_bytes). A bigger one closes the connection without being read
  // whole.
  virtual size_t max_message_bytes() const { return 0; }
};

// How OnClose's reason starts when the peer's message was over the limit.
inline constexpr std::string_view kMessageTooBig = "message too big";

struct WsClientOptions {
  std::string url;                             // "ws://host:port/path" or "wss://..."
  std::map<std::string, std::string> headers;  // e.g. Authorization
  int64_t connect_timeout_ms = 10'000;
  // The connection is closed when nothing arrives for this long (0 = never).
  int64_t idle_timeout_ms = 0;
  // How to check the server, and the client certificate to present, for
  // wss:// URLs; ignored for ws://. A TLS failure reaches OnClose with its
  // reason, e.g. "TLS: the server's certificate chain does not contain the
  // pinned CA sha256:...; refusing to connect to wss://...".
  TlsClientConfig tls;
};

// Connects asynchronously; the handler gets OnOpen, or OnClose with the error
// if the connection fails. Returns at once. For wss:// the TLS context is
// made (files read) on the first connection with a given options.tls, on
// the calling thread.
void WsConnect(EventLoop& loop, WsClientOptions options, std::shared_ptr<WsHandler> handler);

}  // namespace gpupool::net
