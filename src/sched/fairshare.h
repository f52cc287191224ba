// Fair share: the order of the pending queue, decayed usage per group (lab),
// guarantees with borrowing, and the choice of preemption victims when a
// group reclaims its guarantee.
//
// Contract: pure value types and free functions. No I/O, no clock reads (every
// time is an argument, in milliseconds), no globals, no randomness, no
// threads; every function is safe to call from any thread on values the caller
// owns. Amounts are integers: GPU milli (1000 = one GPU), milliseconds, and
// usage in GPU-milli x milliseconds. Every result is a deterministic function
// of the arguments alone, bit for bit on every platform: the decay is computed
// in 62-bit fixed point with integer arithmetic (no libm), orderings compare
// integers exactly and end in a total order. Doubles appear only in the
// explanation fields meant for people, never in a decision.
//
// The model, in the way HTCondor user priorities and Slurm fair share work:
//  - Usage accumulates GPU milli x ms of allocation and decays exponentially
//    with a half-life: usage charged `h` ms ago counts half. A half-life <= 0
//    means no decay (usage only grows).
//  - Within one priority class (interactive > normal > opportunistic), a
//    group's place in line is set by its decayed usage relative to its share
//    of the weights (see OrderQueue).
//  - A group has guaranteed GPU milli (its quota). Work that keeps the group
//    within it is in-quota; work beyond it borrows idle capacity and is the
//    first candidate for preemption when another group reclaims its
//    guarantee (see PickVictims).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::sched {

// ---------------------------------------------------------------------------
// Priority classes.

// Lower value = served first. The numeric values are part of the contract.
enum class PriorityClass : int8_t {
  kInteractive = 0,
  kNormal = 1,
  kOpportunistic = 2,
};

// "interactive", "normal", "opportunistic".
std::string_view PriorityClassName(PriorityClass priority);

// Parses one of the names above (exact, lower case; surrounding spaces are
// not accepted). Errors are InvalidArgument naming the bad text and the valid
// names.
Result<PriorityClass> ParsePriorityClass(std::string_view text);

// ---------------------------------------------------------------------------
// Decayed usage.

// Usage of one group, in GPU-milli x ms, as of `as_of_ms`. Running one whole
// GPU for one second adds 1000 * 1000 = 1e6. Saturates at INT64_MAX instead
// of overflowing (about 290 years of 1000 GPUs without decay).
struct DecayedUsage {
  int64_t milli_ms = 0;
  int64_t as_of_ms = 0;
  friend bool operator==(const DecayedUsage&, const DecayedUsage&) = default;
};

// 2^(-elapsed_ms / half_life_ms) in Q62 fixed point (1 << 62 is 1.0). The
// building block of Decay and Charge, exposed for tests. 1.0 when elapsed <= 0
// or half_life <= 0; 0 once the factor is below 2^-62.
uint64_t DecayFactorQ62(int64_t elapsed_ms, int64_t half_life_ms);

// `u` decayed to `now_ms`: milli_ms * 2^(-(now - as_of) / half_life), rounded
// down, with as_of_ms = now_ms. Time never runs backwards: when now_ms <=
// u.as_of_ms, `u` is returned unchanged. half_life_ms <= 0: no decay (only
// as_of_ms moves).
DecayedUsage Decay(const DecayedUsage& u, int64_t now_ms, int64_t half_life_ms);

// `u` plus an allocation of `gpu_milli` held over [from_ms, to_ms].
//
// Choice: the decay is integrated over the interval, not charged as a lump at
// to_ms. Each millisecond of the allocation decays from its own time, so
//   charge(to) = gpu_milli * integral_{from}^{to} 2^(-(to - t)/h) dt
//              = gpu_milli * h / ln 2 * (1 - 2^(-(to - from)/h)).
// This makes the result independent of how the caller slices time: charging
// [a, b] then [b, c] equals charging [a, c] (up to rounding of one unit per
// call), so a scheduler that charges on every tick and one that charges once
// when a job ends agree. A lump charge at to_ms would overstate long
// allocations (a week-long job with a one-day half-life would count a full
// week). With half_life_ms <= 0 the charge is gpu_milli * (to - from).
//
// The result is as of max(u.as_of_ms, to_ms); an interval that ends before
// u.as_of_ms (a late report) is decayed forward to it. An empty or reversed
// interval, or gpu_milli <= 0, charges nothing (the result is still decayed
// to max(u.as_of_ms, to_ms)).
DecayedUsage Charge(const DecayedUsage& u, int64_t gpu_milli, int64_t from_ms, int64_t to_ms,
                    int64_t half_life_ms);

// ---------------------------------------------------------------------------
// Groups, guarantees and borrowing.

struct GroupState {
  std::string name;
  int64_t weight = 1;  // shares; must be > 0
  DecayedUsage usage;
  int64_t guaranteed_milli = 0;  // the group's quota of GPU milli; >= 0
  int64_t allocated_milli = 0;   // GPU milli held by its running attempts now; >= 0
};

// True when placing `request_milli` more would take the group beyond its
// guarantee: allocated + request > guaranteed. A request of 0 never borrows.
bool IsBorrowing(const GroupState& group, int64_t request_milli);

// ---------------------------------------------------------------------------
// Queue order.

struct QueuedJob {
  int64_t job_id = 0;
  std::string group;
  PriorityClass priority = PriorityClass::kNormal;
  int64_t submit_ms = 0;
  int64_t gpu_milli = 0;  // total GPU milli the job asks for; >= 0
  bool front = false;     // displaced by its provider: first in its class
};

struct FairShareOptions {
  int64_t now_ms = 0;        // usage is decayed to this time before comparing
  int64_t half_life_ms = 0;  // <= 0: no decay
};

// One job's place in the queue and why.
struct QueueEntry {
  int64_t job_id = 0;
  int64_t position = 0;  // 1-based place in the whole queue
  std::string group;
  PriorityClass priority = PriorityClass::kNormal;
  // True when, if it and every job of its group ahead of it ran, the group
  // would exceed its guarantee: the job would run on borrowed capacity.
  bool borrowing = false;
  // For people only (never used to decide): the group's part of all groups'
  // decayed usage now, its part of the weights, both in [0, 1], and Slurm's
  // classic factor 2^(-usage_fraction / share_fraction) in (0, 1].
  double usage_fraction = 0;
  double share_fraction = 0;
  double fair_share_factor = 1;
  // The figures of its explanation (ExplanationText in sched/wait_reason.h:
  // "position 3 (normal): group vision: 31% of recent use, fair share 25%;
  // within its guarantee (2.000 of 4.000 GPUs with the jobs ahead of it)"):
  // the group's part of recent use and of the weights, rounded percent; its
  // GPU milli with the jobs ahead of this one and this one; its guarantee.
  int64_t usage_percent = 0;
  int64_t share_percent = 0;
  int64_t group_milli = 0;
  int64_t guaranteed_milli = 0;
  friend bool operator==(const QueueEntry&, const QueueEntry&) = default;
};

// "2.500": GPU milli as GPUs with three decimals.
std::string GpusText(int64_t milli);

// The queue in the order jobs should be considered, with the figures that explain it.
//
// Order (a strict total order, so the result does not depend on input order):
//  1. priority class (interactive, then normal, then opportunistic); within
//     a class, jobs marked `front` (displaced by their provider) first;
//  2. the group's decayed usage relative to its weight, lower first: group a
//     goes before group b when usage_a / weight_a < usage_b / weight_b,
//     compared exactly as usage_a * weight_b < usage_b * weight_a in 128-bit
//     integers;
//  3. submit time, earlier first;
//  4. job id, lower first.
//
// Why this key: Slurm's classic factor 2^(-U/S) (U = the group's fraction of
// all usage, S = its fraction of all shares) and HTCondor's effective
// priority (decayed usage x priority factor, with factor = 1/weight) are both
// monotone in usage / weight, so they put groups in the same order; the
// normalising totals cancel in a pairwise comparison. Comparing the raw
// integers keeps the order exact and deterministic (no exp2, no rounding, no
// ties created by floating point), and a group with no recent usage is never
// behind one with some. The Slurm factor is still reported per job, since it
// is bounded and readable ("0.71"), and can later be blended with other
// factors (age, size) if the multifactor route is taken.
//
// Errors (InvalidArgument): a group with an empty or duplicate name, weight
// <= 0, or a negative guarantee, allocation or usage; a job whose group is
// unknown, with a duplicate id, or negative gpu_milli.
Result<std::vector<QueueEntry>> OrderQueue(const std::vector<GroupState>& groups,
                                           const std::vector<QueuedJob>& jobs,
                                           const FairShareOptions& options);

// ---------------------------------------------------------------------------
// Preemption victims for a group reclaiming its guarantee.

struct RunningAttempt {
  int64_t attempt_id = 0;
  std::string group;
  int64_t gpu_milli = 0;
  int64_t started_ms = 0;
  // Time of its last checkpoint; work since then is lost on preemption. A
  // value before started_ms (e.g. 0 for "never") counts from started_ms.
  int64_t last_checkpoint_ms = 0;
  bool preemptible = false;                  // only checkpointing attempts may be preempted
  std::optional<int64_t> last_preempted_ms;  // when it was last preempted, if ever
};

struct ReclaimRequest {
  std::string group;      // the group reclaiming its guarantee
  int64_t gpu_milli = 0;  // how much must be freed; > 0
  int64_t now_ms = 0;
  int64_t anti_thrash_window_ms = 0;  // never preempt an attempt preempted less than this ago
};

struct VictimChoice {
  // Attempts to checkpoint and requeue, fewest lost work first. Empty when
  // the request cannot be covered (all or nothing).
  std::vector<int64_t> attempt_ids;
  int64_t freed_milli = 0;   // sum of the victims' gpu_milli (>= the request when chosen)
  int64_t lost_work_ms = 0;  // sum over victims of now - last checkpoint
  std::string reason;        // why nothing was chosen; empty otherwise
  bool covered() const { return !attempt_ids.empty(); }
};

// Chooses attempts to preempt so that `request.group` can have
// `request.gpu_milli` more within its guarantee.
//
//  - Only when the reclaim is in-quota: if the reclaiming group would itself
//    be borrowing, nothing is chosen (borrowing never preempts).
//  - Candidates: preemptible attempts of other groups that are over their
//    guarantee, and not preempted within the anti-thrash window
//    (now - last_preempted < window excludes it).
//  - Greedy by least lost work (now - max(last_checkpoint, started)), then
//    larger gpu_milli, then attempt id. A group stays a source only while it
//    is still over its guarantee after the victims already taken from it (as
//    Kueue does), so no group is pushed far below its guarantee.
//  - Then victims are reprieved, most lost work first, when the rest still
//    cover the request, so no attempt is preempted needlessly.
//  - All or nothing: if the candidates cannot cover the request, nothing is
//    chosen and `reason` says why.
//
// Errors (InvalidArgument): the reclaiming group or an attempt's group is
// unknown, request.gpu_milli <= 0, an attempt has negative gpu_milli, or a
// group is invalid as in OrderQueue.
Result<VictimChoice> PickVictims(const std::vector<GroupState>& groups,
                                 const std::vector<RunningAttempt>& running,
                                 const ReclaimRequest& request);

}  // namespace gpupool::sched
