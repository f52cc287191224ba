// Repeating: a task a program runs again and again on its event loop: first
// after first_ms, then interval_ms after each run has ended. A run that ends
// later (a garbage collection on worker threads that reports back to the
// loop) calls the Done it was given then; until it does, the task does not
// run again, so runs never overlap and a slow run delays the next one
// instead of piling up behind it.
//
// The object must outlive the loop's Run() (a program keeps it beside the
// loop in the same frame); Done must be called on the loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "net/event_loop.h"

namespace gpupool::net {

class Repeating {
 public:
  using Done = std::function<void()>;

  Repeating(EventLoop& loop, int64_t first_ms, int64_t interval_ms, std::function<void(Done)> run)
      : loop_(loop), interval_ms_(interval_ms), run_(std::move(run)) {
    loop_.RunAfter(first_ms, [this] { RunOnce(); });
  }
  Repeating(const Repeating&) = delete;
  Repeating& operator=(const Repeating&) = delete;

 private:
  void RunOnce() {
    run_([this] { loop_.RunAfter(interval_ms_, [this] { RunOnce(); }); });
  }

  EventLoop& loop_;
  int64_t interval_ms_;
  std::function<void(Done)> run_;
};

}  // namespace gpupool::net
