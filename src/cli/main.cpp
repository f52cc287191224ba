// gpupool: one executable for the server, the agent, the local dev pool and
// the user and operator commands. This file only parses arguments and calls
// the program that does the work.
#include <CLI/CLI.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "agent/agent.h"
#include "agent/agent_config.h"
#include "agent/shim_launch.h"
#include "cli/agent_control.h"
#include "cli/commands.h"
#include "cli/dev.h"
#include "cli/identity_commands.h"
#include "cli/join_command.h"
#include "cli/limit_commands.h"
#include "cli/money_commands.h"
#include "cli/selftest_command.h"
#include "cli/server_flags.h"
#include "cli/session_commands.h"
#include "common/files.h"
#include "common/log.h"
#include "common/units.h"
#include "server/server.h"
#include "sim/campus_command.h"
#include "sim/openb.h"

using namespace gpupool;

namespace {

void UseLogLevel(const std::string& level) {
  LogLevel l;
  if (ParseLogLevel(level, &l)) SetLogLevel(l);
}

// A path given on the command line, made absolute (the agent's shims and
// sandboxes do not share its working directory).
std::string AbsolutePath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

}  // namespace

int main(int argc, char** argv) {
  // A task's shim, started by its agent (agent/shim_launch.h): not a user
  // command, and kept out of the argument parser.
  if (argc > 1 && std::strcmp(argv[1], agent::kShimCommand) == 0) {
    return agent::ShimLauncher::Main(argc, argv);
  }
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
  app.add_option("--ca-fingerprint", g.ca_fingerprint,
                 "pin the pool CA: sha256:<hex> (or GPUPOOL_CA_FINGERPRINT)");
  app.add_option("--ca-file", g.ca_file, "trust this CA bundle (or GPUPOOL_CA_FILE)");
  app.add_flag("--insecure", g.insecure,
               "do not check the server's certificate (development only)");
  app.add_option("-o,--output", g.output, "table, json, or csv (reports: usage, ledger, invoice)")
      ->check(CLI::IsMember({"table", "json", "csv"}));
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
  server_cmd->add_option("--store", so.store_url,
                         "postgresql://USER@HOST/DB: keep the pool's state in PostgreSQL (default: "
                         "SQLite in the data directory)");
  server_cmd->add_option("--blob-dir", so.blob_dir,
                         "keep checkpoints and job inputs in DIR (default: DATA_DIR/blobs); the "
                         "servers of one pool on PostgreSQL share one, e.g. on NFS");
  server_cmd
      ->add_option("--leader-lease-ms", so.leader_lease_ms,
                   "on PostgreSQL: the leader's lease; a standby takes over within about this "
                   "long of the leader's death")
      ->capture_default_str();
  server_cmd->add_flag("--fsync", so.fsync,
                       "flush every commit and blob upload to disk (survives power loss)");
  server_cmd->add_option("--scheduler-config", so.scheduler_config,
                         "YAML file: fair-share groups, quotas, preemption");
  server_cmd->add_option("--web-dir", so.web_dir,
                         "serve the web dashboard's files from this directory under /ui");
  server_cmd->add_option("--metrics-listen", so.metrics_listen,
                         "HOST:PORT: also serve GET /metrics there, plain HTTP, without a token "
                         "(for a Prometheus on a trusted network)");
  server_cmd->add_option("--sessions-listen", so.sessions_listen,
                         "HOST:PORT: serve interactive sessions (Jupyter) there, an origin of "
                         "their own (default: --listen's host, its port + 1)");
  server_cmd->add_option("--sessions-url", so.sessions_url,
                         "the URL browsers reach --sessions-listen at, when not the server's "
                         "host name with that port (a reverse proxy, a name of its own)");
  server_cmd->add_option("--log-level", log_level, "debug, info, warn or error");
  server_cmd->add_option("--checkpoint-keep", so.pool.checkpoint_keep, "checkpoints kept per job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  auto server_duration = [server_cmd](const char* name, int64_t& ms, const char* help) {
    server_cmd->add_option_function<std::string>(
        name,
        [name, &ms](const std::string& v) {
          auto parsed = ParseDurationMs(v);
          if (!parsed.ok() || *parsed <= 0)
            throw CLI::ValidationError(name, "expected a duration such as 30m or 1h");
          ms = *parsed;
        },
        help);
  };
  server_cmd->add_flag("--insecure", so.insecure,
                       "serve plain HTTP without TLS (development on one machine only)");
  server_cmd->add_option("--tls-cert", so.tls_cert_file,
                         "your own server certificate chain (PEM) instead of the pool CA's");
  server_cmd->add_option("--tls-key", so.tls_key_file, "the key of --tls-cert (PEM)");
  server_cmd->add_option("--tls-san", so.tls_sans,
                         "another DNS name or IP address agents and users reach the server at "
                         "(repeatable)");
  server_cmd->add_flag("!--no-agent-mtls", so.agent_mtls,
                       "accept agents by node token alone, without their client certificate");
  server_cmd->add_option_function<std::string>(
      "--rate-limit",
      [&so](const std::string& v) {
        // "50/s" or "50/s,200" (rate and burst).
        double rate = 0, burst = 0;
        char unit[3] = {};
        int n = std::sscanf(v.c_str(), "%lf/%2[s],%lf", &rate, unit, &burst);
        if (n < 2 || rate < 0)
          throw CLI::ValidationError("--rate-limit", "expected N/s or N/s,BURST");
        so.api.per_token = {rate, n == 3 ? burst : 4 * rate};
      },
      "requests per token: N/s[,BURST] (default 50/s,200; 0/s = no limit)");
  server_cmd->add_option("--auth-proxy-header", so.api.proxy_user_header,
                         "single sign-on: trust this header (e.g. X-Remote-User) for the user "
                         "name, from --auth-proxy-trusted addresses only");
  server_cmd->add_option("--auth-proxy-trusted", so.api.proxy_trusted,
                         "the reverse proxy's address (repeatable)");
  server_cmd->add_option_function<std::string>(
      "--attempt-lease",
      [&so](const std::string& v) {
        auto parsed = ParseDurationMs(v);
        if (!parsed.ok() || *parsed < 0 || (*parsed > 0 && *parsed < 1000))
          throw CLI::ValidationError("--attempt-lease",
                                     "expected a duration of at least 1s such as 30s, or 0");
        so.pool.attempt_lease_ms = *parsed;
      },
      "a job whose agent has not renewed its lease for this long is stopped by its own "
      "machine, and only then started elsewhere (default 30s; 0 = no leases: a job cut off "
      "from the server may run twice)");
  server_duration("--blob-gc-grace", so.blob_gc_grace_ms,
                  "blob GC keeps unreachable blobs younger than this (default 1h)");
  server_duration("--blob-gc-interval", so.blob_gc_interval_ms,
                  "run blob garbage collection this often (default 1h)");
  cli::AddServerLimitFlags(*server_cmd, so);
  auto server_bytes = [server_cmd](const char* name, int64_t& bytes, const char* help) {
    server_cmd->add_option_function<std::string>(
        name,
        [name, &bytes](const std::string& v) {
          auto parsed = ParseBytes(v);
          if (!parsed.ok() || *parsed <= 0)
            throw CLI::ValidationError(name, "expected a size such as 512MiB or 1GiB");
          bytes = *parsed;
        },
        help);
  };
  server_cmd->add_option("--telemetry-tiers", so.telemetry_tiers,
                         "GPU and pool telemetry history kept in DATA_DIR/telemetry.db, as "
                         "STEP:KEEP tiers (default 10s:1d,5m:30d)");
  server_bytes("--telemetry-max-size", so.telemetry_max_bytes,
               "bound of the telemetry history's file; past it the oldest points go (default "
               "1GiB)");
  server_bytes("--max-job-output", so.pool.logs.max_job_output_bytes,
               "output kept per job (per attempt and rank); the rest is dropped (default 1GiB)");
  server_duration("--log-retention", so.pool.logs.retention_ms,
                  "keep a job's logs this long after it ended (default 30d)");
  server_bytes("--log-budget", so.pool.logs.budget_bytes,
               "logs kept for all jobs; beyond it the longest-ended jobs' logs go (default 20GiB)");

  // agent
  agent::AgentOptions ao;
  ao.data_dir = agent::DefaultAgentDataDir();
  std::string join_token_file, on_exit = "keep";
  auto* agent_cmd = app.add_subcommand("agent", "lend this machine's GPUs to a pool");
  agent_cmd->add_option("--server", ao.server_url, "server URL (required to run the agent)");
  agent_cmd->add_option("--join-token", ao.join_token, "join token (or GPUPOOL_JOIN_TOKEN)");
  agent_cmd->add_option("--join-token-file", join_token_file, "read the join token from a file");
  agent_cmd->add_option("--ca-file", ao.ca_file,
                        "trust this CA bundle instead of the join token's CA fingerprint");
  agent_cmd->add_flag("--insecure", ao.insecure_tls,
                      "do not check the server's certificate (development only)");
  agent_cmd->add_option("--data-dir", ao.data_dir, "where the agent keeps its tasks")
      ->capture_default_str();
  agent_cmd->add_option("--config", ao.config_file,
                        "the provider's config: executors, sandbox, images, limits "
                        "(docs/provider-guide.md)");
  agent_cmd->add_option("--name", ao.name, "node name (default: the host name)");
  agent_cmd->add_option("--simulate-gpus", ao.simulate_gpus,
                        "report GPUs that do not exist, e.g. 2xA100:80GiB,1xT4:16GiB");
  agent_cmd->add_option("--nvml-library", ao.nvml_library, "path of libnvidia-ml.so.1");
  agent_cmd->add_option("--gpu-driver-dir", ao.gpu_driver_dir,
                        "take the NVIDIA libraries (libnvidia-ml.so.1, libcuda.so.1) from DIR "
                        "instead of the system's, for this agent and its jobs");
  agent_cmd->add_option("--gpushare-library", ao.gpushare_library,
                        "the libgpushare.so that holds GPU shares to their memory cap "
                        "(default: lib/libgpushare.so beside the binary's bin/)");
  agent_cmd->add_option("--mps-control", ao.mps_control,
                        "NVIDIA's nvidia-cuda-mps-control, for a policy that says sharing: mps "
                        "(default: the one on the PATH)");
  std::vector<std::string> agent_labels;
  agent_cmd->add_option("--label", agent_labels,
                        "node label KEY=VALUE jobs can ask for (repeatable)");
  agent_cmd->add_option("--owner-group", ao.owner_group,
                        "the group (lab) owning this machine: its jobs may reclaim it");
  agent_cmd->add_option("--advertise-addr", ao.advertise_addr,
                        "the address other nodes of a multi-node job reach this one at, e.g. "
                        "an overlay network's (default: this end of the connection to the server)");
  agent_cmd->add_option("--on-exit", on_exit, "keep or kill running jobs when the agent stops")
      ->check(CLI::IsMember({"keep", "kill"}))
      ->capture_default_str();
  agent_cmd->add_option("--kill-grace-ms", ao.kill_grace_ms, "SIGTERM to SIGKILL grace")
      ->capture_default_str();
  agent_cmd->add_option("--log-level", log_level, "debug, info, warn or error");
  std::string chunk_cache = "10GiB";
  agent_cmd
      ->add_option("--chunk-cache", chunk_cache,
                   "size of the local cache of job inputs and checkpoints")
      ->capture_default_str();
  std::string max_image_size;
  agent_cmd->add_option("--max-image-size", max_image_size,
                        "largest container image pulled, compressed and unpacked (default: the "
                        "config's images.max_image_size, 20GiB)");
  cli::SelftestFlags selftest_flags;
  CLI::App* selftest_cmd = cli::AddSelftestCommand(*agent_cmd, selftest_flags);
  // The provider's local commands, over the running agent's control socket.
  cli::AgentControlFlags ac;
  ac.data_dir = ao.data_dir;
  std::vector<CLI::App*> agent_controls;
  auto add_control = [&](const char* name, const char* help) {
    auto* c = agent_cmd->add_subcommand(name, help);
    c->add_option("--data-dir", ac.data_dir, "the running agent's data dir")->capture_default_str();
    c->callback([&ac, name] { ac.command = name; });
    agent_controls.push_back(c);
    return c;
  };
  auto* ac_status = add_control("status", "what is lent, what runs, the policy in force");
  ac_status->add_flag("--json", ac.json, "print the agent's answer as JSON");
  add_control("pause", "take no new work; running jobs go on");
  add_control("resume", "lend again (also ends reclaims)");
  auto* ac_reclaim = add_control(
      "reclaim", "take GPUs back: checkpoint and stop the jobs on them (requeued elsewhere)");
  ac_reclaim->add_option("--gpu", ac.gpus, "GPU index or UUID (repeatable; default: all)");
  ac_reclaim->add_flag("--now", ac.now, "kill the jobs at once instead of after the grace");
  auto* ac_leave = add_control("leave", "drain, then deregister from the pool and exit");
  bool leave_purge = false;
  std::string leave_config_dir = "/etc/gpupool";
  ac_leave->add_flag("--purge", leave_purge,
                     "then disable the service and remove what `join` wrote");
  ac_leave->add_option("--config-dir", leave_config_dir, "where `join` wrote agent.yaml")
      ->capture_default_str();
  cli::JoinFlags join_flags;
  CLI::App* join_cmd = cli::AddJoinCommand(*agent_cmd, join_flags);
  auto* ac_policy = add_control("policy",
                                "set the lending policy from FILE, or without FILE go back to the "
                                "config file's");
  ac_policy->add_option("file", ac.policy_file, "YAML: the policy's fields, or an agent config");
  add_control("reload", "re-read the agent's --config (its policy and owner)");

  // dev
  cli::DevOptions dev;
  auto* dev_cmd =
      app.add_subcommand("dev", "run a server and local agents (a pool on this machine)");
  dev_cmd->add_option("--agents", dev.agents, "number of agents")->capture_default_str();
  dev_cmd
      ->add_option("--simulate-gpus", dev.simulate_gpus,
                   "GPUs each agent reports, or none (the default is none with --gpu-driver-dir)")
      ->capture_default_str();
  dev_cmd->add_option("--gpu-driver-dir", dev.gpu_driver_dir,
                      "the agents' and their jobs' NVIDIA libraries (libnvidia-ml.so.1, "
                      "libcuda.so.1) from DIR instead of the system's");
  dev_cmd->add_option("--data-dir", dev.data_dir, "where the pool keeps its state");
  dev_cmd->add_option("--listen", dev.listen, "server HOST:PORT (port 0 picks one)")
      ->capture_default_str();
  dev_cmd->add_option("--env-file", dev.env_file, "write GPUPOOL_SERVER and GPUPOOL_TOKEN here");
  dev_cmd->add_flag("!--no-config", dev.write_config, "do not write the CLI config file");
  dev_cmd->add_option("--log-level", dev.log_level, "debug, info, warn or error");
  dev_cmd->add_option("--agent-config", dev.agent_config,
                      "the agents' config file (executors, sandbox, images, limits)");

  // user commands
  cli::SubmitFlags sf;
  auto* submit = app.add_subcommand(
      "submit", "submit a job: gpupool submit job.yaml | gpupool submit --gpus 1 -- CMD");
  add_global(submit);
  submit->add_option("file", sf.file, "job spec (YAML or JSON)");
  submit->add_option("--name", sf.name, "job name");
  submit->add_option("--gpus", sf.gpus, "number of GPUs, or a share of one: 0.5 or 500m");
  submit->add_option("--gpu-memory", sf.gpu_memory, "minimum memory per GPU, e.g. 24GiB");
  submit->add_option("--gpu-model", sf.gpu_models, "allowed GPU model (repeatable)");
  submit->add_option("--mig", sf.mig, "one MIG instance of at least this profile, e.g. 1g.10gb");
  submit->add_option("--cpus", sf.cpus, "CPUs, e.g. 4 or 0.5");
  submit->add_option("--memory", sf.memory, "host memory, e.g. 16GiB");
  submit->add_option("--max-runtime", sf.max_runtime, "kill the job after this long, e.g. 2h");
  submit->add_option("--env", sf.env, "KEY=VALUE for the job (repeatable)");
  submit->add_option("--priority", sf.priority, "interactive, normal or opportunistic");
  submit->add_option("--group", sf.group, "the group (lab) whose share the job uses");
  submit->add_option("--image", sf.image,
                     "run in this image: docker://REF, oci-archive:PATH, docker-archive:PATH, "
                     "oci:DIR[:TAG]");
  submit->add_option("--executor", sf.executor, "sandbox (default), process, docker or podman");
  submit->add_option("--disk", sf.disk, "what the work directory may hold, e.g. 20GiB");
  submit->add_option("--nodes", sf.nodes, "run on this many nodes at once (--gpus etc. per node)")
      ->check(CLI::Range(1, 256));
  submit
      ->add_option("--max-restarts", sf.max_restarts,
                   "requeue a failed attempt this many times before the job fails")
      ->check(CLI::Range(0, 100));
  submit->add_option("--distributed", sf.distributed,
                     "torch (default: rendezvous variables for DDP) or none (replicas)");
  auto* no_net = submit->add_flag("--no-network", sf.no_network, "the job gets no network");
  submit
      ->add_flag("--host-network", sf.host_network,
                 "the job shares the machine's network (only where the provider allows it)")
      ->excludes(no_net);
  submit->add_flag("--wait", sf.wait, "wait for the job and exit with its exit code");
  submit->add_flag("-f,--follow", sf.follow, "stream the job's output while waiting");
  submit->add_option("--workdir", sf.workdir,
                     "upload this directory as the job's work directory (honours "
                     ".gpupoolignore; overrides the spec's workdir)");
  submit->add_flag("-q,--quiet", sf.quiet, "no upload progress, summary or price");
  submit->add_flag("--dry-run", sf.dry_run,
                   "say what the job would cost per hour (and at most, with --max-runtime); "
                   "submit nothing");

  std::string states, id;
  int limit = 50;
  bool all_users = false, follow = false;
  auto* jobs = app.add_subcommand("jobs", "list jobs");
  add_global(jobs);
  jobs->add_option("--state", states, "only these states, e.g. pending,running");
  jobs->add_option("--limit", limit, "at most this many (newest)")->capture_default_str();
  jobs->add_flag("--all", all_users, "every user's jobs (admins)");
  bool accounting = false;
  jobs->add_flag("--accounting", accounting,
                 "each job's GPU-hours and cost so far, from the ledger (as sacct shows them)");
  auto* job = app.add_subcommand("job", "show one job and its attempts");
  add_global(job);
  job->add_option("id", id, "job id")->required();
  auto* logs = app.add_subcommand("logs", "print a job's output");
  add_global(logs);
  logs->add_option("id", id, "job id")->required();
  logs->add_flag("-f,--follow", follow, "keep printing until the job ends");
  int log_rank = -1;
  logs->add_option("--rank", log_rank,
                   "only this rank of a multi-node job (default: all, prefixed)")
      ->check(CLI::Range(0, 255));
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  add_global(cancel);
  cancel->add_option("id", id, "job id")->required();

  // sessions, and the ways into running jobs
  cli::SessionStartFlags ssf;
  auto* session =
      app.add_subcommand("session", "interactive sessions: Jupyter or a shell on a GPU");
  session->require_subcommand(1);
  auto* session_start = session->add_subcommand(
      "start", "start a session and print how to connect (waits until it runs)");
  add_global(session_start);
  bool session_jupyter = false, session_shell = false;
  session_start->add_flag("--jupyter", session_jupyter, "a Jupyter notebook server");
  session_start->add_flag("--shell", session_shell, "a shell session (the default)");
  session_start->add_option("--gpus", ssf.gpus, "number of GPUs, or a share of one: 0.5");
  session_start->add_option("--gpu-memory", ssf.gpu_memory, "minimum memory per GPU, e.g. 24GiB");
  session_start->add_option("--cpus", ssf.cpus, "CPUs, e.g. 4");
  session_start->add_option("--memory", ssf.memory, "host memory, e.g. 16GiB");
  session_start->add_option("--image", ssf.image, "run in this image (docker://REF, ...)");
  session_start->add_option("--executor", ssf.executor,
                            "sandbox (default), process, docker or podman");
  session_start->add_option("--group", ssf.group, "the group (lab) whose share it uses");
  session_start->add_option("--name", ssf.name, "session name");
  session_start->add_option("--idle-timeout", ssf.idle_timeout,
                            "stop it after this long without traffic (default 30m; 0 = never)");
  session_start->add_option("--max", ssf.max, "stop it after this long in all, e.g. 8h");
  session_start
      ->add_option("--port", ssf.ports, "a port inside that tunnels may reach (repeatable)")
      ->check(CLI::Range(1, 65535));
  session_start->add_flag("--any-port", ssf.any_port, "tunnels may reach any port");
  session_start->add_option("--env", ssf.env, "KEY=VALUE (repeatable)");
  session_start->add_option("--workdir", ssf.workdir,
                            "upload this directory as its work directory");
  session_start->add_flag("--no-wait", ssf.no_wait, "return once it is submitted");
  auto* session_list = session->add_subcommand("list", "list your sessions");
  add_global(session_list);
  session_list->add_flag("--all", all_users, "every user's sessions (admins)");
  auto* session_stop = session->add_subcommand("stop", "stop a session (frees its GPUs)");
  add_global(session_stop);
  session_stop->add_option("id", id, "session (job) id")->required();
  auto* session_open = session->add_subcommand(
      "open", "print a one-time link that signs your browser in to a Jupyter session");
  add_global(session_open);
  session_open->add_option("id", id, "session (job) id")->required();
  std::vector<std::string> connect_ports;
  auto* session_connect = session->add_subcommand(
      "connect", "forward local ports into a session: --port LOCAL:REMOTE (REMOTE may be jupyter)");
  add_global(session_connect);
  session_connect->add_option("id", id, "session (job) id")->required();
  session_connect->add_option("-p,--port", connect_ports, "LOCAL:REMOTE (repeatable)");
  bool exec_tty = false, exec_no_tty = false;
  auto* exec_cmd =
      app.add_subcommand("exec", "run a command in a running job: gpupool exec ID -- CMD");
  add_global(exec_cmd);
  exec_cmd->add_option("id", id, "job id")->required();
  exec_cmd->add_flag("-t,--tty", exec_tty, "on a terminal (the default when stdin is one)");
  exec_cmd->add_flag("-T,--no-tty", exec_no_tty, "without a terminal");
  auto* shell_cmd = app.add_subcommand("shell", "an interactive shell in a running job or session");
  add_global(shell_cmd);
  shell_cmd->add_option("id", id, "job id")->required();

  auto* nodes = app.add_subcommand("nodes", "list nodes and their GPUs");
  add_global(nodes);
  std::string events_node, events_kind;
  int events_limit = 50;
  auto* events = app.add_subcommand("events", "what providers did: reclaims, pauses, leaves");
  add_global(events);
  events->add_option("--node", events_node, "only this node's events");
  events->add_option("--kind", events_kind,
                     "only this kind: reclaim, pause, resume, leave, policy, refused");
  events->add_option("--limit", events_limit, "at most this many (newest)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  auto* queue = app.add_subcommand("queue", "pending jobs in scheduler order, and why they wait");
  add_global(queue);
  auto* groups = app.add_subcommand("groups", "groups' shares, guarantees and usage");
  add_global(groups);
  bool checkpoints_json = false;
  auto* checkpoints = app.add_subcommand("checkpoints", "list a job's checkpoints");
  add_global(checkpoints);
  checkpoints->add_option("job", id, "job id")->required();
  checkpoints->add_flag("--json", checkpoints_json, "print them as JSON (as -o json)");
  auto* checkpoint = app.add_subcommand("checkpoint", "a job's checkpoints: download");
  checkpoint->require_subcommand(1);
  int64_t checkpoint_number = 0;
  std::string checkpoint_to;
  auto* checkpoint_download =
      checkpoint->add_subcommand("download", "restore a job's checkpoint into a local directory");
  add_global(checkpoint_download);
  checkpoint_download->add_option("job", id, "job id")->required();
  checkpoint_download->add_option("--id", checkpoint_number, "checkpoint number (default: latest)")
      ->check(CLI::PositiveNumber);
  checkpoint_download->add_option("--to", checkpoint_to,
                                  "an empty or new directory (default: ./job-ID-checkpoint-N)");
  auto* admin = app.add_subcommand("admin", "operator commands");
  admin->require_subcommand(1);
  auto* join = admin->add_subcommand("join-token", "print the token agents join with");
  add_global(join);
  bool rotate_join = false;
  join->add_flag("--rotate", rotate_join,
                 "replace it first: the old one stops enrolling agents (enrolled ones go on)");
  auto* gc = admin->add_subcommand(
      "gc", "collect unreachable blobs (manifests, chunks) and apply log retention now");
  add_global(gc);
  cli::IdentityFlags idf;
  cli::AddIdentityCommands(app, *admin, g, idf);
  cli::LimitFlags lf;
  cli::AddLimitCommands(app, *admin, *checkpoint, g, lf);
  cli::MoneyFlags mf;
  cli::AddMoneyCommands(app, *admin, g, mf);

  // sim openb: the FGD paper's experiment on the openb trace (docs/evaluation.md)
  auto* sim_cmd = app.add_subcommand("sim", "simulate the scheduler on a trace");
  sim_cmd->require_subcommand(1);
  auto* sim_openb = sim_cmd->add_subcommand("openb", "the FGD experiment on the openb trace");
  sim::OpenbCommand so_sim;
  sim_openb->add_option("--nodes", so_sim.nodes_path, "node list CSV")->required();
  sim_openb->add_option("--tasks", so_sim.tasks_path, "task list CSV")->required();
  sim_openb
      ->add_option("--policy", so_sim.options.policy,
                   "random, first-fit, best-fit, dot-product, fgd, gpupool (the names the "
                   "server's scheduler config takes as placement)")
      ->check(CLI::IsMember(sched::PolicyNames()));
  sim_openb->add_option("--seed", so_sim.options.seed, "random seed");
  sim_openb->add_option("--out", so_sim.out_dir, "output directory")->required();
  sim_openb->add_option("--inflate-pct", so_sim.options.inflate_pct, "GPU demand, % of capacity");
  sim_openb->add_option("--typical-threshold", so_sim.options.typical_threshold_pct,
                        "FGD: % of all tasks (CPU-only included) the target workload covers");
  sim_openb
      ->add_option_function<std::string>(
          "--node-order",
          [&so_sim](const std::string& v) {
            so_sim.options.node_order =
                v == "name" ? sim::OpenbNodeOrder::kName : sim::OpenbNodeOrder::kRandomNames;
          },
          "random (the artifact's: nodes renamed in a random order drawn per seed, the first "
          "wins ties; the default) or name (ties to the smallest trace name)")
      ->check(CLI::IsMember({"random", "name"}));
  sim_openb
      ->add_option_function<std::string>(
          "--via", [&so_sim](const std::string& v) { so_sim.options.via_decide = v == "decide"; },
          "decide (the server's Scheduler::Decide, one arrival per pass; the default) or "
          "policy (the fast placement policies: the same curve, about 20x faster)")
      ->check(CLI::IsMember({"policy", "decide"}));
  // sim campus / sim trace: the campus-sharing simulator (docs/evaluation.md, docs/sim-trace.md)
  auto add_sim_knobs = [](CLI::App* c, sim::SimOptions& o, std::string& modes) {
    // The campus results come from the server's own lifecycle (issue 21);
    // the DES is the fast engine for sweeps.
    o.engine = sim::SimEngine::kPool;
    c->add_option("--mode", modes, "pooled, per-lab or both")
        ->check(CLI::IsMember({"pooled", "per-lab", "both"}));
    auto duration = [c](const char* name, int64_t& ms, const char* help) {
      c->add_option_function<std::string>(
          name,
          [name, &ms](const std::string& v) {
            auto parsed = ParseDurationMs(v);
            if (!parsed.ok()) throw CLI::ValidationError(name, parsed.status().message());
            ms = *parsed;
          },
          help);
    };
    duration("--tick", o.tick_ms, "scheduler pass period while jobs wait (default 5m)");
    duration("--preempt-grace", o.preempt_grace_ms, "a victim vacates after this (default 30s)");
    c->add_option_function<std::string>(
        "--placement,--policy",
        [&o](const std::string& v) {
          auto p = sched::ParsePlacementScore(v);
          if (!p.ok()) throw CLI::ValidationError("--placement", p.status().message());
          o.placement = *p;
        },
        "how the scheduler ranks candidate nodes: gpupool (default), random, first-fit, "
        "best-fit, dot-product, fgd (as the server's scheduler config's placement)");
    c->add_option_function<std::string>(
         "--via",
         [&o](const std::string& v) {
           auto e = sim::ParseSimEngine(v);
           if (!e.ok()) throw CLI::ValidationError("--via", e.status().message());
           o.engine = *e;
         },
         "pool (the default: the server's own core, server::Pool over an in-memory store, "
         "with simulated agents; lending, gangs and requeues as the server does them) or des "
         "(the discrete-event simulator around the scheduler: about 2.7x faster, for sweeps)")
        ->check(CLI::IsMember({"des", "pool"}));
    c->add_option("--per-lab-preemption", o.per_lab_preemption,
                  "per-lab runs preempt too (a lab's sessions displace its own batch work); "
                  "false (the default) is the status quo, labs without such a scheduler");
  };
  auto* sim_campus =
      sim_cmd->add_subcommand("campus", "simulate a synthetic campus, pooled vs per lab");
  sim::CampusCommand sc_sim;
  sim_campus->option_defaults()->always_capture_default();
  sim_campus->add_option("--seed", sc_sim.campus.seed, "random seed of the generator");
  sim_campus->add_option("--out", sc_sim.out_dir, "output directory")->required();
  sim_campus->add_option("--write-trace", sc_sim.write_trace, "also write the trace (JSONL)");
  add_sim_knobs(sim_campus, sc_sim.sim, sc_sim.modes);
  sim_campus->add_option("--labs", sc_sim.campus.labs, "number of labs");
  sim_campus->add_option("--days", sc_sim.campus.days, "days of submissions");
  sim_campus->add_option("--min-nodes", sc_sim.campus.min_nodes, "fewest machines per lab");
  sim_campus->add_option("--max-nodes", sc_sim.campus.max_nodes, "most machines per lab");
  sim_campus->add_option("--load", sc_sim.campus.load, "batch work / pool capacity");
  sim_campus->add_option("--load-spread", sc_sim.campus.load_spread, "log-spread of lab loads");
  sim_campus->add_option("--deadlines-per-week", sc_sim.campus.deadlines_per_week,
                         "deadlines per lab per week");
  sim_campus->add_option("--burst-days", sc_sim.campus.burst_days, "days of rush before one");
  sim_campus->add_option("--deadline-burst", sc_sim.campus.deadline_burst,
                         "batch rate multiplier in a rush");
  sim_campus->add_option("--gang-fraction", sc_sim.campus.gang_fraction,
                         "multi-GPU jobs run on 2 nodes");
  sim_campus->add_option("--batch-median-hours", sc_sim.campus.batch_median_hours,
                         "median batch duration at speed 1");
  sim_campus->add_option("--batch-sigma", sc_sim.campus.batch_sigma, "lognormal sigma");
  sim_campus->add_option("--checkpoint-fraction", sc_sim.campus.checkpoint_fraction,
                         "batch jobs that checkpoint");
  sim_campus->add_option("--interactive-per-day", sc_sim.campus.interactive_per_day,
                         "sessions per lab and working day");
  sim_campus->add_option("--sweeps-per-week", sc_sim.campus.sweeps_per_week,
                         "opportunistic sweeps per lab and week");
  sim_campus->add_option("--leave-per-node-day", sc_sim.campus.leave_per_node_day,
                         "provider departures per machine and day");
  sim_campus->add_option("--away-hours", sc_sim.campus.away_hours, "mean time away");
  auto* sim_trace = sim_cmd->add_subcommand("trace", "simulate a JSONL trace, pooled vs per lab");
  sim::TraceCommand st_sim;
  sim_trace->add_option("--trace", st_sim.trace_path, "trace file (JSONL)")->required();
  sim_trace->add_option("--out", st_sim.out_dir, "output directory")->required();
  sim_trace->add_option("--seed", st_sim.seed, "recorded with the results (default: the trace's)");
  add_sim_knobs(sim_trace, st_sim.sim, st_sim.modes);

  try {
    app.parse(cli_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!job_command.empty() && !submit->parsed() && !exec_cmd->parsed()) {
    std::cerr << "gpupool: only submit and exec take a command after --\n";
    return 2;
  }
  UseLogLevel(log_level);

  if (server_cmd->parsed()) return server::RunServer(so);
  if (idf.run) return idf.run();
  if (lf.run) return lf.run();
  if (mf.run) return mf.run();
  if (selftest_cmd->parsed()) return cli::RunSelftestCommand(selftest_flags);
  if (join_cmd->parsed()) return cli::RunJoin(join_flags);
  for (CLI::App* c : agent_controls) {
    if (!c->parsed()) continue;
    // `gpupool agent --data-dir D status` works too.
    if (c->get_option("--data-dir")->count() == 0) ac.data_dir = ao.data_dir;
    const int rc = cli::RunAgentControl(ac);
    // --purge: also when no agent runs (2); not when it refused (1).
    if (c == ac_leave && leave_purge && rc != 1) {
      return cli::PurgeAgent(leave_config_dir, ac.data_dir, rc == 0);
    }
    return rc;
  }
  if (agent_cmd->parsed()) {
    if (ao.server_url.empty()) {
      std::cerr << "gpupool agent: --server is required\n";
      return 2;
    }
    if (!ao.gpu_driver_dir.empty()) {
      // Checked before the agent enrolls; the agent checks again at start.
      ao.gpu_driver_dir = AbsolutePath(ao.gpu_driver_dir);
      if (Status s = agent::CheckGpuDriverDir(ao.gpu_driver_dir); !s.ok()) {
        std::cerr << "gpupool agent: --gpu-driver-dir: " << s.message() << "\n";
        return 2;
      }
    }
    if (!ao.gpushare_library.empty()) {
      ao.gpushare_library = AbsolutePath(ao.gpushare_library);
      if (Status s = agent::CheckGpushareLibraryPath(ao.gpushare_library); !s.ok()) {
        std::cerr << "gpupool agent: --gpushare-library: " << s.message() << "\n";
        return 2;
      }
    }
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
    ao.kill_tasks_on_exit = on_exit == "kill";
    auto labels = agent::ParseLabelFlags(agent_labels);
    if (!labels.ok()) {
      std::cerr << "gpupool agent: " << labels.status().message() << "\n";
      return 2;
    }
    ao.labels = *std::move(labels);
    auto cache_bytes = ParseBytes(chunk_cache);
    if (!cache_bytes.ok()) {
      std::cerr << "gpupool agent: --chunk-cache: " << cache_bytes.status().message() << "\n";
      return 2;
    }
    ao.chunk_cache_bytes = *cache_bytes;
    if (!max_image_size.empty()) {
      auto image_bytes = ParseBytes(max_image_size);
      if (!image_bytes.ok() || *image_bytes <= 0) {
        std::cerr << "gpupool agent: --max-image-size: "
                  << (image_bytes.ok() ? "must be more than 0" : image_bytes.status().message())
                  << "\n";
        return 2;
      }
      ao.max_image_bytes = *image_bytes;
    }
    return agent::RunAgent(ao);
  }
  if (dev_cmd->parsed()) {
    if (!dev.gpu_driver_dir.empty()) {
      dev.gpu_driver_dir = AbsolutePath(dev.gpu_driver_dir);
      // The agents read their GPUs through the driver's NVML unless told to simulate.
      if (dev_cmd->get_option("--simulate-gpus")->count() == 0) dev.simulate_gpus = "none";
    }
    return cli::RunDev(dev);
  }
  if (submit->parsed()) {
    sf.command = job_command;
    return cli::CmdSubmit(g, sf);
  }
  if (jobs->parsed()) return cli::CmdJobs(g, states, limit, all_users, accounting);
  if (job->parsed()) return cli::CmdJob(g, id);
  if (logs->parsed()) return cli::CmdLogs(g, id, follow, log_rank);
  if (cancel->parsed()) return cli::CmdCancel(g, id);
  if (session_start->parsed()) {
    if (session_jupyter && session_shell) {
      std::cerr << "gpupool session start: give --jupyter or --shell, not both\n";
      return 2;
    }
    ssf.kind = session_jupyter ? "jupyter" : "shell";
    return cli::CmdSessionStart(g, ssf);
  }
  if (session_list->parsed()) return cli::CmdSessionList(g, all_users);
  if (session_stop->parsed()) return cli::CmdSessionStop(g, id);
  if (session_open->parsed()) return cli::CmdSessionOpen(g, id);
  if (session_connect->parsed()) return cli::CmdSessionConnect(g, id, connect_ports);
  if (exec_cmd->parsed()) {
    if (job_command.empty()) {
      std::cerr << "gpupool exec: give the command after --: gpupool exec ID -- CMD [ARGS]\n";
      return 2;
    }
    return cli::CmdExec(g, id, job_command, exec_tty, exec_no_tty);
  }
  if (shell_cmd->parsed()) return cli::CmdShell(g, id);
  if (nodes->parsed()) return cli::CmdNodes(g);
  if (events->parsed()) return cli::CmdEvents(g, events_node, events_kind, events_limit);
  if (queue->parsed()) return cli::CmdQueue(g);
  if (groups->parsed()) return cli::CmdGroups(g);
  if (join->parsed()) return cli::CmdJoinToken(g, rotate_join);
  if (gc->parsed()) return cli::CmdAdminGc(g);
  if (checkpoints->parsed()) {
    if (checkpoints_json) g.output = "json";
    return cli::CmdCheckpoints(g, id);
  }
  if (checkpoint_download->parsed()) {
    return cli::CmdCheckpointDownload(g, id, checkpoint_number, checkpoint_to);
  }
  if (sim_openb->parsed()) return sim::RunOpenbCommand(so_sim);
  if (sim_campus->parsed()) return sim::RunCampusCommand(sc_sim);
  if (sim_trace->parsed()) return sim::RunTraceCommand(st_sim);
  return 2;
}
