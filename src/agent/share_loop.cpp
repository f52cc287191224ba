#include "agent/share_loop.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/log.h"
#include "exec/gpu_share.h"

namespace gpupool::agent {

std::vector<ShareTask> ShareTasksOf(const std::map<std::string, TaskState>& tasks) {
  std::vector<ShareTask> out;
  for (const auto& [id, t] : tasks) {
    if (t.gpu_share_milli <= 0 || t.gpu_share_milli >= 1000 || t.gpu_uuids.size() != 1) continue;
    if (!t.started || t.job_exited || t.result || t.shim_gone) continue;
    const exec::GpuShareFiles files = exec::GpuShareFilesIn(t.paths.dir);
    out.push_back({id, t.gpu_uuids[0], static_cast<uint32_t>(t.gpu_share_milli), t.gpu_share_strict,
                   files.want, files.grant});
  }
  return out;
}

ShareLoop::ShareLoop(net::EventLoop& loop, std::function<int64_t()> now_ns)
    : loop_(loop), now_ns_(std::move(now_ns)) {}

ShareLoop::~ShareLoop() { loop_.Cancel(timer_); }

void ShareLoop::Sync(const std::vector<ShareTask>& tasks) {
  std::map<std::string, const ShareTask*> wanted;
  for (const ShareTask& t : tasks) wanted[t.id] = &t;
  // Forget the tasks that ended (or changed GPU, which they never do).
  for (auto g = gpus_.begin(); g != gpus_.end();) {
    auto& members = g->second.members;
    std::erase_if(members, [&](const Member& m) {
      auto w = wanted.find(m.task.id);
      return w == wanted.end() || !(*w->second == m.task);
    });
    g = members.empty() ? gpus_.erase(g) : std::next(g);
  }
  std::erase_if(failed_, [&](const std::string& id) { return !wanted.count(id); });
  for (const ShareTask& t : tasks) {
    auto g = gpus_.find(t.gpu);
    bool held = g != gpus_.end() && std::any_of(g->second.members.begin(), g->second.members.end(),
                                                [&](const Member& m) { return m.task.id == t.id; });
    if (!held && !failed_.count(t.id)) Open(t);
  }
  if (gpus_.empty()) {
    loop_.Cancel(timer_);
    timer_ = 0;
  } else if (timer_ == 0) {
    Schedule(TickOnce());
  }
}

void ShareLoop::Open(const ShareTask& task) {
  // Re-creating keeps the files' inodes and sizes (a job that has them
  // mapped keeps its mapping): only their contents are zeroed.
  auto files = share::TaskShareFiles::Create(task.want_path, task.grant_path);
  if (!files.ok()) {
    GP_LOG(kWarn) << task.id
                  << ": its compute share is not enforced: " << files.status().ToString();
    failed_.insert(task.id);
    return;
  }
  auto g = gpus_.find(task.gpu);
  if (g == gpus_.end()) {
    auto arbiter = share::Arbiter::Create({});
    if (!arbiter.ok()) {  // the default options are valid
      GP_LOG(kError) << "share arbiter: " << arbiter.status().ToString();
      failed_.insert(task.id);
      return;
    }
    g = gpus_.emplace(task.gpu, Gpu{std::move(arbiter).value(), {}}).first;
  }
  auto& members = g->second.members;
  auto at = std::lower_bound(members.begin(), members.end(), task.id,
                             [](const Member& m, const std::string& id) { return m.task.id < id; });
  members.insert(at, Member{task, std::move(files).value()});
  GP_LOG(kInfo) << task.id << ": compute share " << task.share_milli << "/1000 of " << task.gpu
                << (task.strict ? " (strict)" : " (work-conserving)");
}

void ShareLoop::Stop() {
  loop_.Cancel(timer_);
  timer_ = 0;
  gpus_.clear();
  failed_.clear();
}

int64_t ShareLoop::TickOnce() {
  const int64_t now = now_ns_();
  int64_t next_change = std::numeric_limits<int64_t>::max();
  std::vector<share::TaskDemand> demands;
  for (auto& [uuid, gpu] : gpus_) {
    demands.clear();
    for (const Member& m : gpu.members) {
      demands.push_back({m.task.id, m.task.share_milli, m.task.strict, m.files.ReadLastActiveNs()});
    }
    share::Decision d = gpu.arbiter.Tick(demands, now);
    for (size_t i = 0; i < gpu.members.size(); ++i)
      gpu.members[i].files.WriteGrant(d.grants[i], now);
    next_change = std::min(next_change, d.next_change_ns);
  }
  return next_change;
}

void ShareLoop::Schedule(int64_t next_change_ns) {
  int64_t delay_ms = kTickMs;
  const int64_t now = now_ns_();
  if (next_change_ns < now + kTickMs * 1'000'000) {
    // At least 1 ms: never a busy loop, whatever an arbiter answers.
    delay_ms = std::max<int64_t>(1, (next_change_ns - now + 999'999) / 1'000'000);
  }
  timer_ = loop_.RunAfter(delay_ms, [this] {
    timer_ = 0;
    if (gpus_.empty()) return;
    Schedule(TickOnce());
  });
}

std::vector<std::string> ShareLoop::Gpus() const {
  std::vector<std::string> out;
  for (const auto& [uuid, gpu] : gpus_) out.push_back(uuid);
  return out;
}

std::vector<std::string> ShareLoop::Tasks() const {
  std::vector<std::string> out;
  for (const auto& [uuid, gpu] : gpus_) {
    for (const Member& m : gpu.members) out.push_back(m.task.id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gpupool::agent
