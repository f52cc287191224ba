// HttpServer: an HTTP/1.1 server with WebSocket upgrade, on an EventLoop.
//
// Each connection is a Beast session owned by net/. For every request the
// server calls `on_request(request, responder)` on the loop thread. The
// handler answers by calling the Responder exactly once, now or later (for
// long polls); if it is destroyed without being called, the client gets a
// 500. Keep-alive and pipelining are handled here.
//
// A request with "Upgrade: websocket" goes to `on_upgrade` instead. It returns
// a handler for the new connection, or an HttpResponse to refuse the upgrade
// (e.g. 401). Once upgraded, WebSocket callbacks run on the loop thread.
//
// Takeover: if `on_takeover` is set it sees every request first (with its
// body read; upgrades included). A RawHandler it returns gets the connection
// as a raw byte stream (through TLS when the connection has it): HTTP
// processing of that connection stops for good, none of the timeouts below
// apply to it any more, and the server's Close() ends it too. Used to relay
// a request, or a whole WebSocket, byte for byte to a backend.
//
// With options.tls the server speaks only TLS (1.2 or 1.3) on its port:
// https and wss. The handshake must finish within header_timeout_ms. If
// client_ca_file is set, a client certificate that verifies against it (EKU
// clientAuth) fills HttpRequest::client_cert_* of each request on that
// connection, upgrade requests included. Without require_client_cert a
// client with no certificate, or with one that does not verify (another CA,
// a server certificate, expired), is served without identity (its fields
// stay empty; the server logs why at info level); with require_client_cert
// its handshake fails.
//
// Slow clients: a request's header must arrive in full within
// header_timeout_ms of its first byte (for the first request of a
// connection: of the connection's start, or of the end of its TLS
// handshake), its body within body_timeout_ms after the header; a client
// that is too slow is disconnected. Between requests a keep-alive
// connection may stay idle for idle_timeout_ms. Headers are limited to
// 16 KiB (larger: 431), bodies to max_body_bytes (larger: 413, before the
// handler sees anything; a Content-Length above it is refused before the
// body is read). Answers made here have gpupool's JSON error body
// ({"error": {"code", "message"}}). Slow clients never delay others: all
// I/O is asynchronous on the loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "common/status.h"
#include "net/event_loop.h"
#include "net/http.h"
#include "net/tls.h"
#include "net/websocket.h"

namespace gpupool::net {

// Threading: call (or drop) a Responder on the loop thread, or on another
// thread while the EventLoop is alive; the response is then handed to the
// loop thread. pending() is exact only on the loop thread.
class Responder {
 public:
  explicit Responder(std::function<void(HttpResponse)> send);
  // `alive` tells pending() whether the response can still be delivered
  // (false once the client went away).
  Responder(std::function<void(HttpResponse)> send, std::function<bool()> alive);
  ~Responder();
  Responder(Responder&&) noexcept;
  Responder& operator=(Responder&&) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  // Sends the response. Only the first call has an effect.
  void operator()(HttpResponse response);
  // False once the response was sent (or the connection closed).
  bool pending() const;
  // `observer` sees the response just before it is sent (the 500 of a
  // dropped Responder too). For measuring requests; call before answering.
  void Observe(std::function<void(const HttpResponse&)> observer);

 private:
  std::function<void(HttpResponse)> send_;
  std::function<bool()> alive_;
};

// A raw byte stream: a connection taken over from the HTTP server
// (HttpHandlers::on_takeover), e.g. to relay it to a backend after its first
// request, or a plain TCP connection (net/tcp_stream.h). Bytes written go to
// the peer as they are (through TLS when the connection has it).
//
// Threading and lifetime: call only on the loop thread. The connection
// holds its handler; the RawConnection handle holds the connection weakly,
// so a handler may keep it without a cycle, and calls on it after OnClose
// do nothing. Dropping the handle while reading is paused closes the
// connection (nothing could resume it). There is no half-close: the peer's
// end of stream closes the connection (OnClose), queued bytes are dropped.
class RawConnection {
 public:
  virtual ~RawConnection() = default;
  // Queues bytes for the peer; written in order, several queued writes in
  // one system call. Ignored after Close().
  virtual void Write(std::string bytes) = 0;
  // Bytes queued but not yet written.
  virtual size_t queued_bytes() const = 0;
  // Flow control: while paused, OnData is not called and nothing is read
  // (TCP back-pressure reaches the peer); bytes read before the pause are
  // held, none is lost or repeated. Resuming delivers from a posted task,
  // never from inside PauseReading.
  virtual void PauseReading(bool paused) = 0;
  // Closes once the queued bytes are written (a clean end for the peer:
  // TLS close_notify, or a TCP FIN, then up to 2 s for the peer's end);
  // no OnData after it; OnClose("closed") follows.
  virtual void Close() = 0;
  virtual std::string peer() const = 0;  // "127.0.0.1:53422"
};

class RawHandler {
 public:
  virtual ~RawHandler() = default;
  // The connection is the handler's. Bytes the client sent after the
  // request (already read from the socket) arrive next through OnData.
  virtual void OnOpen(std::shared_ptr<RawConnection> conn) = 0;
  // A chunk of bytes (up to 64 KiB); the view is valid during the call only.
  virtual void OnData(std::string_view bytes) = 0;
  // Queued bytes were written (queued_bytes() dropped); Write and Close
  // may be called from here.
  virtual void OnSent() {}
  // The peer closed ("closed by peer"), an I/O error, Close() completed
  // ("closed"), or the server shut down ("server shutting down"); exactly
  // once, and nothing follows.
  virtual void OnClose(std::string reason) = 0;
};

struct HttpHandlers {
  std::function<void(HttpRequest, Responder)> on_request;
  // Optional. Consulted first for every request (upgrades included), with
  // its body read: a handler takes over the connection, which leaves HTTP
  // processing for good (the handler sees the request and answers it
  // itself, e.g. by relaying it); nullptr lets the request go to
  // on_upgrade or on_request as usual.
  std::function<std::shared_ptr<RawHandler>(const HttpRequest&)> on_takeover;
  std::function<std::variant<std::shared_ptr<WsHandler>, HttpResponse>(const HttpRequest&)>
      on_upgrade;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0 = pick a free port
  size_t max_body_bytes = 16 << 20;
  // Named in the 413 answer to a larger body ("--max-request-body"), so the
  // client learns what to ask the operator for; may be empty.
  std::string max_body_setting;
  int64_t idle_timeout_ms = 120'000;   // close idle keep-alive connections
  std::optional<TlsServerConfig> tls;  // nullopt: plain HTTP
  int64_t header_timeout_ms = 10'000;  // a request header must arrive in full within this
  int64_t body_timeout_ms = 60'000;    // ...and its body within this after the header
};

class HttpServer {
 public:
  // Binds and starts accepting on `loop`. The server must be destroyed (or
  // Close()d) on the loop thread before the loop is destroyed. With
  // options.tls, the certificate files are read now: InvalidArgument names
  // a missing or invalid file.
  static Result<std::unique_ptr<HttpServer>> Start(EventLoop& loop, HttpServerOptions options,
                                                   HttpHandlers handlers);
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;
  // Stops accepting and closes every connection. Each open WebSocket's or
  // taken-over connection's handler gets OnClose("server shutting down")
  // before Close() returns;
  // afterwards no handler of this server is called again.
  virtual void Close() = 0;
};

}  // namespace gpupool::net
