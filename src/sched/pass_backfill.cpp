// Backfill reservations (pass.h).
#include "sched/pass.h"

#include <algorithm>

namespace gpupool::sched::detail {

// The earliest time the running work's expected ends leave room for `job`
// (all ranks), holding that room; 0 when no such time is known.
int64_t Reserve(Pass& pass, const PendingJob& job) {
  const Request& r = job.request;
  const std::vector<char> allowed = AllowedShapes(pass, job);
  // Scratch copies of the nodes the replay touches, in the avail view;
  // claimed GPUs belong to an earlier reservation's future.
  struct Scratch {
    NodeS node;
    std::vector<GpuS> gpus;
    bool fits = false;
  };
  std::unordered_map<int, Scratch> scratch;
  int fitting = 0;
  auto get = [&](int n) -> Scratch& {
    auto [it, inserted] = scratch.try_emplace(n);
    if (inserted) {
      const NodeS& node = pass.nodes[static_cast<size_t>(n)];
      it->second.node = node;
      it->second.node.cpu_free -= node.phantom_cpu;
      it->second.node.mem_free -= node.phantom_mem;
      it->second.node.phantom_cpu = it->second.node.phantom_mem = 0;
      for (int g = node.gpu_begin; g < node.gpu_end; ++g) {
        GpuS copy = pass.gpus[static_cast<size_t>(g)];
        copy.free_milli = copy.claimed ? 0 : copy.AvailMilli();
        copy.free_mem = copy.claimed ? 0 : copy.AvailMem();
        copy.phantom_milli = 0;
        copy.phantom_mem = 0;
        it->second.gpus.push_back(copy);
      }
    }
    return it->second;
  };
  auto check = [&](int n) {
    Scratch& sc = get(n);
    const bool f = FitOnState(pass, sc.node, sc.gpus.data(), r, allowed, false).has_value();
    fitting += static_cast<int>(f) - static_cast<int>(sc.fits);
    sc.fits = f;
  };
  if (r.nodes > 1) {  // ranks that fit now, from the index
    std::vector<Choice> now;
    Candidates(pass, r, allowed, false, &now);
    for (const Choice& c : now) check(c.node);
  }
  std::sort(pass.events.begin(), pass.events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.at, a.job_id, a.node) < std::tie(b.at, b.job_id, b.node);
  });
  int64_t at = 0;
  for (const Event& e : pass.events) {
    if (fitting >= r.nodes) break;
    Scratch& sc = get(e.node);
    sc.node.cpu_free += e.holding->cpu_milli;
    sc.node.mem_free += e.holding->memory_mib;
    for (const std::string& uuid : e.holding->gpu_uuids) {
      const int g = GpuIndex(pass, e.node, uuid) - sc.node.gpu_begin;
      GpuS& gpu = sc.gpus[static_cast<size_t>(g)];
      if (gpu.claimed) continue;
      const int64_t cap = sc.node.view->gpus[static_cast<size_t>(g)].memory_mib;
      gpu.free_milli = std::min(kFull, gpu.free_milli + e.holding->gpu_milli);
      gpu.free_mem = std::min(
          cap, gpu.free_mem + (e.holding->gpu_milli >= kFull ? cap : e.holding->gpu_memory_mib));
      if (gpu.free_milli == kFull) gpu.mps_user = -1;
    }
    check(e.node);
    at = std::max(e.at, pass.snap.now_ms + 1);
  }
  if (fitting < r.nodes || at == 0) return 0;
  std::vector<int> chosen;
  for (const auto& [n, sc] : scratch) {
    if (sc.fits) chosen.push_back(n);
  }
  std::sort(chosen.begin(), chosen.end());
  chosen.resize(static_cast<size_t>(r.nodes));
  for (int n : chosen) {
    const Scratch& sc = scratch.at(n);
    HoldFor(pass, n, r, *FitOnState(pass, sc.node, sc.gpus.data(), r, allowed, false), at);
  }
  return at;
}

}  // namespace gpupool::sched::detail
