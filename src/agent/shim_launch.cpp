#include "agent/shim_launch.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/log.h"

namespace gpupool::agent {
namespace {

using json = nlohmann::json;

json LimitsJson(const exec::Limits& l) {
  return {{"memory_bytes", l.memory_bytes},
          {"cpu_milli", l.cpu_milli},
          {"pids", l.pids},
          {"disk_bytes", l.disk_bytes}};
}

exec::Limits LimitsFrom(const json& j) {
  return {j.at("memory_bytes").get<int64_t>(), j.at("cpu_milli").get<int64_t>(),
          j.at("pids").get<int64_t>(), j.at("disk_bytes").get<int64_t>()};
}

json ContainerJson(const exec::ContainerOptions& c) {
  return {{"engine", c.engine}, {"gpu_mode", c.gpu_mode}, {"extra_args", c.extra_args}};
}

exec::ContainerOptions ContainerFrom(const json& j) {
  exec::ContainerOptions c;
  c.engine = j.at("engine").get<std::string>();
  c.gpu_mode = j.at("gpu_mode").get<std::string>();
  c.extra_args = j.at("extra_args").get<std::vector<std::string>>();
  return c;
}

json PortsJson(const exec::PortRange& p) { return {{"first", p.first}, {"count", p.count}}; }

exec::PortRange PortsFrom(const json& j) {
  return {j.at("first").get<int>(), j.at("count").get<int>()};
}

json ExecConfigJson(const exec::ExecConfig& c) {
  std::vector<std::string> blocked;
  for (const exec::IpPrefix& p : c.sandbox.blocked_networks) blocked.push_back(FormatIpPrefix(p));
  return {{"executors", c.executors},
          {"sandbox",
           {{"bwrap", c.sandbox.bwrap},
            {"host_paths", c.sandbox.host_paths},
            {"devices_dir", c.sandbox.devices_dir},
            {"ldconfig", c.sandbox.ldconfig},
            {"pasta", c.sandbox.pasta},
            {"blocked_networks", blocked},
            {"gang_ports", PortsJson(c.sandbox.gang_ports)},
            {"gang_ports_per_rank", c.sandbox.gang_ports_per_rank}}},
          {"gpu_driver_dir", c.gpu_driver_dir},
          {"gpushare_library", c.gpushare_library},
          {"images",
           {{"dir", c.images.dir},
            {"max_bytes", c.images.max_bytes},
            {"max_image_bytes", c.images.max_image_bytes},
            {"skopeo", c.images.skopeo},
            {"umoci", c.images.umoci},
            {"command_timeout_ms", c.images.command_timeout_ms}}},
          {"docker", ContainerJson(c.docker)},
          {"podman", ContainerJson(c.podman)},
          {"cgroup", c.cgroup},
          {"first_uid", c.first_uid},
          {"uid_count", c.uid_count},
          {"defaults", LimitsJson(c.defaults)},
          {"memory_poll_ms", c.memory_poll_ms}};
}

exec::ExecConfig ExecConfigFrom(const json& j) {
  exec::ExecConfig c;
  c.executors = j.at("executors").get<std::vector<std::string>>();
  const json& s = j.at("sandbox");
  c.sandbox.bwrap = s.at("bwrap").get<std::string>();
  c.sandbox.host_paths = s.at("host_paths").get<std::vector<std::string>>();
  c.sandbox.devices_dir = s.at("devices_dir").get<std::string>();
  c.sandbox.ldconfig = s.at("ldconfig").get<std::string>();
  c.sandbox.pasta = s.at("pasta").get<std::string>();
  c.sandbox.blocked_networks.clear();
  for (const auto& text : s.at("blocked_networks").get<std::vector<std::string>>()) {
    auto prefix = exec::ParseIpPrefix(text);
    if (!prefix.ok()) throw std::invalid_argument("blocked_networks: " + prefix.status().message());
    c.sandbox.blocked_networks.push_back(*prefix);
  }
  c.sandbox.gang_ports = PortsFrom(s.at("gang_ports"));
  c.sandbox.gang_ports_per_rank = s.at("gang_ports_per_rank").get<int>();
  c.gpu_driver_dir = j.at("gpu_driver_dir").get<std::string>();
  c.gpushare_library = j.at("gpushare_library").get<std::string>();
  const json& i = j.at("images");
  c.images.dir = i.at("dir").get<std::string>();
  c.images.max_bytes = i.at("max_bytes").get<int64_t>();
  c.images.max_image_bytes = i.at("max_image_bytes").get<int64_t>();
  c.images.skopeo = i.at("skopeo").get<std::string>();
  c.images.umoci = i.at("umoci").get<std::string>();
  c.images.command_timeout_ms = i.at("command_timeout_ms").get<int64_t>();
  c.docker = ContainerFrom(j.at("docker"));
  c.podman = ContainerFrom(j.at("podman"));
  c.cgroup = j.at("cgroup").get<std::string>();
  c.first_uid = j.at("first_uid").get<int>();
  c.uid_count = j.at("uid_count").get<int>();
  c.defaults = LimitsFrom(j.at("defaults"));
  c.memory_poll_ms = j.at("memory_poll_ms").get<int64_t>();
  return c;
}

json ExecEnvJson(const exec::ExecEnvironment& e) {
  json j = {{"limits_mode", e.limits_mode},
            {"available", e.available},
            {"unavailable", e.unavailable},
            {"sandbox_images", e.sandbox_images}};
  if (e.cgroups) j["cgroups"] = {{"path", e.cgroups->path()}, {"has_cpu", e.cgroups->has_cpu()}};
  return j;
}

exec::ExecEnvironment ExecEnvFrom(const json& j) {
  exec::ExecEnvironment e;
  e.limits_mode = j.at("limits_mode").get<std::string>();
  e.available = j.at("available").get<std::vector<std::string>>();
  e.unavailable = j.at("unavailable").get<std::map<std::string, std::string>>();
  e.sandbox_images = j.at("sandbox_images").get<bool>();
  if (auto c = j.find("cgroups"); c != j.end()) {
    e.cgroups =
        exec::CgroupTree::Adopt(c->at("path").get<std::string>(), c->at("has_cpu").get<bool>());
  }
  return e;
}

json BlobJson(const BlobAccess& b) {
  return {{"server_url", b.server_url},
          {"token", b.token},
          {"tls",
           {{"ca_fingerprint", b.tls.ca_fingerprint},
            {"ca_file", b.tls.ca_file},
            {"client_cert_file", b.tls.client_cert_file},
            {"client_key_file", b.tls.client_key_file},
            {"insecure", b.tls.insecure}}},
          {"cache_dir", b.cache_dir},
          {"cache_bytes", b.cache_bytes},
          {"staging_dir", b.staging_dir}};
}

BlobAccess BlobFrom(const json& j) {
  BlobAccess b;
  b.server_url = j.at("server_url").get<std::string>();
  b.token = j.at("token").get<std::string>();
  const json& t = j.at("tls");
  b.tls.ca_fingerprint = t.at("ca_fingerprint").get<std::string>();
  b.tls.ca_file = t.at("ca_file").get<std::string>();
  b.tls.client_cert_file = t.at("client_cert_file").get<std::string>();
  b.tls.client_key_file = t.at("client_key_file").get<std::string>();
  b.tls.insecure = t.at("insecure").get<bool>();
  b.cache_dir = j.at("cache_dir").get<std::string>();
  b.cache_bytes = j.at("cache_bytes").get<int64_t>();
  b.staging_dir = j.at("staging_dir").get<std::string>();
  return b;
}

// The agent's log level, so that the shim logs what the agent would.
std::string CurrentLogLevel() {
  for (auto [level, name] :
       {std::pair{LogLevel::kDebug, "debug"}, std::pair{LogLevel::kInfo, "info"},
        std::pair{LogLevel::kWarn, "warn"}}) {
    if (LogEnabled(level)) return name;
  }
  return "error";
}

}  // namespace

Result<std::string> EncodeShimOptions(const ShimOptions& o) {
  if (o.exec_config == nullptr || o.exec_env == nullptr)
    return Status::InvalidArgument("shim options without an executor config");
  json j = {{"task_dir", o.task_dir},
            {"task", json::parse(proto::Encode(o.task))},
            {"kill_grace_ms", o.kill_grace_ms},
            {"exec_config", ExecConfigJson(*o.exec_config)},
            {"exec_env", ExecEnvJson(*o.exec_env)},
            {"uid", o.uid},
            {"gid", o.gid},
            {"gpu_minors", o.gpu_minors},
            {"gpu_cap_devices", o.gpu_cap_devices},
            {"blob", BlobJson(o.blob)},
            {"agent_pid", o.agent_pid},
            {"gang_ports", PortsJson(o.gang_ports)},
            {"gpu_share", nullptr},
            {"log_level", CurrentLogLevel()}};
  if (o.gpu_share) {
    j["gpu_share"] = {{"memory_bytes", o.gpu_share->memory_bytes},
                      {"share_milli", o.gpu_share->share_milli},
                      {"strict", o.gpu_share->strict},
                      {"mps_pipe_dir", o.gpu_share->mps_pipe_dir},
                      {"mps_shm_dir", o.gpu_share->mps_shm_dir}};
  }
  return j.dump();
}

Result<std::unique_ptr<DecodedShimOptions>> DecodeShimOptions(std::string_view text) {
  auto out = std::make_unique<DecodedShimOptions>();
  try {
    json j = json::parse(text);
    ShimOptions& o = out->options;
    o.task_dir = j.at("task_dir").get<std::string>();
    GP_ASSIGN_OR_RETURN(o.task, proto::DecodeStartTask(j.at("task").dump()));
    o.kill_grace_ms = j.at("kill_grace_ms").get<int64_t>();
    out->exec_config = ExecConfigFrom(j.at("exec_config"));
    out->exec_env = ExecEnvFrom(j.at("exec_env"));
    o.exec_config = &out->exec_config;
    o.exec_env = &out->exec_env;
    o.uid = j.at("uid").get<int>();
    o.gid = j.at("gid").get<int>();
    o.gpu_minors = j.at("gpu_minors").get<std::vector<int>>();
    o.gpu_cap_devices = j.value("gpu_cap_devices", std::vector<std::string>{});
    o.blob = BlobFrom(j.at("blob"));
    o.agent_pid = j.at("agent_pid").get<int>();
    o.gang_ports = PortsFrom(j.at("gang_ports"));
    if (const json& s = j.at("gpu_share"); !s.is_null()) {
      o.gpu_share =
          exec::GpuShare{s.at("memory_bytes").get<int64_t>(), s.at("share_milli").get<int32_t>(),
                         s.at("strict").get<bool>(), s.at("mps_pipe_dir").get<std::string>(),
                         s.at("mps_shm_dir").get<std::string>()};
    }
    LogLevel level;
    if (ParseLogLevel(j.at("log_level").get<std::string>(), &level)) SetLogLevel(level);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("shim options: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return Status::InvalidArgument(std::string("shim options: ") + e.what());
  }
  return out;
}

Result<pid_t> SpawnShim(ShimLauncher& launcher, const ShimOptions& options, int status_fd) {
  GP_ASSIGN_OR_RETURN(std::string text, EncodeShimOptions(options));
  return launcher.Spawn(text, status_fd, options.task.attempt_id, options.agent_pid);
}

int RunShimWithOptions(std::string_view json_text, pid_t parent) {
  auto decoded = DecodeShimOptions(json_text);
  if (!decoded.ok()) {
    std::fprintf(stderr, "gpupool-shim: %s\n", decoded.status().message().c_str());
    return 1;
  }
  ShimOptions& options = (*decoded)->options;
  // The process whose death is the agent's, for the shim's stop reason.
  if (options.agent_pid != 0) options.agent_pid = static_cast<int>(parent);
  SetLogComponent("shim " + options.task.attempt_id);
  return RunShim(options);
}

}  // namespace gpupool::agent
