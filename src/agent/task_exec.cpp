#include "agent/task_exec.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/nsfs.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "exec/container_command.h"
#include "exec/process_tree.h"
#include "exec/sandbox.h"

extern char** environ;

namespace gpupool::agent {
namespace {

// What failed in the child, written to the error pipe as {step, errno}.
enum Step : int { kCgroup = 1, kSetns, kRoot, kFork, kCredentials, kExec };

// How long a command waits for the session's job: for the shim to have a
// process at all, and, once it has one, for the sandbox to make its
// namespaces and its job to exec the job's command (until then the job
// is bubblewrap, in bubblewrap's directory; a loaded machine can take well
// over half a second). And how long it waits for the job's environment to
// be readable: /proc/PID/environ reads empty while the process execs (a
// job's `sh -c` execs its last command at once), and a job's environment
// is never empty (the executors always set PATH and HOME).
constexpr int64_t kFindJobMs = 500;
constexpr int64_t kJobExecMs = 10'000;
constexpr int64_t kJobEnvironMs = 2'000;

// The namespaces a command may enter, user first: it grants the
// capabilities needed to enter the others, which it owns. Mount last, as
// it changes what paths mean.
struct NsKind {
  const char* name;
  int flag;
};
constexpr NsKind kNamespaces[] = {{"user", CLONE_NEWUSER}, {"cgroup", CLONE_NEWCGROUP},
                                  {"ipc", CLONE_NEWIPC},   {"uts", CLONE_NEWUTS},
                                  {"net", CLONE_NEWNET},   {"pid", CLONE_NEWPID},
                                  {"mnt", CLONE_NEWNS}};

std::optional<ino_t> NsInode(const std::string& proc, const char* ns) {
  struct stat st;
  if (::stat((proc + "/ns/" + ns).c_str(), &st) != 0) return std::nullopt;
  return st.st_ino;
}

bool SameNs(pid_t pid, const char* ns) {
  auto theirs = NsInode("/proc/" + std::to_string(pid), ns);
  auto ours = NsInode("/proc/self", ns);
  return theirs && ours && *theirs == *ours;
}

// The first number of a "Uid:" or "Gid:" line of /proc/PID/status (the real id).
std::optional<long> StatusId(const std::string& status, const char* key) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + std::strlen(key), nullptr, 10);
  }
  return std::nullopt;
}

// `host` (an id as we see it) as numbered inside the user namespace whose
// map (/proc/PID/uid_map as we read it) is `map`: lines "inside outside count".
std::optional<long> InsideId(const std::string& map, long host) {
  std::istringstream in(map);
  long inside, outside, count;
  while (in >> inside >> outside >> count) {
    if (host >= outside && host < outside + count) return inside + (host - outside);
  }
  return std::nullopt;
}

// The cgroup v2 directory of `pid` as we see it, or "" (none, or ours).
std::string CgroupProcsOf(pid_t pid) {
  auto read_path = [](const std::string& file) -> std::string {
    auto text = ReadFile(file);
    if (!text.ok()) return "";
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("0::", 0) == 0) return line.substr(3);
    }
    return "";
  };
  std::string theirs = read_path("/proc/" + std::to_string(pid) + "/cgroup");
  std::string ours = read_path("/proc/self/cgroup");
  if (theirs.empty() || theirs == ours) return "";
  // Where cgroup2 is mounted here (with its root at the hierarchy's root).
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") return dir + (theirs == "/" ? "" : theirs) + "/cgroup.procs";
  }
  return "";
}

std::vector<std::string> ReadEnviron(pid_t pid) {
  std::vector<std::string> env;
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/environ");
  if (!text.ok()) return env;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\0', start);
    if (end == std::string::npos) end = text->size();
    if (end > start) env.push_back(text->substr(start, end - start));
    start = end + 1;
  }
  return env;
}

std::string Comm(pid_t pid) {
  return ReadFile("/proc/" + std::to_string(pid) + "/comm").value_or("");
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

[[noreturn]] void Fail(int error_fd, int step, int detail = 0) {
  int failure[3] = {step, errno, detail};
  (void)!::write(error_fd, failure, sizeof failure);
  _exit(step == kExec && failure[1] == ENOENT ? 127 : 126);
}

// Drops every capability, the bounding set included, as bubblewrap does
// for the job: otherwise a command entering as (namespaced) root would
// hold capabilities its job lacks.
void DropCapabilities() {
  for (int cap = 0; cap <= 63; ++cap) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  ::syscall(SYS_capset, &header, data);
}

// Everything the child needs, prepared before fork.
struct Plan {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  bool use_environ = false;  // docker exec: the agent's own environment
  std::string cgroup_procs;
  std::vector<std::pair<int, int>> ns_fds;  // {fd, CLONE_NEW*}
  bool enter_user = false;
  bool enter_mnt = false;
  bool enter_pid = false;
  int root_fd = -1;
  int cwd_fd = -1;
  long uid = -1;  // as numbered after the namespaces are entered; -1: unchanged
  long gid = -1;
};

[[noreturn]] void RunChild(const Plan& plan, int error_fd) {
  std::vector<char*> argv, envp;
  for (const auto& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : plan.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  if (!plan.cgroup_procs.empty()) {
    int fd = ::open(plan.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) Fail(error_fd, kCgroup);
    ::close(fd);
  }
  // Before the user namespace, where setgroups may be denied.
  if (::geteuid() == 0) ::setgroups(0, nullptr);
  // As nsenter does: a namespace the job's user namespace does not own
  // (one its launcher made as root) can only be entered before that user
  // namespace, one it owns only after it unless we are root: try all
  // before, then the rest after.
  bool entered[16] = {};
  for (size_t i = 0; plan.enter_user && i < plan.ns_fds.size() && i < 16; ++i) {
    auto [fd, flag] = plan.ns_fds[i];
    if (flag != CLONE_NEWUSER && ::setns(fd, flag) == 0) entered[i] = true;
  }
  for (size_t i = 0; i < plan.ns_fds.size(); ++i) {
    auto [fd, flag] = plan.ns_fds[i];
    if (i < 16 && entered[i]) continue;
    if (::setns(fd, flag) != 0) Fail(error_fd, kSetns, flag);
  }
  if (plan.enter_mnt) {
    if (::fchdir(plan.root_fd) != 0 || ::chroot(".") != 0) Fail(error_fd, kRoot);
  }
  if (plan.enter_pid) {
    // setns(pid) applies to children only: the command is a child, and
    // this process relays its status (the agent cannot reap inside the
    // namespace, whose init would adopt the command otherwise).
    pid_t child = ::fork();
    if (child < 0) Fail(error_fd, kFork);
    if (child > 0) {
      // This process never execs: close-on-exec does not apply, and a copy
      // of any descriptor (the command's stdin, another stream's) would
      // keep it open.
      ::close_range(0, ~0U, 0);
      // Terminal signals reach the whole foreground group: only the command acts on them.
      for (int sig : {SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGHUP, SIGTERM, SIGPIPE})
        ::signal(sig, SIG_IGN);
      int st = 0;
      while (::waitpid(child, &st, 0) < 0 && errno == EINTR) {
      }
      _exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
    }
  }
  if (plan.gid >= 0 && ::setgid(static_cast<gid_t>(plan.gid)) != 0) Fail(error_fd, kCredentials);
  if (plan.uid >= 0 && ::setuid(static_cast<uid_t>(plan.uid)) != 0) Fail(error_fd, kCredentials);
  if (plan.enter_user) {
    DropCapabilities();
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // reset by the credential change above
  if (plan.cwd_fd >= 0 && ::fchdir(plan.cwd_fd) != 0) (void)!::chdir("/");
  // execvp looks the program up on the PATH of the environment it runs with.
  if (!plan.use_environ) environ = envp.data();
  ::execvp(argv[0], argv.data());
  Fail(error_fd, kExec);
}

std::string StepText(int step) {
  switch (step) {
    case kCgroup:
      return "cannot join the session's cgroup";
    case kSetns:
      return "cannot enter the session's namespaces";
    case kRoot:
      return "cannot enter the session's root";
    case kFork:
      return "fork";
    case kCredentials:
      return "cannot take the session's account";
  }
  return "cannot run";
}

Result<Plan> PlanFor(const ExecTask& task, const ExecCommand& command) {
  Plan plan;
  if (task.runs_as == "docker" || task.runs_as == "podman") {
    plan.argv = {task.engine.empty() ? task.runs_as : task.engine, "exec", "-i"};
    if (command.tty) plan.argv.push_back("-t");
    if (command.tty && !command.term.empty()) {
      plan.argv.push_back("-e");
      plan.argv.push_back("TERM=" + command.term);
    }
    plan.argv.push_back(exec::ContainerName(task.attempt_id));
    plan.argv.insert(plan.argv.end(), command.argv.begin(), command.argv.end());
    plan.use_environ = true;
    return plan;
  }
  GP_ASSIGN_OR_RETURN(pid_t job, FindJobProcess(task.shim_pid));
  std::string proc = "/proc/" + std::to_string(job);
  plan.argv = command.argv;
  plan.env = ReadEnviron(job);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kJobEnvironMs);
       plan.env.empty() && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    plan.env = ReadEnviron(job);
  }
  if (command.tty && !command.term.empty()) {
    std::erase_if(plan.env, [](const std::string& e) { return e.starts_with("TERM="); });
    plan.env.push_back("TERM=" + command.term);
  }
  plan.cgroup_procs = CgroupProcsOf(job);
  auto status = ReadFile(proc + "/status");
  if (!status.ok()) return Status::FailedPrecondition("the session's job is gone");
  auto uid = StatusId(*status, "Uid:");
  auto gid = StatusId(*status, "Gid:");
  if (!uid || !gid) return Status::Internal("cannot read the account of " + proc);
  plan.uid = *uid;
  plan.gid = *gid;
  auto close_all = [&plan] {
    for (auto [fd, flag] : plan.ns_fds) ::close(fd);
    if (plan.root_fd >= 0) ::close(plan.root_fd);
    if (plan.cwd_fd >= 0) ::close(plan.cwd_fd);
  };
  for (const NsKind& ns : kNamespaces) {
    if (SameNs(job, ns.name)) continue;
    int fd = ::open((proc + "/ns/" + ns.name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      Status s =
          Status::Internal("cannot open " + proc + "/ns/" + ns.name + ": " + std::strerror(errno));
      close_all();
      return s;
    }
    plan.ns_fds.push_back({fd, ns.flag});
    if (ns.flag == CLONE_NEWUSER) plan.enter_user = true;
    if (ns.flag == CLONE_NEWNS) plan.enter_mnt = true;
    if (ns.flag == CLONE_NEWPID) plan.enter_pid = true;
  }
  if (plan.enter_user) {
    auto uid_map = ReadFile(proc + "/uid_map");
    auto gid_map = ReadFile(proc + "/gid_map");
    auto in_uid = uid_map.ok() ? InsideId(*uid_map, plan.uid) : std::nullopt;
    auto in_gid = gid_map.ok() ? InsideId(*gid_map, plan.gid) : std::nullopt;
    if (!in_uid || !in_gid) {
      close_all();
      return Status::Internal("the session's account is not mapped in its user namespace");
    }
    plan.uid = *in_uid;
    plan.gid = *in_gid;
  }
  plan.root_fd = ::open((proc + "/root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  plan.cwd_fd = ::open((proc + "/cwd").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (plan.enter_mnt && plan.root_fd < 0) {
    Status s = Status::Internal("cannot open " + proc + "/root: " + std::strerror(errno));
    close_all();
    return s;
  }
  return plan;
}

}  // namespace

std::string JupyterSocketInJob(std::string_view executor, const std::string& work_dir) {
  std::string dir = executor == "process" ? work_dir : std::string(exec::kSandboxWorkDir);
  return dir + "/" + kJupyterSocketDir + "/" + kJupyterSocketName;
}

int ExecFailureCode(const Status& s) { return s.code() == StatusCode::kNotFound ? 127 : 126; }

Result<pid_t> FindJobProcess(pid_t shim_pid) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(kFindJobMs);
  const auto exec_deadline = start + std::chrono::milliseconds(kJobExecMs);
  while (true) {
    std::vector<pid_t> top = exec::Children(shim_pid);
    // pasta and a gang rank's port forwarder, the sandbox's network
    // (exec/private_network.h), are the shim's children too.
    std::erase_if(top, [](pid_t c) {
      std::string comm = Comm(c);
      return comm.starts_with("pasta") || comm.starts_with("passt") ||
             comm.starts_with("gpupool-ports");
    });
    const bool starting = !top.empty();
    if (starting) {
      pid_t p = top.front();
      // A sandbox: the executor's child (bubblewrap) has the namespace's
      // init as its child, and the job is the init's child.
      bool wrapper = false;
      if (SameNs(p, "pid")) {
        for (pid_t init : exec::Children(p)) {
          if (SameNs(init, "pid")) continue;
          wrapper = true;
          std::vector<pid_t> jobs = exec::Children(init);
          // The init forks the job as bubblewrap and it execs the command a
          // moment later: until then its environment and directory are
          // bubblewrap's.
          bool execd = !jobs.empty() && Comm(jobs.front()) != Comm(init);
          if (execd || (!jobs.empty() && std::chrono::steady_clock::now() >= exec_deadline))
            return jobs.front();
        }
        // bubblewrap before it made its namespaces looks like a process
        // job; its user namespace differs as soon as it made them.
        if (!wrapper && !Comm(p).starts_with("bwrap")) return p;
      }
    }
    if (std::chrono::steady_clock::now() >= (starting ? exec_deadline : deadline)) {
      return Status::FailedPrecondition("the session runs no process to enter");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<ExecProcess> StartTaskExec(const ExecTask& task, const ExecCommand& command) {
  if (command.argv.empty() || command.argv[0].empty())
    return Status::InvalidArgument("no command to run");
  GP_ASSIGN_OR_RETURN(Plan plan, PlanFor(task, command));
  auto close_plan = [&plan] {
    for (auto [fd, flag] : plan.ns_fds) ::close(fd);
    if (plan.root_fd >= 0) ::close(plan.root_fd);
    if (plan.cwd_fd >= 0) ::close(plan.cwd_fd);
  };
  ExecProcess out;
  int child_fds[3] = {-1, -1, -1};  // the command's stdin, stdout, stderr
  int slave = -1;
  if (command.tty) {
    winsize ws{};
    ws.ws_row = static_cast<unsigned short>(command.rows > 0 ? command.rows : 24);
    ws.ws_col = static_cast<unsigned short>(command.cols > 0 ? command.cols : 80);
    if (::openpty(&out.pty, &slave, nullptr, nullptr, &ws) != 0) {
      close_plan();
      return Status::Internal(std::string("openpty: ") + std::strerror(errno));
    }
    ::fcntl(out.pty, F_SETFD, FD_CLOEXEC);
    ::fcntl(slave, F_SETFD, FD_CLOEXEC);
    child_fds[0] = child_fds[1] = child_fds[2] = slave;
  } else {
    int p[3][2];
    for (auto& pp : p) {
      if (::pipe2(pp, O_CLOEXEC) != 0) {
        close_plan();
        return Status::Internal(std::string("pipe: ") + std::strerror(errno));
      }
    }
    out.in = p[0][1];
    child_fds[0] = p[0][0];
    out.out = p[1][0];
    child_fds[1] = p[1][1];
    out.err = p[2][0];
    child_fds[2] = p[2][1];
  }
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    close_plan();
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_DFL);
    ::setsid();
    if (command.tty) ::ioctl(slave, TIOCSCTTY, 0);
    for (int i = 0; i < 3; ++i) ::dup2(child_fds[i], i);  // dup2 clears close-on-exec
    // Nothing of the agent's (its connection above all) reaches the command.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    RunChild(plan, error_pipe[1]);
  }
  int fork_errno = errno;
  ::close(error_pipe[1]);
  close_plan();
  if (slave >= 0) ::close(slave);
  if (!command.tty) {
    for (int fd : child_fds) ::close(fd);
  }
  auto close_out = [&out] {
    for (int fd : {out.pty, out.in, out.out, out.err}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (pid < 0) {
    ::close(error_pipe[0]);
    close_out();
    return Status::Internal(std::string("fork: ") + std::strerror(fork_errno));
  }
  // The child reports a failure before exec, or the pipe closes at exec.
  int failure[3] = {0, 0, 0};
  ssize_t n;
  while ((n = ::read(error_pipe[0], failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  ::close(error_pipe[0]);
  if (n == sizeof failure) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    close_out();
    std::string what = failure[0] == kExec ? "cannot run " + command.argv[0] : StepText(failure[0]);
    for (const NsKind& ns : kNamespaces) {
      if (failure[0] == kSetns && failure[2] == ns.flag) what += std::string(" (") + ns.name + ")";
    }
    std::string message = what + ": " + std::strerror(failure[1]);
    if (failure[0] != kExec) return Status::Internal(message);
    if (failure[1] == ENOENT) return Status::NotFound(message);
    return Status::PermissionDenied(message);
  }
  out.pid = pid;
  for (int fd : {out.pty, out.in, out.out, out.err}) {
    if (fd >= 0) SetNonBlocking(fd);
  }
  return out;
}

Result<int> SocketInNetns(pid_t pid, int domain, int type) {
  type |= SOCK_NONBLOCK | SOCK_CLOEXEC;
  if (SameNs(pid, "net")) {
    int fd = ::socket(domain, type, 0);
    if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
    return fd;
  }
  // A forked child enters the namespace (the user namespace that owns it
  // first, which grants the right to: in a sandbox that is bubblewrap's
  // outer one, not the job's nested one) and hands the socket back:
  // sockets keep the namespace they were made in. No thread: see the header.
  std::string proc = "/proc/" + std::to_string(pid);
  int net_fd = ::open((proc + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  int user_fd = -1;
  if (net_fd >= 0 && ::geteuid() != 0) {  // root may enter any network namespace
    user_fd = ::ioctl(net_fd, NS_GET_USERNS);
    struct stat theirs, ours;
    if (user_fd >= 0) {
      ::fcntl(user_fd, F_SETFD, FD_CLOEXEC);
      if (::fstat(user_fd, &theirs) == 0 && ::stat("/proc/self/ns/user", &ours) == 0 &&
          theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
        ::close(user_fd);
        user_fd = -1;
      }
    }
  }
  int pair[2];
  if (net_fd < 0 || ::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) != 0) {
    Status s = Status::FailedPrecondition("cannot reach the session's network: " +
                                          std::string(std::strerror(errno)));
    if (user_fd >= 0) ::close(user_fd);
    if (net_fd >= 0) ::close(net_fd);
    return s;
  }
  pid_t child = ::fork();
  if (child == 0) {
    int err = 0;
    if (user_fd >= 0 && ::setns(user_fd, CLONE_NEWUSER) != 0) err = errno;
    if (err == 0 && ::setns(net_fd, CLONE_NEWNET) != 0) err = errno;
    int fd = err == 0 ? ::socket(domain, type, 0) : -1;
    if (fd < 0 && err == 0) err = errno;
    char data[sizeof(int)];
    std::memcpy(data, &err, sizeof err);
    iovec iov{data, sizeof data};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    (void)::sendmsg(pair[1], &msg, 0);
    _exit(0);
  }
  if (user_fd >= 0) ::close(user_fd);
  ::close(net_fd);
  ::close(pair[1]);
  if (child < 0) {
    ::close(pair[0]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  char data[sizeof(int)] = {};
  iovec iov{data, sizeof data};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = ::recvmsg(pair[0], &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  ::close(pair[0]);
  while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  int err = 0;
  std::memcpy(&err, data, sizeof err);
  cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) {
    return Status::FailedPrecondition("cannot enter the session's network: " +
                                      std::string(std::strerror(err != 0 ? err : EIO)));
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

std::optional<int> ReapExec(pid_t pid) {
  int st = 0;
  pid_t w;
  while ((w = ::waitpid(pid, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (w == 0) return std::nullopt;
  if (w < 0) return 255;  // not ours to wait for any more: never reported as running
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

void ResizeExec(int pty, int rows, int cols) {
  winsize ws{};
  ws.ws_row = static_cast<unsigned short>(rows);
  ws.ws_col = static_cast<unsigned short>(cols);
  ::ioctl(pty, TIOCSWINSZ, &ws);
}

}  // namespace gpupool::agent
