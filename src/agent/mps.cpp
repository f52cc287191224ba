#include "agent/mps.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "common/log.h"
#include "exec/launch.h"

extern char** environ;

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
constexpr const char* kDefaultControl = "nvidia-cuda-mps-control";
constexpr const char* kPidFile = "nvidia-cuda-mps-control.pid";
// The longest pipe directory: sun_path holds 107 bytes, and MPS's socket
// names there are up to about twenty.
constexpr size_t kMaxPipeDirBytes = 80;

// A GPU UUID as a directory name: NVML's are "GPU-" and hex; anything else
// (a path separator, a dot first) is refused rather than followed.
bool SafeName(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

Status MakeSharedDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  // The MPS server runs as its client's account and makes its pipes here.
  if (::chmod(dir.c_str(), 01777) != 0) {
    return Status::Internal("cannot chmod " + dir + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

// Whether `pid` runs (a zombie does not).
bool Alive(int64_t pid) {
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) return false;
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  size_t paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() ||
         ((*stat)[paren + 2] != 'Z' && (*stat)[paren + 2] != 'X');
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// posix_spawn: stdin from `in`, stdout and stderr to `out`, in a process
// group of its own, signals at their defaults. Returns errno, or 0.
int Spawn(const std::string& program, char* const* argv, char* const* env, const std::string& in,
          const std::string& out, pid_t& pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::posix_spawn_file_actions_adddup2(&fa, 1, 2);
  ::posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(
      &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  int err = ::posix_spawn(&pid, program.c_str(), &fa, &attr, argv, env);
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  return err;
}

// As Spawn, but the program runs in a mount namespace of its own whose
// /dev/shm is `shm_dir` (root only): the MPS server it starts shares its
// shared memory with the clients whose sandboxes bind the same directory,
// and with nothing else of the machine. The agent has threads: between
// fork and exec only system calls. Returns the pid, or -1 with `err`.
pid_t SpawnWithShm(const std::string& program, char* const* argv, char* const* env,
                   const std::string& in, const std::string& out, const std::string& shm_dir,
                   int& err) {
  const char* prog = program.c_str();
  const char* in_path = in.c_str();
  const char* out_path = out.c_str();
  const char* shm = shm_dir.c_str();
  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0) {
    err = errno;
    return -1;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    err = errno;
    ::close(status[0]);
    ::close(status[1]);
    return -1;
  }
  if (pid == 0) {
    auto fail = [&](int e) {
      (void)!::write(status[1], &e, sizeof e);
      ::_exit(127);
    };
    ::setpgid(0, 0);
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd_in = ::open(in_path, O_RDONLY);
    int fd_out = ::open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd_in < 0 || fd_out < 0) fail(errno);
    if (::dup2(fd_in, 0) < 0 || ::dup2(fd_out, 1) < 0 || ::dup2(fd_out, 2) < 0) fail(errno);
    if (::unshare(CLONE_NEWNS) != 0) fail(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(errno);
    if (::mount(shm, "/dev/shm", nullptr, MS_BIND, nullptr) != 0) fail(errno);
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);  // the status pipe closes on exec
    ::execve(prog, argv, env);
    fail(errno);
  }
  ::close(status[1]);
  int child_err = 0;
  ssize_t n;
  do {
    n = ::read(status[0], &child_err, sizeof child_err);
  } while (n < 0 && errno == EINTR);
  ::close(status[0]);
  if (n == static_cast<ssize_t>(sizeof child_err)) {
    ::waitpid(pid, nullptr, 0);
    err = child_err;
    return -1;
  }
  err = 0;
  return pid;
}

}  // namespace

Result<std::string> FindMpsControl(const std::string& configured, const std::string& path_env) {
  const std::string want = configured.empty() ? kDefaultControl : configured;
  std::string found = exec::FindProgram(want, path_env);
  if (found.empty()) {
    return Status::FailedPrecondition(
        "sharing: mps needs NVIDIA's " + want + ", which is not " +
        (want.find('/') != std::string::npos ? "an executable file"
                                             : "on the PATH (" + path_env + ")") +
        "; install the driver's MPS tools or name it with mps_control (--mps-control)");
  }
  return found;
}

// A GPU's directory: short (a Unix socket's path is at most 107 bytes, and
// MPS makes its sockets in the pipe directory), stable, and naming the GPU
// in its `gpu` file.
std::string MpsDaemons::GpuDir(const std::string& gpu_uuid) const {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a
  for (unsigned char c : gpu_uuid) h = (h ^ c) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return options_.dir + "/" + hex;
}
std::string MpsDaemons::PipeDir(const std::string& gpu_uuid) const {
  return GpuDir(gpu_uuid) + "/pipe";
}
std::string MpsDaemons::LogDir(const std::string& gpu_uuid) const {
  return GpuDir(gpu_uuid) + "/log";
}
std::string MpsDaemons::ShmDir(const std::string& gpu_uuid) const {
  return ::geteuid() == 0 ? GpuDir(gpu_uuid) + "/shm" : "";
}

std::vector<std::string> MpsDaemons::Running() const {
  std::vector<std::string> out;
  for (const auto& [uuid, d] : daemons_) out.push_back(uuid);
  return out;
}

int64_t MpsDaemons::PidOf(const std::string& gpu_uuid) const {
  auto text = ReadFileTrimmed(PipeDir(gpu_uuid) + "/" + kPidFile);
  if (!text.ok()) return 0;
  try {
    return std::stoll(*text);
  } catch (const std::exception&) {
    return 0;
  }
}

void MpsDaemons::Adopt() {
  if (adopted_) return;
  adopted_ = true;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    auto named = ReadFileTrimmed(entry.path().string() + "/gpu");
    if (!named.ok()) continue;
    const std::string uuid = *named;
    if (!SafeName(uuid) || daemons_.count(uuid) || GpuDir(uuid) != entry.path().string()) continue;
    int64_t pid = PidOf(uuid);
    if (!Alive(pid)) continue;
    GP_LOG(kInfo) << "MPS: taking over the control daemon of GPU " << uuid << " (pid " << pid
                  << ")";
    daemons_[uuid].pid = pid;
  }
}

Result<std::string> MpsDaemons::RunControl(const std::string& gpu_uuid,
                                           const std::vector<std::string>& args,
                                           const std::string& input, const std::string& shm_dir) {
  const std::string base = GpuDir(gpu_uuid);
  const bool daemon = input.empty();
  const std::string in_path = base + "/control.in";
  const std::string out_path = base + (daemon ? "/daemon.out" : "/control.out");
  GP_RETURN_IF_ERROR(WriteFileAtomic(in_path, input));
  // The agent's environment (the program may need its PATH and driver
  // libraries) with the daemon's own on top.
  std::vector<std::string> env;
  const std::vector<std::string> ours = {"CUDA_MPS_PIPE_DIRECTORY=" + PipeDir(gpu_uuid),
                                         "CUDA_MPS_LOG_DIRECTORY=" + LogDir(gpu_uuid),
                                         "CUDA_VISIBLE_DEVICES=" + gpu_uuid};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    bool replaced = std::any_of(ours.begin(), ours.end(), [&](const std::string& o) {
      return entry.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0;
    });
    if (!replaced) env.push_back(std::move(entry));
  }
  env.insert(env.end(), ours.begin(), ours.end());
  std::vector<std::string> argv = {options_.control};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv, cenv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (std::string& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  pid_t pid = 0;
  int err = 0;
  if (!shm_dir.empty()) {
    pid =
        SpawnWithShm(options_.control, cargv.data(), cenv.data(), in_path, out_path, shm_dir, err);
  } else {
    err = Spawn(options_.control, cargv.data(), cenv.data(), in_path, out_path, pid);
  }
  if (err != 0) {
    return Status::FailedPrecondition("cannot run " + options_.control + ": " + std::strerror(err));
  }
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return Status::Internal("waitpid failed");
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status::DeadlineExceeded(options_.control + " did not answer within " +
                                      std::to_string(options_.timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::string out = ReadFile(out_path).value_or("");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // Its last line says why.
    std::string last = out.substr(0, out.find_last_not_of(" \n") + 1);
    last = last.substr(last.rfind('\n') + 1);
    return Status::FailedPrecondition(options_.control + " failed (" +
                                      (WIFEXITED(status)
                                           ? "exit code " + std::to_string(WEXITSTATUS(status))
                                           : "signal " + std::to_string(WTERMSIG(status))) +
                                      ")" + (last.empty() ? "" : ": " + last));
  }
  return out;
}

Status MpsDaemons::Start(const std::string& gpu_uuid) {
  // Room for MPS's socket names after the directory (sun_path: 108 bytes).
  if (PipeDir(gpu_uuid).size() > kMaxPipeDirBytes) {
    return Status::FailedPrecondition(
        "the MPS pipe directory " + PipeDir(gpu_uuid) + " is longer than " +
        std::to_string(kMaxPipeDirBytes) +
        " bytes, too long for the Unix sockets MPS makes there; set mps_dir to a shorter "
        "directory");
  }
  // A fresh pipe directory: the jobs of the GPU's previous user could
  // write there (it is bound into their sandboxes), the next user's server
  // must not find anything of theirs.
  std::error_code ec;
  fs::remove_all(PipeDir(gpu_uuid), ec);
  GP_RETURN_IF_ERROR(MakeSharedDir(PipeDir(gpu_uuid)));
  GP_RETURN_IF_ERROR(MakeSharedDir(LogDir(gpu_uuid)));
  GP_RETURN_IF_ERROR(WriteFileAtomic(GpuDir(gpu_uuid) + "/gpu", gpu_uuid + "\n"));
  const std::string shm = ShmDir(gpu_uuid);
  if (!shm.empty()) {
    // Nothing of an earlier daemon's (another user's) shared memory is left.
    fs::remove_all(shm, ec);
    GP_RETURN_IF_ERROR(MakeSharedDir(shm));
  }
  GP_RETURN_IF_ERROR(RunControl(gpu_uuid, {"-d"}, "", shm).status());
  // The daemon writes its pid file once it listens.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  int64_t pid = 0;
  while ((pid = PidOf(gpu_uuid)) == 0 || !Alive(pid)) {
    if (std::chrono::steady_clock::now() > give_up) {
      return Status::FailedPrecondition("the MPS control daemon of GPU " + gpu_uuid +
                                        " did not start (see " + LogDir(gpu_uuid) +
                                        "/control.log)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  daemons_[gpu_uuid] = Daemon{pid, {}, false};
  GP_LOG(kInfo) << "MPS: started the control daemon of GPU " << gpu_uuid << " (pid " << pid
                << ", pipes in " << PipeDir(gpu_uuid) << ")";
  return Status::Ok();
}

void MpsDaemons::Quit(const std::string& gpu_uuid) {
  auto it = daemons_.find(gpu_uuid);
  if (it == daemons_.end()) return;
  if (Alive(it->second.pid)) {
    auto out = RunControl(gpu_uuid, {}, "quit\n");
    // `quit` is answered before the daemon has cleaned its pipe directory
    // up and left; a daemon started afresh there (or the directory's
    // removal) must not race that, so this waits for it to be gone.
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.timeout_ms);
    while (out.ok() && Alive(it->second.pid) && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!out.ok() || Alive(it->second.pid)) {
      GP_LOG(kWarn) << "MPS: quit of GPU " << gpu_uuid << ": "
                    << (out.ok() ? "the daemon did not leave" : out.status().message())
                    << "; killing the daemon";
      ::kill(static_cast<pid_t>(it->second.pid), SIGKILL);
    }
  }
  GP_LOG(kInfo) << "MPS: stopped the control daemon of GPU " << gpu_uuid;
  daemons_.erase(it);
}

Result<std::string> MpsDaemons::Acquire(const std::string& gpu_uuid, const std::string& user,
                                        const std::vector<MpsClient>& live) {
  if (!SafeName(gpu_uuid)) {
    return Status::InvalidArgument("GPU " + gpu_uuid + ": not a name MPS directories can take");
  }
  Adopt();
  std::set<std::string> others;
  bool held = false;
  for (const MpsClient& c : live) {
    if (c.gpu_uuid != gpu_uuid) continue;
    held = true;
    if (c.user != user) others.insert(c.user);
  }
  if (!others.empty()) {
    return Status::FailedPrecondition("GPU " + gpu_uuid +
                                      " is shared through MPS, which serves one user at a time: " +
                                      Join({others.begin(), others.end()}) + " holds it now");
  }
  auto it = daemons_.find(gpu_uuid);
  if (it != daemons_.end() && it->second.failed) {
    if (held) {
      return Status::FailedPrecondition("the MPS server of GPU " + gpu_uuid +
                                        " failed; it restarts once its shares have ended");
    }
    Quit(gpu_uuid);
    it = daemons_.end();
  }
  if (it != daemons_.end() && !Alive(it->second.pid)) {
    daemons_.erase(it);  // gone without shares to tell: started afresh
    it = daemons_.end();
  }
  if (it == daemons_.end()) GP_RETURN_IF_ERROR(Start(gpu_uuid));
  return PipeDir(gpu_uuid);
}

void MpsDaemons::Release(const std::vector<MpsClient>& live) {
  Adopt();
  std::set<std::string> used;
  for (const MpsClient& c : live) used.insert(c.gpu_uuid);
  std::vector<std::string> idle;
  for (const auto& [uuid, d] : daemons_) {
    if (!used.count(uuid)) idle.push_back(uuid);
  }
  for (const std::string& uuid : idle) Quit(uuid);
}

std::vector<MpsFailure> MpsDaemons::Check(const std::vector<MpsClient>& live, int64_t now_ms,
                                          int64_t every_ms) {
  std::vector<MpsFailure> out;
  if (last_check_ms_ >= 0 && now_ms - last_check_ms_ < every_ms) return out;
  last_check_ms_ = now_ms;
  Adopt();
  std::map<std::string, std::vector<std::string>> clients;
  for (const MpsClient& c : live) clients[c.gpu_uuid].push_back(c.attempt_id);
  for (auto& [uuid, d] : daemons_) {
    auto c = clients.find(uuid);
    if (d.failed || c == clients.end()) continue;
    std::string why;
    if (!Alive(d.pid)) {
      why = "the MPS control daemon (pid " + std::to_string(d.pid) + ") is gone";
    } else if (auto list = RunControl(uuid, {}, "get_server_list\n"); !list.ok()) {
      why = "the MPS control daemon does not answer: " + list.status().message();
    } else {
      std::set<int64_t> now;
      std::istringstream lines(*list);
      for (std::string line; std::getline(lines, line);) {
        try {
          size_t used = 0;
          int64_t pid = std::stoll(line, &used);
          if (pid > 0) now.insert(pid);
        } catch (const std::exception&) {
        }
      }
      for (int64_t pid : d.servers) {
        if (!now.count(pid)) {
          why = "the MPS server (pid " + std::to_string(pid) +
                ") exited while shares used it: a fatal fault of one client ends the server and "
                "its other clients";
          break;
        }
      }
      d.servers.insert(now.begin(), now.end());
    }
    if (why.empty()) continue;
    d.failed = true;
    out.push_back({uuid, why, c->second});
  }
  return out;
}

}  // namespace gpupool::agent
