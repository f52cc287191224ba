// Plain TCP byte streams on an EventLoop, with the RawConnection/RawHandler
// interfaces of the HTTP server's takeover (net/http_server.h): a listener
// that hands each accepted connection to a new handler, and an outgoing
// connect. For forwarding a local port through the server (`gpupool session
// connect`) and for benchmarks. Sockets have TCP_NODELAY: interactive
// traffic (shells) must not wait for Nagle's delay.
//
// Threading: call everything on the loop thread; every callback runs there.
// Connections live on their own once open (see RawConnection for the
// lifetime rules); closing a listener does not close them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "net/event_loop.h"
#include "net/http_server.h"

namespace gpupool::net {

class TcpListener {
 public:
  // Stops accepting. Destroy (or Close) on the loop thread, before the loop.
  virtual ~TcpListener() = default;
  virtual uint16_t port() const = 0;
  // Stops accepting; connections already accepted stay open.
  virtual void Close() = 0;
};

// Listens on host:port (port 0 = pick a free one; see port()). Each
// accepted connection gets a handler from make_handler() and its OnOpen; a
// null handler refuses the connection (it is closed). InvalidArgument for a
// host that does not resolve, Unavailable when the port cannot be bound.
Result<std::unique_ptr<TcpListener>> TcpListen(
    EventLoop& loop, std::string host, uint16_t port,
    std::function<std::shared_ptr<RawHandler>()> make_handler);

// Connects asynchronously and returns at once: the handler gets OnOpen, or,
// without OnOpen, OnClose("cannot connect to host:port: <error>") (also
// after 10 s without an answer).
void TcpConnect(EventLoop& loop, std::string host, uint16_t port,
                std::shared_ptr<RawHandler> handler);

}  // namespace gpupool::net
