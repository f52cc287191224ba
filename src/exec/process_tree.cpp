#include "exec/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

namespace gpupool::exec {
namespace {

// Reads a one-line /proc file (stat) into buf, NUL-terminated and
// truncated to cap - 1 bytes; returns its length, or -1 when it cannot be
// opened or read. The kernel returns such a line in one read: a read that
// ends in '\n' is the whole file, and saves the read that would return 0.
ssize_t ReadLine(const char* path, char* buf, size_t cap) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = ::read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ::close(fd);
      return -1;
    }
    if (r == 0) break;
    n += static_cast<size_t>(r);
    if (buf[n - 1] == '\n') break;
  }
  ::close(fd);
  buf[n] = '\0';
  return static_cast<ssize_t>(n);
}

// Appends the pids of a whitespace-separated list file (a children file),
// read in chunks so any length works.
void AppendPidList(const char* path, std::vector<pid_t>& out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  int64_t value = 0;
  bool in_number = false;
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; ++i) {
      char c = buf[i];
      if (c >= '0' && c <= '9') {
        value = value * 10 + (c - '0');
        in_number = true;
      } else if (in_number) {
        if (value > 0) out.push_back(static_cast<pid_t>(value));
        value = 0;
        in_number = false;
      }
    }
  }
  if (in_number && value > 0) out.push_back(static_cast<pid_t>(value));
  ::close(fd);
}

// Calls fn(number) for each numeric entry of a /proc directory, without the
// allocation opendir makes.
template <typename Fn>
void ForEachNumericEntry(const char* dir, Fn&& fn) {
  int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(struct dirent64) char buf[4096];
  while (true) {
    ssize_t n = ::getdents64(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      auto* e = reinterpret_cast<struct dirent64*>(buf + off);
      off += e->d_reclen;
      const char* name = e->d_name;
      if (name[0] < '0' || name[0] > '9') continue;
      fn(static_cast<pid_t>(std::strtol(name, nullptr, 10)));
    }
  }
  ::close(fd);
}

// What the walk needs of /proc/PID/stat.
struct StatFields {
  pid_t ppid = 0;
  int64_t ticks = 0;      // utime + stime + cutime + cstime
  int64_t threads = 0;    // num_threads
  int64_t rss_pages = 0;  // the same count as statm's "resident"
};

bool ReadStat(pid_t pid, StatFields& out) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  char buf[1024];
  if (ReadLine(path, buf, sizeof buf) <= 0) return false;
  // The command name (field 2) may hold spaces and parentheses: fields
  // resume after its last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  ++p;
  // Field numbers of proc(5): 4 ppid, 14 utime, 15 stime, 16 cutime,
  // 17 cstime, 20 num_threads, 24 rss.
  constexpr int kLast = 24;
  int field = 2;
  while (field < kLast) {
    while (*p == ' ') ++p;
    if (*p == '\0' || *p == '\n') break;
    ++field;
    const char* token = p;
    while (*p != '\0' && *p != ' ') ++p;
    if (field != 4 && !(field >= 14 && field <= 17) && field != 20 && field != 24) continue;
    int64_t v = std::strtoll(token, nullptr, 10);
    if (field == 4) out.ppid = static_cast<pid_t>(v);
    if (field >= 14 && field <= 17) out.ticks += v;
    if (field == 20) out.threads = v;
    if (field == 24) out.rss_pages = v;
  }
  return field == kLast;
}

bool HasChildrenFiles() {
  static const bool has = ::access("/proc/thread-self/children", F_OK) == 0;
  return has;
}

// Adds `pid` to `out` unless already there: the same process can be listed
// twice when it is re-parented from one thread of a process to another
// while the tree is walked.
class PidSet {
 public:
  bool Insert(pid_t pid, std::vector<pid_t>& out) {
    if (out.size() < kLinear) {
      if (std::find(out.begin(), out.end(), pid) != out.end()) return false;
    } else {
      if (set_.empty()) set_.insert(out.begin(), out.end());
      if (!set_.insert(pid).second) return false;
    }
    out.push_back(pid);
    return true;
  }

 private:
  static constexpr size_t kLinear = 32;
  std::unordered_set<pid_t> set_;
};

// Appends the children of every thread of `pid` to `kids`. A process known
// to be single-threaded has one children file; otherwise the task
// directory is listed.
void AppendChildren(pid_t pid, int64_t threads, std::vector<pid_t>& kids) {
  char path[64];
  if (threads == 1) {
    std::snprintf(path, sizeof path, "/proc/%d/task/%d/children", static_cast<int>(pid),
                  static_cast<int>(pid));
    AppendPidList(path, kids);
    return;
  }
  char task_dir[32];
  std::snprintf(task_dir, sizeof task_dir, "/proc/%d/task", static_cast<int>(pid));
  ForEachNumericEntry(task_dir, [&](pid_t tid) {
    std::snprintf(path, sizeof path, "%s/%d/children", task_dir, static_cast<int>(tid));
    AppendPidList(path, kids);
  });
}

// Walks the tree under root through the children files, parents first.
// With `visit`, reads each descendant's stat, passes it to visit(pid, stat)
// and skips processes that vanished; its thread count then spares listing
// the task directory of single-threaded processes.
template <typename Visit>
std::vector<pid_t> Walk(pid_t root, bool read_stat, Visit&& visit) {
  std::vector<pid_t> out;
  std::vector<pid_t> kids;
  PidSet seen;
  // `out` doubles as the queue.
  for (size_t next = 0;; ++next) {
    pid_t pid = next == 0 ? root : out[next - 1];
    int64_t threads = 0;  // unknown
    if (next > 0 && read_stat) {
      StatFields st;
      if (ReadStat(pid, st)) {
        visit(pid, st);
        threads = st.threads;
      } else {
        threads = -1;  // gone
      }
    }
    if (threads >= 0) {
      kids.clear();
      AppendChildren(pid, threads, kids);
      for (pid_t kid : kids) {
        if (kid != root) seen.Insert(kid, out);
      }
    }
    if (next == out.size()) break;
  }
  return out;
}

}  // namespace

std::vector<pid_t> Children(pid_t pid) {
  std::vector<pid_t> kids;
  if (pid > 0) AppendChildren(pid, 0, kids);
  return kids;
}

std::vector<pid_t> Descendants(pid_t root) {
  if (root <= 0) return {};
  if (!HasChildrenFiles()) return DescendantsFromStat(root);
  return Walk(root, false, [](pid_t, const StatFields&) {});
}

std::vector<pid_t> DescendantsFromStat(pid_t root) {
  if (root <= 0) return {};
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (ppid, pid), sorted by ppid
  ForEachNumericEntry("/proc", [&](pid_t pid) {
    StatFields st;
    if (ReadStat(pid, st)) parent_of.emplace_back(st.ppid, pid);
  });
  std::sort(parent_of.begin(), parent_of.end());
  std::vector<pid_t> out;
  PidSet seen;
  for (size_t next = 0;; ++next) {
    pid_t pid = next == 0 ? root : out[next - 1];
    auto it = std::lower_bound(parent_of.begin(), parent_of.end(), std::make_pair(pid, pid_t{0}));
    for (; it != parent_of.end() && it->first == pid; ++it) {
      if (it->second != root) seen.Insert(it->second, out);
    }
    if (next == out.size()) break;
  }
  return out;
}

TreeUsage MeasureTree(pid_t root) {
  static const int64_t page_size = ::sysconf(_SC_PAGESIZE);
  static const int64_t ticks_per_s = ::sysconf(_SC_CLK_TCK);
  TreeUsage usage;
  int64_t ticks = 0;
  auto add = [&](pid_t, const StatFields& st) {
    ticks += st.ticks;
    usage.rss_bytes += st.rss_pages * page_size;
    ++usage.processes;
  };
  if (root <= 0) return usage;
  if (HasChildrenFiles()) {
    Walk(root, true, add);
  } else {
    for (pid_t pid : DescendantsFromStat(root)) {
      StatFields st;
      if (ReadStat(pid, st)) add(pid, st);
    }
  }
  usage.cpu_ms = ticks_per_s > 0 ? ticks * 1000 / ticks_per_s : 0;
  return usage;
}

int SignalTree(pid_t root, int sig, const std::vector<pid_t>& spare) {
  constexpr int kMaxRounds = 8;
  std::unordered_set<pid_t> done(spare.begin(), spare.end());
  int signalled = 0;
  for (int round = 0; round < kMaxRounds; ++round) {
    bool found_new = false;
    for (pid_t pid : Descendants(root)) {
      if (!done.insert(pid).second) continue;
      found_new = true;
      if (::kill(pid, sig) == 0) ++signalled;
    }
    if (!found_new) break;
  }
  return signalled;
}

}  // namespace gpupool::exec
