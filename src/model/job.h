// Jobs and attempts.
//
// A Job is what a user asked for (its JobSpec) and where it stands. An
// Attempt is one placement of a job on one node; a job has at most one live
// attempt at a time, and every message about running work names its attempt
// id ("42.1" is the first attempt of job 42). Plain values: copy freely.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace gpupool {

struct JobSpec {
  std::string name;
  std::string run;                   // a shell command (sh -c), or
  std::vector<std::string> command;  // an argv list; exactly one of the two is set
  std::map<std::string, std::string> env;
  Resources resources;
  int64_t max_runtime_ms = 0;  // 0 = no limit

  friend bool operator==(const JobSpec&, const JobSpec&) = default;
};

enum class JobState { kPending, kScheduled, kRunning, kSucceeded, kFailed, kCancelled };
inline constexpr JobState kAllJobStates[] = {JobState::kPending, JobState::kScheduled,
                                             JobState::kRunning, JobState::kSucceeded,
                                             JobState::kFailed,  JobState::kCancelled};

std::string_view JobStateName(JobState s);  // "pending", "running", ...
Result<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);

struct Job {
  int64_t id = 0;  // assigned by the store, starting at 1
  std::string owner;
  JobSpec spec;
  JobState state = JobState::kPending;
  // Why the job is pending (a scheduler reason) or why it failed.
  std::string reason;
  std::optional<int32_t> exit_code;
  int32_t attempts = 0;         // attempts created so far
  std::string current_attempt;  // id of the live attempt, or empty
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  int64_t started_ms = 0;   // first time an attempt ran; 0 if never
  int64_t finished_ms = 0;  // 0 while not terminal

  friend bool operator==(const Job&, const Job&) = default;
};

enum class AttemptState { kScheduled, kRunning, kSucceeded, kFailed, kCancelled, kLost };
std::string_view AttemptStateName(AttemptState s);
Result<AttemptState> ParseAttemptState(std::string_view name);
bool IsLive(AttemptState s);  // scheduled or running

struct Attempt {
  std::string id;  // "<job id>.<number>"
  int64_t job_id = 0;
  int32_t number = 0;  // 1, 2, ...
  std::string node_id;
  std::vector<std::string> gpu_uuids;
  AttemptState state = AttemptState::kScheduled;
  std::optional<int32_t> exit_code;
  std::string reason;
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;

  friend bool operator==(const Attempt&, const Attempt&) = default;
};

std::string MakeAttemptId(int64_t job_id, int32_t number);
// "42.3" -> {42, 3}.
Result<std::pair<int64_t, int32_t>> ParseAttemptId(std::string_view id);

}  // namespace gpupool
