#include "server/pool.h"

#include <algorithm>
#include <charconv>

#include "common/ids.h"
#include "model/job_spec.h"
#include "model/job_state.h"
#include "sched/scheduler.h"

namespace gpupool::server {
namespace {

std::string AgentSeqKey(const std::string& node_id) { return "agent_seq/" + node_id; }

// Text a user reads for an attempt that ended without a clean exit.
std::string ExitReason(const proto::TaskReport& r) {
  if (!r.reason.empty()) return r.reason;
  if (r.signal > 0) return "killed by signal " + std::to_string(r.signal);
  if (r.state == "exited" && r.exit_code != 0)
    return "exited with code " + std::to_string(r.exit_code);
  return "";
}

}  // namespace

Pool::Pool(Store& store, const Clock& clock, PoolOptions options, PoolHooks hooks)
    : store_(store), clock_(clock), options_(options), hooks_(std::move(hooks)) {}

void Pool::Notify() {
  std::set<std::string> nodes;
  std::set<int64_t> jobs;
  nodes.swap(touched_nodes_);
  jobs.swap(touched_jobs_);
  if (hooks_.outbox_ready) {
    for (const auto& n : nodes) hooks_.outbox_ready(n);
  }
  if (hooks_.job_changed) {
    for (int64_t j : jobs) hooks_.job_changed(j);
  }
  if (want_schedule_ && hooks_.schedule_needed) hooks_.schedule_needed();
  want_schedule_ = false;
}

void Pool::Discard() {
  touched_nodes_.clear();
  touched_jobs_.clear();
  want_schedule_ = false;
}

Status Pool::Recover() {
  int64_t now = clock_.NowMs();
  return store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    for (Node& n : nodes) {
      if (n.state != NodeState::kReady) continue;
      n.state = NodeState::kOffline;
      n.last_seen_ms = now;
      GP_RETURN_IF_ERROR(tx.PutNode(n));
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- user side

Result<Job> Pool::Submit(const JobSpec& spec, const std::string& owner) {
  GP_RETURN_IF_ERROR(ValidateJobSpec(spec));
  Job job;
  job.owner = owner;
  job.spec = spec;
  job.state = JobState::kPending;
  job.reason = "waiting for the scheduler";
  job.created_ms = job.updated_ms = clock_.NowMs();
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(job.id, tx.InsertJob(job));
    return Status::Ok();
  }));
  touched_jobs_.insert(job.id);
  want_schedule_ = true;
  Notify();
  return job;
}

Result<JobDetail> Pool::GetJob(int64_t id) {
  JobDetail d;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(id));
    if (!job) return Status::NotFound("job " + std::to_string(id) + " does not exist");
    d.job = *std::move(job);
    AttemptQuery q;
    q.job_id = id;
    GP_ASSIGN_OR_RETURN(d.attempts, tx.ListAttempts(q));
    return Status::Ok();
  }));
  return d;
}

Result<std::vector<Job>> Pool::ListJobs(const JobQuery& q) {
  std::vector<Job> jobs;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(jobs, tx.ListJobs(q));
    return Status::Ok();
  }));
  return jobs;
}

Result<Job> Pool::Cancel(int64_t id) {
  Job job;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto found, tx.GetJob(id));
    if (!found) return Status::NotFound("job " + std::to_string(id) + " does not exist");
    job = *std::move(found);
    if (IsTerminal(job.state)) return Status::Ok();  // cancelling a finished job is a no-op
    Attempt attempt;
    if (!job.current_attempt.empty()) {
      GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(job.current_attempt));
      if (a) attempt = *std::move(a);
    }
    proto::TaskReport why;
    why.reason = "cancelled by the user";
    return ApplyEvent(tx, job, attempt, JobEvent::kCancel, &why);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return job;
}

Result<std::vector<LogLine>> Pool::ReadLogs(int64_t job_id, int64_t after_cursor, int32_t limit) {
  std::vector<LogLine> lines;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(lines, tx.ReadLogs(job_id, after_cursor, limit));
    return Status::Ok();
  }));
  return lines;
}

Result<std::vector<NodeStatus>> Pool::ListNodes() {
  std::vector<NodeStatus> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    AttemptQuery q;
    q.live_only = true;
    GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts(q));
    std::map<std::string, std::map<std::string, std::string>> used;
    for (const Attempt& a : attempts) {
      for (const auto& g : a.gpu_uuids) used[a.node_id][g] = a.id;
    }
    for (Node& n : nodes) {
      NodeStatus st;
      auto it = live_.find(n.id);
      st.connected = it != live_.end();
      if (st.connected) {
        st.telemetry = it->second.telemetry;
        st.running_tasks = it->second.running_tasks;
      }
      st.gpu_attempts = used[n.id];
      st.node = std::move(n);
      out.push_back(std::move(st));
    }
    return Status::Ok();
  }));
  return out;
}

// --------------------------------------------------------------- transitions

Status Pool::PushStop(Tx& tx, const std::string& node_id, const std::string& attempt_id,
                      const std::string& reason) {
  proto::StopTask stop{attempt_id, reason};
  GP_ASSIGN_OR_RETURN(int64_t seq,
                      tx.PushOutbox(node_id, std::string(proto::kStop), proto::Encode(stop)));
  (void)seq;
  touched_nodes_.insert(node_id);
  return Status::Ok();
}

Status Pool::ApplyEvent(Tx& tx, Job& job, Attempt& attempt, JobEvent event,
                        const proto::TaskReport* report) {
  JobTransition t = Step(job.state, event);
  if (!t.accepted) return Status::Ok();  // stale or duplicate event: nothing to do
  int64_t now = clock_.NowMs();
  for (const JobAction& action : t.actions) {
    switch (action.type) {
      case JobActionType::kStartAttempt:
        // Placement-specific; Schedule() creates the attempt itself.
        break;
      case JobActionType::kMarkAttemptRunning:
        attempt.state = AttemptState::kRunning;
        attempt.started_ms = report && report->ts_ms ? report->ts_ms : now;
        if (job.started_ms == 0) job.started_ms = attempt.started_ms;
        GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        break;
      case JobActionType::kStopAttempt:
        GP_RETURN_IF_ERROR(PushStop(tx, attempt.node_id, attempt.id, "cancelled"));
        break;
      case JobActionType::kCloseAttempt:
        attempt.state = action.close_as;
        attempt.finished_ms = now;
        if (report && report->state == "exited") attempt.exit_code = report->exit_code;
        if (report) attempt.reason = ExitReason(*report);
        GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
        job.current_attempt.clear();
        want_schedule_ = true;  // its GPUs are free again
        break;
    }
  }
  job.state = t.next;
  job.updated_ms = now;
  if (IsTerminal(job.state)) {
    job.finished_ms = now;
    job.exit_code = attempt.exit_code;
    job.reason = job.state == JobState::kSucceeded ? "" : (report ? ExitReason(*report) : "");
  } else if (job.state == JobState::kPending) {
    job.reason = "requeued: attempt " + attempt.id + " was lost" +
                 (report && !report->reason.empty() ? " (" + report->reason + ")" : "");
  } else {
    job.reason.clear();
  }
  GP_RETURN_IF_ERROR(tx.UpdateJob(job));
  touched_jobs_.insert(job.id);
  return Status::Ok();
}

Status Pool::ApplyTaskReport(Tx& tx, const std::string& node_id, const proto::TaskReport& r) {
  GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(r.attempt_id));
  std::optional<Job> job;
  if (attempt) {
    GP_ASSIGN_OR_RETURN(job, tx.GetJob(attempt->job_id));
  }
  // Fencing: only the job's live attempt, on the node it was placed on, may
  // change the job. Anything else still running there is told to stop.
  bool current = attempt && job && attempt->node_id == node_id && IsLive(attempt->state) &&
                 job->current_attempt == attempt->id;
  if (!current) {
    if (r.state == "running") return PushStop(tx, node_id, r.attempt_id, "stale attempt");
    return Status::Ok();
  }
  JobEvent event;
  if (r.state == "running")
    event = JobEvent::kStarted;
  else if (r.state == "exited")
    event = ExitEvent(r.exit_code);
  else if (r.state == "failed")
    event = JobEvent::kAttemptFailed;
  else
    event = JobEvent::kLost;
  return ApplyEvent(tx, *job, *attempt, event, &r);
}

// --------------------------------------------------------------- agent side

Result<std::pair<std::string, int64_t>> Pool::GetAgentSeq(Tx& tx, const std::string& node_id) {
  GP_ASSIGN_OR_RETURN(auto v, tx.GetMeta(AgentSeqKey(node_id)));
  if (!v) return std::make_pair(std::string(), int64_t{0});
  auto space = v->find(' ');
  if (space == std::string::npos) return Status::Internal("corrupt " + AgentSeqKey(node_id));
  int64_t seq = 0;
  auto [end, ec] = std::from_chars(v->data() + space + 1, v->data() + v->size(), seq);
  if (ec != std::errc() || end != v->data() + v->size())
    return Status::Internal("corrupt " + AgentSeqKey(node_id));
  return std::make_pair(v->substr(0, space), seq);
}

Status Pool::SetAgentSeq(Tx& tx, const std::string& node_id, const std::string& instance,
                         int64_t seq) {
  return tx.PutMeta(AgentSeqKey(node_id), instance + " " + std::to_string(seq));
}

Result<proto::Welcome> Pool::AgentHello(const proto::Hello& hello) {
  proto::Welcome welcome;
  welcome.heartbeat_ms = options_.heartbeat_ms;
  int64_t now = clock_.NowMs();
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto existing, tx.GetNodeByName(hello.node_name));
    Node node;
    if (existing) {
      node = *std::move(existing);
    } else {
      node.id = NewId("n");
      node.registered_ms = now;
    }
    node.name = hello.node_name;
    node.state = NodeState::kReady;
    node.gpus = hello.gpus;
    node.cpu_milli = hello.cpu_milli;
    node.memory_mib = hello.memory_mib;
    node.driver_version = hello.driver_version;
    node.cuda_version = hello.cuda_version;
    node.agent_version = hello.agent_version;
    node.labels = hello.labels;
    node.last_seen_ms = now;
    GP_RETURN_IF_ERROR(tx.PutNode(node));
    welcome.node_id = node.id;

    // Sequence numbers restart with every agent process.
    GP_ASSIGN_OR_RETURN(auto seq, GetAgentSeq(tx, node.id));
    welcome.last_agent_seq = seq.first == hello.agent_instance ? seq.second : 0;
    GP_RETURN_IF_ERROR(SetAgentSeq(tx, node.id, hello.agent_instance, welcome.last_agent_seq));

    // Orders the agent has applied need not be resent.
    GP_RETURN_IF_ERROR(tx.AckOutbox(node.id, hello.last_server_seq));

    std::set<std::string> held;
    for (const proto::TaskReport& r : hello.tasks) {
      held.insert(r.attempt_id);
      GP_RETURN_IF_ERROR(ApplyTaskReport(tx, node.id, r));
    }
    // Starts still in the outbox will reach the agent; other live attempts
    // the agent does not hold are lost.
    GP_ASSIGN_OR_RETURN(auto unsent, tx.ListOutbox(node.id, hello.last_server_seq));
    std::set<std::string> on_the_way;
    for (const OutboxMessage& m : unsent) {
      if (m.type != proto::kStart) continue;
      auto start = proto::DecodeStartTask(m.body);
      if (start.ok()) on_the_way.insert(start->attempt_id);
    }
    AttemptQuery q;
    q.node_id = node.id;
    q.live_only = true;
    GP_ASSIGN_OR_RETURN(auto live, tx.ListAttempts(q));
    for (Attempt& a : live) {
      if (held.count(a.id) || on_the_way.count(a.id)) continue;
      GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(a.job_id));
      if (!job || job->current_attempt != a.id) continue;
      proto::TaskReport lost{a.id, "lost", 0, 0, "the agent on " + node.name + " no longer has it",
                             now};
      GP_RETURN_IF_ERROR(ApplyEvent(tx, *job, a, JobEvent::kLost, &lost));
    }
    GP_ASSIGN_OR_RETURN(live, tx.ListAttempts(q));
    for (const Attempt& a : live) {
      GP_ASSIGN_OR_RETURN(welcome.log_offsets[a.id], tx.LastLogOffset(a.id));
    }
    for (const std::string& id : held) {
      if (!welcome.log_offsets.count(id)) {
        GP_ASSIGN_OR_RETURN(welcome.log_offsets[id], tx.LastLogOffset(id));
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  live_[welcome.node_id] = LiveNode{hello.agent_instance, {}, 0};
  touched_nodes_.insert(welcome.node_id);
  want_schedule_ = true;
  Notify();
  return welcome;
}

Status Pool::AgentMessage(const std::string& node_id, int64_t seq, const std::string& type,
                          const std::string& body) {
  auto live = live_.find(node_id);
  if (live == live_.end())
    return Status::FailedPrecondition("node " + node_id + " is not connected");
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto last, GetAgentSeq(tx, node_id));
    if (last.first == live->second.instance && seq <= last.second)
      return Status::Ok();  // duplicate
    if (type == proto::kTaskStatus) {
      GP_ASSIGN_OR_RETURN(auto report, proto::DecodeTaskReport(body));
      GP_RETURN_IF_ERROR(ApplyTaskReport(tx, node_id, report));
    } else if (type == proto::kLogs) {
      GP_ASSIGN_OR_RETURN(auto chunk, proto::DecodeLogChunk(body));
      GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(chunk.attempt_id));
      // Output of attempts the server never made, or made elsewhere, is dropped.
      if (attempt && attempt->node_id == node_id && !chunk.lines.empty()) {
        std::vector<LogLine> lines;
        lines.reserve(chunk.lines.size());
        for (auto& l : chunk.lines) {
          lines.push_back({chunk.attempt_id, l.offset, l.stream, l.ts_ms, std::move(l.text), 0});
        }
        GP_RETURN_IF_ERROR(tx.AppendLogs(attempt->job_id, lines));
        touched_jobs_.insert(attempt->job_id);
      }
    } else {
      return Status::InvalidArgument("type: unknown reliable message type \"" + type + "\"");
    }
    return SetAgentSeq(tx, node_id, live->second.instance, seq);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return Status::Ok();
}

void Pool::AgentHeartbeat(const std::string& node_id, const proto::Heartbeat& hb) {
  auto it = live_.find(node_id);
  if (it == live_.end()) return;
  it->second.telemetry = hb.telemetry;
  it->second.running_tasks = hb.running_tasks;
}

Status Pool::AgentDisconnected(const std::string& node_id) {
  live_.erase(node_id);
  int64_t now = clock_.NowMs();
  return store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
    if (!node || node->state != NodeState::kReady) return Status::Ok();
    node->state = NodeState::kOffline;
    node->last_seen_ms = now;
    return tx.PutNode(*node);
  });
}

Status Pool::AgentAcked(const std::string& node_id, int64_t seq) {
  return store_.Transact([&](Tx& tx) { return tx.AckOutbox(node_id, seq); });
}

Result<std::vector<OutboxMessage>> Pool::PendingOrders(const std::string& node_id,
                                                       int64_t after_seq) {
  std::vector<OutboxMessage> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(out, tx.ListOutbox(node_id, after_seq));
    return Status::Ok();
  }));
  return out;
}

// ------------------------------------------------------------ periodic work

Status Pool::CheckNodes() {
  int64_t now = clock_.NowMs();
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    for (Node& n : nodes) {
      if (n.state != NodeState::kOffline || live_.count(n.id)) continue;
      if (now - n.last_seen_ms < options_.node_lost_after_ms) continue;
      n.state = NodeState::kLost;
      GP_RETURN_IF_ERROR(tx.PutNode(n));
      AttemptQuery q;
      q.node_id = n.id;
      q.live_only = true;
      GP_ASSIGN_OR_RETURN(auto live, tx.ListAttempts(q));
      for (Attempt& a : live) {
        GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(a.job_id));
        if (!job || job->current_attempt != a.id) continue;
        proto::TaskReport lost{a.id, "lost", 0, 0, "node " + n.name + " stopped answering", now};
        GP_RETURN_IF_ERROR(ApplyEvent(tx, *job, a, JobEvent::kLost, &lost));
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return Status::Ok();
}

Result<int> Pool::Schedule() {
  int placed = 0;
  int64_t now = clock_.NowMs();
  Status s = store_.Transact([&](Tx& tx) -> Status {
    JobQuery pending_q;
    pending_q.states = {JobState::kPending};
    pending_q.limit = 100000;
    GP_ASSIGN_OR_RETURN(auto pending, tx.ListJobs(pending_q));
    if (pending.empty()) return Status::Ok();

    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    JobQuery live_q;
    live_q.states = {JobState::kScheduled, JobState::kRunning};
    live_q.limit = 1000000;
    GP_ASSIGN_OR_RETURN(auto live_jobs, tx.ListJobs(live_q));
    AttemptQuery aq;
    aq.live_only = true;
    GP_ASSIGN_OR_RETURN(auto live_attempts, tx.ListAttempts(aq));

    std::map<int64_t, const Job*> job_by_id;
    for (const Job& j : live_jobs) job_by_id[j.id] = &j;
    std::map<std::string, sched::NodeView> views;
    sched::Snapshot snap;
    for (const Node& n : nodes) {
      sched::NodeView v;
      v.id = n.id;
      v.name = n.name;
      v.ready = n.state == NodeState::kReady && live_.count(n.id) > 0;
      for (const GpuInfo& g : n.gpus) v.gpus.push_back({g.uuid, g.name, g.memory_mib, true});
      v.cpu_milli_total = v.cpu_milli_free = n.cpu_milli;
      v.memory_mib_total = v.memory_mib_free = n.memory_mib;
      views[n.id] = std::move(v);
    }
    for (const Attempt& a : live_attempts) {
      auto v = views.find(a.node_id);
      if (v == views.end()) continue;
      for (auto& g : v->second.gpus) {
        if (std::find(a.gpu_uuids.begin(), a.gpu_uuids.end(), g.uuid) != a.gpu_uuids.end())
          g.free = false;
      }
      if (auto j = job_by_id.find(a.job_id); j != job_by_id.end()) {
        v->second.cpu_milli_free -= j->second->spec.resources.cpu_milli;
        v->second.memory_mib_free -= j->second->spec.resources.memory_mib;
      }
    }
    for (auto& [id, v] : views) snap.nodes.push_back(std::move(v));
    std::map<int64_t, Job*> pending_by_id;
    for (Job& j : pending) {
      snap.queue.push_back({j.id, j.spec.resources});
      pending_by_id[j.id] = &j;
    }
    sched::Options opts;
    opts.max_placements = options_.max_placements_per_pass;
    sched::Decisions d = sched::Decide(snap, opts);

    for (const sched::Placement& p : d.placements) {
      Job& job = *pending_by_id.at(p.job_id);
      JobTransition t = Step(job.state, JobEvent::kSchedule);
      if (!t.accepted) continue;
      Attempt a;
      a.number = job.attempts + 1;
      a.id = MakeAttemptId(job.id, a.number);
      a.job_id = job.id;
      a.node_id = p.node_id;
      a.gpu_uuids = p.gpu_uuids;
      a.state = AttemptState::kScheduled;
      a.created_ms = now;
      GP_RETURN_IF_ERROR(tx.PutAttempt(a));
      proto::StartTask start{a.id, job.id, job.spec, a.gpu_uuids};
      GP_ASSIGN_OR_RETURN(
          int64_t seq, tx.PushOutbox(p.node_id, std::string(proto::kStart), proto::Encode(start)));
      (void)seq;
      job.attempts = a.number;
      job.current_attempt = a.id;
      job.state = t.next;
      job.reason.clear();
      job.updated_ms = now;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      touched_nodes_.insert(p.node_id);
      touched_jobs_.insert(job.id);
      ++placed;
    }
    for (const sched::Waiting& w : d.waiting) {
      Job& job = *pending_by_id.at(w.job_id);
      // Written only when it changes: most passes leave most reasons alone.
      if (job.reason == w.reason) continue;
      job.reason = w.reason;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      touched_jobs_.insert(job.id);
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return placed;
}

}  // namespace gpupool::server
