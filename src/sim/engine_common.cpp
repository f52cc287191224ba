#include "sim/engine_common.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace gpupool::sim {

Status CheckTraceRefs(const Trace& trace) {
  std::set<std::string> groups, nodes;
  for (const auto& g : trace.groups) groups.insert(g.name);
  for (const auto& n : trace.nodes) {
    if (!n.owner_group.empty() && !groups.count(n.owner_group)) {
      return Status::InvalidArgument("node " + n.name + ": unknown group " + n.owner_group);
    }
    if (!nodes.insert(n.name).second) {
      return Status::InvalidArgument("node " + n.name + " appears twice");
    }
  }
  std::set<int64_t> jobs;
  for (const auto& j : trace.jobs) {
    if (!groups.count(j.group)) {
      return Status::InvalidArgument("job " + std::to_string(j.id) + ": unknown group " + j.group);
    }
    if (!jobs.insert(j.id).second) {
      return Status::InvalidArgument("job " + std::to_string(j.id) + " appears twice");
    }
  }
  for (const auto& e : trace.events) {
    if (!nodes.count(e.node)) {
      return Status::InvalidArgument("provider event: unknown node " + e.node);
    }
  }
  return Status::Ok();
}

std::vector<sched::SchedulerConfig> PartitionConfigs(const Trace& trace,
                                                     const SimOptions& options) {
  sched::SchedulerConfig base;
  base.half_life_ms = options.half_life_ms;
  base.anti_thrash_window_ms = options.anti_thrash_window_ms;
  base.candidates = options.candidates;
  base.placement = options.placement;
  base.max_reservations = options.max_reservations;
  base.preemption = options.mode == SimMode::kPerLab
                        ? options.preemption && options.per_lab_preemption
                        : options.preemption;
  for (const auto& n : trace.nodes) base.model_speed.emplace(n.gpu_model, n.speed);
  auto guarantee = [&](const TraceGroup& g) {
    return g.guaranteed_milli ? *g.guaranteed_milli : OwnedGpuMilli(trace, g.name);
  };
  std::vector<sched::SchedulerConfig> configs;
  if (options.mode == SimMode::kPooled) {
    configs.push_back(base);
    for (const auto& g : trace.groups) {
      configs[0].groups.push_back({g.name, g.weight, guarantee(g)});
    }
  } else {
    for (const auto& g : trace.groups) {
      configs.push_back(base);
      configs.back().groups.push_back({g.name, g.weight, guarantee(g)});
    }
  }
  return configs;
}

JobRecord NewJobRecord(const TraceJob& spec) {
  JobRecord r;
  r.job_id = spec.id;
  r.group = spec.group;
  r.priority = spec.priority;
  r.submit_ms = spec.submit_ms;
  r.gpu_milli = spec.GpuMilli();
  r.work_ms = spec.duration_ms;
  return r;
}

size_t RecordStart(SimResult& result, size_t job, const TraceJob& spec, AttemptRecord r,
                   std::vector<std::string>& displaced_from, int64_t now) {
  JobRecord& jr = result.jobs[job];
  r.job_id = spec.id;
  r.group = spec.group;
  r.priority = spec.priority;
  r.gpu_milli = spec.GpuMilli();
  r.start_ms = now;
  if (!displaced_from.empty()) {
    const bool same = std::any_of(r.nodes.begin(), r.nodes.end(), [&](const std::string& n) {
      return std::find(displaced_from.begin(), displaced_from.end(), n) != displaced_from.end();
    });
    if (!same) {
      r.migrated = true;
      ++jr.migrations;
    }
    displaced_from.clear();
  }
  result.attempts.push_back(std::move(r));
  ++jr.attempts;
  if (jr.first_start_ms < 0) jr.first_start_ms = now;
  jr.waiting_reason.clear();
  return result.attempts.size() - 1;
}

int64_t RunEnd(int64_t now, int64_t remaining_ms, double speed) {
  const double left = static_cast<double>(remaining_ms) / speed;
  return now + std::max<int64_t>(1, static_cast<int64_t>(std::ceil(left)));
}

}  // namespace gpupool::sim
