#include "metrics/pool_families.h"

#include "metrics/families.h"

namespace gpupool::metrics {

namespace {

using prometheus::MetricType;

constexpr double kMib = 1024.0 * 1024.0;

Labels GpuLabels(const GpuSample& g) {
  return {{"node", g.node},
          {"gpu", std::to_string(g.index)},
          {"uuid", g.uuid},
          {"model", g.model},
          {"simulated", g.simulated ? "true" : "false"}};
}

std::vector<prometheus::MetricFamily> GpuFamilies(const std::vector<GpuSample>& gpus) {
  FamilyBuilder util("gpupool_gpu_utilization_ratio",
                     "GPU utilization (NVML: the part of the last sample period a kernel ran), "
                     "0 to 1.",
                     MetricType::Gauge);
  FamilyBuilder used("gpupool_gpu_memory_used_bytes", "GPU memory in use, by anyone.",
                     MetricType::Gauge);
  FamilyBuilder total("gpupool_gpu_memory_total_bytes", "GPU memory.", MetricType::Gauge);
  FamilyBuilder temp("gpupool_gpu_temperature_celsius", "GPU temperature.", MetricType::Gauge);
  FamilyBuilder power("gpupool_gpu_power_watts", "GPU power draw.", MetricType::Gauge);
  FamilyBuilder energy("gpupool_gpu_energy_joules_total",
                       "Energy the GPU used since its driver was loaded (restarts with it).",
                       MetricType::Counter);
  FamilyBuilder alloc("gpupool_gpu_allocated_ratio",
                      "The part of the GPU the pool's running attempts hold (a share's "
                      "fraction, 1 for a whole GPU), 0 to 1: compare with utilization.",
                      MetricType::Gauge);
  FamilyBuilder alloc_mem("gpupool_gpu_allocated_memory_bytes",
                          "GPU memory the pool's running attempts hold (a share's cap, all of "
                          "it for a whole GPU): compare with memory used.",
                          MetricType::Gauge);
  for (const GpuSample& g : gpus) {
    const Labels labels = GpuLabels(g);
    if (g.utilization_percent >= 0) util.Add(labels, g.utilization_percent / 100.0);
    if (g.memory_used_mib >= 0) used.Add(labels, static_cast<double>(g.memory_used_mib) * kMib);
    total.Add(labels, static_cast<double>(g.memory_total_mib) * kMib);
    if (g.temperature_c >= 0) temp.Add(labels, g.temperature_c);
    if (g.power_mw >= 0) power.Add(labels, static_cast<double>(g.power_mw) / 1000.0);
    if (g.energy_mj >= 0) energy.Add(labels, static_cast<double>(g.energy_mj) / 1000.0);
    alloc.Add(labels, static_cast<double>(g.allocated_milli) / 1000.0);
    alloc_mem.Add(labels, static_cast<double>(g.allocated_memory_mib) * kMib);
  }
  std::vector<prometheus::MetricFamily> out;
  for (FamilyBuilder* f : {&util, &used, &total, &temp, &power, &energy, &alloc, &alloc_mem})
    out.push_back(f->Take());
  return out;
}

}  // namespace

std::vector<prometheus::MetricFamily> PoolFamilies(const PoolSample& sample) {
  FamilyBuilder jobs("gpupool_jobs",
                     "Jobs in the queue or running (pending, scheduled, running), by state, "
                     "class and group.",
                     MetricType::Gauge);
  for (const JobTally& t : sample.jobs) {
    jobs.Add({{"state", t.state}, {"class", t.job_class}, {"group", t.group}},
             static_cast<double>(t.count));
  }
  FamilyBuilder finished("gpupool_jobs_finished_total",
                         "Jobs that ended (succeeded, failed, cancelled) since the server "
                         "started, by state, class and group.",
                         MetricType::Counter);
  for (const JobTally& t : sample.finished) {
    finished.Add({{"state", t.state}, {"class", t.job_class}, {"group", t.group}},
                 static_cast<double>(t.count));
  }
  FamilyBuilder queue("gpupool_queue_length", "Pending jobs, by class.", MetricType::Gauge);
  for (const auto& [job_class, n] : sample.pending_by_class)
    queue.Add({{"class", job_class}}, static_cast<double>(n));
  FamilyBuilder nodes("gpupool_nodes",
                      "Registered nodes, by status (available, busy, paused, draining, "
                      "reclaimed, offline, lost, left).",
                      MetricType::Gauge);
  for (const auto& [status, n] : sample.nodes_by_status)
    nodes.Add({{"status", status}}, static_cast<double>(n));
  FamilyBuilder agents("gpupool_agents_connected", "Agents connected to this server now.",
                       MetricType::Gauge);
  agents.Add({}, static_cast<double>(sample.agents_connected));

  std::vector<prometheus::MetricFamily> out;
  out.push_back(jobs.Take());
  out.push_back(finished.Take());
  out.push_back(queue.Take());
  out.push_back(nodes.Take());
  out.push_back(agents.Take());
  if (sample.blob_bytes >= 0) {
    FamilyBuilder blobs("gpupool_blob_store_bytes",
                        "Size of the blob store (job inputs and checkpoints, deduplicated and "
                        "compressed) on the server's disk.",
                        MetricType::Gauge);
    blobs.Add({}, static_cast<double>(sample.blob_bytes));
    out.push_back(blobs.Take());
  }
  Append(out, GpuFamilies(sample.gpus));
  return out;
}

}  // namespace gpupool::metrics
