// The on-disk layout of one task (one attempt) on an agent, shared by the
// agent and the shim that runs the job. Files are the source of truth, so an
// agent restart finds its tasks again:
//
//   DATA_DIR/tasks/<attempt id>/
//     task.json    the start order (proto::StartTask), written before the shim starts
//     shim.pid     "<pid> <start time>" of the shim, written by the agent
//     job.pid      the job's pid (= its process group), written by the shim
//     output.log   the job's output as records, appended by the shim
//     result.json  how the job ended, written atomically by the shim last
//     work/        the job's working directory
//
// An output record is one line: "<o|e> <ts_ms> <text>\n"; a job line longer
// than kMaxLineBytes is split into several records. A record's byte offset
// in output.log identifies it for the server (dedup after resends).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

inline constexpr size_t kMaxLineBytes = 16 * 1024;

struct TaskPaths {
  std::string dir;
  std::string task_json() const { return dir + "/task.json"; }
  std::string shim_pid() const { return dir + "/shim.pid"; }
  std::string job_pid() const { return dir + "/job.pid"; }
  std::string output_log() const { return dir + "/output.log"; }
  std::string result_json() const { return dir + "/result.json"; }
  std::string work_dir() const { return dir + "/work"; }
};

struct TaskResult {
  int32_t exit_code = 0;  // 128 + signal when killed by a signal
  int32_t signal = 0;
  // Empty for a normal exit; otherwise why the job did not end by itself:
  // "exceeded max_runtime of 10s", "stopped: cancelled", "cannot start: ...".
  std::string reason;
  bool failed = false;  // true: the job could not run or broke a limit
  int64_t finished_ms = 0;
};

std::string EncodeResult(const TaskResult& r);
Result<TaskResult> DecodeResult(std::string_view text);

struct OutputRecord {
  int64_t offset = 0;
  std::string stream;  // "stdout" / "stderr"
  int64_t ts_ms = 0;
  std::string text;
};

// "o 1700000000123 hello\n"
std::string EncodeRecord(char stream, int64_t ts_ms, std::string_view text);

// Parses complete records from `data`, which starts at byte `base_offset` of
// the file. Stops at an incomplete final record; `consumed` is how many bytes
// were parsed. A malformed record is returned as stdout text, not dropped.
std::vector<OutputRecord> ParseRecords(std::string_view data, int64_t base_offset, size_t* consumed);

// The start time of a process (field 22 of /proc/PID/stat), to tell a live
// process from a later one that reused its pid; nullopt if it is gone.
std::optional<uint64_t> ProcessStartTime(int pid);

}  // namespace gpupool::agent
