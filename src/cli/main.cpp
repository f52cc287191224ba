// gpupool: one executable for the server, the agent, the local dev pool and
// the user and operator commands. This file only parses arguments and calls
// the program that does the work.
#include <CLI/CLI.hpp>
#include <cstring>
#include <fstream>
#include <iostream>

#include "agent/agent.h"
#include "cli/commands.h"
#include "cli/dev.h"
#include "common/files.h"
#include "common/log.h"
#include "server/server.h"
#include "sim/openb.h"

using namespace gpupool;

namespace {

void UseLogLevel(const std::string& level) {
  LogLevel l;
  if (ParseLogLevel(level, &l)) SetLogLevel(l);
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after a bare "--" is the job's command (gpupool submit -- cmd).
  std::vector<std::string> job_command;
  int cli_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      for (int j = i + 1; j < argc; ++j) job_command.push_back(argv[j]);
      cli_argc = i;
      break;
    }
  }

  CLI::App app{"gpupool: share a campus's GPUs as one pool"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpupool 0.1.0");
  cli::GlobalFlags g;
  std::string log_level = "info";
  // Client flags may stand before or after the command (gpupool -o json jobs,
  // gpupool jobs -o json): they belong to the app and subcommands fall through.
  app.fallthrough();
  app.add_option("--server", g.server, "server URL (or GPUPOOL_SERVER)");
  app.add_option("--token", g.token, "API token (or GPUPOOL_TOKEN)");
  app.add_option("-o,--output", g.output, "table or json")->check(CLI::IsMember({"table", "json"}));
  auto add_global = [](CLI::App* c) { c->fallthrough(); };

  // server
  server::ServerOptions so;
  so.data_dir = "./gpupool-data";
  auto* server_cmd = app.add_subcommand("server", "run the pool server");
  server_cmd->add_option("--data-dir", so.data_dir, "where state is kept")->capture_default_str();
  server_cmd->add_option("--listen", so.listen, "HOST:PORT to serve on")->capture_default_str();
  server_cmd->add_option("--heartbeat-ms", so.pool.heartbeat_ms, "agent heartbeat interval")
      ->capture_default_str();
  server_cmd
      ->add_option("--node-lost-after-ms", so.pool.node_lost_after_ms,
                   "requeue a disconnected node's jobs after this long")
      ->capture_default_str();
  server_cmd->add_flag("--fsync", so.sqlite_fsync, "fsync every commit (survives power loss)");
  server_cmd->add_option("--log-level", log_level, "debug, info, warn or error");

  // agent
  agent::AgentOptions ao;
  ao.data_dir = "./gpupool-agent";
  std::string join_token_file, on_exit = "keep";
  auto* agent_cmd = app.add_subcommand("agent", "lend this machine's GPUs to a pool");
  agent_cmd->add_option("--server", ao.server_url, "server URL")->required();
  agent_cmd->add_option("--join-token", ao.join_token, "join token (or GPUPOOL_JOIN_TOKEN)");
  agent_cmd->add_option("--join-token-file", join_token_file, "read the join token from a file");
  agent_cmd->add_option("--data-dir", ao.data_dir, "where the agent keeps its tasks")
      ->capture_default_str();
  agent_cmd->add_option("--name", ao.name, "node name (default: the host name)");
  agent_cmd->add_option("--simulate-gpus", ao.simulate_gpus,
                        "report GPUs that do not exist, e.g. 2xA100:80GiB,1xT4:16GiB");
  agent_cmd->add_option("--nvml-library", ao.nvml_library, "path of libnvidia-ml.so.1");
  agent_cmd->add_option("--on-exit", on_exit, "keep or kill running jobs when the agent stops")
      ->check(CLI::IsMember({"keep", "kill"}))
      ->capture_default_str();
  agent_cmd->add_option("--kill-grace-ms", ao.kill_grace_ms, "SIGTERM to SIGKILL grace")
      ->capture_default_str();
  agent_cmd->add_option("--log-level", log_level, "debug, info, warn or error");

  // dev
  cli::DevOptions dev;
  auto* dev_cmd =
      app.add_subcommand("dev", "run a server and local agents (a pool on this machine)");
  dev_cmd->add_option("--agents", dev.agents, "number of agents")->capture_default_str();
  dev_cmd->add_option("--simulate-gpus", dev.simulate_gpus, "GPUs each agent reports, or none")
      ->capture_default_str();
  dev_cmd->add_option("--data-dir", dev.data_dir, "where the pool keeps its state");
  dev_cmd->add_option("--listen", dev.listen, "server HOST:PORT (port 0 picks one)")
      ->capture_default_str();
  dev_cmd->add_option("--env-file", dev.env_file, "write GPUPOOL_SERVER and GPUPOOL_TOKEN here");
  dev_cmd->add_flag("!--no-config", dev.write_config, "do not write the CLI config file");
  dev_cmd->add_option("--log-level", dev.log_level, "debug, info, warn or error");

  // user commands
  cli::SubmitFlags sf;
  auto* submit = app.add_subcommand(
      "submit", "submit a job: gpupool submit job.yaml | gpupool submit --gpus 1 -- CMD");
  add_global(submit);
  submit->add_option("file", sf.file, "job spec (YAML or JSON)");
  submit->add_option("--name", sf.name, "job name");
  submit->add_option("--gpus", sf.gpus, "number of GPUs");
  submit->add_option("--gpu-memory", sf.gpu_memory, "minimum memory per GPU, e.g. 24GiB");
  submit->add_option("--gpu-model", sf.gpu_models, "allowed GPU model (repeatable)");
  submit->add_option("--cpus", sf.cpus, "CPUs, e.g. 4 or 0.5");
  submit->add_option("--memory", sf.memory, "host memory, e.g. 16GiB");
  submit->add_option("--max-runtime", sf.max_runtime, "kill the job after this long, e.g. 2h");
  submit->add_option("--env", sf.env, "KEY=VALUE for the job (repeatable)");
  submit->add_flag("--wait", sf.wait, "wait for the job and exit with its exit code");
  submit->add_flag("-f,--follow", sf.follow, "stream the job's output while waiting");

  std::string states, id;
  int limit = 50;
  bool all_users = false, follow = false;
  auto* jobs = app.add_subcommand("jobs", "list jobs");
  add_global(jobs);
  jobs->add_option("--state", states, "only these states, e.g. pending,running");
  jobs->add_option("--limit", limit, "at most this many (newest)")->capture_default_str();
  jobs->add_flag("--all", all_users, "every user's jobs (admins)");
  auto* job = app.add_subcommand("job", "show one job and its attempts");
  add_global(job);
  job->add_option("id", id, "job id")->required();
  auto* logs = app.add_subcommand("logs", "print a job's output");
  add_global(logs);
  logs->add_option("id", id, "job id")->required();
  logs->add_flag("-f,--follow", follow, "keep printing until the job ends");
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  add_global(cancel);
  cancel->add_option("id", id, "job id")->required();
  auto* nodes = app.add_subcommand("nodes", "list nodes and their GPUs");
  add_global(nodes);
  auto* admin = app.add_subcommand("admin", "operator commands");
  admin->require_subcommand(1);
  auto* join = admin->add_subcommand("join-token", "print the token agents join with");
  add_global(join);

  // sim openb: the FGD paper's experiment on the openb trace (docs/evaluation.md)
  auto* sim_cmd = app.add_subcommand("sim", "simulate the scheduler on a trace");
  sim_cmd->require_subcommand(1);
  auto* sim_openb = sim_cmd->add_subcommand("openb", "the FGD experiment on the openb trace");
  sim::OpenbCommand so_sim;
  sim_openb->add_option("--nodes", so_sim.nodes_path, "node list CSV")->required();
  sim_openb->add_option("--tasks", so_sim.tasks_path, "task list CSV")->required();
  sim_openb
      ->add_option("--policy", so_sim.options.policy,
                   "random, first-fit, best-fit, dot-product, fgd")
      ->check(CLI::IsMember(sched::PolicyNames()));
  sim_openb->add_option("--seed", so_sim.options.seed, "random seed");
  sim_openb->add_option("--out", so_sim.out_dir, "output directory")->required();
  sim_openb->add_option("--inflate-pct", so_sim.options.inflate_pct, "GPU demand, % of capacity");
  sim_openb->add_option("--typical-threshold", so_sim.options.typical_threshold_pct,
                        "FGD: % of all tasks (CPU-only included) the target workload covers");

  try {
    app.parse(cli_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!job_command.empty() && !submit->parsed()) {
    std::cerr << "gpupool: only submit takes a command after --\n";
    return 2;
  }
  UseLogLevel(log_level);

  if (server_cmd->parsed()) return server::RunServer(so);
  if (agent_cmd->parsed()) {
    if (ao.join_token.empty()) {
      if (const char* t = std::getenv("GPUPOOL_JOIN_TOKEN")) ao.join_token = t;
    }
    if (!join_token_file.empty()) {
      auto token = ReadFileTrimmed(join_token_file);
      if (token.ok()) ao.join_token = *token;
      if (!token.ok() || ao.join_token.empty()) {
        std::cerr << "gpupool agent: cannot read the join token from " << join_token_file << "\n";
        return 2;
      }
    }
    if (ao.join_token.empty()) {
      std::cerr << "gpupool agent: a join token is required (--join-token, --join-token-file or "
                   "GPUPOOL_JOIN_TOKEN);"
                   " the pool's admin gets it with `gpupool admin join-token`\n";
      return 2;
    }
    ao.kill_tasks_on_exit = on_exit == "kill";
    return agent::RunAgent(ao);
  }
  if (dev_cmd->parsed()) return cli::RunDev(dev);
  if (submit->parsed()) {
    sf.command = job_command;
    return cli::CmdSubmit(g, sf);
  }
  if (jobs->parsed()) return cli::CmdJobs(g, states, limit, all_users);
  if (job->parsed()) return cli::CmdJob(g, id);
  if (logs->parsed()) return cli::CmdLogs(g, id, follow);
  if (cancel->parsed()) return cli::CmdCancel(g, id);
  if (nodes->parsed()) return cli::CmdNodes(g);
  if (join->parsed()) return cli::CmdJoinToken(g);
  if (sim_openb->parsed()) return sim::RunOpenbCommand(so_sim);
  return 2;
}
