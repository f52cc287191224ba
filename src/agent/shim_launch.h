// Starting a task's shim (agent/shim.h) as a program of its own.
//
// The agent has threads (the checkpoint stager's HTTP and TLS, the blob
// read-ahead), so a child forked from it may inherit a lock some other
// thread held at the fork (the TLS context cache's, the logger's) and
// deadlock the first time it takes it. So the shim is never a bare fork of
// the agent: SpawnShim starts it with posix_spawn (which shares the
// agent's memory until the exec and runs no code of ours in between) as the
// agent's own binary (/proc/self/exe, which works even after the binary was
// replaced on disk)
// as `gpupool-shim __shim --data-dir DIR --attempt ID`. Everything the shim
// needs (ShimOptions: the start order, the provider's executor config and
// probed environment, the blob store's address and credentials) reaches it
// as JSON in a sealed memfd on descriptor 3, never on disk or in argv.
// ShimMain, called by main() for that command line, reads it and runs the
// shim.
//
// Thread-safe: SpawnShim may be called from any thread of the agent.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "agent/shim.h"
#include "common/status.h"

namespace gpupool::agent {

// The hidden subcommand main() hands to ShimMain.
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

// Forks and execs the shim for `options` in a new session; its stdout is
// `status_fd` (the agent's status pipe), stdin /dev/null, stderr the
// agent's. `data_dir` goes into its command line so that it shows which
// agent it belongs to. Returns the shim's pid.
Result<pid_t> SpawnShim(const ShimOptions& options, const std::string& data_dir, int status_fd);

// The shim program: reads ShimOptions from descriptor 3 and runs the shim.
// Returns the process exit code.
int ShimMain(int argc, char** argv);

}  // namespace gpupool::agent
