#include "common/clock.h"

#include <chrono>
#include <cstdio>
#include <ctime>

#include <time.h>

namespace gpupool {

int64_t RealClock::NowMs() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t RealClock::MonoMs() const {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

std::string FormatTimestampMs(int64_t epoch_ms) {
  // Floor division, so times before 1970 keep a non-negative millisecond part.
  int64_t secs_floor = epoch_ms / 1000 - (epoch_ms % 1000 < 0 ? 1 : 0);
  int millis = static_cast<int>(epoch_ms - secs_floor * 1000);
  std::time_t secs = static_cast<std::time_t>(secs_floor);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

}  // namespace gpupool
