#include "agent/provider.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "agent/agent.h"
#include "agent/gpu_backstop.h"
#include "agent/task_gpus.h"
#include "common/files.h"
#include "common/log.h"
#include "common/units.h"
#include "exec/process_tree.h"
#include "model/job_output.h"
#include "model/yaml.h"

namespace gpupool::agent {
namespace {

constexpr int64_t kTickMs = 1000;  // how often what is lent is re-evaluated

// Root, this agent's account and the configured owner.
Result<std::set<uid_t>> ControlUids(const std::string& owner) {
  std::set<uid_t> uids = {0, ::geteuid()};
  if (owner.empty()) return uids;
  if (owner.find_first_not_of("0123456789") == std::string::npos) {
    uids.insert(static_cast<uid_t>(std::stoul(owner)));
    return uids;
  }
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (::getpwnam_r(owner.c_str(), &pw, buf, sizeof buf, &found) != 0 || found == nullptr) {
    return Status::InvalidArgument("owner: there is no user " + QuoteForError(owner) +
                                   " on this machine");
  }
  uids.insert(found->pw_uid);
  return uids;
}

void Reply(const ControlReply& reply, bool ok, const std::string& message,
           nlohmann::json extra = nlohmann::json::object()) {
  extra["ok"] = ok;
  extra[ok ? "message" : "error"] = message;
  reply(extra);
}

}  // namespace

struct Provider::Waiter {
  std::set<std::string> attempts;  // still running
  std::vector<std::string> vacated;
  std::string what;
  int64_t started_ms = 0;
  int64_t deadline_ms = 0;
  ControlReply reply;
};

Provider::Provider(Options options, AgentConfig& config, net::EventLoop& loop, const Clock& clock,
                   TaskManager& tasks, Host host)
    : options_(std::move(options)),
      config_(config),
      loop_(loop),
      clock_(clock),
      tasks_(tasks),
      host_(std::move(host)) {}

Provider::~Provider() { Stop(); }

Status Provider::Init(std::vector<GpuInfo> gpus, GpuSource* source, bool interposer_usable) {
  gpus_ = std::move(gpus);
  gpu_source_ = source;
  GP_ASSIGN_OR_RETURN(ProviderPolicy policy, PolicyInForce());
  lender_.SetPolicy(std::move(policy));
  lender_.SetInterposerUsable(interposer_usable);
  GP_LOG(kInfo) << "GPU sharing: " << GpuSharingName(lender_.sharing())
                << (interposer_usable ? "" : " (no usable libgpushare.so: whole GPUs only)");
  GP_RETURN_IF_ERROR(EnsureMps());
  GP_ASSIGN_OR_RETURN(std::set<uid_t> uids, ControlUids(config_.owner));
  GP_ASSIGN_OR_RETURN(
      control_, ControlServer::Listen(
                    loop_, ControlSocketPath(options_.data_dir), uids,
                    [this](const ControlPeer& peer, const nlohmann::json& request,
                           ControlReply reply) { OnControl(peer, request, std::move(reply)); }));
  return Status::Ok();
}

void Provider::Start() { Tick(); }

void Provider::Stop() {
  stopped_ = true;
  loop_.Cancel(timer_);
  shares_.Stop();
  control_.reset();
}

const NodeLending& Provider::LendingForHello() {
  sent_lending_ = lending_;
  return lending_;
}

Status Provider::Admit(const proto::StartTask& start) {
  LendingRequest want{start.owner,
                      start.spec.group,
                      start.spec.max_runtime_ms,
                      start.gpu_uuids,
                      start.gpu_milli > 0 ? start.gpu_milli : 1000,
                      start.gpu_memory_mib,
                      start.spec.network == NetworkMode::kHost};
  Status ok = LendingAdmits(lending_, want, gpus_);
  if (!ok.ok()) SendLending(true);
  return ok;
}

// A share's cap must fit beside the caps of the shares already on its GPU
// (agent/task_gpus.h ShareCapFits).
Status Provider::AdmitShareCap(const proto::StartTask& start, const exec::GpuShare& share) const {
  const std::string& uuid = start.gpu_uuids.front();
  std::vector<int64_t> others;
  for (const auto& [id, t] : tasks_.tasks()) {
    if (id == start.attempt_id || t.result || t.gpu_memory_cap <= 0) continue;
    if (std::find(t.gpu_uuids.begin(), t.gpu_uuids.end(), uuid) != t.gpu_uuids.end()) {
      others.push_back(t.gpu_memory_cap);
    }
  }
  int64_t lent_mib = 0;
  if (auto lent = lending_.gpus.find(uuid); lent != lending_.gpus.end()) {
    lent_mib = lent->second;
  } else if (auto g = std::find_if(gpus_.begin(), gpus_.end(),
                                   [&](const GpuInfo& x) { return x.uuid == uuid; });
             g != gpus_.end()) {
    lent_mib = g->memory_mib;
  }
  return ShareCapFits(uuid, share.memory_bytes, others, lent_mib);
}

Status Provider::EnsureMps() {
  // Kept once made: daemons left by an earlier policy are still released.
  if (mps_ || lender_.sharing() != GpuSharing::kMps) return Status::Ok();
  const char* path = std::getenv("PATH");
  GP_ASSIGN_OR_RETURN(std::string control,
                      FindMpsControl(config_.mps_control, path != nullptr ? path : ""));
  GP_LOG(kInfo) << "GPU sharing through MPS: " << control;
  mps_ = std::make_unique<MpsDaemons>(MpsDaemons::Options{
      control, config_.mps_dir.empty() ? options_.data_dir + "/mps" : config_.mps_dir});
  return Status::Ok();
}

std::vector<MpsClient> Provider::MpsClients() const {
  std::vector<MpsClient> out;
  for (const auto& [id, t] : tasks_.tasks()) {
    if (t.mps && tasks_.HoldsGpus(t) && t.gpu_uuids.size() == 1) {
      out.push_back({id, t.gpu_uuids[0], t.owner});
    }
  }
  return out;
}

Status Provider::PrepareShare(const proto::StartTask& start, TaskGpus& gpus) {
  if (!gpus.share) return Status::Ok();
  GP_RETURN_IF_ERROR(AdmitShareCap(start, *gpus.share));
  if (lender_.sharing() != GpuSharing::kMps) return Status::Ok();
  if (!mps_ || start.gpu_uuids.size() != 1) {
    return Status::FailedPrecondition("an MPS share needs one GPU and the MPS control program");
  }
  GP_ASSIGN_OR_RETURN(gpus.share->mps_pipe_dir,
                      mps_->Acquire(start.gpu_uuids[0], start.owner, MpsClients()));
  gpus.share->mps_shm_dir = mps_->ShmDir(start.gpu_uuids[0]);
  return Status::Ok();
}

// A failed MPS server (or daemon): said in the agent's log and to each job
// that used it; the daemon restarts once its shares have left.
void Provider::CheckMps(int64_t now) {
  if (!mps_) return;
  for (const MpsFailure& f : mps_->Check(MpsClients(), now)) {
    std::string ids;
    for (const std::string& a : f.attempts) ids += (ids.empty() ? "" : ", ") + a;
    GP_LOG(kWarn) << "MPS on GPU " << f.gpu_uuid << ": " << f.reason << " (tasks " << ids
                  << "); it restarts once no share is left on it";
    for (const std::string& a : f.attempts) {
      tasks_.AddEvent(a, "MPS failure on GPU " + f.gpu_uuid + ": " + f.reason +
                             "; this task's CUDA work there may have failed with it");
    }
  }
}

int64_t Provider::OutputLimit(int64_t server_bytes) const {
  return EffectiveOutputLimit(server_bytes, lender_.policy().max_job_output_bytes);
}

void Provider::Acked(int64_t seq) {
  if (leave_seq_ == 0 || seq < leave_seq_ || !leave_reply_) return;
  GP_LOG(kInfo) << "left the pool; exiting";
  Reply(leave_reply_, true, "drained and left the pool; the agent exits");
  leave_reply_ = nullptr;
  host_.exit();
}

void Provider::LocalCommand(const std::string& command) {
  OnControl({::geteuid(), ::getegid(), ::getpid()}, {{"command", command}},
            [command](const nlohmann::json& r) {
              if (r.value("ok", false)) {
                GP_LOG(kInfo) << command << ": " << r.value("message", std::string());
              } else {
                GP_LOG(kError) << command << ": " << r.value("error", std::string());
              }
            });
}

// The policy in force: the one `gpupool agent policy FILE` left in the
// data dir, else the config file's.
Result<ProviderPolicy> Provider::PolicyInForce() const {
  auto text = ReadFile(PolicyOverridePath());
  if (!text.ok()) return config_.policy;
  auto policy = ParsePolicyText(*text);
  if (!policy.ok()) return policy.status().WithContext(PolicyOverridePath());
  GP_LOG(kInfo) << "policy: from " << PolicyOverridePath()
                << " (set by `gpupool agent policy FILE`)";
  return policy;
}

std::string Provider::PolicySource() const {
  if (std::filesystem::exists(PolicyOverridePath())) return PolicyOverridePath();
  return options_.config_file.empty() ? "defaults (lends everything, always)"
                                      : options_.config_file;
}

// Re-evaluates what is lent (policy, windows, the owner's GPU use and
// commands), vacates what may no longer run and tells the server what
// changed. Runs every second, with or without a server. `grace_ms`: for
// what this call vacates; 0 = the policy's reclaim_grace.
void Provider::Tick(int64_t grace_ms) {
  loop_.Cancel(timer_);
  if (stopped_) return;
  int64_t now = clock_.NowMs();
  std::vector<Lender::RunningTask> running;
  for (const auto& [id, t] : tasks_.tasks()) {
    if (tasks_.HoldsGpus(t) && t.vacate_reason.empty()) running.push_back({id, t.gpu_uuids});
  }
  std::set<int64_t> pool_pids;
  bool capped = false;
  for (const auto& [id, t] : tasks_.tasks()) capped |= t.gpu_memory_cap > 0 && !t.result;
  if (lender_.WantsTelemetry() || capped) {
    // A failed read keeps the last sample rather than reclaiming on no evidence.
    if (auto snap = gpu_source_->Read(); snap.ok()) telemetry_ = snap->telemetry;
  }
  if (capped) {
    EnforceGpuMemoryCaps();
  } else {
    share_uses_.clear();
  }
  CheckMps(now);
  if (lender_.WantsTelemetry()) {
    std::set<std::string> container_gpus;
    for (const auto& [id, t] : tasks_.tasks()) {
      if (!tasks_.HoldsGpus(t) || t.shim_pid <= 0) continue;
      for (pid_t p : exec::Descendants(t.shim_pid)) pool_pids.insert(p);
      if (t.runs_as == "docker" || t.runs_as == "podman") {
        container_gpus.insert(t.gpu_uuids.begin(), t.gpu_uuids.end());
      }
    }
    // A container's processes are the engine's children, not the shim's: on
    // a GPU such a task holds, every process counts as the pool's (the
    // owner's own work there goes unnoticed until the task ends).
    for (const GpuTelemetry& g : telemetry_) {
      if (!container_gpus.count(g.uuid)) continue;
      for (const GpuProcess& p : g.processes) pool_pids.insert(p.pid);
    }
  }
  NodeLending before = lending_;
  lending_ = lender_.Update(now, gpus_, telemetry_, pool_pids, running);
  auto vacate = lender_.ToVacate(lending_, running);
  int64_t grace = grace_ms != 0 ? grace_ms : lender_.policy().reclaim_grace_ms;
  for (const auto& [id, why] : vacate) {
    GP_LOG(kInfo) << "vacating " << id << ": " << why;
    tasks_.Vacate(id, why, grace);
  }
  if (evaluated_) RecordReclaims(before, vacate, running, now);
  evaluated_ = true;
  SendLending(false);
  timer_ = loop_.RunAfter(kTickMs, [this] { Tick(); });
}

// The NVML backstop of shares' memory caps (agent/gpu_backstop.h): a task
// whose processes hold more than their cap, whatever path they took to it,
// is stopped, once, with the reason. Also what the heartbeat reports of the
// shares (share_uses).
void Provider::EnforceGpuMemoryCaps() {
  std::vector<CappedTask> capped, unjudged;
  for (const auto& [id, t] : tasks_.tasks()) {
    if (t.gpu_memory_cap <= 0 || t.result || t.shim_pid <= 0) continue;
    CappedTask c{id, t.gpu_memory_cap, t.gpu_uuids, {}};
    for (pid_t p : exec::Descendants(t.shim_pid)) c.pids.insert(p);
    if (!over_cap_.count(id)) unjudged.push_back(c);
    capped.push_back(std::move(c));
  }
  share_uses_ = ShareUses(capped, telemetry_);
  for (const CapVerdict& v : TasksOverGpuMemoryCap(unjudged, telemetry_)) {
    GP_LOG(kWarn) << "stopping " << v.attempt_id << ": " << v.reason;
    over_cap_.insert(v.attempt_id);
    tasks_.Stop(v.attempt_id, v.reason);
  }
  // Forget the tasks that are gone.
  for (auto it = over_cap_.begin(); it != over_cap_.end();) {
    it = tasks_.tasks().count(*it) ? std::next(it) : over_cap_.erase(it);
  }
}

// Sends the lending when it changed since the server last heard it.
void Provider::SendLending(bool force) {
  if (!force && sent_lending_ && *sent_lending_ == lending_) return;
  host_.push(proto::kLending, proto::Encode(lending_));
  sent_lending_ = lending_;
}

// One event per reason: the GPUs that stopped being lent since `before`
// (or, on a machine without GPUs, the windows closing) and the tasks
// vacated for it.
void Provider::RecordReclaims(const NodeLending& before,
                              const std::vector<std::pair<std::string, std::string>>& vacated,
                              const std::vector<Lender::RunningTask>& running, int64_t now) {
  std::map<std::string, NodeEvent> events;  // by reason
  for (const auto& [uuid, why] : lending_.not_lent) {
    if (before.gpus.count(uuid)) events[why].gpus.push_back(uuid);
  }
  if (gpus_.empty() && lending_.mode == "closed" && before.mode != "closed") {
    events["outside the availability windows"];
  }
  for (const auto& [id, why] : vacated) {
    auto task = std::find_if(running.begin(), running.end(),
                             [&](const Lender::RunningTask& t) { return t.attempt_id == id; });
    std::string reason = why;  // a task without GPUs: ToVacate's reason as is
    for (const std::string& uuid : task->gpu_uuids) {
      if (auto it = lending_.not_lent.find(uuid); it != lending_.not_lent.end()) {
        reason = it->second;
        break;
      }
    }
    events[reason].attempts.push_back(id);
  }
  for (auto& [why, e] : events) {
    e.ts_ms = now;
    e.kind = why == "not lent by the policy" ? "policy" : "reclaim";
    e.reason = why;
    GP_LOG(kInfo) << e.kind << ": " << why << " (" << e.gpus.size() << " GPUs, "
                  << e.attempts.size() << " tasks vacated)";
    host_.push(proto::kNodeEvent, proto::Encode(e));
  }
}

void Provider::PushEvent(const std::string& kind, const std::string& reason) {
  NodeEvent e;
  e.ts_ms = clock_.NowMs();
  e.kind = kind;
  e.reason = reason;
  host_.push(proto::kNodeEvent, proto::Encode(e));
}

void Provider::OnControl(const ControlPeer& peer, const nlohmann::json& request,
                         ControlReply reply) {
  auto field = [&](const char* key) -> const nlohmann::json* {
    auto it = request.find(key);
    return it == request.end() ? nullptr : &*it;
  };
  const nlohmann::json* command = field("command");
  if (command == nullptr || !command->is_string()) {
    return Reply(reply, false, "command: must be a string");
  }
  std::string cmd = command->get<std::string>();
  GP_LOG(kInfo) << "control: " << cmd << " (uid " << peer.uid << ", pid " << peer.pid << ")";
  if (stopped_) return Reply(reply, false, "the agent is shutting down");
  if (cmd == "status") return reply(StatusJson());
  if (cmd == "pause" || cmd == "resume") return OwnerHold(cmd, {}, false, "", std::move(reply));
  if (cmd == "reclaim") {
    const nlohmann::json* gpus = field("gpus");
    const nlohmann::json* now = field("now");
    if (gpus != nullptr && !gpus->is_array()) return Reply(reply, false, "gpus: must be a list");
    std::vector<std::string> names;
    for (const auto& g : gpus != nullptr ? *gpus : nlohmann::json::array()) {
      if (!g.is_string()) {
        return Reply(reply, false,
                     "no GPU " + g.dump() + " on this machine (" + DescribeGpus() + ")");
      }
      names.push_back(g.get<std::string>());
    }
    bool at_once = now != nullptr && now->is_boolean() && now->get<bool>();
    return OwnerHold(cmd, names, at_once, "", std::move(reply));
  }
  if (cmd == "leave") {
    if (leave_reply_) return Reply(reply, false, "already leaving: another `leave` waits for it");
    lender_.Leave();
    PushEvent("leave", "the owner takes the node out of the pool");
    Tick();
    leave_reply_ = std::move(reply);
    GP_LOG(kInfo) << "leaving: draining " << tasks_.running() << " tasks";
    return CheckLeave();
  }
  if (cmd == "policy") {
    const nlohmann::json* yaml = field("yaml");
    if (yaml == nullptr) {  // reset to the config file's
      std::error_code ec;
      std::filesystem::remove(PolicyOverridePath(), ec);
      return ApplyPolicy(config_.policy, "the config file's policy", std::move(reply));
    }
    if (!yaml->is_string()) return Reply(reply, false, "yaml: must be a string");
    auto policy = ParsePolicyText(yaml->get<std::string>());
    if (!policy.ok()) {
      return Reply(reply, false, policy.status().message() + "; the previous policy stays");
    }
    if (Status s = WriteFileAtomic(PolicyOverridePath(), yaml->get<std::string>()); !s.ok()) {
      return Reply(reply, false, s.message());
    }
    return ApplyPolicy(*policy, "a new policy (saved in " + PolicyOverridePath() + ")",
                       std::move(reply));
  }
  if (cmd == "reload") {
    if (options_.config_file.empty()) return Reply(reply, false, "the agent has no --config");
    auto config = LoadAgentConfig(options_.config_file, options_.data_dir);
    if (!config.ok()) {
      return Reply(reply, false, config.status().message() + "; the previous config stays");
    }
    auto uids = ControlUids(config->owner);
    if (!uids.ok())
      return Reply(reply, false, uids.status().message() + "; the previous config stays");
    config_.policy = config->policy;
    config_.owner = config->owner;
    control_->SetAllowedUids(*uids);
    auto policy = PolicyInForce();
    if (!policy.ok()) return Reply(reply, false, policy.status().message());
    return ApplyPolicy(
        *policy, "the policy of " + PolicySource() + " (other config changes apply at restart)",
        std::move(reply));
  }
  Reply(reply, false,
        "unknown command " + QuoteForError(cmd) +
            " (one of: status, pause, resume, reclaim, leave, policy, reload)");
}

void Provider::FromServer(const proto::OwnerCommand& c) {
  std::string by = c.by.empty() ? "someone" : c.by;
  GP_LOG(kInfo) << "owner command from the server: " << c.command << " (by " << by << ")";
  if (stopped_) return;
  OwnerHold(c.command, c.gpus, c.now, by, [this, c, by](const nlohmann::json& r) {
    if (r.value("ok", false)) {
      GP_LOG(kInfo) << c.command << " (from the server): " << r.value("message", std::string());
      return;
    }
    std::string why = r.value("error", std::string());
    GP_LOG(kWarn) << c.command << " from the server refused: " << why;
    PushEvent("refused", c.command + " by " + by + " through the server refused: " + why);
  });
}

void Provider::OwnerHold(const std::string& cmd, const std::vector<std::string>& gpus, bool at_once,
                         const std::string& by, ControlReply reply) {
  const bool remote = !by.empty();
  const std::string origin = remote ? " by " + by + " through the server" : " by the owner";
  if (cmd == "pause") {
    lender_.Pause();
    held_locally_ = held_locally_ || !remote;
    PushEvent("pause", "paused" + origin);
    Tick();
    return Reply(reply, true,
                 "paused: no new work starts here; " + std::to_string(tasks_.running()) +
                     " running tasks go on");
  }
  if (cmd == "resume") {
    // The server speaks for the owner only as far as the owner let it: what
    // was held at the machine is let go at the machine.
    if (remote && held_locally_) {
      return Reply(reply, false,
                   "the owner paused or reclaimed this machine on the machine itself; only "
                   "`gpupool agent resume` there lends it again");
    }
    lender_.Resume();
    held_locally_ = false;
    PushEvent("resume", "resumed" + origin);
    Tick();
    return Reply(reply, true,
                 "lending again: " + std::to_string(lending_.gpus.size()) + " GPUs lent (" +
                     lending_.mode + ")");
  }
  std::vector<std::string> uuids;
  for (const std::string& name : gpus) {
    auto uuid = FindGpu(name);
    if (!uuid) {
      return Reply(
          reply, false,
          "no GPU " + nlohmann::json(name).dump() + " on this machine (" + DescribeGpus() + ")");
    }
    uuids.push_back(*uuid);
  }
  held_locally_ = held_locally_ || !remote;
  if (remote) {
    PushEvent("reclaim",
              std::string(at_once ? "reclaim at once" : "reclaim") + " of " +
                  (uuids.empty() ? "every GPU" : std::to_string(uuids.size()) + " GPUs") +
                  " asked" + origin);
  }
  Reclaim(uuids, at_once, std::move(reply));
}

void Provider::ApplyPolicy(ProviderPolicy policy, const std::string& what, ControlReply reply) {
  ProviderPolicy before = lender_.policy();
  lender_.SetPolicy(std::move(policy));
  if (Status s = EnsureMps(); !s.ok()) {
    lender_.SetPolicy(std::move(before));
    return Reply(reply, false, s.message() + "; the previous policy stays");
  }
  PushEvent("policy", what);
  Tick();
  Reply(reply, true,
        "in force: " + what + "; " + std::to_string(lending_.gpus.size()) + " GPUs lent now (" +
            lending_.mode + ")");
}

void Provider::Reclaim(const std::vector<std::string>& uuids, bool at_once, ControlReply reply) {
  lender_.Reclaim(uuids);
  Tick(at_once ? TaskManager::kKillNow : 0);
  Waiter w;
  w.started_ms = clock_.NowMs();
  int64_t grace = at_once ? 0 : lender_.policy().reclaim_grace_ms;
  w.deadline_ms = w.started_ms + grace + 5000;
  w.what = uuids.empty() ? "every GPU" : "GPU";
  for (const GpuInfo& g : gpus_) {
    if (std::find(uuids.begin(), uuids.end(), g.uuid) == uuids.end()) continue;
    w.what += (w.what == "GPU" ? " " : ", ") + std::to_string(g.index);
  }
  // Every task leaving these GPUs, also those an earlier reclaim started.
  for (const auto& [id, t] : tasks_.tasks()) {
    if (t.vacate_reason.empty() || !tasks_.HoldsGpus(t)) continue;
    bool on_these = uuids.empty() ||
                    std::any_of(t.gpu_uuids.begin(), t.gpu_uuids.end(), [&](const std::string& u) {
                      return std::find(uuids.begin(), uuids.end(), u) != uuids.end();
                    });
    if (!on_these) continue;
    if (at_once) tasks_.Vacate(id, t.vacate_reason, TaskManager::kKillNow);
    w.attempts.insert(id);
  }
  w.vacated.assign(w.attempts.begin(), w.attempts.end());
  w.reply = std::move(reply);
  waiters_.push_back(std::move(w));
  TasksChanged();
}

// Answers reclaims whose tasks no longer hold their GPUs, and
// a leave once the node is drained.
void Provider::TasksChanged() {
  if (!stopped_) shares_.Sync(ShareTasksOf(tasks_.tasks()));
  // A GPU's MPS daemon stops when its last share has left.
  if (!stopped_ && mps_) mps_->Release(MpsClients());
  int64_t now = clock_.NowMs();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    for (auto a = it->attempts.begin(); a != it->attempts.end();) {
      auto t = tasks_.tasks().find(*a);
      a = t == tasks_.tasks().end() || !tasks_.HoldsGpus(t->second) ? it->attempts.erase(a) : ++a;
    }
    bool done = it->attempts.empty();
    if (!done && now < it->deadline_ms) {
      ++it;
      continue;
    }
    nlohmann::json extra = {{"vacated", it->vacated}, {"freed_ms", now - it->started_ms}};
    if (done) {
      Reply(it->reply, true,
            "reclaimed " + it->what +
                (it->vacated.empty() ? "; nothing of the pool ran on them"
                                     : "; vacated " + std::to_string(it->vacated.size()) +
                                           " tasks in " + FormatDurationMs(now - it->started_ms)),
            extra);
    } else {
      Reply(it->reply, false, std::to_string(it->attempts.size()) + " tasks have not ended yet",
            extra);
    }
    it = waiters_.erase(it);
  }
  CheckLeave();
}

void Provider::CheckLeave() {
  if (!leave_reply_ || leave_seq_ > 0 || tasks_.running() > 0) return;
  leave_seq_ = host_.push(proto::kLeave,
                          proto::Encode(proto::Leave{"the owner takes the node out of the pool"}));
  GP_LOG(kInfo) << "drained; deregistering";
}

std::optional<std::string> Provider::FindGpu(const std::string& name) const {
  for (const GpuInfo& g : gpus_) {
    if (g.uuid == name || std::to_string(g.index) == name) return g.uuid;
  }
  return std::nullopt;
}

std::string Provider::DescribeGpus() const {
  if (gpus_.empty()) return "it has none";
  std::string out;
  for (const GpuInfo& g : gpus_) {
    out += (out.empty() ? "GPUs: " : ", ") + std::to_string(g.index) + " " + g.uuid;
  }
  return out;
}

nlohmann::json Provider::StatusJson() const {
  nlohmann::json gpus = nlohmann::json::array(), tasks = nlohmann::json::array();
  for (const GpuInfo& g : gpus_) {
    nlohmann::json j = {{"index", g.index},
                        {"uuid", g.uuid},
                        {"name", DescribeGpu(g)},
                        {"memory_mib", g.memory_mib}};
    if (auto it = lending_.gpus.find(g.uuid); it != lending_.gpus.end()) {
      j["lent_mib"] = it->second;
    } else if (auto why = lending_.not_lent.find(g.uuid); why != lending_.not_lent.end()) {
      j["not_lent"] = why->second;
    }
    gpus.push_back(j);
  }
  for (const auto& [id, t] : tasks_.tasks()) {
    if (tasks_.Ended(t)) continue;
    nlohmann::json j = {{"attempt_id", id}, {"job_id", t.job_id}, {"gpus", t.gpu_uuids}};
    if (!t.vacate_reason.empty()) j["vacating"] = t.vacate_reason;
    if (t.job_exited) j["finishing"] = "the job has exited; its last checkpoint is being shipped";
    tasks.push_back(j);
  }
  nlohmann::json status = host_.describe();
  status.update({{"ok", true},
                 {"mode", lending_.mode},
                 {"next_change_ms", lending_.next_change_ms},
                 {"gpus", gpus},
                 {"tasks", tasks},
                 {"lending", NodeLendingToJson(lending_)},
                 {"mps_daemons", mps_ ? mps_->Running() : std::vector<std::string>{}},
                 {"policy", PolicyToJson(lender_.policy())},
                 {"policy_source", PolicySource()}});
  return status;
}

}  // namespace gpupool::agent
