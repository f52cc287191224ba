#include "exec/executors.h"

#include <unistd.h>

#include <algorithm>

#include "exec/container_executor.h"
#include "exec/launch.h"
#include "exec/limits.h"
#include "exec/local_executor.h"
#include "exec/sandbox.h"
#include "exec/subprocess.h"

namespace gpupool::exec {
namespace {

// `program` as a path, or found on the agent's PATH.
bool Runnable(const std::string& program) {
  const char* path = ::getenv("PATH");
  return !FindProgram(program, path ? path : "/usr/local/bin:/usr/bin:/bin").empty();
}

}  // namespace

ExecEnvironment ProbeExecEnvironment(const ExecConfig& config, int probe_uid, int probe_gid) {
  ExecEnvironment env;
  Result<CgroupTree> tree =
      Status::Unavailable("disabled in the agent's config (limits.cgroup: none)");
  if (config.cgroup != "none") tree = CgroupTree::Open(config.cgroup);
  env.limits_mode = DescribeLimitsMode(tree, config.memory_poll_ms);
  if (tree.ok()) env.cgroups = *std::move(tree);
  bool image_tools = Runnable(config.images.skopeo) && Runnable(config.images.umoci);
  for (const std::string& name : config.executors) {
    std::string why;
    if (name == "sandbox") {
      Status s = ProbeSandbox(config.sandbox, probe_uid, probe_gid);
      if (!s.ok()) why = s.message();
      // Jobs get their own network through pasta: without it the sandbox
      // would have to share the machine's (its services on 127.0.0.1).
      if (why.empty() && !Runnable(config.sandbox.pasta)) {
        why = config.sandbox.pasta +
              " is not installed (Debian's package passt): the sandbox gives each job its own "
              "network with it";
      }
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
  env.sandbox_images = image_tools && std::find(env.available.begin(), env.available.end(),
                                                "sandbox") != env.available.end();
  return env;
}

std::string ChooseExecutor(const std::string& requested, bool has_image,
                           const ExecEnvironment& env) {
  if (!requested.empty()) return requested;
  if (!has_image) return env.default_executor();
  for (const std::string& name : env.available) {
    if ((name == "sandbox" && env.sandbox_images) || name == "docker" || name == "podman") {
      return name;
    }
  }
  return env.default_executor();  // it will say why it cannot
}

Result<std::unique_ptr<Executor>> MakeExecutor(const std::string& requested, bool has_image,
                                               const ExecConfig& config,
                                               const ExecEnvironment& env) {
  std::string name = ChooseExecutor(requested, has_image, env);
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
