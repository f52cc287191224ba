#include "metrics/pool_families.h"

#include <initializer_list>

#include "metrics/families.h"

namespace gpupool::metrics {

namespace {

using prometheus::MetricType;

constexpr double kMib = 1024.0 * 1024.0;

// A GPU's values are labelled by node and GPU index only; its uuid, model
// and whether it is simulated are on gpupool_gpu_info (Prometheus' "info
// metric" pattern): on every value they would double the size of a scrape
// (docs/performance.md).
void AppendGpus(std::string& out, const std::vector<GpuSample>& gpus) {
  TextFamily info("gpupool_gpu_info",
                  "A GPU of the pool (always 1): its uuid, model (as NVML names it) and whether "
                  "it is simulated. Join it to a GPU's values on node and gpu.",
                  MetricType::Gauge);
  TextFamily util("gpupool_gpu_utilization_ratio",
                  "GPU utilization (NVML: the part of the last sample period a kernel ran), "
                  "0 to 1.",
                  MetricType::Gauge);
  TextFamily used("gpupool_gpu_memory_used_bytes", "GPU memory in use, by anyone.",
                  MetricType::Gauge);
  TextFamily total("gpupool_gpu_memory_total_bytes", "GPU memory.", MetricType::Gauge);
  TextFamily temp("gpupool_gpu_temperature_celsius", "GPU temperature.", MetricType::Gauge);
  TextFamily power("gpupool_gpu_power_watts", "GPU power draw.", MetricType::Gauge);
  TextFamily energy("gpupool_gpu_energy_joules_total",
                    "Energy the GPU used since its driver was loaded (restarts with it).",
                    MetricType::Counter);
  TextFamily alloc("gpupool_gpu_allocated_ratio",
                   "The part of the GPU the pool's running attempts hold (a share's fraction, 1 "
                   "for a whole GPU), 0 to 1: compare with utilization.",
                   MetricType::Gauge);
  TextFamily alloc_mem("gpupool_gpu_allocated_memory_bytes",
                       "GPU memory the pool's running attempts hold (a share's cap, all of it "
                       "for a whole GPU): compare with memory used.",
                       MetricType::Gauge);
  for (const GpuSample& g : gpus) {
    const std::string index = std::to_string(g.gpu);
    const std::initializer_list<Label> labels = {{"node", g.node}, {"gpu", index}};
    info.Add({{"node", g.node},
              {"gpu", index},
              {"uuid", g.uuid},
              {"model", g.model},
              {"simulated", g.simulated ? "true" : "false"}},
             1);
    if (g.utilization_percent >= 0) util.Add(labels, g.utilization_percent / 100.0);
    if (g.memory_used_mib >= 0) used.Add(labels, static_cast<double>(g.memory_used_mib) * kMib);
    total.Add(labels, static_cast<double>(g.memory_total_mib) * kMib);
    if (g.temperature_c >= 0) temp.Add(labels, g.temperature_c);
    if (g.power_mw >= 0) power.Add(labels, static_cast<double>(g.power_mw) / 1000.0);
    if (g.energy_mj >= 0) energy.Add(labels, static_cast<double>(g.energy_mj) / 1000.0);
    alloc.Add(labels, static_cast<double>(g.allocated_milli) / 1000.0);
    alloc_mem.Add(labels, static_cast<double>(g.allocated_memory_mib) * kMib);
  }
  for (const TextFamily* f :
       {&info, &util, &used, &total, &temp, &power, &energy, &alloc, &alloc_mem})
    f->AppendTo(out);
}

void AppendJobs(std::string& out, const char* name, const char* help, MetricType type,
                const std::vector<JobTally>& tallies) {
  TextFamily f(name, help, type);
  for (const JobTally& t : tallies) {
    f.Add({{"state", t.state}, {"class", t.job_class}, {"group", t.group}},
          static_cast<double>(t.count));
  }
  f.AppendTo(out);
}

}  // namespace

std::string PoolText(const PoolSample& sample) {
  std::string out;
  out.reserve(4096 + sample.gpus.size() * 640);
  AppendJobs(out, "gpupool_jobs",
             "Jobs in the queue or running (pending, scheduled, running), by state, class and "
             "group.",
             MetricType::Gauge, sample.jobs);
  AppendJobs(out, "gpupool_jobs_finished_total",
             "Jobs that ended (succeeded, failed, cancelled) since the server started, by "
             "state, class and group.",
             MetricType::Counter, sample.finished);
  TextFamily queue("gpupool_queue_length", "Pending jobs, by class.", MetricType::Gauge);
  for (const auto& [job_class, n] : sample.pending_by_class)
    queue.Add({{"class", job_class}}, static_cast<double>(n));
  queue.AppendTo(out);
  TextFamily nodes("gpupool_nodes",
                   "Registered nodes, by status (available, busy, paused, draining, reclaimed, "
                   "offline, lost, left).",
                   MetricType::Gauge);
  for (const auto& [status, n] : sample.nodes_by_status)
    nodes.Add({{"status", status}}, static_cast<double>(n));
  nodes.AppendTo(out);
  TextFamily("gpupool_agents_connected", "Agents connected to this server now.", MetricType::Gauge)
      .Add({}, static_cast<double>(sample.agents_connected))
      .AppendTo(out);
  if (sample.blob_bytes >= 0) {
    TextFamily("gpupool_blob_store_bytes",
               "Size of the blob store (job inputs and checkpoints, deduplicated and "
               "compressed) on the server's disk, as of its last garbage collection.",
               MetricType::Gauge)
        .Add({}, static_cast<double>(sample.blob_bytes))
        .AppendTo(out);
  }
  AppendGpus(out, sample.gpus);
  return out;
}

}  // namespace gpupool::metrics
