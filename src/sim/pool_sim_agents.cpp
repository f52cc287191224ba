// The pool engine's simulated agents and the work they do (pool_sim_engine.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "sim/engine_common.h"
#include "sim/pool_sim_engine.h"

namespace gpupool::sim::pool_engine {

std::optional<int64_t> JobIdOf(const std::string& attempt_id) {
  const size_t dot = attempt_id.find('.');
  if (dot == std::string::npos) return std::nullopt;
  int64_t id = 0;
  auto [end, ec] = std::from_chars(attempt_id.data(), attempt_id.data() + dot, id);
  if (ec != std::errc() || end != attempt_id.data() + dot) return std::nullopt;
  return id;
}

std::string PreemptReasonOf(const std::string& message) {
  // sched/pass_preempt.cpp's message names the reason.
  if (message.find("for interactive job") != std::string::npos) return "interactive";
  if (message.find("the node owner's job") != std::string::npos) return "owner";
  return "guarantee";
}

Status PoolSimulator::Hello(size_t ni) {
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
    // Every GPU, to the groups the trace's policy admits.
    NodeLending all;
    for (const GpuInfo& g : h.gpus) all.gpus[g.uuid] = g.memory_mib;
    all.allow_groups.insert(spec.allow_groups.begin(), spec.allow_groups.end());
    all.deny_groups.insert(spec.deny_groups.begin(), spec.deny_groups.end());
    h.lending = std::move(all);
  }
  GP_ASSIGN_OR_RETURN(proto::Welcome w, PoolOf(n.part).AgentHello(h));
  n.id = w.node_id;
  n.agent_seq = w.last_agent_seq;
  node_by_id_[n.id] = ni;
  return Status::Ok();
}

Status PoolSimulator::Send(size_t ni, proto::AgentReport message) {
  SimNode& n = nodes_[ni];
  return PoolOf(n.part).AgentMessage(n.id, ++n.agent_seq, message);
}

Status PoolSimulator::Report(size_t ni, const std::string& attempt, proto::TaskState state,
                             int32_t signal, const std::string& reason) {
  proto::TaskReport r(attempt, state, 0, signal, reason, kEpochMs + now_);
  return Send(ni, r);
}

// The node's agent lets go of the attempt's task: its GPUs are free there.
void PoolSimulator::DropTask(SimNode& n, const std::string& attempt) {
  auto it = n.tasks.find(attempt);
  if (it == n.tasks.end()) return;
  for (const auto& [gpu, milli] : it->second) n.gpu_used[gpu] -= milli;
  n.tasks.erase(it);
}

// Every agent reads its outbox until none has new orders.
Status PoolSimulator::Agents() {
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

Status PoolSimulator::ReadOrders(size_t ni) {
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

Status PoolSimulator::Bad(const std::string& what) const {
  return Status::Internal("pool at t=" + std::to_string(now_) + " ms: " + what);
}

Result<size_t> PoolSimulator::JobOfAttempt(int part, const std::string& attempt) const {
  std::optional<int64_t> id = JobIdOf(attempt);
  auto it = id ? job_by_pool_id_[static_cast<size_t>(part)].find(*id)
               : job_by_pool_id_[static_cast<size_t>(part)].end();
  if (it == job_by_pool_id_[static_cast<size_t>(part)].end()) {
    return Bad("attempt " + attempt + " of no simulated job");
  }
  return it->second;
}

Status PoolSimulator::OnStart(size_t ni, const proto::StartTask& start) {
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
Status PoolSimulator::BeginRun(size_t ji, const proto::StartTask& start) {
  const std::string& attempt_id = start.attempt_id;
  SimJob& j = jobs_[ji];
  // It resumes from the checkpoint the simulation last took.
  if (start.restore_manifest != j.last_manifest) {
    return Bad(attempt_id + " restores checkpoint \"" + start.restore_manifest +
               "\", not the job's newest \"" + j.last_manifest + "\"");
  }
  Part& part = parts_[static_cast<size_t>(j.part)];
  if (j.phase != Phase::kPending) return Bad("job " + std::to_string(j.spec->id) + " not waiting");
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
  r.attempt_id = std::to_string(spec.id) + "." + std::to_string(a->number);
  r.speed = run.speed;
  run.record = RecordStart(result_, ji, spec, std::move(r), j.displaced_from, now_);
  const int64_t end = RunEnd(now_, spec.duration_ms - run.saved, run.speed);
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
void PoolSimulator::ScheduleCheckpoint(size_t ji) {
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
Status PoolSimulator::OnCheckpoint(const Event& e) {
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
double PoolSimulator::Progress(const SimJob& j, int64_t t) const {
  const SimRun& a = *j.run;
  const int64_t until = a.stopped >= 0 ? std::min(t, a.stopped) : t;
  return static_cast<double>(a.saved) + static_cast<double>(until - a.start) * a.speed;
}

// Stops the run's progress now: the work since its last checkpoint is
// lost. Returns the record.
AttemptRecord& PoolSimulator::StopRun(SimJob& j) {
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

Status PoolSimulator::OnStop(size_t ni, const proto::StopTask& stop) {
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

}  // namespace gpupool::sim::pool_engine
