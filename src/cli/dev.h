// `gpupool dev`: a server and N local agents in one command, for a laptop,
// a demo or a test. The processes are real (`gpupool server` and `gpupool
// agent` children); Ctrl-C or SIGTERM stops the agents (and their jobs), then
// the server. The same --data-dir finds the same jobs and history again.
//
// Nothing outlives dev: its children get SIGTERM when dev ends, however it
// ends (PR_SET_PDEATHSIG), and its agents run with `--on-exit kill`, whose
// shims stop their jobs once their agent is gone. DATA_DIR/lock (and the
// server's and agents' own locks) keep a second dev off a directory one
// still uses.
#pragma once

#include <string>

namespace gpupool::cli {

struct DevOptions {
  std::string data_dir;  // default: $XDG_DATA_HOME/gpupool/dev or ~/.local/share/gpupool/dev
  std::string listen = "127.0.0.1:8470";
  int agents = 2;
  std::string simulate_gpus = "2xA100:80GiB";  // "none" for no GPUs
  std::string env_file;                        // write GPUPOOL_SERVER / GPUPOOL_TOKEN here
  bool write_config = true;                    // point the CLI's config file at this pool
  std::string log_level = "info";
  std::string agent_config;  // passed to each agent as --config (docs/provider-guide.md)
  // Passed to each agent as --gpu-driver-dir: an absolute path; checked
  // before anything starts.
  std::string gpu_driver_dir;
};

int RunDev(const DevOptions& options);

}  // namespace gpupool::cli
