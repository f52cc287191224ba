// Jobs and attempts.
//
// A Job is what a user asked for (its JobSpec) and where it stands. An
// Attempt is one placement of a job on one node; a job has at most one live
// attempt at a time, and every message about running work names its attempt
// id ("42.1" is the first attempt of job 42). Plain values: copy freely.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace gpupool {

// Priority classes, served in this order (the values match
// sched::PriorityClass, which the model layer does not depend on).
enum class JobPriority : int8_t { kInteractive = 0, kNormal = 1, kOpportunistic = 2 };
std::string_view JobPriorityName(JobPriority p);  // "interactive", "normal", "opportunistic"
Result<JobPriority> ParseJobPriority(std::string_view name);

// How long a stopped job gets between SIGTERM and SIGKILL when it is
// preempted and its spec does not say (CheckpointSpec::grace_ms).
inline constexpr int64_t kDefaultStopGraceMs = 30'000;

// A job that checkpoints (its spec has a checkpoint section) may be
// preempted: stopped and requeued, resuming from its last checkpoint.
struct CheckpointSpec {
  int64_t interval_ms = 0;  // ask for a checkpoint this often; 0 = only before vacating
  int64_t grace_ms = kDefaultStopGraceMs;  // SIGTERM to SIGKILL when vacating
  std::string signal = "SIGUSR1";          // the request; "none" = no signal
  // Keep each new checkpoint staged on a standby node (where the job would
  // run next), so that a migration moves only the last delta.
  bool standby = false;
  friend bool operator==(const CheckpointSpec&, const CheckpointSpec&) = default;
};

// The executors a job may ask for (JobSpec::executor); which of them a node
// offers is its provider's choice.
inline constexpr std::string_view kExecutorNames[] = {"sandbox", "process", "docker", "podman"};

// How the ranks of a multi-node job (resources.nodes > 1) relate.
//  torch: one distributed program. Rank 0's node is the master; every rank
//         gets torchrun's variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
//         RANK, ...). A rank that fails stops the gang.
//  none:  independent replicas placed together; each gets only its rank
//         (GPUPOOL_NODE_RANK, GPUPOOL_NNODES) and runs to its own end.
enum class Distributed : int8_t { kTorch = 0, kNone = 1 };
std::string_view DistributedName(Distributed d);  // "torch", "none"
Result<Distributed> ParseDistributed(std::string_view name);

// What network a job gets (the spec's `network`):
//  private: its own network namespace with outbound connectivity through
//           the agent's user-mode network; no route to the machine's own
//           services (its loopback, its addresses) or to other jobs. The
//           default (`network: true`).
//  none:    only a loopback of its own (`network: false`).
//  host:    the machine's network as it is (`network: host`), only where
//           the provider's policy allows it (allow_host_network).
enum class NetworkMode : int8_t { kPrivate = 0, kNone = 1, kHost = 2 };

// An interactive session (gpupool session start): a job that waits for its
// user, who reaches it through tunnels (connect, exec, shell) and, for
// Jupyter, the server's proxy.
enum class SessionKind : int8_t { kShell = 0, kJupyter = 1 };
std::string_view SessionKindName(SessionKind k);  // "shell", "jupyter"
Result<SessionKind> ParseSessionKind(std::string_view name);

inline constexpr int64_t kDefaultSessionIdleMs = 30 * 60'000;

struct SessionSpec {
  SessionKind kind = SessionKind::kShell;
  // Stopped (and its GPUs freed) after this long without a byte through any
  // of its tunnels; 0 = never.
  int64_t idle_timeout_ms = kDefaultSessionIdleMs;
  std::vector<int> ports;  // TCP ports inside the session that tunnels may reach
  bool any_port = false;   // the owner allows tunnels to any port
  // Jupyter sessions: the notebook server's token, which the server's proxy
  // presents (the user never needs it). Set by the server.
  std::string jupyter_token;
  friend bool operator==(const SessionSpec&, const SessionSpec&) = default;
};

struct JobSpec {
  std::string name;
  std::string run;                   // a shell command (sh -c), or
  std::vector<std::string> command;  // an argv list; at most one of the two is set,
                                     // and one is required without an image
  std::string image;                 // "" = the host system; see model/image_ref.h
  std::string executor;              // "" = the node's default; one of kExecutorNames
  NetworkMode network = NetworkMode::kPrivate;
  std::map<std::string, std::string> env;
  Resources resources;
  int64_t max_runtime_ms = 0;  // 0 = no limit
  // Credits it may spend in all, in micro-credits (common/money.h); 0 = no
  // limit. It is stopped (checkpointing) when its charges reach this.
  int64_t max_cost_micros = 0;
  JobPriority priority = JobPriority::kNormal;
  std::string group = "default";  // the group (lab) whose share the job uses
  std::optional<CheckpointSpec> checkpoint;
  // Job inputs: `workdir` is the local directory the CLI uploaded (kept to
  // show where the inputs came from); `inputs` is the manifest id of that
  // upload in the blob store (blob/manifest.h), which the agent materializes
  // into the job's work directory before it starts.
  std::string workdir;
  std::string inputs;
  // For resources.nodes > 1 (ignored otherwise).
  Distributed distributed = Distributed::kTorch;
  // How many times the job is requeued after an attempt failed (exited
  // non-zero, or a rank of a gang did) before the job fails; like torchrun's
  // --max-restarts. Lost, vacated and preempted attempts never count.
  int32_t max_restarts = 0;
  std::optional<SessionSpec> session;  // set for interactive sessions

  bool gang() const { return resources.nodes > 1; }
  bool preemptible() const { return checkpoint.has_value(); }

  friend bool operator==(const JobSpec&, const JobSpec&) = default;
};

enum class JobState { kPending, kScheduled, kRunning, kSucceeded, kFailed, kCancelled };
inline constexpr JobState kAllJobStates[] = {JobState::kPending, JobState::kScheduled,
                                             JobState::kRunning, JobState::kSucceeded,
                                             JobState::kFailed,  JobState::kCancelled};

std::string_view JobStateName(JobState s);  // "pending", "running", ...
Result<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);

struct Job {
  int64_t id = 0;  // assigned by the store, starting at 1
  std::string owner;
  JobSpec spec;
  JobState state = JobState::kPending;
  // Why the job is pending (a scheduler reason) or why it failed.
  std::string reason;
  std::optional<int32_t> exit_code;
  int32_t attempts = 0;         // attempts created so far
  int32_t restarts = 0;         // failed attempts requeued (spec.max_restarts)
  std::string current_attempt;  // id of the live attempt, or empty
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  int64_t started_ms = 0;   // first time an attempt ran; 0 if never
  int64_t finished_ms = 0;  // 0 while not terminal
  // When an attempt of this job was last preempted (the stop was ordered);
  // the scheduler's anti-thrash window counts from it, across attempts.
  std::optional<int64_t> last_preempted_ms;
  // Displaced through no fault of its own (its node was lost or left, its
  // provider took the GPU back or refused the start): goes before
  // the other pending jobs of its class. Cleared when it is placed again.
  bool front = false;
  // The logical size of spec.inputs (the files' total bytes), as the blob
  // store said at submission; charged to the owner's and the group's
  // storage quota while the job is not terminal. 0 without inputs (and for
  // jobs stored before it was recorded).
  int64_t input_bytes = 0;

  friend bool operator==(const Job&, const Job&) = default;
};

// Live states (the attempt holds its GPUs):
//  scheduled: placed; its start order is on its way.
//  running: its process runs (every rank's, for a gang).
//  preempting: ordered to stop to make room for another job
//    (preempt_for_job); its job is requeued once it has left.
//  stopping: ordered to stop, after a checkpoint, because the server ends
//    its job (an idle session); its job is cancelled once it has left.
//  gang-stopping: a rank ended badly (gang_stop_rank) and the others are
//    ordered to stop; the attempt closes once every rank has ended.
// Final states:
//  succeeded, failed, cancelled, lost (its node or agent lost it),
//  preempted: stopped to make room for other work and its job requeued.
//  vacated: stopped because the provider took its GPU back, its job requeued.
//  refused: the agent refused to start it (the provider's policy); nothing ran.
// model/attempt_state.h has the transitions.
enum class AttemptState {
  kScheduled,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kLost,
  kPreempted,
  kVacated,
  kRefused,
  kPreempting,
  kStoppingForGood,
  kGangStopping,
};
inline constexpr AttemptState kAllAttemptStates[] = {
    AttemptState::kScheduled,  AttemptState::kRunning,         AttemptState::kSucceeded,
    AttemptState::kFailed,     AttemptState::kCancelled,       AttemptState::kLost,
    AttemptState::kPreempted,  AttemptState::kVacated,         AttemptState::kRefused,
    AttemptState::kPreempting, AttemptState::kStoppingForGood, AttemptState::kGangStopping};
std::string_view AttemptStateName(AttemptState s);  // "running", "preempting", "gang-stopping", ...
Result<AttemptState> ParseAttemptState(std::string_view name);
bool IsLive(AttemptState s);      // not ended: scheduled, running or one of the stopping states
bool IsStopping(AttemptState s);  // preempting, stopping or gang-stopping: ordered to leave

// One rank of a gang attempt: the node it runs on and how it is doing.
// A rank's state is scheduled or running while it is live, then how it
// ended: succeeded, failed, lost, vacated, refused or cancelled.
struct AttemptRank {
  int32_t rank = 0;  // 0 = the master (NODE_RANK)
  std::string node_id;
  std::vector<std::string> gpu_uuids;
  AttemptState state = AttemptState::kScheduled;
  std::optional<int32_t> exit_code;
  std::string reason;  // why it ended, when not a clean exit
  int64_t finished_ms = 0;
  friend bool operator==(const AttemptRank&, const AttemptRank&) = default;
};

struct Attempt {
  std::string id;  // "<job id>.<number>"
  int64_t job_id = 0;
  int32_t number = 0;  // 1, 2, ...
  // Rank 0's node and GPUs (the only ones, but for a gang).
  std::string node_id;
  std::vector<std::string> gpu_uuids;
  // Per GPU: 1000 for whole GPUs, the share (1..999) for a fraction. A share
  // also holds `gpu_memory_mib` of its GPU's memory (0 = no reservation).
  int32_t gpu_milli = 0;
  int64_t gpu_memory_mib = 0;
  AttemptState state = AttemptState::kScheduled;
  std::optional<int32_t> exit_code;
  std::string reason;
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  // When the attempt was ordered to stop (state preempting or stopping);
  // 0 = never. A preempting attempt makes room for job `preempt_for_job`
  // (0 otherwise); `reason` then says why. Whether it is stopping is its
  // state, never these.
  int64_t preempt_ms = 0;
  int64_t preempt_for_job = 0;
  // When the server accepted the attempt's last checkpoint; 0 = none yet.
  int64_t last_checkpoint_ms = 0;
  // A gang's ranks in rank order (ranks[0] is node_id's); empty otherwise.
  std::vector<AttemptRank> ranks;
  // A torch gang's rendezvous on rank 0's node, once its agent chose the
  // port (0 until then); the other ranks are started with it.
  std::string master_addr;
  int32_t master_port = 0;
  // When the gang was ordered to stop (state gang-stopping) because one of
  // its ranks ended badly (failed, lost, vacated), and that rank; 0 and -1
  // before. The attempt closes once every rank has ended, never before
  // (fencing).
  int64_t gang_stop_ms = 0;
  int32_t gang_stop_rank = -1;  // the rank whose end stopped it

  // "addr:port" ("[fe80::1]:29500" for IPv6), or "" before the port is known.
  std::string MasterEndpoint() const;
  // Nodes it runs on: 1, or the gang's size.
  int32_t NodeCount() const { return ranks.empty() ? 1 : static_cast<int32_t>(ranks.size()); }
  // A gang's rank on `node`; nullptr when none runs there or this is not a gang.
  const AttemptRank* RankOn(const std::string& node) const;
  AttemptRank* RankOn(const std::string& node);
  // Some rank of it (or the attempt itself) was placed on `node`.
  bool RunsOn(const std::string& node) const {
    return ranks.empty() ? node_id == node : RankOn(node) != nullptr;
  }
  // GPU milli it holds in all (per-GPU milli times GPUs, on every node).
  int64_t TotalGpuMilli() const {
    return static_cast<int64_t>(gpu_milli) * static_cast<int64_t>(gpu_uuids.size()) * NodeCount();
  }

  friend bool operator==(const Attempt&, const Attempt&) = default;
};

// The work an attempt did that its job must do again, for an attempt that
// ended without finishing its job (lost, preempted, vacated): the time from
// its last accepted checkpoint (the next attempt restores that one) or, when
// it uploaded none, from its start, to its end. 0 for any other attempt.
int64_t LostWorkMs(const Attempt& a);

std::string MakeAttemptId(int64_t job_id, int32_t number);
// "42.3" -> {42, 3}.
Result<std::pair<int64_t, int32_t>> ParseAttemptId(std::string_view id);

}  // namespace gpupool
