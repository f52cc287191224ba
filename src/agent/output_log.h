// OutputLog: how the shim writes a task's TASK_DIR/output.log (the record
// format is in agent/task_files.h), within the task's output limit.
//
// The job's stdout and stderr are split into lines (a line longer than
// kMaxLineBytes is cut, at a UTF-8 character boundary) and each line is
// made valid UTF-8 (model/job_output.h ValidUtf8), so what the agent ships
// and the server stores is what was counted. Every line of output and
// every event counts against the limit through the same OutputBudget the
// server applies (model/job_output.h): once a line would pass it, that
// line and all later output are dropped and one marker event
// ("output limit of 1 GiB reached: further output dropped") is written in
// its place; the job keeps running. From then on the pipes are still read
// but what comes is discarded without being looked at, at most
// kDrainBytesPerSecond (DrainPauseMs says when the shim should leave them
// unread): the shim runs outside the job's CPU limit, so draining a flood
// at full speed would cost the provider a core; a job that prints faster
// than that waits in write(2). Events go on within the events' allowance.
// The shim's own records ('p', 'x', 'r') are never counted or dropped.
//
// So output.log holds at most the limit, plus the allowance and the shim's
// few records: the provider's disk is safe from a job that prints without
// end, and the file counts toward the job's disk limit (the shim's check).
//
// The records that one call produces are written with one write(2).
// Single-threaded: the shim's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/job_output.h"

namespace gpupool::agent {

class OutputLog {
 public:
  static constexpr int64_t kDrainBytesPerSecond = 8 << 20;

  // `fd`: output.log, opened O_APPEND; not owned.
  OutputLog(int fd, int64_t limit_bytes) : fd_(fd), budget_(limit_bytes) {}

  // `n` bytes the job wrote to its stdout ('o') or stderr ('e').
  void Add(char stream, const char* data, size_t n, int64_t now_ms);
  // The stream was closed: its last line, if it did not end with a newline.
  void Finish(char stream, int64_t now_ms);
  // An event of the task's own ("pulling image ...", "exceeded its memory
  // limit ..."), on one line.
  void Event(std::string_view text, int64_t now_ms);
  // One of the shim's own records ('p', 'x', 'r'); whether it was written.
  bool Record(char kind, int64_t now_ms, std::string_view payload);

  // The last line of stderr kept (at most 512 bytes): may explain a failure.
  const std::string& last_stderr_line() const { return last_stderr_line_; }
  bool limit_reached() const { return budget_.reached(); }
  int64_t limit() const { return budget_.limit(); }
  // How long the pipes should be left unread from `now_ms` (0: read them).
  int64_t DrainPauseMs(int64_t now_ms) const;

 private:
  void Line(char stream, std::string_view text, int64_t now_ms);
  bool Flush();
  std::string& Buffer(char stream) { return stream == 'e' ? err_ : out_; }

  int fd_;
  OutputBudget budget_;
  std::string out_, err_;  // the part of a line read so far, per stream
  std::string pending_;    // records not written yet
  std::string last_stderr_line_;
  int64_t drain_window_ms_ = 0;  // past the limit: the current second's start
  int64_t drained_ = 0;          // and what was dropped in it
};

}  // namespace gpupool::agent
