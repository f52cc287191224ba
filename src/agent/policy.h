// The provider's policy: what of this machine is lent, when, to whom, and
// for how long. Pure and deterministic: the time and the GPUs' state are
// passed in; the agent (agent/agent.h) enforces what these functions say,
// whether or not the server agrees.
//
//   policy:
//     gpus: [0, GPU-8a3b...]       # lent GPUs by index or UUID (absent: all)
//     gpu_memory: 40GiB            # lent per GPU, or "50%" (absent: all)
//     sharing: interposer          # shares of a GPU: none (whole GPUs
//                                  # only), interposer (libgpushare.so) or
//                                  # mps (NVIDIA MPS, agent/mps.h); absent:
//                                  # interposer where the agent has the
//                                  # library (EffectiveSharing)
//     # fractional: false          # the older spelling: false = sharing:
//                                  # none, true = the default; not with sharing
//     windows:                     # absent: always
//       timezone: Europe/Berlin    # an IANA zone (absent: UTC)
//       weekly:
//         - {days: [mon, tue, wed, thu, fri], from: "19:00", to: "08:00"}
//         - {days: [sat, sun]}     # the whole day
//     idle_only: {max_utilization: 10, for: 10m}
//     users: {allow: [alice], deny: [mallory]}
//     groups: {allow: [vision], deny: []}
//     max_runtime: 24h             # a job must say it ends within this
//     reclaim_grace: 60s           # SIGTERM to SIGKILL when taking a GPU back
//     allow_host_network: false    # jobs may ask for `network: host` (the
//                                  # machine's own network, its loopback too)
//     max_job_output: 100MiB       # lowers the server's output limit per task
//
// A weekly entry that ends at or before its start ("19:00" to "08:00")
// runs past midnight into the next day. Local times are the zone's wall
// clock: a window edge that falls into a DST gap opens at the first valid
// minute after it; one that is ambiguous takes the first occurrence.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/node.h"
#include "model/resources.h"

namespace gpupool::agent {

// One weekly window: on each of `days` (0 = Monday .. 6 = Sunday), from
// `from_minute` to `to_minute` of the day (0..1440; to <= from: into the
// next day).
struct WeeklyWindow {
  std::set<int> days;
  int from_minute = 0;
  int to_minute = 1440;
  friend bool operator==(const WeeklyWindow&, const WeeklyWindow&) = default;
};

struct ProviderPolicy {
  std::vector<std::string> gpus;      // indexes ("0") or UUIDs; empty: all
  int64_t gpu_memory_mib = 0;         // lent per GPU; 0: all (or gpu_memory_percent)
  int gpu_memory_percent = 0;         // lent per GPU as a share of it; 0: not used
  std::optional<GpuSharing> sharing;  // absent: the default (EffectiveSharing)
  std::string timezone = "UTC";
  std::vector<WeeklyWindow> windows;  // empty: always open
  // Idle-only lending: lent only while no process outside the pool uses the
  // GPU and its utilization stayed at or under `idle_max_utilization` for
  // `idle_for_ms`. Off when idle_for_ms is 0.
  int idle_max_utilization = 10;
  int64_t idle_for_ms = 0;
  std::set<std::string> allow_users, deny_users;
  std::set<std::string> allow_groups, deny_groups;
  int64_t max_runtime_ms = 0;  // 0: any
  int64_t reclaim_grace_ms = 30'000;
  bool allow_host_network = false;  // jobs may ask for `network: host`
  // The output a task may leave here (model/job_output.h); lowers the
  // server's limit, never raises it. 0: the server's.
  int64_t max_job_output_bytes = 0;
  friend bool operator==(const ProviderPolicy&, const ProviderPolicy&) = default;
};

// Parses the `policy:` mapping of the agent's config (already read as
// JSON); errors are InvalidArgument naming "policy.<field>". An unknown
// time zone is an error here, not at run time.
Result<ProviderPolicy> ParseProviderPolicy(const nlohmann::json& j);

// The policy as its YAML would say it, for `gpupool agent status`.
nlohmann::json PolicyToJson(const ProviderPolicy& policy);

// How this node shares GPUs under `policy`: none when the agent has no
// usable libgpushare.so (`interposer_usable` false: a share must never run
// without its memory cap), else the policy's sharing, interposer when it
// names none.
GpuSharing EffectiveSharing(const ProviderPolicy& policy, bool interposer_usable);

// Whether the windows are open at `now_ms` (ms since the epoch), and when
// that next changes (ms; nullopt when it never does, e.g. no windows).
struct WindowState {
  bool open = true;
  std::optional<int64_t> next_change_ms;
};
WindowState EvaluateWindows(const ProviderPolicy& policy, int64_t now_ms);

// Whether the GPU is one the policy lends.
bool Lends(const ProviderPolicy& policy, const GpuInfo& gpu);

// The GPU memory the policy lends of `gpu`, in MiB.
int64_t LentMemoryMib(const ProviderPolicy& policy, const GpuInfo& gpu);

// Idle-only lending, per GPU: fed every telemetry sample, it says which
// GPUs may be lent and why the others may not; a GPU the pool holds that
// stops being lendable is taken back (agent/lending.h). A GPU becomes
// lendable once it had no foreign process and
// utilization <= the limit for the whole `idle_for_ms`; it stops being
// lendable the moment a foreign process appears (reclaim) or the
// utilization goes over the limit while no pool task runs on it. A GPU that
// holds pool work stays lendable until a foreign process appears, however
// busy the pool keeps it (and also when the agent restarted in the middle).
class IdleTracker {
 public:
  explicit IdleTracker(const ProviderPolicy& policy)
      : max_utilization_(policy.idle_max_utilization), idle_for_ms_(policy.idle_for_ms) {}

  struct Verdict {
    std::set<std::string> lendable;              // UUIDs
    std::map<std::string, std::string> why_not;  // UUID -> why it is not lendable
  };
  // `pool_pids`: the processes the pool's tasks run (theirs, not foreign);
  // `pool_gpus`: the GPUs pool tasks hold.
  Verdict Observe(int64_t now_ms, const std::vector<GpuTelemetry>& telemetry,
                  const std::set<int64_t>& pool_pids, const std::set<std::string>& pool_gpus);

 private:
  struct State {
    int64_t idle_since_ms = -1;  // -1: not idle now
  };
  int max_utilization_;
  int64_t idle_for_ms_;
  std::map<std::string, State> state_;
};

}  // namespace gpupool::agent
