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
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/checkpoint_sync.h"
#include "agent/lease_watch.h"
#include "agent/output_log.h"
#include "agent/shim_context.h"
#include "agent/shim_policy.h"
#include "agent/task_exec.h"
#include "agent/task_files.h"
#include "common/clock.h"
#include "common/disk_usage.h"
#include "common/files.h"
#include "common/json_reader.h"
#include "common/safe_fs.h"
#include "common/unique_fd.h"
#include "common/units.h"
#include "exec/executor.h"
#include "exec/launch.h"
#include "exec/limits.h"
#include "exec/process_tree.h"
#include "model/job_output.h"
#include "proto/messages.h"

namespace gpupool::agent {
namespace {

// How long a stopped job's last checkpoint may take to upload.
constexpr int64_t kFinalUploadMs = 10 * 60'000;
// How often the lease file is read while the job waits for a late renewal
// to start.
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

// What an upload left out because the job changed it while it was read.
std::string SkippedNote(const blob::TreeStats& s) {
  if (s.skipped == 0) return "";
  std::string note =
      "; left out " + std::to_string(s.skipped) + " entries that changed while being read:";
  for (const std::string& e : s.skipped_examples) note += " " + e;
  return note;
}

// One run of the shim: the process plumbing (output.log, the agent's
// signals, the job's pipes, the executor, checkpoint uploads) around the
// pure ShimPolicy (agent/shim_policy.h), which holds every timer.
class ShimRun {
 public:
  ShimRun(const ShimOptions& options, const Clock& clock)
      : o_(options), task_(options.task), clock_(clock), paths_{options.task_dir} {}

  int Run() {
    log_fd_.Reset(
        ::open(paths_.output_log().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!log_fd_.valid()) {
      // Nothing can be recorded: the agent sees the shim gone without a result.
      std::fprintf(stderr, "gpupool-shim %s: cannot open output.log: %s\n",
                   task_.attempt_id.c_str(), std::strerror(errno));
      return 1;
    }
    // Everything goes to output.log through `out_`, within the task's
    // output limit (agent/output_log.h).
    out_.emplace(log_fd_.get(), EffectiveOutputLimit(task_.max_output_bytes, 0));
    TakeSignals();
    lease_ = LeaseWatch(ReadLease(), o_.kill_grace_ms);
    if (std::optional<int> code = Prepare()) return *code;
    if (std::optional<int> code = Launch()) return *code;
    Watch();
    return Finish();
  }

 private:
  // ---- output.log ----

  void Event(const std::string& text) { out_->Event(text, clock_.NowMs()); }
  // Not fsynced: the record outlives the agent's and the shim's deaths in
  // the page cache. Only a host crash loses it, and the attempt then counts
  // as lost, as every attempt on that host still running does (and as the
  // server has usually decided already, the node silent past its lease). A
  // sync per job cost 5% of a trivial job's CPU (docs/performance.md).
  bool RecordResult(const TaskResult& r) {
    return out_->Record('r', clock_.NowMs(), EncodeResult(r));
  }

  // ---- the agent's stop and the attempt's lease ----

  void TakeSignals() {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &old_mask_);
    ::signal(SIGPIPE, SIG_IGN);
    sig_fd_.Reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    // Orphans of the job come to the shim, so stops and accounting see them.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }

  // The stop the agent asked for, once its signal arrived (then kept).
  std::optional<std::string> StopRequested() {
    signalfd_siginfo si;
    while (::read(sig_fd_.get(), &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGCHLD) continue;
      stop_reason_ = "stopped";
      if (auto why = ReadFile(paths_.stop_reason()); why.ok() && !why->empty()) {
        stop_reason_ = "stopped: " + *why;
      } else if (o_.agent_pid != 0 &&
                 (static_cast<pid_t>(si.ssi_pid) == o_.agent_pid || ::getppid() != o_.agent_pid)) {
        // The agent writes stop.reason before every stop it sends, so a
        // signal from it without one is the parent-death signal, sent as
        // the agent dies (while it still has threads, the shim's parent may
        // still read as the agent's pid: the child moves to another of its
        // threads first).
        stop_reason_ = "stopped: its agent exited (the agent runs with --on-exit kill)";
      }
    }
    return stop_reason_;
  }

  // The job goes back to the queue after its stop (the provider takes the
  // GPU back, or the server preempts it): it should checkpoint first.
  bool RequeueMarked() const {
    return ::access(paths_.vacate_reason().c_str(), F_OK) == 0 ||
           ::access(paths_.stop_requeue().c_str(), F_OK) == 0;
  }

  // The attempt's lease (agent/lease_watch.h): the agent wrote it before
  // this shim started, or the server grants none. Unreadable later: the
  // last deadline read holds.
  std::optional<AttemptLease> ReadLease() const {
    auto text = ReadFile(paths_.lease());
    if (!text.ok()) return std::nullopt;
    auto l = DecodeLeaseFile(*text);
    return l.ok() ? std::optional<AttemptLease>(*l) : std::nullopt;
  }
  // In the stop window; read again once there (a renewal moves the deadline).
  bool LeaseOver() {
    if (!lease_.MustStop(clock_.MonoMs())) return false;
    if (auto l = ReadLease()) lease_.Update(*l);
    return lease_.MustStop(clock_.MonoMs());
  }
  // Before the job runs there is nothing to stop, so its lease only has to
  // be unexpired: the stop window is there to stop a running job in time.
  bool LeaseExpired() { return LeaseOver() && lease_.Expired(clock_.MonoMs()); }

  // ---- before the job runs ----

  int FailEarly(const std::string& why, bool stopped = false, bool lost = false) {
    Event(why);
    if (executor_) executor_->Cleanup();
    TaskResult r;
    r.exit_code = 127;
    r.failed = !stopped && !lost;
    r.lost = lost;
    r.reason = why;
    r.finished_ms = clock_.NowMs();
    RecordResult(r);
    return 1;
  }
  // A stop or an expired lease while the job was being prepared.
  std::optional<int> StoppedBeforeStart() {
    if (auto stop = StopRequested()) return FailEarly(*stop + " (before it started)", true);
    if (LeaseExpired()) return FailEarly(lease_.Reason() + " (before it started)", false, true);
    return std::nullopt;
  }

  // The executor, the job's files and its sandbox; nullopt when the job
  // may start, else the shim's exit code (the result is recorded).
  std::optional<int> Prepare() {
    std::vector<std::string> limit_notes;
    ctx_ = MakeTaskContext(o_, paths_, limit_notes);
    for (const std::string& note : limit_notes) Event(note);
    ctx_.stop_requested = [this] { return StopRequested().has_value() || LeaseExpired(); };
    {
      auto made = exec::MakeExecutor(task_.spec.executor, !task_.spec.image.empty(),
                                     *o_.exec_config, *o_.exec_env);
      if (!made.ok()) return FailEarly("cannot start: " + made.status().message());
      executor_ = *std::move(made);
    }
    auto event = [this](const std::string& text) { Event(text); };
    if (Status s = MaterializeWorkDir(task_, paths_.work_dir(), o_.uid, o_.blob, event); !s.ok()) {
      if (auto code = StoppedBeforeStart()) return code;
      // Not the job's fault when the server is out of reach: "lost" requeues it.
      if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
        Event("cannot fetch the job's files: " + s.message());
        log_fd_.Reset();
        return 1;
      }
      return FailEarly("cannot start: " + s.message());
    }
    if (Status s = PrepareJupyterSession(task_, paths_, o_, executor_->name(), ctx_); !s.ok()) {
      return FailEarly("cannot start: " + s.message());
    }
    if (Status s = executor_->Prepare(ctx_, event); !s.ok()) {
      if (auto code = StoppedBeforeStart()) return code;
      return FailEarly("cannot start: " + s.message());
    }
    if (auto stop = StopRequested()) return FailEarly(*stop + " (before it started)", true);
    return WaitForLease();
  }

  // A lease already in its stop window (the agent started the task while a
  // renewal was late: a busy server, a busy machine) would stop the job as
  // it starts. The job starts once a renewal moves the deadline out of the
  // window; if none comes before the deadline, the attempt is lost here.
  std::optional<int> WaitForLease() {
    if (!LeaseOver()) return std::nullopt;
    Event("waiting for the renewal of the attempt's lease before starting the job");
    while (LeaseOver() && !lease_.Expired(clock_.MonoMs()) && !StopRequested()) {
      ::usleep(static_cast<useconds_t>(kLeaseWaitMs * 1000));
    }
    if (auto stop = StopRequested()) return FailEarly(*stop + " (before it started)", true);
    if (LeaseOver()) return FailEarly(lease_.Reason() + " (before it started)", false, true);
    return std::nullopt;
  }

  // Forks the job; nullopt once it runs (or its launch failed and that is
  // the result: the job is killed and reaped as usual).
  std::optional<int> Launch() {
    auto planned = executor_->Start(ctx_);
    if (!planned.ok()) return FailEarly("cannot start: " + planned.status().message());
    const exec::LaunchPlan& plan = *planned;
    int out_pipe[2], err_pipe[2], exec_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0 ||
        ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
      return FailEarly(std::string("cannot start: pipe: ") + std::strerror(errno));
    }
    auto spawned = exec::SpawnPlan(plan, {-1, out_pipe[1], err_pipe[1]}, old_mask_, exec_pipe[1]);
    if (!spawned.ok()) return FailEarly("cannot start: " + spawned.status().message());
    pid_ = *spawned;
    ::setpgid(pid_, pid_);  // also in the parent, so the group exists at once
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::close(exec_pipe[1]);
    out_pipe_.Reset(out_pipe[0]);
    err_pipe_.Reset(err_pipe[0]);
    if (Status s = executor_->Started(pid_); !s.ok()) {
      // The job never ran (the sandbox held it back): nothing of it may.
      result_.failed = true;
      result_.reason = "cannot start: " + s.message();
      executor_->Stop(SIGKILL);
    }
    int failure[2] = {0, 0};
    if (::read(exec_pipe[0], failure, sizeof failure) == sizeof failure) {
      result_.failed = true;
      result_.reason = exec::DescribeLaunchFailure(plan, failure[0], failure[1]);
    }
    ::close(exec_pipe[0]);
    pid_t self = ::getpid();
    ShimPids pids{self, ProcessStartTime(self).value_or(0), pid_};
    (void)out_->Record('p', clock_.NowMs(), EncodePids(pids));
    std::string started = "started " + std::to_string(pid_) + "\n";
    (void)WriteAll(STDOUT_FILENO, started);  // the agent may be gone: ignore errors
    if (result_.failed) {
      std::string msg = "gpupool: " + result_.reason + "\n";
      out_->Add('e', msg.data(), msg.size(), clock_.NowMs());
    }
    return std::nullopt;
  }

  // ---- while the job runs ----

  // Checkpoints (agent/checkpoint_sync.h), for jobs with a checkpoint
  // section. Of a multi-node job only rank 0 uploads: the others get the
  // signals (the ranks checkpoint together) but write no checkpoint of the
  // job, so a stop before a requeue waits half the grace for them, not a
  // commit. Returns the newest commit already there (a restored one).
  int64_t SetUpCheckpoints() {
    checkpoint_dir_ = exec::CheckpointDirIn(paths_.work_dir());
    if (!task_.spec.checkpoint) return 0;
    if (task_.gang && task_.gang->rank > 0) {
      Event("rank " + std::to_string(task_.gang->rank) + " of " +
            std::to_string(task_.gang->nodes) +
            ": the job's checkpoints are uploaded from rank 0 only");
      return 0;
    }
    int64_t newest = 0;
    if (auto c = NewestCommit(checkpoint_dir_)) newest = c->number;
    uploader_ = std::make_unique<CheckpointUploader>(
        checkpoint_dir_, HttpUploadFn(o_.blob, task_.job_id, task_.attempt_id,
                                      TaskTree{o_.task_dir, FsIdentity{o_.uid, o_.gid}}));
    // A commit is a rename into the directory: noticed at once, with the
    // periodic scan as the fallback (a full inotify table, a replaced dir).
    commit_watch_.Reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (commit_watch_.valid() && ::inotify_add_watch(commit_watch_.get(), checkpoint_dir_.c_str(),
                                                     IN_MOVED_TO | IN_CREATE) < 0) {
      commit_watch_.Reset();
    }
    return newest;
  }

  ShimPolicyConfig PolicyConfig(int64_t restored_commit) const {
    ShimPolicyConfig c;
    const exec::Limits& limits = ctx_.limits;
    c.kill_grace_ms = o_.kill_grace_ms;
    c.max_runtime_ms = task_.spec.max_runtime_ms;
    if (limits.memory_bytes > 0 && !executor_->EnforcesMemory()) {
      c.memory_limit_bytes = limits.memory_bytes;
      c.memory_poll_ms = o_.exec_config->memory_poll_ms;
    }
    c.disk_limit_bytes = std::max<int64_t>(limits.disk_bytes, 0);
    c.checkpoint_signal = CheckpointSignal(task_.spec);
    if (task_.spec.checkpoint) {
      c.checkpoint_signal_name = CheckpointSignalName(*task_.spec.checkpoint);
      c.checkpoint_interval_ms = task_.spec.checkpoint->interval_ms;
    }
    c.uploads_checkpoints = uploader_ != nullptr;
    c.restored_commit = restored_commit;
    c.lease = lease_.lease();
    return c;
  }

  void ReportUploads() {
    for (const CheckpointUploader::Outcome& o : uploader_->TakeOutcomes()) {
      if (o.result.ok()) {
        const blob::TreeStats& s = o.result->stats;
        Event("checkpoint " + o.commit.name + " uploaded as checkpoint " +
              std::to_string(o.result->checkpoint) + ": " + FormatBytes(s.uploaded_bytes) +
              " sent for " + FormatBytes(s.bytes) + " in " + std::to_string(o.took_ms) + " ms" +
              SkippedNote(s));
      } else {
        Event("checkpoint " + o.commit.name + " was not uploaded: " + o.result.status().message());
      }
    }
  }

  // Feeds `event` to the policy and carries out what it asks, including the
  // measurements it asks for (answered at once, as events of their own).
  void Drive(const ShimEvent& event) {
    std::deque<ShimEvent> pending{event};
    while (!pending.empty()) {
      ShimEvent e = std::move(pending.front());
      pending.pop_front();
      for (const ShimAction& a : Step(state_, e, clock_.MonoMs())) {
        if (auto answer = Carry(a)) pending.push_back(std::move(*answer));
      }
    }
  }

  std::optional<ShimEvent> Carry(const ShimAction& a) {
    namespace ev = shim_event;
    switch (a.kind) {
      case ShimAction::kSignal:
        executor_->Stop(a.signal);
        return std::nullopt;
      case ShimAction::kEvent:
        Event(a.text);
        return std::nullopt;
      case ShimAction::kMeasureMemory:
        return ev::MemoryMeasured{executor_->GetUsage().memory_bytes};
      case ShimAction::kMeasureDisk: {
        const int64_t before = clock_.MonoMs();
        // The job's output, kept here until the server has it, counts too.
        struct stat log_stat {};
        int64_t output = ::fstat(log_fd_.get(), &log_stat) == 0 ? log_stat.st_size : 0;
        int64_t work =
            DiskUsage(paths_.work_dir(),
                      {.count_root = false, .stop_after = state_.config.disk_limit_bytes + 1});
        return ev::DiskMeasured{work, output, clock_.MonoMs() - before};
      }
      case ShimAction::kScanCommits:
        scanned_ = NewestCommit(checkpoint_dir_);
        ReportUploads();
        return ev::CommitsScanned{scanned_ ? scanned_->number : 0, uploader_->fenced()};
      case ShimAction::kOfferCommit:
        if (scanned_) uploader_->Offer(*scanned_);
        return std::nullopt;
      case ShimAction::kReadLease:
        return ev::LeaseRead{ReadLease()};
    }
    return std::nullopt;
  }

  // Reads what the job wrote; a pipe at its end closes its stream.
  void ReadPipes(const pollfd* fds) {
    char buf[65536];
    const int64_t wall_now = clock_.NowMs();
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      const char stream = i == 0 ? 'o' : 'e';
      if (r > 0) {
        out_->Add(stream, buf, static_cast<size_t>(r), wall_now);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        out_->Finish(stream, wall_now);
        Drive(shim_event::StreamClosed{stream});
      }
    }
  }

  // Until the job has exited and its output is read. Every timer is on the
  // monotonic clock (a stepped wall clock must neither kill a job for
  // max_runtime nor delay a kill); records carry the wall time.
  void Watch() {
    const int64_t restored = SetUpCheckpoints();
    state_ =
        StartShimState(PolicyConfig(restored), clock_.MonoMs(), result_.reason, result_.failed);
    while (true) {
      Drive(shim_event::Tick{});
      if (ShimFinished(state_, clock_.MonoMs())) break;
      int64_t wake = NextWakeMs(state_, clock_.MonoMs());
      // Past the output limit the pipes are drained at a bounded rate. The
      // log paces on the times its records carry, the wall clock's; it
      // never pauses more than a second, whatever the clock does.
      const int64_t drain_pause = out_->DrainPauseMs(clock_.NowMs());
      if (drain_pause > 0) wake = std::min(wake, drain_pause);
      pollfd fds[4] = {{state_.out_open && drain_pause == 0 ? out_pipe_.get() : -1, POLLIN, 0},
                       {state_.err_open && drain_pause == 0 ? err_pipe_.get() : -1, POLLIN, 0},
                       {sig_fd_.get(), POLLIN, 0},
                       {commit_watch_.get(), POLLIN, 0}};
      int n = ::poll(fds, 4, static_cast<int>(wake));
      if (n < 0 && errno != EINTR) break;
      ReadPipes(fds);
      if (fds[2].revents & POLLIN) {
        if (auto stop = StopRequested()) {
          Drive(
              shim_event::StopAsked{*stop, StopGraceMs(paths_, o_.kill_grace_ms), RequeueMarked()});
        }
      }
      if (fds[3].revents & POLLIN) {
        char buf[4096];
        while (::read(commit_watch_.get(), buf, sizeof buf) > 0) {
        }
        Drive(shim_event::CommitNoticed{});  // scan on the next turn
      }
      // Reap the job and any orphan of it that came to the shim.
      int st = 0;
      pid_t w;
      while ((w = ::waitpid(-1, &st, WNOHANG)) > 0) {
        if (w != pid_ || state_.exited) continue;
        wstatus_ = st;
        Drive(shim_event::JobExited{});
      }
    }
  }

  // ---- after the job ----

  // Records the result once no process of the job is left; returns the
  // shim's exit code.
  int Finish() {
    commit_watch_.Reset();
    out_->Finish('o', clock_.NowMs());
    out_->Finish('e', clock_.NowMs());
    if (!state_.exited) {
      executor_->Stop(SIGKILL);
      ::waitpid(pid_, &wstatus_, 0);
    }
    TaskResult result;
    if (WIFEXITED(wstatus_)) {
      result.exit_code = WEXITSTATUS(wstatus_);
    } else if (WIFSIGNALED(wstatus_)) {
      result.signal = WTERMSIG(wstatus_);
      result.exit_code = 128 + result.signal;
    }
    result.reason = state_.reason;
    result.failed = state_.failed;
    result.lost = state_.lost;
    if (result.reason.empty()) {
      result.reason = executor_->ExitReason(wstatus_, out_->last_stderr_line());
      // A limit the kernel enforced (a cgroup's OOM kill, the file size limit).
      result.failed = result.reason.starts_with("exceeded") || result.reason.starts_with("cannot");
    }
    executor_->Cleanup();
    ReapEverything(clock_);
    // Its GPUs are free now, whatever the shim still has to do.
    (void)out_->Record('x', clock_.NowMs(), "");
    (void)WriteAll(STDOUT_FILENO, "exited\n");  // wakes the agent, if it is there
    UploadLastCheckpoint();
    result.finished_ms = clock_.NowMs();
    bool recorded = RecordResult(result);
    log_fd_.Reset();
    return recorded ? 0 : 1;
  }

  // A job that goes back to the queue resumes from its newest checkpoint:
  // ship it before the result tells the agent (and the server) it ended.
  void UploadLastCheckpoint() {
    if (!uploader_) return;
    if ((state_.requeue || RequeueMarked()) && !uploader_->fenced()) {
      scanned_ = NewestCommit(checkpoint_dir_);
      if (scanned_ && scanned_->number > state_.newest_commit) {
        state_.newest_commit = scanned_->number;
        uploader_->Offer(*scanned_);
      }
      if (uploader_->busy()) {
        Event("uploading checkpoint ckpt-" + std::to_string(state_.newest_commit));
        if (!uploader_->WaitIdle(kFinalUploadMs)) {
          Event("the checkpoint upload did not finish within " + FormatDurationMs(kFinalUploadMs) +
                "; the job resumes from its previous checkpoint");
        }
      }
      ReportUploads();
    }
    uploader_.reset();
  }

  const ShimOptions& o_;
  const proto::StartTask& task_;
  const Clock& clock_;
  const TaskPaths paths_;
  UniqueFd log_fd_;
  std::optional<OutputLog> out_;
  UniqueFd sig_fd_;
  sigset_t old_mask_{};
  std::optional<std::string> stop_reason_;
  LeaseWatch lease_{std::nullopt, 0};
  std::unique_ptr<exec::Executor> executor_;
  exec::TaskContext ctx_;
  pid_t pid_ = -1;
  UniqueFd out_pipe_;
  UniqueFd err_pipe_;
  TaskResult result_;  // decided at the launch (it failed), else empty
  int wstatus_ = 0;
  ShimState state_;
  std::string checkpoint_dir_;
  std::unique_ptr<CheckpointUploader> uploader_;
  UniqueFd commit_watch_;
  std::optional<Commit> scanned_;  // the newest commit at the last scan
};

}  // namespace

int RunShim(const ShimOptions& options) {
  RealClock clock;
  return ShimRun(options, clock).Run();
}

}  // namespace gpupool::agent
