// A GPU of a node as the server knows it: the agent's last telemetry for
// it (Pool::ListNodes' NodeStatus) beside the part of it the pool's live
// attempts hold. What the metrics (server/metrics_api.h) and the telemetry
// history (server/telemetry_api.h) both start from.
#pragma once

#include "server/pool.h"
#include "telemetry/points.h"

namespace gpupool::server {

inline telemetry::GpuReading ReadingOf(const NodeStatus& st, const GpuInfo& g) {
  telemetry::GpuReading r;
  r.node = st.node.name;
  r.gpu = g.index;
  r.memory_total_mib = g.memory_mib;
  if (const GpuTelemetry* t = st.TelemetryOf(g.uuid)) {
    r.utilization_percent = t->utilization_percent;
    r.memory_used_mib = t->memory_used_mib;
    r.temperature_c = t->temperature_c;
    r.power_mw = t->power_mw;
    r.energy_mj = t->energy_mj;
  }
  r.allocated_milli = st.AllocatedMilli(g.uuid);
  return r;
}

}  // namespace gpupool::server
