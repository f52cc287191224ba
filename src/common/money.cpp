#include "common/money.h"

#include <cstdlib>

namespace gpupool::accounting {

Result<Micros> ParseCredits(std::string_view text, std::string_view what, Micros max,
                            bool allow_negative) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(std::string(what) + ": \"" + std::string(text) + "\" " +
                                   std::string(why));
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  auto digits = [](std::string_view d) {
    for (char c : d)
      if (c < '0' || c > '9') return false;
    return true;
  };
  if ((whole.empty() && frac.empty()) || !digits(whole) || !digits(frac) ||
      (dot != std::string_view::npos && frac.empty())) {
    return bad("is not a number of credits such as 2.50");
  }
  if (frac.size() > 6) return bad("has more than six decimals (the smallest amount is 0.000001)");
  // Leading zeros aside, more than 12 digits is past any limit we allow.
  while (whole.size() > 1 && whole[0] == '0') whole.remove_prefix(1);
  if (whole.size() > 12) return bad("is too large");
  Micros value = 0;
  for (char c : whole) value = value * 10 + (c - '0');
  Micros fraction = 0;
  for (size_t i = 0; i < 6; ++i) fraction = fraction * 10 + (i < frac.size() ? frac[i] - '0' : 0);
  value = value * kMicrosPerCredit + fraction;
  if (negative && value != 0) {
    if (!allow_negative) return bad("is negative");
    value = -value;
  }
  if (value > max || value < -max) {
    return bad("is more than " + FormatCredits(max) + " credits");
  }
  return value;
}

std::string FormatCredits(Micros amount) {
  // |INT64_MIN| does not fit; no amount we store comes near it.
  bool negative = amount < 0;
  uint64_t a = negative ? 0 - static_cast<uint64_t>(amount) : static_cast<uint64_t>(amount);
  std::string frac = std::to_string(a % kMicrosPerCredit);
  frac.insert(0, 6 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return (negative ? "-" : "") + std::to_string(a / kMicrosPerCredit) + "." + frac;
}

double CreditsAsDouble(Micros amount) {
  return static_cast<double>(amount) / static_cast<double>(kMicrosPerCredit);
}

}  // namespace gpupool::accounting
