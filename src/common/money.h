// Credits as exact integers: micro-credits (1 credit = 1,000,000 micros),
// so that sums and balances never drift the way binary fractions would.
// Prices, charges, grants, balances and budgets are all Micros (accounting/);
// here in common because a job spec carries an amount too (max_cost).
//
// Contract: pure functions, no I/O; errors are InvalidArgument naming the
// field (`what`) and the text that was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::accounting {

using Micros = int64_t;
inline constexpr Micros kMicrosPerCredit = 1'000'000;
// What any one amount may be at most: a billion credits. Anything larger is
// a typo (and keeps every product of amounts well inside 128 bits).
inline constexpr Micros kMaxAmount = 1'000'000'000LL * kMicrosPerCredit;

// "2.50", "1000", "0.000001", "+3" -> micros. At most six decimals, at most
// `max` (and not negative unless `allow_negative`). InvalidArgument names
// `what` and says what was wrong ("price: \"2.5x\" is not a number of
// credits such as 2.50").
Result<Micros> ParseCredits(std::string_view text, std::string_view what, Micros max = kMaxAmount,
                            bool allow_negative = false);

// 2'500'000 -> "2.50"; 1 -> "0.000001"; -3'125'000 -> "-3.125": at least
// two decimals, more only when they are not zero.
std::string FormatCredits(Micros amount);

// The same as a JSON number would carry it (2.5), for clients that read
// amounts as numbers; the API sends both (`cost` and `cost_micros`).
double CreditsAsDouble(Micros amount);

}  // namespace gpupool::accounting
