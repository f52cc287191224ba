#include "agent/agent_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace gpupool::agent {

Result<std::optional<AgentState>> AgentStateFile::Load() const {
  auto text = ReadFile(path_);
  if (!text.ok()) return std::optional<AgentState>();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  auto seq = j.is_object() ? j.find("last_server_seq") : j.end();
  if (!j.is_object() || seq == j.end() || !seq->is_number_integer()) {
    return Status::InvalidArgument(path_ + " is not an agent state (last_server_seq missing)");
  }
  AgentState s;
  s.last_server_seq = seq->get<int64_t>();
  if (auto id = j.find("node_id"); id != j.end() && id->is_string())
    s.node_id = id->get<std::string>();
  return std::optional<AgentState>(std::move(s));
}

Status AgentStateFile::Save(const AgentState& state) {
  std::string text =
      nlohmann::json{{"last_server_seq", state.last_server_seq}, {"node_id", state.node_id}}.dump();
  if (text.size() >= kBytes) {  // a node id far longer than the server makes
    fd_.Reset();                // the file is replaced
    sized_ = false;
    return WriteFileAtomic(path_, text + "\n");
  }
  if (!fd_.valid()) {
    fd_.Reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!fd_.valid()) return Status::Internal("cannot open " + path_ + ": " + std::strerror(errno));
  }
  text.resize(kBytes - 1, ' ');
  text += '\n';
  if (::pwrite(fd_.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return Status::Internal("cannot write " + path_ + ": " + std::strerror(errno));
  }
  // Once after opening: nothing of an older, longer file stays behind.
  if (!sized_ && ::ftruncate(fd_.get(), kBytes) != 0) {
    return Status::Internal("cannot truncate " + path_ + ": " + std::strerror(errno));
  }
  sized_ = true;
  return Status::Ok();
}

}  // namespace gpupool::agent
