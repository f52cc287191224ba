#include "model/job_output.h"

#include <algorithm>

#include "common/units.h"

namespace gpupool {
namespace {

constexpr std::string_view kMarkerPrefix = "output limit of ";
constexpr std::string_view kMarkerSuffix = " reached: further output dropped";

bool Between(unsigned char c, unsigned char lo, unsigned char hi) { return c >= lo && c <= hi; }

// The length of the well-formed UTF-8 sequence at the start of `s` (the
// Unicode standard's table 3-7), or 0 when there is none.
size_t SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (Between(c, 0xC2, 0xDF)) {
    n = 2;
  } else if (c == 0xE0) {
    n = 3, lo = 0xA0;
  } else if (Between(c, 0xE1, 0xEC) || Between(c, 0xEE, 0xEF)) {
    n = 3;
  } else if (c == 0xED) {
    n = 3, hi = 0x9F;
  } else if (c == 0xF0) {
    n = 4, lo = 0x90;
  } else if (Between(c, 0xF1, 0xF3)) {
    n = 4;
  } else if (c == 0xF4) {
    n = 4, hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || !Between(b(1), lo, hi)) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (!Between(b(i), 0x80, 0xBF)) return 0;
  }
  return n;
}

}  // namespace

std::string OutputLimitMarker(int64_t limit_bytes) {
  return std::string(kMarkerPrefix) + FormatBytes(limit_bytes) + std::string(kMarkerSuffix);
}

bool IsOutputLimitMarker(std::string_view text) {
  return text.size() > kMarkerPrefix.size() + kMarkerSuffix.size() &&
         text.starts_with(kMarkerPrefix) && text.ends_with(kMarkerSuffix);
}

int64_t EffectiveOutputLimit(int64_t server_bytes, int64_t policy_bytes) {
  int64_t limit = server_bytes > 0 ? server_bytes : kDefaultMaxJobOutputBytes;
  return policy_bytes > 0 ? std::min(limit, policy_bytes) : limit;
}

OutputBudget::Verdict OutputBudget::Output(std::string_view text) {
  if (reached_) return Verdict::kDrop;
  int64_t cost = LogLineCost(text);
  if (used_ + cost > limit_) {
    reached_ = true;
    return Verdict::kDropMarked;
  }
  used_ += cost;
  return Verdict::kKeep;
}

OutputBudget::Verdict OutputBudget::Event(std::string_view text) {
  if (IsOutputLimitMarker(text)) {
    if (reached_) return Verdict::kDrop;
    reached_ = true;
    used_ += LogLineCost(text);
    return Verdict::kKeep;
  }
  int64_t cost = LogLineCost(text);
  if (used_ + cost > limit_ + kLogEventAllowanceBytes) return Verdict::kDrop;
  used_ += cost;
  return Verdict::kKeep;
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = SequenceLength(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    // Runs of ASCII, the common case, are copied at once.
    size_t ascii = i;
    while (ascii < text.size() && static_cast<unsigned char>(text[ascii]) < 0x80) ++ascii;
    out.append(text.data() + i, ascii - i);
    i = ascii;
    if (i == text.size()) break;
    size_t n = SequenceLength(text.substr(i));
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

size_t Utf8CutPoint(std::string_view text, size_t max) {
  if (text.size() <= max) return text.size();
  // Inside a sequence: go back to its first byte, if it is a well-formed one.
  for (size_t back = 1; back <= 3 && back <= max; ++back) {
    size_t start = max - back;
    unsigned char c = static_cast<unsigned char>(text[start]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: further back
    size_t n = SequenceLength(text.substr(start));
    return n > back && start > 0 ? start : max;
  }
  return max;
}

}  // namespace gpupool
