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
namespace {

[[noreturn]] void Fail(int error_fd, LaunchStep step, int err) {
  int msg[2] = {static_cast<int>(step), err};
  (void)!::write(error_fd, msg, sizeof msg);
  _exit(127);
}

// Closes every descriptor from 3 up except those in `keep` (sorted).
void CloseAllExcept(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned next = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > next) ::close_range(next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(next, ~0U, 0);
}

}  // namespace

void ExecPlan(const LaunchPlan& plan, int error_fd) {
  std::vector<int> keep = plan.keep_fds;
  keep.push_back(error_fd);
  CloseAllExcept(keep);
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
    for (const auto& b : plan.stage_binds) {
      std::string target = plan.stage_dir + "/" + b.name;
      struct stat st;
      if (::stat(b.source.c_str(), &st) != 0) Fail(error_fd, LaunchStep::kStage, errno);
      if (S_ISDIR(st.st_mode)) {
        if (::mkdir(target.c_str(), 0755) != 0) Fail(error_fd, LaunchStep::kStage, errno);
      } else {
        int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) Fail(error_fd, LaunchStep::kStage, errno);
        ::close(fd);
      }
      if (::mount(b.source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
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
  std::vector<char*> argv, envp;
  for (const auto& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : plan.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // execvpe searches the caller's PATH: make it the job's.
  if (auto path = EnvValue(plan.env, "PATH")) ::setenv("PATH", path->c_str(), 1);
  ::execvpe(argv[0], argv.data(), envp.data());
  Fail(error_fd, LaunchStep::kExec, errno);
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
