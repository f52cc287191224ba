// Private to net/: pieces shared by the HTTP server and the WebSocket code.
// Includes Beast; never include this from outside src/net/.
//
// Threading: everything here runs on the EventLoop thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "net/http.h"
#include "net/http_server.h"
#include "net/websocket.h"

namespace gpupool::net::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using BeastRequest = http::request<http::string_body>;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

asio::io_context& IoContext(EventLoop& loop);

// "127.0.0.1:8470" or "[::1]:8470".
std::string EndpointText(const tcp::endpoint& ep);

// One connection of a server: an HTTP session, an upgraded WebSocket or a
// taken-over raw connection.
class Session {
 public:
  virtual ~Session() = default;
  // Closes the connection now; no handler callback runs afterwards except
  // WsHandler::OnClose or RawHandler::OnClose, which runs inside Shutdown()
  // if it has not yet.
  virtual void Shutdown() = 0;
};

// State shared by a server and its sessions; sessions keep it alive, so it
// outlives the HttpServer object when connections are still draining.
struct ServerCore {
  asio::io_context* ioc = nullptr;
  HttpServerOptions options;
  HttpHandlers handlers;
  std::shared_ptr<asio::ssl::context> tls;  // null: plain HTTP
  bool closed = false;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
};

// Takes over `stream` after an accepted upgrade request: completes the
// WebSocket handshake and drives `handler`. Registers with `core`.
void AcceptWebSocket(std::shared_ptr<ServerCore> core, beast::tcp_stream stream, BeastRequest req,
                     std::shared_ptr<WsHandler> handler, std::string peer);
void AcceptWebSocket(std::shared_ptr<ServerCore> core, TlsStream stream, BeastRequest req,
                     std::shared_ptr<WsHandler> handler, std::string peer);

// Hands `stream` to `handler` as a raw byte stream (HttpHandlers::
// on_takeover): OnOpen, then `leftover` (bytes read past the request), then
// whatever the client sends. No timeouts apply. Registers with `core`, so
// the server's Close() ends it. In tcp_stream.cpp.
void TakeOverConnection(std::shared_ptr<ServerCore> core, beast::tcp_stream stream,
                        std::string leftover, std::shared_ptr<RawHandler> handler,
                        std::string peer);
void TakeOverConnection(std::shared_ptr<ServerCore> core, TlsStream stream, std::string leftover,
                        std::shared_ptr<RawHandler> handler, std::string peer);

// The address to listen on for `host` (an IP address, or a name resolved
// now). InvalidArgument when it does not resolve.
Result<asio::ip::address> ListenAddress(asio::io_context& ioc, const std::string& host);
// A listening socket that accepts until closed and hands each connection,
// with its peer's address, to `on_socket`. A failed accept (e.g. out of file
// descriptors) is retried 100 ms later instead of spinning. Shared with its
// pending accept, so its owner may go while one is outstanding. Used by
// HttpServer and TcpListen.
class AcceptLoop : public std::enable_shared_from_this<AcceptLoop> {
 public:
  using OnSocket = std::function<void(tcp::socket socket, std::string peer)>;
  AcceptLoop(asio::io_context& ioc, OnSocket on_socket)
      : acceptor_(ioc), retry_timer_(ioc), on_socket_(std::move(on_socket)) {}
  // Opens, binds and listens; Unavailable names the step that failed.
  Status Bind(const tcp::endpoint& ep);
  uint16_t port() const { return port_; }
  void Start();
  // Stops accepting; connections already handed over are not touched.
  void Close();

 private:
  void OnAccept(beast::error_code ec, tcp::socket socket);

  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  OnSocket on_socket_;
  uint16_t port_ = 0;
  bool closed_ = false;
};

// {"error":"<message>"} with `status`, for errors net/ answers by itself.
HttpResponse ErrorResponse(int status, std::string_view message);

}  // namespace gpupool::net::internal
