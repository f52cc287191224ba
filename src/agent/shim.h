// The shim: one small process per task, forked from the agent (see
// TaskManager::Start) into a new session. It starts the job in its own
// process group, writes the job's output to TASK_DIR/output.log, enforces
// max_runtime, and appends the result record when the job ends (the format
// is in agent/task_files.h). Because the shim, not the agent, is the job's
// parent, a job survives an agent restart and its exit code is never lost.
// SIGTERM to the shim means "stop the job": the whole process group gets
// SIGTERM, then SIGKILL after the grace period; the reason is read from
// TASK_DIR/stop.reason if the agent wrote one. The shim writes "started
// <pid>" to its stdout when the job runs, so the agent learns it at once;
// when the shim exits, its stdout closes.
#pragma once

#include <cstdint>
#include <string>

#include "proto/messages.h"

namespace gpupool::agent {

struct ShimOptions {
  std::string task_dir;
  proto::StartTask task;
  int64_t kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL
};

// Returns the shim's exit code (0 when the result was recorded).
int RunShim(const ShimOptions& options);

}  // namespace gpupool::agent
