// RawSession: one raw byte stream (RawConnection) over plain TCP or TLS,
// shared by the HTTP server's takeover and by TcpListen/TcpConnect.
//
// Reads go 64 KiB at a time straight into one buffer that OnData sees as a
// view; writes gather the queued strings into one system call. Ownership:
// the session is owned by its pending operations, and while reading is
// paused with no read pending, by itself (hold_). The handler gets a Handle
// holding only a weak_ptr, so it may keep its connection without a cycle.
#include "net/tcp_stream.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <type_traits>
#include <vector>

#include "common/log.h"
#include "net/internal.h"
#include "net/tls_internal.h"

namespace gpupool::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = boost::asio::ip::tcp;
using Millis = std::chrono::milliseconds;

constexpr size_t kRawReadChunk = 64 * 1024;
// Queued strings written by one gather write (writev takes up to 1024).
constexpr size_t kMaxWriteBatch = 64;
// Bounds a clean close: the TLS close_notify exchange, or the wait for the
// peer's end of stream after ours.
constexpr Millis kCloseTimeout{2000};
constexpr Millis kConnectTimeout{10'000};

std::string HostPort(const std::string& host, uint16_t port) {
  std::string text = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return text + ":" + std::to_string(port);
}

// Over `Stream`: beast::tcp_stream or internal::TlsStream, which differ only
// in the clean close (close_notify) and the texts of errors.
template <typename Stream>
class RawSession : public internal::Session,
                   public std::enable_shared_from_this<RawSession<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, internal::TlsStream>;

 public:
  // `core` is null for connections outside an HttpServer.
  RawSession(std::shared_ptr<internal::ServerCore> core, Stream stream,
             std::shared_ptr<RawHandler> handler, std::string peer)
      : core_(std::move(core)),
        stream_(std::move(stream)),
        handler_(std::move(handler)),
        peer_(std::move(peer)),
        read_buffer_(std::make_unique<char[]>(kRawReadChunk)) {}

  ~RawSession() override {
    if (core_) core_->sessions.erase(this);
  }

  // OnOpen, then `leftover`, then the read loop. The caller holds a
  // reference to the session.
  void Start(std::string leftover) {
    if (core_) core_->sessions.emplace(this, this->weak_from_this());
    beast::error_code ignored;
    Lowest().socket().set_option(tcp::no_delay(true), ignored);
    Lowest().expires_never();
    leftover_ = std::move(leftover);
    held_ = leftover_;
    if (auto h = handler_) h->OnOpen(std::make_shared<Handle>(this->weak_from_this(), peer_));
    Pump();
  }

  void Shutdown() override {
    if (state_ == State::kClosed) return;
    Abort();
    NotifyClose("server shutting down");
  }

  // ---- RawConnection operations (through Handle) ----

  void Write(std::string bytes) {
    if (state_ != State::kOpen || close_requested_ || bytes.empty()) return;
    queued_bytes_ += bytes.size();
    queue_.push_back(std::move(bytes));
    if (!writing_) DoWrite();
  }

  size_t queued_bytes() const { return queued_bytes_; }

  void PauseReading(bool paused) {
    paused_ = paused;
    if (paused || reading_ || resume_posted_ || state_ != State::kOpen) return;
    resume_posted_ = true;
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->resume_posted_ = false;
      self->Pump();
    });
  }

  void Close() {
    if (state_ != State::kOpen || close_requested_) return;
    close_requested_ = true;
    held_ = {};
    if (!writing_) BeginClose();  // else once the queue is written
  }

  // The handler dropped its Handle: a paused connection could never resume.
  void HandleDropped() {
    if (!paused_ || state_ != State::kOpen) return;
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Close(); });
  }

 private:
  // kOpen -> (Close() and the queue written) kClosing -> kClosed.
  enum class State { kOpen, kClosing, kClosed };

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // Delivers the held bytes, then starts the next read, unless paused or
  // closed; while paused with no read pending the session holds itself.
  // Called only when no read is pending; the caller holds a reference.
  void Pump() {
    if (state_ != State::kOpen) return;
    if (!paused_ && !held_.empty()) {
      std::string_view data = std::exchange(held_, {});
      if (auto h = handler_; h && !close_requested_) h->OnData(data);
      if (!leftover_.empty()) std::string().swap(leftover_);
      if (state_ != State::kOpen) return;
    }
    if (paused_) {
      hold_ = this->shared_from_this();
      return;
    }
    hold_.reset();
    if (!reading_) DoRead();
  }

  void DoRead() {
    reading_ = true;
    stream_.async_read_some(
        asio::buffer(read_buffer_.get(), kRawReadChunk),
        [self = this->shared_from_this()](beast::error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(beast::error_code ec, size_t n) {
    reading_ = false;
    if (state_ == State::kClosing) return ContinueClose();  // the read was cancelled for it
    if (state_ != State::kOpen) return;
    if (ec) return Fail(ec);
    held_ = std::string_view(read_buffer_.get(), n);
    Pump();
  }

  void DoWrite() {
    writing_ = true;
    size_t count = std::min(queue_.size(), kMaxWriteBatch);
    batch_.clear();
    for (size_t i = 0; i < count; ++i) batch_.emplace_back(queue_[i].data(), queue_[i].size());
    asio::async_write(stream_, batch_,
                      [self = this->shared_from_this(), count](beast::error_code ec, size_t) {
                        self->OnWrite(ec, count);
                      });
  }

  void OnWrite(beast::error_code ec, size_t count) {
    writing_ = false;
    if (state_ != State::kOpen) {
      queue_.clear();  // kept for the write until now (Abort)
      return;
    }
    if (ec) return Fail(ec);
    for (size_t i = 0; i < count; ++i) {
      queued_bytes_ -= queue_.front().size();
      queue_.pop_front();
    }
    // The next write starts before OnSent, so a Write from inside OnSent
    // only queues.
    if (!queue_.empty()) DoWrite();
    if (!close_requested_) {
      if (auto h = handler_) h->OnSent();
    }
    if (close_requested_ && !writing_ && state_ == State::kOpen) BeginClose();
  }

  // Everything queued is written: end our side cleanly, within kCloseTimeout.
  // A pending read is cancelled first (OnRead continues), as a TLS shutdown
  // must not overlap a TLS read.
  void BeginClose() {
    state_ = State::kClosing;
    if (reading_) {
      Lowest().cancel();
      return;
    }
    ContinueClose();
  }

  // No read or write is pending here: the deadline applies to the
  // operations that follow (Beast does not apply it to pending ones).
  void ContinueClose() {
    Lowest().expires_after(kCloseTimeout);
    if constexpr (kTls) {
      // Sends close_notify and waits for the peer's (or its end of stream).
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        if (self->state_ == State::kClosing) self->Finish("closed");
      });
    } else {
      beast::error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      Drain();
    }
  }

  // Discards what the peer still sends until its end of stream, so that
  // closing does not reset a connection whose last bytes the peer has yet
  // to read.
  void Drain() {
    Lowest().async_read_some(asio::buffer(read_buffer_.get(), kRawReadChunk),
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (self->state_ != State::kClosing) return;
                               if (ec) return self->Finish("closed");
                               self->Drain();
                             });
  }

  void Fail(beast::error_code ec) {
    bool end = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
    Finish(end ? "closed by peer"
               : internal::DescribeTlsError(
                     ec, core_ ? internal::TlsSide::kServer : internal::TlsSide::kClient));
  }

  void Finish(const std::string& reason) {
    Abort();
    NotifyClose(reason);
  }

  // Closes the socket; pending operations complete with errors.
  void Abort() {
    state_ = State::kClosed;
    // A write in flight may still read its batch's strings: over TLS the
    // write is a chain of steps that each encrypt from the buffers, and a
    // step whose completion was already queued when the socket closed
    // starts the next step (ASan saw SSL_write read a freed string, in a
    // session proxy's relay). OnWrite drops them when the write is over.
    if (!writing_) queue_.clear();
    queued_bytes_ = 0;
    held_ = {};
    beast::error_code ignored;
    auto& socket = Lowest().socket();
    if (socket.is_open()) {
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      Lowest().close();
    }
  }

  // Calls OnClose once and drops the handler: no callback after it. The
  // caller holds a reference to the session (hold_ may be the last other).
  void NotifyClose(const std::string& reason) {
    hold_.reset();
    auto h = std::move(handler_);
    handler_ = nullptr;
    if (h) h->OnClose(reason);
  }

  class Handle : public RawConnection {
   public:
    Handle(std::weak_ptr<RawSession> session, std::string peer)
        : session_(std::move(session)), peer_(std::move(peer)) {}
    ~Handle() override {
      if (auto s = session_.lock()) s->HandleDropped();
    }
    void Write(std::string bytes) override {
      if (auto s = session_.lock()) s->Write(std::move(bytes));
    }
    size_t queued_bytes() const override {
      auto s = session_.lock();
      return s ? s->queued_bytes() : 0;
    }
    void PauseReading(bool paused) override {
      if (auto s = session_.lock()) s->PauseReading(paused);
    }
    void Close() override {
      if (auto s = session_.lock()) s->Close();
    }
    std::string peer() const override { return peer_; }

   private:
    std::weak_ptr<RawSession> session_;
    std::string peer_;
  };

  std::shared_ptr<internal::ServerCore> core_;  // null outside an HttpServer
  Stream stream_;
  std::shared_ptr<RawHandler> handler_;
  std::string peer_;
  std::unique_ptr<char[]> read_buffer_;
  std::string leftover_;           // bytes read past a taken-over request
  std::string_view held_;          // read (into read_buffer_ or leftover_), not yet delivered
  std::deque<std::string> queue_;  // a deque: push_back keeps the batch's data in place
  std::vector<asio::const_buffer> batch_;
  size_t queued_bytes_ = 0;
  std::shared_ptr<RawSession> hold_;  // self, while paused with no read pending
  State state_ = State::kOpen;
  bool reading_ = false;
  bool writing_ = false;
  bool paused_ = false;
  bool resume_posted_ = false;
  bool close_requested_ = false;
};

using PlainSession = RawSession<beast::tcp_stream>;

class TcpListenerImpl : public TcpListener {
 public:
  explicit TcpListenerImpl(std::shared_ptr<internal::AcceptLoop> acceptor)
      : acceptor_(std::move(acceptor)) {}
  ~TcpListenerImpl() override { acceptor_->Close(); }
  uint16_t port() const override { return acceptor_->port(); }
  void Close() override { acceptor_->Close(); }

 private:
  std::shared_ptr<internal::AcceptLoop> acceptor_;
};

// Resolves and connects, then hands the stream to a PlainSession.
class Connector : public std::enable_shared_from_this<Connector> {
 public:
  Connector(asio::io_context& ioc, std::shared_ptr<RawHandler> handler, std::string what)
      : resolver_(ioc), stream_(ioc), handler_(std::move(handler)), what_(std::move(what)) {}

  void Start(const std::string& host, uint16_t port) {
    resolver_.async_resolve(
        host, std::to_string(port),
        [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
          self->OnResolved(ec, std::move(results));
        });
  }

 private:
  void OnResolved(beast::error_code ec, tcp::resolver::results_type results) {
    if (ec) return Fail(ec.message());
    stream_.expires_after(kConnectTimeout);
    stream_.async_connect(
        results, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint& ep) {
          self->OnConnected(ec, ep);
        });
  }

  void OnConnected(beast::error_code ec, const tcp::endpoint& ep) {
    if (ec == beast::error::timeout) {
      return Fail("timed out after " + std::to_string(kConnectTimeout.count()) + " ms");
    }
    if (ec) return Fail(ec.message());
    std::make_shared<PlainSession>(nullptr, std::move(stream_), std::move(handler_),
                                   internal::EndpointText(ep))
        ->Start("");
  }

  void Fail(const std::string& error) {
    handler_->OnClose("cannot connect to " + what_ + ": " + error);
  }

  tcp::resolver resolver_;
  beast::tcp_stream stream_;
  std::shared_ptr<RawHandler> handler_;
  std::string what_;  // "host:port", for errors
};

}  // namespace

void internal::TakeOverConnection(std::shared_ptr<ServerCore> core, beast::tcp_stream stream,
                                  std::string leftover, std::shared_ptr<RawHandler> handler,
                                  std::string peer) {
  std::make_shared<RawSession<beast::tcp_stream>>(std::move(core), std::move(stream),
                                                  std::move(handler), std::move(peer))
      ->Start(std::move(leftover));
}

void internal::TakeOverConnection(std::shared_ptr<ServerCore> core, TlsStream stream,
                                  std::string leftover, std::shared_ptr<RawHandler> handler,
                                  std::string peer) {
  std::make_shared<RawSession<TlsStream>>(std::move(core), std::move(stream), std::move(handler),
                                          std::move(peer))
      ->Start(std::move(leftover));
}

Result<std::unique_ptr<TcpListener>> TcpListen(
    EventLoop& loop, std::string host, uint16_t port,
    std::function<std::shared_ptr<RawHandler>()> make_handler) {
  asio::io_context& ioc = internal::IoContext(loop);
  GP_ASSIGN_OR_RETURN(asio::ip::address address, internal::ListenAddress(ioc, host));
  auto acceptor = std::make_shared<internal::AcceptLoop>(
      ioc, [make_handler = std::move(make_handler)](tcp::socket socket, std::string peer) {
        if (auto handler = make_handler()) {
          std::make_shared<PlainSession>(nullptr, beast::tcp_stream(std::move(socket)),
                                         std::move(handler), std::move(peer))
              ->Start("");
        }  // else the socket closes here
      });
  GP_RETURN_IF_ERROR(acceptor->Bind(tcp::endpoint(address, port)));
  acceptor->Start();
  return std::unique_ptr<TcpListener>(std::make_unique<TcpListenerImpl>(std::move(acceptor)));
}

void TcpConnect(EventLoop& loop, std::string host, uint16_t port,
                std::shared_ptr<RawHandler> handler) {
  asio::io_context& ioc = internal::IoContext(loop);
  std::string what = HostPort(host, port);
  std::make_shared<Connector>(ioc, std::move(handler), std::move(what))->Start(host, port);
}

}  // namespace gpupool::net
