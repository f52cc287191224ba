#include "sched/fairshare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_set>
#include <utility>

namespace gpupool::sched {
namespace {

using u128 = unsigned __int128;
using i128 = __int128;

constexpr int kFracBits = 62;
constexpr uint64_t kOneQ62 = uint64_t{1} << kFracBits;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// kHalvingRootsQ62[i - 1] = 2^(-2^-i) in Q62, rounded to nearest (computed
// with 60-digit decimal arithmetic). 2^-f for f = sum b_i 2^-i is the product
// of the entries whose bit b_i is set.
constexpr std::array<uint64_t, kFracBits> kHalvingRootsQ62 = {
    0x2d413cccfe779921ULL, 0x35d13f32b5a75abdULL, 0x3ab031b9f7490e4cULL, 0x3d495f454921b30bULL,
    0x3ea0ecb6dc8a80cfULL, 0x3f4f83033d21b05dULL, 0x3fa784571ee3e213ULL, 0x3fd3b2d65447b229ULL,
    0x3fe9d59487236bb4ULL, 0x3ff4e9d4703df843ULL, 0x3ffa74acbdf6c9d5ULL, 0x3ffd3a46ffc6e30fULL,
    0x3ffe9d1fa8010199ULL, 0x3fff4e8ede053ad5ULL, 0x3fffa747318376acULL, 0x3fffd3a38961e6ffULL,
    0x3fffe9d1c0d8fd14ULL, 0x3ffff4e8df7680c5ULL, 0x3ffffa746f7dc0ecULL, 0x3ffffd3a37af8098ULL,
    0x3ffffe9d1bd3e854ULL, 0x3fffff4e8de8fe2cULL, 0x3fffffa746f44197ULL, 0x3fffffd3a37a116bULL,
    0x3fffffe9d1bd04deULL, 0x3ffffff4e8de8179ULL, 0x3ffffffa746f407fULL, 0x3ffffffd3a37a030ULL,
    0x3ffffffe9d1bd014ULL, 0x3fffffff4e8de809ULL, 0x3fffffffa746f404ULL, 0x3fffffffd3a37a02ULL,
    0x3fffffffe9d1bd01ULL, 0x3ffffffff4e8de81ULL, 0x3ffffffffa746f40ULL, 0x3ffffffffd3a37a0ULL,
    0x3ffffffffe9d1bd0ULL, 0x3fffffffff4e8de8ULL, 0x3fffffffffa746f4ULL, 0x3fffffffffd3a37aULL,
    0x3fffffffffe9d1bdULL, 0x3ffffffffff4e8dfULL, 0x3ffffffffffa746fULL, 0x3ffffffffffd3a38ULL,
    0x3ffffffffffe9d1cULL, 0x3fffffffffff4e8eULL, 0x3fffffffffffa747ULL, 0x3fffffffffffd3a3ULL,
    0x3fffffffffffe9d2ULL, 0x3ffffffffffff4e9ULL, 0x3ffffffffffffa74ULL, 0x3ffffffffffffd3aULL,
    0x3ffffffffffffe9dULL, 0x3fffffffffffff4fULL, 0x3fffffffffffffa7ULL, 0x3fffffffffffffd4ULL,
    0x3fffffffffffffeaULL, 0x3ffffffffffffff5ULL, 0x3ffffffffffffffaULL, 0x3ffffffffffffffdULL,
    0x3fffffffffffffffULL, 0x3fffffffffffffffULL,
};

// 1 / ln 2 in Q62.
constexpr uint64_t kInvLn2Q62 = 0x5c551d94ae0bf85eULL;

int64_t Saturate(u128 v) { return v > static_cast<u128>(kMax) ? kMax : static_cast<int64_t>(v); }

int64_t SatAdd(int64_t a, int64_t b) { return a > kMax - b ? kMax : a + b; }

// x * f >> 62 for a Q62 factor f < 2^64, without overflow, saturating.
int64_t MulQ62(u128 x, uint64_t f) {
  const u128 mask = (u128{1} << kFracBits) - 1;
  u128 high = (x >> kFracBits) * f;
  u128 low = ((x & mask) * f) >> kFracBits;
  if (high > static_cast<u128>(kMax)) return kMax;
  return Saturate(high + low);
}

// round(100 * part / whole), 0 when whole is 0.
int64_t Percent(u128 part, u128 whole) {
  if (whole == 0) return 0;
  return static_cast<int64_t>((part * 100 + whole / 2) / whole);
}

// Validates the groups and indexes them by name.
Result<std::map<std::string, size_t, std::less<>>> IndexGroups(
    const std::vector<GroupState>& groups) {
  std::map<std::string, size_t, std::less<>> index;
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupState& g = groups[i];
    auto where = [&] { return "groups[" + std::to_string(i) + "]"; };
    if (g.name.empty()) return Status::InvalidArgument(where() + ".name: must not be empty");
    const std::string named = where() + " (" + g.name + ")";
    if (g.weight <= 0) {
      return Status::InvalidArgument(named + ".weight: must be > 0, got " +
                                     std::to_string(g.weight));
    }
    if (g.guaranteed_milli < 0) {
      return Status::InvalidArgument(named + ".guaranteed_milli: must be >= 0");
    }
    if (g.allocated_milli < 0) {
      return Status::InvalidArgument(named + ".allocated_milli: must be >= 0");
    }
    if (g.usage.milli_ms < 0) return Status::InvalidArgument(named + ".usage: must be >= 0");
    if (!index.emplace(g.name, i).second) {
      return Status::InvalidArgument(named + ".name: duplicate group");
    }
  }
  return index;
}

}  // namespace

std::string_view PriorityClassName(PriorityClass priority) {
  switch (priority) {
    case PriorityClass::kInteractive:
      return "interactive";
    case PriorityClass::kNormal:
      return "normal";
    case PriorityClass::kOpportunistic:
      return "opportunistic";
  }
  return "unknown";
}

Result<PriorityClass> ParsePriorityClass(std::string_view text) {
  for (PriorityClass p :
       {PriorityClass::kInteractive, PriorityClass::kNormal, PriorityClass::kOpportunistic}) {
    if (text == PriorityClassName(p)) return p;
  }
  return Status::InvalidArgument("priority class: unknown \"" + std::string(text) +
                                 "\"; expected one of interactive, normal, opportunistic");
}

uint64_t DecayFactorQ62(int64_t elapsed_ms, int64_t half_life_ms) {
  if (elapsed_ms <= 0 || half_life_ms <= 0) return kOneQ62;
  const int64_t whole = elapsed_ms / half_life_ms;
  if (whole > kFracBits) return 0;
  const int64_t rest = elapsed_ms % half_life_ms;
  // The fractional part of elapsed / half_life in Q62; rest < half_life < 2^63.
  const uint64_t frac = static_cast<uint64_t>((static_cast<u128>(rest) << kFracBits) /
                                              static_cast<u128>(half_life_ms));
  uint64_t factor = kOneQ62;
  for (int i = 1; i <= kFracBits; ++i) {
    if ((frac >> (kFracBits - i)) & 1) {
      const u128 product = static_cast<u128>(factor) * kHalvingRootsQ62[i - 1];
      factor = static_cast<uint64_t>((product + (u128{1} << (kFracBits - 1))) >> kFracBits);
    }
  }
  return factor >> whole;
}

DecayedUsage Decay(const DecayedUsage& u, int64_t now_ms, int64_t half_life_ms) {
  if (now_ms <= u.as_of_ms) return u;
  DecayedUsage out{u.milli_ms, now_ms};
  if (half_life_ms > 0 && u.milli_ms > 0) {
    out.milli_ms =
        MulQ62(static_cast<u128>(u.milli_ms), DecayFactorQ62(now_ms - u.as_of_ms, half_life_ms));
  }
  return out;
}

DecayedUsage Charge(const DecayedUsage& u, int64_t gpu_milli, int64_t from_ms, int64_t to_ms,
                    int64_t half_life_ms) {
  DecayedUsage out = Decay(u, std::max(u.as_of_ms, to_ms), half_life_ms);
  if (gpu_milli <= 0 || to_ms <= from_ms) return out;
  // Intervals longer than INT64_MAX ms cannot be represented; saturate.
  const u128 duration = static_cast<u128>(static_cast<i128>(to_ms) - from_ms);
  const int64_t flat = Saturate(static_cast<u128>(gpu_milli) * duration);  // no decay
  int64_t add = flat;
  if (half_life_ms > 0) {
    const int64_t elapsed =
        duration > static_cast<u128>(kMax) ? kMax : static_cast<int64_t>(duration);
    // gpu_milli * h / ln 2 * (1 - 2^(-elapsed / h)), never above the flat charge.
    const uint64_t one_minus = kOneQ62 - DecayFactorQ62(elapsed, half_life_ms);
    const uint64_t scale =
        static_cast<uint64_t>((static_cast<u128>(one_minus) * kInvLn2Q62) >> kFracBits);
    add = std::min(flat,
                   MulQ62(static_cast<u128>(gpu_milli) * static_cast<u128>(half_life_ms), scale));
    // A late report: decay the interval's charge from to_ms to the result's time.
    if (out.as_of_ms > to_ms) {
      add = MulQ62(static_cast<u128>(add), DecayFactorQ62(out.as_of_ms - to_ms, half_life_ms));
    }
  }
  out.milli_ms = SatAdd(out.milli_ms, add);
  return out;
}

bool IsBorrowing(const GroupState& group, int64_t request_milli) {
  if (request_milli <= 0) return false;
  return static_cast<i128>(group.allocated_milli) + request_milli > group.guaranteed_milli;
}

std::string GpusText(int64_t milli) {
  std::string frac = std::to_string(milli % 1000);
  return std::to_string(milli / 1000) + "." + std::string(3 - frac.size(), '0') + frac;
}

Result<std::vector<QueueEntry>> OrderQueue(const std::vector<GroupState>& groups,
                                           const std::vector<QueuedJob>& jobs,
                                           const FairShareOptions& options) {
  GP_ASSIGN_OR_RETURN(auto index, IndexGroups(groups));

  // Usage now, and the totals the explanations divide by.
  std::vector<int64_t> usage(groups.size());
  u128 total_usage = 0;
  u128 total_weight = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    usage[i] = Decay(groups[i].usage, options.now_ms, options.half_life_ms).milli_ms;
    total_usage += static_cast<u128>(usage[i]);
    total_weight += static_cast<u128>(groups[i].weight);
  }

  struct Item {
    const QueuedJob* job;
    size_t group;
  };
  std::vector<Item> items;
  items.reserve(jobs.size());
  std::unordered_set<int64_t> seen_ids;
  seen_ids.reserve(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const QueuedJob& job = jobs[j];
    auto where = [&] {
      return "jobs[" + std::to_string(j) + "] (id " + std::to_string(job.job_id) + ")";
    };
    auto it = index.find(job.group);
    if (it == index.end()) {
      return Status::InvalidArgument(where() + ".group: unknown group \"" + job.group + "\"");
    }
    if (job.gpu_milli < 0) return Status::InvalidArgument(where() + ".gpu_milli: must be >= 0");
    if (!seen_ids.insert(job.job_id).second) {
      return Status::InvalidArgument(where() + ".job_id: duplicate job id");
    }
    items.push_back({&job, it->second});
  }

  // usage_a / weight_a < usage_b / weight_b, exactly (both products < 2^126).
  auto less_used = [&](size_t a, size_t b) {
    return static_cast<i128>(usage[a]) * groups[b].weight <
           static_cast<i128>(usage[b]) * groups[a].weight;
  };
  std::sort(items.begin(), items.end(), [&](const Item& x, const Item& y) {
    if (x.job->priority != y.job->priority) return x.job->priority < y.job->priority;
    if (x.job->front != y.job->front) return x.job->front;
    if (less_used(x.group, y.group)) return true;
    if (less_used(y.group, x.group)) return false;
    if (x.job->submit_ms != y.job->submit_ms) return x.job->submit_ms < y.job->submit_ms;
    return x.job->job_id < y.job->job_id;
  });

  std::vector<int64_t> projected(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) projected[i] = groups[i].allocated_milli;

  // The explanation's figures that depend only on the group.
  std::vector<int64_t> usage_percent(groups.size()), share_percent(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    usage_percent[i] = Percent(static_cast<u128>(usage[i]), total_usage);
    share_percent[i] = Percent(static_cast<u128>(groups[i].weight), total_weight);
  }

  std::vector<QueueEntry> out;
  out.reserve(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    const QueuedJob& job = *items[k].job;
    const size_t g = items[k].group;
    const GroupState& group = groups[g];
    QueueEntry e;
    e.job_id = job.job_id;
    e.position = static_cast<int64_t>(k) + 1;
    e.group = group.name;
    e.priority = job.priority;
    GroupState now = group;
    now.allocated_milli = projected[g];
    e.borrowing = IsBorrowing(now, job.gpu_milli);
    projected[g] = SatAdd(projected[g], job.gpu_milli);

    e.usage_fraction =
        total_usage == 0 ? 0.0 : static_cast<double>(usage[g]) / static_cast<double>(total_usage);
    e.share_fraction = static_cast<double>(group.weight) / static_cast<double>(total_weight);
    e.fair_share_factor = std::exp2(-e.usage_fraction / e.share_fraction);

    e.usage_percent = usage_percent[g];
    e.share_percent = share_percent[g];
    e.group_milli = projected[g];
    e.guaranteed_milli = group.guaranteed_milli;
    out.push_back(std::move(e));
  }
  return out;
}

Result<VictimChoice> PickVictims(const std::vector<GroupState>& groups,
                                 const std::vector<RunningAttempt>& running,
                                 const ReclaimRequest& request) {
  GP_ASSIGN_OR_RETURN(auto index, IndexGroups(groups));
  auto reclaimer = index.find(request.group);
  if (reclaimer == index.end()) {
    return Status::InvalidArgument("reclaim.group: unknown group \"" + request.group + "\"");
  }
  if (request.gpu_milli <= 0) {
    return Status::InvalidArgument("reclaim.gpu_milli: must be > 0, got " +
                                   std::to_string(request.gpu_milli));
  }

  struct Candidate {
    const RunningAttempt* attempt;
    size_t group;
    int64_t lost_ms;
  };
  std::vector<Candidate> candidates;
  std::map<int64_t, size_t> seen_ids;
  int not_preemptible = 0;
  int in_window = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    const RunningAttempt& a = running[i];
    auto where = [&] {
      return "running[" + std::to_string(i) + "] (attempt " + std::to_string(a.attempt_id) + ")";
    };
    auto it = index.find(a.group);
    if (it == index.end()) {
      return Status::InvalidArgument(where() + ".group: unknown group \"" + a.group + "\"");
    }
    if (a.gpu_milli < 0) return Status::InvalidArgument(where() + ".gpu_milli: must be >= 0");
    if (!seen_ids.emplace(a.attempt_id, i).second) {
      return Status::InvalidArgument(where() + ".attempt_id: duplicate attempt id");
    }
    const GroupState& g = groups[it->second];
    if (a.group == request.group || a.gpu_milli == 0 || g.allocated_milli <= g.guaranteed_milli) {
      continue;
    }
    if (!a.preemptible) {
      ++not_preemptible;
      continue;
    }
    if (a.last_preempted_ms &&
        static_cast<i128>(request.now_ms) - *a.last_preempted_ms < request.anti_thrash_window_ms) {
      ++in_window;
      continue;
    }
    const int64_t since = std::max(a.last_checkpoint_ms, a.started_ms);
    candidates.push_back({&a, it->second, std::max<int64_t>(0, request.now_ms - since)});
  }

  VictimChoice choice;
  const GroupState& r = groups[reclaimer->second];
  if (IsBorrowing(r, request.gpu_milli)) {
    choice.reason = "group " + r.name + " would exceed its guarantee (" +
                    GpusText(r.allocated_milli) + " + " + GpusText(request.gpu_milli) + " > " +
                    GpusText(r.guaranteed_milli) + " GPUs); borrowing does not preempt";
    return choice;
  }

  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    if (x.lost_ms != y.lost_ms) return x.lost_ms < y.lost_ms;
    if (x.attempt->gpu_milli != y.attempt->gpu_milli) {
      return x.attempt->gpu_milli > y.attempt->gpu_milli;
    }
    return x.attempt->attempt_id < y.attempt->attempt_id;
  });

  // Greedy, least lost work first; a group is a source only while still over
  // its guarantee after the victims already taken from it.
  std::vector<int64_t> excess(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    excess[i] = groups[i].allocated_milli - groups[i].guaranteed_milli;
  }
  std::vector<const Candidate*> chosen;
  int64_t freed = 0;
  for (const Candidate& c : candidates) {
    if (freed >= request.gpu_milli) break;
    if (excess[c.group] <= 0) continue;
    excess[c.group] -= c.attempt->gpu_milli;
    freed = SatAdd(freed, c.attempt->gpu_milli);
    chosen.push_back(&c);
  }
  if (freed < request.gpu_milli) {
    choice.reason = "only " + GpusText(freed) + " of " + GpusText(request.gpu_milli) +
                    " GPUs can be freed from borrowed preemptible work (" +
                    std::to_string(not_preemptible) + " borrowing attempts not preemptible, " +
                    std::to_string(in_window) + " preempted within the last " +
                    std::to_string(request.anti_thrash_window_ms) + " ms)";
    return choice;
  }

  // Reprieve: keep running any victim, most lost work first, whose release
  // the others already cover.
  for (size_t k = chosen.size(); k-- > 0;) {
    if (freed - chosen[k]->attempt->gpu_milli >= request.gpu_milli) {
      freed -= chosen[k]->attempt->gpu_milli;
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  for (const Candidate* c : chosen) {
    choice.attempt_ids.push_back(c->attempt->attempt_id);
    choice.lost_work_ms = SatAdd(choice.lost_work_ms, c->lost_ms);
  }
  choice.freed_milli = freed;
  return choice;
}

}  // namespace gpupool::sched
