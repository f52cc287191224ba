// Job limits without a cgroup (rlimits), and the words a user reads when a
// limit or a signal ended a job.
//
// With a usable cgroup v2 (exec/cgroup.h) the kernel enforces memory, pids
// and CPU per task; the rlimits here then only cap a single file's size
// (RLIMIT_FSIZE: no file can outgrow the work directory's cap) and turn off
// core dumps. Without one they also cap processes (RLIMIT_NPROC), and the
// shim watches memory itself with MeasureTree (exec/process_tree.h) and
// the work directory with DiskUsage (common/disk_usage.h): there is deliberately no memory
// rlimit, because RLIMIT_AS breaks CUDA and PyTorch, which reserve huge
// address ranges they never touch.
//
// All functions are pure (ApplyRlimits acts on the calling process only)
// and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "exec/cgroup.h"
#include "exec/executor.h"

namespace gpupool::exec {

// The rlimits a task's child sets, in this order: RLIMIT_CORE 0 (always),
// RLIMIT_FSIZE = disk_bytes, and, without a cgroup (cgroup = false),
// RLIMIT_NPROC = pids. RLIMIT_NPROC counts the processes and threads of the
// child's real uid, so it is exact when each task runs as its own uid; it
// does not bind root. 0 limits produce no entry; memory never does.
std::vector<Rlimit> RlimitsFor(const Limits& limits, bool cgroup);

// A task's limits: what its job asks for (`requested`, 0 = nothing), within
// the provider's (`provider`, 0 = no limit), which are both the limits of
// jobs that ask for nothing and the most any job gets here: a job cannot
// raise them. pids are always the provider's. Each request lowered to the
// provider's limit adds a note for the job's events ("asked for 1 PiB of
// disk; this machine lends at most 100 GiB").
Limits TaskLimits(const Limits& requested, const Limits& provider,
                  std::vector<std::string>* notes = nullptr);

// Child side, between fork and exec: setrlimit (soft = hard) for each.
// Async-signal-safe. Returns false with errno set on the first failure.
bool ApplyRlimits(const std::vector<Rlimit>& rlimits) noexcept;

// Readable reasons, used as a job's end reason:
// "exceeded its memory limit of 4 GiB".
std::string MemoryLimitReason(int64_t limit_bytes);
// "exceeded its disk limit of 10 GiB (work directory)".
std::string DiskLimitReason(int64_t limit_bytes);
// "hit its limit of 64 processes" (informational: a refused fork does not
// end a job by itself).
std::string PidsLimitNote(int64_t pids);

// A wait status described for a user when no limit explains it:
//   exit 3                 -> "" (a plain exit needs no reason)
//   SIGSEGV                -> "killed by signal SIGSEGV (segmentation fault)"
//   SIGSEGV with a core    -> "killed by signal SIGSEGV (segmentation fault), core dumped"
//   SIGXFSZ                -> "killed by signal SIGXFSZ (file size limit exceeded)"
//                             (the caller picks DiskLimitReason when a disk
//                             limit was set)
//   SIGRTMIN+2, 99         -> "killed by signal SIGRTMIN+2", "killed by signal 99"
std::string DescribeWaitStatus(int wait_status);

// How often the shim measures memory without a cgroup, by default
// (ExecConfig::memory_poll_ms).
inline constexpr int64_t kDefaultMemoryPollMs = 100;

// One line for the agent's start-up log:
// "limits: cgroup v2 at /sys/fs/cgroup/x (memory, pids, cpu)" or
// "limits: rlimits (no usable cgroup v2: <why>); memory watched every 100 ms".
std::string DescribeLimitsMode(const Result<CgroupTree>& tree,
                               int64_t memory_poll_ms = kDefaultMemoryPollMs);

}  // namespace gpupool::exec
