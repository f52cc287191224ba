// The pool at a glance, for the dashboard's Overview (GET /v1/pool/summary):
// how many machines there are and how many are online, and per GPU model
// how many GPUs there are, in use, free and not available now. Computed on
// the server so that a page needs neither the whole node list (1 MB at a
// thousand machines) nor the rules of lending.
//
//   {"nodes": 1010, "nodes_online": 1002,
//    "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "gpus": 8080, "used_milli": 4200500,
//              "free_milli": 3800000, "unavailable_milli": 79500, "simulated": true}]}
//
// In thousandths of a GPU, so that shares count as the fractions they are:
// `used` is what the pool's attempts hold; `free` is the rest of a GPU its
// owner lends now (node connected, available or busy, the GPU in its
// lending); `unavailable` the rest of every other GPU (paused, reclaimed,
// outside a window, offline). used + free + unavailable = 1000 x gpus.
// Pure; Route registration in SummaryApi.
#pragma once

#include <string>
#include <vector>

#include "server/api_module.h"
#include "server/pool.h"

namespace gpupool::server {

struct GpuModelSummary {
  std::string model;  // the GPU's name, "(MIG 3g.40gb)" added for a MIG device
  int32_t gpus = 0;
  int64_t used_milli = 0;
  int64_t free_milli = 0;
  int64_t unavailable_milli = 0;
  bool simulated = false;  // any of them simulated
};

struct PoolSummary {
  int32_t nodes = 0;
  int32_t nodes_online = 0;
  std::vector<GpuModelSummary> gpus;  // by model name
};

PoolSummary SummarizePool(const std::vector<NodeStatus>& nodes);

// GET /v1/pool/summary, for anyone who may read the pool.
class SummaryApi : public ApiModule {
 public:
  explicit SummaryApi(Pool& pool) : pool_(pool) {}
  void AddRoutes(ApiRoutes& routes) override;

 private:
  Pool& pool_;
};

}  // namespace gpupool::server
