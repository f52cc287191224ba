// Pool: the server's core. It owns the job lifecycle, node registry,
// scheduling passes and the agent-side bookkeeping, over a Store. It is the
// orchestrator and the transaction boundary; its parts live in pool_*.cpp by
// responsibility, the scheduler's input is pass_input.h, and what a
// transaction does besides its writes is one PoolEffects record
// (docs/architecture.md, "The server's core").
//
// Every public method runs its changes in one store transaction, so a failed
// call changes nothing and a successful one survives a crash. Orders for
// agents are written to the store's outbox in the same transaction as the
// change that caused them; `hooks.outbox_ready(node_id)` is then called so the
// agent hub can send them. `hooks.job_changed(job_id)` fires after any commit
// that changed a job or added log lines to it (long polls wait on it).
//
// Scheduling: Schedule() takes the pending queue, the nodes and the live
// attempts from memory (PoolQueue, server/pool_queue.h: loaded from the
// store at the first transaction and kept consistent by every transaction,
// so the store stays the truth and a restarted server rebuilds it) and the
// groups' usage from the store, builds a sched::Snapshot,
// calls sched::Scheduler::Decide and applies the decisions in one
// transaction: placements create attempts and start orders; preemptions
// order the victim's agent to stop it (the job is requeued as pending when
// the attempt ends, without counting as a failure); waiting jobs get their
// reason (persisted when it changes) and their position and explanation
// (kept in memory: they change with every pass and are recomputed after a
// restart by the first pass).
//
// Provider policies: a node's lending (as its agent reports it, in its hello
// and in `lending` messages) shapes the snapshot so that the scheduler
// proposes only what the agent would accept (LendingAdmits): a node that
// does not lend now is not ready, GPUs not lent are left out, and a job its
// policy refuses (user, group, runtime, shares) excludes the node. An
// attempt the provider vacated or refused requeues its job at the front of
// its class; a refused job avoids that node for `refusal_avoid_ms` (kept in
// memory only). `node_event` messages go to the node's event log, `leave`
// marks the node left until its agent says hello again.
//
// Fair-share usage: when an attempt ends, its group is charged GPU milli x
// the time the attempt held its GPUs (from placement to end), in the same
// transaction; running attempts are added for their time so far in each
// snapshot without being written.
//
// Checkpoints: an attempt's agent uploads a checkpoint's files to the blob
// store and then adds it (AddCheckpoint). Only the job's live attempt may
// (fencing, as for task reports); the job keeps its newest
// `checkpoint_keep`; a new attempt of the job is told to restore the newest
// (StartTask::restore_checkpoint). Job inputs and checkpoints name blob
// store manifests, which `hooks.manifest_stored` says are there.
//
// Threading: single-threaded; call everything from the server's event loop.
// Time comes from the injected Clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "model/job.h"
#include "model/job_state.h"
#include "model/node.h"
#include "proto/messages.h"
#include "sched/scheduler.h"
#include "server/job_logs.h"
#include "server/node_liveness.h"
#include "server/pass_input.h"
#include "server/pool_effects.h"
#include "server/pool_queue.h"
#include "server/pool_rules.h"
#include "store/store.h"

namespace gpupool::server {

namespace gang {
struct Outcome;
}

struct PoolOptions {
  int64_t heartbeat_ms = 5000;
  // Labels every node must carry to get work (--require-node-label), added
  // to every job's resources.node_labels: gpupool/verified=true keeps nodes
  // whose `gpupool agent selftest` did not pass from getting work.
  std::map<std::string, std::string> required_node_labels;
  // A node whose agent has been disconnected this long is lost: its attempts
  // are requeued (once their leases have expired). Like the kubelet's 40 s
  // before NotReady.
  int64_t node_lost_after_ms = 40'000;
  // Every attempt's lease (--attempt-lease, server/node_liveness.h): its
  // shim stops it when its agent has not renewed it for this long, and the
  // server starts its job elsewhere only after this plus a margin since it
  // last heard a renewal. 0 = no leases.
  int64_t attempt_lease_ms = 30'000;
  // Placements per scheduling pass; the rest wait for the next pass.
  int32_t max_placements_per_pass = 500;
  // A job whose start a node refused (its provider's policy) is not placed
  // there again for this long.
  int64_t refusal_avoid_ms = 10 * 60'000;
  // Fair share, guarantees, preemption and backfill (--scheduler-config).
  // Its max_placements is replaced by max_placements_per_pass.
  sched::SchedulerConfig scheduler;
  // Checkpoints kept per job (--checkpoint-keep); accepting a new one
  // deletes the oldest beyond this many. Values below 1 count as 1.
  int32_t checkpoint_keep = 3;
  // Jobs one user may have pending at once (--max-pending-jobs-per-user);
  // a submission beyond it is refused with ResourceExhausted. 0 = no limit.
  int64_t max_pending_jobs_per_user = 10'000;
  // The output limit (sent with every start order), log retention and the
  // log budget (server/job_logs.h).
  LogOptions logs;
  // The id of a node registering for the first time, from its name; unset:
  // a random "n-..." id. Node ids end the scheduler's ties, so the
  // simulator (sim/pool_sim.h) names them to be reproducible.
  std::function<std::string(const std::string& node_name)> node_id_for;
  // Compares the queue in memory with the store after every transaction
  // and fails loudly on any difference (server/pool_queue.h). For tests:
  // it reads the whole queue each time.
  PoolQueueOptions queue_check;
};

struct PoolHooks {
  std::function<void(const std::string& node_id)> outbox_ready;
  std::function<void(int64_t job_id)> job_changed;
  // Something happened that may let a pending job run (a submit, a freed
  // attempt, a node joining): run Schedule() soon.
  std::function<void()> schedule_needed;
  // Whether the blob store holds manifest `id` (a job's inputs, a
  // checkpoint). Called on the loop; must be cheap. Unset: the pool has no
  // blob store and refuses both.
  std::function<bool(const std::string& id)> manifest_stored;
  // Storage quotas (server/storage_quotas.h, StorageQuotas::Guard): runs
  // `change` in `tx` and refuses it when it took `owner`'s or `group`'s
  // stored bytes past their quota. Called for a submission with inputs and
  // for a new checkpoint (with its retention). Unset: no quotas.
  std::function<Status(Tx& tx, const std::string& owner, const std::string& group,
                       std::string_view what, const std::function<Status()>& change)>
      within_quota;
  // An attempt closed (every rank ended): runs in the closing transaction,
  // so that what it does (the accounting posts the attempt's last charges,
  // server/accounting_service.h) commits with the close or not at all.
  // Unset: nothing.
  std::function<Status(Tx& tx, const Job& job, const Attempt& attempt)> attempt_closed;
  // Accounts at their budget's limit -> why (AccountingService::Held):
  // their pending jobs wait with that reason. Unset: none.
  std::function<std::map<std::string, std::string>()> held_accounts;
  // The account a job pays from (AccountingService::AccountOf). Unset: its
  // group's, or its owner's without one.
  std::function<std::string(const Job&)> account_of;
  // The prices fair-share usage is weighted by (a GPU class's price over
  // the cheapest's; AccountingService::CachedPrices), or nullptr. Unset:
  // every GPU counts the same.
  std::function<const accounting::PriceBook*()> usage_prices;
  // Lab -> what its lending takes off its fair-share usage
  // (AccountingService::LendingBonus). Unset: nothing.
  std::function<std::map<std::string, int64_t>()> lending_bonus;
  // What a committed transaction counted for the metrics (placements,
  // preemptions, queue waits, checkpoints, migrations, reclaims).
  std::function<void(const PoolCounts&)> counted;
};

// A checkpoint an attempt uploaded (POST /v1/jobs/{job}/checkpoints).
struct CheckpointRequest {
  int64_t job_id = 0;
  std::string attempt_id;
  std::string manifest;
  int64_t bytes = 0;  // from the manifest (BlobService::DescribeManifest)
  int64_t files = 0;
};

struct CheckpointAdded {
  Checkpoint checkpoint;
  bool created = false;  // false: it was already the job's newest (a retry)
};

// What the API shows about a node: its record plus live values.
struct NodeStatus {
  Node node;
  bool connected = false;
  std::vector<GpuTelemetry> telemetry;  // latest heartbeat, by GPU
  // GPU uuid -> the live attempts using it (several when it holds shares),
  // and the GPU milli they hold.
  std::map<std::string, std::vector<std::string>> gpu_attempts;
  std::map<std::string, int32_t> gpu_used_milli;
  // ... and the GPU memory they hold, MiB: all of it for a whole GPU, a
  // share's cap (model/resources.h, ShareMemoryCapBytes) for a share.
  std::map<std::string, int64_t> gpu_reserved_mib;
  // The shares among those attempts, with their caps and use as the agent
  // last reported them (reports of other attempts are dropped).
  std::vector<ShareUse> shares;
  int32_t running_tasks = 0;
  std::string status;  // NodeStatusName: available, busy, paused, reclaimed, ...

  // GPU `uuid`'s last telemetry; nullptr when the agent sent none for it.
  const GpuTelemetry* TelemetryOf(const std::string& uuid) const {
    for (const GpuTelemetry& t : telemetry)
      if (t.uuid == uuid) return &t;
    return nullptr;
  }
  // The thousandths of GPU `uuid` the pool's live attempts hold (at most 1000).
  int32_t AllocatedMilli(const std::string& uuid) const {
    auto m = gpu_used_milli.find(uuid);
    return m == gpu_used_milli.end() ? 0 : std::min(m->second, 1000);
  }
};

// One entry of the provider event log, with the node's name.
struct NodeEventEntry {
  NodeEvent event;
  std::string node_name;
};

// Where a pending job stands after the last scheduling pass.
struct QueueInfo {
  int64_t position = 0;     // 1-based place in the ordered queue
  std::string explanation;  // class, the group's share, borrowing
  bool unsatisfiable = false;
  int64_t reserved_start_ms = 0;  // backfill reservation: expected start; 0 = none
  // The structured forms the texts were rendered from (sched/wait_reason.h):
  // why it waits (its job's `reason`), and its queue entry.
  sched::WaitReason wait;
  sched::QueueEntry entry;
};

struct JobDetail {
  Job job;
  std::vector<Attempt> attempts;
  std::map<std::string, std::string> node_names;  // the attempts' nodes (ranks' too): id -> name
  std::optional<QueueInfo> queue;                 // pending jobs the last pass ordered
  JobOutput output;                               // what it printed (server/job_logs.h)
};

// One pending job in scheduler order (GET /v1/queue).
struct QueuedJob {
  Job job;
  std::optional<QueueInfo> queue;  // absent: submitted after the last pass
};

// A group's standing for fair share (GET /v1/groups), like Slurm's sshare.
struct GroupStatus {
  std::string name;
  bool configured = false;  // listed in the scheduler config
  int64_t weight = 1;
  int64_t guaranteed_milli = 0;
  int64_t allocated_milli = 0;  // GPU milli its live attempts hold now
  int64_t usage_milli_ms = 0;   // decayed usage now, running work included
  // For people: its part of all groups' usage and of all weights, and
  // Slurm's classic fair-share factor 2^(-usage/share) in (0, 1].
  double usage_fraction = 0;
  double share_fraction = 0;
  double fair_share_factor = 1;
  int32_t running_jobs = 0;
  int32_t pending_jobs = 0;
};

class Pool {
 public:
  Pool(Store& store, const Clock& clock, PoolOptions options, PoolHooks hooks);

  // Marks every node offline (as of now) so agents get the grace period to
  // reconnect after a server restart. Call once at start-up.
  Status Recover();

  // ---- user side ----
  // `input_bytes`: the size of spec.inputs (its manifest's files), charged
  // to the owner's and the group's storage quota while the job runs.
  // ResourceExhausted when the owner has max_pending_jobs_per_user pending
  // jobs, or the inputs do not fit a quota; nothing is stored then.
  // `key` (an Idempotency-Key; "" for none): a key the owner used before
  // answers that job as it is now, with `*replayed` set, when the spec is
  // the same (AlreadyExists when not); a new key is kept with the new job.
  struct Submission {
    int64_t input_bytes = 0;
    std::string key;
  };
  Result<Job> Submit(const JobSpec& spec, const std::string& owner, int64_t input_bytes = 0);
  Result<Job> Submit(const JobSpec& spec, const std::string& owner, const Submission& how,
                     bool* replayed);
  Result<JobDetail> GetJob(int64_t id);
  Result<std::vector<Job>> ListJobs(const JobQuery& q);
  Result<Job> Cancel(int64_t id);
  // Ends a job for the server's own reason (an idle session): it is
  // cancelled with `reason`. With `checkpoint_first`, a job that checkpoints
  // is first stopped like a preemption (its checkpoint signal, its newest
  // checkpoint uploaded) and is cancelled once its attempt has left.
  Result<Job> StopForGood(int64_t id, const std::string& reason, bool checkpoint_first);
  // Stops the job's live attempt for the server's own reason (its account
  // reached a budget that stops work), as a preemption: a job that
  // checkpoints does, and the job is requeued as pending (not counted as a
  // failure) once the attempt has left. False, and nothing done, for a job
  // without a live attempt or one already leaving.
  Result<bool> StopAndRequeue(int64_t id, const std::string& reason);
  // Adds the pool's own event `text` to the job's log (server/job_logs.h
  // AppendPoolEvent); followers of its log see it at once.
  Status AddPoolEvent(int64_t id, const std::string& text);
  // A page of the job's log, or that retention removed it.
  Result<LogPage> ReadLogs(int64_t job_id, int64_t after_cursor, int32_t limit);
  Result<std::vector<NodeStatus>> ListNodes();
  // The provider event log: events of `node` (an id or a name; "" = every
  // node) of `kind` ("" = any), with id > after_id, at most `limit`:
  // ascending, or with before_id > 0 those below it, newest first (as
  // Tx::ListNodeEvents). NotFound for an unknown node, InvalidArgument for
  // an unknown kind.
  Result<std::vector<NodeEventEntry>> NodeEvents(const std::string& node, const std::string& kind,
                                                 int64_t after_id, int64_t before_id,
                                                 int32_t limit);
  // Pending jobs in the order the scheduler considers them; `owner` limits
  // the list to one user's jobs (positions stay those in the whole queue).
  Result<std::vector<QueuedJob>> Queue(const std::optional<std::string>& owner);
  Result<std::vector<GroupStatus>> Groups();
  // For the metrics: the jobs in the queue or running, and those that
  // finished since the server started, by state, class and group
  // (server/pool_queue.h).
  Result<std::vector<JobCount>> LiveJobCounts() { return store_.LiveJobCounts(); }
  std::vector<JobCount> FinishedJobCounts() const { return store_.FinishedJobCounts(); }
  // The last pass's view of a pending job, if it has one.
  std::optional<QueueInfo> QueueInfoFor(int64_t job_id) const;

  // ---- checkpoints ----
  // Adds a checkpoint of the job's live attempt `r.attempt_id` and applies
  // retention. NotFound for an unknown job; FailedPrecondition when the
  // attempt is not the job's live attempt (fencing) or the manifest is not
  // stored. Posting the job's newest checkpoint again (same attempt, same
  // manifest) returns it unchanged, even once the attempt has ended.
  Result<CheckpointAdded> AddCheckpoint(const CheckpointRequest& r);
  // Oldest first; NotFound for an unknown job.
  Result<std::vector<Checkpoint>> ListCheckpoints(int64_t job_id);
  // Deletes checkpoint `number` of a finished job, or all of them when
  // `number` is 0, and returns what was deleted (their bytes then no longer
  // count toward quotas; blob garbage collection frees the space).
  // NotFound for an unknown job or checkpoint; FailedPrecondition while the
  // job has not finished (retention manages a live job's checkpoints).
  Result<std::vector<Checkpoint>> DeleteCheckpoints(int64_t job_id, int64_t number);
  // The name of the node attempt `attempt_id` was placed on (NotFound when
  // there is no such attempt).
  Result<std::string> AttemptNodeName(const std::string& attempt_id);
  // Checkpoint `number` of the job, or its newest when `number` is 0;
  // NotFound when there is none.
  Result<Checkpoint> GetCheckpoint(int64_t job_id, int64_t number);
  // The manifests blob garbage collection must keep: every checkpoint's and
  // the inputs of every job that is not terminal.
  Result<std::set<std::string>> ReachableManifests();

  // ---- agent side (node_id as returned by AgentHello) ----
  // Registers or updates the node, reconciles the tasks the agent holds with
  // the attempts the server has on it, and returns the welcome to send.
  Result<proto::Welcome> AgentHello(const proto::Hello& hello);
  // Applies one reliable agent message with sequence `seq`. Messages with a
  // seq already applied for this agent instance are skipped (returns OK).
  Status AgentMessage(const std::string& node_id, int64_t seq, const proto::AgentReport& message);
  // The same, decoding the message first (InvalidArgument when it is not
  // one of proto::AgentReport's, or malformed; nothing is applied then).
  Status AgentMessage(const std::string& node_id, int64_t seq, const std::string& type,
                      const std::string& body);
  void AgentHeartbeat(const std::string& node_id, const proto::Heartbeat& hb);
  // The agent asked for its attempts' leases to be renewed (a `lease`
  // message); the caller answers it at once.
  void AgentLeaseRequested(const std::string& node_id);
  Status AgentDisconnected(const std::string& node_id);
  // The agent applied every outbox message up to `seq`.
  Status AgentAcked(const std::string& node_id, int64_t seq);
  Result<std::vector<OutboxMessage>> PendingOrders(const std::string& node_id, int64_t after_seq);

  // ---- periodic work ----
  // One scheduling pass; returns the number of placements.
  Result<int> Schedule();
  // Replaces the scheduler's configuration (groups, half-life, preemption,
  // ...) from the next pass on; the caller asks for a pass.
  void SetSchedulerConfig(sched::SchedulerConfig config);
  const sched::SchedulerConfig& scheduler_config() const { return options_.scheduler; }
  // Turns nodes offline for too long into lost nodes and requeues their
  // work, and requeues the work of revoked and departed nodes, each once
  // the leases of its attempts have certainly expired (NodeLiveness).
  Status CheckNodes();
  // An admin (or the node's provider) revoked the node's credential: it is
  // lost at once; its running attempts are requeued once their leases have
  // expired (CheckNodes), since the agent may still be running them.
  Status RevokeNode(const std::string& node_name, const std::string& reason);

  // The node's owner (or an admin) asks its agent to pause, resume or
  // reclaim (proto::OwnerCommand), through the node's outbox: delivered in
  // order, and again after a reconnect until the agent acks it. NotFound
  // for an unknown node; Unavailable when its agent is not connected (the
  // owner learns at once that nothing happened, rather than the command
  // taking effect whenever the machine comes back).
  Status SendOwnerCommand(const std::string& node_name, const proto::OwnerCommand& command);

  bool connected(const std::string& node_id) const { return live_.count(node_id) > 0; }

  // What the agent of `node_id` last reported of attempt `attempt_id`'s GPU
  // share (its cap and use); absent when it reported none.
  std::optional<ShareUse> ShareUseOf(const std::string& node_id,
                                     const std::string& attempt_id) const;

 private:
  struct LiveNode {
    std::string instance;
    std::vector<GpuTelemetry> telemetry;
    int32_t running_tasks = 0;
    std::vector<ShareUse> shares;
  };

  // `job` is leaving `leaving_node` and will be requeued (its provider
  // reclaims the GPU, or it is preempted), or may leave it (a new
  // checkpoint of a job with checkpoint.standby): orders the node the
  // scheduler would place it on next to stage its newest checkpoint
  // (proto::StageCheckpoint), so that its restore there moves only what the
  // final checkpoint changes. Nothing when it has no checkpoint or no room.
  Status StageAhead(Tx& tx, const Job& job, const std::string& leaving_node);
  // Applies `event` to the job owning `attempt` (already fenced), carrying
  // out the transition's actions inside `tx`.
  Status ApplyEvent(Tx& tx, Job& job, Attempt& attempt, JobEvent event,
                    const proto::TaskReport* report, const StopOrder* stop = nullptr);
  // Charges `group`'s fair-share usage for what `attempt` held from its
  // placement to `to_ms`, weighted by its GPUs' prices (WeightedMilli).
  Status ChargeUsage(Tx& tx, const std::string& group, const Attempt& attempt, int64_t to_ms);
  // What BuildPassInput needs besides the store's view, as of `now`.
  PassContext PassContextAt(int64_t now) const;
  // The agent's reliable messages, one method per type (AgentMessage).
  Status ApplyTaskReport(Tx& tx, const std::string& node_id, const proto::TaskReport& r);
  Status ApplyLogChunk(Tx& tx, const std::string& node_id, const proto::LogChunk& chunk);
  Status ApplyLending(Tx& tx, const std::string& node_id, const NodeLending& lending);
  Status ApplyNodeEvent(Tx& tx, const std::string& node_id, const NodeEvent& event);
  // Node `node_id` spoke of `attempt`, which runs elsewhere: writes the
  // refusal to the audit log (the caller ignores what it said).
  Status RefuseForeign(Tx& tx, const std::string& node_id, const Attempt& attempt,
                       const std::string& what);
  Status PushStop(Tx& tx, const std::string& node_id, const std::string& attempt_id,
                  const StopOrder& order);
  Status SetAgentSeq(Tx& tx, const std::string& node_id, const std::string& instance, int64_t seq);
  // The node's agent drained and deregistered: the node is left; attempts
  // still live there are requeued once their leases have expired.
  Status LeaveNode(Tx& tx, const std::string& node_id, const std::string& reason);
  // Requeues (as lost) every live attempt that is its job's current one.
  Status LoseLiveAttempts(Tx& tx, const std::string& node_id, const std::string& reason);
  // Attempt `a` (its job's current one) is lost on `node_id`: the whole
  // attempt, or for a gang the rank there (the others are stopped).
  Status LoseAttemptOn(Tx& tx, Job& job, Attempt& a, const std::string& node_id,
                       const proto::TaskReport& lost);
  Result<std::pair<std::string, int64_t>> GetAgentSeq(Tx& tx, const std::string& node_id);
  // Refuses a spec whose inputs are not in the blob store.
  Status CheckInputs(const JobSpec& spec) const;
  // The job's live attempt if it is `attempt_id` (fencing);
  // FailedPrecondition otherwise.
  Result<Attempt> LiveAttempt(Tx& tx, const Job& job, const std::string& attempt_id);
  // Deletes the job's checkpoints beyond the newest `checkpoint_keep`.
  Status ApplyRetention(Tx& tx, int64_t job_id);
  // The StartTask for a new attempt (for a gang: of `rank`; nullptr
  // otherwise), with the job's newest checkpoint as its restore point.
  Result<proto::StartTask> MakeStart(Tx& tx, const Job& job, const Attempt& a,
                                     const AttemptRank* rank);
  // Queues that start order to its node.
  Status PushStart(Tx& tx, const Job& job, const Attempt& a, const AttemptRank* rank);
  // Counts the placement of attempt `a` of `job` for the metrics: how long
  // the job waited since it was submitted or last requeued, and whether it
  // restarts from a checkpoint on another node than its last attempt's.
  Status CountPlacement(Tx& tx, const Job& job, const Attempt& a, int64_t now);

  // ---- gangs (attempts with ranks on several nodes): the protocol's
  // steps are pure (server/gang_protocol.h); these carry them out ----
  // A report from the agent of one rank (already fenced).
  Status ApplyRankReport(Tx& tx, Job& job, Attempt& attempt, const std::string& node_id,
                         const proto::TaskReport& r);
  // Orders every live rank but `cause_rank` to stop, because `why`, and
  // stores the attempt.
  Status StopGang(Tx& tx, Job& job, Attempt& attempt, int32_t cause_rank, const std::string& why);
  // Sends the step's orders, keeps its log lines and refusal, and applies
  // its job event (which stores the attempt) or stores the attempt.
  Status CarryOut(Tx& tx, Job& job, Attempt& attempt, gang::Outcome out);
  // Fires the hooks for what the committed transaction touched.
  void Notify();
  // Forgets what a rolled-back transaction touched.
  void Discard();

  // The caller's store, with the queue and the live set in memory; every
  // transaction of the pool goes through it.
  PoolQueue store_;
  const Clock& clock_;
  PoolOptions options_;
  PoolHooks hooks_;
  sched::Scheduler scheduler_;
  std::map<std::string, LiveNode> live_;  // connected nodes
  NodeLiveness liveness_;
  // Nodes revoked or left whose live attempts are requeued once their
  // leases expire, with the reason the attempts are lost for.
  std::map<std::string, std::string> awaiting_expiry_;
  std::map<int64_t, QueueInfo> queue_;  // pending job -> its place after the last pass
  // Job -> node id -> until when the job avoids the node (it refused it).
  std::map<int64_t, std::map<std::string, int64_t>> refused_;
  // Attempts their node said it is vacating, until they report their end.
  std::set<std::string> leaving_;
  // Collected during a transaction, carried out after it commits.
  PoolEffects fx_;
};

}  // namespace gpupool::server
