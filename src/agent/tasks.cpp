#include "agent/tasks.h"

#include "agent/shim.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/files.h"
#include "common/log.h"

namespace gpupool::agent {
namespace fs = std::filesystem;

TaskManager::TaskManager(Options options, net::EventLoop& loop, const Clock& clock,
                         std::function<void()> on_wake)
    : options_(std::move(options)), loop_(loop), clock_(clock), on_wake_(std::move(on_wake)) {}

TaskManager::~TaskManager() {
  for (auto& [id, t] : tasks_) {
    if (t.status_pipe >= 0) {
      loop_.UnwatchFd(t.status_pipe);
      ::close(t.status_pipe);
    }
  }
}

Status TaskManager::Recover() {
  std::string root = options_.data_dir + "/tasks";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::Internal("cannot create " + root + ": " + ec.message());
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    TaskState t;
    t.attempt_id = entry.path().filename().string();
    t.paths.dir = entry.path().string();
    auto spec = ReadFile(t.paths.task_json());
    if (!spec.ok()) {
      // Died between mkdir and writing task.json: nothing ran.
      fs::remove_all(entry.path(), ec);
      continue;
    }
    auto start = proto::DecodeStartTask(*spec);
    if (start.ok()) t.job_id = start->job_id;
    if (auto pid = ReadFile(t.paths.shim_pid()); pid.ok()) {
      std::istringstream in(*pid);
      in >> t.shim_pid >> t.shim_start_time;
    }
    t.started = fs::exists(t.paths.job_pid());
    ReadResult(t);
    if (!t.result) {
      auto now_start = ProcessStartTime(t.shim_pid);
      if (!now_start || *now_start != t.shim_start_time) t.lost = true;
    }
    GP_LOG(kInfo) << "recovered task " << t.attempt_id << ": "
                  << (t.result ? "ended" : t.lost ? "lost" : "running");
    tasks_[t.attempt_id] = std::move(t);
  }
  return Status::Ok();
}

Status TaskManager::Start(const proto::StartTask& task) {
  if (tasks_.count(task.attempt_id)) return Status::Ok();  // a resent order
  TaskState t;
  t.attempt_id = task.attempt_id;
  t.job_id = task.job_id;
  t.paths.dir = options_.data_dir + "/tasks/" + task.attempt_id;
  std::error_code ec;
  fs::create_directories(t.paths.work_dir(), ec);
  if (ec) return Status::Internal("cannot create " + t.paths.work_dir() + ": " + ec.message());
  GP_RETURN_IF_ERROR(WriteFileAtomic(t.paths.task_json(), proto::Encode(task)));

  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  std::string shim_log = t.paths.dir + "/shim.log";
  ShimOptions shim{t.paths.dir, options_.kill_grace_ms};
  // The shim is a fork of the agent that never execs: no binary to load, so
  // a task starts in well under a millisecond. This relies on the agent
  // being single-threaded (the child may safely allocate and do I/O).
  pid_t pid = ::fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setsid();  // the shim outlives the agent and ignores its terminal
    ::prctl(PR_SET_NAME, "gpupool-shim");
    ::dup2(status[1], STDOUT_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, STDIN_FILENO);
    int err = ::open(shim_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    // Nothing else of the agent's (its server connection above all) may stay
    // open in the shim, or the connection would outlive a killed agent.
    ::close_range(3, ~0U, 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    _exit(RunShim(shim));
  }
  ::close(status[1]);
  t.shim_pid = pid;
  t.shim_start_time = ProcessStartTime(pid).value_or(0);
  GP_RETURN_IF_ERROR(WriteFileAtomic(t.paths.shim_pid(),
                               std::to_string(pid) + " " + std::to_string(t.shim_start_time) + "\n"));
  t.status_pipe = status[0];
  auto& stored = tasks_[t.attempt_id] = std::move(t);
  Watch(stored);
  return Status::Ok();
}

void TaskManager::Watch(TaskState& t) {
  std::string id = t.attempt_id;
  int fd = t.status_pipe;
  loop_.WatchReadable(fd, [this, id, fd] {
    char buf[256];
    ssize_t n = ::read(fd, buf, sizeof buf);
    auto it = tasks_.find(id);
    if (n > 0) {
      if (it != tasks_.end() && std::string_view(buf, static_cast<size_t>(n)).find("started") != std::string_view::npos) {
        it->second.started = true;
      }
      if (on_wake_) on_wake_();
      return true;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    // The shim exited: its result is on disk now.
    ::close(fd);
    if (it != tasks_.end()) it->second.status_pipe = -1;
    if (on_wake_) loop_.Post(on_wake_);
    return false;
  });
}

void TaskManager::ReadResult(TaskState& t) {
  auto text = ReadFile(t.paths.result_json());
  if (!text.ok()) return;
  auto r = DecodeResult(*text);
  if (r.ok()) {
    t.result = *r;
  } else {
    TaskResult broken;
    broken.failed = true;
    broken.exit_code = 1;
    broken.reason = "unreadable result: " + r.status().message();
    t.result = broken;
  }
}

void TaskManager::Stop(const std::string& attempt_id, const std::string& reason) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return;
  TaskState& t = it->second;
  if (t.result || t.lost) return;
  (void)WriteFileAtomic(t.paths.dir + "/stop.reason", reason);
  auto start = ProcessStartTime(t.shim_pid);
  if (start && *start == t.shim_start_time) ::kill(t.shim_pid, SIGTERM);
}

void TaskManager::StopAll(const std::string& reason) {
  for (auto& [id, t] : tasks_) Stop(id, reason);
}

std::vector<std::string> TaskManager::Poll() {
  std::vector<std::string> changed;
  for (auto& [id, t] : tasks_) {
    if (t.result || t.lost) continue;
    // Reap our own shims; after an agent restart they are not our children.
    if (t.shim_pid > 0) ::waitpid(t.shim_pid, nullptr, WNOHANG);
    if (!t.started && fs::exists(t.paths.job_pid())) {
      t.started = true;
      changed.push_back(id);
    }
    ReadResult(t);
    if (t.result) {
      changed.push_back(id);
      continue;
    }
    auto start = ProcessStartTime(t.shim_pid);
    if (!start || *start != t.shim_start_time) {
      // The shim may have written its result just before exiting.
      ReadResult(t);
      if (!t.result) t.lost = true;
      changed.push_back(id);
    }
  }
  return changed;
}

std::vector<OutputRecord> TaskManager::ReadOutput(const std::string& attempt_id, size_t max_bytes) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return {};
  TaskState& t = it->second;
  int fd = ::open(t.paths.output_log().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string buf(max_bytes, '\0');
  ssize_t n = ::pread(fd, buf.data(), buf.size(), t.read_offset);
  ::close(fd);
  if (n <= 0) return {};
  buf.resize(static_cast<size_t>(n));
  size_t consumed = 0;
  auto records = ParseRecords(buf, t.read_offset, &consumed);
  t.read_offset += static_cast<int64_t>(consumed);
  if (!records.empty() && records.front().offset == t.skip_offset) records.erase(records.begin());
  if (consumed > 0) t.skip_offset = -1;
  return records;
}

void TaskManager::ResumeOutputAfter(const std::string& attempt_id, int64_t last_offset) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return;
  // Offsets are record starts, so seeking there lands on a record boundary.
  it->second.read_offset = std::max<int64_t>(last_offset, 0);
  it->second.skip_offset = last_offset;
}

bool TaskManager::HasUnreadOutput(const std::string& attempt_id) const {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return false;
  struct stat st;
  if (::stat(it->second.paths.output_log().c_str(), &st) != 0) return false;
  return st.st_size > it->second.read_offset;
}

proto::TaskReport TaskManager::Report(const TaskState& t) const {
  proto::TaskReport r;
  r.attempt_id = t.attempt_id;
  r.ts_ms = clock_.NowMs();
  if (t.result) {
    r.state = t.result->failed ? "failed" : "exited";
    r.exit_code = t.result->exit_code;
    r.signal = t.result->signal;
    r.reason = t.result->reason;
    r.ts_ms = t.result->finished_ms;
  } else if (t.lost) {
    r.state = "lost";
    r.reason = "its shim exited without a result";
  } else {
    r.state = "running";
  }
  return r;
}

std::vector<proto::TaskReport> TaskManager::Reports() const {
  std::vector<proto::TaskReport> out;
  for (const auto& [id, t] : tasks_) out.push_back(Report(t));
  return out;
}

void TaskManager::Remove(const std::string& attempt_id) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return;
  if (it->second.status_pipe >= 0) {
    loop_.UnwatchFd(it->second.status_pipe);
    ::close(it->second.status_pipe);
  }
  std::error_code ec;
  fs::remove_all(it->second.paths.dir, ec);
  tasks_.erase(it);
}

int TaskManager::running() const {
  int n = 0;
  for (const auto& [id, t] : tasks_) n += !(t.result || t.lost);
  return n;
}

}  // namespace gpupool::agent
