// WsSession: one WebSocket connection, server side (after an accepted
// upgrade) or client side (WsConnect), over TCP or TLS. One read is always
// outstanding while the connection lives, unless the handler paused reading;
// writes go through a queue, one frame at a time.
//
// Ownership: the session is owned by its pending operations, and while
// reading is paused with no read pending, by itself (hold_). The handler
// gets a WsHandle that holds only a weak_ptr, so the handler may keep its
// connection without forming a cycle with the session that owns the handler.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include <chrono>
#include <deque>
#include <optional>
#include <type_traits>

#include "common/log.h"
#include "net/internal.h"
#include "net/tls_internal.h"
#include "net/websocket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace gpupool::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using tcp = boost::asio::ip::tcp;
using Millis = std::chrono::milliseconds;

constexpr Millis kCloseHandshakeTimeout{30'000};

// Over `Next`: beast::tcp_stream (ws) or internal::TlsStream (wss). The two
// differ only in the client's TLS handshake before the WebSocket one.
template <typename Next>
class WsSession : public internal::Session, public std::enable_shared_from_this<WsSession<Next>> {
  static constexpr bool kTls = std::is_same_v<Next, internal::TlsStream>;

 public:
  // Server side: takes over an accepted (and, for TLS, handshaken) stream.
  WsSession(std::shared_ptr<internal::ServerCore> core, Next stream,
            std::shared_ptr<WsHandler> handler, std::string peer)
      : core_(std::move(core)),
        ws_(std::move(stream)),
        resolver_(ws_.get_executor()),
        timer_(ws_.get_executor()),
        handler_(std::move(handler)),
        peer_(std::move(peer)) {}

  // Client side, plain.
  WsSession(asio::io_context& ioc, std::shared_ptr<WsHandler> handler,
            WsClientOptions options) requires(!kTls)
      : ws_(ioc),
        resolver_(ioc),
        timer_(ioc),
        handler_(std::move(handler)),
        options_(std::move(options)) {}

  // Client side, TLS: `tls` stays alive as long as the session.
  WsSession(asio::io_context& ioc, std::shared_ptr<internal::ClientTls> tls,
            std::shared_ptr<WsHandler> handler, WsClientOptions options) requires(kTls)
      : tls_(std::move(tls)),
        ws_(ioc, tls_->context()),
        resolver_(ioc),
        timer_(ioc),
        handler_(std::move(handler)),
        options_(std::move(options)) {}

  ~WsSession() override {
    if (core_) core_->sessions.erase(this);
  }

  // ---- server side ----

  void Accept(internal::BeastRequest req) {
    core_->sessions.emplace(this, this->weak_from_this());
    local_ = LocalAddress();
    upgrade_request_ = std::move(req);
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "gpupool"); }));
    size_t max = handler_ ? handler_->max_message_bytes() : 0;
    ws_.read_message_max(max > 0 ? max : core_->options.max_body_bytes);
    ws_.async_accept(upgrade_request_, [self = this->shared_from_this()](beast::error_code ec) {
      self->upgrade_request_ = {};
      self->OnHandshake(ec);
    });
  }

  void Shutdown() override {
    if (state_ == State::kClosed) return;
    NotifyClose("server shutting down");
    if (state_ == State::kOpen) {
      RequestClose(websocket::close_code::going_away, "server shutting down");
    } else if (state_ == State::kConnecting) {
      Abort();
    }
  }

  // ---- client side ----

  void Connect(const Url& url) {
    target_ = url.path.empty() ? "/" : url.path;
    host_ = url.host;
    host_header_ = url.host.find(':') == std::string::npos ? url.host : "[" + url.host + "]";
    host_header_ += ":" + std::to_string(url.port);
    timer_.expires_after(Millis(options_.connect_timeout_ms));
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->state_ != State::kConnecting) return;
      self->timed_out_ = true;
      self->resolver_.cancel();
      beast::get_lowest_layer(self->ws_).close();
    });
    resolver_.async_resolve(url.host, std::to_string(url.port),
                            [self = this->shared_from_this()](beast::error_code ec,
                                                              tcp::resolver::results_type results) {
                              self->OnResolved(ec, std::move(results));
                            });
  }

  // ---- WsConnection operations (through WsHandle) ----

  void Send(std::string message, bool binary) {
    if (state_ != State::kOpen || close_requested_) return;
    queued_bytes_ += message.size();
    queue_.push_back({std::move(message), binary});
    if (!writing_) DoWrite();
  }

  void Close(std::string reason) { RequestClose(websocket::close_code::normal, std::move(reason)); }

  void Ping() {
    // Beast allows one ping in flight (beside a write and a close).
    if (state_ != State::kOpen || close_requested_ || ping_pending_) return;
    ping_pending_ = true;
    ws_.async_ping(
        {}, [self = this->shared_from_this()](beast::error_code) { self->ping_pending_ = false; });
  }

  // A message whose read was under way when reading paused is held and
  // delivered on resume. Resuming never calls the handler from inside
  // PauseReading: the read loop restarts from a posted task.
  void PauseReading(bool paused) {
    paused_ = paused;
    if (paused || reading_ || resume_posted_) return;
    if (state_ != State::kOpen && state_ != State::kClosing) return;
    resume_posted_ = true;
    asio::post(ws_.get_executor(), [self = this->shared_from_this()] {
      self->resume_posted_ = false;
      self->Resume();
    });
  }

  // The handler dropped its WsHandle: a paused connection could never
  // resume, so it is closed instead of kept (held by itself) forever.
  void HandleDropped() {
    if (!paused_ || state_ != State::kOpen) return;
    asio::post(ws_.get_executor(), [self = this->shared_from_this()] {
      self->RequestClose(websocket::close_code::going_away, "connection dropped while paused");
    });
  }

  size_t queued_bytes() const { return queued_bytes_; }
  const std::string& peer() const { return peer_; }

 private:
  enum class State { kConnecting, kOpen, kClosing, kClosed };

  void OnResolved(beast::error_code ec, tcp::resolver::results_type results) {
    if (state_ != State::kConnecting) return;
    if (ec) return FailConnect("cannot resolve " + host_header_, ec);
    beast::get_lowest_layer(ws_).async_connect(
        results, [self = this->shared_from_this()](beast::error_code ec, const tcp::endpoint& ep) {
          self->OnConnected(ec, ep);
        });
  }

  void OnConnected(beast::error_code ec, const tcp::endpoint& ep) {
    if (state_ != State::kConnecting) return;
    if (ec) return FailConnect("cannot connect to " + options_.url, ec);
    peer_ = internal::EndpointText(ep);
    local_ = LocalAddress();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ignored);
    if constexpr (kTls) {
      SSL* ssl = ws_.next_layer().native_handle();
      if (Status prepared = tls_->Prepare(ssl, host_); !prepared.ok()) {
        Abort();
        NotifyClose(prepared.message());
        return;
      }
      ws_.next_layer().async_handshake(
          asio::ssl::stream_base::client,
          [self = this->shared_from_this()](beast::error_code ec) { self->OnTlsHandshake(ec); });
    } else {
      StartWsHandshake();
    }
  }

  void OnTlsHandshake(beast::error_code ec) {
    if constexpr (kTls) {
      if (state_ != State::kConnecting) return;
      if (ec && !timed_out_) {
        std::string reason =
            tls_->HandshakeFailure(ws_.next_layer().native_handle(), options_.url, ec);
        Abort();
        NotifyClose(reason);
        return;
      }
      if (ec) return FailConnect("", ec);
      StartWsHandshake();
    }
  }

  void StartWsHandshake() {
    ws_.set_option(websocket::stream_base::decorator(
        [headers = options_.headers](websocket::request_type& req) {
          req.set(http::field::user_agent, "gpupool");
          for (const auto& [name, value] : headers) req.set(name, value);
        }));
    ws_.async_handshake(
        handshake_response_, host_header_, target_,
        [self = this->shared_from_this()](beast::error_code ec) { self->OnHandshake(ec); });
  }

  // The socket's own address; an IPv4 peer reached over a dual-stack
  // socket shows as plain IPv4.
  std::string LocalAddress() {
    beast::error_code ec;
    tcp::endpoint ep = beast::get_lowest_layer(ws_).socket().local_endpoint(ec);
    if (ec) return "";
    asio::ip::address addr = ep.address();
    if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
      addr = asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6());
    }
    return addr.to_string();
  }

  void FailConnect(const std::string& what, beast::error_code ec) {
    std::string reason;
    if (timed_out_) {
      reason = "cannot connect to " + options_.url + ": timed out after " +
               std::to_string(options_.connect_timeout_ms) + " ms";
    } else if (ec == websocket::error::upgrade_declined) {
      const auto& res = handshake_response_;
      reason = "websocket upgrade refused by " + options_.url + ": HTTP " +
               std::to_string(res.result_int()) + " " + std::string(res.reason());
      if (!res.body().empty()) reason += ": " + res.body();
    } else {
      reason = what + ": " + internal::DescribeTlsError(ec);
    }
    Abort();
    NotifyClose(reason);
  }

  // ---- both sides ----

  void OnHandshake(beast::error_code ec) {
    if (state_ != State::kConnecting) return;
    if (ec) {
      if (core_) {
        Abort();
        NotifyClose("websocket handshake failed: " + ec.message());
        return;
      }
      return FailConnect("websocket handshake with " + options_.url + " failed", ec);
    }
    state_ = State::kOpen;
    if (!core_) {
      timer_.cancel();
      handshake_response_ = {};
      websocket::stream_base::timeout timeout{};
      timeout.handshake_timeout = kCloseHandshakeTimeout;
      if (options_.idle_timeout_ms > 0) {
        // Pings at half the idle time, so only a silent peer times out.
        timeout.idle_timeout = Millis(options_.idle_timeout_ms);
        timeout.keep_alive_pings = true;
      } else {
        timeout.idle_timeout = websocket::stream_base::none();
        timeout.keep_alive_pings = false;
      }
      ws_.set_option(timeout);
    }
    ws_.text(true);
    // Whole messages as single frames, written in 64 KiB pieces: Beast's
    // default (4 KiB fragments, each its own TLS record and syscall) held a
    // tunnel to about 110 MB/s.
    ws_.auto_fragment(false);
    ws_.write_buffer_bytes(64 * 1024);
    // Keep unsent bytes in our queue rather than the kernel's: a sender
    // that limits queued_bytes() (tunnel frames behind the agent channel's
    // messages) then bounds what a new message waits behind.
    {
      int lowat = 128 * 1024;
      int fd = beast::get_lowest_layer(ws_).socket().native_handle();
      (void)::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
    }
    // Called from within reads, which keep the session alive.
    ws_.control_callback([this](websocket::frame_type kind, beast::string_view) {
      if (kind != websocket::frame_type::pong) return;
      if (auto h = handler_) h->OnPong();
    });
    if (auto h = handler_) {
      h->OnOpen(std::make_shared<WsHandle>(this->weak_from_this(), peer_, local_));
    }
    ReadOrHold();
  }

  // Starts the next read, or, while paused, keeps the session alive without
  // one. Called only when no read is pending.
  void ReadOrHold() {
    if (state_ != State::kOpen && state_ != State::kClosing) return;
    if (paused_) {
      hold_ = this->shared_from_this();
      return;
    }
    hold_.reset();  // the caller holds a reference: `this` stays alive
    DoRead();
  }

  // Reading was resumed: delivers the held message, then reads on.
  void Resume() {
    if (paused_ || state_ == State::kClosed || reading_) return;
    if (held_) {
      Incoming message = std::move(*held_);
      held_.reset();
      Deliver(std::move(message));
      if (state_ == State::kClosed) return;
    }
    ReadOrHold();
  }

  void DoRead() {
    reading_ = true;
    ws_.async_read(buffer_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->OnRead(ec);
    });
  }

  struct Incoming {
    std::string bytes;
    bool binary = false;
  };

  void Deliver(Incoming message) {
    auto h = handler_;
    if (!h) return;
    if (message.binary) {
      h->OnBinary(std::move(message.bytes));
    } else {
      h->OnMessage(std::move(message.bytes));
    }
  }

  void OnRead(beast::error_code ec) {
    reading_ = false;
    if (ec) {
      std::string reason;
      if (close_requested_) {
        reason = close_reason_;
      } else if (ec == websocket::error::closed) {
        const auto& cr = ws_.reason();
        reason = cr.reason.empty() ? "closed by peer (code " + std::to_string(cr.code) + ")"
                                   : std::string(cr.reason.data(), cr.reason.size());
      } else if (ec == beast::error::timeout) {
        reason = "timed out";
      } else if (ec == websocket::error::message_too_big) {
        reason = std::string(kMessageTooBig) + ": over the limit of " +
                 std::to_string(ws_.read_message_max()) + " bytes";
      } else {
        // Neither end closed it: the connection broke (the peer died, the
        // network went).
        reason = "connection lost: " +
                 internal::DescribeTlsError(
                     ec, core_ ? internal::TlsSide::kServer : internal::TlsSide::kClient);
      }
      Abort();
      NotifyClose(reason);
      return;
    }
    if (handler_) {
      Incoming message{beast::buffers_to_string(buffer_.data()), ws_.got_binary()};
      buffer_.consume(buffer_.size());
      if (paused_) {
        held_ = std::move(message);  // paused while this read was under way
      } else {
        Deliver(std::move(message));
      }
    } else {
      buffer_.consume(buffer_.size());  // closing: drain until the close frame
    }
    if (buffer_.capacity() > (1u << 20)) buffer_.shrink_to_fit();
    if (state_ != State::kClosed) ReadOrHold();
  }

  void DoWrite() {
    writing_ = true;
    ws_.binary(queue_.front().binary);
    ws_.async_write(
        asio::buffer(queue_.front().bytes),
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    writing_ = false;
    if (!queue_.empty()) {
      queued_bytes_ -= queue_.front().bytes.size();
      queue_.pop_front();
    }
    if (ec || state_ == State::kClosed) {
      queue_.clear();
      queued_bytes_ = 0;
      if (ec && state_ != State::kClosed) {
        Abort();
        // A pending read fails and reports the close; without one (paused)
        // report it here.
        if (!reading_) NotifyClose(internal::DescribeTlsError(ec, Side()));
      }
      return;
    }
    // The next write starts before OnSent, so a Send from inside OnSent
    // only queues.
    if (!queue_.empty()) DoWrite();
    if (state_ == State::kOpen && !close_requested_) {
      if (auto h = handler_) h->OnSent();
    }
    if (!writing_ && close_requested_ && state_ == State::kOpen) DoClose();
  }

  internal::TlsSide Side() const {
    return core_ ? internal::TlsSide::kServer : internal::TlsSide::kClient;
  }

  void RequestClose(websocket::close_code code, std::string reason) {
    if (state_ != State::kOpen || close_requested_) return;
    close_requested_ = true;
    close_code_ = code;
    close_reason_ = reason.empty() ? "closed" : std::move(reason);
    if (!writing_) DoClose();  // else after the queue drains
  }

  void DoClose() {
    state_ = State::kClosing;
    websocket::close_reason cr(close_code_);
    // A close frame's reason holds at most 123 bytes.
    cr.reason.assign(close_reason_.data(), std::min<size_t>(close_reason_.size(), 123));
    ws_.async_close(cr, [self = this->shared_from_this()](beast::error_code ec) {
      if (self->state_ == State::kClosed) return;
      if (!self->reading_) {
        // Paused: no read will report the end, so report it here.
        self->Abort();
        self->NotifyClose(self->close_reason_);
      } else if (ec) {
        self->Abort();  // the pending read fails and reports the close
      }
    });
  }

  // Closes the socket; pending operations complete with errors.
  void Abort() {
    state_ = State::kClosed;
    timer_.cancel();
    resolver_.cancel();
    beast::error_code ignored;
    auto& socket = beast::get_lowest_layer(ws_).socket();
    if (socket.is_open()) {
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      beast::get_lowest_layer(ws_).close();
    }
  }

  // Calls OnClose once and drops the handler: no callback after it. The
  // caller holds a reference to the session (hold_ may be the last other).
  void NotifyClose(const std::string& reason) {
    hold_.reset();
    held_.reset();
    auto h = std::move(handler_);
    handler_ = nullptr;
    if (h) h->OnClose(reason);
  }

  class WsHandle : public WsConnection {
   public:
    WsHandle(std::weak_ptr<WsSession> session, std::string peer, std::string local)
        : session_(std::move(session)), peer_(std::move(peer)), local_(std::move(local)) {}
    ~WsHandle() override {
      if (auto s = session_.lock()) s->HandleDropped();
    }
    void Send(std::string text) override {
      if (auto s = session_.lock()) s->Send(std::move(text), false);
    }
    void SendBinary(std::string bytes) override {
      if (auto s = session_.lock()) s->Send(std::move(bytes), true);
    }
    void Close(std::string reason) override {
      if (auto s = session_.lock()) s->Close(std::move(reason));
    }
    void Ping() override {
      if (auto s = session_.lock()) s->Ping();
    }
    void PauseReading(bool paused) override {
      if (auto s = session_.lock()) s->PauseReading(paused);
    }
    size_t queued_bytes() const override {
      auto s = session_.lock();
      return s ? s->queued_bytes() : 0;
    }
    std::string peer() const override { return peer_; }
    std::string local() const override { return local_; }

   private:
    std::weak_ptr<WsSession> session_;
    std::string peer_;
    std::string local_;
  };

  std::shared_ptr<internal::ServerCore> core_;  // null on the client side
  // Client side over TLS only; declared before ws_, whose SSL it configured.
  std::shared_ptr<internal::ClientTls> tls_;
  websocket::stream<Next> ws_;
  tcp::resolver resolver_;
  asio::steady_timer timer_;  // client connect deadline
  std::shared_ptr<WsHandler> handler_;
  std::string peer_;
  std::string local_;  // this end's address, without the port
  WsClientOptions options_;
  internal::BeastRequest upgrade_request_;
  websocket::response_type handshake_response_;
  std::string host_;         // client side: the URL's host
  std::string host_header_;  // ... and port, for the Host header
  std::string target_;
  beast::flat_buffer buffer_;
  struct Outgoing {
    std::string bytes;
    bool binary = false;
  };
  std::deque<Outgoing> queue_;
  size_t queued_bytes_ = 0;
  std::optional<Incoming> held_;     // read while paused, delivered on resume
  std::shared_ptr<WsSession> hold_;  // self, while paused with no read pending
  bool reading_ = false;             // a read is pending
  bool paused_ = false;
  bool resume_posted_ = false;
  bool writing_ = false;
  bool ping_pending_ = false;
  bool close_requested_ = false;
  bool timed_out_ = false;
  websocket::close_code close_code_ = websocket::close_code::normal;
  std::string close_reason_;
  State state_ = State::kConnecting;
};

}  // namespace

void internal::AcceptWebSocket(std::shared_ptr<ServerCore> core, beast::tcp_stream stream,
                               BeastRequest req, std::shared_ptr<WsHandler> handler,
                               std::string peer) {
  std::make_shared<WsSession<beast::tcp_stream>>(std::move(core), std::move(stream),
                                                 std::move(handler), std::move(peer))
      ->Accept(std::move(req));
}

void internal::AcceptWebSocket(std::shared_ptr<ServerCore> core, TlsStream stream, BeastRequest req,
                               std::shared_ptr<WsHandler> handler, std::string peer) {
  std::make_shared<WsSession<TlsStream>>(std::move(core), std::move(stream), std::move(handler),
                                         std::move(peer))
      ->Accept(std::move(req));
}

void WsConnect(EventLoop& loop, WsClientOptions options, std::shared_ptr<WsHandler> handler) {
  asio::io_context& ioc = internal::IoContext(loop);
  auto fail = [&](std::string reason) {
    asio::post(ioc, [handler = std::move(handler), reason = std::move(reason)] {
      handler->OnClose(reason);
    });
  };
  auto url = ParseUrl(options.url);
  if (!url || (url->scheme != "ws" && url->scheme != "wss")) {
    return fail("invalid WebSocket URL \"" + options.url +
                "\" (want ws://host:port/path or wss://host:port/path)");
  }
  if (url->scheme == "wss") {
    auto tls = internal::GetClientTls(options.tls);
    if (!tls.ok()) return fail(tls.status().message());
    std::make_shared<WsSession<internal::TlsStream>>(ioc, *std::move(tls), std::move(handler),
                                                     std::move(options))
        ->Connect(*url);
    return;
  }
  std::make_shared<WsSession<beast::tcp_stream>>(ioc, std::move(handler), std::move(options))
      ->Connect(*url);
}

}  // namespace gpupool::net
