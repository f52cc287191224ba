// `gpupool agent join URL --token-file F` and `gpupool agent leave --purge`:
// a provider's machine into the pool in one command, and out of it.
//
// join: checks the machine (agent/selftest.h; a failed check stops it
// unless --force), writes CONFIG_DIR/agent.yaml (the commented default
// config, kept if there is one), CONFIG_DIR/join.token (0600) and
// CONFIG_DIR/agent.env (the agent's flags, as gpupool-agent.service reads
// them), enrolls (the node's credential in DATA_DIR), enables and starts
// the service where systemd runs (else prints the command that starts the
// agent), and says what is lent and how to change it.
//
// leave --purge: the running agent drains and deregisters (the control
// socket's leave), the service is disabled, and the files join wrote go
// (CONFIG_DIR's three, DATA_DIR).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace gpupool::cli {

struct JoinFlags {
  std::string server;
  std::string token_file;
  std::string token;
  std::string name;  // default: the host name
  std::string owner_group;
  std::vector<std::string> labels;
  std::string config_dir = "/etc/gpupool";
  std::string data_dir = "/var/lib/gpupool-agent";
  std::string simulate_gpus;  // development: a node of simulated GPUs
  std::string gpu_driver_dir;
  bool force = false;     // join although a check failed
  bool no_start = false;  // write and enroll, do not start the service
};

CLI::App* AddJoinCommand(CLI::App& agent, JoinFlags& f);
int RunJoin(const JoinFlags& f);
// After the agent left (or when none runs, saying so): the service
// disabled and the files gone.
int PurgeAgent(const std::string& config_dir, const std::string& data_dir, bool left);

}  // namespace gpupool::cli
