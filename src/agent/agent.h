// The provider agent: `gpupool agent`.
//
// Dials out to the server over one WebSocket (no inbound port), registers
// the node and its GPUs, takes start/stop orders, runs each task through a
// shim (agent/tasks.h), ships output and status reliably (proto/channel.h),
// and heartbeats GPU telemetry. It reconnects with exponential backoff and
// resumes from the last ack; an agent restart finds its tasks on disk.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace gpupool::agent {

struct AgentOptions {
  std::string server_url;     // "https://gpupool.example.edu:8470"
  std::string join_token;     // for enrolling (agent/enrollment.h)
  std::string ca_file;        // trust this CA bundle instead of the join token's CA fingerprint
  bool insecure_tls = false;  // do not check the server's certificate (development only)
  std::string data_dir;
  std::string config_file;    // the provider's config (agent/agent_config.h); empty = defaults
  std::string name;           // node name; the host name by default
  std::string simulate_gpus;  // e.g. "2xA100:80GiB"; empty = real GPUs through NVML
  std::string nvml_library;   // empty: see NvmlLibraryPath
  // The NVIDIA user-space libraries to use instead of the system's
  // (--gpu-driver-dir; ExecConfig::gpu_driver_dir). Wins over the config
  // file's gpu_driver_dir. Empty: the file's, else the system's.
  std::string gpu_driver_dir;
  // libgpushare.so, which caps GPU shares (--gpushare-library;
  // ExecConfig::gpushare_library). Wins over the config file's. Empty: the
  // file's, else the one beside the binary (DefaultGpushareLibrary).
  std::string gpushare_library;
  // nvidia-cuda-mps-control, for `sharing: mps` (--mps-control; the agent
  // config's mps_control). Wins over the config file's. Empty: the file's,
  // else the one on the PATH.
  std::string mps_control;
  std::string owner_group;  // the group (lab) that owns this machine (--owner-group)
  std::map<std::string, std::string> labels;  // node labels jobs can ask for (--label k=v)
  // Where the other nodes of a multi-node job reach this one (--advertise-addr;
  // see CheckAdvertiseAddr). Empty: the config's advertise_addr, else the
  // local address of the connection to the server.
  std::string advertise_addr;
  bool kill_tasks_on_exit = false;  // on SIGTERM stop running jobs too (gpupool dev)
  int64_t kill_grace_ms = 10'000;   // SIGTERM to SIGKILL when the server's stop names none
  int64_t poll_ms = 100;            // how often output files are read
  int64_t max_backoff_ms = 10'000;  // reconnect backoff ceiling
  // The local chunk cache (DATA_DIR/chunk-cache) for job inputs and
  // restored checkpoints: least recently used chunks go beyond this size.
  int64_t chunk_cache_bytes = int64_t{10} << 30;
  // Each container image, compressed and unpacked (--max-image-size); 0:
  // the config file's images.max_image_size (default 20 GiB).
  int64_t max_image_bytes = 0;
};

// `--label KEY=VALUE` flags as a map. Keys are 1-128 characters of
// [A-Za-z0-9._/-] and do not start with "gpupool/" (the agent's own); a
// repeated key, a missing '=' or a bad key is InvalidArgument naming the flag.
Result<std::map<std::string, std::string>> ParseLabelFlags(const std::vector<std::string>& flags);

// Where the agent keeps its tasks when --data-dir is not given:
// /var/lib/gpupool-agent for root, else $XDG_STATE_HOME/gpupool/agent
// (~/.local/state/gpupool/agent).
std::string DefaultAgentDataDir();
// A node's name when --name gives none: the host name.
std::string DefaultNodeName();
// The agent's control socket in its data dir (agent/control_socket.h),
// which `gpupool agent status|pause|resume|reclaim|leave|policy` use.
std::string ControlSocketPath(const std::string& data_dir);

// Runs until SIGINT or SIGTERM, or until `gpupool agent leave` completes;
// returns the process exit code. Every time the agent reads comes from
// `clock` (a RealClock in the first form): wall times for what it reports
// and records, MonoMs for durations and for the attempts' leases. The
// leases are shared with the shims, separate processes that read
// CLOCK_BOOTTIME (RealClock::MonoMs, BootTimeMs in task_files.h), so a
// clock other than the real one suits only an agent whose tasks run under
// that same clock (a test's, a simulator's). `clock` outlives the call.
int RunAgent(const AgentOptions& options);
int RunAgent(const AgentOptions& options, const Clock& clock);

}  // namespace gpupool::agent
