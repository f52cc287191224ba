// HttpServer: an accept loop and one HttpSession per connection.
//
// Session life cycle: read one request -> call on_request -> wait for the
// Responder (watching the socket so a vanished client is noticed) -> write
// the response -> read the next request or close. Reading the next request
// only after the response is written keeps pipelined responses in order.
// Sessions are owned by their pending operations (shared_ptr); Responders
// and the server's registry hold weak_ptrs only.
#include "net/http_server.h"

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <optional>
#include <vector>

#include "common/log.h"
#include "net/internal.h"

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

namespace internal {

asio::io_context& IoContext(EventLoop& loop) {
  return *static_cast<asio::io_context*>(loop.native_handle());
}

std::string EndpointText(const tcp::endpoint& ep) {
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

HttpResponse ErrorResponse(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = "{\"error\":\"";
  for (char c : message) {
    if (c == '"' || c == '\\') {
      r.body.push_back('\\');
      r.body.push_back(c);
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      r.body.push_back(c);
    }
  }
  r.body += "\"}";
  return r;
}

}  // namespace internal

namespace {

using Millis = std::chrono::milliseconds;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

HttpRequest ToHttpRequest(BeastRequest& req, const std::string& peer) {
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
    auto [it, inserted] = r.headers.emplace(Lower(field.name_string()), std::string(field.value()));
    if (!inserted) {
      it->second += ", ";
      it->second.append(field.value().data(), field.value().size());
    }
  }
  r.body = std::move(req.body());
  r.peer = peer;
  return r;
}

bool IsHttpParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

class HttpSession : public internal::Session, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(std::shared_ptr<ServerCore> core, tcp::socket socket, std::string peer)
      : core_(std::move(core)), stream_(std::move(socket)), peer_(std::move(peer)) {}

  ~HttpSession() override { core_->sessions.erase(this); }

  void Start() {
    core_->sessions.emplace(this, weak_from_this());
    DoRead();
  }

  void Shutdown() override {
    if (state_ == State::kClosed || state_ == State::kUpgraded) return;
    Close();
  }

 private:
  enum class State { kReading, kHandling, kWriting, kLingering, kUpgraded, kClosed };

  Millis IdleTimeout() const { return Millis(core_->options.idle_timeout_ms); }

  void DoRead() {
    state_ = State::kReading;
    head_ = false;
    parser_.emplace();
    parser_->body_limit(core_->options.max_body_bytes);
    stream_.expires_after(IdleTimeout());
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Clients such as curl send "Expect: 100-continue" before a body and wait
  // (a second, for curl) for the go-ahead.
  void OnHeader(beast::error_code ec) {
    if (state_ != State::kReading) return;
    if (ec || parser_->is_done()) return OnRead(ec);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code ec, size_t) {
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
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (state_ != State::kReading) return;
    if (core_->closed) return Close();
    if (ec == http::error::body_limit) {
      return SendErrorAndClose(
          413, "request body exceeds " + std::to_string(core_->options.max_body_bytes) + " bytes");
    }
    if (ec == http::error::header_limit) return SendErrorAndClose(431, "request header too large");
    if (ec && ec != http::error::end_of_stream && ec != http::error::partial_message &&
        IsHttpParseError(ec)) {
      return SendErrorAndClose(400, "malformed request: " + ec.message());
    }
    if (ec) return Close();  // end of stream, idle timeout, reset, ...

    BeastRequest req = parser_->release();
    parser_.reset();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    HttpRequest request = ToHttpRequest(req, peer_);
    if (boost::beast::websocket::is_upgrade(req)) return HandleUpgrade(std::move(req), request);

    state_ = State::kHandling;
    uint64_t seq = ++seq_;
    stream_.expires_never();  // the handler may take its time (long poll)
    std::weak_ptr<HttpSession> weak = weak_from_this();
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

  // While the handler works, notice a client that goes away so the
  // Responder stops being pending and the session is freed.
  void WatchPeer(uint64_t seq) {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(),
                                                         seq](beast::error_code ec) {
      if (ec || self->state_ != State::kHandling || self->seq_ != seq) return;
      char c;
      ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;  // a pipelined request: read after this response
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->WatchPeer(seq);
        return;
      }
      self->Close();  // end of stream or error: the client is gone
    });
  }

  void Respond(uint64_t seq, HttpResponse response) {
    if (state_ != State::kHandling || seq != seq_) return;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // stop WatchPeer
    WriteResponse(std::move(response), keep_alive_);
  }

  void WriteResponse(HttpResponse response, bool keep_alive) {
    state_ = State::kWriting;
    res_ = {};
    res_.version(version_);
    res_.result(static_cast<unsigned>(response.status));
    res_.set(http::field::server, "gpupool");
    bool no_body = response.status < 200 || response.status == 204 || response.status == 304;
    if (!no_body && !response.content_type.empty()) {
      res_.set(http::field::content_type, response.content_type);
    }
    for (auto& [name, value] : response.headers) res_.set(name, value);
    if (!no_body) res_.body() = std::move(response.body);
    res_.keep_alive(keep_alive);
    res_.prepare_payload();
    if (head_) res_.body().clear();  // keeps the Content-Length of the GET answer
    stream_.expires_after(IdleTimeout());
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnWrite(ec);
    });
  }

  void OnWrite(beast::error_code ec) {
    if (state_ != State::kWriting) return;
    if (ec) return Close();
    if (core_->closed) return Close();
    if (!res_.keep_alive()) return LingeringClose();
    res_ = {};
    DoRead();
  }

  void SendErrorAndClose(int status, const std::string& message) {
    if (version_ == 0) version_ = 11;
    WriteResponse(internal::ErrorResponse(status, message), false);
  }

  // Half-closes and discards what the client still sends, so that a client
  // still writing (e.g. a body over the limit) reads our response instead of
  // a connection reset.
  void LingeringClose() {
    state_ = State::kLingering;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(Millis(2000));
    DrainInput();
  }

  void DrainInput() {
    stream_.async_read_some(buffer_.prepare(16 * 1024),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
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
    stream_.expires_never();
    internal::AcceptWebSocket(core_, std::move(stream_), std::move(req), std::move(handler), peer_);
  }

  void Close() {
    state_ = State::kClosed;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  std::shared_ptr<ServerCore> core_;
  beast::tcp_stream stream_;
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  State state_ = State::kReading;
  uint64_t seq_ = 0;  // number of the request being handled
  unsigned version_ = 0;
  bool keep_alive_ = false;
  bool head_ = false;  // the request being answered is a HEAD
};

// The acceptor, shared with its pending accept so the HttpServer object can
// be destroyed while an accept is outstanding.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(asio::io_context& ioc, std::shared_ptr<ServerCore> core)
      : core_(std::move(core)), acceptor_(ioc), retry_timer_(ioc) {}

  Status Bind(const tcp::endpoint& ep) {
    beast::error_code ec;
    auto fail = [&](std::string_view what) {
      return Status::Unavailable("cannot listen on " + internal::EndpointText(ep) + ": " +
                                 std::string(what) + ": " + ec.message());
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

  uint16_t port() const { return port_; }

  void DoAccept() {
    acceptor_.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      self->OnAccept(ec, std::move(socket));
    });
  }

  void Close() {
    if (core_->closed) return;
    core_->closed = true;
    beast::error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    // Copy first: shutting a session down may destroy it, which edits the map.
    std::vector<std::weak_ptr<internal::Session>> sessions;
    sessions.reserve(core_->sessions.size());
    for (auto& [ptr, weak] : core_->sessions) sessions.push_back(weak);
    for (auto& weak : sessions) {
      if (auto s = weak.lock()) s->Shutdown();
    }
  }

 private:
  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (core_->closed) return;
    if (ec) {
      // E.g. out of file descriptors: back off instead of spinning.
      GP_LOG(kWarn) << "accept failed: " << ec.message();
      retry_timer_.expires_after(Millis(100));
      retry_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
        if (!wait_ec && !self->core_->closed) self->DoAccept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto remote = socket.remote_endpoint(ignored);
    std::string peer = ignored ? std::string("unknown") : internal::EndpointText(remote);
    std::make_shared<HttpSession>(core_, std::move(socket), std::move(peer))->Start();
    DoAccept();
  }

  std::shared_ptr<ServerCore> core_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  uint16_t port_ = 0;
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
  beast::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) {
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(options.host, "", ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("cannot resolve listen host \"" + options.host +
                                     "\": " + (ec ? ec.message() : "no address"));
    }
    address = results.begin()->endpoint().address();
  }
  if (!handlers.on_request) {
    return Status::InvalidArgument("HttpServer needs an on_request handler");
  }
  auto core = std::make_shared<ServerCore>();
  core->ioc = &ioc;
  core->options = std::move(options);
  core->handlers = std::move(handlers);
  auto listener = std::make_shared<Listener>(ioc, core);
  GP_RETURN_IF_ERROR(listener->Bind(tcp::endpoint(address, core->options.port)));
  listener->DoAccept();
  return std::unique_ptr<HttpServer>(std::make_unique<HttpServerImpl>(std::move(listener)));
}

}  // namespace gpupool::net
