// Interactive sessions and the ways into running jobs (issue 9):
//   session start|list|stop|open   (session_commands.cpp)
//   session connect, exec, shell   (remote_commands.cpp): WebSockets to the
//   server's /v1/jobs/{id}/connect and /exec (server/session_gateway.h),
//   which the server relays through the agent's own connection.
// Each returns the process exit code (exec and shell: the command's).
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"

namespace gpupool::cli {

struct SessionStartFlags {
  std::string kind = "shell";  // shell or jupyter
  std::string name;
  std::string gpus, cpus, memory, gpu_memory, image, executor, group;
  std::string idle_timeout;  // "30m"; empty: the default
  std::string max;           // max_runtime, "8h"; empty: none
  std::vector<int> ports;    // ports tunnels may reach
  bool any_port = false;
  std::vector<std::string> env;  // KEY=VALUE
  std::string workdir;           // upload this directory as the session's work directory
  bool no_wait = false;          // return once submitted
  int64_t wait_s = 600;          // how long to wait for it to run
};

int CmdSessionStart(const GlobalFlags& g, const SessionStartFlags& f);
int CmdSessionList(const GlobalFlags& g, bool all_users);
int CmdSessionStop(const GlobalFlags& g, const std::string& id);
// Prints a one-time link that signs the browser in to the session's Jupyter.
int CmdSessionOpen(const GlobalFlags& g, const std::string& id);

// Forwards each "LOCAL:REMOTE" (REMOTE a port inside the job, or "jupyter")
// from 127.0.0.1:LOCAL until interrupted. No ports: a Jupyter session's
// notebook on a free local port.
int CmdSessionConnect(const GlobalFlags& g, const std::string& id,
                      const std::vector<std::string>& ports);
// Runs argv inside the job; with a terminal on stdin, on a PTY (unless
// no_tty). Returns the command's exit code.
int CmdExec(const GlobalFlags& g, const std::string& id, const std::vector<std::string>& argv,
            bool tty, bool no_tty);
// An interactive shell inside the job, on a PTY ($SHELL-like: bash if the
// job has it, else sh). Returns the shell's exit code.
int CmdShell(const GlobalFlags& g, const std::string& id);

}  // namespace gpupool::cli
