// cgroup v2 limits for tasks: the agent's delegated subtree (CgroupTree) and
// one child cgroup per task (TaskCgroup).
//
// Layout, under the subtree the agent was given (e.g. by systemd with
// Delegate=yes):
//
//   <path>/                 memory, pids (and cpu) enabled for children
//   <path>/agent/           the agent and its shims (cgroup v2 allows no
//                           processes in a cgroup that has controllers
//                           enabled for its children)
//   <path>/task-<name>/     one task's processes and limits
//
// The kernel enforces the limits: memory.max (an OOM kill inside the task's
// cgroup, counted in memory.events), pids.max (fork fails with EAGAIN) and
// cpu.max (throttling). The shim's child joins its task cgroup itself,
// between fork and exec, by writing its pid to procs_file().
//
// Everything here is file operations on a cgroup2 mount; a plain directory
// tree with the same files stands in for it in tests. Objects are plain
// values (a path); they hold no descriptors and no locks, and may be used
// from any thread, but two callers managing the same task cgroup at once
// must coordinate themselves.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "exec/executor.h"

namespace gpupool::exec {

class TaskCgroup;

// The agent's delegated cgroup v2 subtree, where each task gets a child
// cgroup.
class CgroupTree {
 public:
  // `setting`:
  //   "auto"  the agent's own cgroup: the "0::/path" line of
  //           `self_cgroup_file` under `mount_root` (under
  //           `mount_root`/unified when that is where cgroup2 is mounted, the
  //           hybrid layout). When the agent's cgroup is the "agent" leaf a
  //           previous Open made, its parent.
  //   "none"  no cgroup (an error saying so, for the log line).
  //   "/abs"  the cgroup v2 directory at that path.
  // Usable when it is cgroup2 (has cgroup.controllers), offers "memory" and
  // "pids" (cgroup.controllers), and is writable. Then, unless it is the
  // hierarchy's root (no cgroup.type), processes living in it
  // (cgroup.procs) are moved into the leaf child "agent", and
  // "+memory +pids" (and "+cpu" when offered) is written to
  // cgroup.subtree_control. Errors say why, e.g. "cgroup v2 at
  // /sys/fs/cgroup/unified has no memory controller and no pids controller
  // (available: hugetlb)".
  static Result<CgroupTree> Open(const std::string& setting,
                                 const std::string& mount_root = "/sys/fs/cgroup",
                                 const std::string& self_cgroup_file = "/proc/self/cgroup");

  // What Open would use and whether it is usable, changing nothing: its
  // path, or the error Open would return.
  static Result<std::string> Resolve(const std::string& setting,
                                     const std::string& mount_root = "/sys/fs/cgroup",
                                     const std::string& self_cgroup_file = "/proc/self/cgroup");

  // The tree another process of the agent opened (Open), as its shims
  // are told it: nothing is checked or changed.
  static CgroupTree Adopt(std::string path, bool has_cpu) {
    return CgroupTree(std::move(path), has_cpu);
  }

  const std::string& path() const { return path_; }
  bool has_cpu() const { return has_cpu_; }

  // Creates <path>/task-<name> (or reuses it when it exists) and writes the
  // limits, 0 meaning "max": memory.max (bytes), memory.swap.max 0 and
  // memory.oom.group 1 when those files exist (no swapping; an OOM kill
  // ends the whole job, not one of its processes), pids.max, and cpu.max
  // ("<cpu_milli * 100> 100000", at least the kernel's minimum quota of
  // 1000) when has_cpu(). `name` is one path component. On failure the
  // cgroup is removed again.
  Result<TaskCgroup> CreateTask(const std::string& name, const Limits& limits) const;

  // Reopens an existing task cgroup (after an agent restart); NotFound if
  // absent.
  Result<TaskCgroup> FindTask(const std::string& name) const;

 private:
  CgroupTree(std::string path, bool has_cpu) : path_(std::move(path)), has_cpu_(has_cpu) {}
  std::string TaskPath(const std::string& name) const { return path_ + "/task-" + name; }

  std::string path_;
  bool has_cpu_ = false;
};

// One task's cgroup. Readers return -1 (or 0 for event counts, empty for
// Pids) when a file cannot be read, e.g. after Remove.
class TaskCgroup {
 public:
  const std::string& path() const { return path_; }
  // The child writes its own pid here before exec.
  std::string procs_file() const { return path_ + "/cgroup.procs"; }

  int64_t MemoryCurrent() const;    // memory.current, bytes; -1
  int64_t CpuUsageMs() const;       // usage_usec of cpu.stat / 1000; -1
  int64_t OomKills() const;         // "oom_kill N" of memory.events; 0 when absent
  int64_t PidsMaxEvents() const;    // "max N" of pids.events (forks refused); 0
  std::vector<pid_t> Pids() const;  // cgroup.procs

  // Kills everything in it: writes 1 to cgroup.kill when that file exists
  // (Linux 5.14), else sends SIGKILL to each pid of cgroup.procs until it is
  // empty (at most ~20 rounds, 5 ms apart). Does not wait for the
  // processes to be reaped.
  void Kill() const;

  // Removes the cgroup (rmdir), after any child cgroups the job made in it;
  // retries for up to ~2 s while processes are still exiting (EBUSY). Ok if
  // it is already gone.
  Status Remove() const;

 private:
  friend class CgroupTree;
  explicit TaskCgroup(std::string path) : path_(std::move(path)) {}

  std::string path_;
};

}  // namespace gpupool::exec
