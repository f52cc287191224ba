// The agent's local control socket: DATA_DIR/control.sock, through which the
// machine's owner runs `gpupool agent reclaim|pause|resume|leave|status`.
//
// Protocol (Unix stream socket, one exchange per connection):
//   client -> server  one JSON object on one line ending in '\n'; the line may
//                     be at most 64 KiB (kMaxControlRequestBytes, without the
//                     '\n'). Bytes after the '\n' are ignored.
//   server -> client  one JSON object on one line ending in '\n', then close.
// The server itself answers, without calling the handler:
//   {"ok": false, "error": "permission denied: uid N (name) may not control this agent
//                           (allowed: root, uid A (alice))"}
//       when the peer's uid (SO_PEERCRED, read right after accept) is not
//       allowed; sent at once, the request is never read;
//   {"ok": false, "error": "malformed request: ..."}  for a line that is not a
//       JSON object;
//   {"ok": false, "error": "request too long: ..."}   for a line over 64 KiB.
// Every other response is whatever the handler built (json.dump() + '\n').
// Access is decided by the peer's uid, not by file permissions: the socket
// file is mode 0666 so that a refused user gets the agent's message rather
// than EACCES.
//
// Limits: a client that has not sent a complete line within 10 s is dropped
// without a reply; at most 32 connections are open at once, and newer ones
// are closed at once. Waiting for the handler's reply has no time limit on
// the server (the handler promises to reply once; the client has its own
// timeout), and the connection keeps its slot until then even if the client
// left. Responses are written with the socket made blocking, bounded by a 2 s
// total send timeout, which stalls the loop only for a client that stops
// reading a response larger than the socket buffer (~200 KiB); responses are
// meant to be small (under 1 MiB). A client that does not read within those
// 2 s loses the rest of the response.
//
// Threading: ControlServer lives on the agent's EventLoop. Listen(), the
// destructor and SetAllowedUids() run on the loop thread (or before Run()
// starts); the handler runs on it, and `reply` must be called on it too.
// The handler may destroy the ControlServer. CallControl is a blocking client
// for the CLI and may be called from any thread, but never from the loop
// thread of the server it talks to.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/status.h"
#include "net/event_loop.h"

namespace gpupool::agent {

inline constexpr size_t kMaxControlRequestBytes = 64 * 1024;

// Who is on the other end, as the kernel reports it (effective ids, at
// connect time).
struct ControlPeer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

// Sends the response and closes the connection. Only the first call counts;
// calling it after the client went away or after the server was destroyed
// does nothing.
using ControlReply = std::function<void(const nlohmann::json& response)>;

// Called on the loop for each allowed, well-formed request (a JSON object).
// Must call `reply` exactly once, now or later (e.g. after a reclaim ended).
using ControlHandler =
    std::function<void(const ControlPeer& peer, const nlohmann::json& request, ControlReply reply)>;

class ControlServer {
 public:
  // Listens on `path` (under 108 bytes, the sun_path limit). A leftover
  // socket file that nobody accepts on is replaced; if a live process accepts
  // connections on it, FailedPrecondition ("another agent is running with this
  // data dir (PATH)"). A non-socket file at `path` is left alone
  // (FailedPrecondition). `allowed_uids`: who may send requests (the caller
  // passes root, its own euid and the owner's uid).
  static Result<std::unique_ptr<ControlServer>> Listen(net::EventLoop& loop, std::string path,
                                                       std::set<uid_t> allowed_uids,
                                                       ControlHandler handler);

  // Stops listening, closes every connection (pending replies become no-ops)
  // and unlinks the socket file if it is still the one this server bound.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Replaces the allowed uids (config reload); applies to new connections.
  void SetAllowedUids(std::set<uid_t> uids);
  const std::string& path() const;

 private:
  struct Impl;
  explicit ControlServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with reply callbacks (weakly) and running callbacks
};

// Blocking client (for the CLI): connects to `path`, sends `request` and waits
// for the one response line; `timeout_ms` bounds the whole call. Errors:
//   Unavailable       "no agent is listening on PATH (is `gpupool agent` running
//                     with this --data-dir?)" when the file is absent or nobody
//                     accepts on it; also when the agent closes without a response;
//   PermissionDenied  when the socket file cannot be opened (EACCES);
//   DeadlineExceeded  when no complete response arrived in time;
//   InvalidArgument   when the response is not a JSON object (or `path` is too long).
Result<nlohmann::json> CallControl(const std::string& path, const nlohmann::json& request,
                                   int64_t timeout_ms);

}  // namespace gpupool::agent
