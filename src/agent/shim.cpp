#include "agent/shim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "agent/task_files.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/json_reader.h"
#include "common/units.h"
#include "proto/messages.h"

namespace gpupool::agent {
namespace {

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Splits a stream into lines and appends each as a record to output.log.
class LineSink {
 public:
  LineSink(int log_fd, char stream) : log_fd_(log_fd), stream_(stream) {}
  void Add(const char* data, size_t n, int64_t now_ms) {
    buf_.append(data, n);
    size_t start = 0;
    while (true) {
      size_t nl = buf_.find('\n', start);
      if (nl == std::string::npos) {
        if (buf_.size() - start >= kMaxLineBytes) {  // an endless line: cut it
          Emit(std::string_view(buf_).substr(start, kMaxLineBytes), now_ms);
          start += kMaxLineBytes;
          continue;
        }
        break;
      }
      std::string_view line(buf_.data() + start, nl - start);
      while (line.size() > kMaxLineBytes) {
        Emit(line.substr(0, kMaxLineBytes), now_ms);
        line.remove_prefix(kMaxLineBytes);
      }
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      Emit(line, now_ms);
      start = nl + 1;
    }
    buf_.erase(0, start);
  }
  void Finish(int64_t now_ms) {
    if (!buf_.empty()) Emit(buf_, now_ms);
    buf_.clear();
  }

 private:
  void Emit(std::string_view line, int64_t now_ms) {
    // One write per record: O_APPEND keeps records whole.
    WriteAll(log_fd_, EncodeRecord(stream_, now_ms, line));
  }
  int log_fd_;
  char stream_;
  std::string buf_;
};

// The grace the agent asked for when it stopped the task, or `fallback`.
int64_t StopGraceMs(const TaskPaths& paths, int64_t fallback) {
  auto text = ReadFile(paths.stop_grace());
  if (!text.ok()) return fallback;
  int64_t ms = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), ms);
  if (ec != std::errc() || end != text->data() + text->size() || ms <= 0) return fallback;
  return ms;
}

std::vector<std::string> JobEnvironment(const proto::StartTask& task, const std::string& work) {
  std::vector<std::string> env;
  for (const char* keep : {"PATH", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "SHELL"}) {
    if (const char* v = ::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
  }
  if (!::getenv("PATH")) env.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  env.push_back("HOME=" + work);
  env.push_back("TMPDIR=" + work);
  for (const auto& [k, v] : task.spec.env) env.push_back(k + "=" + v);
  std::string gpus;
  for (const auto& g : task.gpu_uuids) gpus += (gpus.empty() ? "" : ",") + g;
  env.push_back("CUDA_VISIBLE_DEVICES=" + gpus);
  env.push_back("GPUPOOL_GPUS=" + gpus);
  // A share of a GPU: how much, so the job (and the sharing layer) can keep to it.
  if (task.gpu_milli > 0 && task.gpu_milli < 1000) {
    env.push_back("GPUPOOL_GPU_MILLI=" + std::to_string(task.gpu_milli));
    env.push_back("GPUPOOL_GPU_MEMORY_MIB=" + std::to_string(task.gpu_memory_mib));
  }
  env.push_back("GPUPOOL_JOB_ID=" + std::to_string(task.job_id));
  env.push_back("GPUPOOL_ATTEMPT_ID=" + task.attempt_id);
  return env;
}

}  // namespace

int RunShim(const ShimOptions& options) {
  RealClock clock;
  TaskPaths paths{options.task_dir};
  const proto::StartTask& task = options.task;
  int log_fd = ::open(paths.output_log().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    // Nothing can be recorded: the agent sees the shim gone without a result.
    std::fprintf(stderr, "gpupool-shim %s: cannot open output.log: %s\n", task.attempt_id.c_str(),
                 std::strerror(errno));
    return 1;
  }
  auto record_result = [&](const TaskResult& r) {
    bool ok = WriteAll(log_fd, EncodeRecord('r', clock.NowMs(), EncodeResult(r)));
    return ok && ::fsync(log_fd) == 0;
  };
  auto fail_early = [&](const std::string& why) {
    TaskResult r;
    r.exit_code = 127;
    r.failed = true;
    r.reason = why;
    r.finished_ms = clock.NowMs();
    record_result(r);
    return 1;
  };

  sigset_t mask, old_mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  ::signal(SIGPIPE, SIG_IGN);
  int sig_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return fail_early(std::string("cannot start: pipe: ") + std::strerror(errno));
  }

  // Everything the child needs is prepared before fork.
  std::vector<std::string> env = JobEnvironment(task, paths.work_dir());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_s;
  if (!task.spec.run.empty())
    argv_s = {"/bin/sh", "-c", task.spec.run};
  else
    argv_s = task.spec.command;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string work = paths.work_dir();

  pid_t pid = ::fork();
  if (pid < 0) return fail_early(std::string("cannot start: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    // Only the pipes and the exec-error pipe (close-on-exec) stay open.
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], devnull}) {
      if (fd > 2) ::close(fd);
    }
    ::close_range(3, static_cast<unsigned>(exec_pipe[1]) - 1, 0);
    ::close_range(static_cast<unsigned>(exec_pipe[1]) + 1, ~0U, 0);
    if (::chdir(work.c_str()) != 0) {
      int e = errno;
      (void)!::write(exec_pipe[1], &e, sizeof e);
      _exit(127);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!::write(exec_pipe[1], &e, sizeof e);
    _exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent, so kill(-pid) works at once
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);

  TaskResult result;
  int exec_errno = 0;
  if (::read(exec_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
    result.failed = true;
    result.reason = "cannot start " + argv_s[0] + ": " + std::strerror(exec_errno);
  }
  ::close(exec_pipe[0]);
  {
    pid_t self = ::getpid();
    ShimPids pids{self, ProcessStartTime(self).value_or(0), pid};
    (void)WriteAll(log_fd, EncodeRecord('p', clock.NowMs(), EncodePids(pids)));
    std::string started = "started " + std::to_string(pid) + "\n";
    (void)WriteAll(STDOUT_FILENO, started);  // the agent may be gone: ignore errors
  }

  LineSink out_sink(log_fd, 'o'), err_sink(log_fd, 'e');
  if (result.failed) {
    std::string msg = "gpupool: " + result.reason + "\n";
    err_sink.Add(msg.data(), msg.size(), clock.NowMs());
  }
  int64_t start_ms = clock.NowMs();
  int64_t deadline = task.spec.max_runtime_ms > 0 ? start_ms + task.spec.max_runtime_ms : 0;
  int64_t kill_at = 0;      // when to send SIGKILL to the group
  int64_t drain_until = 0;  // after the job exits, how long to wait for pipes
  bool exited = false;
  int wstatus = 0;
  bool out_open = true, err_open = true;

  auto stop_group = [&](const std::string& reason, bool failed, int64_t grace_ms) {
    if (kill_at != 0 || exited) return;
    ::kill(-pid, SIGTERM);
    kill_at = clock.NowMs() + grace_ms;
    if (result.reason.empty()) {
      result.reason = reason;
      result.failed = failed;
    }
  };

  char buf[65536];
  while (!exited || out_open || err_open) {
    int64_t now = clock.NowMs();
    if (deadline && now >= deadline && !exited) {
      stop_group("exceeded max_runtime of " + FormatDurationMs(task.spec.max_runtime_ms), true,
                 options.kill_grace_ms);
    }
    if (kill_at && now >= kill_at && !exited) {
      ::kill(-pid, SIGKILL);
      kill_at = now + 1000;
    }
    if (exited && drain_until && now >= drain_until) break;
    int64_t wake = 1000;
    if (deadline && !exited) wake = std::min(wake, std::max<int64_t>(deadline - now, 0));
    if (kill_at && !exited) wake = std::min(wake, std::max<int64_t>(kill_at - now, 0));
    pollfd fds[3] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open ? err_pipe[0] : -1, POLLIN, 0},
                     {sig_fd, POLLIN, 0}};
    int n = ::poll(fds, 3, static_cast<int>(wake));
    if (n < 0 && errno != EINTR) break;
    now = clock.NowMs();
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      LineSink& sink = i == 0 ? out_sink : err_sink;
      if (r > 0) {
        sink.Add(buf, static_cast<size_t>(r), now);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        sink.Finish(now);
        (i == 0 ? out_open : err_open) = false;
      }
    }
    if (fds[2].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(sig_fd, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGCHLD) continue;
        std::string reason = "stopped";
        if (auto why = ReadFile(paths.stop_reason()); why.ok() && !why->empty()) {
          reason = "stopped: " + *why;
        }
        stop_group(reason, false, StopGraceMs(paths, options.kill_grace_ms));
      }
    }
    if (!exited) {
      pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
      if (w == pid) {
        exited = true;
        // Leftover processes of the job would hold the pipes open forever.
        ::kill(-pid, SIGKILL);
        drain_until = now + 2000;
      }
    }
  }
  out_sink.Finish(clock.NowMs());
  err_sink.Finish(clock.NowMs());
  if (!exited) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &wstatus, 0);
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.signal = WTERMSIG(wstatus);
    result.exit_code = 128 + result.signal;
  }
  result.finished_ms = clock.NowMs();
  bool recorded = record_result(result);
  ::close(log_fd);
  return recorded ? 0 : 1;
}

}  // namespace gpupool::agent
