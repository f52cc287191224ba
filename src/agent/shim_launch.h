// Starting a task's shim (agent/shim.h) as a program of its own.
//
// The agent has threads (the checkpoint stager's HTTP and TLS, the blob
// read-ahead), so a child forked from it may inherit a lock some other
// thread held at the fork (the TLS context cache's, the logger's) and
// deadlock the first time it takes it. So the shim is never a fork of the
// agent: the agent's ShimLauncher (agent/shim_launcher.h), its own binary
// exec'd once as `gpupool-shim __shim --data-dir DIR`, single-threaded,
// forks it. Everything the shim needs (ShimOptions: the start order, the
// provider's executor config and probed environment, the blob store's
// address and credentials) reaches it as JSON in a sealed memfd passed over
// the launcher's socket, never on disk or in argv.
//
// Thread-safe: SpawnShim may be called from any thread of the agent.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "agent/shim.h"
#include "agent/shim_launcher.h"
#include "common/status.h"

namespace gpupool::agent {

// The hidden subcommand main() hands to ShimLauncher::Main.
inline constexpr const char* kShimCommand = "__shim";

// ShimOptions as JSON, and back. The decoded options point into the
// returned holder's own ExecConfig and ExecEnvironment.
struct DecodedShimOptions {
  ShimOptions options;
  exec::ExecConfig exec_config;
  exec::ExecEnvironment exec_env;
};
Result<std::string> EncodeShimOptions(const ShimOptions& options);
Result<std::unique_ptr<DecodedShimOptions>> DecodeShimOptions(std::string_view json);

// Starts the shim for `options` through `launcher`; its stdout is
// `status_fd` (the agent's status pipe), stdin /dev/null, stderr the
// agent's. Returns the shim's pid.
Result<pid_t> SpawnShim(ShimLauncher& launcher, const ShimOptions& options, int status_fd);

// In the launcher's child: decodes the options and runs the shim. `parent`
// (the launcher) stands for the agent in the shim's death check. Returns the
// process exit code.
int RunShimWithOptions(std::string_view json_text, pid_t parent);

}  // namespace gpupool::agent
