// Parsing and formatting of user-facing quantities.
//
// Amounts are integers inside gpupool: bytes, mebibytes, milli-units and
// milliseconds. Text such as "24GiB", "0.5" or "1h30m" is converted once, at
// the edge, by these functions. All are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool {

// "24GiB", "24Gi", "512MiB", "1.5GB", "1024" (bytes), "2TiB". Binary (Ki, Mi,
// Gi, Ti) and decimal (K, M, G, T) suffixes, optionally followed by "B".
Result<int64_t> ParseBytes(std::string_view text);

// ParseBytes rounded up to whole MiB.
Result<int64_t> ParseMebibytes(std::string_view text);

// "0.5" -> 500, "2" -> 2000, "250m" -> 250. At most three decimals.
Result<int64_t> ParseMilli(std::string_view text);

// "90s", "1h30m", "500ms", "2d", "45" (seconds). Returns milliseconds.
Result<int64_t> ParseDurationMs(std::string_view text);

// 25769803776 -> "24 GiB"; 1536 MiB -> "1.5 GiB".
std::string FormatBytes(int64_t bytes);
std::string FormatMebibytes(int64_t mib);

// 5400000 -> "1h30m"; 1500 -> "1.5s"; 0 -> "0s".
std::string FormatDurationMs(int64_t ms);

// 500 -> "0.5"; 2000 -> "2".
std::string FormatMilli(int64_t milli);

}  // namespace gpupool
