// The free-capacity ledger of a pass and its index (pass.h).
#include "sched/pass.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace gpupool::sched::detail {

void Index(Pass& pass, int n) {
  NodeS& node = pass.nodes[static_cast<size_t>(n)];
  pass.frag_before[static_cast<size_t>(n)] = std::numeric_limits<double>::quiet_NaN();
  if (!node.view->ready || !pass.indexed) return;
  node.indexed.clear();
  for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
    GpuS& gpu = pass.gpus[static_cast<size_t>(g)];
    const int32_t avail = gpu.AvailMilli();
    if (avail > 0 && avail < kFull) {
      pass.partial[static_cast<size_t>(gpu.shape)].emplace(avail, n, g);
      gpu.indexed_milli = avail;
    }
    if (avail == kFull) {
      auto it = std::find_if(node.indexed.begin(), node.indexed.end(),
                             [&](const auto& p) { return p.first == gpu.shape; });
      if (it == node.indexed.end()) {
        node.indexed.emplace_back(gpu.shape, 1);
      } else {
        ++it->second;
      }
    }
  }
  for (const auto& [shape, count] : node.indexed) {
    std::vector<int>& bucket = pass.whole[static_cast<size_t>(shape)][static_cast<size_t>(count)];
    bucket.insert(std::lower_bound(bucket.begin(), bucket.end(), n), n);
  }
}

void Unindex(Pass& pass, int n) {
  NodeS& node = pass.nodes[static_cast<size_t>(n)];
  for (const auto& [shape, count] : node.indexed) {
    std::vector<int>& bucket = pass.whole[static_cast<size_t>(shape)][static_cast<size_t>(count)];
    bucket.erase(std::lower_bound(bucket.begin(), bucket.end(), n));
  }
  node.indexed.clear();
  for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
    GpuS& gpu = pass.gpus[static_cast<size_t>(g)];
    if (gpu.indexed_milli >= 0) {
      pass.partial[static_cast<size_t>(gpu.shape)].erase({gpu.indexed_milli, n, g});
      gpu.indexed_milli = -1;
    }
  }
}

// Takes `r` on node n (GPUs `gpus`). `actual`: take reserved resources
// first (the job ends before the reservation starts).
void Take(Pass& pass, int n, const Request& r, const std::vector<int>& gpus, bool actual) {
  Unindex(pass, n);
  NodeS& node = pass.nodes[static_cast<size_t>(n)];
  auto take = [&](int64_t amount, int64_t& free, auto& phantom) {
    if (actual) {
      const auto from_phantom = std::min<int64_t>(phantom, amount);
      phantom = static_cast<std::remove_reference_t<decltype(phantom)>>(phantom - from_phantom);
    }
    free -= amount;
  };
  take(r.cpu_milli, node.cpu_free, node.phantom_cpu);
  take(r.memory_mib, node.mem_free, node.phantom_mem);
  for (int g : gpus) {
    GpuS& gpu = pass.gpus[static_cast<size_t>(g)];
    const int32_t milli = r.gpus > 0 ? kFull : r.gpu_milli;
    const int64_t mem = r.gpus > 0 ? gpu.free_mem : r.gpu_memory_mib;
    int64_t free_milli = gpu.free_milli;
    take(milli, free_milli, gpu.phantom_milli);
    gpu.free_milli = static_cast<int32_t>(free_milli);
    take(mem, gpu.free_mem, gpu.phantom_mem);
    if (gpu.mps && r.gpus == 0) gpu.mps_user = InternUser(pass, r.user);
  }
  Index(pass, n);
}

Saved Save(const Pass& pass, int n) {
  const NodeS& node = pass.nodes[static_cast<size_t>(n)];
  return {n, node,
          std::vector<GpuS>(pass.gpus.begin() + node.gpu_begin, pass.gpus.begin() + node.gpu_end)};
}

void Restore(Pass& pass, const Saved& s) {
  Unindex(pass, s.node);
  NodeS& node = pass.nodes[static_cast<size_t>(s.node)];
  node = s.state;
  node.indexed.clear();
  std::copy(s.gpus.begin(), s.gpus.end(), pass.gpus.begin() + node.gpu_begin);
  for (int g = node.gpu_begin; g < node.gpu_end; ++g)
    pass.gpus[static_cast<size_t>(g)].indexed_milli = -1;
  Index(pass, s.node);
}

// Holds what is avail now of the GPUs `picked` on node n (and CPU and
// memory) for a job that will start there at `at_ms`.
void HoldFor(Pass& pass, int n, const Request& r, const std::vector<int>& picked, int64_t at_ms) {
  Unindex(pass, n);
  NodeS& node = pass.nodes[static_cast<size_t>(n)];
  node.phantom_cpu += std::clamp<int64_t>(node.cpu_free - node.phantom_cpu, 0, r.cpu_milli);
  node.phantom_mem += std::clamp<int64_t>(node.mem_free - node.phantom_mem, 0, r.memory_mib);
  for (int g : picked) {
    GpuS& gpu = pass.gpus[static_cast<size_t>(g)];
    const int32_t want = r.gpus > 0 ? kFull : r.gpu_milli;
    const int64_t want_mem = r.gpus > 0 ? gpu.free_mem : r.gpu_memory_mib;
    gpu.phantom_milli += std::clamp<int32_t>(gpu.AvailMilli(), 0, want);
    gpu.phantom_mem += std::clamp<int64_t>(gpu.AvailMem(), 0, want_mem);
    gpu.claimed = true;
  }
  Index(pass, n);
  if (!node.reserved) {
    node.reserved = true;
    pass.reserved_nodes.push_back(n);
  }
  pass.earliest_reservation_ms = std::min(pass.earliest_reservation_ms, at_ms);
}

}  // namespace gpupool::sched::detail
