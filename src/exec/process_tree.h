// Process-tree accounting for a task's shim: which processes the job has,
// what they use, and signalling them all. (How much its work directory
// holds is common/disk_usage.h.)
//
// The shim is a child subreaper (PR_SET_CHILD_SUBREAPER), so every process a
// job makes, even one that double-forked to escape its parent, stays a
// descendant of the shim: these functions take the shim's pid as `root`.
// Without a cgroup they are how the shim sees the job; MeasureTree runs every
// 100 ms per task, so it walks only the tree (the kernel's
// /proc/PID/task/TID/children lists, one per thread) and reads one more
// line per process (/proc/PID/stat): a one-process tree costs about five
// file reads, tens of microseconds at most.
//
// All read /proc of the caller's pid namespace and are snapshots: a process
// that forks or exits while a tree is walked may be missed or counted once
// more (the kernel's children lists are not atomic). Processes that vanish
// midway are skipped silently. No state, no allocation beyond the results:
// safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpupool::exec {

// All processes under `root` (not root itself), parents before their
// children. From /proc/PID/task/TID/children; when the kernel has no children
// files (CONFIG_PROC_CHILDREN off), from DescendantsFromStat. Empty when
// root does not exist or has no children.
std::vector<pid_t> Descendants(pid_t root);

// The direct children of `pid` (of all its threads), from the children
// files; empty when it is gone or the kernel has none.
std::vector<pid_t> Children(pid_t pid);

// The same set found by scanning every /proc/*/stat for parent pids: the
// fallback, slower (it reads one file per process on the machine).
std::vector<pid_t> DescendantsFromStat(pid_t root);

struct TreeUsage {
  // Resident pages * page size, summed: the rss of /proc/PID/stat, the same
  // count as the "resident" of /proc/PID/statm.
  int64_t rss_bytes = 0;
  // utime + stime of each process, plus cutime + cstime: the time of its
  // children it has already waited for, so the work of short-lived helpers
  // (a compiler under make) is not lost when they are reaped. Children the
  // root itself reaps are not counted (that time lands in root's cutime).
  int64_t cpu_ms = 0;
  int64_t processes = 0;  // processes (not threads), zombies included
  friend bool operator==(const TreeUsage&, const TreeUsage&) = default;
};

// What Descendants(root) use now. RSS counts pages shared between processes
// (libraries, fork's copy-on-write) once per process, so it overstates a
// tree of forked workers; a cgroup's memory.current is exact.
TreeUsage MeasureTree(pid_t root);

// Sends `sig` to every descendant of root except the pids in `spare`;
// returns how many kill() calls succeeded. Walks the tree again after
// signalling and signals processes that appeared meanwhile (children forked
// before they got the signal), for a few rounds, each pid once.
int SignalTree(pid_t root, int sig, const std::vector<pid_t>& spare = {});

}  // namespace gpupool::exec
