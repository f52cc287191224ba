#include "common/units.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

namespace gpupool {
namespace {

// Splits "1.5GiB" into a decimal number scaled by 1000 ("1.5" -> 1500) and its
// suffix ("GiB"). Integers only: no exponent, no sign beyond a leading '-'.
struct Decimal {
  int64_t milli = 0;
  std::string_view suffix;
};

// `shown` is the text quoted in error messages (the whole input when `text`
// is one part of it).
Result<Decimal> ParseDecimal(std::string_view text, std::string_view what, std::string_view shown) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid " + std::string(what) + " \"" + std::string(shown) +
                                   "\": " + std::string(why));
  };
  size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i < text.size() && text[i] == '-') return bad("must not be negative");
  if (i == text.size() || !(std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    return bad("expected a number");
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 10000;
  int64_t whole = 0;
  bool digits = false;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    whole = whole * 10 + (text[i] - '0');
    digits = true;
    if (whole > kMax) return bad("too large");
  }
  int64_t frac = 0;
  int frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      digits = true;
      if (++frac_digits > 3) return bad("at most three decimal places");
      frac = frac * 10 + (text[i] - '0');
    }
  }
  if (!digits) return bad("expected a number");
  for (int d = frac_digits; d < 3; ++d) frac *= 10;
  size_t end = text.size();
  while (end > i && text[end - 1] == ' ') --end;
  while (i < end && text[i] == ' ') ++i;
  return Decimal{whole * 1000 + frac, text.substr(i, end - i)};
}

}  // namespace

Result<int64_t> ParseBytes(std::string_view text) {
  GP_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(text, "size", text));
  std::string_view s = d.suffix;
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b')) s.remove_suffix(1);
  int64_t mult = 0;
  if (s.empty())
    mult = 1;
  else if (s == "Ki" || s == "ki")
    mult = int64_t{1} << 10;
  else if (s == "Mi")
    mult = int64_t{1} << 20;
  else if (s == "Gi")
    mult = int64_t{1} << 30;
  else if (s == "Ti")
    mult = int64_t{1} << 40;
  else if (s == "K" || s == "k")
    mult = 1000;
  else if (s == "M")
    mult = 1000 * 1000;
  else if (s == "G")
    mult = 1000LL * 1000 * 1000;
  else if (s == "T")
    mult = 1000LL * 1000 * 1000 * 1000;
  else {
    return Status::InvalidArgument("invalid size \"" + std::string(text) + "\": unknown unit \"" +
                                   std::string(d.suffix) +
                                   "\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  }
  // milli * mult / 1000, guarding against overflow.
  long double bytes = static_cast<long double>(d.milli) * mult / 1000.0L;
  if (bytes > static_cast<long double>(int64_t{1} << 60)) {
    return Status::InvalidArgument("invalid size \"" + std::string(text) + "\": too large");
  }
  return static_cast<int64_t>(std::ceil(bytes));
}

Result<int64_t> ParseMebibytes(std::string_view text) {
  GP_ASSIGN_OR_RETURN(int64_t bytes, ParseBytes(text));
  constexpr int64_t kMiB = int64_t{1} << 20;
  return (bytes + kMiB - 1) / kMiB;
}

Result<int64_t> ParseMilli(std::string_view text) {
  GP_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(text, "amount", text));
  if (d.suffix.empty()) return d.milli;
  if (d.suffix == "m" && d.milli % 1000 == 0) return d.milli / 1000;
  return Status::InvalidArgument("invalid amount \"" + std::string(text) +
                                 "\": expected a number such as 0.5 or milli-units such as 500m");
}

Result<int64_t> ParseDurationMs(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid duration \"" + std::string(text) +
                                   "\": " + std::string(why));
  };
  if (text.empty()) return bad("empty");
  std::string_view rest = text;
  int64_t total = 0;
  bool any = false;
  while (!rest.empty()) {
    size_t n = 0;
    while (n < rest.size() &&
           (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '.' || rest[n] == '-'))
      ++n;
    size_t u = n;
    while (u < rest.size() && std::isalpha(static_cast<unsigned char>(rest[u]))) ++u;
    if (n == 0) return bad("expected a number");
    GP_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(rest.substr(0, n), "duration", text));
    // Leftovers such as the "-2" of "1-2s" or the ".3" of "1.2.3s".
    if (!d.suffix.empty()) return bad("expected a number");
    std::string_view unit = rest.substr(n, u - n);
    int64_t unit_ms = 0;
    if (unit.empty()) {
      if (any || u != rest.size()) return bad("every part needs a unit (ms, s, m, h, d)");
      unit_ms = 1000;
    } else if (unit == "ms")
      unit_ms = 1;
    else if (unit == "s")
      unit_ms = 1000;
    else if (unit == "m")
      unit_ms = 60 * 1000;
    else if (unit == "h")
      unit_ms = 3600 * 1000;
    else if (unit == "d")
      unit_ms = 24LL * 3600 * 1000;
    else
      return bad("unknown unit \"" + std::string(unit) + "\" (use ms, s, m, h, d)");
    long double part = static_cast<long double>(d.milli) * unit_ms / 1000.0L;
    if (part + total > 1e15L) return bad("too large");
    total += static_cast<int64_t>(std::llround(part));
    any = true;
    rest.remove_prefix(u);
  }
  return total;
}

std::string FormatMilli(int64_t milli) {
  if (milli < 0 && milli != std::numeric_limits<int64_t>::min()) return "-" + FormatMilli(-milli);
  std::string s = std::to_string(milli / 1000);
  int64_t frac = milli % 1000;
  if (frac != 0) {
    std::string f = std::to_string(1000 + frac).substr(1);
    while (!f.empty() && f.back() == '0') f.pop_back();
    s += "." + f;
  }
  return s;
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  long double v = static_cast<long double>(bytes);
  // Also move up when one decimal would round to 1024 ("1024.0 KiB").
  while (u < 5 && (v >= 1024 || (v >= 1023.95L && v != std::floor(v)))) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  if (u == 0 || v == std::floor(v)) {
    os << static_cast<int64_t>(v);
  } else {
    os.setf(std::ios::fixed);
    os.precision(1);
    os << static_cast<double>(v);
  }
  os << ' ' << kUnits[u];
  return os.str();
}

std::string FormatMebibytes(int64_t mib) { return FormatBytes(mib * (int64_t{1} << 20)); }

std::string FormatDurationMs(int64_t ms) {
  if (ms < 0) return "-" + FormatDurationMs(-ms);
  if (ms == 0) return "0s";
  if (ms < 1000) return std::to_string(ms) + "ms";
  if (ms < 60 * 1000) return FormatMilli(ms / 100 * 100) + "s";
  int64_t s = ms / 1000;
  std::string out;
  int64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60, sec = s % 60;
  if (d) out += std::to_string(d) + "d";
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (sec && !d) out += std::to_string(sec) + "s";
  return out;
}

}  // namespace gpupool
