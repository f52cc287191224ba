// gpupool-pass-bench: the server's scheduling pass as the server runs it
// (server::Pool::Schedule on a real SQLite store), not the scheduler alone
// (gpupool-sched-bench's BM_Decide). Issue 21's figure: a pass at 1,000
// nodes x 10,000 pending that does not grow with the pool's history.
//
//   BM_SchedulePass/nodes:N/pending:P/history:H
//     N nodes of 8 GPUs (agent hellos), every GPU held by a running 1-GPU
//     job (8N live attempts), P pending 1-GPU jobs that wait (there is no
//     room), and H finished jobs in the store (each submitted, placed, run
//     and exited through the Pool, as the server would). One iteration is
//     one Pool::Schedule(): it reads the queue, the live jobs and attempts,
//     the nodes and the groups' usage from the store, builds the snapshot,
//     runs Decide and writes what changed (the waiting reasons, on the
//     first pass only). Counters: pending, live (attempts), history.
//
// Setup (bench/busy_pool.h; once per argument set, kept across
// repetitions; not timed) goes through the Pool: H + 8N submissions, their
// placements and reports, then P submissions.
//
// Run: build/bin/gpupool-pass-bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true
// The smoke test (pass_bench_smoke) runs the smallest set briefly.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "busy_pool.h"

namespace gpupool::server {
namespace {

void BM_SchedulePass(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int pending = static_cast<int>(state.range(1));
  const int history = static_cast<int>(state.range(2));
  // One fixture per argument set, kept across repetitions (its setup is
  // the slow part).
  static std::unique_ptr<BusyPool> f;
  static std::vector<int64_t> made_for;
  if (!f || made_for != std::vector<int64_t>{nodes, pending, history}) {
    f.reset();
    f = std::make_unique<BusyPool>(nodes, pending, history);
    made_for = {nodes, pending, history};
  }
  for (auto _ : state) {
    auto placed = f->pool().Schedule();
    if (!placed.ok()) Die("schedule", placed.status());
    if (*placed != 0) {
      state.SkipWithError("the pass placed a job: there should be no room");
      break;
    }
  }
  state.counters["pending"] = pending;
  state.counters["live"] = nodes * kGpusPerNode;
  state.counters["history"] = history;
}
BENCHMARK(BM_SchedulePass)
    ->ArgNames({"nodes", "pending", "history"})
    ->Args({10, 100, 100})  // the smoke test's
    ->Args({1000, 10000, 0})
    ->Args({1000, 10000, 16000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpupool::server

BENCHMARK_MAIN();
