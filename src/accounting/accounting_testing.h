// Units the accounting tests write amounts and times in.
#pragma once

#include <cstdint>

#include "common/money.h"

namespace gpupool::accounting::testing {

inline constexpr int64_t kMin = 60'000;
inline constexpr int64_t kHour = 60 * kMin;
inline constexpr Micros kCredit = kMicrosPerCredit;

}  // namespace gpupool::accounting::testing
