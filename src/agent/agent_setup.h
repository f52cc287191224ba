// What an agent finds out once, before it connects: which GPUs it can read,
// which executors work on this machine, where its servers' agent channels
// are, and its credential (enrolling if need be). agent.cpp calls these at
// start; each logs what it found, as an operator reading the agent's first
// lines expects.
//
// Contract: OpenGpus, ProbeExecutors and AgentChannelUrls touch no state of
// their own; Credentials may block (it waits for a server that is not up
// yet, up to about five minutes) and writes the credential into the data
// directory. Errors are values; an InvalidArgument is the operator's to fix.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/enrollment.h"
#include "common/status.h"
#include "exec/executors.h"
#include "gpu/gpu_source.h"

namespace gpupool::agent {

// The machine's GPUs: simulated ones when `simulate` is set (`seed` makes
// their UUIDs), else NVML from `nvml_library` or the driver directory. No
// NVML is not an error: the agent then lends CPU only, through a source that
// reads no GPUs and says why.
Result<std::unique_ptr<GpuSource>> OpenGpus(const std::string& simulate, const std::string& seed,
                                            const std::string& nvml_library,
                                            const std::string& gpu_driver_dir);

// The executors `config` allows that work here, as uid `first_uid` when the
// agent runs as root; logs which work, which do not and why, and the limits.
exec::ExecEnvironment ProbeExecutors(const exec::ExecConfig& config, bool root);

// The agent channel's WebSocket URL of each server of a list
// (net/server_list.h): wss for https, ws for http.
Result<std::vector<std::string>> AgentChannelUrls(const std::string& server_list);

// The node's credential, enrolling if need be. A server that is not up yet is
// waited for; a refusal is returned.
Result<AgentCredentials> Credentials(const AgentOptions& options);

}  // namespace gpupool::agent
