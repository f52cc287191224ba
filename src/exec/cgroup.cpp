#include "exec/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/files.h"

namespace gpupool::exec {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Writes `content` in one write(2), as the kernel wants for cgroup files.
// O_CREAT only matters for a plain directory standing in for cgroupfs: a
// real cgroup's files always exist.
Status WriteCgroupFile(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ssize_t n = fd < 0 ? -1 : ::write(fd, content.data(), content.size());
  int err = errno;
  if (fd >= 0) ::close(fd);
  if (n != static_cast<ssize_t>(content.size())) {
    return Status::Internal("cannot write \"" + content + "\" to " + path + ": " +
                            std::strerror(n < 0 ? err : EIO));
  }
  return Status::Ok();
}

std::vector<pid_t> ParsePids(const std::string& text) {
  std::vector<pid_t> out;
  for (const auto& w : Words(text)) {
    char* end = nullptr;
    long v = std::strtol(w.c_str(), &end, 10);
    if (*end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
  }
  return out;
}

// The value of "key N" in a flat-keyed file (memory.events, cpu.stat);
// -1 when the file or the key is missing.
int64_t KeyedValue(const std::string& path, const std::string& key) {
  auto text = ReadFile(path);
  if (!text.ok()) return -1;
  std::istringstream in(*text);
  std::string k;
  long long v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

// Moves the processes of `path` into its leaf child "agent", so that
// controllers can be enabled for its children (no internal processes).
// Each pid is a write(2) of its own; pids that exit meanwhile are fine.
Status MoveProcessesToLeaf(const std::string& path) {
  const std::string leaf = path + "/agent";
  std::vector<pid_t> moved;
  // Processes forked while moving show up in a later pass.
  for (int pass = 0; pass < 5; ++pass) {
    GP_ASSIGN_OR_RETURN(std::string procs, ReadFile(path + "/cgroup.procs"));
    std::vector<pid_t> remaining;
    for (pid_t pid : ParsePids(procs)) {
      if (std::find(moved.begin(), moved.end(), pid) == moved.end()) remaining.push_back(pid);
    }
    if (remaining.empty()) break;
    if (pass == 0 && ::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::Internal("cannot create cgroup " + leaf + ": " + std::strerror(errno));
    }
    const std::string target = leaf + "/cgroup.procs";
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::Internal("cannot open " + target + ": " + std::strerror(errno));
    for (pid_t pid : remaining) {
      std::string line = std::to_string(pid) + "\n";
      if (::write(fd, line.data(), line.size()) < 0 && errno != ESRCH) {
        int err = errno;
        ::close(fd);
        return Status::Internal("cannot move process " + std::to_string(pid) + " from " + path +
                                " to " + leaf + ": " + std::strerror(err));
      }
      moved.push_back(pid);
    }
    ::close(fd);
  }
  return Status::Ok();
}

Status ValidTaskName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Status::InvalidArgument("invalid task cgroup name \"" + name + "\"");
  }
  return Status::Ok();
}

// rmdir, retried while the cgroup is busy (its processes still exiting).
Status RemoveDir(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EBUSY || attempt >= 200) {
      return Status::Internal("cannot remove cgroup " + path + ": " + std::strerror(errno));
    }
    ::usleep(10'000);
  }
}

// Child cgroups first: a cgroup with children cannot be removed.
Status RemoveTree(const std::string& path) {
  if (DIR* d = ::opendir(path.c_str())) {
    std::vector<std::string> subdirs;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (e->d_type == DT_DIR || (e->d_type == DT_UNKNOWN && IsDirectory(path + "/" + name))) {
        subdirs.push_back(path + "/" + name);
      }
    }
    ::closedir(d);
    for (const auto& sub : subdirs) GP_RETURN_IF_ERROR(RemoveTree(sub));
  }
  return RemoveDir(path);
}

}  // namespace

Result<std::string> CgroupTree::Resolve(const std::string& setting, const std::string& mount_root,
                                        const std::string& self_cgroup_file) {
  if (setting == "none") {
    return Status::FailedPrecondition("turned off in the agent's config (cgroup: none)");
  }
  std::string path;
  bool hybrid = false;
  if (setting == "auto") {
    auto self = ReadFile(self_cgroup_file);
    if (!self.ok()) {
      return Status::Unavailable("cannot tell the agent's cgroup: " + self.status().message());
    }
    std::string rel;
    bool found = false;
    std::istringstream lines(*self);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("0::", 0) == 0) {
        rel = line.substr(3);
        found = true;
        break;
      }
    }
    std::string base = mount_root;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    if (!found) {
      return Status::FailedPrecondition(
          "the agent is in no cgroup v2 hierarchy (no \"0::\" line in " + self_cgroup_file +
          "): this machine uses cgroup v1 only");
    }
    if (!PathExists(base + "/cgroup.controllers")) {
      if (!PathExists(base + "/unified/cgroup.controllers")) {
        return Status::FailedPrecondition("no cgroup v2 mounted at " + base +
                                          " (no cgroup.controllers): this machine uses cgroup v1");
      }
      base += "/unified";  // hybrid: cgroup v1 controllers beside a cgroup2 mount
      hybrid = true;
    }
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    path = base + rel;
    // The leaf an earlier Open moved the agent into: the tree is its parent.
    const std::string leaf = "/agent";
    if (rel.size() > leaf.size() && rel.compare(rel.size() - leaf.size(), leaf.size(), leaf) == 0 &&
        PathExists(path.substr(0, path.size() - leaf.size()) + "/cgroup.controllers")) {
      path.resize(path.size() - leaf.size());
    }
  } else if (!setting.empty() && setting[0] == '/') {
    path = setting;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
  } else {
    return Status::InvalidArgument("cgroup must be \"auto\", \"none\" or an absolute path, not \"" +
                                   setting + "\"");
  }

  if (!IsDirectory(path)) return Status::FailedPrecondition("no cgroup directory " + path);
  auto controllers_text = ReadFile(path + "/cgroup.controllers");
  if (!controllers_text.ok()) {
    return Status::FailedPrecondition(path +
                                      " is not a cgroup v2 directory (no cgroup.controllers)");
  }
  std::vector<std::string> available = Words(*controllers_text);
  std::vector<std::string> missing;
  for (const char* c : {"memory", "pids"}) {
    if (!Contains(available, c)) missing.push_back(std::string("no ") + c + " controller");
  }
  if (!missing.empty()) {
    std::string why = "cgroup v2 at " + path + " has " + Join(missing, " and ") +
                      " (available: " + (available.empty() ? "none" : Join(available, " ")) + ")";
    if (hybrid) {
      why += "; this machine has the hybrid layout, with memory and pids under cgroup v1";
    } else {
      why += "; the parent cgroup must enable them for it (delegation, e.g. systemd Delegate=yes)";
    }
    return Status::FailedPrecondition(why);
  }
  for (const std::string& f : {path, path + "/cgroup.procs", path + "/cgroup.subtree_control"}) {
    if (::access(f.c_str(), W_OK) != 0) {
      return Status::PermissionDenied("cgroup v2 at " + path + " is not writable by the agent (" +
                                      f + ": " + std::strerror(errno) +
                                      "); delegate it to the agent");
    }
  }
  // Root may write anywhere, so writability proves nothing: "auto" takes the
  // agent's cgroup only when it was delegated (systemd marks a Delegate=yes
  // unit's cgroup with this attribute), never a login session's.
  // The hierarchy's root (no cgroup.type) is the agent's own in a container
  // with a private cgroup namespace.
  if (setting == "auto" && ::geteuid() == 0 && PathExists(path + "/cgroup.type") &&
      ::getxattr(path.c_str(), "trusted.delegate", nullptr, 0) < 0 &&
      ::getxattr(path.c_str(), "user.delegate", nullptr, 0) < 0) {
    return Status::FailedPrecondition(
        "the agent's cgroup " + path +
        " was not delegated to it (no trusted.delegate attribute): run the agent from a systemd "
        "unit with Delegate=yes, or name a cgroup in limits.cgroup");
  }
  return path;
}

Result<CgroupTree> CgroupTree::Open(const std::string& setting, const std::string& mount_root,
                                    const std::string& self_cgroup_file) {
  GP_ASSIGN_OR_RETURN(std::string path, Resolve(setting, mount_root, self_cgroup_file));
  GP_ASSIGN_OR_RETURN(std::string controllers, ReadFile(path + "/cgroup.controllers"));
  bool has_cpu = Contains(Words(controllers), "cpu");
  // The hierarchy's root has no cgroup.type and may hold processes itself.
  if (PathExists(path + "/cgroup.type")) GP_RETURN_IF_ERROR(MoveProcessesToLeaf(path));
  const std::string control = path + "/cgroup.subtree_control";
  Status s = WriteCgroupFile(control, has_cpu ? "+memory +pids +cpu" : "+memory +pids");
  if (!s.ok() && has_cpu) {
    // cpu can be refused alone (e.g. real-time processes); limits still work.
    has_cpu = false;
    s = WriteCgroupFile(control, "+memory +pids");
  }
  if (!s.ok()) {
    return Status::FailedPrecondition("cannot enable the memory and pids controllers in " + path +
                                      ": " + s.message() +
                                      " (processes outside the agent may live in it)");
  }
  return CgroupTree(path, has_cpu);
}

Result<TaskCgroup> CgroupTree::CreateTask(const std::string& name, const Limits& limits) const {
  GP_RETURN_IF_ERROR(ValidTaskName(name));
  TaskCgroup task(TaskPath(name));
  const std::string& dir = task.path();
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal("cannot create cgroup " + dir + ": " + std::strerror(errno));
  }
  auto limit = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("max"); };
  Status s = WriteCgroupFile(dir + "/memory.max", limit(limits.memory_bytes));
  if (s.ok() && PathExists(dir + "/memory.swap.max"))
    s = WriteCgroupFile(dir + "/memory.swap.max", "0");
  if (s.ok() && PathExists(dir + "/memory.oom.group")) {
    s = WriteCgroupFile(dir + "/memory.oom.group", "1");
  }
  if (s.ok()) s = WriteCgroupFile(dir + "/pids.max", limit(limits.pids));
  if (s.ok() && has_cpu_) {
    constexpr int64_t kPeriodUs = 100'000, kMinQuotaUs = 1000;
    std::string quota =
        limits.cpu_milli > 0
            ? std::to_string(std::max(limits.cpu_milli * kPeriodUs / 1000, kMinQuotaUs)) + " " +
                  std::to_string(kPeriodUs)
            : "max";
    s = WriteCgroupFile(dir + "/cpu.max", quota);
  }
  if (!s.ok()) {
    (void)task.Remove();
    return s.WithContext("cannot set the limits of task cgroup " + name);
  }
  return task;
}

Result<TaskCgroup> CgroupTree::FindTask(const std::string& name) const {
  GP_RETURN_IF_ERROR(ValidTaskName(name));
  std::string dir = TaskPath(name);
  if (!IsDirectory(dir)) return Status::NotFound("no cgroup " + dir);
  return TaskCgroup(dir);
}

int64_t TaskCgroup::MemoryCurrent() const {
  auto text = ReadFile(path_ + "/memory.current");
  if (!text.ok()) return -1;
  char* end = nullptr;
  long long v = std::strtoll(text->c_str(), &end, 10);
  return end == text->c_str() ? -1 : v;
}

int64_t TaskCgroup::CpuUsageMs() const {
  int64_t usec = KeyedValue(path_ + "/cpu.stat", "usage_usec");
  return usec < 0 ? -1 : usec / 1000;
}

int64_t TaskCgroup::OomKills() const {
  return std::max<int64_t>(0, KeyedValue(path_ + "/memory.events", "oom_kill"));
}

int64_t TaskCgroup::PidsMaxEvents() const {
  return std::max<int64_t>(0, KeyedValue(path_ + "/pids.events", "max"));
}

std::vector<pid_t> TaskCgroup::Pids() const {
  auto text = ReadFile(procs_file());
  return text.ok() ? ParsePids(*text) : std::vector<pid_t>{};
}

void TaskCgroup::Kill() const {
  const std::string kill_file = path_ + "/cgroup.kill";
  if (PathExists(kill_file) && WriteCgroupFile(kill_file, "1").ok()) return;
  for (int round = 0; round < 20; ++round) {
    std::vector<pid_t> pids = Pids();
    if (pids.empty()) return;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    ::usleep(5'000);
  }
}

Status TaskCgroup::Remove() const { return RemoveTree(path_); }

}  // namespace gpupool::exec
