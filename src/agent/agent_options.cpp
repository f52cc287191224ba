// The agent's options that need more than a flag: where its state lives by
// default, its control socket, and `--label KEY=VALUE` (declared in agent.h).
#include "agent/agent.h"

#include <unistd.h>

#include <cstdlib>

#include "model/node.h"

namespace gpupool::agent {

std::string ControlSocketPath(const std::string& data_dir) { return data_dir + "/control.sock"; }

std::string DefaultAgentDataDir() {
  if (::geteuid() == 0) return "/var/lib/gpupool-agent";
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && state[0] == '/') return std::string(state) + "/gpupool/agent";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && home[0] == '/' ? home : ".") +
         "/.local/state/gpupool/agent";
}

std::string DefaultNodeName() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

Result<std::map<std::string, std::string>> ParseLabelFlags(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> labels;
  for (const std::string& flag : flags) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("--label " + flag + ": " + why);
    };
    size_t eq = flag.find('=');
    if (eq == std::string::npos) return bad("expected KEY=VALUE, e.g. --label zone=eu-1");
    std::string key = flag.substr(0, eq);
    bool ok = !key.empty() && key.size() <= 128;
    for (char c : key) {
      ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-' || c == '/');
    }
    if (!ok) return bad("the key must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', '-', '/'");
    if (key.starts_with(kReservedLabelPrefix)) {
      return bad("labels starting with \"gpupool/\" are set by the agent itself");
    }
    if (!labels.emplace(key, flag.substr(eq + 1)).second) return bad("the key is given twice");
  }
  return labels;
}

}  // namespace gpupool::agent
