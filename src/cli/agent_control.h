// `gpupool agent status|pause|resume|reclaim|leave|policy|reload`: the
// provider's local commands, sent to a running agent over its control
// socket (agent/control_socket.h) in its data dir. Only root, the agent's
// own account and the owner its config names may use them.
#pragma once

#include <string>
#include <vector>

namespace gpupool::cli {

struct AgentControlFlags {
  std::string data_dir;
  std::string command;            // status, pause, resume, reclaim, leave, policy, reload
  std::vector<std::string> gpus;  // reclaim --gpu (index or UUID); empty: all
  bool now = false;               // reclaim --now
  bool json = false;              // status --json
  std::string policy_file;        // policy set FILE; empty with policy: reset
};

// Prints the agent's answer; returns the process exit code (0 done, 1 the
// agent refused or failed, 2 no agent reachable).
int RunAgentControl(const AgentControlFlags& flags);

}  // namespace gpupool::cli
