// The shim launcher: one small process per agent that starts the agent's
// task shims by forking itself.
//
// Why: a shim must not be a fork of the agent (the agent has threads, so a
// fork may inherit a lock another thread holds; agent/shim_launch.h), and
// exec'ing the agent's binary for every task costs more than the rest of a
// trivial task's start (loading and relocating OpenSSL and the other shared
// libraries, ~3 ms of CPU). The launcher is the agent's binary exec'd once
// (`gpupool-shim __shim --data-dir DIR`, posix_spawn'd on the first start):
// it is single-threaded and holds nothing of the agent's, so it may fork,
// and its children are shims at the cost of a fork.
//
// Protocol (a SOCK_SEQPACKET socketpair, the launcher's end on its
// descriptor 3): the agent sends one request per shim, the agent's pid for
// the death signal (0: none), the attempt id (for the shim's command line)
// and three descriptors: the sealed options memfd, a memfd with the agent's
// environment at that moment (NUL-separated, so a shim sees the environment
// a direct exec would have given it), and the shim's status pipe. The
// launcher answers with the shim's pid or an errno.
//
// Each shim is set up as before: a new session, stdin /dev/null, stdout the
// status pipe, its options on descriptor 3 and nothing else of the agent's
// or the launcher's open (the launcher's socket included), default signal
// dispositions, nothing blocked. The launcher reaps its shims as they end;
// the agent tells a live shim from a reused pid by the process start time,
// as it does for shims it recovered after a restart.
//
// Lifetime: the launcher exits when the agent's end closes (the agent ended,
// however it ended, or the ShimLauncher was destroyed). A shim started with
// the agent's pid (`--on-exit kill`) has the launcher's death as its death
// signal, so it stops its job then; the others outlive both. A launcher that
// died (killed by hand) is started again by the next Spawn.
//
// Thread-safe: Spawn may be called from any thread.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::agent {

class ShimLauncher {
 public:
  // `data_dir` goes into the launcher's (and so its shims') command line, to
  // show which agent they belong to.
  explicit ShimLauncher(std::string data_dir) : data_dir_(std::move(data_dir)) {}
  ~ShimLauncher();
  ShimLauncher(const ShimLauncher&) = delete;
  ShimLauncher& operator=(const ShimLauncher&) = delete;

  // Starts a shim for ShimOptions as JSON (agent/shim_launch.h) that
  // reports on `status_fd` (not closed here). `agent_pid`: the options'.
  Result<pid_t> Spawn(std::string_view options_json, int status_fd, const std::string& attempt_id,
                      int agent_pid);

  // The launcher's pid, 0 before the first Spawn (for tests).
  pid_t pid() const;

  // The launcher program (main() calls it for `__shim`): serves requests on
  // descriptor 3 until the agent's end closes. Returns the exit code.
  static int Main(int argc, char** argv);

 private:
  Status StartLocked();
  void StopLocked();
  Result<pid_t> RequestLocked(int options_fd, int env_fd, int status_fd,
                              const std::string& attempt_id, int agent_pid, bool* sent);

  const std::string data_dir_;
  mutable std::mutex mu_;
  int sock_ = -1;  // the agent's end
  pid_t pid_ = 0;
};

}  // namespace gpupool::agent
