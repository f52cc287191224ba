// Clock: the only way gpupool code reads time.
//
// Inner layers (model, sched) never read a clock; the programs pass times in.
// Outer layers take a `const Clock&` so tests and the simulator can use a
// FakeClock that they advance by hand. Both implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace gpupool {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowMs() const override;
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  void AdvanceMs(int64_t ms) { now_ += ms; }
  void SetMs(int64_t ms) { now_ = ms; }

 private:
  std::atomic<int64_t> now_;
};

// 1700000000123 -> "2023-11-14T22:13:20.123Z".
std::string FormatTimestampMs(int64_t epoch_ms);

}  // namespace gpupool
