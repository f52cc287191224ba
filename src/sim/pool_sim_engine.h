// The pool engine's parts (sim/pool_sim.h): the simulator's state and the
// PoolSimulator that drives the server's Pool. Internal to pool_sim*.cpp:
// pool_sim.cpp has the event loop, the trace's events, the passes and the
// result; pool_sim_agents.cpp the simulated agents (hello, orders, reports)
// and the work they do (runs, checkpoints, what a stop loses).
//
// Contract: a PoolSimulator runs once (Run), on one thread, over the trace,
// options and extras it was given, which must outlive it; it owns its
// stores, Pools and clock, so runs share nothing. Its errors are values:
// InvalidArgument for a trace it cannot run, Internal for a Pool decision
// that contradicts the simulated machines (see pool_sim.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "proto/messages.h"
#include "server/pool.h"
#include "sim/pool_sim.h"
#include "store/memory_store.h"

namespace gpupool::sim::pool_engine {

// Trace time 0 on the Pool's clock (a plausible epoch time: the Pool treats
// 0 as "never" in places).
constexpr int64_t kEpochMs = 1'700'000'000'000;

// Within one instant, events apply in the DES's order.
enum class EventKind : int {
  kCheckpoint = -1,  // the pool engine's own: an attempt checkpoints
  kEnd = 0,
  kVacated = 1,
  kLeave = 2,
  kReturn = 3,
  kArrival = 4,
  kTick = 5
};

struct Event {
  int64_t t = 0;
  EventKind kind = EventKind::kTick;
  uint64_t seq = 0;
  size_t index = 0;     // job (checkpoint, end, arrival) or node (vacated, leave, return)
  uint64_t gen = 0;     // the job's run (checkpoint, end) or the node's agent (vacated)
  std::string attempt;  // vacated: the attempt the agent stops
};

struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    if (a.t != b.t) return a.t > b.t;
    if (a.kind != b.kind) return static_cast<int>(a.kind) > static_cast<int>(b.kind);
    return a.seq > b.seq;
  }
};

// One simulated agent.
struct SimNode {
  const TraceNode* spec = nullptr;
  int part = -1;  // -1: joins no pool (per-lab mode, owned by no lab)
  bool present = true;
  std::string id;  // the Pool's node id
  int32_t instance_no = 0;
  int64_t agent_seq = 0;   // the agent's reliable messages
  int64_t server_seq = 0;  // outbox orders applied
  uint64_t gen = 0;        // bumped when the agent goes away
  std::map<std::string, std::vector<std::pair<size_t, int32_t>>> tasks;  // attempt -> GPU, milli
  std::vector<int32_t> gpu_used;                                         // milli per GPU
};

enum class Phase { kFuture, kPending, kRunning, kDone };

// The job's live attempt, as the simulator does its work.
struct SimRun {
  std::string attempt_id;
  int64_t start = 0;
  double speed = 1.0;
  int64_t saved = 0;  // progress restored at its start
  int64_t stopped = -1;
  size_t record = 0;
  std::vector<size_t> nodes;
};

struct SimJob {
  const TraceJob* spec = nullptr;
  int part = 0;
  int64_t pool_id = 0;
  Phase phase = Phase::kFuture;
  int64_t saved = 0;
  std::optional<SimRun> run;
  uint64_t gen = 0;
  std::vector<std::string> displaced_from;
  std::string last_manifest;  // of its newest checkpoint; empty: none
};

struct Part {
  std::unique_ptr<MemoryStore> store;
  std::unique_ptr<server::Pool> pool;
  std::set<std::string> outbox;  // nodes with new orders
  std::set<size_t> pending;
  int64_t live = 0;  // attempts the Pool has not closed
  bool dirty = false;
  bool can_place = false;
  bool acted = false;
  int64_t waiting = 0;
};

// "42.3" -> 42.
std::optional<int64_t> JobIdOf(const std::string& attempt_id);
// "interactive", "owner" or "guarantee", from a preemption's stop reason.
std::string PreemptReasonOf(const std::string& message);

class PoolSimulator {
 public:
  PoolSimulator(const Trace& trace, const SimOptions& options, const PoolSimOptions& extra)
      : trace_(trace), opt_(options), extra_(extra), clock_(kEpochMs) {}
  Result<SimResult> Run();

 private:
  // The loop's parts, the trace's events, the passes, the result
  // (pool_sim.cpp).
  Status Setup();
  void Push(Event e);
  Status OnArrival(size_t ji);
  Status OnEnd(const Event& e);
  Status OnVacated(const Event& e);
  Status OnLeave(size_t ni);
  Status OnReturn(size_t ni);
  Status Settle();
  int64_t PreemptorTraceId(int part, int64_t pool_id) const;
  Status Pass(Part& part);
  void Sample();
  void ScheduleTick();
  Result<SimResult> Finish();

  // The simulated agents: hello, orders, reports; and the work of the
  // runs they hold (pool_sim_agents.cpp).
  Status Hello(size_t ni);
  Status Send(size_t ni, proto::AgentReport message);
  Status Report(size_t ni, const std::string& attempt, proto::TaskState state, int32_t signal,
                const std::string& reason);
  void DropTask(SimNode& n, const std::string& attempt);
  Status Agents();
  Status ReadOrders(size_t ni);
  Status Bad(const std::string& what) const;
  Result<size_t> JobOfAttempt(int part, const std::string& attempt) const;
  Status OnStart(size_t ni, const proto::StartTask& start);
  Status BeginRun(size_t ji, const proto::StartTask& start);
  void ScheduleCheckpoint(size_t ji);
  Status OnCheckpoint(const Event& e);
  double Progress(const SimJob& j, int64_t t) const;
  AttemptRecord& StopRun(SimJob& j);
  Status OnStop(size_t ni, const proto::StopTask& stop);

  server::Pool& PoolOf(int part) { return *parts_[static_cast<size_t>(part)].pool; }

  const Trace& trace_;
  const SimOptions opt_;
  const PoolSimOptions& extra_;
  FakeClock clock_;
  SimResult result_;
  std::vector<SimNode> nodes_;
  std::vector<SimJob> jobs_;
  std::vector<Part> parts_;
  std::unordered_map<std::string, size_t> node_by_id_;
  std::vector<std::unordered_map<int64_t, size_t>> job_by_pool_id_;  // per part
  std::set<size_t> closing_;  // jobs whose attempt the Pool may have closed
  std::priority_queue<Event, std::vector<Event>, EventLater> queue_;
  uint64_t seq_ = 0;
  int64_t now_ = 0;
  int64_t stop_at_ = 0;
  int64_t allocated_ = 0;
  bool tick_scheduled_ = false;
};

}  // namespace gpupool::sim::pool_engine
