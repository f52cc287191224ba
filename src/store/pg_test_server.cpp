#include "store/pg_test_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

extern char** environ;

#ifndef GPUPOOL_PG_SERVER_SCRIPT
#error "GPUPOOL_PG_SERVER_SCRIPT must be defined: the absolute path of tests/postgres/pg_server.sh"
#endif

namespace gpupool::testing {
namespace {

// Longer than anything the script waits for (60 s for the server to start,
// 60 s to stop), so that it is the script that says what went wrong.
constexpr auto kScriptTimeout = std::chrono::seconds(180);

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The caller's environment, plus the owner of the server for the script's
// watcher (this process; the directory is ours to remove).
std::vector<std::string> ScriptEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view v(*e);
    if (v.starts_with("GPUPOOL_PG_OWNER_PID=") || v.starts_with("GPUPOOL_PG_OWNER_REMOVES_DIR=")) {
      continue;
    }
    env.emplace_back(v);
  }
  env.push_back("GPUPOOL_PG_OWNER_PID=" + std::to_string(getpid()));
  env.push_back("GPUPOOL_PG_OWNER_REMOVES_DIR=1");
  return env;
}

struct Pipe {
  int fds[2] = {-1, -1};
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseWriteEnd() {
    close(fds[1]);
    fds[1] = -1;
  }
};

struct ScriptRun {
  int wait_status = 0;
  std::string out;
  std::string err;
};

// Runs `bash SCRIPT args...` with stdin /dev/null, in a process group of its
// own, with no descriptor of ours but its stdout and stderr pipes, and
// collects both.
Result<ScriptRun> Spawn(const std::vector<std::string>& args) {
  Pipe out, err;
  if (pipe2(out.fds, O_CLOEXEC) != 0 || pipe2(err.fds, O_CLOEXEC) != 0) {
    return Status::FromErrno("pipe2");
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fds[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // The server outlives the script: no socket or pipe of the test binary
  // may live on in it.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> argv_s = {"bash", GPUPOOL_PG_SERVER_SCRIPT};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = ScriptEnvironment();
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, "bash", &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return Status::Internal(std::string("cannot run bash ") + GPUPOOL_PG_SERVER_SCRIPT + ": " +
                            std::strerror(rc));
  }
  out.CloseWriteEnd();
  err.CloseWriteEnd();

  // Both pipes until EOF (the script leaves nothing behind that holds them:
  // the server's output goes to its log, the watcher's to /dev/null).
  ScriptRun run;
  const auto deadline = std::chrono::steady_clock::now() + kScriptTimeout;
  bool timed_out = false;
  pollfd fds[2] = {{out.fds[0], POLLIN, 0}, {err.fds[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Status::FromErrno("poll");
      kill(-pid, SIGKILL);
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      return s;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;  // EOF (the Pipe closes it)
      }
    }
  }
  if (timed_out) kill(-pid, SIGKILL);
  while (waitpid(pid, &run.wait_status, 0) < 0) {
    if (errno != EINTR) return Status::FromErrno("waitpid");
  }
  if (timed_out) {
    return Status::DeadlineExceeded(std::string(GPUPOOL_PG_SERVER_SCRIPT) + " " + args[0] + " " +
                                    args[1] + ": still running after " +
                                    std::to_string(kScriptTimeout.count()) + " s; killed; " +
                                    Trim(run.err));
  }
  return run;
}

}  // namespace

PgTestServer::PgTestServer(std::string dir) : dir_(std::move(dir)), owner_(getpid()) {}

Result<std::string> PgTestServer::RunScript(std::string_view command) const {
  GP_ASSIGN_OR_RETURN(ScriptRun run, Spawn({std::string(command), dir_}));
  if (!WIFEXITED(run.wait_status) || WEXITSTATUS(run.wait_status) != 0) {
    std::string how = WIFEXITED(run.wait_status)
                          ? "exit status " + std::to_string(WEXITSTATUS(run.wait_status))
                          : "signal " + std::to_string(WTERMSIG(run.wait_status));
    std::string err = Trim(run.err);
    if (err.empty()) err = "(nothing on stderr)";
    return Status::Internal(std::string(GPUPOOL_PG_SERVER_SCRIPT) + " " + std::string(command) +
                            " " + dir_ + " failed (" + how + "): " + err);
  }
  return Trim(run.out);
}

Result<std::unique_ptr<PgTestServer>> PgTestServer::Start() {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / "gpupool-pg-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno("mkdtemp " + tmpl);
  // From here on the destructor removes the directory (and stops whatever
  // the script started), also when starting fails.
  std::unique_ptr<PgTestServer> server(new PgTestServer(tmpl));
  GP_ASSIGN_OR_RETURN(std::string url, server->RunScript("start"));
  if (!url.starts_with("postgresql://") || url.find('\n') != std::string::npos) {
    return Status::Internal(std::string(GPUPOOL_PG_SERVER_SCRIPT) + " start " + server->dir_ +
                            ": expected one URL on stdout, got \"" + url + "\"");
  }
  server->url_ = std::move(url);
  return server;
}

PgTestServer::~PgTestServer() {
  if (getpid() != owner_) return;  // a forked child's exit: the server is its parent's
  Status s = Stop();
  if (!s.ok()) std::fprintf(stderr, "PgTestServer: %s\n", s.ToString().c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  if (ec)
    std::fprintf(stderr, "PgTestServer: cannot remove %s: %s\n", dir_.c_str(),
                 ec.message().c_str());
}

std::string PgTestServer::UrlFor(const std::string& database) const {
  std::string base = url_.substr(0, url_.rfind('/') + 1);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : database) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-' || c == '.') {
      base += static_cast<char>(c);
    } else {
      base += '%';
      base += kHex[c >> 4];
      base += kHex[c & 0xF];
    }
  }
  return base;
}

Status PgTestServer::Kill() { return RunScript("kill").status(); }

Status PgTestServer::Stop() { return RunScript("stop").status(); }

Status PgTestServer::Restart() {
  GP_ASSIGN_OR_RETURN(std::string url, RunScript("restart"));
  if (url != url_) {
    return Status::Internal("pg_server.sh restart " + dir_ + ": the server came back as \"" + url +
                            "\", not " + url_);
  }
  return Status::Ok();
}

Result<PgTestServer*> SharedPgTestServer() {
  static std::mutex mu;
  static std::unique_ptr<PgTestServer> server;  // destroyed (stopped) at exit
  static Status error;
  std::lock_guard<std::mutex> lock(mu);
  if (server) return server.get();
  if (!error.ok()) return error;
  auto started = PgTestServer::Start();
  if (!started.ok()) {
    error = started.status().WithContext("cannot start the tests' PostgreSQL server");
    return error;
  }
  server = std::move(started).value();
  return server.get();
}

}  // namespace gpupool::testing
