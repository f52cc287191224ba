// Field helpers shared by the job spec's parsers (job_spec.cpp and
// job_spec_resources.cpp): reading JSON values of a spec into integers,
// strings, sizes and durations, with errors that name the field path, and
// the canonical text forms that read back to the same integer. Internal to
// model/; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::spec_fields {

using nlohmann::json;

// The value of `key` in `obj`, or nullptr when it is absent or null (an
// empty YAML value such as `resources:` means "not given").
const json* Field(const json& obj, const char* key);

// The value of a JSON number that holds an integer (including floats such as
// 2.0), or nullopt.
std::optional<int64_t> IntegralValue(const json& j);

// A JSON number of units (CPUs, seconds) in [0, max_units] as thousandths,
// exactly: at most three decimals. `range` is the message for out-of-range
// values, e.g. "must be from 0 to 1024".
Result<int64_t> NumberToMilli(const json& j, std::string_view path, int64_t max_units,
                              std::string_view range);

// Text of a duration limit, e.g. "365d".
std::string Limit(int64_t seconds);
Status CheckDurationMs(std::string_view path, int64_t ms, int64_t min_seconds, int64_t max_seconds);
Status CheckMebibytes(std::string_view path, int64_t mib, int64_t max_mib);
Status CheckNoNul(std::string_view path, std::string_view s);
// Strings that reach a process (argv, environment) or JSON output.
Status CheckText(std::string_view path, std::string_view s);

// Canonical text forms that parse back to exactly the same integer.
std::string ExactMebibytes(int64_t mib);
std::string ExactDuration(int64_t ms);

Result<std::string> StringField(const json& j, std::string_view path);
// A size with a unit ("24GiB"); a bare non-zero number is refused.
Result<int64_t> SizeField(const json& j, std::string_view path);
// A duration given as text ("10m") or a number of seconds.
Result<int64_t> DurationField(const json& v, const std::string& path, int64_t max_seconds);

}  // namespace gpupool::spec_fields
