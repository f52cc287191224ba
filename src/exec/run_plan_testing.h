// For tests only (launch_test.cpp, sandbox_test.cpp, executors_test.cpp):
// temporary directories, executable scripts, and RunningPlan, which runs a
// LaunchPlan the way the agent's shim does (agent/shim.cpp): SpawnPlan with
// /dev/null as stdin, pipes as stdout and stderr and a close-on-exec error
// pipe; the parent reads the launch failure (if any), collects the output
// and reaps the child.
//
// Single-threaded use, one RunningPlan at a time per test. On a timeout every
// descendant of the test process is killed, so nothing outlives a test.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "exec/launch.h"
#include "exec/process_tree.h"

namespace gpupool::exec::test_support {

// A fresh directory directly under /tmp with `mode`, removed with what it
// holds.
inline std::string MakeTempDir(mode_t mode) {
  char tmpl[] = "/tmp/gpupool-exec-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return "";
  ::chmod(tmpl, mode);
  return tmpl;
}

class TempDir {
 public:
  explicit TempDir(mode_t mode = 0700) : path_(MakeTempDir(mode)) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes a script (or any file) with mode 0755.
inline void WriteExecutable(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
  ::chmod(path.c_str(), 0755);
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class RunningPlan {
 public:
  // Starts `plan` (SpawnPlan); returns once the exec happened or failed.
  explicit RunningPlan(const LaunchPlan& plan) {
    int out[2], err[2], exec[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
        ::pipe2(exec, O_CLOEXEC) != 0) {
      return;
    }
    sigset_t mask;
    ::sigprocmask(SIG_SETMASK, nullptr, &mask);
    auto spawned = SpawnPlan(plan, {-1, out[1], err[1]}, mask, exec[1]);
    pid_ = spawned.ok() ? *spawned : -1;
    if (pid_ > 0) ::setpgid(pid_, pid_);
    ::close(out[1]);
    ::close(err[1]);
    ::close(exec[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    int failure[2] = {0, 0};
    if (::read(exec[0], failure, sizeof failure) == sizeof failure) {
      failure_step_ = failure[0];
      failure_errno_ = failure[1];
    }
    ::close(exec[0]);
  }
  RunningPlan(const RunningPlan&) = delete;
  RunningPlan& operator=(const RunningPlan&) = delete;
  ~RunningPlan() {
    if (!reaped_ && pid_ > 0) {
      KillAll();
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  bool launch_failed() const { return failure_step_ != 0; }
  int failure_step() const { return failure_step_; }
  int failure_errno() const { return failure_errno_; }

  // Reads until stdout holds `text`; false when the output ended or the
  // time ran out first.
  bool WaitForStdout(std::string_view text, int timeout_ms = 10'000) {
    auto deadline = Deadline(timeout_ms);
    while (out_.find(text) == std::string::npos) {
      if (out_fd_ < 0 || !ReadSome(deadline)) return false;
    }
    return true;
  }

  // Reads both streams to their end and reaps the child. On a timeout kills
  // every process the test started and returns false.
  bool Finish(int timeout_ms = 15'000) {
    auto deadline = Deadline(timeout_ms);
    bool in_time = true;
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      if (!ReadSome(deadline)) {
        in_time = false;
        break;
      }
    }
    while (in_time && !reaped_) {
      pid_t w = ::waitpid(pid_, &wait_status_, WNOHANG);
      if (w == pid_) {
        reaped_ = true;
      } else if (std::chrono::steady_clock::now() >= deadline) {
        in_time = false;
      } else {
        ::usleep(5'000);
      }
    }
    if (!in_time) {
      KillAll();
      ::waitpid(pid_, &wait_status_, 0);
      reaped_ = true;
    }
    return in_time;
  }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  int wait_status() const { return wait_status_; }
  bool exited_with(int code) const {
    return reaped_ && WIFEXITED(wait_status_) && WEXITSTATUS(wait_status_) == code;
  }
  // The last non-empty line of stderr, as the shim hands it to ExitReason.
  std::string last_stderr_line() const {
    std::string_view s = err_;
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    size_t nl = s.rfind('\n');
    return std::string(nl == std::string_view::npos ? s : s.substr(nl + 1));
  }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  static TimePoint Deadline(int timeout_ms) {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  }
  static void KillAll() { SignalTree(::getpid(), SIGKILL); }

  // One poll and the reads it allows; false once the deadline passed.
  bool ReadSome(TimePoint deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left)) < 0) return errno == EINTR;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        (i == 0 ? out_fd_ : err_fd_) = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int failure_step_ = 0;
  int failure_errno_ = 0;
  std::string out_, err_;
  int wait_status_ = 0;
  bool reaped_ = false;
};

}  // namespace gpupool::exec::test_support
