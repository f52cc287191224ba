#include "cli/dev.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/agent_config.h"
#include "cli/client.h"
#include "common/dir_lock.h"
#include "common/files.h"
#include "net/pki.h"

namespace gpupool::cli {
namespace fs = std::filesystem;

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

std::string SelfExe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "gpupool" : p.string();
}

pid_t Spawn(const std::vector<std::string>& args) {
  const pid_t dev = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // The child dies with dev, however dev ends (SIGKILL included): SIGTERM
    // makes the server and the agents shut down as on Ctrl-C (the agents,
    // run with --on-exit kill, stop their jobs). A dev that died before the
    // prctl took effect is noticed here, and nothing starts.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != dev) _exit(1);
    // Children ignore the terminal's Ctrl-C; dev stops them in order.
    ::setpgid(0, 0);
    ::close_range(3, ~0U, 0);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::perror("exec");
    _exit(127);
  }
  return pid;
}

// Sends SIGTERM and waits up to `wait_ms`, then SIGKILL.
void Terminate(std::vector<pid_t>& pids, int wait_ms) {
  for (pid_t p : pids) ::kill(p, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (pid_t p : pids) {
    while (true) {
      int st;
      pid_t r = ::waitpid(p, &st, WNOHANG);
      if (r == p || r < 0) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(p, SIGKILL);
        ::waitpid(p, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  pids.clear();
}

}  // namespace

int RunDev(const DevOptions& o) {
  if (!o.gpu_driver_dir.empty()) {
    if (Status s = agent::CheckGpuDriverDir(o.gpu_driver_dir); !s.ok()) {
      std::cerr << "gpupool dev: --gpu-driver-dir: " << s.message() << "\n";
      return 2;
    }
  }
  std::string dir = o.data_dir;
  if (dir.empty()) {
    const char* xdg = std::getenv("XDG_DATA_HOME");
    const char* home = std::getenv("HOME");
    dir = (xdg && *xdg ? std::string(xdg) : std::string(home ? home : ".") + "/.local/share") +
          "/gpupool/dev";
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::cerr << "gpupool dev: cannot create " << dir << ": " << ec.message() << "\n";
    return 1;
  }
  dir = fs::absolute(dir).string();
  // One dev pool per data directory (its server and agents lock theirs too).
  auto lock = DirLock::Acquire(dir, "dev pool");
  if (!lock.ok()) {
    std::cerr << "gpupool dev: " << lock.status().message() << "\n";
    return 1;
  }
  std::string server_dir = dir + "/server";
  fs::remove(server_dir + "/server.url", ec);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::string exe = SelfExe();
  std::vector<pid_t> server = {Spawn(
      {exe, "server", "--data-dir", server_dir, "--listen", o.listen, "--log-level", o.log_level})};
  std::string url;
  for (int i = 0; i < 200 && url.empty() && !g_stop; ++i) {
    int st;
    if (::waitpid(server[0], &st, WNOHANG) == server[0]) {
      std::cerr << "gpupool dev: the server exited at start-up (see the messages above)\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    url = ReadFileTrimmed(server_dir + "/server.url").value_or("");
  }
  if (url.empty()) {
    std::cerr << "gpupool dev: the server did not start within 10s\n";
    Terminate(server, 5000);
    return 1;
  }
  std::string admin = ReadFileTrimmed(server_dir + "/admin.token").value_or("");
  std::string join = ReadFileTrimmed(server_dir + "/join.token").value_or("");

  std::vector<pid_t> agents;
  for (int i = 1; i <= o.agents; ++i) {
    std::vector<std::string> args = {exe,
                                     "agent",
                                     "--server",
                                     url,
                                     "--join-token",
                                     join,
                                     "--data-dir",
                                     dir + "/agent-" + std::to_string(i),
                                     "--name",
                                     "dev-agent-" + std::to_string(i),
                                     "--on-exit",
                                     "kill",
                                     "--log-level",
                                     o.log_level};
    if (!o.agent_config.empty()) {
      args.push_back("--config");
      args.push_back(o.agent_config);
    }
    if (!o.gpu_driver_dir.empty()) {
      args.push_back("--gpu-driver-dir");
      args.push_back(o.gpu_driver_dir);
    }
    if (!o.simulate_gpus.empty() && o.simulate_gpus != "none") {
      args.push_back("--simulate-gpus");
      args.push_back(o.simulate_gpus);
    }
    agents.push_back(Spawn(args));
  }

  Endpoint e{url, admin, {}};
  // The CLI pins the pool CA the server made.
  if (auto ca = ReadFile(server_dir + "/tls/ca.crt"); ca.ok()) {
    e.tls.ca_fingerprint = net::CertFingerprint(*ca).value_or("");
  }
  if (!o.env_file.empty()) {
    std::string env = "export GPUPOOL_SERVER=" + url + "\nexport GPUPOOL_TOKEN=" + admin +
                      "\nexport GPUPOOL_CA_FINGERPRINT=" + e.tls.ca_fingerprint +
                      "\nexport GPUPOOL_DEV_DATA_DIR=" + dir + "\n";
    if (Status s = WriteFileAtomic(o.env_file, env, {0600, false}); !s.ok()) {
      std::cerr << "gpupool dev: " << s.message() << "\n";
    }
  }
  if (o.write_config) {
    if (Status s = WriteConfig(ConfigPath(), e); !s.ok())
      std::cerr << "gpupool dev: " << s.message() << "\n";
  }
  std::cout << "gpupool dev: server " << url << " with " << o.agents << " agent(s)"
            << (o.simulate_gpus.empty() || o.simulate_gpus == "none"
                    ? ""
                    : ", simulated GPUs " + o.simulate_gpus + " each")
            << (o.gpu_driver_dir.empty() ? "" : ", NVIDIA libraries from " + o.gpu_driver_dir)
            << "\n  data:   " << dir << "\n"
            << (o.write_config
                    ? "  the CLI is configured (" + ConfigPath() + "): try `gpupool nodes`\n"
                    : "")
            << (o.env_file.empty() ? "" : "  environment for scripts: source " + o.env_file + "\n")
            << "  stop with Ctrl-C\n"
            << std::flush;

  int code = 0;
  while (!g_stop) {
    int st;
    pid_t p = ::waitpid(-1, &st, WNOHANG);
    if (p == server[0]) {
      std::cerr << "gpupool dev: the server exited\n";
      server.clear();
      code = 1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cout << "gpupool dev: stopping" << std::endl;
  Terminate(agents, 15'000);
  Terminate(server, 10'000);
  return code;
}

}  // namespace gpupool::cli
