// Pool: the scheduling pass (the scheduler's input from the store, the
// agents and the providers' lending; applying its decisions) and start
// orders.
#include "server/pool.h"

#include <algorithm>

#include "common/log.h"
#include "server/pool_rules.h"

namespace gpupool::server {

Result<proto::StartTask> Pool::MakeStart(Tx& tx, const Job& job, const Attempt& a,
                                         const AttemptRank* rank) {
  proto::StartTask start;
  start.attempt_id = a.id;
  start.job_id = job.id;
  start.owner = job.owner;
  start.spec = job.spec;
  start.gpu_uuids = rank ? rank->gpu_uuids : a.gpu_uuids;
  start.gpu_milli = a.gpu_milli;
  start.gpu_memory_mib = a.gpu_memory_mib;
  start.max_output_bytes = options_.logs.max_job_output_bytes;
  if (rank) {
    proto::GangRank g;
    g.rank = rank->rank;
    g.nodes = a.NodeCount();
    g.mode = job.spec.distributed;
    // Rank 0's agent chooses the port; the others are told it.
    if (rank->rank > 0) {
      g.master_addr = a.master_addr;
      g.master_port = a.master_port;
    }
    start.gang = std::move(g);
  }
  // Every rank restores the job's newest checkpoint.
  GP_ASSIGN_OR_RETURN(auto newest, tx.LatestCheckpoint(job.id));
  if (newest) {
    start.restore_checkpoint = newest->number;
    start.restore_manifest = newest->manifest;
  }
  return start;
}

Status Pool::PushStart(Tx& tx, const Job& job, const Attempt& a, const AttemptRank* rank) {
  GP_ASSIGN_OR_RETURN(proto::StartTask start, MakeStart(tx, job, a, rank));
  const std::string& node = rank ? rank->node_id : a.node_id;
  GP_RETURN_IF_ERROR(
      tx.PushOutbox(node, std::string(proto::kStart), proto::Encode(start)).status());
  fx_.nodes.insert(node);
  return Status::Ok();
}

PassContext Pool::PassContextAt(int64_t now) const {
  PassContext ctx;
  ctx.now_ms = now;
  ctx.half_life_ms = options_.scheduler.half_life_ms;
  ctx.required_node_labels = options_.required_node_labels;
  ctx.connected = [this](const std::string& node_id) { return live_.count(node_id) > 0; };
  ctx.refused = &refused_;
  if (hooks_.held_accounts) ctx.held_accounts = hooks_.held_accounts();
  ctx.account_of = hooks_.account_of;
  if (hooks_.usage_prices) ctx.usage_prices = hooks_.usage_prices();
  if (hooks_.lending_bonus) ctx.lending_bonus = hooks_.lending_bonus();
  return ctx;
}

Status Pool::CountPlacement(Tx& tx, const Job& job, const Attempt& a, int64_t now) {
  int64_t waiting_since = job.created_ms;
  if (a.number > 1) {
    GP_ASSIGN_OR_RETURN(auto last, tx.GetAttempt(MakeAttemptId(job.id, a.number - 1)));
    if (last) {
      waiting_since =
          std::max(waiting_since, last->finished_ms > 0 ? last->finished_ms : last->created_ms);
      if (last->node_id != a.node_id) {
        GP_ASSIGN_OR_RETURN(auto checkpoint, tx.LatestCheckpoint(job.id));
        if (checkpoint) ++fx_.counts.migrations;
      }
    }
  }
  fx_.counts.queue_waits_ms.push_back(std::max<int64_t>(0, now - waiting_since));
  ++fx_.counts.placements;
  return Status::Ok();
}

Status Pool::StageAhead(Tx& tx, const Job& job, const std::string& leaving_node) {
  GP_ASSIGN_OR_RETURN(auto newest, tx.LatestCheckpoint(job.id));
  if (!newest) return Status::Ok();
  // The scheduler's pass as it would run once the job is back in the queue
  // (first in its class, as a displaced job is) and off `leaving_node`.
  const int64_t now = clock_.NowMs();
  GP_ASSIGN_OR_RETURN(PoolView view, store_.ReadView(tx, true));
  std::erase_if(view.live_attempts, [&](const Attempt& a) { return a.job_id == job.id; });
  auto requeued = std::make_shared<Job>(job);
  requeued->front = true;
  view.pending.push_back(std::move(requeued));
  PassInput in = BuildPassInput(view, PassContextAt(now));
  for (sched::PendingJob& p : in.snapshot.pending) {
    if (p.job_id != job.id) continue;
    auto& excluded = p.request.excluded_nodes;
    excluded.insert(std::lower_bound(excluded.begin(), excluded.end(), leaving_node), leaving_node);
    excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  }
  GP_ASSIGN_OR_RETURN(sched::Decisions d, scheduler_.Decide(in.snapshot));
  for (const sched::Placement& p : d.placements) {
    if (p.job_id != job.id) continue;
    // Every rank of a gang restores the checkpoint.
    for (const sched::NodeAssignment& where : p.nodes) {
      const std::string& node = where.node_id;
      proto::StageCheckpoint order{job.id, newest->number, newest->manifest};
      GP_RETURN_IF_ERROR(
          tx.PushOutbox(node, std::string(proto::kStage), proto::Encode(order)).status());
      fx_.nodes.insert(node);
      fx_.log_lines.push_back("job " + std::to_string(job.id) + ": staging checkpoint " +
                              std::to_string(newest->number) + " on node " + node +
                              ", where it would run next");
    }
  }
  return Status::Ok();
}

Result<int> Pool::Schedule() {
  int placed = 0;
  int64_t now = clock_.NowMs();
  std::map<int64_t, QueueInfo> queue;
  for (auto it = refused_.begin(); it != refused_.end();) {
    std::erase_if(it->second, [&](const auto& e) { return e.second <= now; });
    it = it->second.empty() ? refused_.erase(it) : std::next(it);
  }
  Status s = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(PoolView view, store_.ReadView(tx, true));
    if (view.pending.empty()) return Status::Ok();
    PassInput in = BuildPassInput(view, PassContextAt(now));
    GP_ASSIGN_OR_RETURN(sched::Decisions d, scheduler_.Decide(in.snapshot));

    // The view's jobs are shared with the queue in memory: a job this pass
    // changes is copied first, and later steps see the copy.
    std::map<int64_t, const Job*> pending_by_id;
    for (const SharedJob& j : view.pending) pending_by_id[j->id] = j.get();
    std::map<int64_t, Job> edited;
    auto edit = [&](int64_t id) -> Job& {
      auto [it, first] = edited.try_emplace(id);
      if (first) it->second = *pending_by_id.at(id);
      pending_by_id[id] = &it->second;
      return it->second;
    };
    std::map<std::string, Attempt*> attempt_by_id;
    // Jobs that already wait for victims to leave, and who those are.
    std::map<int64_t, std::vector<int64_t>> leaving_for;
    for (Attempt& a : view.live_attempts) {
      attempt_by_id[a.id] = &a;
      if (a.state == AttemptState::kPreempting) leaving_for[a.preempt_for_job].push_back(a.job_id);
    }

    for (const sched::Placement& p : d.placements) {
      auto it = pending_by_id.find(p.job_id);
      if (it == pending_by_id.end() || p.nodes.empty()) continue;
      JobTransition t = Step(it->second->state, JobEvent::kSchedule);
      if (!t.accepted) continue;
      Job& job = edit(p.job_id);
      const sched::NodeAssignment& where = p.nodes[0];  // rank 0 of a gang
      Attempt a;
      a.number = job.attempts + 1;
      a.id = MakeAttemptId(job.id, a.number);
      a.job_id = job.id;
      a.node_id = where.node_id;
      a.gpu_uuids = where.gpu_uuids;
      a.gpu_milli = where.gpu_uuids.empty() ? 0 : where.gpu_milli;
      a.gpu_memory_mib = where.gpu_milli < 1000 ? where.gpu_memory_mib : 0;
      a.state = AttemptState::kScheduled;
      a.created_ms = now;
      if (job.spec.gang()) {
        for (size_t i = 0; i < p.nodes.size(); ++i) {
          AttemptRank r;
          r.rank = static_cast<int32_t>(i);
          r.node_id = p.nodes[i].node_id;
          r.gpu_uuids = p.nodes[i].gpu_uuids;
          a.ranks.push_back(std::move(r));
        }
      }
      GP_RETURN_IF_ERROR(tx.PutAttempt(a));
      if (a.ranks.empty()) GP_RETURN_IF_ERROR(PushStart(tx, job, a, nullptr));
      // A torch gang starts with rank 0, whose agent chooses the rendezvous
      // port; the other ranks follow once it is known (ApplyRankReport).
      for (const AttemptRank& r : a.ranks) {
        if (!StartHeldBack(job, a, r)) GP_RETURN_IF_ERROR(PushStart(tx, job, a, &r));
      }
      job.attempts = a.number;
      job.current_attempt = a.id;
      job.state = t.next;
      job.reason.clear();
      job.front = false;
      job.updated_ms = now;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      GP_RETURN_IF_ERROR(CountPlacement(tx, job, a, now));
      fx_.jobs.insert(job.id);
      ++placed;
    }

    // Preemptions: each victim is ordered to stop (its checkpoint grace) and
    // its job requeued when the attempt ends. A job that already waits for
    // victims gets no more until they have left, so passes that run while
    // they leave do not preempt again.
    std::map<int64_t, std::vector<int64_t>> newly_leaving;
    for (const sched::Preemption& pr : d.preemptions) {
      if (leaving_for.count(pr.for_job_id)) continue;
      auto a = attempt_by_id.find(pr.attempt_id);
      if (a == attempt_by_id.end()) continue;
      Attempt& attempt = *a->second;
      GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(attempt.job_id));
      if (!job || job->current_attempt != attempt.id || !job->spec.preemptible()) continue;
      // Not one that is already leaving (the attempt table refuses).
      AttemptTransition order = OrderStop(attempt, AttemptEvent::kPreempt, now);
      if (!order.accepted) continue;
      attempt.preempt_for_job = pr.for_job_id;
      attempt.reason =
          pr.message.empty() ? "preempted for job " + std::to_string(pr.for_job_id) : pr.message;
      GP_RETURN_IF_ERROR(tx.PutAttempt(attempt));
      StopOrder stop{attempt.reason, PreemptGraceMs(job->spec), /*requeue=*/true};
      GP_RETURN_IF_ERROR(ApplyEvent(tx, *job, attempt, *order.job_event, nullptr, &stop));
      GP_RETURN_IF_ERROR(StageAhead(tx, *job, attempt.node_id));
      newly_leaving[pr.for_job_id].push_back(job->id);
      ++fx_.counts.preemptions;
    }
    for (auto& [for_job, victims] : newly_leaving) {
      auto& all = leaving_for[for_job];
      all.insert(all.end(), victims.begin(), victims.end());
      // The preemptor goes first in its class until it starts, so that the
      // room its victims leave is not taken by the next job in line (often
      // the victim itself, requeued).
      if (auto p = pending_by_id.find(for_job); p != pending_by_id.end() && !p->second->front) {
        Job& preemptor = edit(for_job);
        preemptor.front = true;
        GP_RETURN_IF_ERROR(tx.UpdateJob(preemptor));
        fx_.jobs.insert(for_job);
      }
    }

    auto set_reason = [&](int64_t id, const std::string& reason) -> Status {
      // Written only when it changes: most passes leave most reasons alone.
      if (pending_by_id.at(id)->reason == reason) return Status::Ok();
      Job& job = edit(id);
      job.reason = reason;
      GP_RETURN_IF_ERROR(tx.UpdateJob(job));
      fx_.jobs.insert(id);
      return Status::Ok();
    };
    sched::WaitTextMemo texts;
    for (const sched::Waiting& w : d.waiting) {
      auto it = pending_by_id.find(w.job_id);
      if (it == pending_by_id.end()) continue;
      // The scheduler's reason, as the server knows better: the victims it
      // preempted still leaving, or why the nodes that could host it are
      // excluded. sched/wait_reason.h renders both texts.
      sched::WaitReason wait = w.reason;
      if (auto l = leaving_for.find(w.job_id); l != leaving_for.end()) {
        sched::WaitReason leaving;
        leaving.kind = sched::WaitKind::kVictimsLeaving;
        leaving.request = std::move(wait.request);
        leaving.jobs = l->second;
        wait = std::move(leaving);
      } else if (auto e = in.exclusions.find(w.job_id);
                 w.unsatisfiable && e != in.exclusions.end()) {
        wait.note = e->second;
      }
      GP_RETURN_IF_ERROR(set_reason(w.job_id, texts.Text(wait)));
      queue[w.job_id] = QueueInfo{w.position,      sched::ExplanationText(w.position, w.queue),
                                  w.unsatisfiable, w.reserved_start_ms,
                                  std::move(wait), w.queue};
    }
    for (const auto& [id, why] : in.skipped) GP_RETURN_IF_ERROR(set_reason(id, why));
    return Status::Ok();
  });
  if (!s.ok()) {
    Discard();
    return s;
  }
  queue_ = std::move(queue);
  Notify();
  return placed;
}

}  // namespace gpupool::server
