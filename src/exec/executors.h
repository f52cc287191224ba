// Which executors a node offers, found once when the agent starts, and the
// executor for one task. See exec/executor.h.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/cgroup.h"
#include "exec/exec_config.h"
#include "exec/executor.h"

namespace gpupool::exec {

struct ExecEnvironment {
  std::optional<CgroupTree> cgroups;  // none: rlimits and the shim's memory watch
  std::string limits_mode;            // the start-up line: which limits apply and why
  // Allowed by the provider and working here, the default first.
  std::vector<std::string> available;
  std::map<std::string, std::string> unavailable;  // allowed but broken: why
  bool sandbox_images = false;  // the sandbox works and skopeo and umoci are here
  std::string default_executor() const { return available.empty() ? "" : available[0]; }
};

// Looks at this machine: cgroup v2 delegation, bubblewrap (run once as
// `probe_uid`, the account tasks will use; -1 = this process's), skopeo and
// umoci, the container engines.
ExecEnvironment ProbeExecEnvironment(const ExecConfig& config, int probe_uid, int probe_gid);

// Which executor runs a task that asked for `requested`: itself, or for ""
// the default, except that an image job skips a default that cannot run
// images (process) for the first one that can. "" when none fits.
std::string ChooseExecutor(const std::string& requested, bool has_image,
                           const ExecEnvironment& env);

// The executor for a task (see ChooseExecutor). FailedPrecondition,
// readable, when the node does not offer it.
Result<std::unique_ptr<Executor>> MakeExecutor(const std::string& requested, bool has_image,
                                               const ExecConfig& config,
                                               const ExecEnvironment& env);

}  // namespace gpupool::exec
