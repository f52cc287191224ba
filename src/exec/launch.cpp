#include "exec/launch.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "exec/limits.h"

namespace gpupool::exec {
// A LaunchPlan as the child uses it: every string and array built, so the
// child of a vfork (which shares this memory) allocates nothing.
struct PreparedPlan {
  const LaunchPlan* plan = nullptr;
  std::vector<int> keep;  // sorted: plan.keep_fds and the error pipe
  std::vector<std::string> stage_targets;
  std::vector<char*> argv, envp;
  // Where execve looks, in order (execvpe's search of the plan's PATH).
  std::vector<std::string> candidates;
  // {"/bin/sh", <candidate>, argv[1]..., nullptr}: a file without a "#!"
  // line runs as a shell script, as execvpe runs it.
  std::vector<char*> script_argv;
};

namespace {

[[noreturn]] void Fail(int error_fd, LaunchStep step, int err) {
  int msg[2] = {static_cast<int>(step), err};
  (void)!::write(error_fd, msg, sizeof msg);
  _exit(127);
}

// Closes every descriptor from 3 up except those in `keep` (sorted).
void CloseAllExcept(const std::vector<int>& keep) noexcept {
  unsigned next = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > next) ::close_range(next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(next, ~0U, 0);
}

PreparedPlan Prepare(const LaunchPlan& plan, int error_fd) {
  PreparedPlan p;
  p.plan = &plan;
  p.keep = plan.keep_fds;
  p.keep.push_back(error_fd);
  std::sort(p.keep.begin(), p.keep.end());
  for (const auto& b : plan.stage_binds) p.stage_targets.push_back(plan.stage_dir + "/" + b.name);
  for (const auto& a : plan.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (const auto& e : plan.env) p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  if (plan.argv.empty() || plan.argv[0].empty()) return p;  // nothing to run: ENOENT
  const std::string& program = plan.argv[0];
  if (program.find('/') != std::string::npos) {
    p.candidates.push_back(program);
  } else {
    // The job's PATH; without one, the caller's; without that, execvpe's default.
    std::optional<std::string> path = EnvValue(plan.env, "PATH");
    const char* caller_path = ::getenv("PATH");
    if (!path) path = caller_path != nullptr ? caller_path : "/bin:/usr/bin";
    size_t i = 0;
    while (i <= path->size()) {
      size_t j = std::min(path->find(':', i), path->size());
      std::string dir = path->substr(i, j - i);
      p.candidates.push_back((dir.empty() ? "." : dir) + "/" + program);  // "": here
      i = j + 1;
    }
  }
  static char kShell[] = "/bin/sh";
  p.script_argv = {kShell, nullptr};
  p.script_argv.insert(p.script_argv.end(), p.argv.begin() + 1, p.argv.end());
  return p;
}

// execvpe over the prepared candidates; returns (with errno) when none ran.
void ExecCandidates(PreparedPlan& p) noexcept {
  bool denied = false;
  for (std::string& candidate : p.candidates) {
    ::execve(candidate.c_str(), p.argv.data(), p.envp.data());
    switch (errno) {
      case EACCES:
        denied = true;
        [[fallthrough]];
      case ENOENT:
      case ENOTDIR:
      case ESTALE:
      case ENODEV:
      case ETIMEDOUT:
        continue;
      case ENOEXEC:
        p.script_argv[1] = candidate.data();
        ::execve(p.script_argv[0], p.script_argv.data(), p.envp.data());
        return;
      default:
        return;
    }
  }
  errno = denied ? EACCES : ENOENT;
}

// The plan's steps in the child, with stdin/stdout/stderr in place; sets
// `mask` (unless null) just before the exec. Allocates nothing.
[[noreturn]] void RunPrepared(PreparedPlan& p, int error_fd, const sigset_t* mask) noexcept {
  const LaunchPlan& plan = *p.plan;
  CloseAllExcept(p.keep);
  for (int fd : plan.keep_fds) {
    int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
  }
  if (!plan.cgroup_procs.empty()) {
    int fd = ::open(plan.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) Fail(error_fd, LaunchStep::kCgroup, errno);
    ::close(fd);
  }
  if (!ApplyRlimits(plan.rlimits)) Fail(error_fd, LaunchStep::kRlimits, errno);
  if (!plan.stage_dir.empty()) {
    const char* stage = plan.stage_dir.c_str();
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0) {
      Fail(error_fd, LaunchStep::kStage, errno);
    }
    for (size_t i = 0; i < plan.stage_binds.size(); ++i) {
      const char* source = plan.stage_binds[i].source.c_str();
      const char* target = p.stage_targets[i].c_str();
      struct stat st;
      if (::stat(source, &st) != 0) Fail(error_fd, LaunchStep::kStage, errno);
      if (S_ISDIR(st.st_mode)) {
        if (::mkdir(target, 0755) != 0) Fail(error_fd, LaunchStep::kStage, errno);
      } else {
        int fd = ::open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) Fail(error_fd, LaunchStep::kStage, errno);
        ::close(fd);
      }
      if (::mount(source, target, nullptr, MS_BIND | MS_REC, nullptr) != 0) {
        Fail(error_fd, LaunchStep::kStage, errno);
      }
    }
  }
  if (plan.gid >= 0) {
    gid_t gid = static_cast<gid_t>(plan.gid);
    if (::setgroups(1, &gid) != 0 || ::setresgid(gid, gid, gid) != 0)
      Fail(error_fd, LaunchStep::kSetUser, errno);
  }
  if (plan.uid >= 0) {
    uid_t uid = static_cast<uid_t>(plan.uid);
    if (::setresuid(uid, uid, uid) != 0) Fail(error_fd, LaunchStep::kSetUser, errno);
  }
  if (!plan.cwd.empty() && ::chdir(plan.cwd.c_str()) != 0) {
    Fail(error_fd, LaunchStep::kChdir, errno);
  }
  if (mask != nullptr) ::sigprocmask(SIG_SETMASK, mask, nullptr);
  ExecCandidates(p);
  Fail(error_fd, LaunchStep::kExec, errno);
}

// The child of SpawnPlan, on the parent's memory until it execs.
[[noreturn]] void RunSpawned(PreparedPlan& p, const ChildStdio& stdio, const sigset_t& mask,
                             int error_fd) noexcept {
  ::setpgid(0, 0);
  // Its own copy of the dispositions (vfork shares memory, not handlers).
  ::signal(SIGPIPE, SIG_DFL);
  int in = stdio.in >= 0 ? stdio.in : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::dup2(in, 0);
  if (stdio.out >= 0) ::dup2(stdio.out, 1);
  if (stdio.err >= 0) ::dup2(stdio.err, 2);
  RunPrepared(p, error_fd, &mask);
}

// Apart from SpawnPlan so that the frame vfork returns to twice holds
// nothing the child changes.
__attribute__((noinline)) pid_t VforkPrepared(PreparedPlan& p, const ChildStdio& stdio,
                                              const sigset_t& mask, int error_fd) {
  pid_t pid = ::vfork();
  if (pid == 0) RunSpawned(p, stdio, mask, error_fd);
  return pid;
}

}  // namespace

void ExecPlan(const LaunchPlan& plan, int error_fd) {
  PreparedPlan p = Prepare(plan, error_fd);
  RunPrepared(p, error_fd, nullptr);
}

struct ForkExec::Prepared {
  PreparedPlan plan;
};

ForkExec::ForkExec(const LaunchPlan& plan, int error_fd)
    : p_(std::make_unique<Prepared>(Prepared{Prepare(plan, error_fd)})), error_fd_(error_fd) {}

ForkExec::~ForkExec() = default;

void ForkExec::Run() noexcept { RunPrepared(p_->plan, error_fd_, nullptr); }

Result<pid_t> SpawnPlan(const LaunchPlan& plan, const ChildStdio& stdio, const sigset_t& mask,
                        int error_fd) {
  PreparedPlan p = Prepare(plan, error_fd);
  pid_t pid = VforkPrepared(p, stdio, mask, error_fd);
  if (pid < 0) return Status::Internal(std::string("vfork: ") + std::strerror(errno));
  return pid;
}

bool EnvEntryIs(std::string_view entry, std::string_view key) {
  return entry.size() > key.size() && entry.starts_with(key) && entry[key.size()] == '=';
}

std::optional<std::string> EnvValue(const std::vector<std::string>& env, std::string_view key) {
  for (auto it = env.rbegin(); it != env.rend(); ++it) {
    if (EnvEntryIs(*it, key)) return it->substr(key.size() + 1);
  }
  return std::nullopt;
}

std::string FindProgram(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) {
    return ::access(program.c_str(), X_OK) == 0 ? program : "";
  }
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find(':', i);
    if (j == std::string::npos) j = path.size();
    std::string dir = path.substr(i, j - i);
    if (!dir.empty()) {
      std::string candidate = dir + "/" + program;
      struct stat st;
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          ::access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
    }
    i = j + 1;
  }
  return "";
}

std::string DescribeLaunchFailure(const LaunchPlan& plan, int step, int err) {
  std::string why = std::strerror(err);
  switch (static_cast<LaunchStep>(step)) {
    case LaunchStep::kCgroup:
      return "cannot start: cannot join cgroup " + plan.cgroup_procs + ": " + why;
    case LaunchStep::kRlimits:
      return "cannot start: cannot set resource limits: " + why;
    case LaunchStep::kStage:
      return "cannot start: cannot prepare the sandbox's mounts in " + plan.stage_dir + ": " + why;
    case LaunchStep::kSetUser:
      return "cannot start: cannot become uid " + std::to_string(plan.uid) + ": " + why;
    case LaunchStep::kChdir:
      return "cannot start: cannot enter " + plan.cwd + ": " + why;
    case LaunchStep::kExec:
      return "cannot start " + (plan.argv.empty() ? std::string("(nothing)") : plan.argv[0]) +
             ": " + why;
  }
  return "cannot start: " + why;
}

}  // namespace gpupool::exec
