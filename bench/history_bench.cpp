// gpupool-history-bench: the telemetry history's cost (store/history_store.h,
// telemetry/downsample.h; docs/performance.md, "Telemetry history").
//
//   BM_Record/gpus:N/hours:H
//     N GPUs (8 a node) read every 5 s for H hours through the Downsampler
//     (default tiers: 10 s kept a day, 5 min kept 30 days), flushed and
//     written every 10 s, as the server does. One iteration is the whole
//     run on a fresh store. Counters: bytes_per_gpu_day (the database's
//     size in use, scaled to a day), ms_per_flush (one 10 s write of N GPUs).
//   BM_QueryWeek/gpus:N
//     A store holding a week of 5 min points for N GPUs; one iteration is
//     the query of one node (8 GPUs) over the week at the 5 min step, as
//     the dashboard's week view asks. Counter: points.
//
// Run: build/bin/gpupool-history-bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true
// The smoke test (history_bench_smoke) runs the small sets.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "store/history_store.h"
#include "telemetry/downsample.h"

namespace gpupool {
namespace {

using telemetry::Downsampler;

constexpr int64_t kDayMs = 86'400'000;
constexpr int64_t kT0 = 1'700'006'400'000;  // midnight UTC

std::string NodeOf(int g) {
  char name[32];
  std::snprintf(name, sizeof name, "lab-node-%04d", g / 8);
  return name;
}

// A deterministic wobble, so that means are not whole numbers.
int Wobble(int64_t t, int g, int m) { return static_cast<int>((t / 1000 * 7 + g * 13) % m); }

std::filesystem::path FreshDir(const char* what) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("gpupool-history-bench-") + what + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<HistoryStore> OpenStore(const std::filesystem::path& dir) {
  auto store = HistoryStore::Open((dir / "telemetry.db").string(), HistoryOptions{});
  if (!store.ok()) {
    std::cerr << "gpupool-history-bench: " << store.status().ToString() << "\n";
    std::exit(1);
  }
  return *std::move(store);
}

void BM_Record(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const int64_t span = state.range(1) * 3'600'000;
  double bytes_per_gpu_day = 0, ms_per_flush = 0;
  for (auto _ : state) {
    const auto dir = FreshDir("record");
    auto store = OpenStore(dir);
    Downsampler d(telemetry::DefaultTiers());
    int64_t flushes = 0;
    auto start = std::chrono::steady_clock::now();
    for (int64_t t = kT0; t < kT0 + span; t += 5'000) {
      for (int g = 0; g < gpus; ++g) {
        telemetry::GpuReading r;
        r.node = NodeOf(g);
        r.gpu = g % 8;
        r.utilization_percent = Wobble(t, g, 101);
        r.memory_used_mib = 20'000 + Wobble(t, g, 60'000);
        r.memory_total_mib = 81'559;
        r.temperature_c = 40 + Wobble(t, g, 40);
        r.power_mw = 100'000 + Wobble(t, g, 600) * 1000 + Wobble(t, g, 997);
        r.energy_mj = (t - kT0) * 300 + g;
        r.allocated_milli = (g % 4) * 250;
        d.AddGpu(t, r);
      }
      d.AddPool(t, {.gpus = gpus,
                    .gpus_reporting = gpus,
                    .allocated_gpus = gpus * 0.375,
                    .utilization_sum = gpus * 0.41,
                    .power_w = gpus * 300.5,
                    .jobs_running = 12,
                    .jobs_pending = Wobble(t, 1, 9),
                    .nodes_connected = (gpus + 7) / 8});
      if ((t + 5'000) % 10'000 == 0) {
        auto flushed = d.Flush(t + 5'000);
        if (flushed.empty()) continue;
        if (Status s = store->Write(flushed); !s.ok()) {
          state.SkipWithError(s.ToString().c_str());
          return;
        }
        ++flushes;
      }
    }
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    auto bytes = store->Bytes();
    if (!bytes.ok()) {
      state.SkipWithError(bytes.status().ToString().c_str());
      return;
    }
    bytes_per_gpu_day = static_cast<double>(*bytes) / gpus * (static_cast<double>(kDayMs) / span);
    ms_per_flush = took.count() / std::max<int64_t>(1, flushes);
    store.reset();
    std::filesystem::remove_all(dir);
  }
  state.counters["bytes_per_gpu_day"] = bytes_per_gpu_day;
  state.counters["ms_per_flush"] = ms_per_flush;
}
BENCHMARK(BM_Record)
    ->ArgNames({"gpus", "hours"})
    ->Args({8, 1})  // the smoke test's
    ->Args({100, 24})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

void BM_QueryWeek(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  static std::filesystem::path dir;
  static std::unique_ptr<HistoryStore> store;
  static int made_for = 0;
  const int64_t now = kT0 + 7 * kDayMs;
  if (!store || made_for != gpus) {
    store.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir = FreshDir("query");
    store = OpenStore(dir);
    for (int64_t day = 0; day < 7; ++day) {
      Downsampler::Flushed f;
      for (int64_t t = kT0 + day * kDayMs; t < kT0 + (day + 1) * kDayMs; t += 300'000) {
        for (int g = 0; g < gpus; ++g) {
          telemetry::GpuPoint p;
          p.t_ms = t;
          p.samples = 60;
          p.utilization = Wobble(t, g, 101) / 100.3;
          p.utilization_max = 1;
          p.memory_used_mib = 20'000 + Wobble(t, g, 60'000) + 0.25;
          p.memory_used_max_mib = 80'000;
          p.memory_total_mib = 81'559;
          p.temperature_c = 40 + Wobble(t, g, 40) + 0.5;
          p.power_w = 100 + Wobble(t, g, 600) + 0.125;
          p.energy_j = static_cast<double>(t - kT0) * 0.3;
          p.allocated = (g % 4) * 0.25;
          f.gpus.push_back({1, NodeOf(g), g % 8, p});
        }
      }
      if (Status s = store->Write(f); !s.ok()) {
        state.SkipWithError(s.ToString().c_str());
        return;
      }
    }
    made_for = gpus;
  }
  size_t points = 0;
  for (auto _ : state) {
    auto series = store->Gpus(NodeOf(0), {}, now - 7 * kDayMs, now, 300'000);
    if (!series.ok()) {
      state.SkipWithError(series.status().ToString().c_str());
      return;
    }
    points = 0;
    for (const GpuSeries& s : *series) points += s.points.size();
  }
  state.counters["points"] = static_cast<double>(points);
}
BENCHMARK(BM_QueryWeek)
    ->ArgNames({"gpus"})
    ->Arg(8)  // the smoke test's
    ->Arg(100)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpupool

BENCHMARK_MAIN();
