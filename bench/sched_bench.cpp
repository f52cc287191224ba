// Google Benchmark of the scheduling code (issue 3's figures).
//
//   BM_Place/<policy>/<gpus>: one placement decision of first-fit, best-fit,
//     dot-product or fgd (Place + Allocate, with a Release so the cluster
//     stays near half full) on a cluster of <gpus> GPUs in 8-GPU nodes of
//     four models, for a stream of mixed requests: fractional shares, single
//     GPUs and multi-GPU tasks, some constrained to a model. Reported as
//     placements per second.
//   BM_Decide/<pending>/<gpus>: one pass of the server's queue scheduler over
//     <pending> jobs on an idle cluster of <gpus> whole GPUs.
//
// Run: build/bin/gpupool-sched-bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <deque>
#include <string>
#include <vector>

#include "sched/placement.h"
#include "sched/policies.h"
#include "sched/scheduler.h"

namespace gpupool::sched {
namespace {

const char* kModels[] = {"A100", "V100", "T4", "A10"};

ClusterState MakeCluster(int gpus) {
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < gpus / 8; ++i) {
    NodeCapacity n;
    n.cpu_milli = 96000;
    n.memory_mib = 512 * 1024;
    n.model = kModels[i % 4];
    n.gpus.assign(8, static_cast<int>(kMilliPerGpu));
    nodes.push_back(std::move(n));
  }
  return ClusterState::FromCapacity(std::move(nodes));
}

// A deterministic mix: 40% shares, 40% one GPU, 15% 2-4 GPUs, 5% 8 GPUs; a
// fifth of GPU tasks constrained to one model.
std::vector<TaskRequest> MakeRequests(size_t n) {
  Rng rng(7);
  std::vector<TaskRequest> out;
  for (size_t i = 0; i < n; ++i) {
    TaskRequest t;
    t.cpu_milli = 1000 * static_cast<int64_t>(1 + rng.Uniform(8));
    t.memory_mib = 4096 * static_cast<int64_t>(1 + rng.Uniform(8));
    uint64_t kind = rng.Uniform(100);
    if (kind < 40) {
      t.num_gpu = 1;
      t.gpu_milli = static_cast<int>(100 * (1 + rng.Uniform(9)));
    } else if (kind < 80) {
      t.num_gpu = 1;
      t.gpu_milli = static_cast<int>(kMilliPerGpu);
    } else if (kind < 95) {
      t.num_gpu = static_cast<int>(2 + rng.Uniform(3));
      t.gpu_milli = static_cast<int>(kMilliPerGpu);
    } else {
      t.num_gpu = 8;
      t.gpu_milli = static_cast<int>(kMilliPerGpu);
    }
    if (rng.Uniform(5) == 0) t.gpu_models = {kModels[rng.Uniform(4)]};
    out.push_back(std::move(t));
  }
  return out;
}

void BM_Place(benchmark::State& state, const std::string& policy_name) {
  const int gpus = static_cast<int>(state.range(0));
  ClusterState cluster = MakeCluster(gpus);
  std::vector<TaskRequest> requests = MakeRequests(4096);
  auto policy = MakePolicy(policy_name, TypicalTaskTypes(requests, 100));
  Rng rng(42);
  struct Placed {
    TaskRequest task;
    Choice choice;
  };
  std::deque<Placed> live;
  // Fill to about half of the GPUs, then keep the level steady: every
  // measured placement is matched by the release of the oldest one.
  size_t next = 0;
  const int64_t half = cluster.TotalGpuMilli() / 2;
  for (int64_t free = cluster.FreeGpuMilli(); free > half;) {
    const TaskRequest& t = requests[next++ % requests.size()];
    auto c = policy->Place(cluster, t, rng);
    if (!c) continue;
    Allocate(cluster.free[c->node], t, c->gpus);
    free -= t.GpuDemand();
    live.push_back({t, *c});
  }
  int64_t placed = 0;
  for (auto _ : state) {
    const TaskRequest& t = requests[next++ % requests.size()];
    auto c = policy->Place(cluster, t, rng);
    benchmark::DoNotOptimize(c);
    if (c) {
      Allocate(cluster.free[c->node], t, c->gpus);
      live.push_back({t, *c});
      ++placed;
    }
    state.PauseTiming();
    const Placed& old = live.front();
    Release(cluster.free[old.choice.node], old.task, old.choice.gpus);
    live.pop_front();
    state.ResumeTiming();
  }
  state.counters["placements/s"] =
      benchmark::Counter(static_cast<double>(placed), benchmark::Counter::kIsRate);
}

void BM_Decide(benchmark::State& state) {
  const int pending = static_cast<int>(state.range(0));
  const int gpus = static_cast<int>(state.range(1));
  Snapshot snap;
  for (int i = 0; i < gpus / 8; ++i) {
    NodeView n;
    n.id = "n" + std::to_string(i);
    n.name = n.id;
    for (int g = 0; g < 8; ++g)
      n.gpus.push_back({n.id + "-" + std::to_string(g), kModels[i % 4], 81920, true});
    n.cpu_milli_total = n.cpu_milli_free = 96000;
    n.memory_mib_total = n.memory_mib_free = 512 * 1024;
    snap.nodes.push_back(std::move(n));
  }
  std::vector<TaskRequest> mix = MakeRequests(static_cast<size_t>(pending));
  for (int i = 0; i < pending; ++i) {
    PendingJob j;
    j.job_id = i + 1;
    j.resources.gpus = std::max(1, mix[static_cast<size_t>(i)].num_gpu);
    j.resources.cpu_milli = mix[static_cast<size_t>(i)].cpu_milli;
    j.resources.memory_mib = mix[static_cast<size_t>(i)].memory_mib;
    j.resources.gpu_models = mix[static_cast<size_t>(i)].gpu_models;
    snap.queue.push_back(std::move(j));
  }
  int64_t placed = 0;
  for (auto _ : state) {
    Decisions d = Decide(snap, {});
    placed += static_cast<int64_t>(d.placements.size());
    benchmark::DoNotOptimize(d);
  }
  state.counters["placements/s"] =
      benchmark::Counter(static_cast<double>(placed), benchmark::Counter::kIsRate);
  state.counters["placed/pass"] =
      benchmark::Counter(static_cast<double>(placed) / static_cast<double>(state.iterations()));
}

BENCHMARK_CAPTURE(BM_Place, first_fit, std::string("first-fit"))->Arg(1000)->Arg(10000)->Arg(50000);
BENCHMARK_CAPTURE(BM_Place, best_fit, std::string("best-fit"))->Arg(1000)->Arg(10000)->Arg(50000);
BENCHMARK_CAPTURE(BM_Place, dot_product, std::string("dot-product"))
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(50000);
BENCHMARK_CAPTURE(BM_Place, fgd, std::string("fgd"))->Arg(1000)->Arg(10000)->Arg(50000);
BENCHMARK(BM_Decide)
    ->Args({1000, 1000})
    ->Args({10000, 10000})
    ->Args({100000, 10000})
    ->Args({10000, 50000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpupool::sched

BENCHMARK_MAIN();
