// `gpupool agent selftest`: whether this machine can lend its GPUs to a
// pool, checked the way the agent will use it, before it joins:
//
//   gpu driver       NVML loads (the agent's --nvml-library/--gpu-driver-dir);
//                    the driver and CUDA versions, every GPU
//   gpu health       uncorrected ECC errors (nvidia-smi, where there is one)
//                    and Xid errors in the kernel log (where it is readable)
//   cuda in sandbox  gpupool-cuda-probe (src/cuda_probe) run in the sandbox
//                    a job gets, with every GPU: cuInit succeeds and sees them
//   user namespaces  bubblewrap makes its namespaces (as the task account)
//   cgroup v2        the agent's cgroup offers memory and pids and can be
//                    delegated (else jobs get rlimits only: a warning)
//   disk             free space where the agent keeps tasks and caches
//   server           /healthz answers: round trip, over the pinned CA
//   pool CA          the server's certificate chains to the CA the join
//                    token names (TLS only)
//   clock            the offset from the server's clock (its Date header)
//   bandwidth        a download from the server (GET /v1/selftest/bytes)
//
// Each check passes, warns (works, with a cost), fails (the agent will not
// work, or its jobs will not) or is skipped (no GPU, no server given), and
// says what it saw and, when it did not pass, what to do.
//
// Blocking; runs processes (bubblewrap, the probe) and makes HTTP requests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/agent.h"

namespace gpupool::agent {

enum class CheckResult { kPass, kWarn, kFail, kSkip };
std::string_view CheckResultName(CheckResult r);  // "pass", "warn", "fail", "skip"

struct SelftestCheck {
  std::string name;
  CheckResult result = CheckResult::kPass;
  std::string detail;  // what it saw
  std::string fix;     // what to do when it did not pass; "" when it passed
};

struct SelftestReport {
  std::vector<SelftestCheck> checks;
  bool ok() const;  // no check failed
};

struct SelftestOptions {
  // The agent's own flags (server, join token or CA file, data dir, config,
  // GPUs, driver directory); no server: its checks are skipped.
  AgentOptions agent;
  // gpupool-cuda-probe; empty: BIN/../lib/gpupool-cuda-probe beside this binary.
  std::string cuda_probe;
  // KEY=VALUE for the probe in the sandbox (CUDA_VISIBLE_DEVICES, ...).
  std::vector<std::string> probe_env;
  // Free space: below `warn_free_bytes` a warning, below `min_free_bytes` a failure.
  int64_t warn_free_bytes = int64_t{20} << 30;
  int64_t min_free_bytes = int64_t{2} << 30;
  int64_t download_bytes = int64_t{8} << 20;  // for the bandwidth
};

SelftestReport RunSelftest(const SelftestOptions& options);

// The checks of the machine and of the server (selftest.cpp,
// selftest_server.cpp): each appends its checks to `report`.
void CheckMachine(const SelftestOptions& options, SelftestReport& report);
void CheckServer(const SelftestOptions& options, SelftestReport& report);

// Pure parts, tested on their own.
// Free space against the thresholds.
SelftestCheck DiskCheck(const std::string& path, int64_t free_bytes, const SelftestOptions& o);
// The offset of the server's clock from ours, from an HTTP Date header and
// the request's send and receive times (Unix ms): the middle of the request
// against the date (whole seconds, so within about a second).
Result<int64_t> ClockOffsetMs(std::string_view date_header, int64_t sent_ms, int64_t received_ms);
SelftestCheck ClockCheck(int64_t offset_ms);
// The GPUs' health from nvidia-smi's CSV answer to
// --query-gpu=index,ecc.errors.uncorrected.volatile.total (empty: none
// ran) and the kernel log's text (empty: not readable).
SelftestCheck GpuHealthCheck(std::string_view ecc_csv, std::string_view kernel_log);
// What the probe printed (one line of JSON) as the check.
SelftestCheck CudaProbeCheck(std::string_view probe_output, int gpus);

nlohmann::json SelftestToJson(const SelftestReport& report);

// The last report, kept in DATA_DIR/selftest.json by `selftest` and `join`,
// and the labels the agent publishes from it at every hello:
// gpupool/verified ("true" when no check failed, else "false") and
// gpupool/verified-at (its UTC day). None without a report. A server run
// with --require-node-label gpupool/verified=true gives work only to nodes
// that passed. (The provider's machine says so: a check against mistakes,
// not against a provider who lies, as everything an agent reports.)
inline constexpr const char* kVerifiedLabel = "gpupool/verified";
inline constexpr const char* kVerifiedAtLabel = "gpupool/verified-at";
Status SaveSelftest(const std::string& data_dir, const SelftestReport& report, int64_t now_ms);
std::map<std::string, std::string> SelftestLabels(const std::string& data_dir);

}  // namespace gpupool::agent
