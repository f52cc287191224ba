#include "model/job.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace gpupool {
namespace {

template <typename E, size_t N>
Result<E> ParseName(std::string_view name, const std::pair<E, std::string_view> (&table)[N],
                    std::string_view what) {
  for (const auto& [value, text] : table) {
    if (text == name) return value;
  }
  std::string allowed;
  for (const auto& [value, text] : table) {
    allowed += allowed.empty() ? "" : ", ";
    allowed += text;
  }
  return Status::InvalidArgument("unknown " + std::string(what) + " \"" + std::string(name) +
                                 "\" (one of: " + allowed + ")");
}

constexpr std::pair<JobState, std::string_view> kJobStateNames[] = {
    {JobState::kPending, "pending"}, {JobState::kScheduled, "scheduled"},
    {JobState::kRunning, "running"}, {JobState::kSucceeded, "succeeded"},
    {JobState::kFailed, "failed"},   {JobState::kCancelled, "cancelled"},
};

constexpr std::pair<AttemptState, std::string_view> kAttemptStateNames[] = {
    {AttemptState::kScheduled, "scheduled"},      {AttemptState::kRunning, "running"},
    {AttemptState::kSucceeded, "succeeded"},      {AttemptState::kFailed, "failed"},
    {AttemptState::kCancelled, "cancelled"},      {AttemptState::kLost, "lost"},
    {AttemptState::kPreempted, "preempted"},      {AttemptState::kVacated, "vacated"},
    {AttemptState::kRefused, "refused"},          {AttemptState::kPreempting, "preempting"},
    {AttemptState::kStoppingForGood, "stopping"}, {AttemptState::kGangStopping, "gang-stopping"},
};

constexpr std::pair<Distributed, std::string_view> kDistributedNames[] = {
    {Distributed::kTorch, "torch"},
    {Distributed::kNone, "none"},
};

constexpr std::pair<SessionKind, std::string_view> kSessionKindNames[] = {
    {SessionKind::kShell, "shell"},
    {SessionKind::kJupyter, "jupyter"},
};

constexpr std::pair<JobPriority, std::string_view> kPriorityNames[] = {
    {JobPriority::kInteractive, "interactive"},
    {JobPriority::kNormal, "normal"},
    {JobPriority::kOpportunistic, "opportunistic"},
};

}  // namespace

std::string_view JobStateName(JobState s) { return kJobStateNames[static_cast<int>(s)].second; }
Result<JobState> ParseJobState(std::string_view name) {
  return ParseName(name, kJobStateNames, "job state");
}
bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

std::string_view JobPriorityName(JobPriority p) {
  return kPriorityNames[static_cast<int>(p)].second;
}
Result<JobPriority> ParseJobPriority(std::string_view name) {
  return ParseName(name, kPriorityNames, "priority");
}

std::string_view DistributedName(Distributed d) {
  return kDistributedNames[static_cast<int>(d)].second;
}
Result<Distributed> ParseDistributed(std::string_view name) {
  return ParseName(name, kDistributedNames, "distributed mode");
}

std::string_view SessionKindName(SessionKind k) {
  return kSessionKindNames[static_cast<int>(k)].second;
}
Result<SessionKind> ParseSessionKind(std::string_view name) {
  return ParseName(name, kSessionKindNames, "session kind");
}

const AttemptRank* Attempt::RankOn(const std::string& node) const {
  auto it = std::find_if(ranks.begin(), ranks.end(),
                         [&](const AttemptRank& r) { return r.node_id == node; });
  return it == ranks.end() ? nullptr : &*it;
}
AttemptRank* Attempt::RankOn(const std::string& node) {
  return const_cast<AttemptRank*>(std::as_const(*this).RankOn(node));
}

std::string Attempt::MasterEndpoint() const {
  if (master_port <= 0) return "";
  bool v6 = master_addr.find(':') != std::string::npos;
  return (v6 ? "[" + master_addr + "]" : master_addr) + ":" + std::to_string(master_port);
}

std::string_view AttemptStateName(AttemptState s) {
  return kAttemptStateNames[static_cast<int>(s)].second;
}
Result<AttemptState> ParseAttemptState(std::string_view name) {
  return ParseName(name, kAttemptStateNames, "attempt state");
}
bool IsLive(AttemptState s) {
  return s == AttemptState::kScheduled || s == AttemptState::kRunning || IsStopping(s);
}
bool IsStopping(AttemptState s) {
  return s == AttemptState::kPreempting || s == AttemptState::kStoppingForGood ||
         s == AttemptState::kGangStopping;
}

int64_t LostWorkMs(const Attempt& a) {
  bool redone = a.state == AttemptState::kLost || a.state == AttemptState::kPreempted ||
                a.state == AttemptState::kVacated;
  if (!redone || a.started_ms <= 0 || a.finished_ms < a.started_ms) return 0;
  // A checkpoint taken after the end (a clock step) saves everything.
  int64_t saved_until = std::min(std::max(a.started_ms, a.last_checkpoint_ms), a.finished_ms);
  return a.finished_ms - saved_until;
}

std::string MakeAttemptId(int64_t job_id, int32_t number) {
  return std::to_string(job_id) + "." + std::to_string(number);
}

Result<std::pair<int64_t, int32_t>> ParseAttemptId(std::string_view id) {
  auto dot = id.find('.');
  int64_t job = 0;
  int32_t num = 0;
  auto bad = Status::InvalidArgument("invalid attempt id \"" + std::string(id) +
                                     "\": expected JOB.NUMBER such as 42.1");
  if (dot == std::string_view::npos) return bad;
  // Canonical form only ("42.1", not "042.01"): ids are compared as strings.
  if ((dot > 0 && id[0] == '0') || (dot + 1 < id.size() && id[dot + 1] == '0')) return bad;
  auto r1 = std::from_chars(id.data(), id.data() + dot, job);
  auto r2 = std::from_chars(id.data() + dot + 1, id.data() + id.size(), num);
  if (r1.ec != std::errc() || r1.ptr != id.data() + dot || r2.ec != std::errc() ||
      r2.ptr != id.data() + id.size() || job <= 0 || num <= 0) {
    return bad;
  }
  return std::make_pair(job, num);
}

}  // namespace gpupool
