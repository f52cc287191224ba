// JobSpec parsing, validation and JSON mapping. See job_spec.h for the
// accepted fields.
//
// One code path: YAML text is first turned into a nlohmann::json tree (plain
// scalars resolved per the YAML 1.2 core schema, quoted scalars kept as
// strings), then JobSpecFromJson converts and checks it exactly as it checks
// an API request body, and finally ValidateJobSpec checks the invariants.
#include "model/job_spec.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "common/units.h"

namespace gpupool {
namespace {

using nlohmann::json;

// Limits. Anything beyond them is a typo or an attack, not a real job.
constexpr size_t kMaxSpecBytes = 1 << 20;  // YAML/JSON text
constexpr size_t kMaxYamlNodes = 100'000;  // after alias expansion
constexpr int kMaxYamlDepth = 64;
constexpr size_t kMaxNameChars = 128;
constexpr size_t kMaxArgBytes = 128 * 1024;  // Linux MAX_ARG_STRLEN
constexpr size_t kMaxCommandArgs = 4096;
constexpr size_t kMaxEnvVars = 1024;
constexpr size_t kMaxEnvNameChars = 256;
constexpr size_t kMaxGpuModels = 32;
constexpr size_t kMaxGpuModelChars = 128;
constexpr int64_t kMaxGpus = 64;
constexpr int64_t kMaxGpuMemoryMib = int64_t{1} << 20;  // 1 TiB
constexpr int64_t kMaxCpus = 1024;
constexpr int64_t kMaxMemoryMib = int64_t{64} << 20;  // 64 TiB
constexpr int64_t kMaxRuntimeSeconds = 365LL * 24 * 3600;

constexpr const char* kTopFields[] = {"name", "run", "command", "env", "resources", "max_runtime"};
constexpr const char* kResourceFields[] = {"gpus", "gpu_memory", "gpu_models", "cpus", "memory"};

Status Error(std::string_view path, std::string_view message) {
  std::string m(path.empty() ? "(root)" : path);
  m += ": ";
  m += message;
  return Status::InvalidArgument(std::move(m));
}

std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 64;
  std::string out = "\"";
  out += s.size() > kMaxShown ? std::string(s.substr(0, kMaxShown)) + "..." : std::string(s);
  out += "\"";
  return out;
}

// How a value is shown after "got": scalars as JSON, containers by kind.
std::string Got(const json& j) {
  if (j.is_object()) return "a mapping";
  if (j.is_array()) return "a list";
  if (j.is_null()) return "null";
  if (j.is_string()) return Quote(j.get_ref<const std::string&>());
  if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    double d = j.get<double>();
    return std::isnan(d) ? "nan" : d < 0 ? "-inf" : "inf";
  }
  return j.dump();
}

std::string Join(const char* const* begin, const char* const* end) {
  std::string s;
  for (auto it = begin; it != end; ++it) {
    if (!s.empty()) s += ", ";
    s += *it;
  }
  return s;
}

template <size_t N>
Status CheckKnownFields(const json& obj, std::string_view prefix, const char* const (&known)[N]) {
  for (const auto& [key, value] : obj.items()) {
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (!found) {
      return Error(std::string(prefix) + key,
                   "unknown field (known: " + Join(std::begin(known), std::end(known)) + ")");
    }
  }
  return Status::Ok();
}

// The value of `key` in `obj`, or nullptr when it is absent or null (an
// empty YAML value such as `resources:` means "not given").
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// ---------------------------------------------------------------------------
// Numbers.

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
    if (*v < 0 || *v > max_units) return Error(path, std::string(range) + ", got " + Got(j));
    return *v * 1000;
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (!std::isfinite(d) || d < 0 || d > static_cast<double>(max_units)) {
      return Error(path, std::string(range) + ", got " + Got(j));
    }
    int64_t milli = std::llround(d * 1000.0);
    // Division is correctly rounded, so this holds exactly when `d` is the
    // double nearest to a decimal with at most three places.
    if (static_cast<double>(milli) / 1000.0 != d) {
      return Error(path, "at most three decimal places, got " + Got(j));
    }
    return milli;
  }
  return Error(path, std::string(range) + ", got " + Got(j));
}

// ---------------------------------------------------------------------------
// Range checks shared by JobSpecFromJson and ValidateJobSpec.

Status CheckGpus(int64_t gpus) {
  if (gpus < 0 || gpus > kMaxGpus) {
    return Error("resources.gpus", "must be an integer from 0 to " + std::to_string(kMaxGpus) +
                                       ", got " + std::to_string(gpus));
  }
  return Status::Ok();
}

Status CheckMebibytes(std::string_view path, int64_t mib, int64_t max_mib) {
  if (mib < 0) return Error(path, "must not be negative, got " + std::to_string(mib) + " MiB");
  if (mib > max_mib) {
    return Error(path,
                 "must be at most " + FormatMebibytes(max_mib) + ", got " + FormatMebibytes(mib));
  }
  return Status::Ok();
}

Status CheckCpuMilli(int64_t milli) {
  if (milli < 0 || milli > kMaxCpus * 1000) {
    return Error("resources.cpus",
                 "must be from 0 to " + std::to_string(kMaxCpus) + ", got " + FormatMilli(milli));
  }
  return Status::Ok();
}

Status CheckRuntimeMs(int64_t ms) {
  if (ms < 0) return Error("max_runtime", "must not be negative, got " + FormatDurationMs(ms));
  if (ms > kMaxRuntimeSeconds * 1000) {
    return Error("max_runtime", "must be at most " + FormatDurationMs(kMaxRuntimeSeconds * 1000) +
                                    ", got " + FormatDurationMs(ms));
  }
  return Status::Ok();
}

Status CheckNoNul(std::string_view path, std::string_view s) {
  if (s.find('\0') != std::string_view::npos) return Error(path, "must not contain a NUL byte");
  return Status::Ok();
}

// Returns the offset of the first byte that is not part of well-formed UTF-8
// (no overlongs, surrogates or code points past U+10FFFF), or npos.
size_t InvalidUtf8Offset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80           ? 1
                 : (b >> 5) == 0x6  ? 2
                 : (b >> 4) == 0xE  ? 3
                 : (b >> 3) == 0x1E ? 4
                                    : 0;
    if (len == 0 || i + len > s.size()) return i;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Strings that reach a process (argv, environment) or JSON output.
Status CheckText(std::string_view path, std::string_view s) {
  GP_RETURN_IF_ERROR(CheckNoNul(path, s));
  if (InvalidUtf8Offset(s) != std::string_view::npos) return Error(path, "must be valid UTF-8");
  return Status::Ok();
}

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameChars) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status CheckEnvName(std::string_view name) {
  std::string path = "env." + std::string(name);
  bool ok = !name.empty() && name.size() <= kMaxEnvNameChars;
  for (size_t i = 0; ok && i < name.size(); ++i) {
    char c = name[i];
    ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
         (i > 0 && c >= '0' && c <= '9');
  }
  if (!ok) return Error(path, "invalid variable name (must match [A-Za-z_][A-Za-z0-9_]*)");
  if (name.starts_with("GPUPOOL_") || name == "CUDA_VISIBLE_DEVICES") {
    return Error(
        path, "reserved variable name (GPUPOOL_* and CUDA_VISIBLE_DEVICES are set by the agent)");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Canonical text forms that parse back to exactly the same integer.

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

// ---------------------------------------------------------------------------
// Field conversion.

Result<std::string> StringField(const json& j, std::string_view path) {
  if (!j.is_string()) {
    std::string hint;
    if (j.is_number() || j.is_boolean()) hint = " (quote it: \"" + j.dump() + "\")";
    return Error(path, "must be a string, got " + Got(j) + hint);
  }
  return j.get<std::string>();
}

Result<int64_t> SizeField(const json& j, std::string_view path) {
  if (!j.is_string()) {
    return Error(path, "must be a size with a unit such as \"24GiB\", got " + Got(j));
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
    return Error(path, "invalid size " + Quote(text) + ": missing unit (e.g. \"" + text +
                           "GiB\" or \"" + text + "MiB\")");
  }
  return *mib;
}

Status ParseResources(const json& j, Resources& out) {
  if (!j.is_object()) return Error("resources", "expected a mapping, got " + Got(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "resources.", kResourceFields));
  if (const json* v = Field(j, "gpus")) {
    auto n = IntegralValue(*v);
    if (!n || *n < 0 || *n > kMaxGpus) {
      return Error("resources.gpus",
                   "must be an integer from 0 to " + std::to_string(kMaxGpus) + ", got " + Got(*v));
    }
    out.gpus = static_cast<int32_t>(*n);
  }
  if (const json* v = Field(j, "gpu_memory")) {
    GP_ASSIGN_OR_RETURN(out.gpu_memory_mib, SizeField(*v, "resources.gpu_memory"));
    GP_RETURN_IF_ERROR(
        CheckMebibytes("resources.gpu_memory", out.gpu_memory_mib, kMaxGpuMemoryMib));
  }
  if (const json* v = Field(j, "gpu_models")) {
    if (v->is_string()) {
      out.gpu_models.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxGpuModels) {
        return Error("resources.gpu_models", "at most " + std::to_string(kMaxGpuModels) +
                                                 " models, got " + std::to_string(v->size()));
      }
      for (size_t i = 0; i < v->size(); ++i) {
        std::string path = "resources.gpu_models[" + std::to_string(i) + "]";
        GP_ASSIGN_OR_RETURN(std::string model, StringField((*v)[i], path));
        out.gpu_models.push_back(std::move(model));
      }
    } else {
      return Error("resources.gpu_models", "must be a string or a list of strings, got " + Got(*v));
    }
  }
  if (const json* v = Field(j, "cpus")) {
    constexpr std::string_view kPath = "resources.cpus";
    if (v->is_string()) {
      auto milli = ParseMilli(v->get_ref<const std::string&>());
      if (!milli.ok()) return milli.status().WithContext(kPath);
      out.cpu_milli = *milli;
      GP_RETURN_IF_ERROR(CheckCpuMilli(out.cpu_milli));
    } else {
      GP_ASSIGN_OR_RETURN(out.cpu_milli,
                          NumberToMilli(*v, kPath, kMaxCpus,
                                        "must be a number from 0 to " + std::to_string(kMaxCpus)));
    }
  }
  if (const json* v = Field(j, "memory")) {
    GP_ASSIGN_OR_RETURN(out.memory_mib, SizeField(*v, "resources.memory"));
    GP_RETURN_IF_ERROR(CheckMebibytes("resources.memory", out.memory_mib, kMaxMemoryMib));
  }
  return Status::Ok();
}

Status ParseEnv(const json& j, std::map<std::string, std::string>& out) {
  if (!j.is_object()) return Error("env", "expected a mapping of NAME: value, got " + Got(j));
  if (j.size() > kMaxEnvVars) {
    return Error("env", "at most " + std::to_string(kMaxEnvVars) + " variables, got " +
                            std::to_string(j.size()));
  }
  for (const auto& [name, value] : j.items()) {
    GP_RETURN_IF_ERROR(CheckEnvName(name));
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      text = value.dump();
    } else {
      return Error("env." + name, "must be a string, number or boolean, got " + Got(value));
    }
    out[name] = std::move(text);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// YAML to JSON.

bool IsDigits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = base == 8    ? (c >= '0' && c <= '7')
              : base == 10 ? (c >= '0' && c <= '9')
                           : std::isxdigit(static_cast<unsigned char>(c)) != 0;
    if (!ok) return false;
  }
  return true;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t whole = digits();
  size_t frac = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    frac = digits();
  }
  if (whole == 0 && frac == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// Resolves a plain scalar per the YAML 1.2 core schema: null, bool, int,
// float, else string.
Result<json> ResolvePlainScalar(const std::string& s, std::string_view path) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return json(nullptr);
  if (s == "true" || s == "True" || s == "TRUE") return json(true);
  if (s == "false" || s == "False" || s == "FALSE") return json(false);

  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  int base = 0;
  if (IsDigits(body, 10)) {
    base = 10;
  } else if (s.starts_with("0o") && IsDigits(s.substr(2), 8)) {
    base = 8;
    body = std::string_view(s).substr(2);
  } else if (s.starts_with("0x") && IsDigits(s.substr(2), 16)) {
    base = 16;
    body = std::string_view(s).substr(2);
  }
  if (base != 0) {
    uint64_t u = 0;
    auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), u, base);
    if (ec == std::errc() && ptr == body.data() + body.size()) {
      constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (!negative) return u <= kMax ? json(static_cast<int64_t>(u)) : json(u);
      if (u <= kMax + 1) return json(static_cast<int64_t>(0 - u));
    }
    if (base != 10) return Error(path, "integer " + Quote(s) + " out of range");
    // Decimal integers too large for 64 bits become floats, so range checks
    // report them instead of a type error.
  }

  if (IsCoreFloat(s)) {
    std::string_view f = s;
    if (f[0] == '+') f.remove_prefix(1);
    double d = 0;
    auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), d);
    if (ec == std::errc::result_out_of_range) {
      // Overflow becomes infinity (rejected by range checks), underflow zero.
      bool tiny = f.find("e-") != std::string_view::npos || f.find("E-") != std::string_view::npos;
      d = tiny ? 0.0 : negative ? -HUGE_VAL : HUGE_VAL;
    } else if (ec != std::errc() || ptr != f.data() + f.size()) {
      return json(s);
    }
    return json(d);
  }
  std::string_view abs = s;
  if (!abs.empty() && (abs[0] == '-' || abs[0] == '+')) abs.remove_prefix(1);
  if (abs == ".inf" || abs == ".Inf" || abs == ".INF") {
    return json(negative ? -std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::infinity());
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    return json(std::numeric_limits<double>::quiet_NaN());
  }
  return json(s);
}

class YamlToJson {
 public:
  // `values_as_text`: the scalar values of this mapping are kept as written
  // (used for env, whose values are text whatever they look like).
  Result<json> Convert(const YAML::Node& node, const std::string& path, int depth,
                       bool values_as_text) {
    if (++nodes_ > kMaxYamlNodes) return Error("", "spec too large (too many values)");
    if (depth > kMaxYamlDepth) return Error(path, "nested too deeply");
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return json(nullptr);
      case YAML::NodeType::Scalar:
        return ConvertScalar(node, path);
      case YAML::NodeType::Sequence: {
        json arr = json::array();
        size_t i = 0;
        for (const auto& child : node) {
          GP_ASSIGN_OR_RETURN(
              json v, Convert(child, path + "[" + std::to_string(i) + "]", depth + 1, false));
          arr.push_back(std::move(v));
          ++i;
        }
        return arr;
      }
      case YAML::NodeType::Map: {
        json obj = json::object();
        for (const auto& kv : node) {
          if (!kv.first.IsScalar()) {
            return Error(path, "mapping keys must be plain text, not lists or mappings");
          }
          const std::string& key = kv.first.Scalar();
          std::string child_path = path.empty() ? key : path + "." + key;
          if (obj.contains(key)) return Error(child_path, "duplicate key");
          json value;
          if (values_as_text && kv.second.IsScalar()) {
            value = kv.second.Scalar();
          } else {
            bool text = depth == 0 && key == "env";
            GP_ASSIGN_OR_RETURN(value, Convert(kv.second, child_path, depth + 1, text));
          }
          obj[key] = std::move(value);
        }
        return obj;
      }
    }
    return Error(path, "unsupported YAML node");
  }

 private:
  Result<json> ConvertScalar(const YAML::Node& node, const std::string& path) {
    const std::string& tag = node.Tag();
    const std::string& s = node.Scalar();
    constexpr std::string_view kCore = "tag:yaml.org,2002:";
    if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(s);
    if (tag == "?" || tag.empty()) return ResolvePlainScalar(s, path);
    if (tag.starts_with(kCore)) {
      std::string_view type = std::string_view(tag).substr(kCore.size());
      GP_ASSIGN_OR_RETURN(json v, ResolvePlainScalar(s, path));
      bool match = (type == "int" && v.is_number_integer()) || (type == "float" && v.is_number()) ||
                   (type == "bool" && v.is_boolean()) || (type == "null" && v.is_null());
      if (!match) return Error(path, Quote(s) + " is not a valid !!" + std::string(type));
      if (type == "float") return json(v.get<double>());
      return v;
    }
    return Error(path, "unsupported tag " + Quote(tag));
  }

  size_t nodes_ = 0;
};

// Counts the documents of a YAML stream without building them. yaml-cpp 0.7's
// LoadAll loops forever, allocating, on a stray top-level token such as ","
// (jbeder/yaml-cpp#1040, fixed upstream by #1319): every pass yields another
// empty document. Counting stops after a few, and the first event's position
// says where the junk is.
class DocumentCounter final : public YAML::EventHandler {
 public:
  struct Summary {
    int documents = 0;  // capped at kMaxCounted
    bool first_only_null = false;
    YAML::Mark first_mark;  // of the first document's first node
  };
  static constexpr int kMaxCounted = 3;

  static Summary Count(const std::string& text) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (counter.summary_.documents < kMaxCounted && parser.HandleNextDocument(counter)) {
      ++counter.summary_.documents;
    }
    return counter.summary_;
  }

  void OnDocumentStart(const YAML::Mark&) override { events_ = 0; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Event(mark, true); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Event(mark, false); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Event(mark, false);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Event(mark, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Event(mark, false);
  }
  void OnMapEnd() override {}

 private:
  void Event(const YAML::Mark& mark, bool null) {
    if (summary_.documents == 0 && events_++ == 0) {
      summary_.first_mark = mark;
      summary_.first_only_null = null;
    }
  }

  Summary summary_;
  int events_ = 0;
};

std::string Position(const YAML::Mark& mark) {
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

}  // namespace

Result<JobSpec> ParseJobSpec(std::string_view text) {
  if (text.size() > kMaxSpecBytes) {
    return Error("", "spec too large: " + std::to_string(text.size()) + " bytes, at most " +
                         std::to_string(kMaxSpecBytes));
  }
  if (size_t bad = InvalidUtf8Offset(text); bad != std::string_view::npos) {
    // yaml-cpp would pass bad bytes through (or stop at a NUL byte).
    size_t line_start = text.rfind('\n', bad == 0 ? 0 : bad - 1);
    line_start = line_start == std::string_view::npos || bad == 0 ? 0 : line_start + 1;
    size_t line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(bad), '\n');
    return Status::InvalidArgument("line " + std::to_string(line) + ", column " +
                                   std::to_string(bad - line_start + 1) + ": not valid UTF-8");
  }
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Error("", "spec contains a NUL byte at offset " + std::to_string(nul));
  }
  const std::string str(text);
  json j;
  try {
    DocumentCounter::Summary docs = DocumentCounter::Count(str);
    if (docs.documents > 1) {
      // An empty first document stops at the next "---"; anything else
      // there is junk the parser skipped.
      const YAML::Mark& at = docs.first_mark;
      if (docs.first_only_null && !at.is_null() && at.pos >= 0 &&
          static_cast<size_t>(at.pos) < str.size() &&
          str.compare(static_cast<size_t>(at.pos), 3, "---") != 0 &&
          str.compare(static_cast<size_t>(at.pos), 3, "...") != 0) {
        return Status::InvalidArgument(Position(at) + ": unexpected content; expected a mapping");
      }
      return Error("", "expected one YAML document, got " +
                           std::string(docs.documents >= DocumentCounter::kMaxCounted
                                           ? "more than 2"
                                           : std::to_string(docs.documents)));
    }
    YAML::Node root = YAML::Load(str);
    if (docs.documents == 0 || root.IsNull()) {
      return Error("", "empty spec; expected a mapping with run or command");
    }
    YamlToJson converter;
    GP_ASSIGN_OR_RETURN(j, converter.Convert(root, "", 0, false));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return Status::InvalidArgument("invalid YAML: " + e.msg);
    return Status::InvalidArgument(Position(e.mark) + ": " + e.msg);
  }
  return JobSpecFromJson(j);
}

Result<JobSpec> JobSpecFromJson(const json& j) {
  if (!j.is_object()) return Error("", "expected a mapping, got " + Got(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "", kTopFields));
  JobSpec spec;
  spec.name = "job";
  if (const json* v = Field(j, "name")) {
    GP_ASSIGN_OR_RETURN(spec.name, StringField(*v, "name"));
  }
  const json* run = Field(j, "run");
  const json* command = Field(j, "command");
  if ((run == nullptr) == (command == nullptr)) {
    return Error("run/command", std::string("exactly one of run or command is required") +
                                    (run ? " (got both)" : ""));
  }
  if (run) {
    GP_ASSIGN_OR_RETURN(spec.run, StringField(*run, "run"));
    if (spec.run.empty()) return Error("run", "must not be empty");
  }
  if (command) {
    if (!command->is_array()) {
      return Error("command",
                   "must be a list of strings (use run for a shell command), got " + Got(*command));
    }
    if (command->empty()) return Error("command", "must not be empty");
    if (command->size() > kMaxCommandArgs) {
      return Error("command", "at most " + std::to_string(kMaxCommandArgs) + " arguments, got " +
                                  std::to_string(command->size()));
    }
    for (size_t i = 0; i < command->size(); ++i) {
      GP_ASSIGN_OR_RETURN(std::string arg,
                          StringField((*command)[i], "command[" + std::to_string(i) + "]"));
      spec.command.push_back(std::move(arg));
    }
  }
  if (const json* v = Field(j, "env")) GP_RETURN_IF_ERROR(ParseEnv(*v, spec.env));
  if (const json* v = Field(j, "resources")) GP_RETURN_IF_ERROR(ParseResources(*v, spec.resources));
  if (const json* v = Field(j, "max_runtime")) {
    if (v->is_string()) {
      auto ms = ParseDurationMs(v->get_ref<const std::string&>());
      if (!ms.ok()) return ms.status().WithContext("max_runtime");
      spec.max_runtime_ms = *ms;
      GP_RETURN_IF_ERROR(CheckRuntimeMs(spec.max_runtime_ms));
    } else if (v->is_number()) {
      GP_ASSIGN_OR_RETURN(spec.max_runtime_ms,
                          NumberToMilli(*v, "max_runtime", kMaxRuntimeSeconds,
                                        "must be a number of seconds from 0 to " +
                                            std::to_string(kMaxRuntimeSeconds) + " (365d)"));
    } else {
      return Error("max_runtime",
                   "must be a duration such as \"2h\" or a number of seconds, got " + Got(*v));
    }
  }
  GP_RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

Status ValidateJobSpec(const JobSpec& spec) {
  if (!IsValidName(spec.name)) {
    return Error("name", "must be 1 to " + std::to_string(kMaxNameChars) +
                             " characters of A-Z, a-z, 0-9, '.', '_' and '-', got " +
                             Quote(spec.name));
  }
  bool has_run = !spec.run.empty();
  bool has_command = !spec.command.empty();
  if (has_run == has_command) {
    return Error("run/command", std::string("exactly one of run or command is required") +
                                    (has_run ? " (got both)" : ""));
  }
  if (has_run) {
    if (spec.run.find_first_not_of(" \t\r\n") == std::string::npos) {
      return Error("run", "must not be blank");
    }
    if (spec.run.size() > kMaxArgBytes) {
      return Error("run", "at most " + std::to_string(kMaxArgBytes) + " bytes, got " +
                              std::to_string(spec.run.size()));
    }
    GP_RETURN_IF_ERROR(CheckText("run", spec.run));
  }
  if (has_command) {
    if (spec.command.size() > kMaxCommandArgs) {
      return Error("command", "at most " + std::to_string(kMaxCommandArgs) + " arguments, got " +
                                  std::to_string(spec.command.size()));
    }
    if (spec.command[0].empty()) return Error("command[0]", "the program must not be empty");
    for (size_t i = 0; i < spec.command.size(); ++i) {
      std::string path = "command[" + std::to_string(i) + "]";
      if (spec.command[i].size() > kMaxArgBytes) {
        return Error(path, "at most " + std::to_string(kMaxArgBytes) + " bytes");
      }
      GP_RETURN_IF_ERROR(CheckText(path, spec.command[i]));
    }
  }
  if (spec.env.size() > kMaxEnvVars) {
    return Error("env", "at most " + std::to_string(kMaxEnvVars) + " variables, got " +
                            std::to_string(spec.env.size()));
  }
  for (const auto& [name, value] : spec.env) {
    GP_RETURN_IF_ERROR(CheckEnvName(name));
    if (value.size() > kMaxArgBytes) {
      return Error("env." + name, "at most " + std::to_string(kMaxArgBytes) + " bytes");
    }
    GP_RETURN_IF_ERROR(CheckText("env." + name, value));
  }
  const Resources& r = spec.resources;
  GP_RETURN_IF_ERROR(CheckGpus(r.gpus));
  GP_RETURN_IF_ERROR(CheckMebibytes("resources.gpu_memory", r.gpu_memory_mib, kMaxGpuMemoryMib));
  if (r.gpu_models.size() > kMaxGpuModels) {
    return Error("resources.gpu_models", "at most " + std::to_string(kMaxGpuModels) +
                                             " models, got " + std::to_string(r.gpu_models.size()));
  }
  for (size_t i = 0; i < r.gpu_models.size(); ++i) {
    const std::string& model = r.gpu_models[i];
    std::string path = "resources.gpu_models[" + std::to_string(i) + "]";
    if (model.find_first_not_of(" \t") == std::string::npos) {
      return Error(path, "must not be empty");
    }
    if (model.size() > kMaxGpuModelChars) {
      return Error(path, "at most " + std::to_string(kMaxGpuModelChars) + " characters");
    }
    GP_RETURN_IF_ERROR(CheckText(path, model));
  }
  GP_RETURN_IF_ERROR(CheckCpuMilli(r.cpu_milli));
  GP_RETURN_IF_ERROR(CheckMebibytes("resources.memory", r.memory_mib, kMaxMemoryMib));
  GP_RETURN_IF_ERROR(CheckRuntimeMs(spec.max_runtime_ms));
  return Status::Ok();
}

nlohmann::json JobSpecToJson(const JobSpec& spec) {
  json j = json::object();
  j["name"] = spec.name;
  if (!spec.run.empty()) j["run"] = spec.run;
  if (!spec.command.empty()) j["command"] = spec.command;
  if (!spec.env.empty()) j["env"] = spec.env;
  const Resources& r = spec.resources;
  json res = json::object();
  res["gpus"] = r.gpus;
  if (r.gpu_memory_mib != 0) res["gpu_memory"] = ExactMebibytes(r.gpu_memory_mib);
  if (!r.gpu_models.empty()) res["gpu_models"] = r.gpu_models;
  if (r.cpu_milli != 0) res["cpus"] = FormatMilli(r.cpu_milli);
  if (r.memory_mib != 0) res["memory"] = ExactMebibytes(r.memory_mib);
  j["resources"] = std::move(res);
  if (spec.max_runtime_ms != 0) j["max_runtime"] = ExactDuration(spec.max_runtime_ms);
  return j;
}

}  // namespace gpupool
