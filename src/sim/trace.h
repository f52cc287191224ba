// The campus simulator's trace: groups (labs), nodes, jobs and provider
// events, one JSON object per line (JSONL). The format is documented in
// docs/sim-trace.md; `gpupool sim campus --write-trace` writes it and
// `gpupool sim trace` replays it.
//
// Contract: ParseTrace and FormatTrace are pure functions (no I/O, no clock,
// no globals) and safe to call from any thread on caller-owned values.
// ParseTrace is strict: an unknown field, a value of the wrong type, a
// quantity without a unit or with an unknown one, a reference to an
// undeclared group or node, a duplicate name or id, or provider events that
// do not alternate leave/return for a node are errors, reported as
// "SOURCE:LINE: FIELD: what is wrong". FormatTrace writes text that ParseTrace
// reads back to an equal Trace (operator==).
//
// Amounts are integers: milli-GPU, milli-CPU, MiB, milliseconds. Durations are
// of the work at speed 1.0; a node's `speed` scales how fast it does work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/fairshare.h"

namespace gpupool::sim {

inline constexpr std::string_view kTraceFormat = "gpupool-sim-trace/1";

// An optional first line saying where the trace came from.
struct TraceMeta {
  std::optional<uint64_t> seed;  // the generator's seed, if any
  std::string generator;         // e.g. "campus"; free text
  std::string params;            // the generator's settings, as a compact JSON object; may be empty
  friend bool operator==(const TraceMeta&, const TraceMeta&) = default;
};

struct TraceGroup {
  std::string name;
  int64_t weight = 1;  // > 0
  // Guaranteed GPU milli in the pooled mode; absent = the GPUs the group's
  // nodes hold (each lab is guaranteed what it owns).
  std::optional<int64_t> guaranteed_milli;
  friend bool operator==(const TraceGroup&, const TraceGroup&) = default;
};

struct TraceNode {
  std::string name;
  std::string owner_group;  // a declared group, or empty: owned by no lab
  int32_t gpus = 0;         // >= 1
  std::string gpu_model;    // e.g. "A100"; matched by GpuModelMatches
  int64_t gpu_memory_mib = 0;
  int32_t compute_capability = 0;  // major * 10 + minor; 0 = unknown
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  double speed = 1.0;  // work per unit of time relative to 1.0; > 0
  // Its provider's policy by group (declared groups): only these may use
  // it (empty: any), and never these. Only the pool engine (pool_sim.h)
  // runs it; the DES refuses a trace that has one.
  std::vector<std::string> allow_groups;
  std::vector<std::string> deny_groups;
  friend bool operator==(const TraceNode&, const TraceNode&) = default;
};

struct TraceJob {
  int64_t id = 0;  // > 0, unique
  int64_t submit_ms = 0;
  std::string group;
  sched::PriorityClass priority = sched::PriorityClass::kNormal;
  int32_t gpus = 0;       // whole GPUs per node; 0 when the job asks for a share
  int32_t gpu_milli = 0;  // a share of one GPU (1..999) when gpus == 0
  // Whole GPUs: the minimum memory of each. A share: the memory it takes.
  int64_t gpu_memory_mib = 0;
  std::vector<std::string> gpu_models;  // allowed models; empty = any
  int32_t nodes = 1;                    // > 1: a gang, all or nothing
  int64_t cpu_milli = 0;                // per node
  int64_t memory_mib = 0;               // per node
  int64_t duration_ms = 0;              // work at speed 1.0; > 0
  int64_t runtime_limit_ms = 0;         // the user's bound of its run time; 0 = none
  int64_t checkpoint_interval_ms = 0;   // of progress; 0 = never checkpoints
  // GPU milli in all (per node times nodes).
  int64_t GpuMilli() const {
    return (gpus > 0 ? int64_t{gpus} * 1000 : int64_t{gpu_milli}) * int64_t{nodes};
  }
  friend bool operator==(const TraceJob&, const TraceJob&) = default;
};

enum class NodeEventKind { kLeave, kReturn };

struct TraceNodeEvent {
  NodeEventKind kind = NodeEventKind::kLeave;
  std::string node;
  int64_t at_ms = 0;
  friend bool operator==(const TraceNodeEvent&, const TraceNodeEvent&) = default;
};

struct Trace {
  TraceMeta meta;
  std::vector<TraceGroup> groups;
  std::vector<TraceNode> nodes;
  std::vector<TraceJob> jobs;          // in file order (not necessarily by submit time)
  std::vector<TraceNodeEvent> events;  // in file order
  friend bool operator==(const Trace&, const Trace&) = default;
};

// `source` names the text in error messages ("trace.jsonl").
Result<Trace> ParseTrace(std::string_view source, std::string_view text);

// The trace as JSONL: a meta line, then groups, nodes, jobs and events.
std::string FormatTrace(const Trace& trace);

// Checks a trace built in code (the generator's) against the same rules as
// ParseTrace; errors name the item ("job 12: ...").
Status ValidateTrace(const Trace& trace);

// GPU milli owned by each group (by its nodes), in trace group order.
int64_t OwnedGpuMilli(const Trace& trace, std::string_view group);

}  // namespace gpupool::sim
