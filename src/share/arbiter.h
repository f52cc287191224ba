// The compute share's arbiter: which of the tasks sharing one GPU may launch
// kernels now, and until when. The agent keeps one Arbiter per shared GPU,
// calls Tick every few milliseconds (and at Decision::next_change_ns) with
// what each task's want file says, and writes each task's grant file from
// the answer; libgpushare.so in the task's processes obeys the grant
// (src/gpushare/launch.c, share_files.h). See docs/architecture.md,
// "Compute shares".
//
// Contract: pure and deterministic. Tick reads nothing but its arguments and
// the arbiter's own state (no clock: `now_ns` is passed in, CLOCK_MONOTONIC
// nanoseconds as in the files; no I/O, no globals, no randomness), and the
// answer does not depend on the order of `tasks` (turns go in order of id).
// One object per GPU, used from one thread at a time; objects share nothing.
//
// The rules, with P = period_ns and W = active_window_ns:
//  - A task is active when its last_active_ns >= now - W: it launched a
//    kernel, or waited for a turn, in the last W.
//  - Free phase: no strict task present and at most one active. The active
//    task (if any) runs FREE; the others WAIT, so that one that wakes is
//    seen at the next tick (and goes first, below); with none active all run
//    FREE. A task that hides its activity thus only ever holds itself back.
//  - Otherwise turns: the active tasks take turns in order of id, starting
//    after the last holder (so a task that wakes while another runs freely
//    goes first: the GPU changes hands within one tick). The holder gets
//    RUN until its slice ends and everyone else WAIT. A slice is
//      strict:           share * P
//      work-conserving:  share / (sum of active work-conserving shares)
//                        * (P - the active strict tasks' slices)
//    (with no strict task, share / sum of active shares * P), or, when the
//    active shares add up to more than one GPU, share / sum * P for all.
//    The holder loses its slice early when it stops being active. A round
//    ends when every active task has had its turn; while a strict task is
//    present a round lasts at least P: if the turns end sooner, the rest is
//    an idle gap in which strict tasks WAIT and work-conserving tasks RUN
//    until the round's end. So a strict task never gets more than its share
//    (nor runs FREE), even alone; a work-conserving task alone runs FREE.
//  - A task that claims to be active when it is not only holds its own
//    slices idle: the others' slices are proportional to their shares and
//    never shorter than share * P while the shares fit the GPU.
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::share {

// Values as in src/gpushare/share_files.h.
enum class GrantState : uint8_t { kFree = 0, kRun = 1, kWait = 2 };

struct TaskDemand {
  std::string id;               // unique among the GPU's tasks
  uint32_t share_milli = 1000;  // clamped to 1..1000
  bool strict = false;
  int64_t last_active_ns = 0;  // from the task's want file; 0: never
};

struct Grant {
  GrantState state = GrantState::kFree;
  int64_t until_ns = 0;  // kRun: the slice's end; otherwise 0
  friend bool operator==(const Grant&, const Grant&) = default;
};

struct Decision {
  std::vector<Grant> grants;  // one per task, in the order of Tick's `tasks`
  // The earliest time at which the grants change if no want file does (a
  // slice or an idle gap ends, an active task's window lapses): tick again
  // by then. int64 max: nothing is due.
  int64_t next_change_ns = std::numeric_limits<int64_t>::max();
};

struct ArbiterOptions {
  int64_t period_ns = 100'000'000;        // P: one round of turns
  int64_t active_window_ns = 20'000'000;  // W
  int64_t min_slice_ns = 1'000'000;       // a work-conserving slice's floor
};

class Arbiter {
 public:
  // Periods, windows and slices must be positive, the floor below P.
  static Result<Arbiter> Create(const ArbiterOptions& options);

  Decision Tick(std::span<const TaskDemand> tasks, int64_t now_ns);

 private:
  explicit Arbiter(const ArbiterOptions& options) : options_(options) {}

  struct View;  // one tick's view of the tasks (arbiter.cpp)
  int64_t SliceNs(const View& view, size_t task) const;
  // The next active task in id order after cursor_ that has not had its
  // turn this round; -1: none.
  int NextTurn(const View& view) const;
  void StartTurn(const View& view, int task, int64_t now_ns);

  ArbiterOptions options_;
  bool turns_ = false;  // false: the free phase
  std::string cursor_;  // the last holder, or the task that ran freely
  std::string holder_;  // "": nobody holds a slice
  int64_t slice_end_ns_ = 0;
  int64_t round_start_ns_ = 0;
  std::set<std::string> had_turn_;  // this round
};

}  // namespace gpupool::share
