#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

#include "common/clock.h"

namespace gpupool {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_component_mu;
std::string g_component = "gpupool";  // guarded by g_component_mu

}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }
void SetLogComponent(std::string_view name) {
  std::lock_guard lock(g_component_mu);
  g_component = name;
}

bool ParseLogLevel(std::string_view text, LogLevel* out) {
  if (text == "debug")
    *out = LogLevel::kDebug;
  else if (text == "info")
    *out = LogLevel::kInfo;
  else if (text == "warn")
    *out = LogLevel::kWarn;
  else if (text == "error")
    *out = LogLevel::kError;
  else
    return false;
  return true;
}

LogMessage::~LogMessage() {
  static const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  std::string line = FormatTimestampMs(RealClock().NowMs());
  line += ' ';
  line += kNames[static_cast<int>(level_)];
  {
    std::lock_guard lock(g_component_mu);
    line += ' ';
    line += g_component;
  }
  line += ": ";
  line += os_.str();
  line += '\n';
  // One write so lines from several threads never interleave.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace gpupool
