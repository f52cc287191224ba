#include "exec/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/unique_fd.h"
#include "exec/launch.h"

extern char** environ;

namespace gpupool::exec {
namespace {

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Collects one pipe: stdout split into lines, stderr kept as a tail.
struct Stream {
  UniqueFd* fd;
  bool lines;  // stdout
  std::string buf;
  bool eof = false;
};

// Reads what is available; returns false on EOF or error (the pipe is done).
bool ReadSome(Stream& s, const std::function<void(std::string_view)>& on_line) {
  char chunk[16384];
  while (true) {
    ssize_t n = ::read(s.fd->get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    s.buf.append(chunk, static_cast<size_t>(n));
    if (s.lines) {
      size_t start = 0;
      for (size_t nl; (nl = s.buf.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (on_line) on_line(std::string_view(s.buf).substr(start, nl - start));
      }
      s.buf.erase(0, start);
    } else if (s.buf.size() > 2 * kStderrTailBytes) {
      s.buf.erase(0, s.buf.size() - kStderrTailBytes);
    }
    // Non-blocking: keep reading until EAGAIN so a burst is taken whole.
  }
}

}  // namespace

namespace {

// Reads the child's pipes until it exits (or is killed for the timeout or
// `cancelled`), then reaps it.
CommandResult Collect(pid_t pid, UniqueFd& out_r, UniqueFd& err_r,
                      const std::function<void(std::string_view)>& on_stdout_line,
                      int64_t timeout_ms, const std::function<bool()>& cancelled) {
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  // A pidfd makes the child's exit a poll event; without one (old kernels)
  // the loop checks waitpid every few milliseconds.
  UniqueFd pidfd(
      static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));  // glibc 2.36's wrapper lacks C linkage
  if (pidfd.get() >= 0) ::fcntl(pidfd.get(), F_SETFD, FD_CLOEXEC);

  Stream out{&out_r, true, {}, false};
  Stream err{&err_r, false, {}, false};
  const int64_t deadline = timeout_ms > 0 ? SteadyNowMs() + timeout_ms : 0;
  CommandResult result;
  int status = 0;
  bool exited = false;
  bool have_status = false;  // false only if someone else reaped the child
  while (!exited) {
    int wait_ms = -1;
    if (deadline > 0) wait_ms = static_cast<int>(std::max<int64_t>(0, deadline - SteadyNowMs()));
    if (pidfd.get() < 0 && (wait_ms < 0 || wait_ms > 20)) wait_ms = 20;
    if (cancelled && (wait_ms < 0 || wait_ms > 200)) wait_ms = 200;
    pollfd fds[3];
    nfds_t n = 0;
    int out_i = -1, err_i = -1, pid_i = -1;
    if (!out.eof) fds[out_i = static_cast<int>(n++)] = {out_r.get(), POLLIN, 0};
    if (!err.eof) fds[err_i = static_cast<int>(n++)] = {err_r.get(), POLLIN, 0};
    if (pidfd.get() >= 0) fds[pid_i = static_cast<int>(n++)] = {pidfd.get(), POLLIN, 0};
    int ready = ::poll(fds, n, wait_ms);
    if (ready < 0 && errno != EINTR) break;  // cannot happen with valid fds; reap below
    if (ready > 0) {
      if (out_i >= 0 && fds[out_i].revents != 0) out.eof = !ReadSome(out, on_stdout_line);
      if (err_i >= 0 && fds[err_i].revents != 0) err.eof = !ReadSome(err, {});
    }
    if (pid_i < 0 || (ready > 0 && fds[pid_i].revents != 0)) {
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) exited = have_status = true;
      if (r < 0 && errno != EINTR) exited = true;
    }
    if (!exited && deadline > 0 && SteadyNowMs() >= deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    if (!exited && cancelled && cancelled()) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      result.cancelled = true;
      break;
    }
  }
  if (!exited) {
    pid_t r;
    while ((r = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    have_status = r == pid;
  }
  // What the child wrote before it exited is in the pipes now.
  if (!out.eof) ReadSome(out, on_stdout_line);
  if (!err.eof) ReadSome(err, {});
  if (!out.buf.empty() && on_stdout_line) on_stdout_line(out.buf);

  if (!have_status) {
    // Reaped elsewhere: nothing to report but that it ran.
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  if (err.buf.size() > kStderrTailBytes) err.buf.erase(0, err.buf.size() - kStderrTailBytes);
  result.stderr_tail = Trim(err.buf);
  return result;
}

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::function<void(std::string_view)>& on_stdout_line,
                                 int64_t timeout_ms, const std::function<bool()>& cancelled) {
  if (argv.empty() || argv[0].empty()) {
    return Status::InvalidArgument("cannot run a command: no program given");
  }
  const std::string& program = argv[0];
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::Internal("cannot run " + program + ": pipe: " + std::strerror(errno));
  }
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return Status::Internal("cannot run " + program + ": pipe: " + std::strerror(errno));
  }
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  ::posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);  // close_range(3, ~0U, 0)
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &empty);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(
      &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, program.c_str(), &actions, &attr, cargv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::Internal("cannot run " + program + ": " + std::strerror(rc));
  out_w.Reset();
  err_w.Reset();

  return Collect(pid, out_r, err_r, on_stdout_line, timeout_ms, cancelled);
}

Result<CommandResult> RunPlan(const LaunchPlan& plan,
                              const std::function<void(std::string_view)>& on_stdout_line,
                              int64_t timeout_ms, const std::function<bool()>& cancelled) {
  if (plan.argv.empty() || plan.argv[0].empty()) {
    return Status::InvalidArgument("cannot run a command: no program given");
  }
  const std::string& program = plan.argv[0];
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::Internal("cannot run " + program + ": pipe: " + std::strerror(errno));
  }
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return Status::Internal("cannot run " + program + ": pipe: " + std::strerror(errno));
  }
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return Status::Internal("cannot run " + program + ": pipe: " + std::strerror(errno));
  }
  UniqueFd exec_r(exec_pipe[0]), exec_w(exec_pipe[1]);
  ForkExec exec(plan, exec_w.get());
  pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("cannot run " + program + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    sigset_t empty;
    sigemptyset(&empty);
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(out_w.get(), 1) < 0 ||
        ::dup2(err_w.get(), 2) < 0) {
      _exit(127);
    }
    // A helper never gains privileges by exec (setuid files, file caps).
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    exec.Run();
  }
  ::setpgid(pid, pid);  // also here, so the group exists before a kill
  out_w.Reset();
  err_w.Reset();
  exec_w.Reset();
  CommandResult result = Collect(pid, out_r, err_r, on_stdout_line, timeout_ms, cancelled);
  int failure[2] = {0, 0};
  if (::read(exec_r.get(), failure, sizeof failure) == sizeof failure) {
    if (static_cast<LaunchStep>(failure[0]) == LaunchStep::kExec) {
      return Status::Internal("cannot run " + program + ": " + std::strerror(failure[1]));
    }
    return Status::Internal("cannot run " + program + ": " +
                            DescribeLaunchFailure(plan, failure[0], failure[1]));
  }
  return result;
}

std::string LastErrorLine(std::string_view text) {
  std::string line;
  size_t end = text.size();
  while (end > 0) {
    size_t start = text.rfind('\n', end - 1);
    start = start == std::string_view::npos ? 0 : start + 1;
    line = Trim(text.substr(start, end - start));
    if (!line.empty()) break;
    end = start == 0 ? 0 : start - 1;
  }
  // umoci's console format marks errors with "⨯" (and notes with "•").
  for (std::string_view mark : {"\u2a2f", "\u2022"}) {
    if (line.starts_with(mark)) line = Trim(std::string_view(line).substr(mark.size()));
  }
  // logrus text format: time="..." level=fatal msg="the message" [key=value...]
  size_t msg = line.find("msg=\"");
  if (msg == std::string::npos) return line;
  std::string out;
  for (size_t i = msg + 5; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      out += line[++i];
    } else if (line[i] == '"') {
      break;
    } else {
      out += line[i];
    }
  }
  return Trim(out);
}

}  // namespace gpupool::exec
