// ControlServer on a non-blocking listening socket watched by the EventLoop;
// CallControl with blocking POSIX calls and poll().
#include "agent/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <utility>

#include "common/json_reader.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace gpupool::agent {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxConnections = 32;
constexpr int64_t kIdleTimeoutMs = 10'000;
constexpr int64_t kServerSendTimeoutMs = 2'000;
constexpr int64_t kAcceptRetryMs = 1'000;
constexpr size_t kMaxResponseBytes = 16 << 20;

std::string ErrnoText(int err) { return std::strerror(err); }

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("control socket path must be 1 to " +
                                   std::to_string(sizeof(addr.sun_path) - 1) +
                                   " bytes long: " + path);
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

int Connect(int fd, const sockaddr_un& addr) {
  return ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
}

void SetSendTimeout(int fd, int64_t ms) {
  ms = std::max<int64_t>(ms, 1);  // 0 would mean "no timeout"
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int64_t MsUntil(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

std::string Line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

json ErrorReply(std::string message) { return {{"ok", false}, {"error", std::move(message)}}; }

// "uid 1000 (alice)", or "uid 1000" when the name does not resolve.
std::string UidLabel(uid_t uid) {
  std::string label = "uid " + std::to_string(uid);
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    label += std::string(" (") + found->pw_name + ")";
  }
  return label;
}

std::string DeniedMessage(uid_t uid, const std::set<uid_t>& allowed) {
  std::string list;
  for (uid_t a : allowed) {
    if (!list.empty()) list += ", ";
    list += a == 0 ? "root" : UidLabel(a);
  }
  return "permission denied: " + UidLabel(uid) + " may not control this agent (allowed: " + list +
         ")";
}

// Writes the whole line with the fd made blocking, for at most
// kServerSendTimeoutMs in total; a client that is gone or stalls loses it.
void SendLineBlocking(int fd, const json& response) {
  std::string line = Line(response);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  auto deadline = Clock::now() + std::chrono::milliseconds(kServerSendTimeoutMs);
  for (size_t off = 0; off < line.size();) {
    int64_t left = MsUntil(deadline);
    if (left <= 0) return;
    SetSendTimeout(fd, left);
    ssize_t n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// bind() said EADDRINUSE: replace the file if it is a socket nobody accepts on.
Status RemoveStaleSocket(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();  // gone meanwhile
  if (!S_ISSOCK(st.st_mode)) {
    return Status::FailedPrecondition(path + " exists and is not a socket; remove it");
  }
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (probe.get() < 0) return Status::Internal("socket: " + ErrnoText(errno));
  // Non-blocking AF_UNIX connect: 0 when a listener accepts, EAGAIN when its
  // backlog is full (still alive), ECONNREFUSED when nobody listens.
  if (Connect(probe.get(), addr) == 0 || errno == EAGAIN) {
    return Status::FailedPrecondition("another agent is running with this data dir (" + path + ")");
  }
  if (errno != ECONNREFUSED && errno != ENOENT) {
    return Status::Internal("cannot check " + path + ": " + ErrnoText(errno));
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::Internal("cannot remove stale " + path + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

}  // namespace

struct ControlServer::Impl : std::enable_shared_from_this<Impl> {
  struct Conn {
    int fd = -1;
    ControlPeer peer;
    std::string buf;
    net::EventLoop::TimerId idle = 0;
  };

  net::EventLoop& loop;
  std::string path;
  std::set<uid_t> allowed;
  ControlHandler handler;
  int listen_fd = -1;
  struct stat bound {};  // the socket file as bound, to unlink only our own
  net::EventLoop::TimerId accept_retry = 0;
  uint64_t next_id = 1;
  std::map<uint64_t, Conn> conns;

  Impl(net::EventLoop& l, std::string p, std::set<uid_t> a, ControlHandler h)
      : loop(l), path(std::move(p)), allowed(std::move(a)), handler(std::move(h)) {}

  void WatchListener() {
    loop.WatchReadable(listen_fd, [this] { return OnAcceptable(); });
  }

  bool OnAcceptable() {
    for (;;) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        Admit(fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      // E.g. EMFILE: the connection stays queued and the fd readable, so
      // pause instead of spinning.
      GP_LOG(kWarn) << "control socket " << path << ": accept: " << ErrnoText(errno);
      accept_retry = loop.RunAfter(kAcceptRetryMs, [this] {
        accept_retry = 0;
        WatchListener();
      });
      return false;
    }
  }

  void Admit(int fd) {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (conns.size() >= kMaxConnections ||
        ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(fd);
      return;
    }
    ControlPeer peer{cred.uid, cred.gid, cred.pid};
    if (!allowed.contains(peer.uid)) {
      SendLineBlocking(fd, ErrorReply(DeniedMessage(peer.uid, allowed)));
      ::close(fd);
      return;
    }
    uint64_t id = next_id++;
    Conn& c = conns[id];
    c.fd = fd;
    c.peer = peer;
    c.idle = loop.RunAfter(kIdleTimeoutMs, [this, id] {
      auto it = conns.find(id);
      if (it == conns.end()) return;
      it->second.idle = 0;
      ::close(Detach(it));
    });
    loop.WatchReadable(fd, [this, id] { return OnReadable(id); });
  }

  bool OnReadable(uint64_t id) {
    auto self = shared_from_this();  // the handler may destroy the ControlServer
    auto it = conns.find(id);
    if (it == conns.end()) return false;
    Conn& c = it->second;
    char chunk[16 * 1024];
    for (;;) {
      ssize_t n = ::recv(c.fd, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) {  // the client left before finishing its request
        ::close(Detach(it));
        return false;
      }
      size_t scanned = c.buf.size();
      c.buf.append(chunk, static_cast<size_t>(n));
      size_t nl = c.buf.find('\n', scanned);
      if (nl == std::string::npos && c.buf.size() <= kMaxControlRequestBytes) continue;
      if (nl == std::string::npos || nl > kMaxControlRequestBytes) {
        Finish(id, ErrorReply("request too long: more than " +
                              std::to_string(kMaxControlRequestBytes) + " bytes in one line"));
        return false;
      }
      c.buf.resize(nl);
      auto request = ParseJsonObject(c.buf, "malformed request");
      ControlPeer peer = c.peer;
      // Stop reading (and the idle timer) while the handler works.
      loop.UnwatchFd(c.fd);
      loop.Cancel(c.idle);
      c.idle = 0;
      c.buf = std::string();
      if (!request.ok()) {
        Finish(id, ErrorReply(request.status().message()));
      } else {
        std::weak_ptr<Impl> weak = self;
        handler(peer, *request, [weak, id](const json& response) {
          if (auto impl = weak.lock()) impl->Finish(id, response);
        });
      }
      return false;
    }
  }

  // Forgets the connection and returns its fd, for the caller to close.
  int Detach(std::map<uint64_t, Conn>::iterator it) {
    int fd = it->second.fd;
    loop.UnwatchFd(fd);
    if (it->second.idle != 0) loop.Cancel(it->second.idle);
    conns.erase(it);
    return fd;
  }

  void Finish(uint64_t id, const json& response) {
    auto it = conns.find(id);
    if (it == conns.end()) return;  // replied already, or dropped
    int fd = Detach(it);
    SendLineBlocking(fd, response);
    ::close(fd);
  }

  void Shutdown() {
    if (listen_fd < 0) return;
    loop.UnwatchFd(listen_fd);
    if (accept_retry != 0) loop.Cancel(accept_retry);
    ::close(std::exchange(listen_fd, -1));
    while (!conns.empty()) ::close(Detach(conns.begin()));
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && st.st_ino == bound.st_ino && st.st_dev == bound.st_dev) {
      ::unlink(path.c_str());
    }
  }
};

Result<std::unique_ptr<ControlServer>> ControlServer::Listen(net::EventLoop& loop, std::string path,
                                                             std::set<uid_t> allowed_uids,
                                                             ControlHandler handler) {
  GP_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return Status::Internal("socket: " + ErrnoText(errno));
  auto bind = [&] {
    return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  };
  int rc = bind();
  if (rc != 0 && errno == EADDRINUSE) {
    GP_RETURN_IF_ERROR(RemoveStaleSocket(path, addr));
    rc = bind();
  }
  if (rc != 0) {
    int err = errno;
    std::string what = "cannot listen on " + path + ": " + ErrnoText(err);
    return err == EACCES ? Status::PermissionDenied(what) : Status::Internal(what);
  }
  auto impl =
      std::make_shared<Impl>(loop, std::move(path), std::move(allowed_uids), std::move(handler));
  const std::string& p = impl->path;
  // The peer's uid decides, not the file mode; chmod after bind, since a
  // socket's mode comes from the umask at bind time.
  if (::chmod(p.c_str(), 0666) != 0 || ::lstat(p.c_str(), &impl->bound) != 0 ||
      ::listen(fd.get(), 16) != 0) {
    std::string what = "cannot listen on " + p + ": " + ErrnoText(errno);
    ::unlink(p.c_str());
    return Status::Internal(what);
  }
  impl->listen_fd = fd.Release();
  impl->WatchListener();
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::ControlServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() { impl_->Shutdown(); }

void ControlServer::SetAllowedUids(std::set<uid_t> uids) { impl_->allowed = std::move(uids); }

const std::string& ControlServer::path() const { return impl_->path; }

Result<json> CallControl(const std::string& path, const json& request, int64_t timeout_ms) {
  GP_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto timed_out = [&] {
    return Status::DeadlineExceeded("no response from the agent on " + path + " within " +
                                    std::to_string(timeout_ms) + " ms");
  };
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::Internal("socket: " + ErrnoText(errno));
  // SO_SNDTIMEO also bounds a connect() that waits for a full backlog.
  SetSendTimeout(fd.get(), MsUntil(deadline));
  if (Connect(fd.get(), addr) != 0) {
    int err = errno;
    if (err == ENOENT || err == ECONNREFUSED) {
      return Status::Unavailable("no agent is listening on " + path +
                                 " (is `gpupool agent` running with this --data-dir?)");
    }
    if (err == EACCES || err == EPERM) {
      return Status::PermissionDenied("cannot open " + path + ": " + ErrnoText(err));
    }
    if (err == EAGAIN) return timed_out();
    return Status::Unavailable("cannot connect to " + path + ": " + ErrnoText(err));
  }

  std::string out = Line(request);
  for (size_t off = 0; off < out.size();) {
    SetSendTimeout(fd.get(), MsUntil(deadline));
    ssize_t n = ::send(fd.get(), out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return timed_out();
    } else if (errno != EINTR) {
      break;  // the agent closed early (e.g. a refusal); its reply may still be readable
    }
  }

  std::string in;
  size_t nl;
  while ((nl = in.find('\n')) == std::string::npos) {
    int64_t left = MsUntil(deadline);
    if (left <= 0) return timed_out();
    pollfd pfd{fd.get(), POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    if (ready < 0) return Status::Internal("poll: " + ErrnoText(errno));
    char chunk[16 * 1024];
    ssize_t n = ::recv(fd.get(), chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::Unavailable("the agent on " + path +
                                 " closed the connection without a complete response");
    }
    in.append(chunk, static_cast<size_t>(n));
    if (in.size() > kMaxResponseBytes) {
      return Status::InvalidArgument("response from the agent on " + path + " is too long");
    }
  }
  in.resize(nl);
  return ParseJsonObject(in, "malformed response from the agent on " + path);
}

}  // namespace gpupool::agent
