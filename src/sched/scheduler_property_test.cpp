// Property tests of Scheduler::Decide (scheduler.h): random snapshots of
// small clusters (1-12 nodes of 0-8 GPUs of several models, some not ready,
// some owned by a group, with labels), running work consistent with the
// capacity (whole GPUs, shares, gangs, CPU-only), and pending requests of
// every kind (whole, share, gang, CPU-only; model, preferred model, GPU
// memory, compute capability and label constraints; three priority classes),
// under random configurations. Every Decisions returned is checked against
// the contract:
//   (a) nothing is over-committed (GPU milli and memory, whole GPUs, node CPU
//       and memory);
//   (b) a gang gets exactly `nodes` distinct nodes or nothing, and every node
//       of a placement exactly `gpus` GPUs (one for a share);
//   (c) constraints hold (models, preferred models in their wait, GPU memory,
//       compute capability, node labels, ready nodes);
//   (d) every pending job is placed or waiting, once; waiting jobs are in
//       queue order with positions in 1..n; `unsatisfiable` agrees with an
//       independent check and with UnsatisfiableReason();
//   (e) determinism: the same snapshot, and the snapshot with its nodes,
//       pending and running vectors shuffled, give identical decisions;
//   (f) preemptions name only preemptible, non-interactive attempts outside
//       the anti-thrash window, for a job that waits;
//   (g) max_placements bounds the placements of a pass;
//   (h) without backfill, preemption or a placement limit, no job is left
//       waiting that fits in what the pass left free.
// A failure prints the seed and a dump of the snapshot. To rerun one seed:
//   GPUPOOL_PROP_SEED=<seed> tests/scheduler_property_test
// GPUPOOL_PROP_CASES=<n> changes the number of random snapshots (default 300).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/resources.h"
#include "sched/policies.h"
#include "sched/scheduler.h"

namespace gpupool::sched {
namespace {

struct GpuType {
  const char* model;
  int64_t memory_mib;
  int32_t cc;
};
constexpr GpuType kGpuTypes[] = {
    {"NVIDIA A100-SXM4-80GB", 81920, 80},
    {"NVIDIA A100-PCIE-40GB", 40960, 80},
    {"Tesla V100-SXM2-32GB", 32768, 70},
    {"Tesla T4", 15360, 75},
    {"NVIDIA A10", 23028, 86},
    {"Mystery GPU", 8192, 0},  // compute capability unknown
};
// What users write in gpu_models: "A100" names two types, "A10" only the A10,
// "nvidia" three types, "H100" none.
const char* const kWanted[] = {"A100", "a100-sxm4-80gb", "V100", "T4", "A10", "H100", "nvidia"};
// The last group is not in the configuration.
const char* const kGroups[] = {"vision", "nlp", "robotics", "theory", "guest"};
constexpr int64_t kMinute = 60 * 1000;

struct Case {
  uint64_t seed = 0;
  SchedulerConfig config;
  Snapshot snapshot;
};

// Generation knobs the tests turn.
struct Knobs {
  bool allow_backfill = true;
  bool allow_preemption = true;
  bool allow_limit = true;
};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  int64_t Pick(int64_t n) { return static_cast<int64_t>(rng_.Uniform(static_cast<uint64_t>(n))); }
  bool Chance(int pct) { return Pick(100) < pct; }
  template <typename T, size_t N>
  const T& Of(const T (&a)[N]) {
    return a[Pick(N)];
  }

 private:
  Rng rng_;
};

Case Generate(uint64_t seed, const Knobs& knobs = {}) {
  Gen g(seed);
  Case c;
  c.seed = seed;
  SchedulerConfig& cfg = c.config;
  for (int i = 0; i < 4; ++i) cfg.groups.push_back({kGroups[i], 1 + g.Pick(4), 1000 * g.Pick(6)});
  cfg.half_life_ms = g.Chance(20) ? 0 : 3600 * 1000 * (1 + g.Pick(48));
  cfg.anti_thrash_window_ms = g.Pick(3) * kMinute;
  if (g.Chance(50)) cfg.model_speed = {{"A100", 3.0}, {"V100", 1.5}, {"T4", 0.7}};
  cfg.candidates = static_cast<int32_t>(1 + g.Pick(8));
  cfg.max_reservations = knobs.allow_backfill ? static_cast<int32_t>(g.Pick(4)) : 0;
  cfg.preemption = knobs.allow_preemption && g.Chance(70);
  cfg.max_placements = knobs.allow_limit && g.Chance(25) ? static_cast<int32_t>(1 + g.Pick(5)) : 0;

  Snapshot& s = c.snapshot;
  s.now_ms = 100 * kMinute * 60 + g.Pick(1'000'000);
  const int n_nodes = static_cast<int>(1 + g.Pick(12));
  for (int i = 0; i < n_nodes; ++i) {
    NodeView n;
    n.id = "n" + std::to_string(i);
    n.name = "host-" + std::to_string(i);
    n.ready = !g.Chance(10);
    if (g.Chance(30)) n.owner_group = g.Of(kGroups);
    if (g.Chance(40)) n.labels["zone"] = g.Chance(50) ? "a" : "b";
    if (g.Chance(30)) n.labels["ib"] = "true";
    const GpuType& base = g.Of(kGpuTypes);
    const int n_gpus = static_cast<int>(g.Pick(9));
    for (int k = 0; k < n_gpus; ++k) {
      const GpuType& t = g.Chance(15) ? g.Of(kGpuTypes) : base;
      GpuView gpu;
      gpu.uuid = "GPU-" + n.id + "-" + std::to_string(k);
      gpu.model = t.model;
      gpu.memory_mib = t.memory_mib;
      gpu.compute_capability = t.cc;
      gpu.free_milli = 1000;
      gpu.free_memory_mib = t.memory_mib;
      n.gpus.push_back(std::move(gpu));
    }
    n.cpu_milli_total = n.cpu_milli_free = 1000 * (4 + g.Pick(60));
    n.memory_mib_total = n.memory_mib_free = 1024 * (8 + g.Pick(500));
    s.nodes.push_back(std::move(n));
  }

  // Running work, consistent with the capacity: what a holding takes is
  // subtracted from the node's free figures.
  auto take_cpu_mem = [&](NodeView& n, Holding& h) {
    h.cpu_milli = n.cpu_milli_free > 0 ? g.Pick(n.cpu_milli_free / 2 + 1) : 0;
    h.memory_mib = n.memory_mib_free > 0 ? g.Pick(n.memory_mib_free / 2 + 1) : 0;
    n.cpu_milli_free -= h.cpu_milli;
    n.memory_mib_free -= h.memory_mib;
  };
  auto take_whole = [&](NodeView& n, int want, Holding& h) {
    std::vector<size_t> free;
    for (size_t k = 0; k < n.gpus.size(); ++k)
      if (n.gpus[k].free_milli == 1000) free.push_back(k);
    if (static_cast<int>(free.size()) < want) return false;
    h.node_id = n.id;
    h.gpu_milli = 1000;
    for (int k = 0; k < want; ++k) {
      const size_t at = static_cast<size_t>(g.Pick(static_cast<int64_t>(free.size())));
      GpuView& gpu = n.gpus[free[at]];
      free.erase(free.begin() + static_cast<std::ptrdiff_t>(at));
      gpu.free_milli = 0;
      gpu.free_memory_mib = 0;
      h.gpu_uuids.push_back(gpu.uuid);
    }
    take_cpu_mem(n, h);
    return true;
  };
  const int n_running = static_cast<int>(g.Pick(2 * n_nodes + 4));
  for (int i = 0; i < n_running; ++i) {
    RunningJob r;
    r.job_id = 1000 + i;
    r.attempt_id = "att-" + std::to_string(r.job_id);
    r.group = g.Of(kGroups);
    r.priority = static_cast<PriorityClass>(g.Pick(3));
    NodeView& n = s.nodes[static_cast<size_t>(g.Pick(n_nodes))];
    const int64_t kind = g.Pick(100);
    if (kind < 45) {  // whole GPUs on one node
      Holding h;
      if (!take_whole(n, static_cast<int>(1 + g.Pick(4)), h)) continue;
      r.holdings.push_back(std::move(h));
    } else if (kind < 80) {  // a share of one GPU
      std::vector<size_t> open;
      for (size_t k = 0; k < n.gpus.size(); ++k)
        if (n.gpus[k].free_milli > 1) open.push_back(k);
      if (open.empty()) continue;
      GpuView& gpu = n.gpus[open[static_cast<size_t>(g.Pick(static_cast<int64_t>(open.size())))]];
      Holding h;
      h.node_id = n.id;
      h.gpu_uuids = {gpu.uuid};
      h.gpu_milli = static_cast<int32_t>(1 + g.Pick(std::min<int64_t>(gpu.free_milli - 1, 999)));
      h.gpu_memory_mib = g.Pick(gpu.free_memory_mib + 1);
      gpu.free_milli -= h.gpu_milli;
      gpu.free_memory_mib -= h.gpu_memory_mib;
      take_cpu_mem(n, h);
      r.holdings.push_back(std::move(h));
    } else if (kind < 90) {  // a gang of whole GPUs on 2-3 nodes
      const int want = static_cast<int>(1 + g.Pick(2));
      std::vector<size_t> hosts;
      for (size_t k = 0; k < s.nodes.size(); ++k) {
        int free = 0;
        for (const GpuView& gpu : s.nodes[k].gpus) free += gpu.free_milli == 1000;
        if (free >= want) hosts.push_back(k);
      }
      const size_t ranks = static_cast<size_t>(2 + g.Pick(2));
      if (hosts.size() < ranks) continue;
      for (size_t k = 0; k < ranks; ++k) {
        Holding h;
        take_whole(s.nodes[hosts[k]], want, h);
        r.holdings.push_back(std::move(h));
      }
    } else {  // CPU only
      Holding h;
      h.node_id = n.id;
      take_cpu_mem(n, h);
      r.holdings.push_back(std::move(h));
    }
    r.started_ms = s.now_ms - g.Pick(300 * kMinute);
    r.last_checkpoint_ms = g.Chance(30) ? 0 : r.started_ms + g.Pick(s.now_ms - r.started_ms + 1);
    r.preemptible = g.Chance(60);
    if (g.Chance(25)) r.last_preempted_ms = s.now_ms - g.Pick(4 * kMinute);
    if (g.Chance(60)) r.expected_end_ms = s.now_ms - 10 * kMinute + g.Pick(130 * kMinute);
    s.running.push_back(std::move(r));
  }

  const int n_pending = static_cast<int>(g.Pick(25));
  for (int i = 0; i < n_pending; ++i) {
    PendingJob p;
    p.job_id = 1 + i;
    p.group = g.Of(kGroups);
    const int64_t cls = g.Pick(10);
    p.priority = cls < 2 ? PriorityClass::kInteractive
                         : (cls < 8 ? PriorityClass::kNormal : PriorityClass::kOpportunistic);
    p.submit_ms = s.now_ms - g.Pick(120 * kMinute);
    if (g.Chance(50)) p.runtime_limit_ms = kMinute * (1 + g.Pick(180));
    p.front = g.Chance(10);
    Request& q = p.request;
    const int64_t kind = g.Pick(100);
    static constexpr int32_t kShares[] = {100, 250, 300, 500, 750, 999};
    static constexpr int32_t kWhole[] = {1, 1, 1, 2, 2, 3, 4, 8};
    if (kind < 5) {
      // CPU only.
    } else if (kind < 50) {
      q.gpus = g.Of(kWhole);
    } else if (kind < 80) {
      q.gpu_milli = g.Of(kShares);
      if (g.Chance(70)) q.gpu_memory_mib = 1024 * (1 + g.Pick(24));
    } else if (kind < 95) {
      q.nodes = static_cast<int32_t>(2 + g.Pick(3));
      q.gpus = static_cast<int32_t>(1 + g.Pick(4));
    } else {
      q.nodes = static_cast<int32_t>(2 + g.Pick(2));
      q.gpu_milli = g.Of(kShares);
    }
    const bool uses_gpu = q.gpus > 0 || q.gpu_milli > 0;
    if (uses_gpu && g.Chance(25)) {
      q.gpu_models.push_back(g.Of(kWanted));
      if (g.Chance(30)) q.gpu_models.push_back(g.Of(kWanted));
    }
    if (uses_gpu && g.Chance(15)) {
      q.preferred_models.push_back(g.Of(kWanted));
      q.prefer_wait_ms = g.Pick(120 * kMinute);
    }
    if (q.gpus > 0 && g.Chance(20)) {
      static constexpr int64_t kMem[] = {16384, 32768, 40960, 81920, 100000};
      q.gpu_memory_mib = g.Of(kMem);
    }
    if (uses_gpu && g.Chance(20)) {
      static constexpr int32_t kCc[] = {70, 75, 80, 86, 90};
      q.min_compute_capability = g.Of(kCc);
    }
    if (g.Chance(15)) {
      const int64_t which = g.Pick(3);
      if (which == 0) q.node_labels["zone"] = "a";
      if (which == 1) q.node_labels["ib"] = "true";
      if (which == 2) q.node_labels["zone"] = "c";  // no node has it
    }
    q.cpu_milli = 1000 * g.Pick(16);
    q.memory_mib = 1024 * g.Pick(64);
    s.pending.push_back(std::move(p));
  }
  for (const char* group : kGroups)
    if (g.Chance(70)) s.usage[group] = {g.Pick(1'000'000'000'000), s.now_ms - g.Pick(10'000'000)};
  return c;
}

// ---------------------------------------------------------------------------
// A compact dump, so a failure can be rebuilt by hand or rerun by seed.

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::string Labels(const std::map<std::string, std::string>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ",") + k + "=" + v;
  return "{" + s + "}";
}

std::string Dump(const Case& c) {
  std::ostringstream o;
  const SchedulerConfig& f = c.config;
  const Snapshot& s = c.snapshot;
  o << "seed " << c.seed << " (rerun: GPUPOOL_PROP_SEED=" << c.seed << ")\nconfig:";
  for (const GroupConfig& gc : f.groups)
    o << " " << gc.name << "(w" << gc.weight << ",g" << gc.guaranteed_milli << ")";
  o << " half_life=" << f.half_life_ms << " window=" << f.anti_thrash_window_ms
    << " candidates=" << f.candidates << " reservations=" << f.max_reservations
    << " preemption=" << f.preemption << " max_placements=" << f.max_placements
    << " speeds=" << f.model_speed.size() << "\nnow=" << s.now_ms << " usage:";
  for (const auto& [group, u] : s.usage)
    o << " " << group << "=" << u.milli_ms << "@" << u.as_of_ms;
  o << "\n";
  for (const NodeView& n : s.nodes) {
    o << "node " << n.id << (n.ready ? " ready" : " NOT-READY") << " owner=" << n.owner_group << " "
      << Labels(n.labels) << " cpu " << n.cpu_milli_free << "/" << n.cpu_milli_total << " mem "
      << n.memory_mib_free << "/" << n.memory_mib_total << "\n";
    for (const GpuView& gpu : n.gpus)
      o << "  " << gpu.uuid << " '" << gpu.model << "' " << gpu.memory_mib << "MiB cc"
        << gpu.compute_capability << " free " << gpu.free_milli << "m/" << gpu.free_memory_mib
        << "MiB\n";
  }
  for (const RunningJob& r : s.running) {
    o << "running job " << r.job_id << " " << r.attempt_id << " " << r.group << " "
      << PriorityClassName(r.priority) << (r.preemptible ? " preemptible" : "")
      << " started=" << r.started_ms << " ckpt=" << r.last_checkpoint_ms
      << " last_preempted=" << (r.last_preempted_ms ? std::to_string(*r.last_preempted_ms) : "-")
      << " end=" << r.expected_end_ms << "\n";
    for (const Holding& h : r.holdings)
      o << "  holds " << h.node_id << " [" << Join(h.gpu_uuids) << "] " << h.gpu_milli << "m "
        << h.gpu_memory_mib << "MiB cpu " << h.cpu_milli << " mem " << h.memory_mib << "\n";
  }
  for (const PendingJob& p : s.pending) {
    const Request& q = p.request;
    o << "pending job " << p.job_id << " " << p.group << " " << PriorityClassName(p.priority)
      << " submit=" << p.submit_ms << " limit=" << p.runtime_limit_ms << (p.front ? " front" : "")
      << ": nodes=" << q.nodes << " gpus=" << q.gpus << " milli=" << q.gpu_milli
      << " gpu_mem=" << q.gpu_memory_mib << " cc>=" << q.min_compute_capability << " models=["
      << Join(q.gpu_models) << "] prefer=[" << Join(q.preferred_models) << "]/" << q.prefer_wait_ms
      << " labels=" << Labels(q.node_labels) << " cpu=" << q.cpu_milli << " mem=" << q.memory_mib
      << "\n";
  }
  return o.str();
}

std::string Dump(const Decisions& d) {
  std::ostringstream o;
  for (const Placement& p : d.placements) {
    o << "placed " << p.job_id << (p.backfilled ? " (backfilled)" : "") << ":";
    for (const NodeAssignment& a : p.nodes)
      o << " " << a.node_id << "[" << Join(a.gpu_uuids) << "]x" << a.gpu_milli << "m/"
        << a.gpu_memory_mib << "MiB";
    o << "\n";
  }
  for (const Waiting& w : d.waiting)
    o << "waiting " << w.job_id << " #" << w.position << (w.unsatisfiable ? " UNSAT" : "")
      << " reserved=" << w.reserved_start_ms << " reason='" << WaitReasonText(w.reason) << "'\n";
  for (const Preemption& p : d.preemptions)
    o << "preempt " << p.attempt_id << " (job " << p.job_id << ") for " << p.for_job_id << " "
      << PreemptReasonName(p.reason) << " lost=" << p.lost_work_ms << "\n";
  return o.str();
}

// ---------------------------------------------------------------------------
// The checks.

bool AnyModel(const std::string& gpu_model, const std::vector<std::string>& wanted) {
  return std::any_of(wanted.begin(), wanted.end(),
                     [&](const std::string& w) { return GpuModelMatches(gpu_model, w); });
}

bool LabelsMatch(const NodeView& n, const Request& q) {
  for (const auto& [k, v] : q.node_labels) {
    auto it = n.labels.find(k);
    if (it == n.labels.end() || it->second != v) return false;
  }
  return true;
}

// Only the preferred models are allowed yet.
bool PreferredOnly(const PendingJob& p, int64_t now_ms) {
  return !p.request.preferred_models.empty() && now_ms - p.submit_ms < p.request.prefer_wait_ms;
}

// The GPU's static facts allow it for the request (models, capability, and
// memory for whole GPUs; a share's memory is checked against free memory).
bool GpuAllowed(const GpuView& gpu, const Request& q, bool preferred_only) {
  if (!q.gpu_models.empty() && !AnyModel(gpu.model, q.gpu_models)) return false;
  if (preferred_only && !AnyModel(gpu.model, q.preferred_models)) return false;
  if (q.min_compute_capability > 0 && gpu.compute_capability < q.min_compute_capability)
    return false;
  return gpu.memory_mib >= q.gpu_memory_mib;
}

// Free capacity of the cluster, as the checks track it.
struct Free {
  std::map<std::string, int64_t> cpu, mem;         // by node id
  std::map<std::string, int32_t> milli;            // by GPU uuid
  std::map<std::string, int64_t> gpu_mem;          // by GPU uuid
  std::set<std::string> untouched;                 // GPUs nothing holds or was given
  std::map<std::string, const NodeView*> node_of;  // by GPU uuid
};

Free FreeOf(const Snapshot& s) {
  Free f;
  for (const NodeView& n : s.nodes) {
    f.cpu[n.id] = n.cpu_milli_free;
    f.mem[n.id] = n.memory_mib_free;
    for (const GpuView& gpu : n.gpus) {
      f.milli[gpu.uuid] = gpu.free_milli;
      f.gpu_mem[gpu.uuid] = gpu.free_memory_mib;
      f.node_of[gpu.uuid] = &n;
      if (gpu.free_milli == 1000) f.untouched.insert(gpu.uuid);
    }
  }
  for (const RunningJob& r : s.running)
    for (const Holding& h : r.holdings)
      for (const std::string& uuid : h.gpu_uuids) f.untouched.erase(uuid);
  return f;
}

// Whether `p` fits now on `n` given `f`; CPU-only and share requests need
// one GPU at most.
bool FitsOn(const NodeView& n, const PendingJob& p, const Free& f, int64_t now_ms) {
  const Request& q = p.request;
  if (!n.ready || !LabelsMatch(n, q)) return false;
  if (f.cpu.at(n.id) < q.cpu_milli || f.mem.at(n.id) < q.memory_mib) return false;
  const bool preferred_only = PreferredOnly(p, now_ms);
  int fitting = 0;
  for (const GpuView& gpu : n.gpus) {
    if (q.gpus > 0) {
      fitting += GpuAllowed(gpu, q, preferred_only) && f.untouched.count(gpu.uuid) > 0;
    } else if (q.gpu_milli > 0) {
      Request share = q;
      share.gpu_memory_mib = 0;
      fitting += GpuAllowed(gpu, share, preferred_only) && f.milli.at(gpu.uuid) >= q.gpu_milli &&
                 f.gpu_mem.at(gpu.uuid) >= q.gpu_memory_mib;
    }
  }
  const int need = q.gpus > 0 ? q.gpus : (q.gpu_milli > 0 ? 1 : 0);
  return fitting >= need;
}

// Independent of the scheduler: could some `nodes` ready nodes host the
// request if everything on them were free (any allowed model)?
bool HostableWhenIdle(const Snapshot& s, const Request& q) {
  int hosts = 0;
  for (const NodeView& n : s.nodes) {
    if (!n.ready || !LabelsMatch(n, q)) continue;
    if (n.cpu_milli_total < q.cpu_milli || n.memory_mib_total < q.memory_mib) continue;
    int fitting = 0;
    for (const GpuView& gpu : n.gpus) fitting += GpuAllowed(gpu, q, false);
    const int need = q.gpus > 0 ? q.gpus : (q.gpu_milli > 0 ? 1 : 0);
    hosts += fitting >= need;
  }
  return hosts >= q.nodes;
}

std::string ClassName(PriorityClass c) { return std::string(PriorityClassName(c)); }

// Every check of (a)-(d), (f) and (g); returns what was violated.
std::vector<std::string> Check(const Case& c, const Decisions& d) {
  std::vector<std::string> bad;
  auto fail = [&](const std::string& m) { bad.push_back(m); };
  const Snapshot& s = c.snapshot;
  const SchedulerConfig& cfg = c.config;

  std::map<std::string, const NodeView*> nodes;
  for (const NodeView& n : s.nodes) nodes[n.id] = &n;
  std::map<int64_t, const PendingJob*> pending;
  for (const PendingJob& p : s.pending) pending[p.job_id] = &p;
  Free free = FreeOf(s);

  // (d) Every pending job once, placed or waiting.
  std::map<int64_t, int> seen;
  for (const Placement& p : d.placements) ++seen[p.job_id];
  for (const Waiting& w : d.waiting) ++seen[w.job_id];
  for (const auto& [id, count] : seen) {
    if (!pending.count(id)) fail("job " + std::to_string(id) + " in the decisions is not pending");
    if (count != 1)
      fail("job " + std::to_string(id) + " appears " + std::to_string(count) + " times");
  }
  for (const PendingJob& p : s.pending)
    if (!seen.count(p.job_id)) fail("pending job " + std::to_string(p.job_id) + " is missing");

  // (d) Waiting jobs in queue order: positions rise within 1..n, classes do
  // not go back, and displaced (front) jobs lead their class.
  const int64_t n = static_cast<int64_t>(s.pending.size());
  int64_t last_position = 0;
  const PendingJob* prev = nullptr;
  for (const Waiting& w : d.waiting) {
    const std::string id = "waiting job " + std::to_string(w.job_id);
    if (w.position < 1 || w.position > n)
      fail(id + ": position " + std::to_string(w.position) + " outside 1.." + std::to_string(n));
    if (w.position <= last_position) fail(id + ": position does not rise");
    last_position = w.position;
    if (WaitReasonText(w.reason).empty()) fail(id + ": no reason");
    const PendingJob* p = pending.count(w.job_id) ? pending[w.job_id] : nullptr;
    if (p == nullptr) continue;
    if (prev != nullptr) {
      if (p->priority < prev->priority)
        fail(id + " (" + ClassName(p->priority) + ") after a " + ClassName(prev->priority) +
             " job");
      if (p->priority == prev->priority && p->front && !prev->front)
        fail(id + " is displaced (front) but queued after a job that is not");
    }
    prev = p;
    // `unsatisfiable` against the independent check and UnsatisfiableReason.
    const bool hostable = HostableWhenIdle(s, p->request);
    if (w.unsatisfiable == hostable)
      fail(id + ": unsatisfiable=" + std::to_string(w.unsatisfiable) +
           " but hostable-when-idle=" + std::to_string(hostable));
    const std::optional<WaitReason> why = UnsatisfiableReason(s.nodes, p->request);
    if (!why.has_value() == w.unsatisfiable)
      fail(id + ": unsatisfiable=" + std::to_string(w.unsatisfiable) +
           " but UnsatisfiableReason='" + (why ? WaitReasonText(*why) : "") + "'");
  }

  // (g) The placement limit.
  if (cfg.max_placements > 0 && static_cast<int64_t>(d.placements.size()) > cfg.max_placements)
    fail(std::to_string(d.placements.size()) + " placements, limit " +
         std::to_string(cfg.max_placements));

  // (a), (b), (c) per placement.
  std::map<std::string, int> whole_given;  // uuid -> times given whole
  std::map<std::string, int> shared;       // uuid -> shares placed on it
  for (const Placement& pl : d.placements) {
    const std::string id = "placed job " + std::to_string(pl.job_id);
    if (!pending.count(pl.job_id)) continue;
    const PendingJob& p = *pending[pl.job_id];
    const Request& q = p.request;
    if (!HostableWhenIdle(s, q)) fail(id + " is placed but not hostable even when idle");
    if (const std::optional<WaitReason> why = UnsatisfiableReason(s.nodes, q))
      fail(id + " is placed but UnsatisfiableReason says '" + WaitReasonText(*why) + "'");
    if (static_cast<int64_t>(pl.nodes.size()) != q.nodes)
      fail(id + ": " + std::to_string(pl.nodes.size()) + " nodes, asked " +
           std::to_string(q.nodes));
    std::set<std::string> distinct;
    const bool preferred_only = PreferredOnly(p, s.now_ms);
    for (const NodeAssignment& a : pl.nodes) {
      const std::string at = id + " on " + a.node_id;
      if (!distinct.insert(a.node_id).second) fail(at + ": node used twice by one gang");
      if (!nodes.count(a.node_id)) {
        fail(at + ": unknown node");
        continue;
      }
      const NodeView& node = *nodes[a.node_id];
      if (!node.ready) fail(at + ": node not ready");
      if (!LabelsMatch(node, q)) fail(at + ": labels " + Labels(node.labels) + " do not match");
      free.cpu[a.node_id] -= q.cpu_milli;
      free.mem[a.node_id] -= q.memory_mib;
      const size_t want = q.gpus > 0 ? static_cast<size_t>(q.gpus) : (q.gpu_milli > 0 ? 1 : 0);
      if (a.gpu_uuids.size() != want)
        fail(at + ": " + std::to_string(a.gpu_uuids.size()) + " GPUs, asked " +
             std::to_string(want));
      if (q.gpus > 0 && (a.gpu_milli != 1000 || a.gpu_memory_mib != 0))
        fail(at + ": whole GPUs assigned as " + std::to_string(a.gpu_milli) + "m/" +
             std::to_string(a.gpu_memory_mib) + "MiB");
      if (q.gpus == 0 && q.gpu_milli > 0 &&
          (a.gpu_milli != q.gpu_milli || a.gpu_memory_mib != q.gpu_memory_mib))
        fail(at + ": share assigned as " + std::to_string(a.gpu_milli) + "m/" +
             std::to_string(a.gpu_memory_mib) + "MiB");
      std::set<std::string> uuids(a.gpu_uuids.begin(), a.gpu_uuids.end());
      if (uuids.size() != a.gpu_uuids.size()) fail(at + ": a GPU listed twice");
      for (const std::string& uuid : a.gpu_uuids) {
        const std::string on = at + " GPU " + uuid;
        auto it = free.node_of.find(uuid);
        if (it == free.node_of.end() || it->second != &node) {
          fail(on + ": not a GPU of that node");
          continue;
        }
        const GpuView* gpu = nullptr;
        for (const GpuView& x : node.gpus)
          if (x.uuid == uuid) gpu = &x;
        if (!q.gpu_models.empty() && !AnyModel(gpu->model, q.gpu_models))
          fail(on + ": model '" + gpu->model + "' not in [" + Join(q.gpu_models) + "]");
        if (preferred_only && !AnyModel(gpu->model, q.preferred_models))
          fail(on + ": model '" + gpu->model + "' used before the preferred wait ended");
        if (q.min_compute_capability > 0 && gpu->compute_capability < q.min_compute_capability)
          fail(on + ": compute capability " + std::to_string(gpu->compute_capability));
        if (q.gpus > 0) {
          if (gpu->memory_mib < q.gpu_memory_mib)
            fail(on + ": " + std::to_string(gpu->memory_mib) + " MiB < asked");
          if (!free.untouched.count(uuid)) fail(on + ": given whole while something holds it");
          ++whole_given[uuid];
        } else {
          free.milli[uuid] -= q.gpu_milli;
          free.gpu_mem[uuid] -= q.gpu_memory_mib;
          ++shared[uuid];
        }
      }
    }
  }
  for (const auto& [uuid, times] : whole_given) {
    if (times > 1) fail("GPU " + uuid + " given whole " + std::to_string(times) + " times");
    if (shared.count(uuid)) fail("GPU " + uuid + " given whole and shared in one pass");
  }
  for (const auto& [uuid, count] : shared) {
    if (free.milli[uuid] < 0)
      fail("GPU " + uuid + " over-committed: " + std::to_string(1000 - free.milli[uuid]) +
           " milli");
    if (free.gpu_mem[uuid] < 0)
      fail("GPU " + uuid + " memory over-committed by " + std::to_string(-free.gpu_mem[uuid]) +
           " MiB");
  }
  for (const NodeView& node : s.nodes) {
    if (free.cpu[node.id] < 0)
      fail("node " + node.id + " CPU over-committed by " + std::to_string(-free.cpu[node.id]));
    if (free.mem[node.id] < 0)
      fail("node " + node.id + " memory over-committed by " + std::to_string(-free.mem[node.id]));
  }

  // Backfill: reservations within the configured number, never in the past;
  // a backfilled job ran ahead of some reservation.
  int reservations = 0;
  for (const Waiting& w : d.waiting) {
    if (w.reserved_start_ms == 0) continue;
    ++reservations;
    if (w.reserved_start_ms < s.now_ms)
      fail("waiting job " + std::to_string(w.job_id) + " reserved in the past");
  }
  if (reservations > cfg.max_reservations)
    fail(std::to_string(reservations) + " reservations, limit " +
         std::to_string(cfg.max_reservations));
  // (A preemptor holds the room its victims free, so it counts as one.)
  for (const Placement& pl : d.placements)
    if (pl.backfilled && reservations == 0 && d.preemptions.empty())
      fail("placed job " + std::to_string(pl.job_id) + " backfilled with no reservation");

  // (f) Preemptions.
  std::map<std::string, const RunningJob*> attempts;
  for (const RunningJob& r : s.running) attempts[r.attempt_id] = &r;
  std::set<std::string> victims;
  std::set<int64_t> placed;
  for (const Placement& pl : d.placements) placed.insert(pl.job_id);
  if (!cfg.preemption && !d.preemptions.empty()) fail("preemptions with preemption off");
  for (const Preemption& pr : d.preemptions) {
    const std::string id = "preemption of " + pr.attempt_id;
    if (!victims.insert(pr.attempt_id).second) fail(id + " twice");
    if (!attempts.count(pr.attempt_id)) {
      fail(id + ": not a running attempt");
      continue;
    }
    const RunningJob& r = *attempts[pr.attempt_id];
    if (r.job_id != pr.job_id) fail(id + ": job id " + std::to_string(pr.job_id));
    if (!r.preemptible) fail(id + ": not preemptible");
    if (r.priority == PriorityClass::kInteractive) fail(id + ": interactive work");
    if (r.last_preempted_ms && s.now_ms - *r.last_preempted_ms < cfg.anti_thrash_window_ms)
      fail(id + ": preempted " + std::to_string(s.now_ms - *r.last_preempted_ms) +
           " ms ago, within the anti-thrash window");
    const int64_t since =
        r.last_checkpoint_ms >= r.started_ms ? r.last_checkpoint_ms : r.started_ms;
    if (pr.lost_work_ms != s.now_ms - since)
      fail(id + ": lost_work_ms " + std::to_string(pr.lost_work_ms) + ", expected " +
           std::to_string(s.now_ms - since));
    if (!pending.count(pr.for_job_id)) {
      fail(id + ": for job " + std::to_string(pr.for_job_id) + ", not pending");
      continue;
    }
    const PendingJob& for_job = *pending[pr.for_job_id];
    if (placed.count(pr.for_job_id))
      fail(id + ": its preemptor " + std::to_string(pr.for_job_id) +
           " was placed in the same pass");
    if (pr.reason == PreemptReason::kInteractive && for_job.priority != PriorityClass::kInteractive)
      fail(id + ": reason interactive for a " + ClassName(for_job.priority) + " job");
    if (pr.reason == PreemptReason::kOwner) {
      bool owns = false;
      for (const Holding& h : r.holdings)
        owns |= nodes.count(h.node_id) && nodes[h.node_id]->owner_group == for_job.group &&
                !for_job.group.empty();
      if (!owns)
        fail(id + ": reason owner, but group " + for_job.group + " owns none of its nodes");
    }
  }
  return bad;
}

// ---------------------------------------------------------------------------

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

// The seeds to run: GPUPOOL_PROP_SEED alone, or `base`, base+1, ...
std::vector<uint64_t> Seeds(uint64_t base) {
  if (const char* one = std::getenv("GPUPOOL_PROP_SEED"); one != nullptr && *one != '\0')
    return {std::strtoull(one, nullptr, 10)};
  std::vector<uint64_t> seeds;
  const uint64_t cases = EnvOr("GPUPOOL_PROP_CASES", 300);
  for (uint64_t i = 0; i < cases; ++i) seeds.push_back(base + i);
  return seeds;
}

Result<Decisions> DecideCase(const Case& c) {
  Scheduler scheduler(c.config);
  return scheduler.Decide(c.snapshot);
}

// Reports at most a few failing cases in full, so one bug does not print 300 dumps.
class Reporter {
 public:
  void Report(const Case& c, const std::string& what, const Decisions* d = nullptr) {
    if (++failures_ > 5) return;
    ADD_FAILURE() << what << "\n" << Dump(c) << (d != nullptr ? "decisions:\n" + Dump(*d) : "");
  }
  ~Reporter() {
    if (failures_ > 5) ADD_FAILURE() << failures_ << " failing cases in all (5 shown)";
  }

 private:
  int failures_ = 0;
};

std::string Lines(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 40; ++i) s += "  " + v[i] + "\n";
  if (v.size() > 40) s += "  ... " + std::to_string(v.size() - 40) + " more\n";
  return s;
}

TEST(SchedulerProperty, DecisionsHoldTheContract) {
  Reporter report;
  int placed = 0, gangs = 0, shares = 0, waiting = 0, preempted = 0, reserved = 0;
  for (uint64_t seed : Seeds(1)) {
    const Case c = Generate(seed);
    Result<Decisions> d = DecideCase(c);
    if (!d.ok()) {
      report.Report(c, "Decide failed on a valid snapshot: " + d.status().ToString());
      continue;
    }
    std::vector<std::string> bad = Check(c, *d);
    if (!bad.empty()) report.Report(c, "violations:\n" + Lines(bad), &*d);
    placed += static_cast<int>(d->placements.size());
    for (const Placement& p : d->placements) {
      gangs += p.nodes.size() > 1;
      shares += !p.nodes.empty() && p.nodes[0].gpu_milli < 1000 && !p.nodes[0].gpu_uuids.empty();
    }
    waiting += static_cast<int>(d->waiting.size());
    preempted += static_cast<int>(d->preemptions.size());
    for (const Waiting& w : d->waiting) reserved += w.reserved_start_ms > 0;
  }
  // The generator must exercise every kind of decision, or the properties
  // above say little (checked on the default 300 cases).
  if (std::getenv("GPUPOOL_PROP_SEED") == nullptr && std::getenv("GPUPOOL_PROP_CASES") == nullptr) {
    EXPECT_GT(placed, 300);
    EXPECT_GT(gangs, 10);
    EXPECT_GT(shares, 50);
    EXPECT_GT(waiting, 300);
    EXPECT_GT(preempted, 5);
    EXPECT_GT(reserved, 10);
  }
  std::printf("placed %d (gangs %d, shares %d), waiting %d, preemptions %d, reservations %d\n",
              placed, gangs, shares, waiting, preempted, reserved);
}

void ExpectSame(Reporter& report, const Case& c, const Decisions& a, const Decisions& b,
                const std::string& what) {
  if (a.placements == b.placements && a.waiting == b.waiting && a.preemptions == b.preemptions)
    return;
  report.Report(
      c, what + " changed the decisions.\nfirst run:\n" + Dump(a) + "second run:\n" + Dump(b));
}

TEST(SchedulerProperty, DeterministicAndIndependentOfInputOrder) {
  Reporter report;
  for (uint64_t seed : Seeds(10'001)) {
    const Case c = Generate(seed);
    Result<Decisions> first = DecideCase(c);
    if (!first.ok()) {
      report.Report(c, "Decide failed on a valid snapshot: " + first.status().ToString());
      continue;
    }
    // Twice with one Scheduler (its scratch buffers are reused), and once
    // with a fresh one.
    Scheduler scheduler(c.config);
    Result<Decisions> again = scheduler.Decide(c.snapshot);
    Result<Decisions> third = scheduler.Decide(c.snapshot);
    ASSERT_TRUE(again.ok() && third.ok());
    ExpectSame(report, c, *first, *again, "A second Scheduler");
    ExpectSame(report, c, *first, *third, "Reusing the Scheduler");

    // The nodes, pending and running vectors in another order (ties end in
    // node id, not in the caller's order).
    Case shuffled = c;
    Gen g(seed * 7919 + 1);
    for (size_t i = shuffled.snapshot.nodes.size(); i > 1; --i)
      std::swap(shuffled.snapshot.nodes[i - 1],
                shuffled.snapshot.nodes[static_cast<size_t>(g.Pick(static_cast<int64_t>(i)))]);
    for (size_t i = shuffled.snapshot.pending.size(); i > 1; --i)
      std::swap(shuffled.snapshot.pending[i - 1],
                shuffled.snapshot.pending[static_cast<size_t>(g.Pick(static_cast<int64_t>(i)))]);
    for (size_t i = shuffled.snapshot.running.size(); i > 1; --i)
      std::swap(shuffled.snapshot.running[i - 1],
                shuffled.snapshot.running[static_cast<size_t>(g.Pick(static_cast<int64_t>(i)))]);
    Result<Decisions> other = DecideCase(shuffled);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    ExpectSame(report, c, *first, *other, "Shuffling nodes, pending and running");
  }
}

// (h) Work conservation: a pass only takes capacity, so a job that fits in
// what is left at the end fitted when its turn came. Without backfill
// reservations, preemption or a placement limit, nothing may stop it then.
TEST(SchedulerProperty, NoJobWaitsThatFitsInWhatIsLeft) {
  Reporter report;
  Knobs knobs;
  knobs.allow_backfill = knobs.allow_preemption = knobs.allow_limit = false;
  for (uint64_t seed : Seeds(20'001)) {
    const Case c = Generate(seed, knobs);
    Result<Decisions> d = DecideCase(c);
    if (!d.ok()) {
      report.Report(c, "Decide failed on a valid snapshot: " + d.status().ToString());
      continue;
    }
    const Snapshot& s = c.snapshot;
    std::vector<std::string> bad = Check(c, *d);
    // What the pass left free.
    Free left = FreeOf(s);
    std::map<int64_t, const PendingJob*> pending;
    for (const PendingJob& p : s.pending) pending[p.job_id] = &p;
    for (const Placement& pl : d->placements) {
      const Request& q = pending.at(pl.job_id)->request;
      for (const NodeAssignment& a : pl.nodes) {
        left.cpu[a.node_id] -= q.cpu_milli;
        left.mem[a.node_id] -= q.memory_mib;
        for (const std::string& uuid : a.gpu_uuids) {
          left.untouched.erase(uuid);
          left.milli[uuid] -= a.gpu_milli;
          left.gpu_mem[uuid] -= q.gpus > 0 ? left.gpu_mem[uuid] : q.gpu_memory_mib;
        }
      }
    }
    for (const Waiting& w : d->waiting) {
      const PendingJob& p = *pending.at(w.job_id);
      std::vector<std::string> hosts;
      for (const NodeView& n : s.nodes)
        if (FitsOn(n, p, left, s.now_ms)) hosts.push_back(n.id);
      if (static_cast<int64_t>(hosts.size()) >= p.request.nodes)
        bad.push_back("job " + std::to_string(w.job_id) + " waits ('" + WaitReasonText(w.reason) +
                      "') but fits now on [" + Join(hosts) + "]");
    }
    if (!bad.empty()) report.Report(c, "violations:\n" + Lines(bad), &*d);
  }
}

// (g) A limit of k placements per pass places at most k. When nothing else
// intervenes (no reservations, no preemption), the pass is the unlimited one
// cut short: min(k, all) placements, each one as the unlimited pass made it.
TEST(SchedulerProperty, PlacementLimitCutsThePassShort) {
  Reporter report;
  Knobs knobs;
  knobs.allow_backfill = knobs.allow_preemption = knobs.allow_limit = false;
  for (uint64_t seed : Seeds(30'001)) {
    Case c = Generate(seed, knobs);
    Result<Decisions> all = DecideCase(c);
    if (!all.ok()) {
      report.Report(c, "Decide failed on a valid snapshot: " + all.status().ToString());
      continue;
    }
    const int32_t k = static_cast<int32_t>(1 + seed % 4);
    c.config.max_placements = k;
    Result<Decisions> some = DecideCase(c);
    ASSERT_TRUE(some.ok()) << some.status().ToString();
    std::vector<std::string> bad = Check(c, *some);
    const size_t expect = std::min<size_t>(all->placements.size(), static_cast<size_t>(k));
    if (some->placements.size() != expect)
      bad.push_back("limit " + std::to_string(k) + ": " + std::to_string(some->placements.size()) +
                    " placements, expected " + std::to_string(expect));
    for (const Placement& p : some->placements)
      if (std::find(all->placements.begin(), all->placements.end(), p) == all->placements.end())
        bad.push_back("limit " + std::to_string(k) + ": job " + std::to_string(p.job_id) +
                      " placed otherwise than in the unlimited pass");
    if (!bad.empty()) report.Report(c, "violations:\n" + Lines(bad), &*some);
  }
}

// `text` contains `token` not as part of a longer name or number.
bool NamesToken(const std::string& text, const std::string& token) {
  auto part = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (size_t at = text.find(token); at != std::string::npos; at = text.find(token, at + 1)) {
    const size_t end = at + token.size();
    if ((at == 0 || !part(text[at - 1])) && (end == text.size() || !part(text[end]))) return true;
  }
  return false;
}

// Inconsistent snapshots are refused with InvalidArgument naming the item.
TEST(SchedulerProperty, InconsistentSnapshotsAreRefused) {
  Reporter report;
  for (uint64_t seed : Seeds(40'001)) {
    Case c = Generate(seed);
    Snapshot& s = c.snapshot;
    Gen g(seed);
    std::string name;  // what the error must mention
    std::string what;
    const int64_t kind = g.Pick(6);
    if (kind == 0) {
      NodeView twin;  // no GPUs and nothing runs on it: only its id is wrong
      twin.id = s.nodes.front().id;
      twin.name = "twin";
      s.nodes.push_back(twin);
      name = twin.id, what = "duplicate node id";
    } else if (kind == 1 && !s.pending.empty()) {
      s.pending.push_back(s.pending.front());
      name = std::to_string(s.pending.front().job_id), what = "duplicate job id";
    } else if (kind == 2 && !s.running.empty() && !s.running.front().holdings.empty()) {
      s.running.front().holdings.front().node_id = "nowhere";
      name = "nowhere", what = "holding on an unknown node";
    } else if (kind == 3 && !s.pending.empty()) {
      s.pending.front().request.nodes = 0;
      name = std::to_string(s.pending.front().job_id), what = "nodes < 1";
    } else if (kind == 4 && !s.pending.empty()) {
      s.pending.front().request.gpus = 0;
      s.pending.front().request.gpu_milli = 1000;
      name = std::to_string(s.pending.front().job_id), what = "share of 1000 milli";
    } else if (kind == 5 && !s.pending.empty()) {
      s.pending.front().request.gpus = 1;
      s.pending.front().request.gpu_milli = 500;
      name = std::to_string(s.pending.front().job_id), what = "both gpus and gpu_milli";
    } else {
      continue;
    }
    Result<Decisions> d = DecideCase(c);
    if (d.ok()) {
      report.Report(c, what + " was accepted", &*d);
    } else if (d.status().code() != StatusCode::kInvalidArgument ||
               !NamesToken(d.status().message(), name)) {
      report.Report(c, what + ": expected InvalidArgument naming '" + name + "', got " +
                           d.status().ToString());
    }
  }
}

}  // namespace
}  // namespace gpupool::sched
