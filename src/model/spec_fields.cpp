// See spec_fields.h. Moved out of job_spec.cpp unchanged.
#include "model/spec_fields.h"

#include <cmath>
#include <limits>

#include "common/units.h"
#include "model/yaml.h"

namespace gpupool::spec_fields {

// The value of `key` in `obj`, or nullptr when it is absent or null (an
// empty YAML value such as `resources:` means "not given").
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// The value of a JSON number that holds an integer (including floats such as
// 2.0), or nullopt.
std::optional<int64_t> IntegralValue(const json& j) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

// A JSON number of units (CPUs, seconds) in [0, max_units] as thousandths,
// exactly: at most three decimals. `range` is the message for out-of-range
// values, e.g. "must be from 0 to 1024".
Result<int64_t> NumberToMilli(const json& j, std::string_view path, int64_t max_units,
                              std::string_view range) {
  if (auto v = IntegralValue(j)) {
    if (*v < 0 || *v > max_units)
      return FieldError(path, std::string(range) + ", got " + DescribeValue(j));
    return *v * 1000;
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (!std::isfinite(d) || d < 0 || d > static_cast<double>(max_units)) {
      return FieldError(path, std::string(range) + ", got " + DescribeValue(j));
    }
    int64_t milli = std::llround(d * 1000.0);
    // Division is correctly rounded, so this holds exactly when `d` is the
    // double nearest to a decimal with at most three places.
    if (static_cast<double>(milli) / 1000.0 != d) {
      return FieldError(path, "at most three decimal places, got " + DescribeValue(j));
    }
    return milli;
  }
  return FieldError(path, std::string(range) + ", got " + DescribeValue(j));
}

// Text of a duration limit, e.g. "365d".
std::string Limit(int64_t seconds) { return FormatDurationMs(seconds * 1000); }

Status CheckDurationMs(std::string_view path, int64_t ms, int64_t min_seconds,
                       int64_t max_seconds) {
  if (ms < min_seconds * 1000 || ms > max_seconds * 1000) {
    return FieldError(path, "must be from " + Limit(min_seconds) + " to " + Limit(max_seconds) +
                                ", got " + FormatDurationMs(ms));
  }
  return Status::Ok();
}

Status CheckMebibytes(std::string_view path, int64_t mib, int64_t max_mib) {
  if (mib < 0) return FieldError(path, "must not be negative, got " + std::to_string(mib) + " MiB");
  if (mib > max_mib) {
    return FieldError(
        path, "must be at most " + FormatMebibytes(max_mib) + ", got " + FormatMebibytes(mib));
  }
  return Status::Ok();
}

Status CheckNoNul(std::string_view path, std::string_view s) {
  if (s.find('\0') != std::string_view::npos)
    return FieldError(path, "must not contain a NUL byte");
  return Status::Ok();
}

// Strings that reach a process (argv, environment) or JSON output.
Status CheckText(std::string_view path, std::string_view s) {
  GP_RETURN_IF_ERROR(CheckNoNul(path, s));
  if (InvalidUtf8Offset(s) != std::string_view::npos)
    return FieldError(path, "must be valid UTF-8");
  return Status::Ok();
}

std::string ExactMebibytes(int64_t mib) {
  std::string s = FormatMebibytes(mib);
  auto back = ParseMebibytes(s);
  if (back.ok() && *back == mib) return s;
  return std::to_string(mib) + " MiB";
}

std::string ExactDuration(int64_t ms) {
  std::string s = FormatDurationMs(ms);
  auto back = ParseDurationMs(s);
  if (back.ok() && *back == ms) return s;
  // "1d2h3m4.5s": every part, down to the millisecond.
  std::string out;
  int64_t d = ms / 86'400'000, h = ms / 3'600'000 % 24, m = ms / 60'000 % 60, sec_ms = ms % 60'000;
  if (d) out += std::to_string(d) + "d";
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (sec_ms || out.empty()) out += FormatMilli(sec_ms) + "s";
  return out;
}

Result<std::string> StringField(const json& j, std::string_view path) {
  if (!j.is_string()) {
    std::string hint;
    if (j.is_number() || j.is_boolean()) hint = " (quote it: \"" + j.dump() + "\")";
    return FieldError(path, "must be a string, got " + DescribeValue(j) + hint);
  }
  return j.get<std::string>();
}

Result<int64_t> SizeField(const json& j, std::string_view path) {
  if (!j.is_string()) {
    return FieldError(path,
                      "must be a size with a unit such as \"24GiB\", got " + DescribeValue(j));
  }
  const auto& text = j.get_ref<const std::string&>();
  auto mib = ParseMebibytes(text);
  if (!mib.ok()) return mib.status().WithContext(path);
  // A bare number means bytes to ParseBytes; in a job spec that is almost
  // always a forgotten unit ("memory: 16"), so ask for one.
  size_t last = text.find_last_not_of(' ');
  bool has_unit =
      last != std::string::npos && !(text[last] >= '0' && text[last] <= '9') && text[last] != '.';
  if (*mib != 0 && !has_unit) {
    return FieldError(path, "invalid size " + QuoteForError(text) + ": missing unit (e.g. \"" +
                                text + "GiB\" or \"" + text + "MiB\")");
  }
  return *mib;
}

// A duration given as text ("10m") or a number of seconds.
Result<int64_t> DurationField(const json& v, const std::string& path, int64_t max_seconds) {
  if (v.is_string()) {
    auto ms = ParseDurationMs(v.get_ref<const std::string&>());
    if (!ms.ok()) return ms.status().WithContext(path);
    return *ms;
  }
  if (v.is_number()) {
    return NumberToMilli(v, path, max_seconds,
                         "must be a number of seconds from 0 to " + std::to_string(max_seconds) +
                             " (" + Limit(max_seconds) + ")");
  }
  return FieldError(
      path, "must be a duration such as \"10m\" or a number of seconds, got " + DescribeValue(v));
}

}  // namespace gpupool::spec_fields
