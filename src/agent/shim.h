// The shim: one small process per task, forked from the agent (see
// TaskManager::Start) into a new session.
//
// The agent starts a shim in a new session; the shim starts the job in its
// own process group, writes the job's output to TASK_DIR/output.log, enforces
// max_runtime, and writes TASK_DIR/result.json when the job ends. Because the
// shim, not the agent, is the job's parent, a job survives an agent restart
// and its exit code is never lost. SIGTERM to the shim means "stop the job":
// the whole process group gets SIGTERM, then SIGKILL after the grace period.
// The shim writes "started <pid>" to its stdout when the job runs, so the
// agent learns it at once; when the shim exits, its stdout closes.
#pragma once

#include <cstdint>
#include <string>

namespace gpupool::agent {

struct ShimOptions {
  std::string task_dir;
  int64_t kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL
};

// Returns the shim's exit code (0 when result.json was written).
int RunShim(const ShimOptions& options);

}  // namespace gpupool::agent
