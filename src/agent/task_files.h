// The on-disk layout of one task (one attempt) on an agent, shared by the
// agent and the shim that runs the job. The files are the source of truth,
// so an agent restart finds its tasks again:
//
//   DATA_DIR/tasks/lease
//                  when the server grants leases (every attempt holds one,
//                  and all of an agent's attempts hold the same):
//                  "<deadline> <lease ms>", the deadline in ms on
//                  CLOCK_BOOTTIME; written by the agent before a shim
//                  starts and renewed whenever the server answers a renewal
//                  request (one file, not one per task: a renewal writes
//                  once, and a start creates no file for it); each shim
//                  stops its job so that it is gone by the deadline
//                  (agent/lease_watch.h)
//   DATA_DIR/tasks/<attempt id>/
//     output.log   written by the shim (and the agent's events, below): one
//                  record per line
//     work/        the job's working directory
//     exec.json    how the agent asked for it to run: the executor and the
//                  task's account (written before the shim starts; read to
//                  clean up after a shim that is gone)
//     stop.reason, stop.grace_ms, stop.requeue
//                  written by the agent only when it stops the task, just
//                  before it signals the shim: why, (if the server named
//                  one) the SIGTERM-to-SIGKILL grace in milliseconds, and
//                  (empty) that the job is requeued, so checkpoint first
//
// Records are "<kind> <ts_ms> <payload>\n":
//   o / e   a line the job wrote to stdout / stderr (a line longer than
//           kMaxLineBytes is split into several records)
//   v       an event of the task's own, shown with the job's output
//           ("pulling image 3/7 layers", "exceeded its memory limit ...");
//           the agent too appends one, as one whole record per write(),
//           while the task runs (TaskManager::AddEvent: an MPS failure)
//   p       "<shim pid> <shim start time> <job pid>": the job runs (the job's
//           pid is also its process group)
//   x       "" : the job and every process of it are gone (its GPUs are
//           free); the shim may still be shipping its last checkpoint
//   r       the result as JSON (TaskResult); always the last record
// A record's byte offset in output.log identifies it for the server (dedup
// after resends). A task creates two directories (its own and work/) and two
// files (output.log, exec.json) on purpose: creating and deleting inodes at a
// high rate is what limits job throughput.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

inline constexpr size_t kMaxLineBytes = 16 * 1024;

// The lease file of the tasks directory DATA_DIR/tasks (layout above).
inline std::string LeaseFileIn(const std::string& tasks_dir) { return tasks_dir + "/lease"; }

struct TaskPaths {
  std::string dir;
  std::string output_log() const { return dir + "/output.log"; }
  std::string work_dir() const { return dir + "/work"; }
  std::string exec_json() const { return dir + "/exec.json"; }
  std::string stop_reason() const { return dir + "/stop.reason"; }
  std::string stop_grace() const { return dir + "/stop.grace_ms"; }
  // Present when the provider took the task's GPU back: its reason.
  std::string vacate_reason() const { return dir + "/vacate.reason"; }
  // Present when the server stops the task to requeue its job (preemption).
  std::string stop_requeue() const { return dir + "/stop.requeue"; }
  // The agent's lease file, beside the task directories (above).
  std::string lease() const { return LeaseFileIn(std::filesystem::path(dir).parent_path()); }
};

// An attempt's lease (the `lease` file): the job may run until
// `deadline_ms` (BootTimeMs); `lease_ms` is how long each renewal grants.
struct AttemptLease {
  int64_t deadline_ms = 0;
  int64_t lease_ms = 0;
  friend bool operator==(const AttemptLease&, const AttemptLease&) = default;
};
std::string EncodeLeaseFile(const AttemptLease& l);
Result<AttemptLease> DecodeLeaseFile(std::string_view text);

// Milliseconds on CLOCK_BOOTTIME: shared by every process of the machine,
// steady, and it counts a suspend (a lease must not outlive one).
int64_t BootTimeMs();

struct TaskResult {
  int32_t exit_code = 0;  // 128 + signal when killed by a signal
  int32_t signal = 0;
  // Empty for a normal exit; otherwise why the job did not end by itself:
  // "exceeded max_runtime of 10s", "stopped: cancelled", "cannot start: ...".
  std::string reason;
  bool failed = false;  // true: the job could not run or broke a limit
  int64_t finished_ms = 0;
  // A gang rank that stopped itself because its agent lost the server (its
  // lease ran out): reported as lost, which requeues the gang, not as a
  // failure of the job.
  bool lost = false;
};

std::string EncodeResult(const TaskResult& r);
Result<TaskResult> DecodeResult(std::string_view text);

struct OutputRecord {
  int64_t offset = 0;
  char kind = 'o';     // 'o', 'e', 'v', 'p', 'x' or 'r'
  std::string stream;  // "stdout" / "stderr" / "event" for 'o' / 'e' / 'v'
  int64_t ts_ms = 0;
  std::string text;  // the payload
};

// "o 1700000000123 hello\n"
std::string EncodeRecord(char kind, int64_t ts_ms, std::string_view text);

struct ShimPids {
  int shim_pid = 0;
  uint64_t shim_start_time = 0;
  int job_pid = 0;
};
std::string EncodePids(const ShimPids& p);
Result<ShimPids> DecodePids(std::string_view text);

// Parses complete records from `data`, which starts at byte `base_offset` of
// the file. Stops at an incomplete final record; `consumed` is how many bytes
// were parsed. A malformed record is returned as stdout text, not dropped.
std::vector<OutputRecord> ParseRecords(std::string_view data, int64_t base_offset,
                                       size_t* consumed);

// The start time of a process (field 22 of /proc/PID/stat), to tell a live
// process from a later one that reused its pid; nullopt if it is gone.
std::optional<uint64_t> ProcessStartTime(int pid);

}  // namespace gpupool::agent
