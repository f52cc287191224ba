// TaskManager: the agent's tasks, kept on disk (agent/task_files.h) and run
// by shims (agent/shim.h).
//
// Start() is idempotent by attempt id, so a start order delivered twice runs
// the job once. Recover() rebuilds the task list from DATA_DIR/tasks after an
// agent restart: a task whose output.log ends with a result has ended; one
// whose shim still runs is running; any other was lost. Output is read from each task's
// output.log at a per-task offset, so the agent can resume shipping exactly
// where the server's copy ends.
//
// Single-threaded: use from the agent's event loop. `on_wake` is called (on
// the loop) when a shim reports its job started or the shim exits, so the
// agent can poll at once instead of waiting for its timer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/blob_transfer.h"
#include "agent/shim_launcher.h"
#include "agent/task_files.h"
#include "agent/task_gpus.h"
#include "common/clock.h"
#include "common/status.h"
#include "exec/exec_config.h"
#include "exec/executors.h"
#include "net/event_loop.h"
#include "proto/messages.h"

namespace gpupool::agent {

struct TaskState {
  std::string attempt_id;
  int64_t job_id = 0;
  TaskPaths paths;
  pid_t shim_pid = 0;
  uint64_t shim_start_time = 0;
  bool started = false;              // the job process runs (or ran)
  bool job_exited = false;           // the job's processes are all gone ('x' record)
  std::string stop_requested;        // the reason of the agent's stop, if it sent one
  std::optional<TaskResult> result;  // set once the result record was read
  bool shim_gone = false;            // the shim process has exited
  int64_t read_offset = 0;           // next byte of output.log to read
  int64_t skip_offset = -1;          // a record at this offset was already shipped
  int status_pipe = -1;              // read end of the shim's stdout, or -1
  std::string executor;              // as the spec asked ("" = the node's default)
  std::string runs_as;               // the executor that runs it
  bool has_image = false;            // the spec names an image
  int uid = -1;                      // the task's own account, or -1
  std::vector<std::string> gpu_uuids;
  // A share's GPU memory cap per GPU (0: none), for the NVML backstop
  // (agent/gpu_backstop.h); kept in exec.json.
  int64_t gpu_memory_cap = 0;
  // A share's compute share in thousandths (0: no share) and its mode, for
  // the agent's share loop (agent/share_loop.h); kept in exec.json.
  int32_t gpu_share_milli = 0;
  bool gpu_share_strict = false;
  // The pool user whose job it is, and whether its share is an MPS client
  // (agent/mps.h): that user's MPS tasks on one GPU share one account, as
  // one MPS server serves one account. Kept in exec.json.
  std::string owner;
  bool mps = false;
  std::string vacate_reason;  // set when the provider took it back (Vacate)
  // A rank of a multi-node job: its place, and for rank 0 of a torch gang
  // the master its agent chose (kept in exec.json).
  std::optional<proto::GangRank> gang;
  // A rank in the sandbox's private network: the host ports forwarded to it
  // (kept in exec.json; taken until the task ends).
  exec::PortRange gang_ports;
  // Rank 0 in the sandbox's private network: its reports leave the master
  // out until the job listens on the master port (see Poll), since pasta
  // accepts a forwarded connection before the job does and resets it when
  // nothing listens inside: the other ranks must not try before.
  bool master_hidden = false;
  int64_t started_ms = 0;  // when Start ran (this agent's clock)
};

// Rank 0 of a torch gang whose start order leaves the master to its agent.
bool NeedsMaster(const proto::StartTask& task);

class TaskManager {
 public:
  struct Options {
    std::string data_dir;
    int64_t kill_grace_ms = 10'000;  // passed to the shim
    // How jobs run here; must outlive the TaskManager.
    const exec::ExecConfig* exec_config = nullptr;
    const exec::ExecEnvironment* exec_env = nullptr;
    bool own_uids = false;  // give each sandboxed task its own account (a root agent)
    // The server's blob store, for job inputs and checkpoints (passed to shims).
    BlobAccess blob;
    // Shims stop their job when the agent process ends, however it ends
    // (SIGKILL included): `--on-exit kill`, which `gpupool dev` uses.
    bool stop_with_agent = false;
  };

  TaskManager(Options options, net::EventLoop& loop, const Clock& clock,
              std::function<void()> on_wake);
  ~TaskManager();

  Status Recover();
  // For a task that NeedsMaster: fills task.gang's master with `addr` and a
  // TCP port free on this machine that no live task here was given, so
  // that Start keeps them with the task. A rank in the sandbox's private
  // network gets a block of the configured gang ports (exec_config.h), and
  // the master port is its first; Start gives the other ranks theirs. A
  // task already held keeps the master it has (a resent order picks no new
  // port). Other tasks are left alone.
  Status ChooseMaster(proto::StartTask& task, const std::string& addr) const;
  // `gpus`: the task's GPUs on this node (agent/task_gpus.h): their device
  // minor numbers, where known, and a share's memory cap.
  Status Start(const proto::StartTask& task, const TaskGpus& gpus);
  // Asks the task's shim to stop the job (SIGTERM to the group, then SIGKILL
  // after `grace_ms`, or the shim's kill_grace_ms when 0, or at once when
  // kKillNow).
  static constexpr int64_t kKillNow = -1;
  void Stop(const std::string& attempt_id, const std::string& reason, int64_t grace_ms = 0);
  // Stops the task because the provider takes its GPU back: a job that
  // checkpoints gets its checkpoint signal first (see shim.h), and the task
  // ends "vacated" (its job is requeued) unless the job had already
  // succeeded. Kept on disk, so an agent restart still reports it so. A
  // task already leaving is only hurried: with kKillNow it is killed now.
  void Vacate(const std::string& attempt_id, const std::string& reason, int64_t grace_ms);
  // Stops the task for the server, which requeues its job (a preemption):
  // like Stop, but a job that checkpoints gets its checkpoint signal first
  // and its newest checkpoint is uploaded before the task ends.
  void StopToRequeue(const std::string& attempt_id, const std::string& reason, int64_t grace_ms);
  void StopAll(const std::string& reason);

  // Notices shims that exited (and reaps them), and rank 0 masters that
  // listen now (or were waited for long enough): their ids are in
  // TakeAnnouncedMasters until taken.
  void Poll();
  std::vector<std::string> TakeAnnouncedMasters();
  // The tasks whose shims spoke (started, or exited) since the last call:
  // what a wake (the `on_wake` of the constructor) is about.
  std::set<std::string> TakeWoken() { return std::exchange(woken_, {}); }

  // Reads complete records from the task's read offset, at most about
  // `max_bytes`, and advances the offset past them. Returns the job's output
  // lines; the shim's own records (job started, result) update the task.
  std::vector<OutputRecord> ReadOutput(const std::string& attempt_id, size_t max_bytes);
  // Resumes reading after the record at `last_offset` (the last line the
  // server has), or from the start when it is negative.
  void ResumeOutputAfter(const std::string& attempt_id, int64_t last_offset);
  // True when output.log has bytes past the read offset.
  bool HasUnreadOutput(const std::string& attempt_id) const;

  // Ended: its result was read, or its shim is gone (read the output to the
  // end first: the result is the shim's last record; without one it is lost).
  bool Ended(const TaskState& t) const;
  // The task's job may still use its GPUs: it has not ended, and its shim
  // has not said the job's processes are gone (it may still be uploading
  // the job's last checkpoint).
  bool HoldsGpus(const TaskState& t) const { return !Ended(t) && !t.job_exited; }
  // The report the server should see for a task right now.
  proto::TaskReport Report(const TaskState& t) const;
  std::vector<proto::TaskReport> Reports() const;

  // Attempt leases (agent/task_files.h, the tasks' `lease` file; the protocol is
  // proto::Lease). SetLease(lease_ms > 0): the server grants leases that
  // long; 0: it grants none (tasks run without one). RenewLeases(sent_ms):
  // the server answered a renewal request the agent sent at `sent_ms`
  // (Clock::MonoMs): every live task's deadline moves to sent_ms + the
  // lease (never back), and Start gives a new task that deadline before its
  // shim runs.
  void SetLease(int64_t lease_ms);
  int64_t lease_ms() const { return lease_ms_; }
  void RenewLeases(int64_t sent_ms);

  // An event of the node about a running task (an MPS server that failed
  // under it), shown with the job's output: one whole 'v' record appended
  // to output.log (agent/task_files.h). Nothing once the task has ended.
  void AddEvent(const std::string& attempt_id, const std::string& text);

  // Deletes the task and its directory (after the server has its result).
  void Remove(const std::string& attempt_id);

  const std::map<std::string, TaskState>& tasks() const { return tasks_; }
  int running() const;

 private:
  void Watch(TaskState& t);
  // The lowest account of the configured range no running task holds, or -1.
  int FreeUid() const;
  // The account of a running MPS task of `owner` on `gpu`, or -1.
  int MpsUidOf(const std::string& owner, const std::string& gpu) const;
  // Whether the task is a gang rank in the sandbox's private network.
  bool ForwardsGangPorts(const proto::StartTask& task) const;
  // The first block of gang ports no live task holds and this machine has
  // free, or ResourceExhausted.
  Result<exec::PortRange> FreePortBlock() const;
  // Removes what a task whose shim is gone may have left (a cgroup, a container).
  void CleanUpAfterLostShim(const TaskState& t);
  // Applies a 'p', 'x' or 'r' record to the task.
  void ApplyShimRecord(TaskState& t, const OutputRecord& r);
  // `first`: the task's first, before its shim starts.
  // The lease file as lease_sent_ms_ and lease_ms_ say, unless it says so
  // already.
  Status WriteLease();
  std::string LeasePath() const { return LeaseFileIn(options_.data_dir + "/tasks"); }

  Options options_;
  net::EventLoop& loop_;
  const Clock& clock_;
  std::function<void()> on_wake_;
  std::set<std::string> woken_;
  std::map<std::string, TaskState> tasks_;
  int64_t lease_ms_ = 0;
  int64_t lease_sent_ms_ = -1;                 // the newest answered renewal request; -1: none yet
  std::optional<AttemptLease> lease_written_;  // what the lease file holds
  std::vector<std::string> announced_masters_;
  // Starts the shims (started on the first task; ends with this manager).
  ShimLauncher launcher_;
};

}  // namespace gpupool::agent
