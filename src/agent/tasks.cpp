#include "agent/tasks.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "agent/shim.h"
#include "agent/shim_launch.h"
#include "common/files.h"
#include "common/log.h"
#include "exec/driver_files.h"
#include "exec/process_tree.h"
#include "model/job.h"

namespace gpupool::agent {
namespace fs = std::filesystem;

namespace {

// Reads `len` bytes of `path` at `offset` (fewer at the end of the file).
std::string ReadAt(const std::string& path, int64_t offset, size_t len) {
  std::string buf;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return buf;
  buf.resize(len);
  ssize_t n = ::pread(fd, buf.data(), len, offset);
  ::close(fd);
  buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return buf;
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// The port the kernel gives a socket bound to port 0, on both IPv6 and
// IPv4 where it can. Released at once: the job binds it moments later.
Result<int> EphemeralPort() {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int bound = -1;
  if (fd >= 0) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (bound != 0) ::close(fd);
  }
  if (bound != 0) {  // no IPv6 on this machine
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      int e = errno;
      ::close(fd);
      return Status::Internal(std::string("cannot bind a TCP port: ") + std::strerror(e));
    }
  }
  sockaddr_storage got{};
  socklen_t len = sizeof got;
  int rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len);
  int e = errno;
  ::close(fd);
  if (rc != 0) return Status::Internal(std::string("getsockname: ") + std::strerror(e));
  in_port_t port = got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&got)->sin_port;
  return static_cast<int>(ntohs(port));
}

nlohmann::json GangToJson(const proto::GangRank& g) {
  nlohmann::json j = {{"rank", g.rank}, {"nodes", g.nodes}, {"mode", DistributedName(g.mode)}};
  if (g.master_port != 0) j["master"] = {{"addr", g.master_addr}, {"port", g.master_port}};
  return j;
}

std::optional<proto::GangRank> GangFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  proto::GangRank g;
  g.rank = j.value("rank", 0);
  g.nodes = j.value("nodes", 1);
  auto mode = ParseDistributed(j.value("mode", "torch"));
  if (!mode.ok()) return std::nullopt;
  g.mode = *mode;
  if (auto m = j.find("master"); m != j.end() && m->is_object()) {
    g.master_addr = m->value("addr", "");
    g.master_port = m->value("port", 0);
  }
  return g;
}

}  // namespace

bool NeedsMaster(const proto::StartTask& task) {
  return task.gang && task.gang->rank == 0 && task.gang->mode == Distributed::kTorch &&
         task.gang->master_port == 0;
}

namespace {
// Rank 0 of a torch gang whose master port is chosen.
bool NeedsMasterPort(const proto::StartTask& task) {
  return task.gang && task.gang->rank == 0 && task.gang->mode == Distributed::kTorch &&
         task.gang->master_port != 0;
}
}  // namespace

TaskManager::TaskManager(Options options, net::EventLoop& loop, const Clock& clock,
                         std::function<void()> on_wake)
    : options_(std::move(options)),
      loop_(loop),
      clock_(clock),
      on_wake_(std::move(on_wake)),
      launcher_(options_.data_dir) {}

TaskManager::~TaskManager() {
  for (auto& [id, t] : tasks_) {
    if (t.status_pipe >= 0) {
      loop_.UnwatchFd(t.status_pipe);
      ::close(t.status_pipe);
    }
  }
}

void TaskManager::ApplyShimRecord(TaskState& t, const OutputRecord& r) {
  if (r.kind == 'x') {
    t.job_exited = true;
  } else if (r.kind == 'p') {
    auto pids = DecodePids(r.text);
    if (!pids.ok()) return;
    t.started = true;
    t.shim_pid = pids->shim_pid;
    t.shim_start_time = pids->shim_start_time;
  } else if (r.kind == 'r') {
    auto result = DecodeResult(r.text);
    if (result.ok()) {
      t.result = *result;
    } else {
      TaskResult broken;
      broken.failed = true;
      broken.exit_code = 1;
      broken.reason = "unreadable result: " + result.status().message();
      t.result = broken;
    }
  }
}

Status TaskManager::Recover() {
  std::string root = options_.data_dir + "/tasks";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::Internal("cannot create " + root + ": " + ec.message());
  // Tasks' output and directories are the agent's alone; sandboxes reach
  // their own work directory through a descriptor, not this path.
  fs::permissions(root, fs::perms::owner_all, ec);
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    TaskState t;
    t.attempt_id = entry.path().filename().string();
    t.paths.dir = entry.path().string();
    auto id = ParseAttemptId(t.attempt_id);
    if (!id.ok()) {
      GP_LOG(kWarn) << "ignoring " << t.paths.dir << ": not a task directory";
      continue;
    }
    t.job_id = id->first;
    // The pids record comes first (unless the job never started); the result
    // record, if any, last.
    std::string log = t.paths.output_log();
    size_t consumed = 0;
    for (const auto& r : ParseRecords(ReadAt(log, 0, 64 * 1024), 0, &consumed)) {
      if (r.kind == 'p' || r.kind == 'x' || r.kind == 'r') ApplyShimRecord(t, r);
    }
    int64_t size = FileSize(log);
    int64_t tail = std::max<int64_t>(0, size - 64 * 1024);
    std::string end = ReadAt(log, tail, 64 * 1024);
    size_t nl = tail > 0 ? end.find('\n') : std::string::npos;  // skip a partial first line
    std::string_view whole =
        nl == std::string::npos ? std::string_view(end) : std::string_view(end).substr(nl + 1);
    int64_t base = tail + static_cast<int64_t>(end.size() - whole.size());
    for (const auto& r : ParseRecords(whole, base, &consumed)) {
      if (r.kind == 'x' || r.kind == 'r') ApplyShimRecord(t, r);
    }
    if (auto exec = ReadFile(t.paths.exec_json()); exec.ok()) {
      auto j = nlohmann::json::parse(*exec, nullptr, false);
      if (j.is_object()) {
        t.executor = j.value("executor", "");
        t.runs_as = j.value("runs_as", "");
        t.has_image = j.value("image", false);
        t.uid = j.value("uid", -1);
        if (auto c = j.find("gpu_memory_cap"); c != j.end() && c->is_number_integer()) {
          t.gpu_memory_cap = std::max<int64_t>(c->get<int64_t>(), 0);
        }
        if (auto m = j.find("gpu_share_milli"); m != j.end() && m->is_number_integer()) {
          t.gpu_share_milli = static_cast<int32_t>(std::clamp<int64_t>(m->get<int64_t>(), 0, 1000));
        }
        t.gpu_share_strict = j.value("gpu_share_mode", "") == "strict";
        if (auto o = j.find("owner"); o != j.end() && o->is_string())
          t.owner = o->get<std::string>();
        if (auto m = j.find("mps"); m != j.end() && m->is_boolean()) t.mps = m->get<bool>();
        if (j.contains("gang")) t.gang = GangFromJson(j["gang"]);
        if (auto p = j.find("gang_ports"); p != j.end() && p->is_array() && p->size() == 2 &&
                                           (*p)[0].is_number_integer() &&
                                           (*p)[1].is_number_integer()) {
          t.gang_ports = {(*p)[0].get<int>(), (*p)[1].get<int>()};
        }
        if (j.contains("gpus") && j["gpus"].is_array()) {
          for (const auto& g : j["gpus"]) {
            if (g.is_string()) t.gpu_uuids.push_back(g.get<std::string>());
          }
        }
      }
    }
    if (auto why = ReadFile(t.paths.vacate_reason()); why.ok()) t.vacate_reason = *why;
    if (!t.result) {
      auto now_start = ProcessStartTime(t.shim_pid);
      t.shim_gone = !now_start || *now_start != t.shim_start_time;
      if (t.shim_gone) CleanUpAfterLostShim(t);
    }
    GP_LOG(kInfo) << "recovered task " << t.attempt_id << ": "
                  << (t.result      ? "ended"
                      : t.shim_gone ? "lost"
                                    : "running");
    tasks_[t.attempt_id] = std::move(t);
  }
  return Status::Ok();
}

int TaskManager::MpsUidOf(const std::string& owner, const std::string& gpu) const {
  for (const auto& [id, t] : tasks_) {
    if (Ended(t) || !t.mps || t.uid < 0 || t.owner != owner) continue;
    if (t.gpu_uuids.size() == 1 && t.gpu_uuids[0] == gpu) return t.uid;
  }
  return -1;
}

void TaskManager::AddEvent(const std::string& attempt_id, const std::string& text) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end() || Ended(it->second) || it->second.job_exited) return;
  std::string line = text.substr(0, kMaxLineBytes);
  std::replace(line.begin(), line.end(), '\n', ' ');
  // One write of one whole record: the shim appends its own records to the
  // same file (O_APPEND), never half of one.
  const std::string record = EncodeRecord('v', clock_.NowMs(), line);
  int fd = ::open(it->second.paths.output_log().c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return;
  (void)!::write(fd, record.data(), record.size());
  ::close(fd);
}

int TaskManager::FreeUid() const {
  const exec::ExecConfig& c = *options_.exec_config;
  std::vector<bool> used(static_cast<size_t>(std::max(c.uid_count, 0)));
  // An ended task's account is free again: its shim killed every process
  // of it before it recorded the result.
  for (const auto& [id, t] : tasks_) {
    if (Ended(t)) continue;
    int i = t.uid - c.first_uid;
    if (i >= 0 && i < c.uid_count) used[static_cast<size_t>(i)] = true;
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) return c.first_uid + static_cast<int>(i);
  }
  return -1;
}

void TaskManager::CleanUpAfterLostShim(const TaskState& t) {
  if (options_.exec_config == nullptr || options_.exec_env == nullptr) return;
  auto executor =
      exec::MakeExecutor(t.executor, t.has_image, *options_.exec_config, *options_.exec_env);
  if (!executor.ok()) return;
  exec::TaskContext ctx;
  ctx.attempt_id = t.attempt_id;
  ctx.job_id = t.job_id;
  ctx.task_dir = t.paths.dir;
  ctx.work_dir = t.paths.work_dir();
  ctx.uid = t.uid;
  (*executor)->Recover(ctx);
}

Status TaskManager::ChooseMaster(proto::StartTask& task, const std::string& addr) const {
  if (!NeedsMaster(task)) return Status::Ok();
  if (auto it = tasks_.find(task.attempt_id); it != tasks_.end()) {
    if (it->second.gang) {
      task.gang->master_addr = it->second.gang->master_addr;
      task.gang->master_port = it->second.gang->master_port;
    }
    return Status::Ok();
  }
  if (addr.empty()) return Status::FailedPrecondition("this agent knows no address to advertise");
  if (ForwardsGangPorts(task)) {
    GP_ASSIGN_OR_RETURN(exec::PortRange block, FreePortBlock());
    task.gang->master_addr = addr;
    task.gang->master_port = block.first;
    return Status::Ok();
  }
  std::set<int> taken;
  for (const auto& [id, t] : tasks_) {
    if (!Ended(t) && t.gang && t.gang->master_port != 0) taken.insert(t.gang->master_port);
  }
  for (int tries = 0; tries < 32; ++tries) {
    GP_ASSIGN_OR_RETURN(int port, EphemeralPort());
    if (taken.count(port)) continue;
    task.gang->master_addr = addr;
    task.gang->master_port = port;
    return Status::Ok();
  }
  return Status::ResourceExhausted("found no free TCP port for the gang's master");
}

bool TaskManager::ForwardsGangPorts(const proto::StartTask& task) const {
  if (!task.gang || task.spec.network != NetworkMode::kPrivate || options_.exec_env == nullptr)
    return false;
  return exec::ChooseExecutor(task.spec.executor, !task.spec.image.empty(), *options_.exec_env) ==
         "sandbox";
}

namespace {

// Whether nothing on this machine listens on or holds TCP `port`.
bool PortFree(int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int err = errno;
    ::close(fd);
    if (ok || err == EADDRINUSE) return ok;
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // no IPv6 here
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// The capability devices of a task's MIG instances, as this machine's
// driver lists them (none where it lists none).
std::vector<std::string> MigCapabilities(const std::vector<exec::MigInstance>& mig) {
  std::vector<std::string> out;
  for (const exec::MigInstance& m : mig) {
    for (std::string& dev : exec::MigCapabilityDevices("/proc", m)) out.push_back(std::move(dev));
  }
  return out;
}

}  // namespace

Result<exec::PortRange> TaskManager::FreePortBlock() const {
  const exec::SandboxOptions& o = options_.exec_config->sandbox;
  std::set<int> taken;
  for (const auto& [id, t] : tasks_) {
    if (!Ended(t) && !t.gang_ports.empty()) taken.insert(t.gang_ports.first);
  }
  int per = std::max(o.gang_ports_per_rank, 1);
  for (int first = o.gang_ports.first; first + per - 1 <= o.gang_ports.last(); first += per) {
    if (taken.count(first)) continue;
    bool free = true;
    for (int p = first; p < first + per && free; ++p) free = PortFree(p);
    if (free) return exec::PortRange{first, per};
  }
  return Status::ResourceExhausted(
      "no free block of " + std::to_string(per) + " ports is left in the gang port range " +
      std::to_string(o.gang_ports.first) + "-" + std::to_string(o.gang_ports.last()));
}

Status TaskManager::WriteLease() {
  AttemptLease lease{lease_sent_ms_ + lease_ms_, lease_ms_};
  if (lease_written_ == lease) return Status::Ok();
  lease_written_.reset();  // unknown until written
  GP_RETURN_IF_ERROR(WriteFileAtomic(LeasePath(), EncodeLeaseFile(lease)));
  lease_written_ = lease;
  return Status::Ok();
}

void TaskManager::SetLease(int64_t lease_ms) {
  lease_ms_ = std::max<int64_t>(lease_ms, 0);
  if (lease_ms_ > 0) return;
  // The server grants no leases now: no task may be stopped by an old one.
  ::unlink(LeasePath().c_str());
  lease_written_.reset();
}

void TaskManager::RenewLeases(int64_t sent_ms) {
  if (lease_ms_ <= 0 || sent_ms <= lease_sent_ms_) return;
  lease_sent_ms_ = sent_ms;
  if (Status s = WriteLease(); !s.ok()) GP_LOG(kError) << "attempt lease: " << s.ToString();
}

Status TaskManager::Start(const proto::StartTask& task, const TaskGpus& gpus) {
  if (tasks_.count(task.attempt_id)) return Status::Ok();  // a resent order
  TaskState t;
  t.attempt_id = task.attempt_id;
  t.job_id = task.job_id;
  t.paths.dir = options_.data_dir + "/tasks/" + task.attempt_id;
  t.executor = task.spec.executor;
  t.gpu_uuids = task.gpu_uuids;
  t.gang = task.gang;
  t.started_ms = clock_.NowMs();
  std::error_code ec;
  fs::create_directories(t.paths.work_dir(), ec);
  if (ec) return Status::Internal("cannot create " + t.paths.work_dir() + ": " + ec.message());
  // A task that does not start leaves nothing behind: the agent reports it
  // failed and never tracks it, and a resent order starts afresh.
  struct RemoveUnlessStarted {
    std::string dir;
    bool started = false;
    ~RemoveUnlessStarted() {
      std::error_code ignored;
      if (!started) fs::remove_all(dir, ignored);
    }
  } cleanup{t.paths.dir};
  // Each sandboxed or containerized task runs as an account of its own; the
  // `process` executor (trusted development only) runs as the agent.
  t.has_image = !task.spec.image.empty();
  t.runs_as = exec::ChooseExecutor(t.executor, t.has_image, *options_.exec_env);
  t.owner = task.owner;
  // A share's compute mode is this node's (the agent config's sharing_mode).
  std::optional<exec::GpuShare> share = gpus.share;
  if (share) {
    share->strict = options_.exec_config->gpu_share_strict;
    t.gpu_memory_cap = share->memory_bytes;
    t.mps = !share->mps_pipe_dir.empty() && t.gpu_uuids.size() == 1;
    // On an MPS GPU, MPS holds the compute share, not the share loop.
    t.gpu_share_milli = t.mps ? 0 : share->share_milli;
    t.gpu_share_strict = share->strict;
  }
  if (options_.own_uids && t.runs_as != "process") {
    // One MPS server serves one account: the user's MPS tasks on this GPU
    // share the account of the first.
    t.uid = t.mps ? MpsUidOf(t.owner, t.gpu_uuids[0]) : -1;
    if (t.uid < 0) t.uid = FreeUid();
    if (t.uid < 0) {
      return Status::ResourceExhausted("every account of the sandbox uid range is in use");
    }
  }
  nlohmann::json exec = {{"executor", t.executor},
                         {"runs_as", t.runs_as},
                         {"image", t.has_image},
                         {"uid", t.uid},
                         {"gpus", t.gpu_uuids},
                         {"gpu_memory_cap", t.gpu_memory_cap},
                         {"gpu_share_milli", t.gpu_share_milli},
                         {"gpu_share_mode", t.gpu_share_strict ? "strict" : "work-conserving"},
                         {"owner", t.owner},
                         {"mps", t.mps}};
  if (ForwardsGangPorts(task)) {
    if (NeedsMasterPort(task)) {
      // Rank 0: ChooseMaster took a block and made its first the master port.
      t.gang_ports = {task.gang->master_port, options_.exec_config->sandbox.gang_ports_per_rank};
      t.master_hidden = true;
    } else {
      GP_ASSIGN_OR_RETURN(t.gang_ports, FreePortBlock());
    }
  }
  if (t.gang) exec["gang"] = GangToJson(*t.gang);
  if (!t.gang_ports.empty()) exec["gang_ports"] = {t.gang_ports.first, t.gang_ports.count};
  // A new file in a new directory, read only by Recover: a partial one (the
  // agent killed while writing it) belongs to a task whose shim never
  // started, which Recover finds lost whatever the file says.
  GP_RETURN_IF_ERROR(WriteNewFile(t.paths.exec_json(), exec.dump() + "\n"));
  // No task runs without a lease (when the server grants them).
  if (lease_ms_ > 0) GP_RETURN_IF_ERROR(WriteLease());

  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  ShimOptions shim{t.paths.dir,
                   task,
                   options_.kill_grace_ms,
                   options_.exec_config,
                   options_.exec_env,
                   t.uid,
                   t.uid,
                   gpus.minors,
                   options_.blob,
                   options_.stop_with_agent ? static_cast<int>(::getpid()) : 0,
                   t.gang_ports,
                   share,
                   MigCapabilities(gpus.mig)};
  // Never a fork of the agent: it has threads (agent/shim_launch.h).
  auto spawned = SpawnShim(launcher_, shim, status[1]);
  if (!spawned.ok()) {
    ::close(status[0]);
    ::close(status[1]);
    return spawned.status();
  }
  pid_t pid = *spawned;
  ::close(status[1]);
  t.shim_pid = pid;
  t.shim_start_time = ProcessStartTime(pid).value_or(0);
  t.status_pipe = status[0];
  cleanup.started = true;
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
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    auto it = tasks_.find(id);
    if (it != tasks_.end()) woken_.insert(id);
    if (n > 0) {
      if (it != tasks_.end() &&
          std::string_view(buf, static_cast<size_t>(n)).find("started") != std::string_view::npos) {
        it->second.started = true;
      }
      if (on_wake_) on_wake_();
      return true;
    }
    // The shim exited: its last record is on disk now.
    ::close(fd);
    if (it != tasks_.end()) {
      it->second.status_pipe = -1;
      it->second.shim_gone = true;
      ::waitpid(it->second.shim_pid, nullptr, WNOHANG);
    }
    if (on_wake_) loop_.Post(on_wake_);
    return false;
  });
}

void TaskManager::Stop(const std::string& attempt_id, const std::string& reason, int64_t grace_ms) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return;
  TaskState& t = it->second;
  if (t.result || t.shim_gone) return;
  // Written before the signal: the shim reads both when it gets SIGTERM.
  if (grace_ms != 0) {
    (void)WriteFileAtomic(t.paths.stop_grace(), std::to_string(std::max<int64_t>(grace_ms, 0)));
  }
  (void)WriteFileAtomic(t.paths.stop_reason(), reason);
  t.stop_requested = reason;
  auto start = ProcessStartTime(t.shim_pid);
  if (start && *start == t.shim_start_time) ::kill(t.shim_pid, SIGTERM);
}

void TaskManager::Vacate(const std::string& attempt_id, const std::string& reason,
                         int64_t grace_ms) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end() || Ended(it->second)) return;
  if (!it->second.vacate_reason.empty()) {
    // Already leaving: only hurried along (reclaim --now after a graceful one).
    if (grace_ms == kKillNow) Stop(attempt_id, "vacated: " + it->second.vacate_reason, kKillNow);
    return;
  }
  it->second.vacate_reason = reason;
  (void)WriteFileAtomic(it->second.paths.vacate_reason(), reason);
  Stop(attempt_id, "vacated: " + reason, grace_ms);
}

void TaskManager::StopToRequeue(const std::string& attempt_id, const std::string& reason,
                                int64_t grace_ms) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end() || Ended(it->second)) return;
  (void)WriteFileAtomic(it->second.paths.stop_requeue(), "");
  Stop(attempt_id, reason, grace_ms);
}

void TaskManager::StopAll(const std::string& reason) {
  for (auto& [id, t] : tasks_) Stop(id, reason);
}

namespace {

// How long rank 0's master stays unannounced when its job never listens on
// the master port (one that rendezvouses its own way).
constexpr int64_t kMasterListenWaitMs = 60'000;

// Whether /proc/PID/net/tcp or tcp6 (a process's network namespace) has a
// socket listening on `port`.
bool ListensOn(pid_t pid, int port) {
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + table).value_or(""));
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state;
      if (!(f >> sl >> local >> remote >> state)) continue;
      if (state == "0A" && local.ends_with(want)) return true;  // 0A: LISTEN
    }
  }
  return false;
}

// Whether the job of the sandbox under `shim` listens on `port` in its
// network namespace: bubblewrap's init (the shim's grandchild) is in it.
bool SandboxListensOn(pid_t shim, int port) {
  for (pid_t child : exec::Children(shim)) {
    for (pid_t init : exec::Children(child)) {
      if (ListensOn(init, port)) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> TaskManager::TakeAnnouncedMasters() {
  return std::exchange(announced_masters_, {});
}

void TaskManager::Poll() {
  for (auto& [id, t] : tasks_) {
    if (t.master_hidden && (Ended(t) || clock_.NowMs() - t.started_ms > kMasterListenWaitMs ||
                            (t.started && SandboxListensOn(t.shim_pid, t.gang->master_port)))) {
      t.master_hidden = false;
      announced_masters_.push_back(id);
    }
    if (t.result || t.shim_gone) continue;
    // Our own shims report through their pipes; shims recovered after an
    // agent restart are not our children and are checked through /proc.
    if (t.status_pipe >= 0) continue;
    auto start = ProcessStartTime(t.shim_pid);
    if (!start || *start != t.shim_start_time) t.shim_gone = true;
  }
}

std::vector<OutputRecord> TaskManager::ReadOutput(const std::string& attempt_id, size_t max_bytes) {
  auto it = tasks_.find(attempt_id);
  if (it == tasks_.end()) return {};
  TaskState& t = it->second;
  std::string buf = ReadAt(t.paths.output_log(), t.read_offset, max_bytes);
  if (buf.empty()) return {};
  size_t consumed = 0;
  auto records = ParseRecords(buf, t.read_offset, &consumed);
  t.read_offset += static_cast<int64_t>(consumed);
  std::vector<OutputRecord> out;
  out.reserve(records.size());
  for (auto& r : records) {
    if (r.kind == 'p' || r.kind == 'x' || r.kind == 'r') {
      ApplyShimRecord(t, r);
    } else if (r.offset != t.skip_offset) {
      out.push_back(std::move(r));
    }
  }
  if (consumed > 0) t.skip_offset = -1;
  return out;
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
  return FileSize(it->second.paths.output_log()) > it->second.read_offset;
}

bool TaskManager::Ended(const TaskState& t) const { return t.result.has_value() || t.shim_gone; }

proto::TaskReport TaskManager::Report(const TaskState& t) const {
  proto::TaskReport r;
  r.attempt_id = t.attempt_id;
  r.ts_ms = clock_.NowMs();
  // Vacated, unless the job had ended on its own before the shim began to
  // stop it (then its result has no stop reason).
  bool ended_first = t.result && t.result->reason.empty();
  if (!t.vacate_reason.empty() && Ended(t) && !ended_first) {
    r.state = proto::TaskState::kVacated;
    r.reason = t.vacate_reason;
    if (t.result) r.ts_ms = t.result->finished_ms;
  } else if (t.result && t.result->lost) {
    r.state = proto::TaskState::kLost;
    r.reason = t.result->reason;
    r.ts_ms = t.result->finished_ms;
  } else if (t.result) {
    r.state = t.result->failed ? proto::TaskState::kFailed : proto::TaskState::kExited;
    r.exit_code = t.result->exit_code;
    r.signal = t.result->signal;
    r.reason = t.result->reason;
    r.ts_ms = t.result->finished_ms;
  } else if (t.shim_gone) {
    r.state = proto::TaskState::kLost;
    r.reason = "its shim exited without a result";
  } else {
    r.state = proto::TaskState::kRunning;
  }
  // Repeated in every report, so that the server learns it again from a
  // restarted agent.
  if (t.gang && t.gang->rank == 0 && t.gang->master_port != 0 && !t.master_hidden) {
    r.master_addr = t.gang->master_addr;
    r.master_port = t.gang->master_port;
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
  for (const auto& [id, t] : tasks_) n += !Ended(t);
  return n;
}

}  // namespace gpupool::agent
