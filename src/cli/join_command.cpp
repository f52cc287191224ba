#include "cli/join_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "agent/agent_config.h"
#include "agent/enrollment.h"
#include "agent/policy.h"
#include "agent/selftest.h"
#include "cli/agent_control.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/files.h"
#include "exec/subprocess.h"

namespace gpupool::cli {

extern const char* const kDefaultAgentYaml;  // default_agent_yaml.cpp (examples/agent.yaml)

namespace fs = std::filesystem;

namespace {

constexpr const char* kService = "gpupool-agent.service";
constexpr const char* kDefaultConfigDir = "/etc/gpupool";
constexpr const char* kDefaultDataDir = "/var/lib/gpupool-agent";

bool SystemdRuns() { return fs::exists("/run/systemd/system"); }

// A value for agent.env's double-quoted GPUPOOL_AGENT_ARGS: systemd splits
// it at whitespace, so a value must not hold any (nor quotes).
Status CheckArgWord(const std::string& what, const std::string& value) {
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '"' || c == '\'' || c == '\\' || c == '$') {
      return Status::InvalidArgument(what + " \"" + value +
                                     "\": no spaces, quotes, backslashes or $ in it");
    }
  }
  return Status::Ok();
}

Result<std::string> AgentArgs(const JoinFlags& f, const std::string& name,
                              const std::string& token_path) {
  std::vector<std::pair<std::string, std::string>> args = {
      {"--server", f.server}, {"--join-token-file", token_path}, {"--name", name}};
  if (!f.owner_group.empty()) args.emplace_back("--owner-group", f.owner_group);
  for (const std::string& l : f.labels) args.emplace_back("--label", l);
  if (!f.simulate_gpus.empty()) args.emplace_back("--simulate-gpus", f.simulate_gpus);
  if (!f.gpu_driver_dir.empty()) args.emplace_back("--gpu-driver-dir", f.gpu_driver_dir);
  std::string out;
  for (const auto& [flag, value] : args) {
    GP_RETURN_IF_ERROR(CheckArgWord(flag, value));
    out += (out.empty() ? "" : " ") + flag + " " + value;
  }
  return out;
}

void PrintChecks(const agent::SelftestReport& report) {
  Table t({"CHECK", "RESULT", "DETAIL"});
  for (const agent::SelftestCheck& c : report.checks) {
    t.Add({c.name, std::string(agent::CheckResultName(c.result)), c.detail});
  }
  t.Print(std::cout);
  for (const agent::SelftestCheck& c : report.checks) {
    if (c.result == agent::CheckResult::kFail || c.result == agent::CheckResult::kWarn) {
      std::cout << "  " << c.name << " (" << agent::CheckResultName(c.result) << "): " << c.fix
                << "\n";
    }
  }
}

// What the node lends under the config's policy, in words.
void PrintLending(const std::string& config_path, const std::string& data_dir) {
  auto config = agent::LoadAgentConfig(config_path, data_dir);
  if (!config.ok()) return;
  const agent::ProviderPolicy& p = config->policy;
  std::cout << "What this machine lends (policy: in " << config_path << "):\n"
            << "  GPUs:     " << (p.gpus.empty() ? "all" : std::to_string(p.gpus.size()) + " named")
            << "\n  when:     "
            << (p.windows.empty() ? "always" : std::to_string(p.windows.size()) + " weekly windows")
            << (p.idle_for_ms > 0 ? ", only while you do not use the GPU" : "") << "\n  to whom:  "
            << (p.allow_users.empty() && p.allow_groups.empty() && p.deny_users.empty() &&
                        p.deny_groups.empty()
                    ? "every user of the pool"
                    : "the users and groups it names")
            << "\n  taking a GPU back gives its job " << p.reclaim_grace_ms / 1000
            << " s to checkpoint\n";
}

}  // namespace

CLI::App* AddJoinCommand(CLI::App& agent, JoinFlags& f) {
  auto* c = agent.add_subcommand(
      "join",
      "lend this machine to a pool: check it, write /etc/gpupool, enroll, start the service");
  c->add_option("server", f.server, "the pool's server URL (several: comma-separated)")->required();
  c->add_option("--token-file", f.token_file, "the join token's file (`gpupool admin join-token`)");
  c->add_option("--token", f.token, "the join token (or GPUPOOL_JOIN_TOKEN)");
  c->add_option("--name", f.name, "the node's name (default: the host name)");
  c->add_option("--owner-group", f.owner_group, "the group (lab) owning this machine");
  c->add_option("--label", f.labels, "a node label KEY=VALUE (repeatable)");
  c->add_option("--config-dir", f.config_dir, "where agent.yaml, agent.env and join.token go")
      ->capture_default_str();
  c->add_option("--data-dir", f.data_dir, "the agent's data directory")->capture_default_str();
  c->add_option("--simulate-gpus", f.simulate_gpus, "lend simulated GPUs (development only)");
  c->add_option("--gpu-driver-dir", f.gpu_driver_dir, "the NVIDIA libraries' directory");
  c->add_flag("--force", f.force, "join even when a check fails");
  c->add_flag("--no-start", f.no_start, "write and enroll, but do not start the service");
  return c;
}

int RunJoin(const JoinFlags& f_in) {
  JoinFlags f = f_in;
  if (f.token.empty() && !f.token_file.empty()) {
    auto t = ReadFileTrimmed(f.token_file);
    if (!t.ok()) {
      std::cerr << "gpupool agent join: --token-file: " << t.status().message() << "\n";
      return 2;
    }
    f.token = *t;
  }
  if (f.token.empty()) {
    if (const char* t = std::getenv("GPUPOOL_JOIN_TOKEN")) f.token = t;
  }
  if (f.token.empty()) {
    std::cerr << "gpupool agent join: the pool's join token is needed (--token-file FILE; the "
                 "pool's admin prints it with `gpupool admin join-token`)\n";
    return 2;
  }
  const std::string name = f.name.empty() ? agent::DefaultNodeName() : f.name;
  const std::string config_path = f.config_dir + "/agent.yaml";
  const std::string token_path = f.config_dir + "/join.token";
  auto args = AgentArgs(f, name, token_path);
  if (!args.ok()) {
    std::cerr << "gpupool agent join: " << args.status().message() << "\n";
    return 2;
  }

  // 1. The machine, as the agent will use it.
  agent::SelftestOptions check;
  check.agent.server_url = f.server;
  check.agent.join_token = f.token;
  check.agent.data_dir = f.data_dir;
  check.agent.config_file = fs::exists(config_path) ? config_path : "";
  check.agent.simulate_gpus = f.simulate_gpus;
  check.agent.gpu_driver_dir = f.gpu_driver_dir;
  std::cout << "Checking this machine (gpupool agent selftest):\n";
  agent::SelftestReport report = agent::RunSelftest(check);
  PrintChecks(report);
  if (!report.ok() && !f.force) {
    std::cerr << "\ngpupool agent join: a check failed (above, with what to do); nothing was "
                 "written. Fix it and run join again, or join anyway with --force.\n";
    return 1;
  }

  if (Status s = agent::SaveSelftest(f.data_dir, report, RealClock().NowMs()); !s.ok()) {
    std::cerr << "gpupool agent join: " << s.message() << "\n";
    return 1;
  }

  // 2. The files the service reads.
  std::error_code ec;
  fs::create_directories(f.config_dir, ec);
  if (ec) {
    std::cerr << "gpupool agent join: cannot make " << f.config_dir << ": " << ec.message() << "\n";
    return 1;
  }
  const bool kept = fs::exists(config_path);
  Status wrote = Status::Ok();
  if (!kept) {
    std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    wrote = WriteFileAtomic(config_path,
                            std::string("# Written by `gpupool agent join` on ") + date +
                                ". Edit it, then `gpupool agent reload`.\n" + kDefaultAgentYaml,
                            {.mode = 0644, .fsync = true});
  }
  if (wrote.ok())
    wrote = WriteFileAtomic(token_path, f.token + "\n", {.mode = 0600, .fsync = true});
  if (wrote.ok()) {
    wrote = WriteFileAtomic(f.config_dir + "/agent.env",
                            "# Written by `gpupool agent join`: the agent's flags "
                            "(gpupool-agent.service).\nGPUPOOL_AGENT_ARGS=\"" +
                                *args + "\"\n",
                            {.mode = 0600, .fsync = true});
  }
  if (!wrote.ok()) {
    std::cerr << "gpupool agent join: " << wrote.message() << "\n";
    return 1;
  }

  // 3. The node's own credential, now, so that a refusal shows here.
  auto creds = agent::LoadOrEnroll({.server_url = f.server,
                                    .join_token = f.token,
                                    .data_dir = f.data_dir,
                                    .node_name = name,
                                    .ca_file = "",
                                    .insecure = false});
  if (!creds.ok()) {
    std::cerr << "gpupool agent join: enrolling: " << creds.status().message() << "\n";
    return 1;
  }
  std::cout << "\nEnrolled as node " << name << "; wrote " << f.config_dir
            << "/agent.env and join.token" << (kept ? " (kept agent.yaml)" : " and agent.yaml")
            << ".\n";

  // 4. The service.
  const bool standard = f.config_dir == kDefaultConfigDir && f.data_dir == kDefaultDataDir;
  if (!f.no_start && standard && SystemdRuns()) {
    auto started = exec::RunCommand({"systemctl", "enable", "--now", kService});
    if (!started.ok() || !started->ok()) {
      std::cerr << "gpupool agent join: systemctl enable --now " << kService << ": "
                << (started.ok() ? started->stderr_tail : started.status().message()) << "\n";
      return 1;
    }
    std::cout << "Started " << kService << " (enabled at boot).\n";
  } else {
    std::cout << (f.no_start ? "Not started (--no-start)."
                  : standard ? "systemd is not running here."
                             : "Not the service's directories.")
              << " Start the agent with:\n  gpupool agent --data-dir " << f.data_dir << " --config "
              << config_path << " " << *args << "\n";
  }
  std::cout << "\n";
  PrintLending(config_path, f.data_dir);
  std::cout << "Change it: edit " << config_path
            << " and run `gpupool agent reload`; `gpupool agent pause` stops lending, `gpupool "
               "agent reclaim` takes GPUs back now, `gpupool agent status` shows what runs, "
               "`gpupool agent leave --purge` leaves the pool.\n";
  return 0;
}

int PurgeAgent(const std::string& config_dir, const std::string& data_dir, bool left) {
  if (SystemdRuns() && config_dir == kDefaultConfigDir) {
    (void)exec::RunCommand({"systemctl", "disable", "--now", kService});
  }
  std::error_code ec;
  for (const char* file : {"agent.yaml", "agent.env", "join.token"}) {
    fs::remove(config_dir + "/" + file, ec);
  }
  fs::remove(config_dir, ec);  // only if it is empty now
  fs::remove_all(data_dir, ec);
  if (ec) {
    std::cerr << "gpupool agent leave: cannot remove " << data_dir << ": " << ec.message() << "\n";
    return 1;
  }
  std::cout << "Removed " << config_dir << "/{agent.yaml,agent.env,join.token} and " << data_dir
            << (left ? "."
                     : " (the node was not deregistered: no agent ran; the pool's admin "
                       "can remove it with `gpupool admin node revoke`).")
            << "\n";
  return 0;
}

}  // namespace gpupool::cli
