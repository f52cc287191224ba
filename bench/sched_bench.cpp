// Google Benchmark of the scheduling code.
//
//   BM_Place/<policy>/<gpus>: one placement decision of first-fit, best-fit,
//     dot-product or fgd (Place + Allocate, with a Release so the cluster
//     stays near half full) on a cluster of <gpus> GPUs in 8-GPU nodes of
//     four models, for a stream of mixed requests: fractional shares, single
//     GPUs and multi-GPU tasks, some constrained to a model. Reported as
//     placements per second.
//   BM_Decide/gpus:<G>/pending:<P>: one pass of sched::Scheduler::Decide (the
//     pool's scheduler, scheduler.h) over a generated snapshot (MakeSnapshot:
//     fixed seed; 8-GPU nodes of A100-80GB, V100-32GB and T4-16GB, about
//     half of the GPU capacity held by running jobs; P pending jobs asking for
//     much more than is free: whole 1/2/4/8 GPUs, 250/500-milli shares with
//     memory, gangs of 2-4 nodes, constraints, three priority classes, eight
//     groups with usage). Counters:
//       placements/s  placements per second of Decide (CPU) time
//       placed/pass   placements of one pass (the rest wait)
//       s/job         Decide time per pending job considered (pass / P)
//       free_gpus, asked_gpus, left_gpus  GPUs free before the pass, GPUs the
//                     queue asks for, GPUs still free after the pass
//       peak_B, B/gpu, B/job   heap growth during the first pass of a fresh
//                     Scheduler (its working state plus the Decisions), in
//                     bytes, and that divided by G and by P
//       warm_peak_B   the same for a later pass (scratch buffers reused)
//       alloc_B/pass, allocs/pass  bytes and blocks allocated in a warm pass
//       retained_B    heap still held after the first pass: the Decisions and
//                     any scratch the Scheduler keeps
//       snapshot_B    heap of the snapshot itself (the input, not counted above)
//
// Run: build/bin/gpupool-sched-bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true
//      bench/run_sched_grid.sh for the grid, its JSON and docs/img/sched-cost.svg.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "sched/placement.h"
#include "sched/policies.h"
#include "sched/scheduler.h"

// ---------------------------------------------------------------------------
// Heap accounting for BM_Decide's memory counters: every operator new and
// delete of this binary goes through malloc/free; while `on`, the usable size
// of each block is added or subtracted. Off during timed passes (one branch).
namespace {
struct HeapCount {
  bool on = false;
  int64_t live = 0;  // bytes allocated minus bytes freed since Start()
  int64_t peak = 0;  // highest `live`
  int64_t allocated = 0;
  int64_t allocations = 0;
  void Start() { *this = HeapCount{true}; }
};
HeapCount heap_count;

#if !defined(__SANITIZE_ADDRESS__)
// Out of line, so that g++ does not see free() of an operator-new pointer
// after inlining (-Wmismatched-new-delete).
[[gnu::noinline]] void* AllocateBlock(std::size_t n) { return std::malloc(n == 0 ? 1 : n); }
[[gnu::noinline]] void FreeBlock(void* p) { std::free(p); }
#endif
}  // namespace

// Not under AddressSanitizer: it provides every operator new and delete
// itself, and a partial replacement (the nothrow forms stay its own) makes it
// report blocks freed by the wrong function. The memory counters read zero there.
#if !defined(__SANITIZE_ADDRESS__)
void* operator new(std::size_t n) {
  void* p = AllocateBlock(n);
  if (p == nullptr) throw std::bad_alloc();
  if (heap_count.on) {
    const auto bytes = static_cast<int64_t>(malloc_usable_size(p));
    heap_count.live += bytes;
    heap_count.allocated += bytes;
    ++heap_count.allocations;
    heap_count.peak = std::max(heap_count.peak, heap_count.live);
  }
  return p;
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept {
  if (p != nullptr && heap_count.on) heap_count.live -= static_cast<int64_t>(malloc_usable_size(p));
  FreeBlock(p);
}
void operator delete[](void* p) noexcept { ::operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { ::operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { ::operator delete(p); }
#endif  // !__SANITIZE_ADDRESS__

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

// ---------------------------------------------------------------------------
// BM_Decide: the pool's scheduler on generated snapshots.

struct GpuKind {
  const char* model;
  int64_t memory_mib;
  int32_t cc;
  int64_t node_cpu_milli;
  int64_t node_memory_mib;
};
constexpr GpuKind kGpuKinds[] = {
    {"NVIDIA A100-SXM4-80GB", 81920, 80, 128000, 1024 * 1024},
    {"Tesla V100-SXM2-32GB", 32768, 70, 64000, 512 * 1024},
    {"Tesla T4", 15360, 75, 64000, 256 * 1024},
};
constexpr int kGroups = 8;
constexpr int64_t kMinute = 60 * 1000;
constexpr int64_t kNow = 1'800'000'000'000;  // ms

std::string GroupName(uint64_t i) { return "lab" + std::to_string(i); }

PriorityClass DrawClass(Rng& rng) {
  const uint64_t c = rng.Uniform(10);
  return c == 0 ? PriorityClass::kInteractive
                : (c < 8 ? PriorityClass::kNormal : PriorityClass::kOpportunistic);
}

// Whole-GPU counts and their weights in the pending mix (percent of jobs).
Request DrawRequest(Rng& rng) {
  Request q;
  const uint64_t kind = rng.Uniform(100);
  if (kind < 30) {  // a share with GPU memory
    q.gpu_milli = rng.Uniform(2) == 0 ? 250 : 500;
    q.gpu_memory_mib = 2048 << rng.Uniform(3);  // 2, 4 or 8 GiB
  } else if (kind < 65) {
    q.gpus = 1;
  } else if (kind < 77) {
    q.gpus = 2;
  } else if (kind < 85) {
    q.gpus = 4;
  } else if (kind < 90) {
    q.gpus = 8;
  } else {  // a gang of 2-4 nodes of 4 or 8 GPUs
    q.nodes = static_cast<int32_t>(2 + rng.Uniform(3));
    q.gpus = rng.Uniform(2) == 0 ? 4 : 8;
  }
  const uint64_t constraint = rng.Uniform(100);
  if (constraint < 20) {
    static const char* const kWanted[] = {"A100", "V100", "T4"};
    q.gpu_models = {kWanted[rng.Uniform(3)]};
  } else if (constraint < 30 && q.gpus > 0) {
    q.gpu_memory_mib = 32768;
  } else if (constraint < 40) {
    q.min_compute_capability = rng.Uniform(2) == 0 ? 75 : 80;
  } else if (constraint < 45) {
    q.node_labels["ib"] = "true";
  } else if (constraint < 50) {
    q.preferred_models = {"A100"};
    q.prefer_wait_ms = 30 * kMinute;
  }
  const int64_t per = std::max<int64_t>(q.gpus, 1);
  q.cpu_milli = 4000 * per;
  q.memory_mib = 16384 * per;
  return q;
}

struct GridInput {
  int gpus = 0;
  int pending = 0;
  Snapshot snapshot;
  int64_t snapshot_bytes = 0;
  int64_t free_milli = 0;
  int64_t asked_milli = 0;
};

// A deterministic snapshot of `gpus` GPUs (8 per node) and `pending` jobs.
// Each node is filled by running jobs to 0, 25, 50, 75 or 100% of its GPU
// capacity (half in all), so whole free nodes exist for 8-GPU jobs and gangs
// while most nodes are fragmented.
Snapshot MakeSnapshot(int gpus, int pending) {
  Rng rng(20261122);
  Snapshot s;
  s.now_ms = kNow;
  int64_t next_job = 1;
  for (int i = 0; i < gpus / 8; ++i) {
    const GpuKind& kind = kGpuKinds[rng.Uniform(10) < 4 ? 0 : 1 + rng.Uniform(2)];
    NodeView n;
    n.id = "node-" + std::to_string(i);
    n.name = "host" + std::to_string(i) + ".campus";
    n.ready = rng.Uniform(100) != 0;
    if (rng.Uniform(10) < 3) n.owner_group = GroupName(rng.Uniform(kGroups));
    n.labels["zone"] = "z" + std::to_string(i % 4);
    if (&kind == &kGpuKinds[0] && rng.Uniform(2) == 0) n.labels["ib"] = "true";
    for (int k = 0; k < 8; ++k) {
      GpuView g;
      g.uuid = "GPU-" + std::to_string(i) + "-" + std::to_string(k);
      g.model = kind.model;
      g.memory_mib = g.free_memory_mib = kind.memory_mib;
      g.compute_capability = kind.cc;
      n.gpus.push_back(std::move(g));
    }
    n.cpu_milli_total = n.cpu_milli_free = kind.node_cpu_milli;
    n.memory_mib_total = n.memory_mib_free = kind.node_memory_mib;

    // Running work on it, up to the node's fill level.
    const int64_t target = 2000 * static_cast<int64_t>(rng.Uniform(5));
    int64_t used = 0;
    while (used < target) {
      Holding h;
      h.node_id = n.id;
      if (rng.Uniform(10) < 4) {  // a share, on a partly used GPU first
        const int32_t milli = rng.Uniform(2) == 0 ? 250 : 500;
        const int64_t mem = 2048 << rng.Uniform(3);
        GpuView* at = nullptr;
        for (GpuView& g : n.gpus)
          if (g.free_milli >= milli && g.free_memory_mib >= mem &&
              (at == nullptr || (g.free_milli < 1000 && at->free_milli == 1000)))
            at = &g;
        if (at == nullptr) break;
        at->free_milli -= milli;
        at->free_memory_mib -= mem;
        h.gpu_uuids = {at->uuid};
        h.gpu_milli = milli;
        h.gpu_memory_mib = mem;
        h.cpu_milli = 2000;
        h.memory_mib = 8192;
        used += milli;
      } else {
        int whole = 0;
        for (const GpuView& g : n.gpus) whole += g.free_milli == 1000;
        int want = std::min(1 << rng.Uniform(3), whole);
        want = static_cast<int>(std::min<int64_t>(want, (target - used + 999) / 1000));
        if (want == 0) break;
        for (GpuView& g : n.gpus) {
          if (static_cast<int>(h.gpu_uuids.size()) == want) break;
          if (g.free_milli != 1000) continue;
          g.free_milli = 0;
          g.free_memory_mib = 0;
          h.gpu_uuids.push_back(g.uuid);
        }
        h.gpu_milli = 1000;
        h.cpu_milli = 4000 * want;
        h.memory_mib = 16384 * want;
        used += 1000 * want;
      }
      h.cpu_milli = std::min(h.cpu_milli, n.cpu_milli_free);
      h.memory_mib = std::min(h.memory_mib, n.memory_mib_free);
      n.cpu_milli_free -= h.cpu_milli;
      n.memory_mib_free -= h.memory_mib;
      RunningJob r;
      r.job_id = next_job++;
      r.attempt_id = "a" + std::to_string(r.job_id) + "-1";
      r.group = GroupName(rng.Uniform(kGroups));
      r.priority = DrawClass(rng);
      r.holdings.push_back(std::move(h));
      r.started_ms = kNow - static_cast<int64_t>(rng.Uniform(600)) * kMinute;
      r.last_checkpoint_ms =
          rng.Uniform(3) == 0 ? 0 : kNow - static_cast<int64_t>(rng.Uniform(60)) * kMinute;
      r.preemptible = rng.Uniform(2) == 0;
      if (rng.Uniform(10) == 0)
        r.last_preempted_ms = kNow - static_cast<int64_t>(rng.Uniform(120)) * kMinute;
      if (rng.Uniform(10) < 7)
        r.expected_end_ms = kNow + static_cast<int64_t>(1 + rng.Uniform(600)) * kMinute;
      s.running.push_back(std::move(r));
    }
    s.nodes.push_back(std::move(n));
  }
  next_job = 100'000'000;
  for (int i = 0; i < pending; ++i) {
    PendingJob p;
    p.job_id = next_job++;
    p.group = GroupName(rng.Uniform(kGroups));
    p.priority = DrawClass(rng);
    p.submit_ms = kNow - static_cast<int64_t>(rng.Uniform(24 * 60)) * kMinute;
    if (rng.Uniform(10) < 6)
      p.runtime_limit_ms = static_cast<int64_t>(10 + rng.Uniform(24 * 60)) * kMinute;
    p.front = rng.Uniform(100) == 0;
    p.request = DrawRequest(rng);
    s.pending.push_back(std::move(p));
  }
  for (uint64_t g = 0; g < kGroups; ++g)
    s.usage[GroupName(g)] = {static_cast<int64_t>(rng.Uniform(1'000'000)) * 1'000'000'000,
                             kNow - static_cast<int64_t>(rng.Uniform(600)) * kMinute};
  return s;
}

SchedulerConfig GridConfig(int gpus) {
  SchedulerConfig c;
  for (uint64_t g = 0; g < kGroups; ++g)
    c.groups.push_back({GroupName(g), static_cast<int64_t>(1 + g % 4), int64_t{gpus} * 1000 / 16});
  c.model_speed = {{"A100", 3.0}, {"V100", 1.5}, {"T4", 1.0}};
  return c;  // candidates, reservations, preemption: the defaults
}

// The last snapshot built, kept across repetitions of one grid point.
const GridInput& Input(int gpus, int pending) {
  static std::unique_ptr<GridInput> cached;
  if (cached && cached->gpus == gpus && cached->pending == pending) return *cached;
  cached.reset();
  auto in = std::make_unique<GridInput>();
  in->gpus = gpus;
  in->pending = pending;
  heap_count.Start();
  in->snapshot = MakeSnapshot(gpus, pending);
  heap_count.on = false;
  in->snapshot_bytes = heap_count.live;
  for (const NodeView& n : in->snapshot.nodes)
    for (const GpuView& g : n.gpus) in->free_milli += n.ready ? g.free_milli : 0;
  for (const PendingJob& p : in->snapshot.pending) in->asked_milli += p.request.GpuMilli();
  cached = std::move(in);
  return *cached;
}

void BM_Decide(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const int pending = static_cast<int>(state.range(1));
  const GridInput& in = Input(gpus, pending);

  // Memory, untimed: a fresh Scheduler's first pass, then a warm one. The
  // first also gives the GPUs still free after a pass.
  Scheduler scheduler(GridConfig(gpus));
  heap_count.Start();
  int64_t result_bytes = 0;
  int64_t placed_milli = 0;
  {
    Result<Decisions> d = scheduler.Decide(in.snapshot);
    result_bytes = heap_count.live;
    if (!d.ok()) {
      heap_count.on = false;
      state.SkipWithError(d.status().ToString().c_str());
      return;
    }
    for (const Placement& p : d->placements)
      for (const NodeAssignment& a : p.nodes)
        placed_milli += a.gpu_milli * static_cast<int64_t>(a.gpu_uuids.size());
  }
  const HeapCount cold = heap_count;
  heap_count.Start();
  { Result<Decisions> d = scheduler.Decide(in.snapshot); }
  const HeapCount warm = heap_count;
  heap_count.on = false;

  int64_t placed = 0;
  for (auto _ : state) {
    Result<Decisions> d = scheduler.Decide(in.snapshot);
    placed += static_cast<int64_t>(d->placements.size());
    benchmark::DoNotOptimize(d);
  }
  using benchmark::Counter;
  const double iterations = static_cast<double>(state.iterations());
  state.counters["placements/s"] = Counter(static_cast<double>(placed), Counter::kIsRate);
  state.counters["placed/pass"] = Counter(static_cast<double>(placed) / iterations);
  state.counters["s/job"] =
      Counter(static_cast<double>(pending) * iterations, Counter::kIsRate | Counter::kInvert);
  state.counters["free_gpus"] = Counter(static_cast<double>(in.free_milli) / 1000);
  state.counters["asked_gpus"] = Counter(static_cast<double>(in.asked_milli) / 1000);
  state.counters["left_gpus"] = Counter(static_cast<double>(in.free_milli - placed_milli) / 1000);
  state.counters["peak_B"] =
      Counter(static_cast<double>(cold.peak), Counter::kDefaults, Counter::kIs1024);
  state.counters["B/gpu"] = Counter(static_cast<double>(cold.peak) / gpus);
  state.counters["B/job"] = Counter(static_cast<double>(cold.peak) / pending);
  state.counters["warm_peak_B"] =
      Counter(static_cast<double>(warm.peak), Counter::kDefaults, Counter::kIs1024);
  state.counters["alloc_B/pass"] =
      Counter(static_cast<double>(warm.allocated), Counter::kDefaults, Counter::kIs1024);
  state.counters["allocs/pass"] = Counter(static_cast<double>(warm.allocations));
  state.counters["retained_B"] =
      Counter(static_cast<double>(result_bytes), Counter::kDefaults, Counter::kIs1024);
  state.counters["snapshot_B"] =
      Counter(static_cast<double>(in.snapshot_bytes), Counter::kDefaults, Counter::kIs1024);
}

// One pass that decides a single job: what a pass costs before any
// decision (reading the snapshot, building the indexes), the part that grows
// linearly with the GPUs. BM_Decide minus this, per placement, is the cost of
// a decision itself.
void BM_DecideOne(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  Snapshot snapshot = Input(gpus, 1000).snapshot;
  snapshot.pending.resize(1);
  Scheduler scheduler(GridConfig(gpus));
  for (auto _ : state) {
    Result<Decisions> d = scheduler.Decide(snapshot);
    benchmark::DoNotOptimize(d);
  }
  state.counters["ns/gpu"] =
      benchmark::Counter(static_cast<double>(gpus) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK_CAPTURE(BM_Place, first_fit, std::string("first-fit"))->Arg(1000)->Arg(10000)->Arg(50000);
BENCHMARK_CAPTURE(BM_Place, best_fit, std::string("best-fit"))->Arg(1000)->Arg(10000)->Arg(50000);
BENCHMARK_CAPTURE(BM_Place, dot_product, std::string("dot-product"))
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(50000);
BENCHMARK_CAPTURE(BM_Place, fgd, std::string("fgd"))->Arg(1000)->Arg(10000)->Arg(50000);
BENCHMARK(BM_Decide)
    ->ArgNames({"gpus", "pending"})
    ->ArgsProduct({{1000, 10000, 50000}, {1000, 10000, 100000}})
    // 1,000 nodes (8 GPUs each) x 10,000 pending: issue 21's figure.
    ->Args({8000, 10000})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecideOne)
    ->ArgName("gpus")
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(50000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpupool::sched

BENCHMARK_MAIN();
