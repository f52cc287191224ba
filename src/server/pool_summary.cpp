#include "server/pool_summary.h"

#include <map>
#include <nlohmann/json.hpp>

#include "server/http_errors.h"

namespace gpupool::server {

using nlohmann::json;

namespace {

// The statuses of a node that lends (NodeStatusName); a node offline, lost
// or gone, paused, reclaimed or outside its window lends nothing now.
bool Lends(const NodeStatus& n) {
  return n.connected && (n.status == "available" || n.status == "busy");
}

bool Online(const NodeStatus& n) {
  return n.connected && n.status != "offline" && n.status != "lost" && n.status != "left";
}

std::string ModelOf(const GpuInfo& g) {
  std::string name = g.name.empty() ? "unknown GPU" : g.name;
  return g.IsMig() && !g.mig_profile.empty() ? name + " (MIG " + g.mig_profile + ")" : name;
}

}  // namespace

PoolSummary SummarizePool(const std::vector<NodeStatus>& nodes) {
  PoolSummary out;
  std::map<std::string, GpuModelSummary> models;
  for (const NodeStatus& n : nodes) {
    ++out.nodes;
    out.nodes_online += Online(n);
    const bool lends = Lends(n);
    for (const GpuInfo& g : n.node.gpus) {
      GpuModelSummary& m = models[ModelOf(g)];
      const int64_t used = n.AllocatedMilli(g.uuid);
      // Without a lending report (an agent of before lending reports) a
      // connected, available node lends all it has.
      const bool lent = lends && (!n.node.lending || n.node.lending->gpus.count(g.uuid) > 0);
      ++m.gpus;
      m.used_milli += used;
      (lent ? m.free_milli : m.unavailable_milli) += 1000 - used;
      m.simulated = m.simulated || g.simulated;
    }
  }
  for (auto& [model, m] : models) {
    m.model = model;
    out.gpus.push_back(std::move(m));
  }
  return out;
}

void SummaryApi::AddRoutes(ApiRoutes& routes) {
  routes.Add("GET", "/v1/pool/summary", Access::kAuthorizedFirst, Action::kPoolRead,
             [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
               auto nodes = pool_.ListNodes();
               if (!nodes.ok()) return (*respond)(ErrorResponse(nodes.status()));
               const PoolSummary s = SummarizePool(*nodes);
               json gpus = json::array();
               for (const GpuModelSummary& m : s.gpus) {
                 gpus.push_back({{"model", m.model},
                                 {"gpus", m.gpus},
                                 {"used_milli", m.used_milli},
                                 {"free_milli", m.free_milli},
                                 {"unavailable_milli", m.unavailable_milli},
                                 {"simulated", m.simulated}});
               }
               (*respond)(JsonResponse(
                   200, {{"nodes", s.nodes}, {"nodes_online", s.nodes_online}, {"gpus", gpus}}));
             });
}

}  // namespace gpupool::server
