// Clock: the only way gpupool code reads time.
//
// Two times, for two purposes:
// - NowMs(): the wall clock, milliseconds since the Unix epoch. For what
//   people read (timestamps shown and stored) and for absolute times
//   (a token's expiry, an owner's weekly availability window).
// - MonoMs(): a monotonic clock (CLOCK_BOOTTIME: it counts a suspend and is
//   never stepped by NTP or an operator), in milliseconds from an arbitrary
//   origin. For every duration that decides something: leases, how long a
//   node has been silent, rate limits, idle timeouts. A MonoMs value means
//   nothing in another process on another machine, nor after a reboot.
//
// Inner layers (model, sched) never read a clock; the programs pass times in.
// Outer layers take a `const Clock&` so tests and the simulator can use a
// FakeClock that they advance by hand. All implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace gpupool {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch (the wall clock; may jump).
  virtual int64_t NowMs() const = 0;
  // Milliseconds on a clock that never jumps (see above).
  virtual int64_t MonoMs() const = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t MonoMs() const override;
};

// Time that tests move by hand. AdvanceMs(ms > 0) and SetMs to a later time
// are time passing: both clocks move by the same amount. Moving the wall
// clock back (AdvanceMs(ms < 0), SetMs to an earlier time) and JumpWallMs
// step only the wall clock, as an operator or NTP stepping the system
// clock does: the monotonic clock never goes back.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms), mono_(1'000'000) {}
  int64_t NowMs() const override { return now_.load(); }
  int64_t MonoMs() const override { return mono_.load(); }
  void AdvanceMs(int64_t ms) {
    now_ += ms;
    if (ms > 0) mono_ += ms;
  }
  void SetMs(int64_t ms) { AdvanceMs(ms - now_.load()); }
  void JumpWallMs(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_;
  std::atomic<int64_t> mono_;
};

// A wall clock that cannot jump: the wall time when it was made plus the
// monotonic time elapsed since. A server runs on one, so that the times it
// stores and subtracts (an attempt's placement and end, what fair share
// charges for them, a checkpoint's age) measure real durations even when
// the system clock is stepped while it runs; its times then differ from
// the system clock by the step until the process restarts (and it says so:
// SystemClockSkewMs). MonoMs is the inner clock's.
class SteadyWallClock final : public Clock {
 public:
  explicit SteadyWallClock(const Clock& inner)
      : inner_(inner), wall0_(inner.NowMs()), mono0_(inner.MonoMs()) {}
  int64_t NowMs() const override { return wall0_ + (inner_.MonoMs() - mono0_); }
  int64_t MonoMs() const override { return inner_.MonoMs(); }
  // How far the system clock has been stepped since this clock was made
  // (positive: forward), for a warning.
  int64_t SystemClockSkewMs() const { return inner_.NowMs() - NowMs(); }

 private:
  const Clock& inner_;
  const int64_t wall0_;
  const int64_t mono0_;
};

// 1700000000123 -> "2023-11-14T22:13:20.123Z".
std::string FormatTimestampMs(int64_t epoch_ms);

}  // namespace gpupool
