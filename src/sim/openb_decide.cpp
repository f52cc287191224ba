// The openb replay through sched::Scheduler::Decide: the cluster as a
// scheduler snapshot, one arrival per pass (openb.h, MakeDecidePlacer).
#include <cstdio>
#include <memory>
#include <utility>

#include "sched/scheduler.h"
#include "sim/openb.h"

namespace gpupool::sim {

namespace {

std::string NodeId(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "n%07zu", i);
  return buf;
}

// The scheduler's snapshot of the replayed cluster, kept in step with the
// replay's ClusterState: only the node last placed on changes between
// arrivals (the replay allocates the returned choice), so only it is copied
// again.
class DecidePlacer {
 public:
  DecidePlacer(const sched::ClusterState& state, sched::SchedulerConfig config, sched::Rng& rng)
      : scheduler_(std::move(config)), run_(rng) {
    for (size_t i = 0; i < state.capacity.size(); ++i) {
      const sched::NodeCapacity& cap = state.capacity[i];
      sched::NodeView v;
      v.id = NodeId(i);
      v.name = v.id;
      v.cpu_milli_total = cap.cpu_milli;
      v.memory_mib_total = cap.memory_mib;
      for (size_t g = 0; g < cap.gpus.size(); ++g) {
        sched::GpuView gv;
        gv.uuid = v.id + "-gpu" + std::to_string(g);
        gv.model = cap.model;
        v.gpus.push_back(std::move(gv));
      }
      snap_.nodes.push_back(std::move(v));
      Sync(state, i);
    }
    snap_.pending.resize(1);
  }

  Result<std::optional<sched::Choice>> Place(const sched::ClusterState& state,
                                             const sched::TaskRequest& t) {
    if (last_ >= 0) Sync(state, static_cast<size_t>(last_));
    last_ = -1;
    sched::PendingJob& job = snap_.pending[0];
    job.job_id = ++arrivals_;
    sched::Request& r = job.request;
    r.cpu_milli = t.cpu_milli;
    r.memory_mib = t.memory_mib;
    r.gpus = t.num_gpu > 0 && !t.IsFractional() ? t.num_gpu : 0;
    r.gpu_milli = t.IsFractional() ? t.gpu_milli : 0;
    r.gpu_models = t.gpu_models;
    GP_ASSIGN_OR_RETURN(sched::Decisions d, scheduler_.Decide(snap_, run_));
    if (d.placements.empty()) return std::optional<sched::Choice>();
    const sched::NodeAssignment& a = d.placements[0].nodes.at(0);
    sched::Choice c;
    c.node = std::stoi(a.node_id.substr(1));
    const sched::NodeView& v = snap_.nodes[static_cast<size_t>(c.node)];
    for (const std::string& uuid : a.gpu_uuids) {
      for (size_t g = 0; g < v.gpus.size(); ++g) {
        if (v.gpus[g].uuid == uuid) c.gpus.push_back(static_cast<int>(g));
      }
    }
    last_ = c.node;
    return std::optional<sched::Choice>(std::move(c));
  }

 private:
  void Sync(const sched::ClusterState& state, size_t i) {
    const sched::NodeCapacity& f = state.free[i];
    sched::NodeView& v = snap_.nodes[i];
    v.cpu_milli_free = f.cpu_milli;
    v.memory_mib_free = f.memory_mib;
    for (size_t g = 0; g < v.gpus.size(); ++g) v.gpus[g].free_milli = f.gpus[g];
  }

  sched::Scheduler scheduler_;
  sched::RunContext run_;
  sched::Snapshot snap_;
  int64_t arrivals_ = 0;
  int last_ = -1;
};

}  // namespace

Result<OpenbPlacer> MakeDecidePlacer(const sched::ClusterState& state,
                                     std::vector<sched::TaskType> workload,
                                     const OpenbOptions& options, sched::Rng& rng) {
  if (options.tie_break == sched::TieBreak::kRandom) {
    return Status::InvalidArgument(
        "--via decide: the scheduler breaks ties by node order, not at random");
  }
  GP_ASSIGN_OR_RETURN(sched::PlacementScore placement, sched::ParsePlacementScore(options.policy));
  sched::SchedulerConfig config;
  config.placement = std::move(placement);
  config.tie_break = options.tie_break;
  config.max_reservations = 0;  // one arrival, tried once: no backfill,
  config.preemption = false;    // nothing to preempt
  config.score_all_nodes = true;
  config.workload = std::move(workload);
  auto placer = std::make_shared<DecidePlacer>(state, std::move(config), rng);
  return OpenbPlacer([placer](const sched::ClusterState& s, const sched::TaskRequest& t) {
    return placer->Place(s, t);
  });
}

}  // namespace gpupool::sim
