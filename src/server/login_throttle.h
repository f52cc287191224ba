// LoginThrottle: limits on failed password logins, per client address and
// per user name (docs/security.md#people-users-groups-roles-tokens).
//
// Each is a token bucket of failures (server/rate_limiter.h): a burst, then
// a steady rate. Begin() takes one failure from both buckets before the
// password is checked, so guesses sent at once all count; Succeeded() gives
// them back, so a right password costs nothing. An attempt that finds
// either bucket empty is refused at once (ResourceExhausted naming the
// limit and its flag, with how long to wait), without checking the
// password. The per-user bucket stops guessing one account from many
// addresses; it also lets anyone lock a user's password logins out for a
// while (tokens keep working).
//
// Single-threaded (the server's event loop); time from the injected Clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "server/rate_limiter.h"

namespace gpupool::server {

struct LoginLimits {
  RateLimit per_address{1.0, 10};      // --login-failures-per-address 1/s,10
  RateLimit per_user{1.0 / 60.0, 10};  // --login-failures-per-user 1/m,10
};

class LoginThrottle {
 public:
  LoginThrottle(const Clock& clock, LoginLimits limits);

  struct Refusal {
    Status status;  // ResourceExhausted
    int64_t retry_after_ms;
  };
  // Ok, or why not now.
  std::optional<Refusal> Begin(const std::string& address, const std::string& user);
  void Succeeded(const std::string& address, const std::string& user);

 private:
  LoginLimits limits_;
  RateLimiter by_address_;
  RateLimiter by_user_;
};

}  // namespace gpupool::server
