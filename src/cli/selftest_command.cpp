#include "cli/selftest_command.h"

#include <cstdlib>
#include <iostream>

#include "cli/table.h"
#include "common/clock.h"
#include "common/files.h"

namespace gpupool::cli {

CLI::App* AddSelftestCommand(CLI::App& agent, SelftestFlags& f) {
  agent::AgentOptions& a = f.options.agent;
  a.data_dir = agent::DefaultAgentDataDir();
  auto* c = agent.add_subcommand(
      "selftest",
      "check that this machine can lend its GPUs: driver, CUDA in the sandbox, "
      "namespaces, cgroups, disk, the server (reach, CA, clock, bandwidth)");
  c->add_option("--server", a.server_url, "the pool's server URL (without it: the machine only)");
  c->add_option("--join-token", a.join_token,
                "join token: pins the pool CA (or GPUPOOL_JOIN_TOKEN)");
  c->add_option("--join-token-file", f.join_token_file, "read the join token from a file");
  c->add_option("--ca-file", a.ca_file, "trust this CA bundle instead of the join token's pin");
  c->add_flag("--insecure", a.insecure_tls, "do not check the server's certificate");
  c->add_option("--data-dir", a.data_dir, "where the agent keeps its tasks")->capture_default_str();
  c->add_option("--config", a.config_file, "the agent's config (executors, sandbox, ...)");
  c->add_option("--simulate-gpus", a.simulate_gpus, "check simulated GPUs (development)");
  c->add_option("--nvml-library", a.nvml_library, "path of libnvidia-ml.so.1");
  c->add_option("--gpu-driver-dir", a.gpu_driver_dir,
                "the NVIDIA libraries' directory, as the agent's flag");
  c->add_option("--cuda-probe", f.options.cuda_probe,
                "gpupool-cuda-probe (default: BIN/../lib/gpupool-cuda-probe)");
  c->add_option("--probe-env", f.options.probe_env,
                "KEY=VALUE for the CUDA probe in the sandbox, as a job's env (repeatable)");
  c->add_option("-o,--output", f.output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  return c;
}

int RunSelftestCommand(SelftestFlags& f) {
  agent::AgentOptions& a = f.options.agent;
  if (a.join_token.empty()) {
    if (const char* t = std::getenv("GPUPOOL_JOIN_TOKEN")) a.join_token = t;
  }
  if (!f.join_token_file.empty()) {
    auto t = ReadFileTrimmed(f.join_token_file);
    if (!t.ok()) {
      std::cerr << "gpupool agent selftest: --join-token-file: " << t.status().message() << "\n";
      return 2;
    }
    a.join_token = *t;
  }
  agent::SelftestReport report = agent::RunSelftest(f.options);
  // Kept for the agent, which publishes whether it passed (gpupool/verified).
  if (Status s = agent::SaveSelftest(a.data_dir, report, RealClock().NowMs()); !s.ok()) {
    std::cerr << "gpupool agent selftest: keeping the report: " << s.message() << "\n";
  }
  if (f.output == "json") {
    std::cout << agent::SelftestToJson(report).dump(2) << "\n";
    return report.ok() ? 0 : 1;
  }
  Table t({"CHECK", "RESULT", "DETAIL"});
  int warnings = 0, failures = 0;
  for (const agent::SelftestCheck& c : report.checks) {
    t.Add({c.name, std::string(agent::CheckResultName(c.result)), c.detail});
    warnings += c.result == agent::CheckResult::kWarn;
    failures += c.result == agent::CheckResult::kFail;
  }
  t.Print(std::cout);
  std::cout << "\n" << failures << " failed, " << warnings << " warned";
  if (failures + warnings == 0) {
    std::cout << ": this machine is ready to lend its GPUs.\n";
    return 0;
  }
  std::cout << ". What to do:\n";
  for (const agent::SelftestCheck& c : report.checks) {
    if (c.result != agent::CheckResult::kFail && c.result != agent::CheckResult::kWarn) continue;
    std::cout << "  " << c.name << " (" << agent::CheckResultName(c.result) << "): " << c.fix
              << "\n";
  }
  return report.ok() ? 0 : 1;
}

}  // namespace gpupool::cli
