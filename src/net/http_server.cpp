// HttpServer: an accept loop and one HttpSession per connection.
//
// Session life cycle: [TLS handshake ->] read one request -> [on_takeover
// may take the stream: done] -> call on_request
// -> wait for the Responder (reading from the client so a vanished client is
// noticed) -> write the response -> read the next request or close. Reading
// the next request only after the response is written keeps pipelined
// responses in order. HttpSession is a template over its stream (plain TCP
// or TLS over TCP) so both share every step but the handshake and the close.
// Sessions are owned by their pending operations (shared_ptr); Responders
// and the server's registry hold weak_ptrs only.
#include "net/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <cctype>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <vector>

#include "common/log.h"
#include "net/internal.h"
#include "net/tls_internal.h"

namespace gpupool::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using internal::BeastRequest;
using internal::ServerCore;
using tcp = boost::asio::ip::tcp;

// ---- Responder ----------------------------------------------------------

Responder::Responder(std::function<void(HttpResponse)> send) : send_(std::move(send)) {}

Responder::Responder(std::function<void(HttpResponse)> send, std::function<bool()> alive)
    : send_(std::move(send)), alive_(std::move(alive)) {}

Responder::~Responder() {
  if (send_) {
    auto send = std::exchange(send_, nullptr);
    send(internal::ErrorResponse(500, "the request was dropped without a response"));
  }
}

Responder::Responder(Responder&& other) noexcept
    : send_(std::exchange(other.send_, nullptr)), alive_(std::exchange(other.alive_, nullptr)) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    Responder dropped(std::move(*this));  // answers 500 if it was pending
    send_ = std::exchange(other.send_, nullptr);
    alive_ = std::exchange(other.alive_, nullptr);
  }
  return *this;
}

void Responder::operator()(HttpResponse response) {
  if (!send_) return;
  auto send = std::exchange(send_, nullptr);
  alive_ = nullptr;
  send(std::move(response));
}

bool Responder::pending() const { return send_ && (!alive_ || alive_()); }

void Responder::Observe(std::function<void(const HttpResponse&)> observer) {
  if (!send_) return;
  send_ = [observer = std::move(observer), send = std::move(send_)](HttpResponse r) {
    observer(r);
    send(std::move(r));
  };
}

namespace internal {

asio::io_context& IoContext(EventLoop& loop) {
  return *static_cast<asio::io_context*>(loop.native_handle());
}

std::string EndpointText(const tcp::endpoint& ep) {
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

Result<asio::ip::address> ListenAddress(asio::io_context& ioc, const std::string& host) {
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (!ec) return address;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, "", ec);
  if (ec || results.empty()) {
    return Status::InvalidArgument("cannot resolve listen host \"" + host +
                                   "\": " + (ec ? ec.message() : "no address"));
  }
  return results.begin()->endpoint().address();
}

Status AcceptLoop::Bind(const tcp::endpoint& ep) {
  beast::error_code ec;
  auto fail = [&](std::string_view what) {
    return Status::Unavailable("cannot listen on " + EndpointText(ep) + ": " + std::string(what) +
                               ": " + ec.message());
  };
  acceptor_.open(ep.protocol(), ec);
  if (ec) return fail("open");
  acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return fail("setsockopt");
  acceptor_.bind(ep, ec);
  if (ec) return fail("bind");
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  port_ = acceptor_.local_endpoint(ec).port();
  return Status::Ok();
}

void AcceptLoop::Start() {
  acceptor_.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    self->OnAccept(ec, std::move(socket));
  });
}

void AcceptLoop::Close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
}

void AcceptLoop::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (closed_) return;
  if (ec) {
    GP_LOG(kWarn) << "accept failed: " << ec.message();
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
      if (!wait_ec && !self->closed_) self->Start();
    });
    return;
  }
  beast::error_code ignored;
  auto remote = socket.remote_endpoint(ignored);
  std::string peer = ignored ? std::string("unknown") : EndpointText(remote);
  on_socket_(std::move(socket), std::move(peer));
  if (!closed_) Start();
}

HttpResponse ErrorResponse(int status, std::string_view message) {
  // The body every gpupool error has (server/http_errors.h), so clients read
  // the code and message of answers made here too.
  std::string_view code = status == 400                    ? "INVALID_ARGUMENT"
                          : status == 413 || status == 431 ? "RESOURCE_EXHAUSTED"
                          : status == 503                  ? "UNAVAILABLE"
                                                           : "INTERNAL";
  HttpResponse r;
  r.status = status;
  r.body = nlohmann::json{{"error", {{"code", code}, {"message", message}}}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

}  // namespace internal

namespace {

// Now as an IMF-fixdate: "Sat, 28 Nov 2026 12:00:00 GMT".
std::string HttpDate() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

using Millis = std::chrono::milliseconds;

// What a connection knows about its TLS peer, copied into each request.
struct TlsIdentity {
  bool tls = false;
  // Set when the client's certificate verified:
  std::string fingerprint;
  std::string common_name;
  std::string serial;
};

HttpRequest ToHttpRequest(BeastRequest& req, const std::string& peer, const TlsIdentity& identity) {
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  std::string_view target = r.target;
  size_t q = target.find('?');
  r.path = UrlDecode(target.substr(0, q), false);
  if (q != std::string_view::npos) {
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view pair = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (pair.empty()) continue;
      size_t eq = pair.find('=');
      std::string key = UrlDecode(pair.substr(0, eq), true);
      std::string value =
          eq == std::string_view::npos ? std::string() : UrlDecode(pair.substr(eq + 1), true);
      r.query.insert_or_assign(std::move(key), std::move(value));
    }
  }
  for (const auto& field : req) {
    auto [it, inserted] =
        r.headers.emplace(AsciiLower(field.name_string()), std::string(field.value()));
    if (!inserted) {
      it->second += ", ";
      it->second.append(field.value().data(), field.value().size());
    }
  }
  r.body = std::move(req.body());
  r.peer = peer;
  r.tls = identity.tls;
  r.client_cert_fingerprint = identity.fingerprint;
  r.client_cert_cn = identity.common_name;
  r.client_cert_serial = identity.serial;
  return r;
}

bool IsHttpParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
// Reads that wait for a next request or watch a client while its request is
// handled: small, as every connection holds its buffer.
constexpr size_t kReadChunk = 1024;
// Beast reads at most the buffer's free capacity (at least 512 bytes) per
// call: a body of more than this gets a buffer this large, so it arrives in
// large reads instead of a syscall per kilobyte.
constexpr size_t kBodyReadBuffer = 64 * 1024;
constexpr Millis kLingerTimeout{2000};

// One HTTP connection over `Stream`: beast::tcp_stream (plain) or
// internal::TlsStream. The two differ only in the TLS handshake at the start,
// the TLS close at the end, and the lowest layer (timeouts, the socket).
template <typename Stream>
class HttpSession : public internal::Session,
                    public std::enable_shared_from_this<HttpSession<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, internal::TlsStream>;

 public:
  HttpSession(std::shared_ptr<ServerCore> core, Stream stream, std::string peer)
      : core_(std::move(core)), stream_(std::move(stream)), peer_(std::move(peer)) {}

  ~HttpSession() override { core_->sessions.erase(this); }

  void Start() {
    core_->sessions.emplace(this, this->weak_from_this());
    if constexpr (kTls) {
      state_ = State::kHandshake;
      identity_.tls = true;
      Lowest().expires_after(Millis(core_->options.header_timeout_ms));
      stream_.async_handshake(
          asio::ssl::stream_base::server,
          [self = this->shared_from_this()](beast::error_code ec) { self->OnHandshake(ec); });
    } else {
      DoRead(/*first=*/true);
    }
  }

  void Shutdown() override {
    if (state_ == State::kClosed || state_ == State::kUpgraded) return;
    Close();
  }

 private:
  // kUpgraded: the stream went to a WebSocket or a takeover handler.
  enum class State { kHandshake, kReading, kHandling, kWriting, kLingering, kUpgraded, kClosed };

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }
  Millis IdleTimeout() const { return Millis(core_->options.idle_timeout_ms); }

  void OnHandshake(beast::error_code ec) {
    if (state_ != State::kHandshake) return;
    if (core_->closed) return Close();
    if (ec) {
      if (ec != beast::error::timeout && ec != asio::error::eof) {
        GP_LOG(kInfo) << "TLS handshake with " << peer_
                      << " failed: " << internal::DescribeTlsError(ec, internal::TlsSide::kServer);
      }
      return LingeringClose();  // the alert is out; let the client read it
    }
    if constexpr (kTls) {
      internal::ClientCertCheck cert = internal::CheckClientCert(stream_.native_handle());
      if (cert.verified) {
        identity_.fingerprint = std::move(cert.fingerprint);
        identity_.common_name = std::move(cert.common_name);
        identity_.serial = std::move(cert.serial);
      } else if (cert.presented) {
        GP_LOG(kInfo) << "the client certificate of " << peer_
                      << " does not verify, serving without identity: " << cert.problem;
      }
    }
    DoRead(/*first=*/true);
  }

  // The first request of a connection, and one whose bytes are already
  // buffered, must arrive within the header timeout; otherwise the client
  // may stay idle for the idle timeout before it starts the next request.
  void DoRead(bool first) {
    state_ = State::kReading;
    head_ = false;
    parser_.emplace();
    parser_->body_limit(core_->options.max_body_bytes);
    parser_->header_limit(kMaxHeaderBytes);
    if (first || buffer_.size() > 0) return ReadHeader();
    if (buffer_.capacity() > kReadChunk) buffer_.shrink_to_fit();  // after a large body
    Lowest().expires_after(IdleTimeout());
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              if (self->state_ != State::kReading) return;
                              self->buffer_.commit(n);
                              if (ec) return self->OnRead(ec);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    Lowest().expires_after(Millis(core_->options.header_timeout_ms));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Clients such as curl send "Expect: 100-continue" before a body and wait
  // (a second, for curl) for the go-ahead.
  void OnHeader(beast::error_code ec) {
    if (state_ != State::kReading) return;
    if (ec || parser_->is_done()) return OnRead(ec);
    Lowest().expires_after(Millis(core_->options.body_timeout_ms));
    if (parser_->content_length().value_or(kBodyReadBuffer) >= kBodyReadBuffer) {
      buffer_.reserve(kBodyReadBuffer);  // also for chunked bodies
    }
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = this->shared_from_this()](beast::error_code ec, size_t) {
                          if (ec) return self->OnRead(ec);
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    if (state_ != State::kReading) return;
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (state_ != State::kReading) return;
    if (core_->closed) return Close();
    if (ec == http::error::body_limit) {
      std::string setting = core_->options.max_body_setting.empty()
                                ? ""
                                : " (" + core_->options.max_body_setting + ")";
      return SendErrorAndClose(413, "request body exceeds " +
                                        std::to_string(core_->options.max_body_bytes) +
                                        " bytes, the server's limit" + setting);
    }
    if (ec == http::error::header_limit) return SendErrorAndClose(431, "request header too large");
    if (ec && ec != http::error::end_of_stream && ec != http::error::partial_message &&
        IsHttpParseError(ec)) {
      return SendErrorAndClose(400, "malformed request: " + ec.message());
    }
    if (ec) return Close();  // end of stream, idle/header/body timeout, reset, ...

    BeastRequest req = parser_->release();
    parser_.reset();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    HttpRequest request = ToHttpRequest(req, peer_, identity_);
    if (core_->handlers.on_takeover && TakeOver(request)) return;
    if (boost::beast::websocket::is_upgrade(req)) return HandleUpgrade(std::move(req), request);

    state_ = State::kHandling;
    uint64_t seq = ++seq_;
    Lowest().expires_never();  // the handler may take its time (long poll)
    std::weak_ptr<HttpSession> weak = this->weak_from_this();
    Responder responder(
        [weak, seq, ex = core_->ioc->get_executor()](HttpResponse response) {
          // Sessions die with the io_context, so an expired session also
          // covers a Responder that outlives the loop.
          if (weak.expired()) return;
          if (ex.running_in_this_thread()) {
            if (auto self = weak.lock()) self->Respond(seq, std::move(response));
            return;
          }
          // Another thread: hand the response to the loop thread.
          asio::post(ex, [weak, seq, response = std::move(response)]() mutable {
            if (auto self = weak.lock()) self->Respond(seq, std::move(response));
          });
        },
        [weak, seq, ex = core_->ioc->get_executor()] {
          if (!ex.running_in_this_thread()) return !weak.expired();
          auto self = weak.lock();
          return self && self->state_ == State::kHandling && self->seq_ == seq;
        });
    try {
      core_->handlers.on_request(std::move(request), std::move(responder));
    } catch (const std::exception& e) {
      GP_LOG(kError) << "http handler threw: " << e.what();
      Respond(seq, internal::ErrorResponse(500, "internal error"));
    }
    if (state_ == State::kHandling && seq_ == seq) WatchPeer(seq);
  }

  // While the handler works, read from the client to notice that it goes
  // away, so the Responder stops being pending and the session is freed.
  // Bytes that arrive (a pipelined request) stay in buffer_ for the next
  // read. Respond() cancels this read and writes once it has completed, so
  // one read and one write never overlap; with TLS the read goes through
  // the TLS layer, which sees a close_notify as the end of the stream.
  void WatchPeer(uint64_t seq) {
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = this->shared_from_this(), seq](beast::error_code ec, size_t n) {
                              self->watching_ = false;
                              self->buffer_.commit(n);
                              if (self->state_ == State::kClosed) return;
                              bool gone = ec && ec != asio::error::operation_aborted;
                              if (self->response_) {  // Respond() came while the read was pending
                                HttpResponse response = std::move(*self->response_);
                                self->response_.reset();
                                if (gone) return self->Close();
                                return self->WriteResponse(std::move(response), self->keep_alive_);
                              }
                              if (self->state_ != State::kHandling || self->seq_ != seq) return;
                              if (!ec) return;  // a pipelined request: read after this response
                              if (gone)
                                self->Close();  // end of stream or error: the client is gone
                            });
  }

  void Respond(uint64_t seq, HttpResponse response) {
    if (state_ != State::kHandling || seq != seq_) return;
    if (watching_) {
      state_ = State::kWriting;
      response_ = std::move(response);
      Lowest().cancel();  // WatchPeer's handler writes the response
      return;
    }
    WriteResponse(std::move(response), keep_alive_);
  }

  void WriteResponse(HttpResponse response, bool keep_alive) {
    state_ = State::kWriting;
    res_ = {};
    res_.version(version_);
    res_.result(static_cast<unsigned>(response.status));
    res_.set(http::field::server, "gpupool");
    res_.set(http::field::date, HttpDate());  // RFC 9110 8.6.1; clients compare clocks with it
    bool no_body = response.status < 200 || response.status == 204 || response.status == 304;
    if (!no_body && !response.content_type.empty()) {
      res_.set(http::field::content_type, response.content_type);
    }
    for (auto& [name, value] : response.headers) res_.set(name, value);
    if (!no_body) res_.body() = std::move(response.body);
    res_.keep_alive(keep_alive);
    res_.prepare_payload();
    if (head_) res_.body().clear();  // keeps the Content-Length of the GET answer
    Lowest().expires_after(IdleTimeout());
    http::async_write(
        stream_, res_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (state_ != State::kWriting) return;
    if (ec) return Close();
    if (core_->closed) return Close();
    if (!res_.keep_alive()) return LingeringClose();
    res_ = {};
    DoRead(/*first=*/false);
  }

  void SendErrorAndClose(int status, const std::string& message) {
    if (version_ == 0) version_ = 11;
    WriteResponse(internal::ErrorResponse(status, message), false);
  }

  // Closes our side (with a TLS close_notify first), then discards what the
  // client still sends, so that a client still writing (e.g. a body over the
  // limit) reads our response (or TLS alert) instead of a connection reset.
  void LingeringClose() {
    state_ = State::kLingering;
    Lowest().expires_after(kLingerTimeout);
    if constexpr (kTls) {
      if (SSL_is_init_finished(stream_.native_handle())) {
        stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
          if (self->state_ == State::kLingering) self->DrainInput();
        });
        return;
      }
    }
    DrainInput();
  }

  // Reads below TLS: after the close, the bytes only need to go.
  void DrainInput() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().async_read_some(buffer_.prepare(kReadChunk),
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (self->state_ != State::kLingering) return;
                               if (ec) return self->Close();
                               self->DrainInput();
                             });
  }

  void HandleUpgrade(BeastRequest req, const HttpRequest& request) {
    keep_alive_ = false;
    if (!core_->handlers.on_upgrade) {
      return SendErrorAndClose(404, "no WebSocket endpoint here");
    }
    std::variant<std::shared_ptr<WsHandler>, HttpResponse> result;
    try {
      result = core_->handlers.on_upgrade(request);
    } catch (const std::exception& e) {
      GP_LOG(kError) << "upgrade handler threw: " << e.what();
      return SendErrorAndClose(500, "internal error");
    }
    if (auto* refusal = std::get_if<HttpResponse>(&result)) {
      return WriteResponse(std::move(*refusal), false);
    }
    auto handler = std::get<std::shared_ptr<WsHandler>>(std::move(result));
    if (!handler) return SendErrorAndClose(500, "no handler for the WebSocket");
    state_ = State::kUpgraded;
    Lowest().expires_never();
    internal::AcceptWebSocket(core_, std::move(stream_), std::move(req), std::move(handler), peer_);
  }

  // Hands the connection to a RawHandler if on_takeover claims the request;
  // false lets the request go on as usual. The bytes read past the request
  // (pipelined, or the start of what follows an upgrade) go with it.
  bool TakeOver(const HttpRequest& request) {
    std::shared_ptr<RawHandler> handler;
    try {
      handler = core_->handlers.on_takeover(request);
    } catch (const std::exception& e) {
      GP_LOG(kError) << "takeover handler threw: " << e.what();
      keep_alive_ = false;
      SendErrorAndClose(500, "internal error");
      return true;
    }
    if (!handler) return false;
    state_ = State::kUpgraded;  // the stream is no longer ours
    Lowest().expires_never();
    std::string leftover = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    internal::TakeOverConnection(core_, std::move(stream_), std::move(leftover), std::move(handler),
                                 peer_);
    return true;
  }

  void Close() {
    state_ = State::kClosed;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  std::shared_ptr<ServerCore> core_;
  Stream stream_;
  std::string peer_;
  TlsIdentity identity_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::optional<HttpResponse> response_;  // to write once WatchPeer's read completes
  State state_ = State::kReading;
  uint64_t seq_ = 0;  // number of the request being handled
  unsigned version_ = 0;
  bool keep_alive_ = false;
  bool head_ = false;      // the request being answered is a HEAD
  bool watching_ = false;  // WatchPeer's read is pending
};

// The server's accept loop, and its shutdown of every connection.
class Listener {
 public:
  Listener(asio::io_context& ioc, std::shared_ptr<ServerCore> core)
      : core_(core),
        accept_(std::make_shared<internal::AcceptLoop>(
            ioc, [core](tcp::socket socket, std::string peer) {
              if (core->closed) return;
              beast::error_code ignored;
              socket.set_option(tcp::no_delay(true), ignored);
              if (core->tls) {
                internal::TlsStream stream(beast::tcp_stream(std::move(socket)), *core->tls);
                std::make_shared<HttpSession<internal::TlsStream>>(core, std::move(stream),
                                                                   std::move(peer))
                    ->Start();
              } else {
                std::make_shared<HttpSession<beast::tcp_stream>>(
                    core, beast::tcp_stream(std::move(socket)), std::move(peer))
                    ->Start();
              }
            })) {}

  Status Bind(const tcp::endpoint& ep) { return accept_->Bind(ep); }
  uint16_t port() const { return accept_->port(); }
  void Start() { accept_->Start(); }

  void Close() {
    if (core_->closed) return;
    core_->closed = true;
    accept_->Close();
    // Copy first: shutting a session down may destroy it, which edits the map.
    std::vector<std::weak_ptr<internal::Session>> sessions;
    sessions.reserve(core_->sessions.size());
    for (auto& [ptr, weak] : core_->sessions) sessions.push_back(weak);
    for (auto& weak : sessions) {
      if (auto s = weak.lock()) s->Shutdown();
    }
  }

 private:
  std::shared_ptr<ServerCore> core_;
  std::shared_ptr<internal::AcceptLoop> accept_;
};

class HttpServerImpl : public HttpServer {
 public:
  explicit HttpServerImpl(std::shared_ptr<Listener> listener) : listener_(std::move(listener)) {}
  ~HttpServerImpl() override { listener_->Close(); }
  uint16_t port() const override { return listener_->port(); }
  void Close() override { listener_->Close(); }

 private:
  std::shared_ptr<Listener> listener_;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(EventLoop& loop, HttpServerOptions options,
                                                      HttpHandlers handlers) {
  asio::io_context& ioc = internal::IoContext(loop);
  GP_ASSIGN_OR_RETURN(asio::ip::address address, internal::ListenAddress(ioc, options.host));
  if (!handlers.on_request) {
    return Status::InvalidArgument("HttpServer needs an on_request handler");
  }
  if (options.header_timeout_ms <= 0 || options.body_timeout_ms <= 0 ||
      options.idle_timeout_ms <= 0) {
    return Status::InvalidArgument("HttpServer timeouts must be positive");
  }
  auto core = std::make_shared<ServerCore>();
  core->ioc = &ioc;
  if (options.tls) {
    GP_ASSIGN_OR_RETURN(core->tls, internal::MakeServerTlsContext(*options.tls));
  }
  core->options = std::move(options);
  core->handlers = std::move(handlers);
  auto listener = std::make_shared<Listener>(ioc, core);
  GP_RETURN_IF_ERROR(listener->Bind(tcp::endpoint(address, core->options.port)));
  listener->Start();
  return std::unique_ptr<HttpServer>(std::make_unique<HttpServerImpl>(std::move(listener)));
}

}  // namespace gpupool::net
