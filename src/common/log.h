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

// `text` with secrets replaced by "[redacted]": gpupool tokens (gpt_, gpa_,
// gpj_, gpn_ followed by hex), whatever follows "Bearer ", JSON "password"
// values, and PEM private keys. Every log line goes through it.
std::string RedactSecrets(std::string_view text);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  template <typename T>
  LogMessage& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Turns the streamed LogMessage into void so the macro works as an expression;
// `&` binds looser than `<<`, so the whole line is streamed first.
struct LogVoidify {
  void operator&(const LogMessage&) {}
};

}  // namespace gpupool

#define GP_LOG(level)                                \
  !::gpupool::LogEnabled(::gpupool::LogLevel::level) \
      ? (void)0                                      \
      : ::gpupool::LogVoidify() & ::gpupool::LogMessage(::gpupool::LogLevel::level)
