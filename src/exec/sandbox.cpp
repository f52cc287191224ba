#include "exec/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "exec/driver_files.h"
#include "exec/gpu_share.h"
#include "exec/launch.h"
#include "exec/mps_client.h"
#include "exec/process_tree.h"

namespace gpupool::exec {
namespace {

// Entries of an image root that the sandbox provides itself.
const std::set<std::string> kProvidedTopLevel = {"proc", "dev", "sys", "tmp", "work", "gpupool"};

// The value of `key` in `env`, or "".
std::string EnvText(const std::vector<std::string>& env, std::string_view key) {
  return EnvValue(env, key).value_or("");
}

std::string ReadLink(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

SandboxExecutor::SandboxExecutor(const ExecConfig& config, const CgroupTree* cgroups,
                                 std::unique_ptr<ImageCache> images)
    : LocalExecutor(config, cgroups), images_(std::move(images)) {}

SandboxExecutor::~SandboxExecutor() { CloseNetworkFds(); }

Status SandboxExecutor::Prepare(const TaskContext& task, const ProgressFn& progress) {
  if (!task.image.empty()) {
    if (images_ == nullptr) {
      return Status::FailedPrecondition("image " + task.image +
                                        ": this node cannot run images (skopeo and umoci are "
                                        "not installed)");
    }
    auto ref = ParseImageRef(task.image);
    if (!ref.ok()) return ref.status();
    // Pulled and unpacked as the task's own account (a root agent's).
    GP_ASSIGN_OR_RETURN(auto lease, images_->Acquire(*ref, progress, task.stop_requested,
                                                     FsIdentity{task.uid, task.gid}));
    image_.emplace(std::move(lease));
  }
  return LocalExecutor::Prepare(task, progress);
}

// The bwrap command line being built. A root agent's task account may not
// reach the sources (the agent's data dir is closed to it): those are
// staged by the launching child under kSandboxStageDir first.
class BwrapArgs {
 public:
  BwrapArgs(LaunchPlan& plan, bool stage) : plan_(plan), stage_(stage) {}

  void Add(std::initializer_list<std::string> args) {
    plan_.argv.insert(plan_.argv.end(), args.begin(), args.end());
  }
  // A descriptor bubblewrap inherits under the same number.
  void KeepFd(int fd) { plan_.keep_fds.push_back(fd); }
  // The path bubblewrap binds `source` from.
  std::string Reachable(const std::string& source, const std::string& name) {
    if (!stage_) return source;
    plan_.stage_dir = kSandboxStageDir;
    plan_.stage_binds.push_back({source, name});
    return std::string(kSandboxStageDir) + "/" + name;
  }
  // One entry of a system root at `target`, read-only: a symlink is
  // recreated, a directory or file bound from `bind_from`.
  void SystemEntry(const std::string& source, const std::string& target,
                   const std::string& bind_from) {
    struct stat st;
    if (::lstat(source.c_str(), &st) != 0) return;
    if (S_ISLNK(st.st_mode)) {
      Add({"--symlink", ReadLink(source), target});
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      Add({"--ro-bind", bind_from, target});
    }
  }
  // A system directory as a directory of the tmpfs root holding each of its
  // entries (SystemEntry) but `skip`, so that the sandbox can put a file of
  // its own there. A missing directory is made empty; one that is a
  // symlink (or not a directory) is an error: a file of ours could not be
  // put in it.
  Status SystemDirEntries(const std::string& source, const std::string& target,
                          const std::string& bind_from, const std::string& skip) {
    struct stat st;
    if (::lstat(source.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        return Status::Internal("cannot read " + source + ": " + std::strerror(errno));
      }
      Add({"--dir", target});
      return Status::Ok();
    }
    if (!S_ISDIR(st.st_mode)) {
      return Status::FailedPrecondition("the job's " + target + " is not a directory (" + source +
                                        ")");
    }
    DIR* dir = ::opendir(source.c_str());
    if (dir == nullptr) {
      return Status::Internal("cannot read " + source + ": " + std::strerror(errno));
    }
    std::vector<std::string> names;
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != ".." && name != skip) names.push_back(std::move(name));
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    Add({"--dir", target});
    for (const std::string& name : names) {
      SystemEntry(source + "/" + name, target + "/" + name, bind_from + "/" + name);
    }
    return Status::Ok();
  }

 private:
  LaunchPlan& plan_;
  bool stage_;
};

namespace {

// The image root's top-level names, except what the sandbox provides.
Result<std::vector<std::string>> TopLevelNames(const std::string& root) {
  DIR* dir = ::opendir(root.c_str());
  if (dir == nullptr) {
    return Status::Internal("cannot read image root " + root + ": " + std::strerror(errno));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && !kProvidedTopLevel.count(name)) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Result<std::vector<std::string>> SandboxExecutor::AddSystem(BwrapArgs& args,
                                                            const TaskContext& task) const {
  // A GPU share brings its own /etc/ld.so.preload (AddGpuShare): /etc is
  // then bound entry by entry, without the system's ld.so.preload, instead
  // of as one directory (where the file could not be added).
  const bool own_etc = task.gpu_share.has_value();
  bool etc_done = false;
  if (!image_) {
    for (const std::string& path : config_.sandbox.host_paths) {
      if (own_etc && path == "/etc") {
        GP_RETURN_IF_ERROR(args.SystemDirEntries(path, path, path, "ld.so.preload"));
        etc_done = true;
      } else {
        args.SystemEntry(path, path, path);
      }
    }
    if (own_etc && !etc_done) args.Add({"--dir", "/etc"});
    return HostBaseEnv();
  }
  const std::string& root = image_->rootfs();
  std::string staged_root = args.Reachable(root, "root");
  GP_ASSIGN_OR_RETURN(auto names, TopLevelNames(root));
  for (const std::string& name : names) {
    if (own_etc && name == "etc") {
      GP_RETURN_IF_ERROR(
          args.SystemDirEntries(root + "/etc", "/etc", staged_root + "/etc", "ld.so.preload"));
      etc_done = true;
    } else {
      args.SystemEntry(root + "/" + name, "/" + name, staged_root + "/" + name);
    }
  }
  if (own_etc && !etc_done) args.Add({"--dir", "/etc"});
  std::vector<std::string> env = image_->config().env;
  if (EnvText(env, "PATH").empty()) {
    env.push_back("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  }
  return env;
}

Status SandboxExecutor::AddGpuDevices(BwrapArgs& args, const TaskContext& task) const {
  if (task.gpu_minors.empty()) return Status::Ok();  // no NVIDIA device at all
  for (const std::string& dev : GpuDeviceNodes(config_.sandbox.devices_dir, task.gpu_minors)) {
    std::string name = dev.substr(dev.rfind('/') + 1);
    if (::access(dev.c_str(), F_OK) != 0) {
      return Status::FailedPrecondition("the GPU's device node " + dev +
                                        " is missing (is the NVIDIA driver loaded?)");
    }
    args.Add({"--dev-bind", args.Reachable(dev, "dev-" + name), "/dev/" + name});
  }
  // A MIG instance's capabilities: needed to open it, like its GPU's node.
  for (const std::string& name : task.gpu_cap_devices) {
    if (name.find("..") != std::string::npos || name.starts_with("/")) {
      return Status::InvalidArgument("not a device name: " + name);
    }
    const std::string dev = config_.sandbox.devices_dir + "/" + name;
    if (::access(dev.c_str(), F_OK) != 0) {
      return Status::FailedPrecondition("the MIG instance's capability device " + dev +
                                        " is missing (is the NVIDIA driver loaded?)");
    }
    std::string key = "dev-" + name;
    std::replace(key.begin(), key.end(), '/', '-');
    args.Add({"--dev-bind", args.Reachable(dev, key), "/dev/" + name});
  }
  return Status::Ok();
}

Status SandboxExecutor::AddDriverFiles(BwrapArgs& args, const TaskContext& task,
                                       std::vector<std::string>& env) const {
  if (task.gpu_uuids.empty()) return Status::Ok();
  DriverFiles files;
  if (!config_.gpu_driver_dir.empty()) {
    // The provider's driver directory, for every job: the host's own
    // libraries in /usr must not be the ones found first.
    GP_ASSIGN_OR_RETURN(files, DriverFilesInDir(config_.gpu_driver_dir));
  } else if (image_) {
    // An image brings no NVIDIA driver: bind the host's, as the container toolkit does.
    GP_ASSIGN_OR_RETURN(files,
                        FindDriverFiles(config_.sandbox.ldconfig, EnvText(HostBaseEnv(), "PATH")));
  } else {
    return Status::Ok();  // a host job finds the host's driver in /usr
  }
  for (const DriverFile& f : files.libs) {
    args.Add(
        {"--ro-bind", args.Reachable(f.path, "lib-" + f.name), "/gpupool/driver/lib/" + f.name});
  }
  for (const DriverFile& f : files.bins) {
    args.Add(
        {"--ro-bind", args.Reachable(f.path, "bin-" + f.name), "/gpupool/driver/bin/" + f.name});
  }
  env = PrependLibraryPath(std::move(env), "/gpupool/driver/lib");
  env = MergeEnv(std::move(env), {"PATH=" + EnvText(env, "PATH") + ":/gpupool/driver/bin"});
  return Status::Ok();
}

Status SandboxExecutor::AddGpuShare(BwrapArgs& args, const TaskContext& task) const {
  if (!task.gpu_share) return Status::Ok();
  // Prepare checked the library and wrote the files (exec/gpu_share.h).
  const GpuShareFiles files = GpuShareFilesIn(task.task_dir);
  args.Add({"--ro-bind", args.Reachable(config_.gpushare_library, "share-libgpushare.so"),
            kShareLibraryInJob, "--ro-bind", args.Reachable(files.limits, "share-limits"),
            kShareLimitsInJob, "--bind", args.Reachable(files.usage, "share-usage"),
            kShareUsageInJob, "--bind", args.Reachable(files.want, "share-want"), kShareWantInJob,
            "--ro-bind", args.Reachable(files.grant, "share-grant"), kShareGrantInJob, "--ro-bind",
            args.Reachable(files.preload, "share-ld.so.preload"), "/etc/ld.so.preload"});
  return Status::Ok();
}

std::string SandboxExecutor::ShareDirInJob(const TaskContext& task) const {
  (void)task;
  return kShareDirInJob;
}

Result<std::vector<std::string>> SandboxExecutor::Command(const TaskContext& task) const {
  // Like `docker run`: a command replaces the image's CMD and keeps its
  // ENTRYPOINT; a shell `run` replaces both.
  std::vector<std::string> command;
  if (task.argv_is_shell || !image_) {
    command = task.argv;
  } else {
    command = image_->config().entrypoint;
    const auto& rest = task.argv.empty() ? image_->config().cmd : task.argv;
    command.insert(command.end(), rest.begin(), rest.end());
  }
  if (command.empty()) {
    return Status::InvalidArgument(image_ ? "image " + task.image +
                                                " has no entrypoint or command: give run or command"
                                          : "nothing to run: give run or command");
  }
  return command;
}

Result<LaunchPlan> SandboxExecutor::Start(const TaskContext& task) {
  LaunchPlan plan = BasePlan(task);
  BwrapArgs args(plan, /*stage=*/task.uid >= 0);
  // bubblewrap is found on the agent's PATH; the plan's PATH is the job's.
  std::string bwrap = FindProgram(config_.sandbox.bwrap, EnvText(HostBaseEnv(), "PATH"));
  if (bwrap.empty()) {
    return Status::FailedPrecondition("cannot find bubblewrap (" + config_.sandbox.bwrap + ")");
  }
  args.Add({bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--hostname", "gpupool-" + std::to_string(task.job_id)});
  GP_RETURN_IF_ERROR(AddNetwork(args, task));
  // The system, read-only, entry by entry on the (later read-only) tmpfs root.
  GP_ASSIGN_OR_RETURN(std::vector<std::string> base_env, AddSystem(args, task));
  args.Add({"--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--tmpfs", "/dev/shm"});
  GP_RETURN_IF_ERROR(AddGpuDevices(args, task));
  std::vector<std::string> env = MergeEnv(
      MergeEnv(std::move(base_env), {"HOME=" + std::string(kSandboxWorkDir), "TMPDIR=/tmp",
                                     "GPUPOOL_WORK_DIR=" + std::string(kSandboxWorkDir),
                                     "GPUPOOL_CHECKPOINT_DIR=" + CheckpointDirIn(kSandboxWorkDir)}),
      task.env);
  GP_RETURN_IF_ERROR(AddDriverFiles(args, task, env));
  GP_RETURN_IF_ERROR(AddGpuShare(args, task));
  if (task.gpu_share && !task.gpu_share->mps_pipe_dir.empty()) {
    // An MPS client: the GPU's daemon is reached through its pipe directory.
    args.Add(
        {"--bind", args.Reachable(task.gpu_share->mps_pipe_dir, "mps-pipe"), kMpsPipeDirInJob});
    // And shares its daemon's /dev/shm, where MPS keeps its shared memory.
    if (!task.gpu_share->mps_shm_dir.empty()) {
      args.Add({"--bind", args.Reachable(task.gpu_share->mps_shm_dir, "mps-shm"), "/dev/shm"});
    }
    env = MergeEnv(std::move(env), MpsClientEnv(*task.gpu_share, kMpsPipeDirInJob));
  }
  if (net_plan_ && !net_plan_->forward.empty()) {
    // A gang rank: gloo and NCCL must bind and advertise the address the
    // other ranks reach (the namespace's copy of this machine's), not the
    // loopback their host-name lookup falls back to.
    std::string ifname = DefaultRouteInterface();
    for (const char* key : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
      if (!ifname.empty() && !EnvValue(task.env, key)) {
        env.push_back(std::string(key) + "=" + ifname);
      }
    }
  }
  args.Add({"--bind", args.Reachable(task.work_dir, "work"), kSandboxWorkDir});
  std::string cwd = kSandboxWorkDir;
  if (image_ && !image_->config().working_dir.empty()) cwd = image_->config().working_dir;
  args.Add({"--chdir", cwd, "--remount-ro", "/", "--"});
  GP_ASSIGN_OR_RETURN(std::vector<std::string> command, Command(task));
  plan.argv.insert(plan.argv.end(), command.begin(), command.end());
  plan.env = std::move(env);
  plan.cwd = "/";
  return plan;
}

Status SandboxExecutor::AddNetwork(BwrapArgs& args, const TaskContext& task) {
  CloseNetworkFds();
  net_plan_.reset();
  if (task.network == NetworkMode::kHost) return Status::Ok();
  args.Add({"--unshare-net"});
  // A machine with no default route has nothing to connect the job to:
  // the job gets its loopback alone, as with network: false.
  if (task.network == NetworkMode::kNone || !HostDefaultRoutes().any()) return Status::Ok();
  int info[2], block[2];
  if (::pipe2(info, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  if (::pipe2(block, O_CLOEXEC) != 0) {
    ::close(info[0]);
    ::close(info[1]);
    return Status::Internal("pipe failed");
  }
  info_fd_ = info[0];
  child_info_fd_ = info[1];
  child_block_fd_ = block[0];
  block_fd_ = block[1];
  args.Add(
      {"--info-fd", std::to_string(child_info_fd_), "--block-fd", std::to_string(child_block_fd_)});
  args.KeepFd(child_info_fd_);
  args.KeepFd(child_block_fd_);
  PrivateNetworkPlan plan;
  plan.pasta = config_.sandbox.pasta;
  plan.blocked = config_.sandbox.blocked_networks;
  plan.forward = task.gang_ports;
  plan.uid = task.uid;
  plan.gid = task.gid;
  if (cgroup_) plan.cgroup_procs = cgroup_->procs_file();
  plan.log_path = task.task_dir.empty() ? "" : task.task_dir + "/pasta.log";
  net_plan_ = std::move(plan);
  return Status::Ok();
}

Status SandboxExecutor::Started(pid_t pid) {
  GP_RETURN_IF_ERROR(LocalExecutor::Started(pid));
  if (!net_plan_) return Status::Ok();
  // Only bubblewrap may hold the child's ends: its exit must close them.
  for (int* fd : {&child_info_fd_, &child_block_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  Status s = ConnectNetwork();
  if (s.ok()) {
    // The job may run now (bubblewrap reads one byte).
    if (::write(block_fd_, "1", 1) != 1) s = Status::Internal("cannot release the sandbox");
  }
  CloseNetworkFds();
  return s;
}

Status SandboxExecutor::ConnectNetwork() {
  // bubblewrap writes {"child-pid": N, ...} once it made the namespaces;
  // end of file first: it failed before (its own message says why).
  std::string info;
  char buf[512];
  while (info.find('}') == std::string::npos) {
    pollfd p{info_fd_, POLLIN, 0};
    if (::poll(&p, 1, 30'000) <= 0) {
      return Status::Unavailable("bubblewrap did not set the sandbox up within 30 s");
    }
    ssize_t n = ::read(info_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Ok();
    info.append(buf, static_cast<size_t>(n));
  }
  size_t key = info.find("\"child-pid\"");
  size_t colon = key == std::string::npos ? key : info.find(':', key);
  long child = colon == std::string::npos ? 0 : std::strtol(info.c_str() + colon + 1, nullptr, 10);
  if (child <= 0) return Status::Internal("bubblewrap's info has no child pid: " + info);
  std::string ns = "/proc/" + std::to_string(child) + "/ns/net";
  int netns = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
  if (netns < 0) return Status::Internal("cannot open " + ns + ": " + std::strerror(errno));
  auto net = PrivateNetwork::Attach(netns, static_cast<pid_t>(child), *net_plan_);
  ::close(netns);
  // The sandbox ended before its loopback was up: as at the end of file.
  if (!net.ok() && net.status().code() == StatusCode::kAborted) return Status::Ok();
  if (!net.ok()) return net.status();
  net_.emplace(*std::move(net));
  return Status::Ok();
}

void SandboxExecutor::CloseNetworkFds() {
  for (int* fd : {&info_fd_, &block_fd_, &child_info_fd_, &child_block_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void SandboxExecutor::Cleanup() {
  net_.reset();  // pasta goes with the job
  CloseNetworkFds();
  LocalExecutor::Cleanup();
  image_.reset();  // the root may be evicted once no job uses it
}

std::string SandboxExecutor::ExitReason(int wait_status, std::string_view last_stderr_line) {
  // bubblewrap reports its own failures, the job's exec included, as
  // "bwrap: ..." and exits with 1.
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 1 &&
      last_stderr_line.starts_with("bwrap: ")) {
    std::string_view what = last_stderr_line.substr(7);
    if (what.starts_with("execvp ")) return "cannot start " + std::string(what.substr(7));
    return "the sandbox could not be set up: " + std::string(what);
  }
  return LocalExecutor::ExitReason(wait_status, last_stderr_line);
}

std::vector<pid_t> SandboxExecutor::Spared() const {
  // bubblewrap itself: a SIGTERM would end it, and with it the sandbox, at
  // once instead of asking the job to stop. (Its init in the new pid
  // namespace ignores a signal it has no handler for anyway; spared too, so
  // the tree walk does not depend on that.)
  // pasta too: the job's network must outlive a checkpoint signal.
  std::vector<pid_t> spared;
  if (net_) {
    for (pid_t p : net_->helper_pids()) spared.push_back(p);
  }
  if (child_ <= 0) return spared;
  spared.push_back(child_);
  for (pid_t p : Children(child_)) spared.push_back(p);
  return spared;
}

int SandboxExecutor::EndSignal(int wait_status) const {
  // bubblewrap exits with 128 + N when the job died of signal N.
  if (WIFEXITED(wait_status)) {
    int code = WEXITSTATUS(wait_status);
    if (code > 128 && code < 128 + 65) return code - 128;
    return 0;
  }
  return LocalExecutor::EndSignal(wait_status);
}

Status ProbeSandbox(const SandboxOptions& options, int uid, int gid) {
  LaunchPlan plan;
  plan.argv = {options.bwrap,
               "--unshare-user",
               "--disable-userns",
               "--unshare-pid",
               "--unshare-ipc",
               "--ro-bind",
               "/",
               "/",
               "--proc",
               "/proc",
               "--dev",
               "/dev",
               "--die-with-parent",
               "true"};
  plan.env = HostBaseEnv();
  plan.uid = uid;
  plan.gid = gid;
  plan.cwd = "/";
  int err_pipe[2], out_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return Status::Internal("pipe failed");
  }
  ForkExec exec(plan, err_pipe[1]);
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {err_pipe[0], err_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(out_pipe[1], 2);
    exec.Run();
  }
  ::close(err_pipe[1]);
  ::close(out_pipe[1]);
  std::string output;
  char buf[4096];
  while (true) {
    pollfd p{out_pipe[0], POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) break;  // a probe that hangs counts as failed
    ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) break;
    if (output.size() < 4096) output.append(buf, static_cast<size_t>(n));
  }
  int failure[2] = {0, 0};
  bool launch_failed = ::read(err_pipe[0], failure, sizeof failure) == sizeof failure;
  ::close(err_pipe[0]);
  ::close(out_pipe[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (launch_failed)
    return Status::Unavailable(DescribeLaunchFailure(plan, failure[0], failure[1]));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  return Status::Unavailable("bubblewrap does not work here" +
                             (output.empty() ? std::string() : ": " + output));
}

}  // namespace gpupool::exec
