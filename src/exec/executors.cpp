#include "exec/executors.h"

#include <unistd.h>

#include <algorithm>

#include "exec/container_executor.h"
#include "exec/limits.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"
#include "exec/subprocess.h"

namespace gpupool::exec {
namespace {

// `program` as a path, or found on PATH.
bool Runnable(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = ::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t i = 0;
  while (i <= dirs.size()) {
    size_t j = dirs.find(':', i);
    if (j == std::string::npos) j = dirs.size();
    std::string dir = dirs.substr(i, j - i);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    i = j + 1;
  }
  return false;
}

}  // namespace

bool ExecEnvironment::runs_images() const {
  std::string d = default_executor();
  return (d == "sandbox" && sandbox_images) || d == "docker" || d == "podman";
}

ExecEnvironment ProbeExecEnvironment(const ExecConfig& config, int probe_uid, int probe_gid) {
  ExecEnvironment env;
  Result<CgroupTree> tree =
      Status::Unavailable("disabled in the agent's config (limits.cgroup: none)");
  if (config.cgroup != "none") tree = CgroupTree::Open(config.cgroup);
  env.limits_mode = DescribeLimitsMode(tree, config.memory_poll_ms);
  if (tree.ok()) env.cgroups = *std::move(tree);
  env.sandbox_images = Runnable(config.images.skopeo) && Runnable(config.images.umoci);
  for (const std::string& name : config.executors) {
    std::string why;
    if (name == "sandbox") {
      Status s = ProbeSandbox(config.sandbox, probe_uid, probe_gid);
      if (!s.ok()) why = s.message();
    } else if (name == "docker" || name == "podman") {
      const ContainerOptions& o = name == "docker" ? config.docker : config.podman;
      if (!Runnable(o.engine)) {
        why = o.engine + " is not installed";
      } else {
        // The CLI alone is not enough: its engine must answer.
        auto r = RunCommand({o.engine, "version", "--format", "{{.Server.Version}}"}, {}, 10'000);
        if (!r.ok()) {
          why = r.status().message();
        } else if (!r->ok()) {
          why = o.engine + " version failed: " + LastErrorLine(r->stderr_tail);
        }
      }
    } else if (name != "process") {
      why = "unknown executor";
    }
    if (why.empty()) {
      env.available.push_back(name);
    } else {
      env.unavailable[name] = why;
    }
  }
  return env;
}

Result<std::unique_ptr<Executor>> MakeExecutor(const std::string& requested,
                                               const ExecConfig& config,
                                               const ExecEnvironment& env) {
  std::string name = requested.empty() ? env.default_executor() : requested;
  if (name.empty()) {
    return Status::FailedPrecondition("this node has no working executor");
  }
  if (std::find(env.available.begin(), env.available.end(), name) == env.available.end()) {
    auto it = env.unavailable.find(name);
    if (it != env.unavailable.end()) {
      return Status::FailedPrecondition("the " + name +
                                        " executor does not work on this node: " + it->second);
    }
    return Status::FailedPrecondition("this node does not offer the " + name + " executor");
  }
  const CgroupTree* cgroups = env.cgroups ? &*env.cgroups : nullptr;
  if (name == "sandbox") {
    std::unique_ptr<ImageCache> images;
    if (env.sandbox_images) images = std::make_unique<ImageCache>(config.images);
    return std::unique_ptr<Executor>(
        std::make_unique<SandboxExecutor>(config, cgroups, std::move(images)));
  }
  if (name == "process") {
    return std::unique_ptr<Executor>(std::make_unique<ProcessExecutor>(config, cgroups));
  }
  const ContainerOptions& o = name == "docker" ? config.docker : config.podman;
  return std::unique_ptr<Executor>(std::make_unique<ContainerExecutor>(name, o));
}

}  // namespace gpupool::exec
