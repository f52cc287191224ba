// gpupool-metrics-bench: what a Prometheus scrape of GET /metrics costs the
// server (issue 22's figure: under 100 ms and under 5 MB with 1,000 agents
// of 8 GPUs).
//
//   BM_Scrape/nodes:N/pending:P
//     A pool of N connected nodes of 8 GPUs named as NVML names them
//     (bench/busy_pool.h: "lab-node-0042", "GPU-8a3b0c1d-...", "NVIDIA
//     A100-SXM4-80GB"), every GPU
//     held by a running job and reporting telemetry in a heartbeat, P jobs
//     pending, and the server's event metrics holding 150 API series (50
//     routes x 3 status codes) with their histograms. One iteration is one
//     MetricsApi::Scrape(): the pool's job counts and nodes read (ListNodes
//     on the SQLite store), the GPU, pool, event and process families
//     built, and the text rendered. Counters: bytes (the body), series
//     (sample lines).
//
// Run: build/bin/gpupool-metrics-bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
// The smoke test (metrics_bench_smoke) runs the smallest set briefly.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "busy_pool.h"
#include "metrics/server_metrics.h"
#include "server/auth.h"
#include "server/metrics_api.h"

namespace gpupool::server {
namespace {

struct ScrapeFixture {
  ScrapeFixture(int nodes, int pending)
      : pool(nodes, pending, 0), auth(pool.store(), pool.clock()) {
    for (size_t n = 0; n < pool.nodes().size(); ++n) {
      proto::Heartbeat hb;
      for (int g = 0; g < kGpusPerNode; ++g) {
        const std::string name = "node-" + std::to_string(n);
        hb.telemetry.push_back({name + "-gpu" + std::to_string(g),
                                40000 + g,
                                80 + g,
                                60 + g,
                                300000 + g,
                                123456789000 + g,
                                {{1000 + g, 40000}}});
      }
      pool.pool().AgentHeartbeat(pool.nodes()[n], hb);
    }
    for (int r = 0; r < 50; ++r) {
      for (int code : {200, 404, 500})
        events.ApiRequest("/v1/route" + std::to_string(r) + "/{id}", "GET", code, 0.001 * code);
    }
    api = std::make_unique<MetricsApi>(pool.pool(), auth, pool.clock(), events, nullptr);
  }
  BusyPool pool;
  Auth auth;
  metrics::ServerMetrics events;
  std::unique_ptr<MetricsApi> api;
};

void BM_Scrape(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int pending = static_cast<int>(state.range(1));
  static std::unique_ptr<ScrapeFixture> f;
  static std::vector<int64_t> made_for;
  if (!f || made_for != std::vector<int64_t>{nodes, pending}) {
    f.reset();
    f = std::make_unique<ScrapeFixture>(nodes, pending);
    made_for = {nodes, pending};
  }
  size_t bytes = 0;
  int64_t series = 0;
  for (auto _ : state) {
    net::HttpResponse r = f->api->Scrape();
    if (r.status != 200) {
      state.SkipWithError(("scrape answered " + std::to_string(r.status) + ": " + r.body).c_str());
      break;
    }
    bytes = r.body.size();
    series = 0;
    for (size_t at = 0; at < r.body.size();) {
      size_t end = r.body.find('\n', at);
      if (r.body[at] != '#') ++series;
      at = end == std::string::npos ? r.body.size() : end + 1;
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["series"] = static_cast<double>(series);
  state.counters["gpus"] = nodes * kGpusPerNode;
}
BENCHMARK(BM_Scrape)
    ->ArgNames({"nodes", "pending"})
    ->Args({10, 100})  // the smoke test's
    ->Args({1000, 10000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpupool::server

BENCHMARK_MAIN();
