// ShareLoop: the agent's side of GPU shares' compute shares. It keeps one
// share::Arbiter per GPU that holds at least one running share task, opens
// each such task's want and grant files (share/share_files.h: the files the
// executor's Prepare made in TASK_DIR/gpushare, exec/gpu_share.h) and, every
// 5 ms, reads each task's last activity from its want file, ticks the GPU's
// arbiter and writes each task's grant. libgpushare.so in the task's
// processes obeys the grant (docs/architecture.md, "Compute shares").
//
// Sync(tasks) is called with the share tasks that run now (ShareTasksOf,
// from the TaskManager's tasks, whenever they may have changed: a task
// started, was recovered after an agent restart, or ended): new tasks'
// files are opened, ended tasks forgotten, and a GPU's arbiter dropped with
// its last task. The timer runs only while some GPU has a share task.
//
// A task whose files cannot be opened is logged once and left ungated (its
// grant keeps beat 0, which the library reads as FREE); it is tried again
// only if it leaves and comes back.
//
// Single-threaded: on the agent's event loop. The clock (CLOCK_MONOTONIC
// nanoseconds, the files' clock) is injected for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/tasks.h"
#include "net/event_loop.h"
#include "share/arbiter.h"
#include "share/share_files.h"

namespace gpupool::agent {

// A running task that holds a compute share of one GPU.
struct ShareTask {
  std::string id;   // the attempt id
  std::string gpu;  // the GPU's uuid
  uint32_t share_milli = 0;
  bool strict = false;
  std::string want_path;   // TASK_DIR/gpushare/want
  std::string grant_path;  // TASK_DIR/gpushare/grant
  friend bool operator==(const ShareTask&, const ShareTask&) = default;
};

// The share tasks among `tasks` (pure): a share (gpu_share_milli 1..999) of
// exactly one GPU whose job started and has not exited, whose shim runs.
std::vector<ShareTask> ShareTasksOf(const std::map<std::string, TaskState>& tasks);

class ShareLoop {
 public:
  static constexpr int64_t kTickMs = 5;

  ShareLoop(net::EventLoop& loop, std::function<int64_t()> now_ns = share::MonotonicNs);
  ~ShareLoop();
  ShareLoop(const ShareLoop&) = delete;
  ShareLoop& operator=(const ShareLoop&) = delete;

  // Takes `tasks` as the share tasks that run now (see above).
  void Sync(const std::vector<ShareTask>& tasks);
  // Forgets every task and stops the timer.
  void Stop();

  // One round: every GPU's wants read, arbiters ticked, grants written.
  // The timer calls it; tests may too. Returns the earliest time at which
  // an arbiter's grants change by themselves (Decision::next_change_ns).
  int64_t TickOnce();

  // For tests and status: the GPUs with an arbiter, the tasks with open
  // files, and whether the timer runs.
  std::vector<std::string> Gpus() const;
  std::vector<std::string> Tasks() const;
  bool ticking() const { return timer_ != 0; }

 private:
  struct Member {
    ShareTask task;
    share::TaskShareFiles files;
  };
  struct Gpu {
    share::Arbiter arbiter;
    std::vector<Member> members;  // in id order
  };

  void Open(const ShareTask& task);
  // The next tick: every kTickMs, sooner when a slice ends before that
  // (a new holder waits for the tick that grants its turn).
  void Schedule(int64_t next_change_ns);

  net::EventLoop& loop_;
  std::function<int64_t()> now_ns_;
  std::map<std::string, Gpu> gpus_;  // by uuid
  std::set<std::string> failed_;     // ids whose files could not be opened
  net::EventLoop::TimerId timer_ = 0;
};

}  // namespace gpupool::agent
