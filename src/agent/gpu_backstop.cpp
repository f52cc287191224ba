#include "agent/gpu_backstop.h"

#include <map>

#include "common/units.h"

namespace gpupool::agent {

std::vector<CapVerdict> TasksOverGpuMemoryCap(const std::vector<CappedTask>& tasks,
                                              const std::vector<GpuTelemetry>& telemetry) {
  std::map<std::string, const GpuTelemetry*> by_uuid;
  for (const GpuTelemetry& g : telemetry) by_uuid[g.uuid] = &g;
  std::vector<CapVerdict> over;
  for (const CappedTask& t : tasks) {
    for (const std::string& uuid : t.gpu_uuids) {
      auto it = by_uuid.find(uuid);
      if (it == by_uuid.end()) continue;
      int64_t used_mib = 0;
      int64_t holders = 0;
      for (const GpuProcess& p : it->second->processes) {
        if (!t.pids.count(p.pid) || p.used_memory_mib < 0) continue;
        used_mib += p.used_memory_mib;
        ++holders;
      }
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
