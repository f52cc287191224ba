#include "sim/pool_sim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <queue>
#include <set>
#include <unordered_map>

#include "common/clock.h"
#include "proto/messages.h"
#include "server/pool.h"
#include "store/memory_store.h"

namespace gpupool::sim {

namespace {

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
  size_t index = 0;     // job (end, arrival) or node (vacated, leave, return)
  uint64_t gen = 0;     // the job's run generation (end) or the node's agent (vacated)
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
std::optional<int64_t> JobIdOf(const std::string& attempt_id) {
  auto dot = attempt_id.find('.');
  int64_t id = 0;
  auto [end, ec] = std::from_chars(attempt_id.data(), attempt_id.data() + dot, id);
  if (dot == std::string::npos || ec != std::errc() || end != attempt_id.data() + dot) {
    return std::nullopt;
  }
  return id;
}

std::string PreemptReasonOf(const std::string& message) {
  // sched/pass_preempt.cpp's message names the reason.
  if (message.find("for interactive job") != std::string::npos) return "interactive";
  if (message.find("the node owner's job") != std::string::npos) return "owner";
  return "guarantee";
}

class PoolSimulator {
 public:
  PoolSimulator(const Trace& trace, const SimOptions& options, const PoolSimOptions& extra)
      : trace_(trace), opt_(options), extra_(extra), clock_(kEpochMs) {}

  Result<SimResult> Run() {
    GP_RETURN_IF_ERROR(Setup());
    while (!queue_.empty()) {
      const int64_t t = queue_.top().t;
      if (t > stop_at_) break;
      now_ = t;
      clock_.SetMs(kEpochMs + t);
      bool tick = false;
      bool only_checkpoints = true;
      while (!queue_.empty() && queue_.top().t == t) {
        Event e = queue_.top();
        queue_.pop();
        only_checkpoints = only_checkpoints && e.kind == EventKind::kCheckpoint;
        switch (e.kind) {
          case EventKind::kCheckpoint:
            GP_RETURN_IF_ERROR(OnCheckpoint(e));
            break;
          case EventKind::kEnd:
            GP_RETURN_IF_ERROR(OnEnd(e));
            break;
          case EventKind::kVacated:
            GP_RETURN_IF_ERROR(OnVacated(e));
            break;
          case EventKind::kLeave:
            GP_RETURN_IF_ERROR(OnLeave(e.index));
            break;
          case EventKind::kReturn:
            GP_RETURN_IF_ERROR(OnReturn(e.index));
            break;
          case EventKind::kArrival:
            GP_RETURN_IF_ERROR(OnArrival(e.index));
            break;
          case EventKind::kTick:
            tick_scheduled_ = false;
            tick = true;
            break;
        }
      }
      // Checkpoints change nothing the scheduler sees: not an instant of the
      // DES's, which has no such events.
      if (only_checkpoints) continue;
      ++result_.event_times;
      // What the events' reports closed, before the pass sees the queue.
      GP_RETURN_IF_ERROR(Settle());
      for (Part& part : parts_) {
        const bool useful_tick = tick && part.can_place && (part.live > 0 || part.acted);
        if (!part.dirty && !useful_tick) continue;
        part.dirty = false;
        if (part.pending.empty()) {  // as the DES: preemption only serves a waiting job
          part.can_place = part.acted = false;
          part.waiting = 0;
          continue;
        }
        GP_RETURN_IF_ERROR(Pass(part));
      }
      GP_RETURN_IF_ERROR(Agents());
      GP_RETURN_IF_ERROR(Settle());
      Sample();
      ScheduleTick();
    }
    return Finish();
  }

 private:
  Status Setup() {
    result_.mode = opt_.mode;
    result_.seed = trace_.meta.seed;
    if (opt_.tick_ms <= 0) return Status::InvalidArgument("tick must be more than 0");
    if (opt_.preempt_grace_ms < 0) return Status::InvalidArgument("grace must not be negative");
    std::map<std::string, size_t> group_index;
    for (size_t g = 0; g < trace_.groups.size(); ++g) group_index[trace_.groups[g].name] = g;
    std::map<std::string, size_t> node_index;
    for (const auto& n : trace_.nodes) {
      if (!n.owner_group.empty() && !group_index.count(n.owner_group)) {
        return Status::InvalidArgument("node " + n.name + ": unknown group " + n.owner_group);
      }
      if (!node_index.emplace(n.name, node_index.size()).second) {
        return Status::InvalidArgument("node " + n.name + " appears twice");
      }
    }
    for (const auto& [name, lending] : extra_.lending) {
      if (!node_index.count(name)) {
        return Status::InvalidArgument("lending: unknown node " + name);
      }
    }
    std::set<int64_t> job_ids;
    for (const auto& j : trace_.jobs) {
      if (!group_index.count(j.group)) {
        return Status::InvalidArgument("job " + std::to_string(j.id) + ": unknown group " +
                                       j.group);
      }
      if (!job_ids.insert(j.id).second) {
        return Status::InvalidArgument("job " + std::to_string(j.id) + " appears twice");
      }
    }
    for (const auto& e : trace_.events) {
      if (!node_index.count(e.node)) {
        return Status::InvalidArgument("provider event: unknown node " + e.node);
      }
    }

    // The scheduler's settings, as the DES makes them.
    sched::SchedulerConfig base;
    base.half_life_ms = opt_.half_life_ms;
    base.anti_thrash_window_ms = opt_.anti_thrash_window_ms;
    base.candidates = opt_.candidates;
    base.placement = opt_.placement;
    base.max_reservations = opt_.max_reservations;
    base.preemption = opt_.mode == SimMode::kPerLab ? opt_.preemption && opt_.per_lab_preemption
                                                    : opt_.preemption;
    for (const auto& n : trace_.nodes) base.model_speed.emplace(n.gpu_model, n.speed);
    auto guarantee = [&](const TraceGroup& g) {
      return g.guaranteed_milli ? *g.guaranteed_milli : OwnedGpuMilli(trace_, g.name);
    };
    std::vector<sched::SchedulerConfig> configs;
    if (opt_.mode == SimMode::kPooled) {
      configs.push_back(base);
      for (const auto& g : trace_.groups) {
        configs[0].groups.push_back({g.name, g.weight, guarantee(g)});
      }
    } else {
      for (const auto& g : trace_.groups) {
        configs.push_back(base);
        configs.back().groups.push_back({g.name, g.weight, guarantee(g)});
      }
    }
    parts_.resize(configs.size());
    job_by_pool_id_.resize(configs.size());
    for (size_t p = 0; p < configs.size(); ++p) {
      server::PoolOptions po;
      po.scheduler = configs[p];
      po.max_placements_per_pass = configs[p].max_placements;
      po.attempt_lease_ms = 0;  // a departed node's attempts are lost at once
      po.max_pending_jobs_per_user = 0;
      // Ids in the order of the names, as the DES's (ties end in node id).
      po.node_id_for = [](const std::string& name) { return "n-" + name; };
      server::PoolHooks hooks;
      Part* part = &parts_[p];
      hooks.outbox_ready = [part](const std::string& node) { part->outbox.insert(node); };
      // The blob store is simulated: every checkpoint's manifest is there.
      hooks.manifest_stored = [](const std::string&) { return true; };
      part->store = std::make_unique<MemoryStore>();
      part->pool = std::make_unique<server::Pool>(*part->store, clock_, std::move(po), hooks);
    }

    nodes_.resize(trace_.nodes.size());
    for (size_t i = 0; i < trace_.nodes.size(); ++i) {
      const TraceNode& spec = trace_.nodes[i];
      SimNode& n = nodes_[i];
      n.spec = &spec;
      n.gpu_used.assign(static_cast<size_t>(std::max(spec.gpus, 0)), 0);
      if (opt_.mode == SimMode::kPooled) {
        n.part = 0;
      } else if (!spec.owner_group.empty()) {
        n.part = static_cast<int>(group_index.at(spec.owner_group));
      }
      if (n.part >= 0) GP_RETURN_IF_ERROR(Hello(i).WithContext("node " + spec.name));
    }

    jobs_.resize(trace_.jobs.size());
    result_.jobs.resize(trace_.jobs.size());
    for (size_t i = 0; i < trace_.jobs.size(); ++i) {
      const TraceJob& spec = trace_.jobs[i];
      SimJob& j = jobs_[i];
      j.spec = &spec;
      j.part = opt_.mode == SimMode::kPooled ? 0 : static_cast<int>(group_index.at(spec.group));
      JobRecord& r = result_.jobs[i];
      r.job_id = spec.id;
      r.group = spec.group;
      r.priority = spec.priority;
      r.submit_ms = spec.submit_ms;
      r.gpu_milli = spec.GpuMilli();
      r.work_ms = spec.duration_ms;
      Push({spec.submit_ms, EventKind::kArrival, 0, i, 0, {}});
      result_.last_submit_ms = std::max(result_.last_submit_ms, spec.submit_ms);
      result_.last_trace_event_ms = std::max(result_.last_trace_event_ms, spec.submit_ms);
    }
    for (const auto& e : trace_.events) {
      Push({e.at_ms,
            e.kind == NodeEventKind::kLeave ? EventKind::kLeave : EventKind::kReturn,
            0,
            node_index.at(e.node),
            0,
            {}});
      result_.last_trace_event_ms = std::max(result_.last_trace_event_ms, e.at_ms);
    }
    stop_at_ = result_.last_trace_event_ms + opt_.drain_ms;
    return Status::Ok();
  }

  void Push(Event e) {
    e.seq = seq_++;
    queue_.push(std::move(e));
  }

  server::Pool& PoolOf(int part) { return *parts_[static_cast<size_t>(part)].pool; }

  // ---- the agents' side ----

  Status Hello(size_t ni) {
    SimNode& n = nodes_[ni];
    const TraceNode& spec = *n.spec;
    proto::Hello h;
    h.node_name = spec.name;
    h.agent_instance = "sim-" + std::to_string(++n.instance_no);
    h.agent_version = "simulated";
    h.last_server_seq = n.server_seq;
    h.cpu_milli = spec.cpu_milli;
    h.memory_mib = spec.memory_mib;
    h.owner_group = spec.owner_group;
    for (int32_t k = 0; k < spec.gpus; ++k) {
      GpuInfo g;
      g.index = k;
      g.uuid = "GPU-SIM-" + spec.name + "-" + std::to_string(k);
      g.name = spec.gpu_model;
      g.memory_mib = spec.gpu_memory_mib;
      g.cc_major = spec.compute_capability / 10;
      g.cc_minor = spec.compute_capability % 10;
      g.simulated = true;
      h.gpus.push_back(std::move(g));
    }
    if (auto l = extra_.lending.find(spec.name); l != extra_.lending.end()) {
      h.lending = l->second;
    } else {
      NodeLending all;
      for (const GpuInfo& g : h.gpus) all.gpus[g.uuid] = g.memory_mib;
      h.lending = std::move(all);
    }
    GP_ASSIGN_OR_RETURN(proto::Welcome w, PoolOf(n.part).AgentHello(h));
    n.id = w.node_id;
    n.agent_seq = w.last_agent_seq;
    node_by_id_[n.id] = ni;
    return Status::Ok();
  }

  Status Send(size_t ni, proto::AgentReport message) {
    SimNode& n = nodes_[ni];
    return PoolOf(n.part).AgentMessage(n.id, ++n.agent_seq, message);
  }

  Status Report(size_t ni, const std::string& attempt, proto::TaskState state, int32_t signal,
                const std::string& reason) {
    proto::TaskReport r(attempt, state, 0, signal, reason, kEpochMs + now_);
    return Send(ni, r);
  }

  // The node's agent lets go of the attempt's task: its GPUs are free there.
  void DropTask(SimNode& n, const std::string& attempt) {
    auto it = n.tasks.find(attempt);
    if (it == n.tasks.end()) return;
    for (const auto& [gpu, milli] : it->second) n.gpu_used[gpu] -= milli;
    n.tasks.erase(it);
  }

  // Every agent reads its outbox until none has new orders.
  Status Agents() {
    for (bool more = true; more;) {
      more = false;
      for (size_t p = 0; p < parts_.size(); ++p) {
        Part& part = parts_[p];
        while (!part.outbox.empty()) {
          more = true;
          const std::string id = *part.outbox.begin();
          part.outbox.erase(part.outbox.begin());
          GP_RETURN_IF_ERROR(ReadOrders(node_by_id_.at(id)));
        }
      }
    }
    return Status::Ok();
  }

  Status ReadOrders(size_t ni) {
    SimNode& n = nodes_[ni];
    if (!n.present) return Status::Ok();  // what it missed is stale when it is back
    GP_ASSIGN_OR_RETURN(auto orders, PoolOf(n.part).PendingOrders(n.id, n.server_seq));
    for (const OutboxMessage& m : orders) {
      n.server_seq = m.seq;
      if (m.type == proto::kStart) {
        GP_ASSIGN_OR_RETURN(proto::StartTask start, proto::DecodeStartTask(m.body));
        GP_RETURN_IF_ERROR(OnStart(ni, start));
      } else if (m.type == proto::kStop) {
        GP_ASSIGN_OR_RETURN(proto::StopTask stop, proto::DecodeStopTask(m.body));
        GP_RETURN_IF_ERROR(OnStop(ni, stop));
      }  // staging a checkpoint takes no simulated time
    }
    return PoolOf(n.part).AgentAcked(n.id, n.server_seq);
  }

  Status Bad(const std::string& what) const {
    return Status::Internal("pool at t=" + std::to_string(now_) + " ms: " + what);
  }

  Result<size_t> JobOfAttempt(int part, const std::string& attempt) const {
    std::optional<int64_t> id = JobIdOf(attempt);
    auto it = id ? job_by_pool_id_[static_cast<size_t>(part)].find(*id)
                 : job_by_pool_id_[static_cast<size_t>(part)].end();
    if (it == job_by_pool_id_[static_cast<size_t>(part)].end()) {
      return Bad("attempt " + attempt + " of no simulated job");
    }
    return it->second;
  }

  Status OnStart(size_t ni, const proto::StartTask& start) {
    SimNode& n = nodes_[ni];
    const std::string where = "start of " + start.attempt_id + " on " + n.spec->name + ": ";
    if (n.tasks.count(start.attempt_id)) return Bad(where + "already holds it");
    GP_ASSIGN_OR_RETURN(size_t ji, JobOfAttempt(n.part, start.attempt_id));
    SimJob& j = jobs_[ji];
    if (j.phase != Phase::kRunning || !j.run || j.run->attempt_id != start.attempt_id) {
      GP_RETURN_IF_ERROR(BeginRun(ji, start));
    }
    // The GPUs must exist and have room (the scheduler's placement checked
    // against the simulated machine).
    std::vector<std::pair<size_t, int32_t>> held;
    const int32_t milli = start.gpu_milli > 0 ? start.gpu_milli : 1000;
    for (const std::string& uuid : start.gpu_uuids) {
      const std::string prefix = "GPU-SIM-" + n.spec->name + "-";
      size_t k = 0;
      auto [end, ec] = std::from_chars(uuid.data() + std::min(prefix.size(), uuid.size()),
                                       uuid.data() + uuid.size(), k);
      if (uuid.rfind(prefix, 0) != 0 || ec != std::errc() || end != uuid.data() + uuid.size() ||
          k >= n.gpu_used.size()) {
        return Bad(where + "no GPU " + uuid + " there");
      }
      if (n.gpu_used[k] + milli > 1000) return Bad(where + "GPU " + uuid + " is full");
      held.emplace_back(k, milli);
    }
    for (const auto& [gpu, m] : held) n.gpu_used[gpu] += m;
    n.tasks[start.attempt_id] = std::move(held);
    proto::TaskReport running(start.attempt_id, proto::TaskState::kRunning, 0, 0, "",
                              kEpochMs + now_);
    if (start.gang && start.gang->rank == 0 && start.gang->mode == Distributed::kTorch) {
      running.master_addr = n.spec->name;
      running.master_port = 29500;
    }
    return Send(ni, running);
  }

  // The first start order of a new attempt: the run and its record begin.
  Status BeginRun(size_t ji, const proto::StartTask& start) {
    const std::string& attempt_id = start.attempt_id;
    SimJob& j = jobs_[ji];
    // It resumes from the checkpoint the simulation last took.
    if (start.restore_manifest != j.last_manifest) {
      return Bad(attempt_id + " restores checkpoint \"" + start.restore_manifest +
                 "\", not the job's newest \"" + j.last_manifest + "\"");
    }
    Part& part = parts_[static_cast<size_t>(j.part)];
    if (j.phase != Phase::kPending)
      return Bad("job " + std::to_string(j.spec->id) + " not waiting");
    GP_ASSIGN_OR_RETURN(server::JobDetail detail, part.pool->GetJob(j.pool_id));
    auto a = std::find_if(detail.attempts.begin(), detail.attempts.end(),
                          [&](const Attempt& x) { return x.id == attempt_id; });
    if (a == detail.attempts.end()) return Bad("no attempt " + attempt_id);
    SimRun run;
    run.attempt_id = attempt_id;
    run.start = now_;
    run.speed = 1e18;
    std::vector<std::string> node_ids;
    if (a->ranks.empty()) node_ids.push_back(a->node_id);
    for (const AttemptRank& r : a->ranks) node_ids.push_back(r.node_id);
    if (node_ids.size() != static_cast<size_t>(j.spec->nodes)) {
      return Bad("attempt " + attempt_id + " on " + std::to_string(node_ids.size()) +
                 " nodes for a job of " + std::to_string(j.spec->nodes));
    }
    AttemptRecord r;
    for (const std::string& id : node_ids) {
      auto n = node_by_id_.find(id);
      if (n == node_by_id_.end() || !nodes_[n->second].present) {
        return Bad("attempt " + attempt_id + " placed on a node that is not there");
      }
      run.nodes.push_back(n->second);
      run.speed = std::min(run.speed, nodes_[n->second].spec->speed);
      r.nodes.push_back(nodes_[n->second].spec->name);
    }
    if (j.spec->priority == sched::PriorityClass::kInteractive) run.speed = 1.0;
    run.saved = j.saved;
    const TraceJob& spec = *j.spec;
    JobRecord& jr = result_.jobs[ji];
    r.job_id = spec.id;
    r.attempt_id = std::to_string(spec.id) + "." + std::to_string(a->number);
    r.group = spec.group;
    r.priority = spec.priority;
    r.gpu_milli = spec.GpuMilli();
    r.speed = run.speed;
    r.start_ms = now_;
    if (!j.displaced_from.empty()) {
      const bool same = std::any_of(r.nodes.begin(), r.nodes.end(), [&](const std::string& n) {
        return std::find(j.displaced_from.begin(), j.displaced_from.end(), n) !=
               j.displaced_from.end();
      });
      if (!same) {
        r.migrated = true;
        ++jr.migrations;
      }
      j.displaced_from.clear();
    }
    run.record = result_.attempts.size();
    result_.attempts.push_back(std::move(r));
    ++jr.attempts;
    if (jr.first_start_ms < 0) jr.first_start_ms = now_;
    jr.waiting_reason.clear();

    const double left = static_cast<double>(spec.duration_ms - run.saved) / run.speed;
    const int64_t end = now_ + std::max<int64_t>(1, static_cast<int64_t>(std::ceil(left)));
    j.run = std::move(run);
    j.phase = Phase::kRunning;
    ++j.gen;
    part.pending.erase(ji);
    ++part.live;
    allocated_ += spec.GpuMilli();
    Push({end, EventKind::kEnd, 0, ji, j.gen, {}});
    ScheduleCheckpoint(ji);
    return Status::Ok();
  }

  // The run's next checkpoint: when its progress reaches the next multiple
  // of the interval before the end (at the end there is nothing to keep).
  void ScheduleCheckpoint(size_t ji) {
    const SimJob& j = jobs_[ji];
    const int64_t interval = j.spec->checkpoint_interval_ms;
    if (interval <= 0 || !j.run) return;
    const SimRun& a = *j.run;
    const double p = Progress(j, now_);
    const int64_t ck =
        (static_cast<int64_t>(std::floor(p / static_cast<double>(interval))) + 1) * interval;
    if (ck >= j.spec->duration_ms) return;
    const double dt = std::ceil(static_cast<double>(ck - a.saved) / a.speed);
    Push({a.start + static_cast<int64_t>(dt), EventKind::kCheckpoint, 0, ji, j.gen, {}});
  }

  // The attempt's agent uploads a checkpoint and posts it, as a real one
  // does (Pool::AddCheckpoint; the blob store is simulated).
  Status OnCheckpoint(const Event& e) {
    SimJob& j = jobs_[e.index];
    if (j.phase != Phase::kRunning || !j.run || j.gen != e.gen) return Status::Ok();
    const int64_t interval = j.spec->checkpoint_interval_ms;
    const int64_t ck =
        static_cast<int64_t>(std::floor(Progress(j, now_) / static_cast<double>(interval))) *
        interval;
    server::CheckpointRequest r;
    r.job_id = j.pool_id;
    r.attempt_id = j.run->attempt_id;
    // A manifest id (64 hex digits) naming the job and the progress kept.
    char id[65];
    std::snprintf(id, sizeof id, "%016llx%016llx%032x", static_cast<unsigned long long>(j.spec->id),
                  static_cast<unsigned long long>(ck), 0u);
    r.manifest = id;
    auto added = PoolOf(j.part).AddCheckpoint(r);
    if (!added.ok()) return added.status().WithContext("checkpoint of " + r.attempt_id);
    j.last_manifest = r.manifest;
    ScheduleCheckpoint(e.index);
    return Status::Ok();
  }

  // Progress (speed-1 ms) of the job's run at `t`.
  double Progress(const SimJob& j, int64_t t) const {
    const SimRun& a = *j.run;
    const int64_t until = a.stopped >= 0 ? std::min(t, a.stopped) : t;
    return static_cast<double>(a.saved) + static_cast<double>(until - a.start) * a.speed;
  }

  // Stops the run's progress now: the work since its last checkpoint is
  // lost. Returns the record.
  AttemptRecord& StopRun(SimJob& j) {
    SimRun& a = *j.run;
    AttemptRecord& r = result_.attempts[a.record];
    int64_t progress = a.saved;
    int64_t at = a.start;
    const int64_t interval = j.spec->checkpoint_interval_ms;
    if (interval > 0) {
      const double p = Progress(j, now_);
      int64_t ck = static_cast<int64_t>(std::floor(p / static_cast<double>(interval))) * interval;
      ck = std::min(ck, j.spec->duration_ms);
      if (ck > a.saved) {
        const double dt = std::ceil(static_cast<double>(ck - a.saved) / a.speed);
        progress = ck;
        at = std::min(now_, a.start + static_cast<int64_t>(dt));
      }
    }
    r.useful_end_ms = at;
    r.lost_work_ms = static_cast<int64_t>(std::llround(Progress(j, now_))) - progress;
    j.saved = progress;
    a.stopped = now_;
    ++j.gen;  // its end event no longer applies
    return r;
  }

  Status OnStop(size_t ni, const proto::StopTask& stop) {
    SimNode& n = nodes_[ni];
    if (!n.tasks.count(stop.attempt_id)) return Status::Ok();  // not held here: stale
    GP_ASSIGN_OR_RETURN(size_t ji, JobOfAttempt(n.part, stop.attempt_id));
    SimJob& j = jobs_[ji];
    if (!j.run || j.run->attempt_id != stop.attempt_id) {
      return Bad("stop of " + stop.attempt_id + ", not its job's run");
    }
    if (j.run->stopped < 0) {
      // Nothing else stops a running attempt here: a preemption.
      if (!stop.requeue) return Bad("stop of " + stop.attempt_id + " (" + stop.reason + ")");
      AttemptRecord& r = StopRun(j);
      r.end = AttemptEnd::kPreempted;
      r.preempted_for = PreemptReasonOf(stop.reason);
      ++result_.jobs[ji].preemptions;
      parts_[static_cast<size_t>(n.part)].acted = true;
    }
    Push({now_ + opt_.preempt_grace_ms, EventKind::kVacated, 0, ni, n.gen, stop.attempt_id});
    return Status::Ok();
  }

  // ---- events ----

  Status OnArrival(size_t ji) {
    SimJob& j = jobs_[ji];
    const TraceJob& t = *j.spec;
    JobSpec spec;
    spec.name = "sim-" + std::to_string(t.id);
    spec.run = "simulated";
    spec.group = t.group;
    spec.priority = static_cast<JobPriority>(static_cast<int>(t.priority));
    spec.resources.gpus = t.gpus;
    spec.resources.gpu_milli = t.gpu_milli;
    spec.resources.gpu_memory_mib = t.gpu_memory_mib;
    spec.resources.gpu_models = t.gpu_models;
    spec.resources.nodes = t.nodes;
    spec.resources.cpu_milli = t.cpu_milli;
    spec.resources.memory_mib = t.memory_mib;
    spec.max_runtime_ms = t.runtime_limit_ms;
    if (t.checkpoint_interval_ms > 0) {
      // It checkpoints, so it may be preempted. The simulator keeps its
      // checkpoints (the trace's interval); the server is not told the
      // interval, which it only passes to the agent (and which a trace may
      // set below the server's minimum).
      CheckpointSpec c;
      c.interval_ms = 0;
      c.grace_ms = std::max<int64_t>(1, opt_.preempt_grace_ms);
      spec.checkpoint = c;
    }
    Part& part = parts_[static_cast<size_t>(j.part)];
    auto job = part.pool->Submit(spec, "sim-" + t.group);
    if (!job.ok()) return job.status().WithContext("job " + std::to_string(t.id));
    j.pool_id = job->id;
    job_by_pool_id_[static_cast<size_t>(j.part)][job->id] = ji;
    j.phase = Phase::kPending;
    part.pending.insert(ji);
    part.dirty = true;
    return Status::Ok();
  }

  Status OnEnd(const Event& e) {
    SimJob& j = jobs_[e.index];
    if (j.phase != Phase::kRunning || !j.run || j.gen != e.gen) return Status::Ok();
    // Every rank's agent reports a clean exit.
    for (size_t ni : j.run->nodes) {
      if (!nodes_[ni].tasks.count(j.run->attempt_id)) continue;
      DropTask(nodes_[ni], j.run->attempt_id);
      GP_RETURN_IF_ERROR(Report(ni, j.run->attempt_id, proto::TaskState::kExited, 0, ""));
    }
    j.run->stopped = now_;
    closing_.insert(e.index);
    return Status::Ok();
  }

  Status OnVacated(const Event& e) {
    SimNode& n = nodes_[e.index];
    if (n.gen != e.gen || !n.tasks.count(e.attempt)) return Status::Ok();
    DropTask(n, e.attempt);
    GP_RETURN_IF_ERROR(Report(e.index, e.attempt, proto::TaskState::kExited, 15, "stopped"));
    GP_ASSIGN_OR_RETURN(size_t ji, JobOfAttempt(n.part, e.attempt));
    closing_.insert(ji);
    return Status::Ok();
  }

  Status OnLeave(size_t ni) {
    SimNode& n = nodes_[ni];
    if (!n.present) return Status::Ok();
    n.present = false;
    if (n.part < 0) return Status::Ok();
    for (const auto& [attempt, held] : n.tasks) {
      GP_ASSIGN_OR_RETURN(size_t ji, JobOfAttempt(n.part, attempt));
      SimJob& j = jobs_[ji];
      if (!j.run || j.run->attempt_id != attempt) continue;
      if (j.run->stopped < 0) {
        AttemptRecord& r = StopRun(j);
        r.end = AttemptEnd::kNodeLeft;
        ++result_.jobs[ji].displacements;
        j.displaced_from.push_back(n.spec->name);
      }
      closing_.insert(ji);
    }
    while (!n.tasks.empty()) DropTask(n, n.tasks.begin()->first);
    server::Pool& pool = PoolOf(n.part);
    GP_RETURN_IF_ERROR(Send(ni, proto::Leave{"the provider took the machine away (simulated)"}));
    GP_RETURN_IF_ERROR(pool.AgentDisconnected(n.id));
    ++n.gen;
    parts_[static_cast<size_t>(n.part)].dirty = true;
    // Leases are off: the Pool loses what ran there at once.
    return pool.CheckNodes();
  }

  Status OnReturn(size_t ni) {
    SimNode& n = nodes_[ni];
    if (n.present) return Status::Ok();
    n.present = true;
    if (n.part < 0) return Status::Ok();
    parts_[static_cast<size_t>(n.part)].dirty = true;
    return Hello(ni);
  }

  // Attempts the Pool may have closed: their fate is the Pool's.
  Status Settle() {
    for (auto it = closing_.begin(); it != closing_.end();) {
      const size_t ji = *it;
      SimJob& j = jobs_[ji];
      Part& part = parts_[static_cast<size_t>(j.part)];
      GP_ASSIGN_OR_RETURN(server::JobDetail d, part.pool->GetJob(j.pool_id));
      auto a = std::find_if(d.attempts.begin(), d.attempts.end(),
                            [&](const Attempt& x) { return x.id == j.run->attempt_id; });
      if (a == d.attempts.end()) return Bad("no attempt " + j.run->attempt_id);
      if (IsLive(a->state)) {
        ++it;
        continue;
      }
      AttemptRecord& r = result_.attempts[j.run->record];
      r.end_ms = a->finished_ms - kEpochMs;
      switch (a->state) {
        case AttemptState::kSucceeded:
          r.end = AttemptEnd::kCompleted;
          r.useful_end_ms = r.end_ms;
          break;
        case AttemptState::kPreempted:
          if (r.end != AttemptEnd::kPreempted) return Bad(a->id + " preempted unseen");
          r.preemptor_job_id = PreemptorTraceId(j.part, a->preempt_for_job);
          break;
        case AttemptState::kLost:
          // Its node left (or left while it vacated for a preemption).
          if (r.end != AttemptEnd::kNodeLeft && r.end != AttemptEnd::kPreempted) {
            return Bad(a->id + " lost unseen");
          }
          break;
        default:
          return Bad("attempt " + a->id + " ended " + std::string(AttemptStateName(a->state)) +
                     ", which the simulation does not model");
      }
      if (d.job.state == JobState::kSucceeded) {
        j.phase = Phase::kDone;
        result_.jobs[ji].end_ms = r.end_ms;
      } else if (d.job.state == JobState::kPending) {
        j.phase = Phase::kPending;
        part.pending.insert(ji);
      } else {
        return Bad("job " + std::to_string(j.spec->id) + " is " +
                   std::string(JobStateName(d.job.state)) + " after its attempt " + a->id);
      }
      j.run.reset();
      --part.live;
      part.dirty = true;
      allocated_ -= j.spec->GpuMilli();
      it = closing_.erase(it);
    }
    return Status::Ok();
  }

  int64_t PreemptorTraceId(int part, int64_t pool_id) const {
    const auto& m = job_by_pool_id_[static_cast<size_t>(part)];
    auto it = m.find(pool_id);
    return it == m.end() ? 0 : jobs_[it->second].spec->id;
  }

  // One scheduling pass of the pool, and where its queue stands.
  Status Pass(Part& part) {
    ++result_.decide_calls;
    auto placed = part.pool->Schedule();
    if (!placed.ok()) return placed.status().WithContext("pool at t=" + std::to_string(now_));
    part.acted = *placed > 0;  // preemptions show in the agents' stop orders
    part.can_place = false;
    part.waiting = 0;
    for (size_t ji : part.pending) {
      std::optional<server::QueueInfo> q = part.pool->QueueInfoFor(jobs_[ji].pool_id);
      if (!q) continue;
      if (!q->unsatisfiable) {
        part.can_place = true;
        ++part.waiting;
      }
    }
    return Status::Ok();
  }

  void Sample() {
    StateSample s;
    s.t_ms = now_;
    for (const SimNode& n : nodes_) {
      if (n.present) s.capacity_milli += int64_t{n.spec->gpus} * 1000;
    }
    s.allocated_milli = allocated_;
    for (const Part& p : parts_) {
      s.pending_jobs += static_cast<int64_t>(p.pending.size());
      s.waiting_jobs += p.waiting;
    }
    result_.samples.push_back(s);
  }

  void ScheduleTick() {
    if (tick_scheduled_) return;
    const bool useful = std::any_of(parts_.begin(), parts_.end(), [](const Part& p) {
      return p.can_place && (p.live > 0 || p.acted);
    });
    if (!useful) return;
    tick_scheduled_ = true;
    Push({now_ + opt_.tick_ms, EventKind::kTick, 0, 0, 0, {}});
  }

  Result<SimResult> Finish() {
    result_.end_ms = now_;
    for (size_t ji = 0; ji < jobs_.size(); ++ji) {
      SimJob& j = jobs_[ji];
      if (j.phase != Phase::kDone) result_.drained = false;
      if (j.phase == Phase::kPending) {
        GP_ASSIGN_OR_RETURN(server::JobDetail d, PoolOf(j.part).GetJob(j.pool_id));
        result_.jobs[ji].waiting_reason = d.job.reason;
      }
      if (!j.run) continue;
      AttemptRecord& r = result_.attempts[j.run->record];
      r.end_ms = now_;
      if (j.run->stopped < 0) {
        r.end = AttemptEnd::kUnfinished;
        r.useful_end_ms = now_;
      }
    }
    return std::move(result_);
  }

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

}  // namespace

Result<SimResult> SimulateThroughPool(const Trace& trace, const SimOptions& options,
                                      const PoolSimOptions& extra) {
  PoolSimulator sim(trace, options, extra);
  return sim.Run();
}

}  // namespace gpupool::sim
