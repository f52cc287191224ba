// Starting a job's process from a LaunchPlan (exec/executor.h): the child
// side, between fork and exec. Used by the agent's shim and by tests that
// run an executor directly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "exec/executor.h"

namespace gpupool::exec {

// What failed in the child, written to the error pipe as two ints
// {step, errno} before it exits with 127.
enum class LaunchStep : int { kCgroup = 1, kRlimits, kStage, kSetUser, kChdir, kExec };

// Runs in the child after fork, with stdin/stdout/stderr already in place.
// Closes every descriptor above 2 except plan.keep_fds and `error_fd`
// (close-on-exec), then does what the plan says and execs. A program name
// without '/' is looked up on the PATH of plan.env (the job's), not the
// caller's. Never returns.
[[noreturn]] void ExecPlan(const LaunchPlan& plan, int error_fd);

// Whether a KEY=VALUE entry is for `key`.
bool EnvEntryIs(std::string_view entry, std::string_view key);

// The value of KEY in a KEY=VALUE list (the last one wins, as MergeEnv
// leaves it), or nullopt.
std::optional<std::string> EnvValue(const std::vector<std::string>& env, std::string_view key);

// The full path of `program` (a name without '/') on the colon-separated
// `path`, or "" when no directory has it executable. A program with a '/'
// is returned as is when executable.
std::string FindProgram(const std::string& program, const std::string& path);

// "cannot start /bin/foo: No such file or directory",
// "cannot start: cannot join cgroup /sys/...: Permission denied".
std::string DescribeLaunchFailure(const LaunchPlan& plan, int step, int err);

}  // namespace gpupool::exec
