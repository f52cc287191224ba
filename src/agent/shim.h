// The shim: one small process per task, forked from the agent (see
// TaskManager::Start) into a new session. It runs the job through its
// executor (exec/executor.h: prepare, start, stop, cleanup), writes the
// job's output and the task's events to TASK_DIR/output.log within the
// task's output limit (agent/output_log.h: StartTask::max_output_bytes, as
// the agent lowered it), enforces max_runtime and the memory and disk
// limits the kernel does not (output.log counts toward the disk limit), and
// appends the result record when the job ends (the format is in
// agent/task_files.h). It is a child subreaper: every process the job
// makes stays under it, so a stop reaches them all. Because the shim, not
// the agent, is the job's parent, a job survives an agent restart and its
// exit code is never lost. SIGTERM to the shim means "stop the job": every
// process of the job gets SIGTERM (executor Stop), then SIGKILL after the
// grace period; the reason is read from
// TASK_DIR/stop.reason if the agent wrote one, the grace from
// TASK_DIR/stop.grace_ms (0: SIGKILL at once). When the job is requeued
// after the stop (the provider takes the GPU back: TASK_DIR/vacate.reason
// exists; or the server preempts it: TASK_DIR/stop.requeue), a job that
// declares a checkpoint signal gets that first, then SIGTERM as soon as it
// commits a new checkpoint or after half the grace, SIGKILL at its end.
// Before the job starts the shim materializes its inputs and restored
// checkpoint; while it runs it uploads the job's checkpoints
// (agent/checkpoint_sync.h), and before it records the result of a requeued
// job it uploads the newest. The shim writes "started <pid>" to its stdout
// when the job runs and "exited" once the job's processes are gone, so the
// agent learns both at once; when the shim exits, its stdout closes.
//
// What the shim decides while the job runs (every timer: max_runtime, the
// limits, stops and their grace, checkpoint requests, the lease, the drain
// after the exit) is the pure state machine of agent/shim_policy.h; this
// file's RunShim is the process plumbing around it (shim.cpp), and what the
// job runs with is agent/shim_context.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agent/blob_transfer.h"
#include "exec/exec_config.h"
#include "exec/executors.h"
#include "proto/messages.h"

namespace gpupool::agent {

struct ShimOptions {
  std::string task_dir;
  proto::StartTask task;
  int64_t kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL
  // How jobs run on this node (the agent's; the shim is its fork, so these
  // stay valid for the shim's life).
  const exec::ExecConfig* exec_config = nullptr;
  const exec::ExecEnvironment* exec_env = nullptr;
  int uid = -1;  // the task's account; -1 = the agent's
  int gid = -1;
  std::vector<int> gpu_minors;  // of the task's GPUs, where known
  BlobAccess blob;              // inputs, restores and checkpoint uploads
  // The agent's pid when the shim stops its job once the agent is gone
  // (TaskManager::Options::stop_with_agent: the agent set PR_SET_PDEATHSIG
  // to SIGTERM in the shim); 0 otherwise. A stop that finds the shim's
  // parent changed says so in the job's reason.
  int agent_pid = 0;
  // A gang rank in the sandbox's private network: the host ports forwarded
  // to it (TaskManager chose them; rank 0's master port is the first).
  exec::PortRange gang_ports;
  // A share of a GPU: its memory cap, which the executor enforces through
  // libgpushare.so (agent/task_gpus.h, exec/gpu_share.h).
  std::optional<exec::GpuShare> gpu_share;
  // The MIG capability devices of the task's MIG instances, relative to
  // /dev (exec/driver_files.h); empty for whole GPUs.
  std::vector<std::string> gpu_cap_devices;
};

// Returns the shim's exit code (0 when the result was recorded).
int RunShim(const ShimOptions& options);

}  // namespace gpupool::agent
