// The pool as the server sees it at a scrape, and its metric families:
// jobs by state, class and group, the queue, nodes and agents, the blob
// store, and every GPU's telemetry beside what the pool allocated on it.
//
// PoolSample is plain data that the server fills (server/metrics_api.h);
// PoolText is pure and writes the text format (metrics/families.h). Values an agent could not read
// (-1 in its telemetry) are left out rather than shown as -1, so that a sum or an average over GPUs
// is never pulled down by a GPU that cannot say.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "telemetry/points.h"

namespace gpupool::metrics {

struct JobTally {
  std::string state;  // JobStateName: pending, scheduled, running, succeeded, ...
  std::string job_class;
  std::string group;
  int64_t count = 0;
};

// A GPU: its reading (the agent's last telemetry and what the pool holds
// on it, telemetry/points.h; `gpu` is its index), and what the info
// metric and the allocated memory add.
struct GpuSample : telemetry::GpuReading {
  std::string uuid;
  std::string model;  // as NVML names it
  bool simulated = false;
  // GPU memory the pool's live attempts hold: a share's cap; all of it for
  // a whole GPU.
  int64_t allocated_memory_mib = 0;
};

struct PoolSample {
  std::vector<JobTally> jobs;                       // in the queue or running now
  std::vector<JobTally> finished;                   // ended since the server started
  std::map<std::string, int64_t> pending_by_class;  // the queue
  std::map<std::string, int64_t> nodes_by_status;   // available, busy, paused, offline, ...
  int64_t agents_connected = 0;
  std::vector<GpuSample> gpus;
  int64_t blob_bytes = -1;  // the blob store's size on disk; -1: not known
};

std::string PoolText(const PoolSample& sample);

}  // namespace gpupool::metrics
