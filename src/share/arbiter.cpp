#include "share/arbiter.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace gpupool::share {

struct Arbiter::View {
  std::span<const TaskDemand> tasks;
  std::vector<size_t> by_id;  // indices of `tasks` in order of id
  std::vector<bool> active;
  std::vector<uint64_t> share;  // clamped to 1..1000
  bool any_strict = false;
  int active_count = 0;
  uint64_t active_sum = 0;         // of active tasks' shares
  uint64_t active_strict_sum = 0;  // of active strict tasks' shares

  int Find(const std::string& id) const {
    if (id.empty()) return -1;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].id == id) return static_cast<int>(i);
    }
    return -1;
  }
};

Result<Arbiter> Arbiter::Create(const ArbiterOptions& options) {
  if (options.period_ns <= 0) return Status::InvalidArgument("period_ns: must be positive");
  if (options.active_window_ns <= 0) {
    return Status::InvalidArgument("active_window_ns: must be positive");
  }
  if (options.min_slice_ns <= 0 || options.min_slice_ns >= options.period_ns) {
    return Status::InvalidArgument("min_slice_ns: must be positive and below period_ns");
  }
  return Arbiter(options);
}

int64_t Arbiter::SliceNs(const View& view, size_t task) const {
  const int64_t period = options_.period_ns;
  const auto share = static_cast<int64_t>(view.share[task]);
  // Shares past one GPU (a placement the scheduler does not make): all in
  // proportion, strict ones too.
  if (view.active_sum > 1000) return period * share / static_cast<int64_t>(view.active_sum);
  if (view.tasks[task].strict) return period * share / 1000;
  const int64_t rest = period - period * static_cast<int64_t>(view.active_strict_sum) / 1000;
  const auto wc_sum = static_cast<int64_t>(view.active_sum - view.active_strict_sum);
  return std::max(options_.min_slice_ns, rest * share / wc_sum);
}

int Arbiter::NextTurn(const View& view) const {
  // by_id's first position after cursor_ (which may have left), cyclically.
  auto start =
      std::upper_bound(view.by_id.begin(), view.by_id.end(), cursor_,
                       [&](const std::string& id, size_t i) { return id < view.tasks[i].id; });
  const size_t n = view.by_id.size();
  const auto first = static_cast<size_t>(start - view.by_id.begin());
  for (size_t k = 0; k < n; ++k) {
    size_t i = view.by_id[(first + k) % n];
    if (view.active[i] && !had_turn_.contains(view.tasks[i].id)) return static_cast<int>(i);
  }
  return -1;
}

void Arbiter::StartTurn(const View& view, int task, int64_t now_ns) {
  const auto i = static_cast<size_t>(task);
  holder_ = view.tasks[i].id;
  cursor_ = holder_;
  had_turn_.insert(holder_);
  slice_end_ns_ = now_ns + SliceNs(view, i);
  // With a strict task present a round lasts P: a work-conserving turn
  // taken late in it (a task that woke in the idle gap) ends with it.
  if (view.any_strict && !view.tasks[i].strict) {
    const int64_t round_end = round_start_ns_ + options_.period_ns;
    slice_end_ns_ = std::min(slice_end_ns_, std::max(round_end, now_ns + options_.min_slice_ns));
  }
}

Decision Arbiter::Tick(std::span<const TaskDemand> tasks, int64_t now_ns) {
  View view;
  view.tasks = tasks;
  view.by_id.resize(tasks.size());
  std::iota(view.by_id.begin(), view.by_id.end(), size_t{0});
  std::sort(view.by_id.begin(), view.by_id.end(),
            [&](size_t a, size_t b) { return tasks[a].id < tasks[b].id; });
  assert(std::adjacent_find(view.by_id.begin(), view.by_id.end(),
                            [&](size_t a, size_t b) { return tasks[a].id == tasks[b].id; }) ==
             view.by_id.end() &&
         "task ids must be unique");

  Decision d;
  d.grants.assign(tasks.size(), Grant{GrantState::kWait, 0});
  const int64_t window = options_.active_window_ns;
  for (const TaskDemand& t : tasks) {
    // Active while now <= last_active + W (written so that no sum overflows).
    bool active = t.last_active_ns >= now_ns - window;
    view.active.push_back(active);
    view.share.push_back(std::clamp<uint64_t>(t.share_milli, 1, 1000));
    view.any_strict = view.any_strict || t.strict;
    if (!active) continue;
    ++view.active_count;
    view.active_sum += view.share.back();
    if (t.strict) view.active_strict_sum += view.share.back();
    if (t.last_active_ns <= now_ns) {
      d.next_change_ns = std::min(d.next_change_ns, t.last_active_ns + window + 1);
    }
  }

  if (!view.any_strict && view.active_count <= 1) {
    turns_ = false;
    holder_.clear();
    had_turn_.clear();
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (view.active_count == 0 || view.active[i]) d.grants[i] = Grant{GrantState::kFree, 0};
      if (view.active[i]) cursor_ = tasks[i].id;
    }
    return d;
  }

  if (!turns_) {
    turns_ = true;
    round_start_ns_ = now_ns;
    had_turn_.clear();
    holder_.clear();
  }
  int holder = view.Find(holder_);
  if (holder >= 0 && (!view.active[holder] || now_ns >= slice_end_ns_)) holder = -1;
  if (holder < 0) {
    holder_.clear();
    holder = NextTurn(view);
    const bool gap_left = view.any_strict && now_ns < round_start_ns_ + options_.period_ns;
    if (holder < 0 && !gap_left) {  // the round is over
      round_start_ns_ = now_ns;
      had_turn_.clear();
      holder = NextTurn(view);
    }
    if (holder >= 0) StartTurn(view, holder, now_ns);
  }
  if (holder >= 0) {
    d.grants[holder] = Grant{GrantState::kRun, slice_end_ns_};
    d.next_change_ns = std::min(d.next_change_ns, slice_end_ns_);
    return d;
  }
  // The idle gap of a round with strict tasks: the others may use it.
  const int64_t round_end = round_start_ns_ + options_.period_ns;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i].strict) d.grants[i] = Grant{GrantState::kRun, round_end};
  }
  d.next_change_ns = std::min(d.next_change_ns, round_end);
  return d;
}

}  // namespace gpupool::share
