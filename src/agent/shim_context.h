// How a task's shim (agent/shim.h) describes its job to the executor: the
// job's command, environment (gpupool's variables, a gang's rendezvous,
// the spec's own), limits, GPUs and sandbox details as an
// exec::TaskContext, and the checkpoint signal it declares. Pure but for
// PrepareJupyterSession, which makes the notebook socket's directory.
// Internal to the shim; reentrant.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agent/shim.h"
#include "agent/task_files.h"
#include "common/status.h"
#include "exec/executor.h"
#include "model/job_spec.h"

namespace gpupool::agent {

// "SIGUSR1", or "none".
std::string CheckpointSignalName(const CheckpointSpec& c);

// The signal that asks the job to checkpoint: its spec's (SIGUSR1 by
// default), or 0 for jobs that declare none (or no checkpoint section).
int CheckpointSignal(const JobSpec& spec);

// The executor's view of the task. `notes`: the job's requests lowered to
// the provider's limits (events for output.log).
exec::TaskContext MakeTaskContext(const ShimOptions& o, const TaskPaths& paths,
                                  std::vector<std::string>& notes);

// A Jupyter session (agent/task_exec.h): the directory for the notebook
// server's socket, the job's own (mode 0700: only its account and the
// agent reach the socket), and the variables that tell the job the
// socket's path and the token the server's proxy presents. Nothing for
// other jobs.
Status PrepareJupyterSession(const proto::StartTask& task, const TaskPaths& paths,
                             const ShimOptions& o, std::string_view executor,
                             exec::TaskContext& ctx);

}  // namespace gpupool::agent
