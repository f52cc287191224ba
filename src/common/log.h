// Minimal leveled logging to stderr, one line per record, written atomically.
//
//   GP_LOG(kInfo) << "node " << id << " registered";
//
// The process sets the level and component name once at start-up
// (SetLogLevel / SetLogComponent); that is the only global state, and inner
// layers (model, sched) never log.
#pragma once

#include <sstream>
#include <string_view>

namespace gpupool {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void SetLogComponent(std::string_view name);
// Parses "debug", "info", "warn", "error"; returns false for anything else.
bool ParseLogLevel(std::string_view text, LogLevel* out);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace gpupool

#define GP_LOG(level)                                                  \
  if (!::gpupool::LogEnabled(::gpupool::LogLevel::level)) {            \
  } else                                                               \
    ::gpupool::LogLine(::gpupool::LogLevel::level)
