#include "server/login_throttle.h"

namespace gpupool::server {

LoginThrottle::LoginThrottle(const Clock& clock, LoginLimits limits)
    : limits_(limits), by_address_(clock, limits.per_address), by_user_(clock, limits.per_user) {}

std::optional<LoginThrottle::Refusal> LoginThrottle::Begin(const std::string& address,
                                                           const std::string& user) {
  auto seconds = [](int64_t ms) { return std::to_string((ms + 999) / 1000) + " s"; };
  if (int64_t wait = by_address_.Take(address); wait > 0) {
    return Refusal{
        Status::ResourceExhausted("too many failed logins from " + address + " (at most " +
                                  DescribeRateLimit(limits_.per_address) +
                                  ": --login-failures-per-address); try again in " + seconds(wait)),
        wait};
  }
  if (int64_t wait = by_user_.Take(user); wait > 0) {
    by_address_.Give(address);  // this attempt is not made
    return Refusal{Status::ResourceExhausted("too many failed logins for user " + user +
                                             " (at most " + DescribeRateLimit(limits_.per_user) +
                                             ": --login-failures-per-user); try again in " +
                                             seconds(wait) + ", or use a token"),
                   wait};
  }
  return std::nullopt;
}

void LoginThrottle::Succeeded(const std::string& address, const std::string& user) {
  by_address_.Give(address);
  by_user_.Give(user);
}

}  // namespace gpupool::server
