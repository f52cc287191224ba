#include "agent/output_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "agent/task_files.h"

namespace gpupool::agent {
namespace {

// EncodeRecord's format, appended in place.
void AppendRecord(std::string& out, char kind, int64_t ts_ms, std::string_view text) {
  char ts[24];
  auto [end, ec] = std::to_chars(ts, ts + sizeof ts, ts_ms);
  out += kind;
  out += ' ';
  out.append(ts, static_cast<size_t>(end - ts));
  out += ' ';
  out.append(text.data(), text.size());
  out += '\n';
}

bool AllAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace

void OutputLog::Add(char stream, const char* data, size_t n, int64_t now_ms) {
  if (budget_.reached()) {  // past the limit: drained, not looked at
    // A new second; or the wall clock went back: start one now.
    if (now_ms >= drain_window_ms_ + 1000 || now_ms < drain_window_ms_) {
      drain_window_ms_ = now_ms;
      drained_ = 0;
    }
    drained_ += static_cast<int64_t>(n);
    return;
  }
  std::string& buf = Buffer(stream);
  buf.append(data, n);
  size_t start = 0;
  while (!budget_.reached()) {
    size_t nl = buf.find('\n', start);
    size_t len = (nl == std::string::npos ? buf.size() : nl) - start;
    std::string_view rest(buf.data() + start, len);
    if (len > kMaxLineBytes) {  // a line without end: cut it
      size_t cut = Utf8CutPoint(rest, kMaxLineBytes);
      Line(stream, rest.substr(0, cut), now_ms);
      start += cut;
      continue;
    }
    if (nl == std::string::npos) break;
    if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
    Line(stream, rest, now_ms);
    start = nl + 1;
  }
  if (budget_.reached()) {
    out_.clear();
    err_.clear();
  } else {
    buf.erase(0, start);
  }
  Flush();
}

void OutputLog::Finish(char stream, int64_t now_ms) {
  std::string& buf = Buffer(stream);
  if (!buf.empty() && !budget_.reached()) Line(stream, buf, now_ms);
  buf.clear();
  Flush();
}

void OutputLog::Event(std::string_view text, int64_t now_ms) {
  std::string line = ValidUtf8(text.substr(0, Utf8CutPoint(text, kMaxLineBytes)));
  std::replace(line.begin(), line.end(), '\n', ' ');  // one record, one line
  std::replace(line.begin(), line.end(), '\r', ' ');
  if (budget_.Event(line) != OutputBudget::Verdict::kKeep) return;
  AppendRecord(pending_, 'v', now_ms, line);
  Flush();
}

bool OutputLog::Record(char kind, int64_t now_ms, std::string_view payload) {
  AppendRecord(pending_, kind, now_ms, payload);
  return Flush();
}

void OutputLog::Line(char stream, std::string_view text, int64_t now_ms) {
  std::string valid;
  if (!AllAscii(text)) {
    valid = ValidUtf8(text);
    text = valid;
  }
  switch (budget_.Output(text)) {
    case OutputBudget::Verdict::kKeep:
      AppendRecord(pending_, stream, now_ms, text);
      if (stream == 'e') last_stderr_line_.assign(text.substr(0, Utf8CutPoint(text, 512)));
      break;
    case OutputBudget::Verdict::kDropMarked: {
      std::string marker = OutputLimitMarker(budget_.limit());
      budget_.MarkerKept(marker);
      AppendRecord(pending_, 'v', now_ms, marker);
      break;
    }
    case OutputBudget::Verdict::kDrop:
      break;
  }
}

int64_t OutputLog::DrainPauseMs(int64_t now_ms) const {
  if (!budget_.reached() || drained_ < kDrainBytesPerSecond) return 0;
  // At most a second, whatever the wall clock did.
  return std::clamp<int64_t>(drain_window_ms_ + 1000 - now_ms, 0, 1000);
}

bool OutputLog::Flush() {
  std::string_view data = pending_;
  bool ok = true;
  while (!data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;  // a full disk: the records are lost, the job goes on
      break;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  pending_.clear();
  return ok;
}

}  // namespace gpupool::agent
