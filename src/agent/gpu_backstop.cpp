#include "agent/gpu_backstop.h"

#include <map>

#include "common/units.h"

namespace gpupool::agent {
namespace {

// What task `t`'s processes hold on the GPU `g` reports (MiB), and how many
// of them hold any.
int64_t TaskUsedMib(const CappedTask& t, const GpuTelemetry& g, int64_t* holders) {
  int64_t used_mib = 0;
  for (const GpuProcess& p : g.processes) {
    if (!t.pids.count(p.pid) || p.used_memory_mib < 0) continue;
    used_mib += p.used_memory_mib;
    ++*holders;
  }
  return used_mib;
}

}  // namespace

std::vector<ShareUse> ShareUses(const std::vector<CappedTask>& tasks,
                                const std::vector<GpuTelemetry>& telemetry) {
  std::vector<ShareUse> uses;
  for (const CappedTask& t : tasks) {
    for (const std::string& uuid : t.gpu_uuids) {
      ShareUse use{t.attempt_id, uuid, t.cap_bytes >> 20, -1};
      for (const GpuTelemetry& g : telemetry) {
        int64_t holders = 0;
        if (g.uuid == uuid) use.memory_used_mib = TaskUsedMib(t, g, &holders);
      }
      uses.push_back(std::move(use));
    }
  }
  return uses;
}

std::vector<CapVerdict> TasksOverGpuMemoryCap(const std::vector<CappedTask>& tasks,
                                              const std::vector<GpuTelemetry>& telemetry) {
  std::map<std::string, const GpuTelemetry*> by_uuid;
  for (const GpuTelemetry& g : telemetry) by_uuid[g.uuid] = &g;
  std::vector<CapVerdict> over;
  for (const CappedTask& t : tasks) {
    for (const std::string& uuid : t.gpu_uuids) {
      auto it = by_uuid.find(uuid);
      if (it == by_uuid.end()) continue;
      int64_t holders = 0;
      int64_t used_mib = TaskUsedMib(t, *it->second, &holders);
      const int64_t mib = int64_t{1} << 20;
      int64_t allowed = t.cap_bytes + holders * kGpuContextAllowanceMib * mib;
      if (used_mib * mib <= allowed) continue;
      over.push_back({t.attempt_id, "used " + FormatBytes(used_mib * mib) + " of GPU memory on " +
                                        uuid + ", over its cap of " + FormatBytes(t.cap_bytes) +
                                        " (as NVML counts it)"});
      break;
    }
  }
  return over;
}

}  // namespace gpupool::agent
