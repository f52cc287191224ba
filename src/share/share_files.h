// The agent's side of a task's two compute share files (their layout and
// the library's side: src/gpushare/share_files.h). The agent makes both
// zero-filled, reads the task's want with pread on the descriptor it made
// (never a mapping: the task may truncate its own file, and a mapping of a
// truncated file faults; nor a fresh open by path, which the task could
// have replaced) and writes the grant through a shared mapping that the
// task's processes map read-only.
//
// Thread-safety: one TaskShareFiles is used from one thread at a time;
// distinct objects share nothing.
#pragma once

#include <cstdint>
#include <string>

#include "common/safe_fs.h"
#include "common/status.h"
#include "share/arbiter.h"

struct gpushare_grant_file;

namespace gpupool::share {

// CLOCK_MONOTONIC in nanoseconds: the files' clock (not Clock::MonoMs,
// which is CLOCK_BOOTTIME and in milliseconds).
int64_t MonotonicNs();

class TaskShareFiles {
 public:
  // Creates, or empties, the task's two files (mode 0600: the caller hands
  // the want file to the job's account and binds the grant read-only).
  static Result<TaskShareFiles> Create(const std::string& want_path, const std::string& grant_path);

  TaskShareFiles(TaskShareFiles&& other) noexcept;
  TaskShareFiles& operator=(TaskShareFiles&& other) noexcept;
  TaskShareFiles(const TaskShareFiles&) = delete;
  TaskShareFiles& operator=(const TaskShareFiles&) = delete;
  ~TaskShareFiles();

  // The want file's last_active_ns; 0 (never active) when the file is
  // shorter than its layout or cannot be read.
  int64_t ReadLastActiveNs() const;

  // Publishes `grant` and the agent's beat (`now_ns`): the deadline and the
  // state in one store, then the beat.
  void WriteGrant(const Grant& grant, int64_t now_ns);

 private:
  TaskShareFiles(UniqueFd want, gpushare_grant_file* grant)
      : want_(std::move(want)), grant_(grant) {}

  UniqueFd want_;
  gpushare_grant_file* grant_ = nullptr;  // mapped read-write
};

}  // namespace gpupool::share
