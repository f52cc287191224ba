// The pool engine's event loop, the trace's events, the passes and the
// result (pool_sim_engine.h).
#include <algorithm>
#include <cmath>

#include "sim/engine_common.h"
#include "sim/pool_sim.h"
#include "sim/pool_sim_engine.h"

namespace gpupool::sim {
namespace pool_engine {

Result<SimResult> PoolSimulator::Run() {
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

Status PoolSimulator::Setup() {
  result_.mode = opt_.mode;
  result_.seed = trace_.meta.seed;
  if (opt_.tick_ms <= 0) return Status::InvalidArgument("tick must be more than 0");
  if (opt_.preempt_grace_ms < 0) return Status::InvalidArgument("grace must not be negative");
  GP_RETURN_IF_ERROR(CheckTraceRefs(trace_));
  std::map<std::string, size_t> group_index;
  for (size_t g = 0; g < trace_.groups.size(); ++g) group_index[trace_.groups[g].name] = g;
  std::map<std::string, size_t> node_index;
  for (const auto& n : trace_.nodes) node_index.emplace(n.name, node_index.size());
  for (const auto& [name, lending] : extra_.lending) {
    if (!node_index.count(name)) {
      return Status::InvalidArgument("lending: unknown node " + name);
    }
  }

  // The scheduler's settings, as the DES makes them.
  std::vector<sched::SchedulerConfig> configs = PartitionConfigs(trace_, opt_);
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
    result_.jobs[i] = NewJobRecord(spec);
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

void PoolSimulator::Push(Event e) {
  e.seq = seq_++;
  queue_.push(std::move(e));
}

Status PoolSimulator::OnArrival(size_t ji) {
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
    // The agents vacate preempt_grace_ms after a stop order whatever it
    // says; the spec's grace need only be one the server accepts.
    c.grace_ms = std::clamp<int64_t>(opt_.preempt_grace_ms, 1000, 3600 * 1000);
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

Status PoolSimulator::OnEnd(const Event& e) {
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

Status PoolSimulator::OnVacated(const Event& e) {
  SimNode& n = nodes_[e.index];
  if (n.gen != e.gen || !n.tasks.count(e.attempt)) return Status::Ok();
  DropTask(n, e.attempt);
  GP_RETURN_IF_ERROR(Report(e.index, e.attempt, proto::TaskState::kExited, 15, "stopped"));
  GP_ASSIGN_OR_RETURN(size_t ji, JobOfAttempt(n.part, e.attempt));
  closing_.insert(ji);
  return Status::Ok();
}

Status PoolSimulator::OnLeave(size_t ni) {
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

Status PoolSimulator::OnReturn(size_t ni) {
  SimNode& n = nodes_[ni];
  if (n.present) return Status::Ok();
  n.present = true;
  if (n.part < 0) return Status::Ok();
  parts_[static_cast<size_t>(n.part)].dirty = true;
  return Hello(ni);
}

// Attempts the Pool may have closed: their fate is the Pool's.
Status PoolSimulator::Settle() {
  for (auto it = closing_.begin(); it != closing_.end();) {
    const size_t ji = *it;
    SimJob& j = jobs_[ji];
    Part& part = parts_[static_cast<size_t>(j.part)];
    if (!j.run) return Bad("job " + std::to_string(j.spec->id) + " closing without a run");
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

int64_t PoolSimulator::PreemptorTraceId(int part, int64_t pool_id) const {
  const auto& m = job_by_pool_id_[static_cast<size_t>(part)];
  auto it = m.find(pool_id);
  return it == m.end() ? 0 : jobs_[it->second].spec->id;
}

// One scheduling pass of the pool, and where its queue stands.
Status PoolSimulator::Pass(Part& part) {
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

void PoolSimulator::Sample() {
  result_.samples.push_back(SampleOf(now_, nodes_, allocated_, parts_));
}

void PoolSimulator::ScheduleTick() {
  if (tick_scheduled_) return;
  const bool useful = std::any_of(parts_.begin(), parts_.end(), [](const Part& p) {
    return p.can_place && (p.live > 0 || p.acted);
  });
  if (!useful) return;
  tick_scheduled_ = true;
  Push({now_ + opt_.tick_ms, EventKind::kTick, 0, 0, 0, {}});
}

Result<SimResult> PoolSimulator::Finish() {
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

}  // namespace pool_engine

Result<SimResult> SimulateThroughPool(const Trace& trace, const SimOptions& options,
                                      const PoolSimOptions& extra) {
  pool_engine::PoolSimulator sim(trace, options, extra);
  return sim.Run();
}

}  // namespace gpupool::sim
