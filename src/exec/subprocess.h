// RunCommand: run a helper program (skopeo, umoci, docker) to completion and
// read its output line by line.
//
// No shell is involved: argv[0] is looked up on PATH and exec'd directly.
// The child gets stdin from /dev/null, its stdout and stderr are pipes to
// the caller, every other descriptor is closed (so leases, locks and
// sockets of the agent never leak into helpers), all signals are reset to
// their default disposition with an empty mask, and it runs in its own
// process group, which a timeout kills as a whole.
//
// Blocking and single-threaded: the calling thread polls the pipes until the
// child exits. Safe to call from several threads at once (no shared state),
// but the caller must not reap children it did not start (no waitpid(-1) or
// SIGCHLD set to SIG_IGN elsewhere in the process).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "exec/executor.h"

namespace gpupool::exec {

struct CommandResult {
  int exit_code = -1;       // -1 if killed by a signal / not run
  int signal = 0;           // the signal that ended it, 0 if it exited
  bool timed_out = false;   // killed with SIGKILL because timeout_ms passed
  bool cancelled = false;   // killed with SIGKILL because `cancelled` said so
  std::string stderr_tail;  // the last ~4 KiB of stderr, trimmed
  bool ok() const { return exit_code == 0; }
};

// The size of CommandResult::stderr_tail, at most.
inline constexpr size_t kStderrTailBytes = 4096;

// Runs argv (argv[0] looked up on PATH) with stdin /dev/null. Each stdout
// line (without '\n'; a last line without one is delivered too) goes to
// on_stdout_line if set. Output written after the child itself exited, by
// descendants that kept its pipes, is not waited for. Kills the child's
// process group (SIGKILL) after timeout_ms (0 = none), or as soon as
// `cancelled` (if set; asked at least every 200 ms) returns true. A program that
// cannot be started is a Status error ("cannot run skopeo: No such file or
// directory"); a program that runs and fails is a CommandResult.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::function<void(std::string_view)>& on_stdout_line = {},
                                 int64_t timeout_ms = 0,
                                 const std::function<bool()>& cancelled = {});

// RunCommand for a LaunchPlan (exec/launch.h): forks, and the child sets up
// what the plan says (a private mount namespace with its stage binds, the
// account, the environment, the directory) and execs, with no_new_privs
// set. The pipes, process group, timeout and cancelling work as for
// RunCommand. A plan that cannot be carried out (a mount, the account,
// exec) is a Status error: "cannot run skopeo: No such file or directory".
// The caller's process forks: call it where a fork is safe (no other
// thread holds a lock the child's setup needs).
Result<CommandResult> RunPlan(const LaunchPlan& plan,
                              const std::function<void(std::string_view)>& on_stdout_line = {},
                              int64_t timeout_ms = 0, const std::function<bool()>& cancelled = {});

// The most useful line of a tool's stderr for a user: the last non-empty
// line, with logrus framing (`time="..." level=fatal msg="..."`) and umoci's
// "⨯ " marker reduced to the message. "" when there is none.
std::string LastErrorLine(std::string_view stderr_text);

}  // namespace gpupool::exec
