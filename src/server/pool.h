// Pool: the server's core. It owns the job lifecycle, node registry,
// scheduling passes and the agent-side bookkeeping, over a Store.
//
// Every public method runs its changes in one store transaction, so a failed
// call changes nothing and a successful one survives a crash. Orders for
// agents are written to the store's outbox in the same transaction as the
// change that caused them; `hooks.outbox_ready(node_id)` is then called so the
// agent hub can send them. `hooks.job_changed(job_id)` fires after any commit
// that changed a job or added log lines to it (long polls wait on it).
//
// Threading: single-threaded; call everything from the server's event loop.
// Time comes from the injected Clock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "model/job.h"
#include "model/job_state.h"
#include "model/node.h"
#include "proto/messages.h"
#include "store/store.h"

namespace gpupool::server {

struct PoolOptions {
  int64_t heartbeat_ms = 5000;
  // A node whose agent has been disconnected this long is lost: its attempts
  // are requeued. Like the kubelet's 40 s before NotReady.
  int64_t node_lost_after_ms = 40'000;
  // Placements per scheduling pass; the rest wait for the next pass.
  int32_t max_placements_per_pass = 500;
};

struct PoolHooks {
  std::function<void(const std::string& node_id)> outbox_ready;
  std::function<void(int64_t job_id)> job_changed;
  // Something happened that may let a pending job run (a submit, a freed
  // attempt, a node joining): run Schedule() soon.
  std::function<void()> schedule_needed;
};

// What the API shows about a node: its record plus live values.
struct NodeStatus {
  Node node;
  bool connected = false;
  std::vector<GpuTelemetry> telemetry;              // latest heartbeat, by GPU
  std::map<std::string, std::string> gpu_attempts;  // GPU uuid -> attempt id using it
  int32_t running_tasks = 0;
};

struct JobDetail {
  Job job;
  std::vector<Attempt> attempts;
};

class Pool {
 public:
  Pool(Store& store, const Clock& clock, PoolOptions options, PoolHooks hooks);

  // Marks every node offline (as of now) so agents get the grace period to
  // reconnect after a server restart. Call once at start-up.
  Status Recover();

  // ---- user side ----
  Result<Job> Submit(const JobSpec& spec, const std::string& owner);
  Result<JobDetail> GetJob(int64_t id);
  Result<std::vector<Job>> ListJobs(const JobQuery& q);
  Result<Job> Cancel(int64_t id);
  Result<std::vector<LogLine>> ReadLogs(int64_t job_id, int64_t after_cursor, int32_t limit);
  Result<std::vector<NodeStatus>> ListNodes();

  // ---- agent side (node_id as returned by AgentHello) ----
  // Registers or updates the node, reconciles the tasks the agent holds with
  // the attempts the server has on it, and returns the welcome to send.
  Result<proto::Welcome> AgentHello(const proto::Hello& hello);
  // Applies one reliable agent message with sequence `seq`. Messages with a
  // seq already applied for this agent instance are skipped (returns OK).
  Status AgentMessage(const std::string& node_id, int64_t seq, const std::string& type,
                      const std::string& body);
  void AgentHeartbeat(const std::string& node_id, const proto::Heartbeat& hb);
  Status AgentDisconnected(const std::string& node_id);
  // The agent applied every outbox message up to `seq`.
  Status AgentAcked(const std::string& node_id, int64_t seq);
  Result<std::vector<OutboxMessage>> PendingOrders(const std::string& node_id, int64_t after_seq);

  // ---- periodic work ----
  // One scheduling pass; returns the number of placements.
  Result<int> Schedule();
  // Turns nodes offline for too long into lost nodes and requeues their work.
  Status CheckNodes();

  bool connected(const std::string& node_id) const { return live_.count(node_id) > 0; }

 private:
  struct LiveNode {
    std::string instance;
    std::vector<GpuTelemetry> telemetry;
    int32_t running_tasks = 0;
  };

  // Applies `event` to the job owning `attempt` (already fenced), carrying
  // out the transition's actions inside `tx`.
  Status ApplyEvent(Tx& tx, Job& job, Attempt& attempt, JobEvent event,
                    const proto::TaskReport* report);
  Status ApplyTaskReport(Tx& tx, const std::string& node_id, const proto::TaskReport& r);
  Status PushStop(Tx& tx, const std::string& node_id, const std::string& attempt_id,
                  const std::string& reason);
  Status SetAgentSeq(Tx& tx, const std::string& node_id, const std::string& instance, int64_t seq);
  Result<std::pair<std::string, int64_t>> GetAgentSeq(Tx& tx, const std::string& node_id);
  // Fires the hooks for what the committed transaction touched.
  void Notify();
  // Forgets what a rolled-back transaction touched.
  void Discard();

  Store& store_;
  const Clock& clock_;
  PoolOptions options_;
  PoolHooks hooks_;
  std::map<std::string, LiveNode> live_;  // connected nodes
  // Collected during a transaction, fired after it commits.
  std::set<std::string> touched_nodes_;
  std::set<int64_t> touched_jobs_;
  bool want_schedule_ = false;
};

}  // namespace gpupool::server
