#include "exec/port_forwarder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace gpupool::exec {
namespace {

constexpr size_t kChunk = 64 * 1024;
constexpr size_t kMaxBuffered = 256 * 1024;  // per direction of a connection
constexpr size_t kMaxConnections = 4096;

// One relayed connection: `fd[0]` the one accepted on the machine, `fd[1]`
// the one made inside the job's namespace. buf[i] holds what was read
// from fd[i] and is not yet written to the other.
struct Conn;
struct End {
  Conn* conn;
  int side;
};
struct Conn {
  int fd[2] = {-1, -1};
  std::string buf[2];
  bool eof[2] = {false, false};   // fd[i] said end of file
  bool shut[2] = {false, false};  // fd[i] was shut for writing
  bool connected = false;         // fd[1]'s connect finished
  End ends[2];
  uint32_t events[2] = {0, 0};
};

// Closes every descriptor but 0-2 and `keep`; 0-2 become /dev/null (the
// shim's stdout is the agent's pipe: it must close when the shim exits).
void CloseAllBut(std::vector<int> keep) {
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd : {0, 1, 2}) ::dup2(devnull, fd);
  std::sort(keep.begin(), keep.end());
  unsigned next = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > next) ::close_range(next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(next, ~0U, 0);
}

[[noreturn]] void Fail(int err_fd, const std::string& what) {
  (void)!::write(err_fd, what.data(), what.size());
  _exit(1);
}

// A listening socket on every address of this machine for `port`
// (dual-stack where IPv6 exists), or -1 with errno.
int Listen(int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0, on = 1;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 128) == 0)
      return fd;
    int err = errno;
    ::close(fd);
    if (err != EAFNOSUPPORT && err != EADDRNOTAVAIL) {
      errno = err;
      return -1;
    }
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// The address (and port) the peer connected to, as a sockaddr to connect
// to inside the job's namespace: an IPv4-mapped address becomes IPv4.
socklen_t InsideTarget(int accepted, sockaddr_storage& out) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::getsockname(accepted, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
  if (local.ss_family == AF_INET6) {
    auto* six = reinterpret_cast<sockaddr_in6*>(&local);
    if (IN6_IS_ADDR_V4MAPPED(&six->sin6_addr)) {
      sockaddr_in four{};
      four.sin_family = AF_INET;
      four.sin_port = six->sin6_port;
      std::memcpy(&four.sin_addr, six->sin6_addr.s6_addr + 12, 4);
      std::memcpy(&out, &four, sizeof four);
      return sizeof four;
    }
  }
  out = local;
  return len;
}

class Relay {
 public:
  explicit Relay(int epfd) : epfd_(epfd) {}

  void Accept(int listener) {
    while (true) {
      int a = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (a < 0) return;  // EAGAIN, or a transient error: wait for the next event
      sockaddr_storage target{};
      socklen_t len = InsideTarget(a, target);
      int b =
          len == 0 ? -1 : ::socket(target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (b < 0 || conns_ >= kMaxConnections ||
          (::connect(b, reinterpret_cast<sockaddr*>(&target), len) != 0 && errno != EINPROGRESS)) {
        if (b >= 0) ::close(b);
        Reset(a);
        continue;
      }
      auto* c = new Conn;
      c->fd[0] = a;
      c->fd[1] = b;
      c->ends[0] = {c, 0};
      c->ends[1] = {c, 1};
      ++conns_;
      for (int side : {0, 1}) {
        epoll_event ev{};
        ev.data.ptr = &c->ends[side];
        ::epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd[side], &ev);
      }
      Update(c);
    }
  }

  void Handle(End* end, uint32_t events) {
    Conn* c = end->conn;
    int side = end->side;
    if (side == 1 && !c->connected && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return Close(c, true);  // nothing listens inside: the peer sees a reset
      c->connected = true;
    }
    if (c->connected) {
      if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !Read(c, side)) return Close(c, true);
      if ((events & EPOLLOUT) && !Write(c, 1 - side)) return Close(c, true);
    }
    if (Done(c)) return Close(c, false);
    Update(c);
  }

 private:
  // Reads what fd[side] has into buf[side]; false on an error.
  bool Read(Conn* c, int side) {
    char tmp[kChunk];
    while (!c->eof[side] && c->buf[side].size() < kMaxBuffered) {
      ssize_t n = ::read(c->fd[side], tmp, sizeof tmp);
      if (n > 0) {
        c->buf[side].append(tmp, static_cast<size_t>(n));
      } else if (n == 0) {
        c->eof[side] = true;
      } else {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) break;
        return false;
      }
    }
    return Write(c, 1 - side);
  }

  // Writes buf[other side] to fd[to]; passes an end of file on once all is
  // written; false on an error.
  bool Write(Conn* c, int to) {
    std::string& buf = c->buf[1 - to];
    while (!buf.empty()) {
      ssize_t n = ::send(c->fd[to], buf.data(), buf.size(), MSG_NOSIGNAL);
      if (n > 0) {
        buf.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return true;
      } else {
        return false;
      }
    }
    if (c->eof[1 - to] && !c->shut[to]) {
      ::shutdown(c->fd[to], SHUT_WR);
      c->shut[to] = true;
    }
    return true;
  }

  static bool Done(const Conn* c) {
    return c->eof[0] && c->eof[1] && c->buf[0].empty() && c->buf[1].empty();
  }

  void Update(Conn* c) {
    for (int side : {0, 1}) {
      uint32_t want = 0;
      if (side == 1 && !c->connected) {
        want = EPOLLOUT;
      } else if (c->connected) {
        if (!c->eof[side] && c->buf[side].size() < kMaxBuffered) want |= EPOLLIN;
        if (!c->buf[1 - side].empty()) want |= EPOLLOUT;
      }
      if (want == c->events[side]) continue;
      c->events[side] = want;
      epoll_event ev{};
      ev.events = want;
      ev.data.ptr = &c->ends[side];
      ::epoll_ctl(epfd_, EPOLL_CTL_MOD, c->fd[side], &ev);
    }
  }

  static void Reset(int fd) {
    linger l{1, 0};  // a reset, as a refused connection would be
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
  }

  void Close(Conn* c, bool reset) {
    for (int side : {0, 1}) {
      ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c->fd[side], nullptr);
      if (reset) {
        Reset(c->fd[side]);
      } else {
        ::close(c->fd[side]);
      }
    }
    // Events already returned for this connection in the same batch are
    // dropped by the caller (see Serve); free it after the batch.
    closed_.push_back(c);
    --conns_;
  }

 public:
  std::vector<Conn*> closed_;

 private:
  int epfd_;
  size_t conns_ = 0;
};

[[noreturn]] void Serve(const std::vector<int>& listeners) {
  int epfd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) _exit(1);
  // A listener's epoll data is its index + 1 as an integer below any pointer.
  for (size_t i = 0; i < listeners.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i + 1;
    ::epoll_ctl(epfd, EPOLL_CTL_ADD, listeners[i], &ev);
  }
  Relay relay(epfd);
  epoll_event events[64];
  while (true) {
    int n = ::epoll_wait(epfd, events, 64, -1);
    if (n < 0 && errno != EINTR) _exit(1);
    for (int i = 0; i < n; ++i) {
      uint64_t u = events[i].data.u64;
      if (u >= 1 && u <= listeners.size()) {
        relay.Accept(listeners[u - 1]);
        continue;
      }
      auto* end = static_cast<End*>(events[i].data.ptr);
      bool gone = false;
      for (Conn* c : relay.closed_) gone = gone || c == end->conn;
      if (!gone) relay.Handle(end, events[i].events);
    }
    for (Conn* c : relay.closed_) delete c;
    relay.closed_.clear();
  }
}

}  // namespace

Result<pid_t> StartPortForwarder(const PortForwarderPlan& plan) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    int err_fd = err_pipe[1];
    CloseAllBut({err_fd, plan.userns_fd, plan.netns_fd});
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_NAME, "gpupool-ports");
    if (!plan.cgroup_procs.empty()) {
      int fd = ::open(plan.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) Fail(err_fd, "cannot join the job's cgroup");
      ::close(fd);
    }
    std::vector<int> listeners;
    for (int port = plan.ports.first; port <= plan.ports.last(); ++port) {
      int fd = Listen(port);
      if (fd < 0) {
        Fail(err_fd, "port " + std::to_string(port) + " of this rank's block is in use here (" +
                         std::strerror(errno) + ")");
      }
      listeners.push_back(fd);
    }
    if (plan.gid >= 0) {
      gid_t gid = static_cast<gid_t>(plan.gid);
      if (::setgroups(1, &gid) != 0 || ::setresgid(gid, gid, gid) != 0) Fail(err_fd, "setgid");
    }
    if (plan.uid >= 0) {
      uid_t uid = static_cast<uid_t>(plan.uid);
      if (::setresuid(uid, uid, uid) != 0) Fail(err_fd, "setuid");
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // after the account changed: a change clears it
    if (::getppid() != parent) _exit(1);
    // The sockets bound so far stay in this machine's namespace; those
    // made from now on are the job's.
    if ((::geteuid() != 0 && ::setns(plan.userns_fd, CLONE_NEWUSER) != 0) ||
        ::setns(plan.netns_fd, CLONE_NEWNET) != 0) {
      Fail(err_fd, std::string("cannot enter the job's network: ") + std::strerror(errno));
    }
    ::close(plan.userns_fd);
    ::close(plan.netns_fd);
    ::close(err_fd);  // ready: the parent reads end of file
    Serve(listeners);
  }
  ::close(err_pipe[1]);
  std::string failure;
  char buf[512];
  ssize_t n;
  while ((n = ::read(err_pipe[0], buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    failure.append(buf, static_cast<size_t>(n));
  }
  ::close(err_pipe[0]);
  if (!failure.empty()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return Status::Unavailable(failure);
  }
  return pid;
}

}  // namespace gpupool::exec
