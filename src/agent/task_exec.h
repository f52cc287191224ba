// Running a command inside a running task, like `docker exec`: the agent's
// part of interactive sessions' exec streams (agent/tunnel_endpoint.h).
//
// How the command gets the task's world, by executor:
//   sandbox  the job's process is found under the task's shim (the first
//            child of the bubblewrap init, in a pid namespace other than
//            ours); the command joins the job's cgroup v2 (limits and
//            device rules apply), enters its user, cgroup, ipc, uts, net,
//            pid and mount namespaces where they differ from ours, takes
//            its root and its working directory, becomes its uid and gid
//            (as numbered inside its user namespace), drops every
//            capability as bubblewrap does for the job, and runs with the
//            job's environment (from /proc/PID/environ: what the shim and
//            the executor gave it). Entering a pid namespace only affects
//            children, so a small relay process stays outside, waits for
//            the command and exits with its status.
//   process  the same without namespaces: the job's uid, gid, cgroup,
//            environment and working directory.
//   docker, podman  `<engine> exec -i [-t] [-e TERM=...] <container> argv`.
// The working directory is the job's main process's (its work directory
// unless the job changed directory). With a tty the command runs on a new
// pseudo-terminal as a session leader; without, on three pipes.
//
// The agent reaps only the pids this returns (waitpid on them, never -1),
// so the shims' reaping (TaskManager) is untouched. Everything here runs on
// the agent's thread and forks instead of starting threads, because the
// agent forks shims that rely on it being single-threaded.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

// The task to run in, as TaskManager knows it.
struct ExecTask {
  std::string attempt_id;
  pid_t shim_pid = 0;
  std::string runs_as;  // the executor: sandbox, process, docker, podman
  std::string engine;   // docker or podman: the engine's program (ContainerOptions::engine)
};

struct ExecCommand {
  std::vector<std::string> argv;
  bool tty = false;
  int rows = 0;  // 0: the terminal's default
  int cols = 0;
  std::string term;  // TERM for a tty ("" keeps the job's)
};

// A started command. The caller owns the fds (non-blocking, close-on-exec)
// and must reap `pid` with ReapExec. `pid` leads its own process group.
struct ExecProcess {
  pid_t pid = -1;
  int pty = -1;  // tty: the terminal's master (resize it with ResizeExec)
  int in = -1;   // no tty: the command's stdin, stdout and stderr
  int out = -1;
  int err = -1;
};

// A Jupyter session's notebook server listens on a UNIX socket in this
// directory of the task's work directory, which the shim creates before
// the job starts, owned by the job's account, mode 0700 (the server's
// relay is the only client). The job finds the socket's path in
// GPUPOOL_JUPYTER_SOCKET (JupyterSocketInJob).
inline constexpr const char* kJupyterSocketDir = ".gpupool-jupyter";
inline constexpr const char* kJupyterSocketName = "jupyter.sock";
// The socket's path as the job sees it: under /work in a sandbox or a
// container, under the work directory itself for the process executor.
std::string JupyterSocketInJob(std::string_view executor, const std::string& work_dir);

// Starts the command. Errors: NotFound when the command does not exist
// ("cannot run bash: No such file or directory"), PermissionDenied when it
// cannot be executed, FailedPrecondition when the task has no running job
// to enter, Internal for a failure of the machinery. ExecFailureCode maps
// them to the exit codes shells use.
Result<ExecProcess> StartTaskExec(const ExecTask& task, const ExecCommand& command);
int ExecFailureCode(const Status& s);  // 127 for NotFound, else 126

// The task's job process (see above): the process whose namespaces,
// account and environment a command joins. FailedPrecondition when the job
// runs no process (yet: bubblewrap sets the sandbox up for a few
// milliseconds after the job "started"; this waits up to half a second).
Result<pid_t> FindJobProcess(pid_t shim_pid);

// A socket of `domain` and `type` created in the network namespace of
// `pid` (for 127.0.0.1 inside a sandbox with its own network), or in ours
// when that is the same. Non-blocking, close-on-exec.
Result<int> SocketInNetns(pid_t pid, int domain, int type);

// The exit code when `pid` has ended (128+N when killed by signal N),
// nullopt while it runs. Never blocks.
std::optional<int> ReapExec(pid_t pid);
// Sets the terminal's size (TIOCSWINSZ on the master; the command gets SIGWINCH).
void ResizeExec(int pty, int rows, int cols);

}  // namespace gpupool::agent
