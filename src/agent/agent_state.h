// AgentStateFile: DATA_DIR/agent.json, what an agent keeps across restarts
// of its own: the last server order it applied (so a restarted agent takes
// none again that the server saw acknowledged) and its node id.
//
// Saved in place: one write of a fixed-size record at offset 0 (the JSON,
// padded with spaces to kBytes). A save creates no file, which matters
// because the agent saves once per acknowledged burst of orders (a new
// file per save was a tenth of a busy agent's CPU, docs/performance.md),
// and a write this small is whole or absent after the agent's death.
// Single-threaded (the agent's event loop).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace gpupool::agent {

struct AgentState {
  int64_t last_server_seq = 0;
  std::string node_id;
};

class AgentStateFile {
 public:
  static constexpr size_t kBytes = 256;

  explicit AgentStateFile(std::string path) : path_(std::move(path)) {}

  // nullopt: no file (a new agent). An error: a file that is not a state.
  Result<std::optional<AgentState>> Load() const;
  Status Save(const AgentState& state);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;         // open for Save
  bool sized_ = false;  // truncated to kBytes since it was opened
};

}  // namespace gpupool::agent
