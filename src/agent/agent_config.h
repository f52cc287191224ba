// The provider's agent config file (`gpupool agent --config FILE`): how this
// machine runs jobs. See docs/provider-guide.md for every field.
//
//   executors: [sandbox, docker]   # allowed, the first is the default;
//                                  # "process" (no isolation) only if listed
//   sandbox:
//     uids: 190000-190999          # a root agent runs each task as its own uid
//     host_paths: [/usr, /bin, /sbin, /lib, /lib32, /lib64, /libx32, /etc]
//     devices_dir: /dev
//     bwrap: bwrap
//     ldconfig: /sbin/ldconfig
//   images: {cache_dir: /var/cache/gpupool/images, cache_size: 50GiB,
//            skopeo: skopeo, umoci: umoci}
//   docker: {command: docker, gpus: cdi, extra_args: []}   # gpus: cdi | gpus
//   podman: {command: podman, gpus: cdi}
//   limits:
//     cgroup: auto                 # auto | none | /sys/fs/cgroup/...
//     pids: 4096                   # per task
//     memory: 16GiB                # for jobs that name none (absent: no limit)
//     cpus: 4                      # likewise
//     disk: 100GiB                 # work directory cap, likewise
//     memory_poll: 100ms           # without a cgroup: how often memory is measured
//   policy: {...}                  # what is lent, when, to whom (agent/policy.h)
//   owner: alice                   # may use the control socket besides root
//                                  # (a user name or uid)
//   advertise_addr: 100.64.0.7     # where other nodes reach this one (the
//                                  # master of a multi-node job); read at
//                                  # start, --advertise-addr wins
//
// Parsing is strict like job specs: unknown fields, wrong types and values
// out of range are InvalidArgument naming the field path. Every field is
// optional. Pure functions (LoadAgentConfig reads one file).
#pragma once

#include <string>
#include <string_view>

#include "agent/policy.h"
#include "common/status.h"
#include "exec/exec_config.h"

namespace gpupool::agent {

struct AgentConfig {
  exec::ExecConfig exec;
  ProviderPolicy policy;
  std::string owner;           // user name or uid; empty: root and the agent's own account only
  std::string advertise_addr;  // empty: the address of the connection to the server
};

// An address other nodes reach this one at: a host name, an IPv4 address or
// an IPv6 address (no brackets, no port), as the job's MASTER_ADDR takes it.
// InvalidArgument, readable, otherwise.
Status CheckAdvertiseAddr(std::string_view addr);

// `data_dir` fills the defaults that live under it (images.cache_dir).
Result<AgentConfig> ParseAgentConfig(std::string_view text, const std::string& data_dir);
// A policy file for `gpupool agent policy set`: the policy's fields at the
// top, or an agent config whose `policy:` is taken. Errors name the field
// ("policy.windows.weekly[0].from (line 4): ...").
Result<ProviderPolicy> ParsePolicyText(std::string_view text);
// Errors are prefixed with the path.
Result<AgentConfig> LoadAgentConfig(const std::string& path, const std::string& data_dir);
// The config of an agent started without --config.
AgentConfig DefaultAgentConfig(const std::string& data_dir);

}  // namespace gpupool::agent
