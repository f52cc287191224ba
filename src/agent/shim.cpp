#include "agent/shim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/checkpoint_sync.h"
#include "agent/lease_watch.h"
#include "agent/output_log.h"
#include "agent/task_exec.h"
#include "agent/task_files.h"
#include "common/clock.h"
#include "common/disk_usage.h"
#include "common/files.h"
#include "common/json_reader.h"
#include "common/safe_fs.h"
#include "common/units.h"
#include "exec/executor.h"
#include "exec/launch.h"
#include "exec/limits.h"
#include "exec/process_tree.h"
#include "model/job_output.h"
#include "proto/messages.h"

namespace gpupool::agent {
namespace {

// The work directory's size is first counted this long after the start,
// then at most this often (less often when counting is slow).
constexpr int64_t kFirstDiskCheckMs = 500;
constexpr int64_t kDiskCheckMs = 2000;
// How often the checkpoint directory is looked at for new commits.
constexpr int64_t kCommitScanMs = 250;
// After the checkpoint asked for before a stop is committed: SIGTERM, then
// SIGKILL this much later.
constexpr int64_t kStopAfterCommitGraceMs = 3000;
// How long a stopped job's last checkpoint may take to upload.
constexpr int64_t kFinalUploadMs = 10 * 60'000;
// How often the attempt's lease file is read for renewals.
constexpr int64_t kLeaseCheckMs = 1000;
// ... and while the job waits for a late renewal to start.
constexpr int64_t kLeaseWaitMs = 20;

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The grace the agent asked for when it stopped the task, or `fallback`.
int64_t StopGraceMs(const TaskPaths& paths, int64_t fallback) {
  auto text = ReadFile(paths.stop_grace());
  if (!text.ok()) return fallback;
  int64_t ms = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), ms);
  // 0: at once (a reclaim --now).
  if (ec != std::errc() || end != text->data() + text->size() || ms < 0) return fallback;
  return ms;
}

// Kills and reaps whatever of the job is left, so that a recorded result
// means no process of it runs (and holds a GPU). A dying pid namespace's
// init reaches the shim (a subreaper) a moment after the job's own pid, so
// this waits for the last of them, for at most a second.
void ReapEverything(const Clock& clock) {
  exec::SignalTree(::getpid(), SIGKILL);
  int64_t give_up = clock.MonoMs() + 1000;
  while (true) {
    pid_t w = ::waitpid(-1, nullptr, WNOHANG);
    if (w > 0) continue;
    if (w < 0 || clock.MonoMs() >= give_up) return;  // ECHILD: none left
    ::usleep(2000);
  }
}

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

// What an upload left out because the job changed it while it was read.
std::string SkippedNote(const blob::TreeStats& s) {
  if (s.skipped == 0) return "";
  std::string note =
      "; left out " + std::to_string(s.skipped) + " entries that changed while being read:";
  for (const std::string& e : s.skipped_examples) note += " " + e;
  return note;
}

}  // namespace

int RunShim(const ShimOptions& options) {
  RealClock clock;
  TaskPaths paths{options.task_dir};
  const proto::StartTask& task = options.task;
  int log_fd = ::open(paths.output_log().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    // Nothing can be recorded: the agent sees the shim gone without a result.
    std::fprintf(stderr, "gpupool-shim %s: cannot open output.log: %s\n", task.attempt_id.c_str(),
                 std::strerror(errno));
    return 1;
  }
  // Everything goes to output.log through `out`, within the task's output
  // limit (agent/output_log.h).
  OutputLog out(log_fd, EffectiveOutputLimit(task.max_output_bytes, 0));
  auto record_result = [&](const TaskResult& r) {
    bool ok = out.Record('r', clock.NowMs(), EncodeResult(r));
    return ok && ::fsync(log_fd) == 0;
  };
  auto event = [&](const std::string& text) { out.Event(text, clock.NowMs()); };

  sigset_t mask, old_mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  ::signal(SIGPIPE, SIG_IGN);
  int sig_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  // Orphans of the job come to the shim, so stops and accounting see them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  // The stop the agent asked for, once its signal arrived (then kept).
  std::optional<std::string> stop_reason;
  auto stop_requested = [&]() -> std::optional<std::string> {
    signalfd_siginfo si;
    while (::read(sig_fd, &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGCHLD) continue;
      stop_reason = "stopped";
      if (auto why = ReadFile(paths.stop_reason()); why.ok() && !why->empty()) {
        stop_reason = "stopped: " + *why;
      } else if (options.agent_pid != 0 && (static_cast<pid_t>(si.ssi_pid) == options.agent_pid ||
                                            ::getppid() != options.agent_pid)) {
        // The agent writes stop.reason before every stop it sends, so a
        // signal from it without one is the parent-death signal, sent as
        // the agent dies (while it still has threads, the shim's parent may
        // still read as the agent's pid: the child moves to another of its
        // threads first).
        stop_reason = "stopped: its agent exited (the agent runs with --on-exit kill)";
      }
    }
    return stop_reason;
  };

  // The attempt's lease (agent/lease_watch.h): the agent wrote it before
  // this shim started, or the server grants none. Unreadable later: the
  // last deadline read holds.
  auto read_lease = [](const TaskPaths& p) -> std::optional<AttemptLease> {
    auto text = ReadFile(p.lease());
    if (!text.ok()) return std::nullopt;
    auto l = DecodeLeaseFile(*text);
    return l.ok() ? std::optional<AttemptLease>(*l) : std::nullopt;
  };
  LeaseWatch lease(read_lease(paths), options.kill_grace_ms);
  auto lease_over = [&] {  // read again once the deadline is near: a renewal moves it
    if (!lease.MustStop(BootTimeMs())) return false;
    if (auto l = read_lease(paths)) lease.Update(*l);
    return lease.MustStop(BootTimeMs());
  };
  // Before the job runs there is nothing to stop, so its lease only has to
  // be unexpired: the stop window is there to stop a running job in time.
  auto lease_expired = [&] {
    if (!lease_over()) return false;
    return lease.Expired(BootTimeMs());
  };

  std::unique_ptr<exec::Executor> executor;
  std::vector<std::string> limit_notes;
  exec::TaskContext ctx = MakeTaskContext(options, paths, limit_notes);
  for (const std::string& note : limit_notes) event(note);
  ctx.stop_requested = [&] { return stop_requested().has_value() || lease_expired(); };
  auto fail_early = [&](const std::string& why, bool stopped = false, bool lost = false) {
    event(why);
    if (executor) executor->Cleanup();
    TaskResult r;
    r.exit_code = 127;
    r.failed = !stopped && !lost;
    r.lost = lost;
    r.reason = why;
    r.finished_ms = clock.NowMs();
    record_result(r);
    return 1;
  };
  {
    auto made = exec::MakeExecutor(task.spec.executor, !task.spec.image.empty(),
                                   *options.exec_config, *options.exec_env);
    if (!made.ok()) return fail_early("cannot start: " + made.status().message());
    executor = *std::move(made);
  }
  if (Status s = MaterializeWorkDir(task, paths.work_dir(), options.uid, options.blob, event);
      !s.ok()) {
    if (auto stop = stop_requested()) return fail_early(*stop + " (before it started)", true);
    if (lease_expired()) return fail_early(lease.Reason() + " (before it started)", false, true);
    // Not the job's fault when the server is out of reach: "lost" requeues it.
    if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
      event("cannot fetch the job's files: " + s.message());
      ::close(log_fd);
      return 1;
    }
    return fail_early("cannot start: " + s.message());
  }
  if (Status s = PrepareJupyterSession(task, paths, options, executor->name(), ctx); !s.ok()) {
    return fail_early("cannot start: " + s.message());
  }
  if (Status s = executor->Prepare(ctx, event); !s.ok()) {
    if (auto stop = stop_requested()) return fail_early(*stop + " (before it started)", true);
    if (lease_expired()) return fail_early(lease.Reason() + " (before it started)", false, true);
    return fail_early("cannot start: " + s.message());
  }
  if (auto stop = stop_requested()) return fail_early(*stop + " (before it started)", true);
  // A lease already in its stop window (the agent started the task while a
  // renewal was late: a busy server, a busy machine) would stop the job as
  // it starts. The job starts once a renewal moves the deadline out of the
  // window; if none comes before the deadline, the attempt is lost here.
  if (lease_over()) {
    event("waiting for the renewal of the attempt's lease before starting the job");
    while (lease_over() && !lease.Expired(BootTimeMs()) && !stop_requested()) {
      ::usleep(static_cast<useconds_t>(kLeaseWaitMs * 1000));
    }
    if (auto stop = stop_requested()) return fail_early(*stop + " (before it started)", true);
    if (lease_over()) return fail_early(lease.Reason() + " (before it started)", false, true);
  }
  auto planned = executor->Start(ctx);
  if (!planned.ok()) return fail_early("cannot start: " + planned.status().message());
  const exec::LaunchPlan& plan = *planned;

  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return fail_early(std::string("cannot start: pipe: ") + std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid < 0) return fail_early(std::string("cannot start: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    exec::ExecPlan(plan, exec_pipe[1]);
  }
  ::setpgid(pid, pid);  // also in the parent, so the group exists at once
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  TaskResult result;
  if (Status s = executor->Started(pid); !s.ok()) {
    // The job never ran (the sandbox held it back): nothing of it may.
    result.failed = true;
    result.reason = "cannot start: " + s.message();
    executor->Stop(SIGKILL);
  }
  int failure[2] = {0, 0};
  if (::read(exec_pipe[0], failure, sizeof failure) == sizeof failure) {
    result.failed = true;
    result.reason = exec::DescribeLaunchFailure(plan, failure[0], failure[1]);
  }
  ::close(exec_pipe[0]);
  {
    pid_t self = ::getpid();
    ShimPids pids{self, ProcessStartTime(self).value_or(0), pid};
    (void)out.Record('p', clock.NowMs(), EncodePids(pids));
    std::string started = "started " + std::to_string(pid) + "\n";
    (void)WriteAll(STDOUT_FILENO, started);  // the agent may be gone: ignore errors
  }

  if (result.failed) {
    std::string msg = "gpupool: " + result.reason + "\n";
    out.Add('e', msg.data(), msg.size(), clock.NowMs());
  }
  const exec::Limits& limits = ctx.limits;
  // Every timer below is on the monotonic clock (a stepped wall clock must
  // neither kill a job for max_runtime nor delay a kill); records carry the
  // wall time.
  int64_t start_ms = clock.MonoMs();
  int64_t deadline = task.spec.max_runtime_ms > 0 ? start_ms + task.spec.max_runtime_ms : 0;
  bool watch_memory = limits.memory_bytes > 0 && !executor->EnforcesMemory();
  int64_t next_memory_check = start_ms;
  int64_t next_disk_check = limits.disk_bytes > 0 ? start_ms + kFirstDiskCheckMs : 0;
  int64_t kill_at = 0;      // when to send SIGKILL to the job
  int64_t term_at = 0;      // vacating a checkpointing job: when to follow up with SIGTERM
  int64_t drain_until = 0;  // after the job exits, how long to wait for pipes
  bool exited = false;
  int wstatus = 0;
  bool out_open = true, err_open = true;

  auto vacating = [&] { return ::access(paths.vacate_reason().c_str(), F_OK) == 0; };
  bool lease_lost = false;  // the lease ended: the job stops and is requeued elsewhere
  // A stop after which the job is requeued: it should checkpoint first.
  auto requeued_after_stop = [&] {
    return lease_lost || vacating() || ::access(paths.stop_requeue().c_str(), F_OK) == 0;
  };

  // Checkpoints (agent/checkpoint_sync.h), for jobs with a checkpoint
  // section. Of a multi-node job only rank 0 uploads: the others get the
  // signals (the ranks checkpoint together) but write no checkpoint of the
  // job, so a stop before a requeue waits half the grace for them, not a
  // commit.
  const std::string checkpoint_dir = exec::CheckpointDirIn(paths.work_dir());
  const int checkpoint_signal = CheckpointSignal(task.spec);
  std::unique_ptr<CheckpointUploader> uploader;
  int64_t newest_commit = 0;  // the newest commit seen (a restored one counts)
  int commit_watch = -1;      // inotify on checkpoint_dir
  if (task.spec.checkpoint && task.gang && task.gang->rank > 0) {
    event("rank " + std::to_string(task.gang->rank) + " of " + std::to_string(task.gang->nodes) +
          ": the job's checkpoints are uploaded from rank 0 only");
  } else if (task.spec.checkpoint) {
    if (auto c = NewestCommit(checkpoint_dir)) newest_commit = c->number;
    uploader = std::make_unique<CheckpointUploader>(
        checkpoint_dir,
        HttpUploadFn(options.blob, task.job_id, task.attempt_id,
                     TaskTree{options.task_dir, FsIdentity{options.uid, options.gid}}));
    // A commit is a rename into the directory: noticed at once, with the
    // periodic scan as the fallback (a full inotify table, a replaced dir).
    commit_watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (commit_watch >= 0 &&
        ::inotify_add_watch(commit_watch, checkpoint_dir.c_str(), IN_MOVED_TO | IN_CREATE) < 0) {
      ::close(commit_watch);
      commit_watch = -1;
    }
  }
  int64_t interval_ms = task.spec.checkpoint ? task.spec.checkpoint->interval_ms : 0;
  int64_t next_ask = checkpoint_signal && interval_ms > 0 ? start_ms + interval_ms : 0;
  int64_t next_scan = start_ms;
  // Stopping after a checkpoint request: a commit newer than this lets the
  // stop go ahead at once instead of waiting out the grace (-1: not waiting).
  int64_t stop_after_commit = -1;
  int64_t next_lease_check = start_ms;
  auto report_uploads = [&] {
    for (const CheckpointUploader::Outcome& o : uploader->TakeOutcomes()) {
      if (o.result.ok()) {
        const blob::TreeStats& s = o.result->stats;
        event("checkpoint " + o.commit.name + " uploaded as checkpoint " +
              std::to_string(o.result->checkpoint) + ": " + FormatBytes(s.uploaded_bytes) +
              " sent for " + FormatBytes(s.bytes) + " in " + std::to_string(o.took_ms) + " ms" +
              SkippedNote(s));
      } else {
        event("checkpoint " + o.commit.name + " was not uploaded: " + o.result.status().message());
      }
    }
  };
  auto scan_commits = [&] {
    auto c = NewestCommit(checkpoint_dir);
    if (c && c->number > newest_commit) {
      newest_commit = c->number;
      uploader->Offer(*c);
    }
  };
  auto stop_job = [&](const std::string& reason, bool failed, int64_t grace_ms) {
    if (exited) return;
    // Already stopping: only a stop without grace (a reclaim --now) changes that.
    if (kill_at != 0 && grace_ms > 0) return;
    if (result.reason.empty()) {
      result.reason = reason;
      result.failed = failed;
    }
    if (grace_ms <= 0) {  // a limit the job is already past, or a reclaim --now: no grace
      executor->Stop(SIGKILL);
      term_at = 0;
      kill_at = clock.MonoMs() + 1000;
      return;
    }
    int first = checkpoint_signal && requeued_after_stop() ? checkpoint_signal : SIGTERM;
    executor->Stop(first);
    // Half the grace to checkpoint, then SIGTERM; a commit ends the wait early.
    if (first != SIGTERM) {
      event("asked for a checkpoint before stopping (" +
            CheckpointSignalName(*task.spec.checkpoint) + ")");
      term_at = clock.MonoMs() + grace_ms / 2;
      stop_after_commit = newest_commit;
    }
    kill_at = clock.MonoMs() + grace_ms;
  };

  char buf[65536];
  while (!exited || out_open || err_open) {
    int64_t now = clock.MonoMs();
    if (deadline && now >= deadline && !exited) {
      stop_job("exceeded max_runtime of " + FormatDurationMs(task.spec.max_runtime_ms), true,
               options.kill_grace_ms);
    }
    if (watch_memory && !exited && now >= next_memory_check) {
      next_memory_check = now + options.exec_config->memory_poll_ms;
      int64_t used = executor->GetUsage().memory_bytes;
      if (used > limits.memory_bytes) {
        std::string why = exec::MemoryLimitReason(limits.memory_bytes);
        event(why + " (it used " + FormatBytes(used) + ")");
        stop_job(why, true, 0);
      }
    }
    if (next_disk_check && !exited && now >= next_disk_check) {
      int64_t before = clock.MonoMs();
      // The job's output, kept here until the server has it, counts too.
      struct stat log_stat {};
      int64_t output = ::fstat(log_fd, &log_stat) == 0 ? log_stat.st_size : 0;
      int64_t work =
          DiskUsage(paths.work_dir(), {.count_root = false, .stop_after = limits.disk_bytes + 1});
      // Counting a large tree costs; keep it to about 1% of the time.
      next_disk_check = now + std::max<int64_t>(kDiskCheckMs, 100 * (clock.MonoMs() - before));
      if (work + output > limits.disk_bytes) {
        std::string why = exec::DiskLimitReason(limits.disk_bytes);
        event(why + ": " + FormatBytes(work) + " in it, " + FormatBytes(output) + " of output");
        stop_job(why, true, options.kill_grace_ms);
      }
    }
    if (next_ask && now >= next_ask && !exited && kill_at == 0) {
      executor->Stop(checkpoint_signal);
      next_ask = now + interval_ms;
    }
    if (uploader && now >= next_scan) {
      next_scan = now + kCommitScanMs;
      scan_commits();
      report_uploads();
      if (stop_after_commit >= 0 && newest_commit > stop_after_commit && !exited) {
        // The checkpoint asked for before the stop is committed: go now.
        event("checkpoint ckpt-" + std::to_string(newest_commit) + " committed: stopping the job");
        stop_after_commit = -1;
        executor->Stop(SIGTERM);
        term_at = 0;
        kill_at = std::min(kill_at, now + kStopAfterCommitGraceMs);
      }
      if (uploader->fenced() && !exited) {
        stop_job("stale attempt: the server gave the job to another attempt", false, 0);
      }
    }
    if (lease.held() && !exited && !lease_lost &&
        (now >= next_lease_check || lease.MustStop(BootTimeMs()))) {
      next_lease_check = now + kLeaseCheckMs;
      if (lease_over()) {
        // The server starts the job elsewhere once the lease has ended: be
        // gone by then, checkpointing first where the job checkpoints.
        lease_lost = true;
        event(lease.Reason());
        const int64_t boot_now = BootTimeMs();
        const int64_t left = std::max<int64_t>(lease.deadline_ms() - boot_now, 0);
        if (kill_at == 0) {
          stop_job(lease.Reason(), false, left);
          result.lost = true;
        } else {
          kill_at = std::min(kill_at, now + left);
        }
      }
    }
    if (term_at && now >= term_at && !exited) {
      executor->Stop(SIGTERM);
      term_at = 0;
    }
    if (kill_at && now >= kill_at && !exited) {
      executor->Stop(SIGKILL);
      kill_at = now + 1000;
    }
    if (exited && drain_until && now >= drain_until) break;
    int64_t wake = uploader ? kCommitScanMs : 1000;
    if (next_ask && !exited) wake = std::min(wake, std::max<int64_t>(next_ask - now, 0));
    if (deadline && !exited) wake = std::min(wake, std::max<int64_t>(deadline - now, 0));
    if (kill_at && !exited) wake = std::min(wake, std::max<int64_t>(kill_at - now, 0));
    if (term_at && !exited) wake = std::min(wake, std::max<int64_t>(term_at - now, 0));
    if (lease.held() && !exited && !lease_lost) {
      wake = std::min(wake, std::max<int64_t>(next_lease_check - now, 0));
      // Wake when the stop must begin, not up to a second later.
      int64_t stop_in = lease.deadline_ms() - lease.stop_window_ms() - BootTimeMs();
      wake = std::min(wake, std::max<int64_t>(stop_in, 0));
    }
    if (watch_memory && !exited) {
      wake = std::min(wake, std::max<int64_t>(next_memory_check - now, 0));
    }
    // Past the output limit the pipes are drained at a bounded rate. The
    // log paces on the times its records carry, the wall clock's (`now` is
    // monotonic); it never pauses more than a second, whatever the clock does.
    const int64_t drain_pause = out.DrainPauseMs(clock.NowMs());
    if (drain_pause > 0) wake = std::min(wake, drain_pause);
    pollfd fds[4] = {{out_open && drain_pause == 0 ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open && drain_pause == 0 ? err_pipe[0] : -1, POLLIN, 0},
                     {sig_fd, POLLIN, 0},
                     {commit_watch, POLLIN, 0}};
    int n = ::poll(fds, 4, static_cast<int>(wake));
    if (n < 0 && errno != EINTR) break;
    now = clock.MonoMs();
    const int64_t wall_now = clock.NowMs();
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      const char stream = i == 0 ? 'o' : 'e';
      if (r > 0) {
        out.Add(stream, buf, static_cast<size_t>(r), wall_now);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        out.Finish(stream, wall_now);
        (i == 0 ? out_open : err_open) = false;
      }
    }
    if (fds[2].revents & POLLIN) {
      if (auto stop = stop_requested()) {
        stop_job(*stop, false, StopGraceMs(paths, options.kill_grace_ms));
      }
    }
    if (fds[3].revents & POLLIN) {
      while (::read(commit_watch, buf, sizeof buf) > 0) {
      }
      next_scan = now;  // scan on the next turn
    }
    // Reap the job and any orphan of it that came to the shim.
    int st = 0;
    pid_t w;
    while ((w = ::waitpid(-1, &st, WNOHANG)) > 0) {
      if (w != pid || exited) continue;
      exited = true;
      wstatus = st;
      // Leftover processes of the job would hold the pipes open forever.
      executor->Stop(SIGKILL);
      drain_until = now + 2000;
    }
  }
  if (commit_watch >= 0) ::close(commit_watch);
  out.Finish('o', clock.NowMs());
  out.Finish('e', clock.NowMs());
  if (!exited) {
    executor->Stop(SIGKILL);
    ::waitpid(pid, &wstatus, 0);
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.signal = WTERMSIG(wstatus);
    result.exit_code = 128 + result.signal;
  }
  if (result.reason.empty()) {
    result.reason = executor->ExitReason(wstatus, out.last_stderr_line());
    // A limit the kernel enforced (a cgroup's OOM kill, the file size limit).
    result.failed = result.reason.starts_with("exceeded") || result.reason.starts_with("cannot");
  }
  executor->Cleanup();
  ReapEverything(clock);
  // Its GPUs are free now, whatever the shim still has to do.
  (void)out.Record('x', clock.NowMs(), "");
  (void)WriteAll(STDOUT_FILENO, "exited\n");  // wakes the agent, if it is there
  // A job that goes back to the queue resumes from its newest checkpoint:
  // ship it before the result tells the agent (and the server) it ended.
  if (uploader && requeued_after_stop() && !uploader->fenced()) {
    scan_commits();
    if (uploader->busy()) {
      event("uploading checkpoint ckpt-" + std::to_string(newest_commit));
      if (!uploader->WaitIdle(kFinalUploadMs)) {
        event("the checkpoint upload did not finish within " + FormatDurationMs(kFinalUploadMs) +
              "; the job resumes from its previous checkpoint");
      }
    }
    report_uploads();
  }
  uploader.reset();
  result.finished_ms = clock.NowMs();
  bool recorded = record_result(result);
  ::close(log_fd);
  return recorded ? 0 : 1;
}

}  // namespace gpupool::agent
