// Starting a job's process from a LaunchPlan (exec/executor.h): SpawnPlan
// (the agent's shim, and tests that run an executor directly), and the
// child's side of a fork, ExecPlan.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
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

// ExecPlan for a child of fork() in a process that has other threads:
// everything the child needs is built here, in the parent, so the child
// allocates nothing. (After fork() another thread may have held the
// allocator's lock; a child that allocates can then wait for it forever:
// the agent's sandbox probe hung so under the sanitizers.) `plan` must
// outlive it.
class ForkExec {
 public:
  ForkExec(const LaunchPlan& plan, int error_fd);
  ~ForkExec();
  ForkExec(const ForkExec&) = delete;
  ForkExec& operator=(const ForkExec&) = delete;
  // In the child: what ExecPlan does. Never returns.
  [[noreturn]] void Run() noexcept;

 private:
  struct Prepared;
  std::unique_ptr<Prepared> p_;
  int error_fd_;
};

// The standard descriptors of SpawnPlan's child.
struct ChildStdio {
  int in = -1;   // -1: /dev/null
  int out = -1;  // -1: the caller's
  int err = -1;  // -1: the caller's
};

// Starts `plan` in a child made with vfork(), which shares the caller's
// memory until it execs: no page tables are copied and none of its pages
// fault back in (the fork was a sixth of the shim's CPU per trivial job,
// docs/performance.md). So everything
// the child needs is built here first and the child allocates nothing. The
// child gets a process group of its own, `stdio`, SIGPIPE's default action,
// then does what ExecPlan does, and sets `mask` as its signal mask just
// before the exec (the caller's blocked signals stay blocked until then).
// A failure before the exec is written to `error_fd` as ExecPlan writes it.
// Returns the child's pid; the caller reaps it.
Result<pid_t> SpawnPlan(const LaunchPlan& plan, const ChildStdio& stdio, const sigset_t& mask,
                        int error_fd);

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
