#include "agent/selftest.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/agent_config.h"
#include "common/files.h"
#include "common/units.h"
#include "exec/sandbox.h"
#include "exec/subprocess.h"
#include "gpu/gpu_source.h"

namespace gpupool::agent {

namespace fs = std::filesystem;
using nlohmann::json;

std::string_view CheckResultName(CheckResult r) {
  switch (r) {
    case CheckResult::kPass:
      return "pass";
    case CheckResult::kWarn:
      return "warn";
    case CheckResult::kFail:
      return "fail";
    case CheckResult::kSkip:
      return "skip";
  }
  return "?";
}

bool SelftestReport::ok() const {
  for (const SelftestCheck& c : checks) {
    if (c.result == CheckResult::kFail) return false;
  }
  return true;
}

json SelftestToJson(const SelftestReport& report) {
  json checks = json::array();
  for (const SelftestCheck& c : report.checks) {
    checks.push_back({{"name", c.name},
                      {"result", CheckResultName(c.result)},
                      {"detail", c.detail},
                      {"fix", c.fix}});
  }
  return {{"ok", report.ok()}, {"checks", std::move(checks)}};
}

SelftestCheck DiskCheck(const std::string& path, int64_t free_bytes, const SelftestOptions& o) {
  SelftestCheck c{"disk", CheckResult::kPass,
                  FormatBytes(free_bytes) + " free at " + path + " (tasks, images, caches)", ""};
  const std::string fix = "free space there, or give the agent a --data-dir on a larger disk";
  if (free_bytes < o.min_free_bytes) {
    c.result = CheckResult::kFail;
    c.fix = "jobs cannot unpack inputs or images with less than " + FormatBytes(o.min_free_bytes) +
            ": " + fix;
  } else if (free_bytes < o.warn_free_bytes) {
    c.result = CheckResult::kWarn;
    c.fix = "less than " + FormatBytes(o.warn_free_bytes) +
            " leaves little room for images and checkpoints: " + fix;
  }
  return c;
}

SelftestCheck CudaProbeCheck(std::string_view probe_output, int gpus) {
  SelftestCheck c{"cuda in sandbox", CheckResult::kFail, "", ""};
  json j = json::parse(probe_output, nullptr, false);
  if (!j.is_object() || !j.contains("ok")) {
    c.detail = "the probe said nothing readable: " + std::string(probe_output.substr(0, 200));
    c.fix = "run `gpupool agent selftest` with --log-level debug and report it";
    return c;
  }
  if (!j.value("ok", false)) {
    c.detail = j.value("step", std::string("?")) + " failed";
    if (int code = j.value("error", 0); code != 0)
      c.detail += " (CUDA error " + std::to_string(code) + ")";
    if (std::string m = j.value("message", std::string()); !m.empty()) c.detail += ": " + m;
    c.fix =
        "a job cannot use CUDA here: check that the NVIDIA kernel module is loaded "
        "(nvidia-smi), that /dev/nvidia* exist, and that the driver's libcuda.so.1 "
        "matches its kernel module";
    return c;
  }
  const json& devices = j.value("devices", json::array());
  const int v = j.value("driver_version", 0);
  c.detail = "cuInit works in a job's sandbox; CUDA " + std::to_string(v / 1000) + "." +
             std::to_string(v % 1000 / 10) + ", " + std::to_string(devices.size()) +
             " device(s) visible";
  if (static_cast<int>(devices.size()) < gpus) {
    c.result = CheckResult::kWarn;
    c.fix = "NVML lists " + std::to_string(gpus) +
            " GPUs but a job sees fewer: check CUDA_VISIBLE_DEVICES and the device nodes";
    return c;
  }
  c.result = CheckResult::kPass;
  return c;
}

SelftestCheck GpuHealthCheck(std::string_view ecc_csv, std::string_view kernel_log) {
  SelftestCheck c{"gpu health", CheckResult::kPass, "", ""};
  std::vector<std::string> said, bad;
  if (ecc_csv.empty()) {
    said.push_back("ECC counters not read (no nvidia-smi)");
  } else {
    int64_t total = 0;
    std::istringstream in{std::string(ecc_csv)};
    for (std::string line; std::getline(in, line);) {
      const size_t comma = line.find(',');
      if (comma == std::string::npos) continue;
      std::string count = line.substr(comma + 1);
      count.erase(0, count.find_first_not_of(' '));
      char* end = nullptr;
      const long long n = std::strtoll(count.c_str(), &end, 10);
      if (end == count.c_str()) continue;  // "[N/A]": no ECC on this GPU
      total += n;
      if (n > 0)
        bad.push_back("GPU " + line.substr(0, comma) + ": " + std::to_string(n) +
                      " uncorrected ECC errors since the driver loaded");
    }
    said.push_back(std::to_string(total) + " uncorrected ECC errors");
  }
  if (kernel_log.empty()) {
    said.push_back("kernel log not readable (Xid errors not checked)");
  } else {
    int xids = 0;
    std::string last;
    std::istringstream in{std::string(kernel_log)};
    for (std::string line; std::getline(in, line);) {
      if (line.find("NVRM: Xid") == std::string::npos) continue;
      ++xids;
      last = line.substr(line.find("NVRM: Xid"));
    }
    said.push_back(std::to_string(xids) + " Xid errors in the kernel log");
    if (xids > 0) bad.push_back("the last: " + last.substr(0, 160));
  }
  c.detail = said[0] + (said.size() > 1 ? "; " + said[1] : "");
  if (!bad.empty()) {
    c.result = CheckResult::kWarn;
    for (const std::string& b : bad) c.detail += "; " + b;
    c.fix =
        "a GPU that reports uncorrected ECC or Xid errors may fail jobs: check it with "
        "`nvidia-smi -q -d ECC` and NVIDIA's Xid list, and reset or replace it";
  } else if (ecc_csv.empty() && kernel_log.empty()) {
    c.result = CheckResult::kSkip;
  }
  return c;
}

namespace {

// nvidia-smi's uncorrected ECC counts per GPU: the driver directory's, else
// the PATH's; "" when there is none or it fails.
std::string ReadEccCounters(const exec::ExecConfig& config) {
  std::string smi = "nvidia-smi";
  if (!config.gpu_driver_dir.empty() && fs::exists(config.gpu_driver_dir + "/nvidia-smi")) {
    smi = config.gpu_driver_dir + "/nvidia-smi";
  }
  std::string out;
  auto r = exec::RunCommand(
      {smi, "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader"},
      [&out](std::string_view line) { out.append(line).append("\n"); }, 20'000);
  return r.ok() && r->ok() ? out : "";
}

// The kernel log (dmesg), where this account may read it; "" otherwise.
std::string ReadKernelLog() {
  std::string out;
  auto r = exec::RunCommand(
      {"dmesg"}, [&out](std::string_view line) { out.append(line).append("\n"); }, 20'000);
  return r.ok() && r->ok() ? out : "";
}

// The probe: given, else BIN/../lib/gpupool-cuda-probe beside this binary.
std::string ProbePath(const SelftestOptions& o) {
  if (!o.cuda_probe.empty()) return o.cuda_probe;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path() / "lib" / "gpupool-cuda-probe").string();
}

// Runs the probe as a sandboxed job holding every GPU; its stdout.
Result<std::string> RunCudaProbe(const SelftestOptions& o, const exec::ExecConfig& config,
                                 const GpuSnapshot& gpus) {
  const std::string probe = ProbePath(o);
  if (probe.empty() || !fs::exists(probe)) {
    return Status::NotFound("the CUDA probe is not installed (" + probe + ")");
  }
  const bool root = ::geteuid() == 0;
  std::error_code ec;
  const fs::path base = fs::path(o.agent.data_dir) / "selftest";
  fs::remove_all(base, ec);
  exec::TaskContext task;
  task.attempt_id = "selftest";
  task.task_dir = base.string();
  task.work_dir = (base / "work").string();
  fs::create_directories(task.work_dir, ec);
  if (ec) return Status::Internal("cannot make " + task.work_dir + ": " + ec.message());
  fs::copy_file(probe, task.work_dir + "/gpupool-cuda-probe", ec);
  if (ec) return Status::Internal("cannot copy the CUDA probe: " + ec.message());
  task.argv = {std::string(exec::kSandboxWorkDir) + "/gpupool-cuda-probe"};
  task.env = o.probe_env;
  task.network = NetworkMode::kNone;
  for (const GpuInfo& g : gpus.gpus) {
    task.gpu_uuids.push_back(g.uuid);
    if (g.minor_number >= 0) task.gpu_minors.push_back(g.minor_number);
  }
  if (root) {  // as the agent runs jobs: an unprivileged account of its own
    task.uid = task.gid = config.first_uid;
    for (const fs::path& p : {base, base / "work", base / "work" / "gpupool-cuda-probe"}) {
      if (::chown(p.c_str(), task.uid, task.gid) != 0) {
        return Status::Internal("cannot hand " + p.string() + " to the task account");
      }
    }
  }
  exec::SandboxExecutor sandbox(config, nullptr, nullptr);
  GP_RETURN_IF_ERROR(sandbox.Prepare(task, [](const std::string&) {}));
  auto plan = sandbox.Start(task);
  if (!plan.ok()) {
    sandbox.Cleanup();
    return plan.status();
  }
  std::string out;
  auto ran = exec::RunPlan(
      *plan, [&out](std::string_view line) { out.append(line).append("\n"); }, 60'000);
  sandbox.Cleanup();
  fs::remove_all(base, ec);
  if (!ran.ok()) return ran.status();
  if (out.empty()) {
    return Status::Internal("the probe printed nothing (exit " + std::to_string(ran->exit_code) +
                            "): " + ran->stderr_tail);
  }
  return out;
}

SelftestCheck GpuCheck(const SelftestOptions& o, const exec::ExecConfig& config,
                       Result<GpuSnapshot>& snapshot) {
  SelftestCheck c{"gpu driver", CheckResult::kPass, "", ""};
  std::unique_ptr<GpuSource> source;
  if (!o.agent.simulate_gpus.empty()) {
    auto sim = OpenSimulatedGpus(o.agent.simulate_gpus, "selftest");
    if (!sim.ok()) {
      snapshot = sim.status();
      return {c.name, CheckResult::kFail, sim.status().message(), "fix --simulate-gpus"};
    }
    source = *std::move(sim);
  } else {
    auto nvml = OpenNvml(NvmlLibraryPath(o.agent.nvml_library, config.gpu_driver_dir));
    if (!nvml.ok()) {
      snapshot = nvml.status();
      return {c.name, CheckResult::kFail, nvml.status().message(),
              "install the NVIDIA driver (Debian: apt install nvidia-driver; Ubuntu: "
              "ubuntu-drivers install) and check that `nvidia-smi` lists the GPUs, or point "
              "--gpu-driver-dir at the driver's libraries"};
    }
    source = *std::move(nvml);
  }
  snapshot = source->Read();
  if (!snapshot.ok()) {
    return {c.name, CheckResult::kFail, snapshot.status().message(),
            "check the driver with `nvidia-smi`; a driver whose kernel module and libraries "
            "differ in version needs a reboot"};
  }
  std::ostringstream d;
  d << source->Describe() << "; driver " << snapshot->driver_version << ", CUDA "
    << snapshot->cuda_version << "; " << snapshot->gpus.size() << " GPU(s)";
  for (const GpuInfo& g : snapshot->gpus) {
    d << "; " << g.index << ": " << g.name << " " << FormatMebibytes(g.memory_mib);
  }
  c.detail = d.str();
  if (snapshot->gpus.empty()) {
    c.result = CheckResult::kFail;
    c.fix = "NVML sees no GPU: check `nvidia-smi`";
  } else if (!o.agent.simulate_gpus.empty()) {
    c.result = CheckResult::kWarn;
    c.fix = "simulated GPUs (--simulate-gpus) run no CUDA: for development only";
  }
  return c;
}

SelftestCheck UserNamespaceCheck(const exec::ExecConfig& config) {
  const bool root = ::geteuid() == 0;
  const int uid = root ? config.first_uid : -1;
  Status s = exec::ProbeSandbox(config.sandbox, uid, uid);
  if (s.ok()) {
    return {"user namespaces", CheckResult::kPass,
            "bubblewrap makes its namespaces" +
                std::string(root ? " as the task account " + std::to_string(uid) : ""),
            ""};
  }
  return {"user namespaces", CheckResult::kFail, s.message(),
          "jobs run in bubblewrap, which needs unprivileged user namespaces: `sysctl "
          "kernel.unprivileged_userns_clone=1` (Debian), or on Ubuntu 23.10 and later an "
          "AppArmor profile for bwrap (or `sysctl "
          "kernel.apparmor_restrict_unprivileged_userns=0`); install bubblewrap if it is "
          "missing"};
}

// This process's cgroup v2 directory, from /proc/self/cgroup's "0::" line.
std::string OwnCgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("0::")) {
      std::string path = "/sys/fs/cgroup" + line.substr(3);
      if (fs::exists(path + "/cgroup.controllers")) return path;
      path = "/sys/fs/cgroup/unified" + line.substr(3);
      if (fs::exists(path + "/cgroup.controllers")) return path;
    }
  }
  return "";
}

SelftestCheck CgroupCheck(const exec::ExecConfig& config) {
  SelftestCheck c{"cgroup v2", CheckResult::kWarn, "", ""};
  const std::string fix =
      "without a delegated cgroup v2, jobs' memory and process limits are enforced by "
      "rlimits and polling only: run the agent as its systemd service (Delegate=yes) or under "
      "`systemd-run --scope -p Delegate=yes`";
  if (config.cgroup == "none") {
    c.detail = "turned off by the agent config (cgroup: none)";
    c.fix = fix;
    return c;
  }
  const std::string dir = config.cgroup == "auto" ? OwnCgroup() : config.cgroup;
  if (dir.empty()) {
    c.detail = "no cgroup v2 hierarchy (cgroup v1 or hybrid without one)";
    c.fix = fix;
    return c;
  }
  std::string controllers = ReadFileTrimmed(dir + "/cgroup.controllers").value_or("");
  const bool memory = (" " + controllers + " ").find(" memory ") != std::string::npos;
  const bool pids = (" " + controllers + " ").find(" pids ") != std::string::npos;
  const bool writable = ::access((dir + "/cgroup.subtree_control").c_str(), W_OK) == 0 &&
                        ::access((dir + "/cgroup.procs").c_str(), W_OK) == 0;
  c.detail = dir + ": controllers \"" + controllers + "\"" + (writable ? "" : ", not writable");
  if (memory && pids && writable) {
    c.result = CheckResult::kPass;
    c.detail = "delegated: " + c.detail;
    return c;
  }
  c.fix = fix;
  return c;
}

// Free space at the data dir, or its nearest existing parent.
SelftestCheck FreeSpaceCheck(const SelftestOptions& o) {
  fs::path p = o.agent.data_dir;
  while (!p.empty() && !fs::exists(p)) p = p.parent_path();
  struct statvfs st {};
  if (p.empty() || ::statvfs(p.c_str(), &st) != 0) {
    return {"disk", CheckResult::kFail, "cannot read the free space at " + o.agent.data_dir,
            "give the agent a --data-dir it can create"};
  }
  return DiskCheck(p.string(),
                   static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize), o);
}

}  // namespace

void CheckMachine(const SelftestOptions& o, SelftestReport& report) {
  auto config = ResolveAgentConfig(o.agent.config_file, o.agent.data_dir,
                                   {.max_image_bytes = 0,
                                    .gpu_driver_dir = o.agent.gpu_driver_dir,
                                    .gpushare_library = "",
                                    .mps_control = ""});
  if (!config.ok()) {
    report.checks.push_back({"agent config", CheckResult::kFail, config.status().message(),
                             "fix the agent's config file (docs/provider-guide.md)"});
    return;
  }
  const exec::ExecConfig& exec_config = config->exec;
  Result<GpuSnapshot> snapshot = Status::Unavailable("not read");
  report.checks.push_back(GpuCheck(o, exec_config, snapshot));
  if (snapshot.ok() && !snapshot->gpus.empty() && o.agent.simulate_gpus.empty()) {
    report.checks.push_back(GpuHealthCheck(ReadEccCounters(exec_config), ReadKernelLog()));
  }
  if (!snapshot.ok() || snapshot->gpus.empty() || !o.agent.simulate_gpus.empty()) {
    report.checks.push_back(
        {"cuda in sandbox", CheckResult::kSkip,
         o.agent.simulate_gpus.empty() ? "no GPU to probe" : "simulated GPUs run no CUDA", ""});
  } else {
    auto out = RunCudaProbe(o, exec_config, *snapshot);
    report.checks.push_back(
        out.ok() ? CudaProbeCheck(*out, static_cast<int>(snapshot->gpus.size()))
                 : SelftestCheck{"cuda in sandbox", CheckResult::kFail, out.status().message(),
                                 "check the sandbox (the user namespaces check) and the "
                                 "driver's files"});
  }
  report.checks.push_back(UserNamespaceCheck(exec_config));
  report.checks.push_back(CgroupCheck(exec_config));
  report.checks.push_back(FreeSpaceCheck(o));
}

Status SaveSelftest(const std::string& data_dir, const SelftestReport& report, int64_t now_ms) {
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  if (ec) return Status::Internal("cannot make " + data_dir + ": " + ec.message());
  json j = SelftestToJson(report);
  j["at_ms"] = now_ms;
  return WriteFileAtomic(data_dir + "/selftest.json", j.dump(2) + "\n",
                         {.mode = 0644, .fsync = true});
}

std::map<std::string, std::string> SelftestLabels(const std::string& data_dir) {
  auto text = ReadFile(data_dir + "/selftest.json");
  if (!text.ok()) return {};
  json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("ok") || !j["ok"].is_boolean() || !j.contains("at_ms") ||
      !j["at_ms"].is_number_integer()) {
    return {};
  }
  std::time_t at = static_cast<std::time_t>(j["at_ms"].get<int64_t>() / 1000);
  std::tm tm{};
  ::gmtime_r(&at, &tm);
  char day[16];
  std::strftime(day, sizeof day, "%Y-%m-%d", &tm);
  return {{kVerifiedLabel, j["ok"].get<bool>() ? "true" : "false"}, {kVerifiedAtLabel, day}};
}

SelftestReport RunSelftest(const SelftestOptions& options) {
  SelftestReport report;
  CheckMachine(options, report);
  CheckServer(options, report);
  return report;
}

}  // namespace gpupool::agent
