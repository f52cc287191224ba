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

#include "common/files.h"
#include "exec/driver_files.h"
#include "exec/launch.h"

namespace gpupool::exec {
namespace {

// Entries of an image root that the sandbox provides itself.
const std::set<std::string> kProvidedTopLevel = {"proc", "dev", "sys", "tmp", "work", "gpupool"};

std::string EnvValue(const std::vector<std::string>& env, std::string_view key) {
  for (auto it = env.rbegin(); it != env.rend(); ++it) {
    if (it->size() > key.size() && it->compare(0, key.size(), key) == 0 &&
        (*it)[key.size()] == '=') {
      return it->substr(key.size() + 1);
    }
  }
  return "";
}

std::string ReadLink(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  auto text =
      ReadFile("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  if (!text.ok()) return out;
  size_t i = 0;
  while (i < text->size()) {
    size_t j = text->find(' ', i);
    if (j == std::string::npos) j = text->size();
    if (j > i) out.push_back(static_cast<pid_t>(std::stol(text->substr(i, j - i))));
    i = j + 1;
  }
  return out;
}

}  // namespace

SandboxExecutor::SandboxExecutor(const ExecConfig& config, const CgroupTree* cgroups,
                                 std::unique_ptr<ImageCache> images)
    : LocalExecutor(config, cgroups), images_(std::move(images)) {}

Status SandboxExecutor::Prepare(const TaskContext& task, const ProgressFn& progress) {
  if (!task.image.empty()) {
    if (images_ == nullptr) {
      return Status::FailedPrecondition("image " + task.image +
                                        ": this node cannot run images (skopeo and umoci are "
                                        "not installed)");
    }
    auto ref = ParseImageRef(task.image);
    if (!ref.ok()) return ref.status();
    GP_ASSIGN_OR_RETURN(auto lease, images_->Acquire(*ref, progress, task.stop_requested));
    image_.emplace(std::move(lease));
  }
  return LocalExecutor::Prepare(task, progress);
}

Result<LaunchPlan> SandboxExecutor::Start(const TaskContext& task) {
  LaunchPlan plan = BasePlan(task);
  // The paths bubblewrap binds from: staged where the task's account can
  // reach them when it is not the agent's own.
  bool stage = task.uid >= 0;
  auto reachable = [&](const std::string& source, const std::string& name) {
    if (!stage) return source;
    if (plan.stage_dir.empty()) plan.stage_dir = kSandboxStageDir;
    plan.stage_binds.push_back({source, name});
    return std::string(kSandboxStageDir) + "/" + name;
  };
  // bubblewrap is found on the agent's PATH; the plan's PATH is the job's.
  std::string bwrap = FindProgram(config_.sandbox.bwrap, EnvValue(HostBaseEnv(), "PATH"));
  if (bwrap.empty()) {
    return Status::FailedPrecondition("cannot find bubblewrap (" + config_.sandbox.bwrap + ")");
  }
  std::vector<std::string>& a = plan.argv;
  a = {bwrap,
       "--unshare-user",
       "--unshare-pid",
       "--unshare-ipc",
       "--unshare-uts",
       "--unshare-cgroup-try",
       "--die-with-parent",
       "--new-session",
       "--hostname",
       "gpupool-" + std::to_string(task.job_id)};
  if (!task.network) a.push_back("--unshare-net");

  // The system: the image's root or the host's, read-only, entry by entry
  // on the (later read-only) tmpfs root.
  std::vector<std::string> base_env;
  if (image_) {
    const std::string& root = image_->rootfs();
    std::string staged_root = reachable(root, "root");
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
    for (const std::string& name : names) {
      std::string path = root + "/" + name;
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        a.insert(a.end(), {"--symlink", ReadLink(path), "/" + name});
      } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
        a.insert(a.end(), {"--ro-bind", staged_root + "/" + name, "/" + name});
      }
    }
    base_env = image_->config().env;
    if (EnvValue(base_env, "PATH").empty()) {
      base_env.push_back("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    }
  } else {
    for (const std::string& path : config_.sandbox.host_paths) {
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        a.insert(a.end(), {"--symlink", ReadLink(path), path});
      } else {
        a.insert(a.end(), {"--ro-bind", path, path});
      }
    }
    base_env = HostBaseEnv();
  }
  a.insert(a.end(), {"--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev", "--tmpfs",
                     "/tmp", "--tmpfs", "/dev/shm"});

  // Its own GPUs' device nodes and the control devices; nothing else.
  if (!task.gpu_minors.empty()) {
    for (const std::string& dev : GpuDeviceNodes(config_.sandbox.devices_dir, task.gpu_minors)) {
      std::string name = dev.substr(dev.rfind('/') + 1);
      if (::access(dev.c_str(), F_OK) != 0) {
        return Status::FailedPrecondition("the GPU's device node " + dev +
                                          " is missing (is the NVIDIA driver loaded?)");
      }
      a.insert(a.end(), {"--dev-bind", reachable(dev, "dev-" + name), "/dev/" + name});
    }
  }
  std::vector<std::string> env =
      MergeEnv(MergeEnv(std::move(base_env), {"HOME=" + std::string(kSandboxWorkDir), "TMPDIR=/tmp",
                                              "GPUPOOL_WORK_DIR=" + std::string(kSandboxWorkDir)}),
               task.env);
  // An image brings no NVIDIA driver: bind the host's, as the container toolkit does.
  if (image_ && !task.gpu_uuids.empty()) {
    auto files = FindDriverFiles(config_.sandbox.ldconfig, EnvValue(HostBaseEnv(), "PATH"));
    if (!files.ok()) return files.status();
    for (const DriverFile& f : files->libs) {
      a.insert(a.end(),
               {"--ro-bind", reachable(f.path, "lib-" + f.name), "/gpupool/driver/lib/" + f.name});
    }
    for (const DriverFile& f : files->bins) {
      a.insert(a.end(),
               {"--ro-bind", reachable(f.path, "bin-" + f.name), "/gpupool/driver/bin/" + f.name});
    }
    std::string ld = EnvValue(env, "LD_LIBRARY_PATH");
    env = MergeEnv(std::move(env),
                   {"LD_LIBRARY_PATH=/gpupool/driver/lib" + (ld.empty() ? "" : ":" + ld),
                    "PATH=" + EnvValue(env, "PATH") + ":/gpupool/driver/bin"});
  }
  a.insert(a.end(), {"--bind", reachable(task.work_dir, "work"), kSandboxWorkDir});

  std::string cwd = kSandboxWorkDir;
  if (image_ && !image_->config().working_dir.empty()) cwd = image_->config().working_dir;
  a.insert(a.end(), {"--chdir", cwd, "--remount-ro", "/", "--"});

  // What runs: like `docker run`, a command replaces the image's CMD and
  // keeps its ENTRYPOINT; a shell `run` replaces both.
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
  a.insert(a.end(), command.begin(), command.end());

  plan.env = std::move(env);
  plan.cwd = "/";
  return plan;
}

void SandboxExecutor::Cleanup() {
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
  std::vector<pid_t> spared;
  if (child_ <= 0) return spared;
  spared.push_back(child_);
  for (pid_t p : ChildrenOf(child_)) spared.push_back(p);
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
    ExecPlan(plan, err_pipe[1]);
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
