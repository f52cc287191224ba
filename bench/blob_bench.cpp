// Google Benchmark of the blob store's content-defined chunker
// (src/blob/chunker.h).
//
//   BM_ChunkLengths/avg_kib:<A>: blob::ChunkLengths over 256 MiB of random
//     bytes (generated once, fixed seed) with avg_size = A KiB, min_size =
//     A / 4 and max_size = 4 A (the defaults for A = 64). Reported as bytes
//     per second of CPU time (the figure of the "Resilient execution" issue:
//     >= 1 GB/s on one core). Counters:
//       chunks      chunks of the 256 MiB
//       mean_B      mean chunk length, bytes
//
// Run: build/bin/gpupool-blob-bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "blob/chunker.h"

namespace {

constexpr size_t kDataSize = size_t{256} << 20;

const std::vector<uint8_t>& RandomData() {
  static const std::vector<uint8_t> data = [] {
    std::vector<uint8_t> out(kDataSize);
    std::mt19937_64 rng(20261122);
    for (size_t i = 0; i < out.size(); i += 8) {
      const uint64_t v = rng();
      for (size_t b = 0; b < 8; ++b) out[i + b] = static_cast<uint8_t>(v >> (8 * b));
    }
    return out;
  }();
  return data;
}

void BM_ChunkLengths(benchmark::State& state) {
  const size_t avg = static_cast<size_t>(state.range(0)) * 1024;
  const gpupool::blob::ChunkerOptions options{
      .min_size = avg / 4, .avg_size = avg, .max_size = avg * 4};
  if (auto s = gpupool::blob::ValidateChunkerOptions(options); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  const std::vector<uint8_t>& data = RandomData();
  size_t chunks = 0;
  for (auto _ : state) {
    std::vector<size_t> lengths = gpupool::blob::ChunkLengths(data, options);
    chunks = lengths.size();
    benchmark::DoNotOptimize(lengths.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(data.size()));
  state.counters["chunks"] = static_cast<double>(chunks);
  state.counters["mean_B"] = chunks ? static_cast<double>(data.size()) / chunks : 0.0;
}
BENCHMARK(BM_ChunkLengths)
    ->ArgName("avg_kib")
    ->Arg(16)
    ->Arg(64)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
