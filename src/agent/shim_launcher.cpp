#include "agent/shim_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/shim_launch.h"
#include "common/unique_fd.h"

extern char** environ;

namespace gpupool::agent {
namespace {

// The launcher's end of the socket, in the launcher.
constexpr int kSocketFd = 3;
// More than any real set of options (a spec is at most a few hundred KiB)
// or environment.
constexpr size_t kMaxMemfdBytes = 64u << 20;
// The attempt id as shown in a shim's command line (longer ones are cut).
constexpr size_t kAttemptChars = 64;
// Options, environment, status pipe.
constexpr int kRequestFds = 3;
// How long the agent waits for the launcher's answer (a fork).
constexpr int kReplyTimeoutMs = 30'000;

struct Request {
  int32_t agent_pid = 0;
  char attempt[kAttemptChars] = {};
};
struct Reply {
  int32_t pid = 0;    // > 0: the shim
  int32_t error = 0;  // an errno, when pid is 0
};

std::string Errno(const char* what, int e) { return std::string(what) + ": " + std::strerror(e); }

Result<UniqueFd> SealedMemfd(const char* name, std::string_view text) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Status::Internal(Errno("memfd_create", errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal(Errno("write", errno));
    done += static_cast<size_t>(n);
  }
  (void)::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return Status::Internal(Errno("lseek", errno));
  return fd;
}

// The calling process's environment, NUL-separated.
std::string EnvironmentBlock() {
  std::string out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    out += *e;
    out += '\0';
  }
  return out;
}

// Reads all of `fd` from its start (at most kMaxMemfdBytes).
Result<std::string> ReadAll(int fd) {
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal(Errno("read", errno));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxMemfdBytes) return Status::InvalidArgument("too large");
  }
}

// A posix_spawn attribute and file actions, destroyed with the holder.
struct SpawnSetup {
  SpawnSetup() {
    ::posix_spawnattr_init(&attr);
    ::posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    ::posix_spawnattr_destroy(&attr);
    ::posix_spawn_file_actions_destroy(&actions);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
};

// The signals the agent and the launcher handle or ignore, back to their
// defaults in a child.
const int kResetSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};

// In the launcher's child: becomes the shim for `request` and never returns.
[[noreturn]] void BecomeShim(const Request& request, const int fds[kRequestFds], pid_t launcher,
                             char* attempt_arg, size_t attempt_arg_size) {
  if (request.agent_pid != 0) {
    // Dies with the launcher, which dies with the agent (--on-exit kill):
    // SIGTERM, which the shim takes as "stop the job". A launcher already
    // gone (before the prctl) leaves nothing to start.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) _exit(1);
  }
  auto options = ReadAll(fds[0]);
  auto env = ReadAll(fds[1]);
  ::setsid();  // the shim outlives the agent and ignores its terminal
  int devnull = ::open("/dev/null", O_RDONLY);
  if (!options.ok() || !env.ok() || devnull < 0 || ::dup2(devnull, STDIN_FILENO) < 0 ||
      ::dup2(fds[2], STDOUT_FILENO) < 0) {
    std::fprintf(stderr, "gpupool-shim: cannot set up: %s\n",
                 (!options.ok() ? options.status().message()
                  : !env.ok()   ? env.status().message()
                                : Errno("dup2", errno))
                     .c_str());
    _exit(127);
  }
  // Nothing of the launcher's stays open: its socket, the request's memfds.
  ::close_range(STDERR_FILENO + 1, ~0U, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : kResetSignals) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The agent's environment at the request (this process lives until the
  // shim ends, so the strings are never freed).
  static std::vector<char*> entries;
  for (size_t at = 0; at < env->size(); at += std::strlen(env->data() + at) + 1) {
    entries.push_back(env->data() + at);
  }
  entries.push_back(nullptr);
  environ = entries.data();
  // The attempt in the command line (ps), within the argument's own bytes.
  if (attempt_arg != nullptr) {
    std::memset(attempt_arg, 0, attempt_arg_size);
    std::memcpy(attempt_arg, request.attempt,
                std::min(attempt_arg_size - 1, ::strnlen(request.attempt, kAttemptChars)));
  }
  ::prctl(PR_SET_NAME, "gpupool-shim");
  int code = RunShimWithOptions(*options, launcher);
  std::fflush(nullptr);
  _exit(code);
}

// One request: reads it, forks the shim, answers. False when the agent's end
// closed.
bool ServeOne(pid_t self, char* attempt_arg, size_t attempt_arg_size) {
  Request request;
  iovec iov{&request, sizeof request};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kRequestFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(kSocketFd, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;  // the agent's end closed (or broke)
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  Reply reply;
  if (n != sizeof request || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
      fds.size() != kRequestFds) {
    reply.error = EINVAL;
  } else {
    const int raw[kRequestFds] = {fds[0].get(), fds[1].get(), fds[2].get()};
    pid_t pid = ::fork();
    if (pid == 0) BecomeShim(request, raw, self, attempt_arg, attempt_arg_size);
    if (pid < 0) reply.error = errno;
    reply.pid = pid > 0 ? pid : 0;
  }
  while (::send(kSocketFd, &reply, sizeof reply, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace

int ShimLauncher::Main(int argc, char** argv) {
  ::prctl(PR_SET_NAME, "gpupool-shim");
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(kSocketFd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
    std::fprintf(stderr, "gpupool-shim: started by hand? (no launcher socket on descriptor 3)\n");
    return 2;
  }
  // A broken socket is an error, not a signal. Its shims are reaped as they
  // end (so their CPU time, and their jobs', counts in the launcher's
  // children's time, as it did in the agent's before).
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  UniqueFd ended(::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!ended.valid()) {
    std::fprintf(stderr, "gpupool-shim: signalfd: %s\n", std::strerror(errno));
    return 2;
  }
  // The last argument is the placeholder each shim writes its attempt into.
  char* attempt_arg = argc >= 6 ? argv[5] : nullptr;
  size_t attempt_arg_size = attempt_arg != nullptr ? std::strlen(attempt_arg) + 1 : 0;
  const pid_t self = ::getpid();
  while (true) {
    pollfd p[2] = {{kSocketFd, POLLIN, 0}, {ended.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return 2;
    if (p[1].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(ended.get(), &si, sizeof si) == sizeof si) {
      }
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
    }
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
        !ServeOne(self, attempt_arg, attempt_arg_size)) {
      return 0;
    }
  }
}

ShimLauncher::~ShimLauncher() {
  std::lock_guard lock(mu_);
  StopLocked();
}

pid_t ShimLauncher::pid() const {
  std::lock_guard lock(mu_);
  return pid_;
}

Status ShimLauncher::StartLocked() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::Internal(Errno("socketpair", errno));
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  std::string argv0 = "gpupool-shim", cmd = kShimCommand, dd_flag = "--data-dir", data = data_dir_,
              at_flag = "--attempt", placeholder(kAttemptChars, '-');
  char* argv[] = {argv0.data(),   cmd.data(),         dd_flag.data(), data.data(),
                  at_flag.data(), placeholder.data(), nullptr};
  // posix_spawn, not fork: glibc's shares the agent's memory until the exec
  // (CLONE_VM|CLONE_VFORK, signals blocked meanwhile), so the child takes
  // no lock another thread of the agent may hold. The launcher: a new
  // session (its shims outlive the agent and ignore its terminal), stdin
  // and stdout /dev/null, stderr the agent's (the shims' rare messages land
  // in the agent log), the socket on descriptor 3 and nothing else of the
  // agent's open, default signal dispositions, nothing blocked.
  SpawnSetup spawn;
  sigset_t defaults, none;
  sigemptyset(&defaults);
  for (int sig : kResetSignals) sigaddset(&defaults, sig);
  sigemptyset(&none);
  int rc = ::posix_spawnattr_setflags(
      &spawn.attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  if (rc == 0) rc = ::posix_spawnattr_setsigdefault(&spawn.attr, &defaults);
  if (rc == 0) rc = ::posix_spawnattr_setsigmask(&spawn.attr, &none);
  for (int fd : {STDIN_FILENO, STDOUT_FILENO}) {
    if (rc == 0) {
      rc = ::posix_spawn_file_actions_addopen(&spawn.actions, fd, "/dev/null", O_RDWR, 0);
    }
  }
  if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&spawn.actions, theirs.get(), kSocketFd);
  if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&spawn.actions, kSocketFd + 1);
  pid_t pid = 0;
  // /proc/self/exe: the agent's own binary, even after it was replaced on disk.
  if (rc == 0) {
    rc = ::posix_spawn(&pid, "/proc/self/exe", &spawn.actions, &spawn.attr, argv, environ);
  }
  if (rc != 0) return Status::Internal(Errno("posix_spawn of the shim launcher", rc));
  sock_ = ours.Release();
  pid_ = pid;
  return Status::Ok();
}

void ShimLauncher::StopLocked() {
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  if (pid_ <= 0) return;
  // It leaves once it sees the end of its socket; one that does not (stopped
  // by hand, say) is killed.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pid_ = 0;
}

Result<pid_t> ShimLauncher::RequestLocked(int options_fd, int env_fd, int status_fd,
                                          const std::string& attempt_id, int agent_pid,
                                          bool* sent) {
  *sent = false;
  Request request;
  request.agent_pid = agent_pid;
  std::memcpy(request.attempt, attempt_id.data(), std::min(attempt_id.size(), kAttemptChars - 1));
  iovec iov{&request, sizeof request};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kRequestFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * kRequestFds);
  const int fds[kRequestFds] = {options_fd, env_fd, status_fd};
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t n;
  while ((n = ::sendmsg(sock_, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (n < 0) return Status::Unavailable(Errno("the shim launcher", errno));
  *sent = true;
  pollfd p{sock_, POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, kReplyTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return Status::Internal("the shim launcher did not answer");
  Reply reply;
  while ((n = ::recv(sock_, &reply, sizeof reply, 0)) < 0 && errno == EINTR) {
  }
  if (n != sizeof reply) return Status::Internal("the shim launcher ended");
  if (reply.pid <= 0) {
    return Status::Internal(Errno("the shim launcher's fork", reply.error ? reply.error : EIO));
  }
  return static_cast<pid_t>(reply.pid);
}

Result<pid_t> ShimLauncher::Spawn(std::string_view options_json, int status_fd,
                                  const std::string& attempt_id, int agent_pid) {
  GP_ASSIGN_OR_RETURN(UniqueFd options, SealedMemfd("gpupool-shim-options", options_json));
  GP_ASSIGN_OR_RETURN(UniqueFd env, SealedMemfd("gpupool-shim-env", EnvironmentBlock()));
  std::lock_guard lock(mu_);
  // A launcher that died since the last start is started again, once: a
  // request it never received may be sent again, one it may have acted on
  // may not (two shims for one task).
  for (int tries = 0;; ++tries) {
    if (sock_ < 0) GP_RETURN_IF_ERROR(StartLocked());
    bool sent = false;
    auto pid = RequestLocked(options.get(), env.get(), status_fd, attempt_id, agent_pid, &sent);
    if (pid.ok()) return pid;
    StopLocked();
    if (sent || tries > 0) return pid.status();
  }
}

}  // namespace gpupool::agent
