#include "sim/des.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <unordered_map>

#include "model/resources.h"
#include "sim/engine_common.h"

namespace gpupool::sim {

std::string_view SimModeName(SimMode mode) {
  return mode == SimMode::kPooled ? "pooled" : "per-lab";
}

Result<SimMode> ParseSimMode(std::string_view text) {
  if (text == "pooled") return SimMode::kPooled;
  if (text == "per-lab") return SimMode::kPerLab;
  return Status::InvalidArgument("mode \"" + std::string(text) + "\" is not pooled or per-lab");
}

std::string_view SimEngineName(SimEngine engine) {
  return engine == SimEngine::kDes ? "des" : "pool";
}

Result<SimEngine> ParseSimEngine(std::string_view text) {
  if (text == "des") return SimEngine::kDes;
  if (text == "pool") return SimEngine::kPool;
  return Status::InvalidArgument("engine \"" + std::string(text) + "\" is not des or pool");
}

std::string_view AttemptEndName(AttemptEnd end) {
  switch (end) {
    case AttemptEnd::kCompleted:
      return "completed";
    case AttemptEnd::kPreempted:
      return "preempted";
    case AttemptEnd::kNodeLeft:
      return "node_left";
    case AttemptEnd::kUnfinished:
      return "unfinished";
  }
  return "?";
}

namespace {

// Within one instant, events apply in this order.
enum class EventKind : int {
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
  size_t index = 0;  // job or node
  uint64_t gen = 0;  // the job's attempt generation, for ends and vacates
};

struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    if (a.t != b.t) return a.t > b.t;
    if (a.kind != b.kind) return static_cast<int>(a.kind) > static_cast<int>(b.kind);
    return a.seq > b.seq;
  }
};

enum class Phase { kFuture, kPending, kRunning, kVacating, kDone };

struct GpuState {
  std::string uuid;
  int32_t free_milli = 1000;
  int64_t free_memory_mib = 0;
};

struct NodeState {
  const TraceNode* spec = nullptr;
  int part = -1;  // -1: in no partition (per-lab mode, owned by no group)
  bool present = true;
  std::vector<GpuState> gpus;
  int64_t cpu_free = 0;
  int64_t memory_free = 0;
  std::vector<size_t> jobs;  // jobs holding something here
};

struct Hold {
  size_t node = 0;
  std::vector<size_t> gpus;
  int32_t milli = 0;       // per GPU
  int64_t memory_mib = 0;  // per GPU, for a share
};

struct Attempt {
  std::string id;
  int64_t start = 0;
  double speed = 1.0;
  int64_t saved = 0;  // progress restored at the start
  std::vector<Hold> holds;
  size_t record = 0;
  int64_t stopped = -1;  // preempted at; -1 while it makes progress
};

struct JobState {
  const TraceJob* spec = nullptr;
  int part = 0;
  size_t group = 0;
  Phase phase = Phase::kFuture;
  int64_t saved = 0;  // progress at speed 1 kept by the last checkpoint
  bool front = false;
  std::optional<int64_t> last_preempted;
  std::optional<Attempt> att;
  uint64_t gen = 0;
  int32_t attempt_no = 0;
  std::vector<std::string> displaced_from;
  // As a preemptor: its victims still vacating. As a victim: whom it vacates for.
  int32_t victims_leaving = 0;
  std::optional<size_t> vacating_for;
};

struct Partition {
  std::vector<size_t> nodes;
  std::set<size_t> pending;
  std::set<size_t> running;  // running or vacating
  std::unique_ptr<sched::Scheduler> scheduler;
  std::set<std::string> groups;
  bool dirty = false;
  bool can_place = false;  // the last pass left a job waiting that could run here
  bool acted = false;      // the last pass placed or preempted something
  int64_t waiting = 0;
};

struct Checkpoint {
  int64_t progress = 0;
  int64_t time = 0;  // when it was taken; the attempt's start when none was
  bool taken = false;
};

class Simulator {
 public:
  Simulator(const Trace& trace, const SimOptions& options) : trace_(trace), opt_(options) {}

  Result<SimResult> Run() {
    GP_RETURN_IF_ERROR(Setup());
    while (!queue_.empty()) {
      const int64_t t = queue_.top().t;
      if (t > stop_at_) break;
      ChargeUsage(t);
      now_ = t;
      bool tick = false;
      while (!queue_.empty() && queue_.top().t == t) {
        Event e = queue_.top();
        queue_.pop();
        switch (e.kind) {
          case EventKind::kEnd:
            OnEnd(e);
            break;
          case EventKind::kVacated:
            OnVacated(e);
            break;
          case EventKind::kLeave:
            OnLeave(e.index);
            break;
          case EventKind::kReturn:
            OnReturn(e.index);
            break;
          case EventKind::kArrival:
            OnArrival(e.index);
            break;
          case EventKind::kTick:
            tick_scheduled_ = false;
            tick = true;
            break;
        }
      }
      ++result_.event_times;
      for (size_t p = 0; p < parts_.size(); ++p) {
        Partition& part = parts_[p];
        const bool useful_tick = tick && part.can_place && (!part.running.empty() || part.acted);
        if (!part.dirty && !useful_tick) continue;
        part.dirty = false;
        if (part.pending.empty()) {  // preemption only ever serves a waiting job
          part.can_place = part.acted = false;
          part.waiting = 0;
          continue;
        }
        GP_RETURN_IF_ERROR(Decide(static_cast<int>(p)));
      }
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
    GP_RETURN_IF_ERROR(CheckTraceRefs(trace_));
    std::map<std::string, size_t> group_index;
    for (size_t g = 0; g < trace_.groups.size(); ++g) group_index[trace_.groups[g].name] = g;
    group_alloc_.assign(trace_.groups.size(), 0);
    for (const auto& n : trace_.nodes) {
      if (!n.allow_groups.empty() || !n.deny_groups.empty()) {
        return Status::InvalidArgument(
            "node " + n.name +
            ": a lending policy (allow_groups, deny_groups) is not modelled by the DES; run it "
            "through the pool (--via pool)");
      }
      node_index_.emplace(n.name, node_index_.size());
    }
    for (const auto& j : trace_.jobs) job_index_.emplace(j.id, job_index_.size());

    std::vector<sched::SchedulerConfig> configs = PartitionConfigs(trace_, opt_);
    parts_.resize(configs.size());
    for (size_t p = 0; p < configs.size(); ++p) {
      for (const auto& g : configs[p].groups) parts_[p].groups.insert(g.name);
      parts_[p].scheduler = std::make_unique<sched::Scheduler>(std::move(configs[p]));
    }

    nodes_.resize(trace_.nodes.size());
    for (size_t i = 0; i < trace_.nodes.size(); ++i) {
      const TraceNode& spec = trace_.nodes[i];
      NodeState& n = nodes_[i];
      n.spec = &spec;
      if (opt_.mode == SimMode::kPooled) {
        n.part = 0;
      } else if (!spec.owner_group.empty()) {
        n.part = static_cast<int>(group_index.at(spec.owner_group));
      }
      for (int32_t k = 0; k < spec.gpus; ++k) {
        n.gpus.push_back({spec.name + "/gpu" + std::to_string(k), 1000, spec.gpu_memory_mib});
      }
      n.cpu_free = spec.cpu_milli;
      n.memory_free = spec.memory_mib;
      if (n.part >= 0) parts_[static_cast<size_t>(n.part)].nodes.push_back(i);
    }

    jobs_.resize(trace_.jobs.size());
    result_.jobs.resize(trace_.jobs.size());
    for (size_t i = 0; i < trace_.jobs.size(); ++i) {
      const TraceJob& spec = trace_.jobs[i];
      JobState& j = jobs_[i];
      j.spec = &spec;
      j.group = group_index.at(spec.group);
      j.part = opt_.mode == SimMode::kPooled ? 0 : static_cast<int>(j.group);
      result_.jobs[i] = NewJobRecord(spec);
      Push(spec.submit_ms, EventKind::kArrival, i, 0);
      result_.last_submit_ms = std::max(result_.last_submit_ms, spec.submit_ms);
      result_.last_trace_event_ms = std::max(result_.last_trace_event_ms, spec.submit_ms);
    }
    for (const auto& e : trace_.events) {
      Push(e.at_ms, e.kind == NodeEventKind::kLeave ? EventKind::kLeave : EventKind::kReturn,
           node_index_.at(e.node), 0);
      result_.last_trace_event_ms = std::max(result_.last_trace_event_ms, e.at_ms);
    }
    stop_at_ = result_.last_trace_event_ms + opt_.drain_ms;
    return Status::Ok();
  }

  void Push(int64_t t, EventKind kind, size_t index, uint64_t gen) {
    queue_.push({t, kind, seq_++, index, gen});
  }

  void ChargeUsage(int64_t t) {
    if (t <= now_) return;
    for (size_t g = 0; g < group_alloc_.size(); ++g) {
      if (group_alloc_[g] <= 0) continue;
      auto& u = usage_[trace_.groups[g].name];
      u = sched::Charge(u, group_alloc_[g], now_, t, opt_.half_life_ms);
    }
  }

  // Progress (speed-1 ms) of the job's attempt at `t`.
  double Progress(const JobState& j, int64_t t) const {
    const Attempt& a = *j.att;
    const int64_t until = a.stopped >= 0 ? std::min(t, a.stopped) : t;
    return static_cast<double>(a.saved) + static_cast<double>(until - a.start) * a.speed;
  }

  Checkpoint LastCheckpoint(const JobState& j, int64_t t) const {
    const Attempt& a = *j.att;
    Checkpoint c{a.saved, a.start, false};
    const int64_t interval = j.spec->checkpoint_interval_ms;
    if (interval <= 0) return c;
    const double p = Progress(j, t);
    int64_t ck = static_cast<int64_t>(std::floor(p / static_cast<double>(interval))) * interval;
    ck = std::min(ck, j.spec->duration_ms);
    if (ck <= a.saved) return c;
    const double dt = std::ceil(static_cast<double>(ck - a.saved) / a.speed);
    c.progress = ck;
    c.time = std::min(t, a.start + static_cast<int64_t>(dt));
    c.taken = true;
    return c;
  }

  void MarkDirty(int part) {
    if (part >= 0) parts_[static_cast<size_t>(part)].dirty = true;
  }

  void Release(size_t ji) {
    JobState& j = jobs_[ji];
    for (const Hold& h : j.att->holds) {
      NodeState& n = nodes_[h.node];
      for (size_t g : h.gpus) {
        n.gpus[g].free_milli += h.milli;
        n.gpus[g].free_memory_mib += h.milli >= 1000 ? n.spec->gpu_memory_mib : h.memory_mib;
      }
      n.cpu_free += j.spec->cpu_milli;
      n.memory_free += j.spec->memory_mib;
      n.jobs.erase(std::remove(n.jobs.begin(), n.jobs.end(), ji), n.jobs.end());
    }
    group_alloc_[j.group] -= j.spec->GpuMilli();
    allocated_ -= j.spec->GpuMilli();
    parts_[static_cast<size_t>(j.part)].running.erase(ji);
    MarkDirty(j.part);
  }

  void Requeue(size_t ji, bool front) {
    JobState& j = jobs_[ji];
    if (j.vacating_for) {
      --jobs_[*j.vacating_for].victims_leaving;
      j.vacating_for.reset();
    }
    j.att.reset();
    j.phase = Phase::kPending;
    j.front = front;
    ++j.gen;
    parts_[static_cast<size_t>(j.part)].pending.insert(ji);
  }

  void OnArrival(size_t ji) {
    JobState& j = jobs_[ji];
    j.phase = Phase::kPending;
    parts_[static_cast<size_t>(j.part)].pending.insert(ji);
    MarkDirty(j.part);
  }

  void OnEnd(const Event& e) {
    JobState& j = jobs_[e.index];
    if (j.phase != Phase::kRunning || j.gen != e.gen) return;
    AttemptRecord& r = result_.attempts[j.att->record];
    r.end = AttemptEnd::kCompleted;
    r.end_ms = r.useful_end_ms = now_;
    Release(e.index);
    j.att.reset();
    j.phase = Phase::kDone;
    ++j.gen;
    result_.jobs[e.index].end_ms = now_;
  }

  void OnVacated(const Event& e) {
    JobState& j = jobs_[e.index];
    if (j.phase != Phase::kVacating || j.gen != e.gen) return;
    result_.attempts[j.att->record].end_ms = now_;
    Release(e.index);
    Requeue(e.index, /*front=*/false);
  }

  void OnLeave(size_t ni) {
    NodeState& n = nodes_[ni];
    n.present = false;
    MarkDirty(n.part);
    const std::vector<size_t> here = n.jobs;
    for (size_t ji : here) {
      JobState& j = jobs_[ji];
      if (!j.att) continue;
      AttemptRecord& r = result_.attempts[j.att->record];
      if (j.phase == Phase::kRunning) {
        const Checkpoint c = LastCheckpoint(j, now_);
        r.end = AttemptEnd::kNodeLeft;
        r.end_ms = now_;
        r.useful_end_ms = c.time;
        r.lost_work_ms = static_cast<int64_t>(std::llround(Progress(j, now_))) - c.progress;
        j.saved = c.progress;
        ++result_.jobs[ji].displacements;
        j.displaced_from.push_back(n.spec->name);
        Release(ji);
        Requeue(ji, /*front=*/true);
      } else if (j.phase == Phase::kVacating) {
        r.end_ms = now_;
        Release(ji);
        Requeue(ji, /*front=*/false);
      }
    }
  }

  void OnReturn(size_t ni) {
    nodes_[ni].present = true;
    MarkDirty(nodes_[ni].part);
  }

  sched::Snapshot BuildSnapshot(const Partition& part) const {
    sched::Snapshot s;
    s.now_ms = now_;
    s.nodes.reserve(part.nodes.size());
    for (size_t ni : part.nodes) {
      const NodeState& n = nodes_[ni];
      sched::NodeView v;
      v.id = n.spec->name;
      v.name = n.spec->name;
      v.ready = n.present;
      v.owner_group = n.spec->owner_group;
      for (const GpuState& g : n.gpus) {
        sched::GpuView gv;
        gv.uuid = g.uuid;
        gv.model = n.spec->gpu_model;
        gv.memory_mib = n.spec->gpu_memory_mib;
        gv.compute_capability = n.spec->compute_capability;
        gv.free_milli = g.free_milli;
        gv.free_memory_mib = g.free_memory_mib;
        v.gpus.push_back(std::move(gv));
      }
      v.cpu_milli_total = n.spec->cpu_milli;
      v.cpu_milli_free = n.cpu_free;
      v.memory_mib_total = n.spec->memory_mib;
      v.memory_mib_free = n.memory_free;
      s.nodes.push_back(std::move(v));
    }
    for (size_t ji : part.pending) {
      const JobState& j = jobs_[ji];
      const TraceJob& spec = *j.spec;
      sched::PendingJob p;
      p.job_id = spec.id;
      p.group = spec.group;
      p.priority = spec.priority;
      p.submit_ms = spec.submit_ms;
      p.request.nodes = spec.nodes;
      p.request.gpus = spec.gpus;
      p.request.gpu_milli = spec.gpu_milli;
      p.request.gpu_memory_mib = spec.gpu_memory_mib;
      p.request.gpu_models = spec.gpu_models;
      p.request.cpu_milli = spec.cpu_milli;
      p.request.memory_mib = spec.memory_mib;
      p.runtime_limit_ms = spec.runtime_limit_ms;
      p.front = j.front;
      s.pending.push_back(std::move(p));
    }
    for (size_t ji : part.running) {
      const JobState& j = jobs_[ji];
      const TraceJob& spec = *j.spec;
      const Attempt& a = *j.att;
      sched::RunningJob r;
      r.job_id = spec.id;
      r.attempt_id = a.id;
      r.group = spec.group;
      r.priority = spec.priority;
      for (const Hold& h : a.holds) {
        sched::Holding hd;
        hd.node_id = nodes_[h.node].spec->name;
        for (size_t g : h.gpus) hd.gpu_uuids.push_back(nodes_[h.node].gpus[g].uuid);
        hd.gpu_milli = h.milli;
        hd.gpu_memory_mib = h.memory_mib;
        hd.cpu_milli = spec.cpu_milli;
        hd.memory_mib = spec.memory_mib;
        r.holdings.push_back(std::move(hd));
      }
      r.started_ms = a.start;
      const Checkpoint c = LastCheckpoint(j, now_);
      r.last_checkpoint_ms = c.taken ? c.time : 0;
      r.preemptible = j.phase == Phase::kRunning && Preemptible(spec);
      r.last_preempted_ms = j.last_preempted;
      if (j.phase == Phase::kVacating) {
        r.expected_end_ms = a.stopped + opt_.preempt_grace_ms;
      } else {
        r.expected_end_ms = spec.runtime_limit_ms > 0 ? a.start + spec.runtime_limit_ms : 0;
      }
      s.running.push_back(std::move(r));
    }
    for (const auto& g : part.groups) {
      auto it = usage_.find(g);
      if (it != usage_.end()) s.usage[g] = it->second;
    }
    return s;
  }

  static bool Preemptible(const TraceJob& spec) {
    return spec.checkpoint_interval_ms > 0 && spec.priority != sched::PriorityClass::kInteractive;
  }

  Status Decide(int p) {
    Partition& part = parts_[static_cast<size_t>(p)];
    const sched::Snapshot snap = BuildSnapshot(part);
    ++result_.decide_calls;
    auto decided = part.scheduler->Decide(snap);
    if (!decided.ok()) {
      return decided.status().WithContext("scheduler at t=" + std::to_string(now_) + " ms");
    }
    part.acted = !decided->placements.empty() || !decided->preemptions.empty();
    for (const sched::Placement& pl : decided->placements) {
      GP_RETURN_IF_ERROR(Place(p, pl));
    }
    // As the server does (pool.cpp): a job that already waits for victims
    // to leave gets no more preemptions until they have left.
    std::set<int64_t> already_waiting;
    for (const sched::Preemption& pr : decided->preemptions) {
      auto it = job_index_.find(pr.for_job_id);
      if (it != job_index_.end() && jobs_[it->second].victims_leaving > 0) {
        already_waiting.insert(pr.for_job_id);
      }
    }
    for (const sched::Preemption& pr : decided->preemptions) {
      if (already_waiting.count(pr.for_job_id)) continue;
      GP_RETURN_IF_ERROR(Preempt(p, pr));
    }
    part.can_place = false;
    part.waiting = 0;
    sched::WaitTextMemo texts;
    for (const sched::Waiting& w : decided->waiting) {
      auto it = job_index_.find(w.job_id);
      if (it == job_index_.end()) {
        return Status::Internal("scheduler: waiting entry for unknown job " +
                                std::to_string(w.job_id));
      }
      result_.jobs[it->second].waiting_reason = texts.Text(w.reason);
      if (!w.unsatisfiable) {
        part.can_place = true;
        ++part.waiting;
      }
    }
    return Status::Ok();
  }

  Status Place(int p, const sched::Placement& pl) {
    auto bad = [&](const std::string& why) {
      return Status::Internal("scheduler at t=" + std::to_string(now_) + " ms placed job " +
                              std::to_string(pl.job_id) + ": " + why);
    };
    auto it = job_index_.find(pl.job_id);
    if (it == job_index_.end()) return bad("no such job");
    const size_t ji = it->second;
    JobState& j = jobs_[ji];
    const TraceJob& spec = *j.spec;
    if (j.part != p || j.phase != Phase::kPending) return bad("the job is not waiting here");
    if (pl.nodes.size() != static_cast<size_t>(spec.nodes)) {
      return bad(std::to_string(pl.nodes.size()) + " nodes for a job of " +
                 std::to_string(spec.nodes));
    }
    Attempt a;
    a.start = now_;
    a.speed = 1e18;
    std::set<size_t> used_nodes;
    for (const sched::NodeAssignment& na : pl.nodes) {
      auto nit = node_index_.find(na.node_id);
      if (nit == node_index_.end()) return bad("unknown node " + na.node_id);
      const size_t ni = nit->second;
      NodeState& n = nodes_[ni];
      if (n.part != p) return bad("node " + na.node_id + " is not in this pool");
      if (!n.present) return bad("node " + na.node_id + " is away");
      if (!used_nodes.insert(ni).second) return bad("node " + na.node_id + " twice in a gang");
      if (n.cpu_free < spec.cpu_milli || n.memory_free < spec.memory_mib) {
        return bad("node " + na.node_id + " lacks CPU or memory");
      }
      if (!spec.gpu_models.empty() &&
          std::none_of(spec.gpu_models.begin(), spec.gpu_models.end(), [&](const std::string& m) {
            return GpuModelMatches(n.spec->gpu_model, m);
          })) {
        return bad("node " + na.node_id + " has model " + n.spec->gpu_model);
      }
      const size_t want = spec.gpus > 0 ? static_cast<size_t>(spec.gpus) : 1;
      if (na.gpu_uuids.size() != want) {
        return bad(std::to_string(na.gpu_uuids.size()) + " GPUs on " + na.node_id);
      }
      Hold h;
      h.node = ni;
      h.milli = spec.gpus > 0 ? 1000 : spec.gpu_milli;
      h.memory_mib = spec.gpus > 0 ? 0 : spec.gpu_memory_mib;
      for (const std::string& uuid : na.gpu_uuids) {
        auto g = std::find_if(n.gpus.begin(), n.gpus.end(),
                              [&](const GpuState& s) { return s.uuid == uuid; });
        if (g == n.gpus.end()) return bad("no GPU " + uuid);
        const size_t gi = static_cast<size_t>(g - n.gpus.begin());
        if (std::find(h.gpus.begin(), h.gpus.end(), gi) != h.gpus.end()) {
          return bad("GPU " + uuid + " twice");
        }
        if (g->free_milli < h.milli) return bad("GPU " + uuid + " is not free enough");
        if (spec.gpus > 0 && n.spec->gpu_memory_mib < spec.gpu_memory_mib) {
          return bad("GPU " + uuid + " has too little memory");
        }
        if (spec.gpus == 0 && g->free_memory_mib < spec.gpu_memory_mib) {
          return bad("GPU " + uuid + " has too little free memory");
        }
        h.gpus.push_back(gi);
      }
      a.holds.push_back(std::move(h));
      a.speed = std::min(a.speed, n.spec->speed);
    }
    // Checked everything; apply.
    for (const Hold& h : a.holds) {
      NodeState& n = nodes_[h.node];
      for (size_t g : h.gpus) {
        n.gpus[g].free_milli -= h.milli;
        n.gpus[g].free_memory_mib -= h.milli >= 1000 ? n.spec->gpu_memory_mib : h.memory_mib;
      }
      n.cpu_free -= spec.cpu_milli;
      n.memory_free -= spec.memory_mib;
      n.jobs.push_back(ji);
    }
    if (spec.priority == sched::PriorityClass::kInteractive) a.speed = 1.0;
    a.saved = j.saved;
    a.id = std::to_string(spec.id) + "." + std::to_string(++j.attempt_no);

    AttemptRecord r;
    r.attempt_id = a.id;
    for (const Hold& h : a.holds) r.nodes.push_back(nodes_[h.node].spec->name);
    r.speed = a.speed;
    r.backfilled = pl.backfilled;
    a.record = RecordStart(result_, ji, spec, std::move(r), j.displaced_from, now_);
    const int64_t end = RunEnd(now_, spec.duration_ms - a.saved, a.speed);
    j.att = std::move(a);
    j.phase = Phase::kRunning;
    j.front = false;
    ++j.gen;
    Partition& part = parts_[static_cast<size_t>(p)];
    part.pending.erase(ji);
    part.running.insert(ji);
    group_alloc_[j.group] += spec.GpuMilli();
    allocated_ += spec.GpuMilli();
    Push(end, EventKind::kEnd, ji, j.gen);
    return Status::Ok();
  }

  Status Preempt(int p, const sched::Preemption& pr) {
    auto bad = [&](const std::string& why) {
      return Status::Internal("scheduler at t=" + std::to_string(now_) + " ms preempted " +
                              pr.attempt_id + ": " + why);
    };
    auto it = job_index_.find(pr.job_id);
    if (it == job_index_.end()) return bad("no such job");
    const size_t ji = it->second;
    JobState& j = jobs_[ji];
    if (j.part != p || j.phase != Phase::kRunning || !j.att || j.att->id != pr.attempt_id) {
      return bad("not a running attempt here");
    }
    if (!Preemptible(*j.spec)) return bad("the attempt is not preemptible");
    const Checkpoint c = LastCheckpoint(j, now_);
    AttemptRecord& r = result_.attempts[j.att->record];
    r.end = AttemptEnd::kPreempted;
    r.preempted_for = std::string(sched::PreemptReasonName(pr.reason));
    r.preemptor_job_id = pr.for_job_id;
    r.useful_end_ms = c.time;
    r.lost_work_ms = static_cast<int64_t>(std::llround(Progress(j, now_))) - c.progress;
    j.att->stopped = now_;
    j.saved = c.progress;
    j.phase = Phase::kVacating;
    j.last_preempted = now_;
    if (auto f = job_index_.find(pr.for_job_id); f != job_index_.end()) {
      j.vacating_for = f->second;
      ++jobs_[f->second].victims_leaving;
      // As the server does: the preemptor goes first in its class until it
      // starts, so the room made for it is not taken by the next in line.
      jobs_[f->second].front = true;
    }
    ++result_.jobs[ji].preemptions;
    Push(now_ + opt_.preempt_grace_ms, EventKind::kVacated, ji, j.gen);
    return Status::Ok();
  }

  void Sample() { result_.samples.push_back(SampleOf(now_, nodes_, allocated_, parts_)); }

  void ScheduleTick() {
    if (tick_scheduled_) return;
    const bool useful = std::any_of(parts_.begin(), parts_.end(), [](const Partition& p) {
      return p.can_place && (!p.running.empty() || p.acted);
    });
    if (!useful) return;
    tick_scheduled_ = true;
    Push(now_ + opt_.tick_ms, EventKind::kTick, 0, 0);
  }

  Result<SimResult> Finish() {
    result_.end_ms = now_;
    for (size_t ji = 0; ji < jobs_.size(); ++ji) {
      JobState& j = jobs_[ji];
      if (j.phase != Phase::kDone) result_.drained = false;
      if (!j.att) continue;
      AttemptRecord& r = result_.attempts[j.att->record];
      r.end_ms = now_;
      if (j.phase == Phase::kRunning) {
        r.end = AttemptEnd::kUnfinished;
        r.useful_end_ms = now_;
      }
    }
    return std::move(result_);
  }

  const Trace& trace_;
  const SimOptions opt_;
  SimResult result_;
  std::vector<NodeState> nodes_;
  std::vector<JobState> jobs_;
  std::vector<Partition> parts_;
  std::unordered_map<std::string, size_t> node_index_;
  std::unordered_map<int64_t, size_t> job_index_;
  std::vector<int64_t> group_alloc_;
  std::map<std::string, sched::DecayedUsage> usage_;
  std::priority_queue<Event, std::vector<Event>, EventLater> queue_;
  uint64_t seq_ = 0;
  int64_t now_ = 0;
  int64_t stop_at_ = 0;
  int64_t allocated_ = 0;
  bool tick_scheduled_ = false;
};

}  // namespace

Result<SimResult> Simulate(const Trace& trace, const SimOptions& options) {
  Simulator sim(trace, options);
  return sim.Run();
}

}  // namespace gpupool::sim
