// Reconnect: when a client of a pool's servers (an agent, the load tool)
// connects again after its connection failed or closed, and to which
// server (net/server_list.h). A pure policy; the caller owns the timer.
//
//  - With several servers, the next one soon (kSoonMs: 50 to 150 ms) until
//    each has been tried once: the back-off grows only per round of them.
//  - After a round, an exponential back-off with jitter (from `first_ms`,
//    doubling, at most `max_ms`), so that many clients do not return at
//    once; at most `standby_max_ms` after a round in which a standby
//    answered (HTTP 307 or 503: the pool is between leaders, or the leader
//    is elsewhere), so that clients are back within about that of a new
//    leader taking over.
//  - A welcome (Connected) starts over.
//
// Deterministic for a given Rng; one thread at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string_view>

namespace gpupool::net {

class Reconnect {
 public:
  static constexpr int64_t kSoonMinMs = 50, kSoonMaxMs = 150;

  Reconnect(size_t servers, int64_t first_ms, int64_t max_ms, int64_t standby_max_ms)
      : servers_(std::max<size_t>(servers, 1)),
        first_ms_(first_ms),
        max_ms_(max_ms),
        standby_max_ms_(std::min(standby_max_ms, max_ms)) {}

  // The server to connect to now (an index into the caller's list).
  size_t server() const { return server_ % servers_; }

  // The connection failed or closed with `reason`: moves on to the next
  // server and says how long to wait before connecting to it.
  template <typename Rng>
  int64_t Failed(std::string_view reason, Rng& rng) {
    met_standby_ = met_standby_ || reason.find("HTTP 307") != std::string_view::npos ||
                   reason.find("HTTP 503") != std::string_view::npos;
    if (servers_ > 1 && ++server_ % servers_ != 0) {
      return std::uniform_int_distribution<int64_t>(kSoonMinMs, kSoonMaxMs)(rng);
    }
    const int64_t ceiling = met_standby_ ? standby_max_ms_ : max_ms_;
    met_standby_ = false;
    backoff_ms_ = backoff_ms_ == 0 ? first_ms_ : std::min(backoff_ms_ * 2, ceiling);
    return backoff_ms_ + std::uniform_int_distribution<int64_t>(0, backoff_ms_ / 2)(rng);
  }

  // Welcomed: the next failure starts the back-off over.
  void Connected() { backoff_ms_ = 0; }

 private:
  size_t servers_;
  int64_t first_ms_, max_ms_, standby_max_ms_;
  size_t server_ = 0;
  bool met_standby_ = false;
  int64_t backoff_ms_ = 0;
};

}  // namespace gpupool::net
