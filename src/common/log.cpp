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

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool IsTokenPrefix(std::string_view s) {
  return s.size() >= 4 && s[0] == 'g' && s[1] == 'p' && s[3] == '_' &&
         (s[2] == 'a' || s[2] == 't' || s[2] == 'j' || s[2] == 'n');
}

}  // namespace

std::string RedactSecrets(std::string_view text) {
  static constexpr std::string_view kBearer = "Bearer ";
  static constexpr std::string_view kPassword = "\"password\"";
  static constexpr std::string_view kKeyBegin = "-----BEGIN ";
  static constexpr std::string_view kKeyEnd = "PRIVATE KEY-----";
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    std::string_view rest = text.substr(i);
    if (IsTokenPrefix(rest) && rest.size() > 4 && IsHex(rest[4])) {
      size_t end = 4;
      while (end < rest.size() && (IsHex(rest[end]) || rest[end] == '.')) ++end;
      out.append(rest.substr(0, 4)).append("[redacted]");
      i += end;
    } else if (rest.starts_with(kBearer)) {
      size_t end = kBearer.size();
      while (end < rest.size() && rest[end] != ' ' && rest[end] != '"' && rest[end] != '\n') ++end;
      out.append(kBearer).append("[redacted]");
      i += end;
    } else if (rest.starts_with(kPassword)) {
      // "password": "value" -> "password": "[redacted]"
      size_t open = rest.find('"', kPassword.size());
      size_t close = open == std::string_view::npos ? open : rest.find('"', open + 1);
      while (close != std::string_view::npos && rest[close - 1] == '\\')
        close = rest.find('"', close + 1);
      if (close == std::string_view::npos) {
        out.append(kPassword).append(": \"[redacted]\"");
        break;
      }
      out.append(rest.substr(0, open + 1)).append("[redacted]\"");
      i += close + 1;
    } else if (rest.starts_with(kKeyBegin) &&
               rest.substr(0, 64).find(kKeyEnd) != std::string_view::npos) {
      size_t end = rest.find(kKeyEnd, rest.find(kKeyEnd) + kKeyEnd.size());
      out.append("[redacted private key]");
      i += end == std::string_view::npos ? rest.size() : end + kKeyEnd.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

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
  line += RedactSecrets(os_.str());
  line += '\n';
  // One write so lines from several threads never interleave.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace gpupool
