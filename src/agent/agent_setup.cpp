#include "agent/agent_setup.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "agent/agent_config.h"
#include "common/log.h"
#include "net/http.h"
#include "net/server_list.h"

namespace gpupool::agent {
namespace {

// An empty GPU source, for machines without NVML.
class NoGpus : public GpuSource {
 public:
  explicit NoGpus(std::string why) : why_(std::move(why)) {}
  Result<GpuSnapshot> Read() override { return GpuSnapshot{}; }
  std::string Describe() const override { return "no GPUs (" + why_ + ")"; }

 private:
  std::string why_;
};

}  // namespace

Result<std::unique_ptr<GpuSource>> OpenGpus(const std::string& simulate, const std::string& seed,
                                            const std::string& nvml_library,
                                            const std::string& gpu_driver_dir) {
  if (!simulate.empty()) return OpenSimulatedGpus(simulate, seed);
  auto nvml = OpenNvml(NvmlLibraryPath(nvml_library, gpu_driver_dir));
  if (nvml.ok()) return nvml;
  GP_LOG(kWarn) << "no NVIDIA GPUs: " << nvml.status().message() << "; lending CPU only";
  return std::unique_ptr<GpuSource>(std::make_unique<NoGpus>(nvml.status().message()));
}

exec::ExecEnvironment ProbeExecutors(const exec::ExecConfig& c, bool root) {
  exec::ExecEnvironment env =
      exec::ProbeExecEnvironment(c, root ? c.first_uid : -1, root ? c.first_uid : -1);
  std::string offered;
  for (const std::string& name : env.available) offered += (offered.empty() ? "" : ", ") + name;
  GP_LOG(kInfo) << "executors: " << (offered.empty() ? "none" : offered)
                << (offered.empty() ? "" : " (default " + env.default_executor() + ")")
                << "; images: "
                << (env.sandbox_images ? "skopeo + umoci" : "not available (no skopeo/umoci)");
  for (const auto& [name, why] : env.unavailable) {
    GP_LOG(kWarn) << "executor " << name << " is allowed but does not work: " << why;
  }
  GP_LOG(kInfo) << env.limits_mode;
  GP_LOG(kInfo) << "tasks run as "
                << (root ? "uids " + std::to_string(c.first_uid) + "-" +
                               std::to_string(c.first_uid + c.uid_count - 1) + ", one per task"
                         : "this agent's own account");
  return env;
}

Result<std::vector<std::string>> AgentChannelUrls(const std::string& server_list) {
  std::vector<std::string> urls;
  for (const std::string& server : net::SplitServerList(server_list)) {
    auto url = net::ParseUrl(server);
    if (!url) return Status::InvalidArgument("--server: invalid URL \"" + server + "\"");
    urls.push_back(std::string(url->scheme == "https" ? "wss://" : "ws://") +
                   (url->host.find(':') != std::string::npos ? "[" + url->host + "]" : url->host) +
                   ":" + std::to_string(url->port) + url->path + "/v1/agent/connect");
  }
  if (urls.empty()) return Status::InvalidArgument("--server: no URL");
  return urls;
}

Result<AgentCredentials> Credentials(const AgentOptions& options) {
  EnrollOptions e{options.server_url, options.join_token, options.data_dir,
                  options.name,       options.ca_file,    options.insecure_tls};
  int64_t wait_ms = 200;
  for (int tries = 1;; ++tries) {
    auto creds = LoadOrEnroll(e);
    if (creds.ok() || creds.status().code() != StatusCode::kUnavailable || tries == 60)
      return creds;
    GP_LOG(kWarn) << "cannot enroll yet: " << creds.status().message() << "; retrying";
    ::usleep(static_cast<useconds_t>(wait_ms * 1000));
    wait_ms = std::min<int64_t>(wait_ms * 2, 5000);
  }
}

}  // namespace gpupool::agent
