#include "agent/shim_context.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "agent/task_exec.h"
#include "common/safe_fs.h"
#include "exec/limits.h"

namespace gpupool::agent {
namespace {

// Where a multi-node job's ranks meet, and their place in it: GPUPOOL_*
// for every job, torchrun's variables for a rank of a torch gang (one
// process per node, so RANK is the node's rank).
void AddGangEnvironment(const proto::StartTask& task, std::vector<std::string>& env) {
  const std::optional<proto::GangRank>& g = task.gang;
  std::string nodes = std::to_string(g ? g->nodes : 1);
  std::string rank = std::to_string(g ? g->rank : 0);
  env.push_back("GPUPOOL_NNODES=" + nodes);
  env.push_back("GPUPOOL_NODE_RANK=" + rank);
  if (!g) return;
  env.push_back("GPUPOOL_GPUS_PER_NODE=" + std::to_string(task.gpu_uuids.size()));
  if (g->mode != Distributed::kTorch || g->master_port == 0) return;
  std::string port = std::to_string(g->master_port);
  bool v6 = g->master_addr.find(':') != std::string::npos;
  env.push_back("MASTER_ADDR=" + g->master_addr);
  env.push_back("MASTER_PORT=" + port);
  env.push_back("WORLD_SIZE=" + nodes);
  env.push_back("RANK=" + rank);
  env.push_back("LOCAL_RANK=0");
  env.push_back("LOCAL_WORLD_SIZE=1");
  env.push_back("NODE_RANK=" + rank);
  env.push_back("GROUP_RANK=" + rank);
  // For `torchrun --rdzv_endpoint`, which wants an IPv6 address in brackets.
  env.push_back("GPUPOOL_MASTER=" + (v6 ? "[" + g->master_addr + "]" : g->master_addr) + ":" +
                port);
}

// What gpupool tells the job, on top of the spec's env. Paths that differ
// in a sandbox (HOME, TMPDIR, GPUPOOL_WORK_DIR) are the executor's.
std::vector<std::string> JobEnvironment(const proto::StartTask& task) {
  std::vector<std::string> env;
  std::string gpus;
  for (const auto& g : task.gpu_uuids) gpus += (gpus.empty() ? "" : ",") + g;
  env.push_back("CUDA_VISIBLE_DEVICES=" + gpus);
  env.push_back("GPUPOOL_GPUS=" + gpus);
  // A share of a GPU: how much, so the job (and the sharing layer) can keep to it.
  if (task.gpu_milli > 0 && task.gpu_milli < 1000) {
    env.push_back("GPUPOOL_GPU_MILLI=" + std::to_string(task.gpu_milli));
    env.push_back("GPUPOOL_GPU_MEMORY_MIB=" + std::to_string(task.gpu_memory_mib));
  }
  env.push_back("GPUPOOL_JOB_ID=" + std::to_string(task.job_id));
  env.push_back("GPUPOOL_ATTEMPT_ID=" + task.attempt_id);
  if (task.spec.checkpoint) {
    env.push_back("GPUPOOL_CHECKPOINT_SIGNAL=" + CheckpointSignalName(*task.spec.checkpoint));
  }
  if (!task.restore_manifest.empty()) env.push_back("GPUPOOL_RESTORED=1");
  AddGangEnvironment(task, env);
  // The spec's own variables come first and never replace gpupool's (its
  // validator refuses those names already).
  std::vector<std::string> out;
  for (const auto& [k, v] : task.spec.env) {
    std::string prefix = k + "=";
    bool ours = std::any_of(env.begin(), env.end(),
                            [&](const std::string& e) { return e.starts_with(prefix); });
    if (!ours) out.push_back(prefix + v);
  }
  out.insert(out.end(), env.begin(), env.end());
  return out;
}

exec::Limits RequestedLimits(const JobSpec& spec) {
  exec::Limits l;
  l.memory_bytes = spec.resources.memory_mib << 20;
  l.cpu_milli = spec.resources.cpu_milli;
  l.disk_bytes = spec.resources.disk_mib << 20;
  return l;
}

}  // namespace

// "SIGUSR1", or "none".
std::string CheckpointSignalName(const CheckpointSpec& c) {
  if (c.signal == "none" || c.signal.starts_with("SIG")) return c.signal;
  return "SIG" + c.signal;
}

// The signal that asks the job to checkpoint: its spec's (SIGUSR1 by
// default), or 0 for jobs that declare none (or no checkpoint section).
int CheckpointSignal(const JobSpec& spec) {
  if (!spec.checkpoint || spec.checkpoint->signal == "none") return 0;
  std::string name = CheckpointSignalName(*spec.checkpoint);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev != nullptr && name == std::string("SIG") + abbrev) return sig;
  }
  return 0;  // the spec parser allows only names that exist
}

// `notes`: the job's requests lowered to the provider's limits.
exec::TaskContext MakeTaskContext(const ShimOptions& o, const TaskPaths& paths,
                                  std::vector<std::string>& notes) {
  const proto::StartTask& task = o.task;
  exec::TaskContext c;
  c.attempt_id = task.attempt_id;
  c.job_id = task.job_id;
  c.task_dir = paths.dir;
  c.work_dir = paths.work_dir();
  if (!task.spec.run.empty()) {
    c.argv = {"/bin/sh", "-c", task.spec.run};
    c.argv_is_shell = true;
  } else {
    c.argv = task.spec.command;
  }
  c.env = JobEnvironment(task);
  c.image = task.spec.image;
  c.network = task.spec.network;
  c.host_network = task.gang.has_value();
  c.gang_ports = o.gang_ports;
  c.gpu_uuids = task.gpu_uuids;
  c.gpu_minors = o.gpu_minors;
  c.gpu_cap_devices = o.gpu_cap_devices;
  c.gpu_share = o.gpu_share;
  c.limits = exec::TaskLimits(RequestedLimits(task.spec), o.exec_config->defaults, &notes);
  c.uid = o.uid;
  c.gid = o.gid;
  return c;
}

// A Jupyter session (agent/task_exec.h): the directory for the notebook
// server's socket, the job's own (mode 0700: only its account and the
// agent reach the socket), and the variables that tell the job the
// socket's path and the token the server's proxy presents.
Status PrepareJupyterSession(const proto::StartTask& task, const TaskPaths& paths,
                             const ShimOptions& o, std::string_view executor,
                             exec::TaskContext& ctx) {
  if (!task.spec.session || task.spec.session->kind != SessionKind::kJupyter) return Status::Ok();
  // The work directory holds the job's inputs already: a symlink of theirs
  // under this name is refused, never followed (a chmod or chown through it
  // would change a host file as root).
  UniqueFd work(::open(paths.work_dir().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!work.valid()) {
    return Status::Internal("cannot open " + paths.work_dir() + ": " + std::strerror(errno));
  }
  auto made = MakeDirAt(work.get(), kJupyterSocketDir, 0700, /*exist_ok=*/true);
  if (!made.ok()) return made.status().WithContext("the Jupyter socket's directory");
  if (::fchmod(made->get(), 0700) != 0) {
    return Status::Internal(std::string("cannot set the mode of ") + kJupyterSocketDir + ": " +
                            std::strerror(errno));
  }
  if (o.uid >= 0 &&
      ::fchown(made->get(), static_cast<uid_t>(o.uid), static_cast<gid_t>(o.gid)) != 0) {
    return Status::Internal(std::string("cannot give ") + kJupyterSocketDir + " to uid " +
                            std::to_string(o.uid));
  }
  ctx.env.push_back("GPUPOOL_JUPYTER_SOCKET=" + JupyterSocketInJob(executor, paths.work_dir()));
  ctx.env.push_back("JUPYTER_TOKEN=" + task.spec.session->jupyter_token);
  return Status::Ok();
}

}  // namespace gpupool::agent
