// Pool: agent reconciliation (hello, reliable messages, heartbeats, leases,
// disconnects, leaving and revoked nodes) and the liveness check.
#include "server/pool.h"

#include <algorithm>
#include <charconv>

#include "common/ids.h"
#include "common/log.h"
#include "model/yaml.h"
#include "server/pool_rules.h"

namespace gpupool::server {
namespace {

// The meta key under which the agent of `node_id`'s applied sequence is kept.
std::string AgentSeqKey(const std::string& node_id) { return "agent_seq/" + node_id; }

}  // namespace

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
  // The hello renews the agent's leases (node_liveness.h); the welcome says
  // how long each renewal lasts.
  welcome.attempt_lease_ms = options_.attempt_lease_ms;
  welcome.log_records = true;  // compact logs messages are welcome (proto::LogChunk)
  int64_t now = clock_.NowMs();
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto existing, tx.GetNodeByName(hello.node_name));
    Node node;
    if (existing) {
      node = *std::move(existing);
    } else {
      node.id = options_.node_id_for ? options_.node_id_for(hello.node_name) : NewId("n");
      node.registered_ms = now;
    }
    node.name = hello.node_name;
    node.state = NodeState::kReady;  // a node that left may rejoin
    node.gpus = hello.gpus;
    node.cpu_milli = hello.cpu_milli;
    node.memory_mib = hello.memory_mib;
    node.driver_version = hello.driver_version;
    node.cuda_version = hello.cuda_version;
    node.agent_version = hello.agent_version;
    node.labels = hello.labels;
    node.owner_group = hello.owner_group;
    node.lending = hello.lending;
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
      const AttemptRank* rank = a.RankOn(node.id);
      // A rank that ended, or was never sent its start (it waits for the
      // rendezvous), is not missing.
      if (rank && (!IsLive(rank->state) || StartHeldBack(*job, a, *rank))) continue;
      proto::TaskReport lost =
          LostReport(a.id, "the agent on " + node.name + " no longer has it", now);
      GP_RETURN_IF_ERROR(LoseAttemptOn(tx, *job, a, node.id, lost));
    }
    // Where each attempt's output resumes: the log of the rank on this node.
    auto offset_of = [&](const std::string& id) -> Status {
      GP_ASSIGN_OR_RETURN(auto a, tx.GetAttempt(id));
      const AttemptRank* rank = a ? a->RankOn(node.id) : nullptr;
      GP_ASSIGN_OR_RETURN(welcome.log_offsets[id], tx.LastLogOffset(id, rank ? rank->rank : 0));
      return Status::Ok();
    };
    GP_ASSIGN_OR_RETURN(live, tx.ListAttempts(q));
    for (const Attempt& a : live) GP_RETURN_IF_ERROR(offset_of(a.id));
    for (const std::string& id : held) {
      if (!welcome.log_offsets.count(id)) GP_RETURN_IF_ERROR(offset_of(id));
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  live_[welcome.node_id] = LiveNode{hello.agent_instance, {}, 0, {}};
  liveness_.LeaseRequested(welcome.node_id);
  liveness_.Connected(welcome.node_id);
  awaiting_expiry_.erase(welcome.node_id);
  fx_.nodes.insert(welcome.node_id);
  fx_.schedule = true;
  Notify();
  return welcome;
}

Status Pool::AgentMessage(const std::string& node_id, int64_t seq, const std::string& type,
                          const std::string& body) {
  GP_ASSIGN_OR_RETURN(proto::AgentReport message, proto::DecodeAgentReport(type, body));
  return AgentMessage(node_id, seq, message);
}

Status Pool::AgentMessage(const std::string& node_id, int64_t seq,
                          const proto::AgentReport& message) {
  auto live = live_.find(node_id);
  if (live == live_.end())
    return Status::FailedPrecondition("node " + node_id + " is not connected");
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto last, GetAgentSeq(tx, node_id));
    if (last.first == live->second.instance && seq <= last.second)
      return Status::Ok();  // duplicate
    GP_RETURN_IF_ERROR(std::visit(
        [&](const auto& m) -> Status {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, proto::TaskReport>) {
            return ApplyTaskReport(tx, node_id, m);
          } else if constexpr (std::is_same_v<M, proto::LogChunk>) {
            return ApplyLogChunk(tx, node_id, m);
          } else if constexpr (std::is_same_v<M, NodeLending>) {
            return ApplyLending(tx, node_id, m);
          } else if constexpr (std::is_same_v<M, NodeEvent>) {
            return ApplyNodeEvent(tx, node_id, m);
          } else {
            static_assert(std::is_same_v<M, proto::Leave>);
            return LeaveNode(tx, node_id, m.reason);
          }
        },
        message));
    return SetAgentSeq(tx, node_id, live->second.instance, seq);
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return Status::Ok();
}

Status Pool::ApplyLogChunk(Tx& tx, const std::string& node_id, const proto::LogChunk& chunk) {
  GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(chunk.attempt_id));
  // Output of attempts the server never made or made elsewhere is
  // refused (and audited); output of an attempt it declared lost
  // (stale: its job may run elsewhere now, so what it prints is not the
  // job's) is dropped. An attempt that ended by its agent's own report
  // may still send lines: an agent back from a restart reports the end
  // in its hello, then ships the rest.
  const AttemptRank* rank = attempt ? attempt->RankOn(node_id) : nullptr;
  const bool stale = attempt && (rank ? rank->state : attempt->state) == AttemptState::kLost;
  if (attempt && !attempt->RunsOn(node_id)) {
    GP_RETURN_IF_ERROR(RefuseForeign(tx, node_id, *attempt, "output"));
  } else if (attempt && !stale && !chunk.lines.empty()) {
    const int32_t rank_no = rank ? rank->rank : 0;
    std::vector<LogLine> lines;
    lines.reserve(chunk.lines.size());
    for (const auto& l : chunk.lines) {
      lines.push_back({chunk.attempt_id, l.offset, l.stream, l.ts_ms, l.text, 0, rank_no});
    }
    // The output limit holds whatever the agent sends (server/job_logs.h).
    GP_ASSIGN_OR_RETURN(lines, TakeLogLines(tx, options_.logs, attempt->job_id, chunk.attempt_id,
                                            rank_no, std::move(lines), clock_.NowMs()));
    fx_.jobs.insert(attempt->job_id);
    // While a job starts, its latest event says what it waits for
    // ("pulling image 3/7 layers").
    auto last_event = std::find_if(lines.rbegin(), lines.rend(),
                                   [](const LogLine& l) { return l.stream == "event"; });
    if (last_event != lines.rend()) {
      GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(attempt->job_id));
      if (job && job->state == JobState::kScheduled && job->current_attempt == chunk.attempt_id) {
        job->reason = last_event->text;
        GP_RETURN_IF_ERROR(tx.UpdateJob(*job));
      }
    }
  }
  return Status::Ok();
}

Status Pool::ApplyLending(Tx& tx, const std::string& node_id, const NodeLending& lending) {
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  if (node) {
    node->lending = lending;
    GP_RETURN_IF_ERROR(tx.PutNode(*node));
  }
  fx_.schedule = true;  // room may have appeared
  return Status::Ok();
}

Status Pool::ApplyNodeEvent(Tx& tx, const std::string& node_id, const NodeEvent& message) {
  NodeEvent event = message;
  event.node_id = node_id;
  // A node speaks only for its own attempts.
  std::vector<std::string> own;
  for (const std::string& a : event.attempts) {
    GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(a));
    if (attempt && !attempt->RunsOn(node_id)) {
      GP_RETURN_IF_ERROR(RefuseForeign(tx, node_id, *attempt, "a node event (" + event.kind + ")"));
      continue;
    }
    own.push_back(a);
  }
  event.attempts = std::move(own);
  GP_ASSIGN_OR_RETURN(event.id, tx.AppendNodeEvent(event));
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  std::string line = "node " + (node ? node->name : node_id) + ": " + event.kind;
  for (const std::string& g : event.gpus) line += " " + g;
  if (!event.reason.empty()) line += " (" + event.reason + ")";
  for (const std::string& a : event.attempts) line += "; vacated " + a;
  // What providers do to lent GPUs is security-relevant: it ends others' work.
  std::string detail = event.reason;
  for (const std::string& a : event.attempts)
    detail += (detail.empty() ? "" : "; ") + ("vacated " + a);
  GP_RETURN_IF_ERROR(
      tx.AppendAudit({0, clock_.NowMs(), "node:" + (node ? node->name : node_id),
                      "node." + event.kind, node ? node->name : node_id, detail, "", true})
          .status());
  fx_.log_lines.push_back(std::move(line));
  if (event.kind == "reclaim") fx_.counts.reclaim_reasons.push_back(event.reason);
  // The vacated jobs will want their checkpoints elsewhere soon.
  for (const std::string& a : event.attempts) {
    GP_ASSIGN_OR_RETURN(auto attempt, tx.GetAttempt(a));
    if (!attempt) continue;
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(attempt->job_id));
    if (!job || job->current_attempt != a || !IsLive(attempt->state)) continue;
    if (const AttemptRank* rank = attempt->RankOn(node_id)) {
      // One rank leaves: the whole gang stops now, checkpointing first.
      GP_RETURN_IF_ERROR(StopGang(
          tx, *job, *attempt, rank->rank,
          "the provider of rank " + std::to_string(rank->rank) + "'s node took its GPU back"));
    }
    if (!job->spec.preemptible()) continue;
    leaving_.insert(a);
    GP_RETURN_IF_ERROR(StageAhead(tx, *job, node_id));
  }
  return Status::Ok();
}

Status Pool::LeaveNode(Tx& tx, const std::string& node_id, const std::string& reason) {
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  if (!node) return Status::Ok();
  node->state = NodeState::kLeft;
  node->last_seen_ms = clock_.NowMs();
  GP_RETURN_IF_ERROR(tx.PutNode(*node));
  fx_.log_lines.push_back("node " + node->name + " left the pool" +
                          (reason.empty() ? "" : " (" + reason + ")"));
  // The agent drains before it leaves; anything still live is requeued
  // once its lease has expired (CheckNodes).
  awaiting_expiry_[node_id] = "the node left the pool";
  return Status::Ok();
}

Status Pool::RefuseForeign(Tx& tx, const std::string& node_id, const Attempt& attempt,
                           const std::string& what) {
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  GP_ASSIGN_OR_RETURN(auto owner, tx.GetNode(attempt.node_id));
  const std::string name = node ? node->name : node_id;
  const std::string detail = what + " about attempt " + attempt.id + ", which runs on node " +
                             (owner ? owner->name : attempt.node_id) + ": refused";
  fx_.log_lines.push_back("node " + name + " sent " + detail);
  return tx
      .AppendAudit({0, clock_.NowMs(), "node:" + name, "agent.foreign_attempt", attempt.id, detail,
                    "", false})
      .status();
}

Status Pool::SendOwnerCommand(const std::string& node_name, const proto::OwnerCommand& command) {
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNodeByName(node_name));
    if (!node) return Status::NotFound("no node " + QuoteForError(node_name));
    if (!live_.count(node->id)) {
      return Status::Unavailable("node " + node_name +
                                 "'s agent is not connected: the command cannot reach it");
    }
    GP_RETURN_IF_ERROR(
        tx.PushOutbox(node->id, std::string(proto::kOwnerCommand), proto::Encode(command))
            .status());
    fx_.nodes.insert(node->id);
    fx_.log_lines.push_back("node " + node_name + ": " + command.command + " asked by " +
                            command.by + ", sent to its agent");
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  Notify();
  return Status::Ok();
}

Status Pool::RevokeNode(const std::string& node_name, const std::string& reason) {
  std::string node_id;
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNodeByName(node_name));
    if (!node) return Status::Ok();  // enrolled but never connected
    node_id = node->id;
    node->state = NodeState::kLost;
    node->last_seen_ms = clock_.NowMs();
    GP_RETURN_IF_ERROR(tx.PutNode(*node));
    fx_.log_lines.push_back("node " + node_name + " was revoked (" + reason +
                            "); its running jobs are requeued once their leases expire");
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  if (!node_id.empty()) {
    // Its agent may still run the attempts, until their leases end.
    live_.erase(node_id);
    liveness_.Disconnected(node_id);
    awaiting_expiry_[node_id] = "node " + node_name + " was revoked: " + reason;
  }
  Notify();
  return Status::Ok();
}

void Pool::AgentHeartbeat(const std::string& node_id, const proto::Heartbeat& hb) {
  auto it = live_.find(node_id);
  if (it == live_.end()) return;
  it->second.telemetry = hb.telemetry;
  it->second.running_tasks = hb.running_tasks;
  it->second.shares = hb.shares;
}

void Pool::AgentLeaseRequested(const std::string& node_id) {
  if (live_.count(node_id)) liveness_.LeaseRequested(node_id);
}

Status Pool::AgentDisconnected(const std::string& node_id) {
  live_.erase(node_id);
  liveness_.Disconnected(node_id);
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

Status Pool::CheckNodes() {
  std::vector<std::string> requeued;  // leave awaiting_expiry_ once committed
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto nodes, tx.ListNodes());
    for (Node& n : nodes) {
      if (live_.count(n.id)) continue;
      if (n.state == NodeState::kOffline) {
        if (!liveness_.LostNow(n.id)) continue;
        n.state = NodeState::kLost;
        GP_RETURN_IF_ERROR(tx.PutNode(n));
        GP_RETURN_IF_ERROR(LoseLiveAttempts(tx, n.id, "node " + n.name + " stopped answering"));
        continue;
      }
      auto awaiting = awaiting_expiry_.find(n.id);
      if (awaiting == awaiting_expiry_.end() || !liveness_.LeasesExpired(n.id)) continue;
      GP_RETURN_IF_ERROR(LoseLiveAttempts(tx, n.id, awaiting->second));
      requeued.push_back(n.id);
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  for (const std::string& id : requeued) awaiting_expiry_.erase(id);
  Notify();
  return Status::Ok();
}

}  // namespace gpupool::server
