// Private to net/: pieces shared by the HTTP server and the WebSocket code.
// Includes Beast; never include this from outside src/net/.
//
// Threading: everything here runs on the EventLoop thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <memory>
#include <string>
#include <unordered_map>

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

// One connection of a server: an HTTP session or an upgraded WebSocket.
class Session {
 public:
  virtual ~Session() = default;
  // Closes the connection now; no handler callback runs afterwards except
  // WsHandler::OnClose, which runs inside Shutdown() if it has not yet.
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

// {"error":"<message>"} with `status`, for errors net/ answers by itself.
HttpResponse ErrorResponse(int status, std::string_view message);

}  // namespace gpupool::net::internal
