// JobSpec parsing, validation and JSON mapping. See job_spec.h for the
// accepted fields.
//
// One code path: YAML text is first turned into a nlohmann::json tree
// (model/yaml.h: plain scalars resolved per the YAML 1.2 core schema, quoted
// scalars kept as strings), then JobSpecFromJson converts and checks it
// exactly as it checks an API request body, and finally ValidateJobSpec
// checks the invariants.
#include "model/job_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "common/ids.h"
#include "common/units.h"
#include "model/image_ref.h"
#include "model/yaml.h"

namespace gpupool {
namespace {

using nlohmann::json;

// Limits (the table in docs/user-guide.md). Anything beyond them is a typo
// or an attack, not a real job; together they keep a job's argv and
// environment far below Linux's ARG_MAX (2 MiB with an 8 MiB stack).
constexpr size_t kMaxSpecBytes = 1 << 20;  // YAML/JSON text
constexpr size_t kMaxNameChars = 128;
constexpr size_t kMaxWorkdirBytes = 4096;
constexpr size_t kMaxEnvNameChars = 256;
constexpr size_t kMaxGpuModels = 32;
constexpr size_t kMaxGpuModelChars = 128;
constexpr int64_t kMaxGpus = 64;
constexpr int64_t kMaxGpuMemoryMib = int64_t{1} << 20;  // 1 TiB
constexpr int64_t kMaxCpus = 1024;
constexpr int64_t kMaxMemoryMib = int64_t{64} << 20;  // 64 TiB
constexpr int64_t kMaxDiskMib = int64_t{1024} << 20;  // 1 PiB
constexpr int64_t kMaxRuntimeSeconds = 365LL * 24 * 3600;
constexpr size_t kMaxNodeLabels = 64;
constexpr size_t kMaxLabelKeyChars = 128;
constexpr size_t kMaxLabelValueChars = 256;
constexpr int32_t kMaxComputeCapability = 99 * 10 + 9;  // "99.9"
constexpr int64_t kMaxPreferWaitSeconds = 7LL * 24 * 3600;
constexpr int64_t kDefaultPreferWaitMs = 10LL * 60 * 1000;
constexpr int64_t kMinCheckpointIntervalSeconds = 10;
constexpr int64_t kMaxCheckpointIntervalSeconds = 7LL * 24 * 3600;
constexpr int64_t kMaxGraceSeconds = 3600;
constexpr int32_t kMaxNodes = 256;  // ranks of one multi-node job
constexpr int32_t kMaxRestarts = 100;
// What the agent sets for each rank of a torch gang (torchrun's names).
constexpr const char* kTorchRendezvousEnv[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                               "RANK",        "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                               "NODE_RANK",   "GROUP_RANK"};

constexpr const char* kTopFields[] = {
    "name",     "run",    "command",     "env",          "resources", "max_runtime",
    "priority", "group",  "image",       "executor",     "network",   "checkpoint",
    "workdir",  "inputs", "distributed", "max_restarts", "session"};
constexpr const char* kResourceFields[] = {
    "gpus",        "gpu_memory", "gpu_models", "cpus", "memory", "min_compute_capability",
    "node_labels", "prefer",     "disk",       "nodes"};
constexpr const char* kPreferFields[] = {"models", "wait"};
constexpr const char* kCheckpointFields[] = {"interval", "grace", "signal", "standby"};
constexpr const char* kSessionFields[] = {"kind", "idle_timeout", "ports", "any_port",
                                          "jupyter_token"};
constexpr int64_t kMaxSessionIdleSeconds = 30 * 86'400;
constexpr size_t kMaxSessionPorts = 32;
constexpr size_t kMaxJupyterTokenBytes = 256;
// Signals a job may ask to receive as its checkpoint request (SIGKILL and
// SIGSTOP cannot be caught, so they could never request anything).
constexpr const char* kCheckpointSignals[] = {"SIGUSR1", "SIGUSR2", "SIGHUP",  "SIGINT",
                                              "SIGQUIT", "SIGTERM", "SIGALRM", "SIGWINCH"};

std::string Join(const char* const* begin, const char* const* end) {
  std::string s;
  for (auto it = begin; it != end; ++it) {
    if (!s.empty()) s += ", ";
    s += *it;
  }
  return s;
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

// ---------------------------------------------------------------------------
// Range checks shared by JobSpecFromJson and ValidateJobSpec.

Status CheckGpus(int64_t gpus, int64_t gpu_milli) {
  if (gpus < 0 || gpus > kMaxGpus) {
    return FieldError("resources.gpus", "must be a whole number of GPUs from 0 to " +
                                            std::to_string(kMaxGpus) +
                                            " or a share of one GPU such as 0.5 or \"500m\", got " +
                                            std::to_string(gpus));
  }
  if (gpu_milli < 0 || gpu_milli >= 1000) {
    return FieldError("resources.gpus",
                      "a share of a GPU must be from 0.001 to 0.999 (1m to 999m), got " +
                          std::to_string(gpu_milli) + "m");
  }
  if (gpus > 0 && gpu_milli > 0) {
    return FieldError("resources.gpus", "either whole GPUs or a share of one GPU, not both");
  }
  return Status::Ok();
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

// "8.6" for 86.
std::string ComputeCapabilityText(int32_t cc) {
  return std::to_string(cc / 10) + "." + std::to_string(cc % 10);
}

Status CheckMebibytes(std::string_view path, int64_t mib, int64_t max_mib) {
  if (mib < 0) return FieldError(path, "must not be negative, got " + std::to_string(mib) + " MiB");
  if (mib > max_mib) {
    return FieldError(
        path, "must be at most " + FormatMebibytes(max_mib) + ", got " + FormatMebibytes(mib));
  }
  return Status::Ok();
}

Status CheckCpuMilli(int64_t milli) {
  if (milli < 0 || milli > kMaxCpus * 1000) {
    return FieldError("resources.cpus", "must be from 0 to " + std::to_string(kMaxCpus) + ", got " +
                                            FormatMilli(milli));
  }
  return Status::Ok();
}

Status CheckRuntimeMs(int64_t ms) {
  if (ms < 0) return FieldError("max_runtime", "must not be negative, got " + FormatDurationMs(ms));
  if (ms > kMaxRuntimeSeconds * 1000) {
    return FieldError("max_runtime", "must be at most " +
                                         FormatDurationMs(kMaxRuntimeSeconds * 1000) + ", got " +
                                         FormatDurationMs(ms));
  }
  return Status::Ok();
}

// Size limits, shared by the parsers and ValidateJobSpec so that both say
// the same.
Status AtMost(std::string_view path, size_t got, size_t max, std::string_view what) {
  if (got <= max) return Status::Ok();
  return FieldError(path, "at most " + std::to_string(max) + " " + std::string(what) + ", got " +
                              std::to_string(got));
}
Status CheckRunBytes(size_t n, const SpecLimits& l) {
  return AtMost("run", n, l.run_bytes, "bytes");
}
Status CheckCommandArgs(size_t n, const SpecLimits& l) {
  return AtMost("command", n, l.command_args, "arguments");
}
Status CheckCommandBytes(size_t n, const SpecLimits& l) {
  return AtMost("command", n, l.command_bytes, "bytes in all arguments together");
}
Status CheckEnvCount(size_t n, const SpecLimits& l) {
  return AtMost("env", n, l.env_vars, "entries");
}
Status CheckEnvValueBytes(std::string_view name, size_t n, const SpecLimits& l) {
  return AtMost("env." + std::string(name), n, l.env_value_bytes, "bytes");
}
Status CheckEnvBytes(size_t n, const SpecLimits& l) {
  return AtMost("env", n, l.env_bytes, "bytes in names and values together");
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
  if (name.size() > kMaxEnvNameChars) {
    // Named by its start: the whole name would swamp the message.
    return FieldError("env", "variable name " + QuoteForError(name) + " is " +
                                 std::to_string(name.size()) + " bytes long, at most " +
                                 std::to_string(kMaxEnvNameChars));
  }
  std::string path = "env." + std::string(name);
  bool ok = !name.empty();
  for (size_t i = 0; ok && i < name.size(); ++i) {
    char c = name[i];
    ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
         (i > 0 && c >= '0' && c <= '9');
  }
  if (!ok) return FieldError(path, "invalid variable name (must match [A-Za-z_][A-Za-z0-9_]*)");
  if (name.starts_with("GPUPOOL_") || name == "CUDA_VISIBLE_DEVICES") {
    return FieldError(
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

// "gpus": an integer (whole GPUs), a fraction below 1 (0.5) or an amount
// text ("500m", "0.25", "2"): a share of one GPU in thousandths.
Status ParseGpus(const json& v, Resources& out) {
  constexpr std::string_view kPath = "resources.gpus";
  const std::string range = "must be a whole number of GPUs from 0 to " + std::to_string(kMaxGpus) +
                            " or a share of one GPU such as 0.5 or \"500m\", got " +
                            DescribeValue(v);
  const std::string not_whole =
      "a share of a GPU must be less than 1; more than one GPU must be a whole number, got " +
      DescribeValue(v);
  int64_t milli = 0;
  if (auto n = IntegralValue(v)) {
    if (*n < 0 || *n > kMaxGpus) return FieldError(kPath, range);
    out.gpus = static_cast<int32_t>(*n);
    return Status::Ok();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d < 0 || d > static_cast<double>(kMaxGpus)) {
      return FieldError(kPath, range);
    }
    if (d > 1) return FieldError(kPath, not_whole);
    GP_ASSIGN_OR_RETURN(milli, NumberToMilli(v, kPath, 1, range));
  } else if (v.is_string()) {
    auto m = ParseMilli(v.get_ref<const std::string&>());
    if (!m.ok()) return m.status().WithContext(kPath);
    milli = *m;
    if (milli % 1000 != 0 && milli > 1000) return FieldError(kPath, not_whole);
    if (milli > kMaxGpus * 1000) return FieldError(kPath, range);
  } else {
    return FieldError(kPath, range);
  }
  if (milli % 1000 == 0) {
    out.gpus = static_cast<int32_t>(milli / 1000);
  } else {
    out.gpu_milli = static_cast<int32_t>(milli);
  }
  return Status::Ok();
}

// A list of GPU model names, or a single one.
Result<std::vector<std::string>> ModelList(const json& v, const std::string& path) {
  std::vector<std::string> models;
  if (v.is_string()) {
    models.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxGpuModels) {
      return FieldError(path, "at most " + std::to_string(kMaxGpuModels) + " models, got " +
                                  std::to_string(v.size()));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      GP_ASSIGN_OR_RETURN(std::string model,
                          StringField(v[i], path + "[" + std::to_string(i) + "]"));
      models.push_back(std::move(model));
    }
  } else {
    return FieldError(path, "must be a string or a list of strings, got " + DescribeValue(v));
  }
  return models;
}

// "8.0", "8.6", 7.5 or 9: major.minor, stored as major * 10 + minor.
Result<int32_t> ComputeCapabilityField(const json& v) {
  constexpr std::string_view kPath = "resources.min_compute_capability";
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_number() && !v.is_number_float()) {
    text = v.dump();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() >= 0 &&
             v.get<double>() < 1000) {
    // The shortest text that reads back as the same double: 8.6 -> "8.6".
    text = v.dump();
  } else {
    return FieldError(kPath,
                      "must be a compute capability such as \"8.0\", got " + DescribeValue(v));
  }
  size_t dot = text.find('.');
  std::string_view major = std::string_view(text).substr(0, dot);
  std::string_view minor =
      dot == std::string::npos ? std::string_view("0") : std::string_view(text).substr(dot + 1);
  auto digits = [](std::string_view d) {
    return !d.empty() &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(major) || major.size() > 2 || !digits(minor) || minor.size() != 1) {
    return FieldError(kPath,
                      "must be MAJOR.MINOR with one minor digit, such as \"8.0\" or \"8.6\", got " +
                          DescribeValue(v));
  }
  int32_t cc = std::stoi(std::string(major)) * 10 + (minor[0] - '0');
  if (cc < 10 || cc > kMaxComputeCapability) {
    return FieldError(kPath, "must be from 1.0 to 99.9, got " + DescribeValue(v));
  }
  return cc;
}

Status CheckLabel(const std::string& key, const std::string& value) {
  if (key.size() > kMaxLabelKeyChars) {
    return FieldError("resources.node_labels",
                      "label name " + QuoteForError(key) + " is " + std::to_string(key.size()) +
                          " characters long, at most " + std::to_string(kMaxLabelKeyChars));
  }
  std::string path = "resources.node_labels." + key;
  bool ok = !key.empty();
  for (char c : key) {
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-' || c == '/');
  }
  if (!ok) {
    return FieldError(path, "invalid label name (1 to " + std::to_string(kMaxLabelKeyChars) +
                                " characters of A-Z, a-z, 0-9, '.', '_', '-' and '/')");
  }
  if (value.size() > kMaxLabelValueChars) {
    return FieldError(path, "at most " + std::to_string(kMaxLabelValueChars) + " characters");
  }
  return CheckText(path, value);
}

Status ParseNodeLabels(const json& v, Resources& out) {
  constexpr std::string_view kPath = "resources.node_labels";
  if (!v.is_object())
    return FieldError(kPath, "expected a mapping of label: value, got " + DescribeValue(v));
  if (v.size() > kMaxNodeLabels) {
    return FieldError(kPath, "at most " + std::to_string(kMaxNodeLabels) + " labels, got " +
                                 std::to_string(v.size()));
  }
  for (const auto& [key, value] : v.items()) {
    if (key.size() > kMaxLabelKeyChars) return CheckLabel(key, "");
    std::string path = std::string(kPath) + "." + key;
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_boolean() || (value.is_number() && !value.is_number_float())) {
      text = value.dump();  // rack: 3 means "3"
    } else {
      std::string hint = value.is_number_float() ? " (quote it: \"" + value.dump() + "\")" : "";
      return FieldError(path, "must be a string, got " + DescribeValue(value) + hint);
    }
    GP_RETURN_IF_ERROR(CheckLabel(key, text));
    out.node_labels[key] = std::move(text);
  }
  return Status::Ok();
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

Status ParsePrefer(const json& v, Resources& out) {
  if (!v.is_object()) {
    return FieldError(
        "resources.prefer",
        "expected a mapping such as {models: [A100], wait: 10m}, got " + DescribeValue(v));
  }
  GP_RETURN_IF_ERROR(CheckKnownFields(v, "resources.prefer.", kPreferFields));
  const json* models = Field(v, "models");
  if (models == nullptr) return FieldError("resources.prefer.models", "is required");
  GP_ASSIGN_OR_RETURN(out.preferred_models, ModelList(*models, "resources.prefer.models"));
  if (out.preferred_models.empty())
    return FieldError("resources.prefer.models", "must not be empty");
  out.prefer_wait_ms = kDefaultPreferWaitMs;
  if (const json* w = Field(v, "wait")) {
    GP_ASSIGN_OR_RETURN(out.prefer_wait_ms,
                        DurationField(*w, "resources.prefer.wait", kMaxPreferWaitSeconds));
  }
  return Status::Ok();
}

Status ParseCheckpoint(const json& v, CheckpointSpec& out) {
  if (!v.is_object()) {
    return FieldError("checkpoint", "expected a mapping such as {interval: 30m, grace: 60s}, got " +
                                        DescribeValue(v));
  }
  GP_RETURN_IF_ERROR(CheckKnownFields(v, "checkpoint.", kCheckpointFields));
  if (const json* i = Field(v, "interval")) {
    GP_ASSIGN_OR_RETURN(out.interval_ms,
                        DurationField(*i, "checkpoint.interval", kMaxCheckpointIntervalSeconds));
  }
  if (const json* g = Field(v, "grace")) {
    GP_ASSIGN_OR_RETURN(out.grace_ms, DurationField(*g, "checkpoint.grace", kMaxGraceSeconds));
  }
  if (const json* s = Field(v, "signal")) {
    GP_ASSIGN_OR_RETURN(out.signal, StringField(*s, "checkpoint.signal"));
    // "USR1" is SIGUSR1.
    if (out.signal != "none" && !out.signal.starts_with("SIG")) out.signal = "SIG" + out.signal;
  }
  if (const json* s = Field(v, "standby")) {
    if (!s->is_boolean()) {
      return FieldError("checkpoint.standby", "must be true or false, got " + DescribeValue(*s));
    }
    out.standby = s->get<bool>();
  }
  return Status::Ok();
}

Status ParseSession(const json& v, SessionSpec& out) {
  if (!v.is_object()) {
    return FieldError(
        "session",
        "expected a mapping such as {kind: jupyter, idle_timeout: 30m}, got " + DescribeValue(v));
  }
  GP_RETURN_IF_ERROR(CheckKnownFields(v, "session.", kSessionFields));
  if (const json* k = Field(v, "kind")) {
    GP_ASSIGN_OR_RETURN(std::string text, StringField(*k, "session.kind"));
    auto kind = ParseSessionKind(text);
    if (!kind.ok())
      return FieldError("session.kind", "must be shell or jupyter, got " + QuoteForError(text));
    out.kind = *kind;
  }
  if (const json* t = Field(v, "idle_timeout")) {
    GP_ASSIGN_OR_RETURN(out.idle_timeout_ms,
                        DurationField(*t, "session.idle_timeout", kMaxSessionIdleSeconds));
  }
  if (const json* p = Field(v, "ports")) {
    if (!p->is_array()) {
      return FieldError("session.ports",
                        "must be a list of TCP ports such as [6006], got " + DescribeValue(*p));
    }
    if (p->size() > kMaxSessionPorts) {
      return FieldError("session.ports", "at most " + std::to_string(kMaxSessionPorts) +
                                             " ports, got " + std::to_string(p->size()));
    }
    for (size_t i = 0; i < p->size(); ++i) {
      const json& port = (*p)[i];
      if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535) {
        return FieldError("session.ports[" + std::to_string(i) + "]",
                          "must be a TCP port from 1 to 65535, got " + DescribeValue(port));
      }
      out.ports.push_back(static_cast<int>(port.get<int64_t>()));
    }
  }
  if (const json* a = Field(v, "any_port")) {
    if (!a->is_boolean()) {
      return FieldError("session.any_port", "must be true or false, got " + DescribeValue(*a));
    }
    out.any_port = a->get<bool>();
  }
  if (const json* t = Field(v, "jupyter_token")) {
    GP_ASSIGN_OR_RETURN(out.jupyter_token, StringField(*t, "session.jupyter_token"));
  }
  return Status::Ok();
}

Status ParseResources(const json& j, Resources& out) {
  if (!j.is_object()) return FieldError("resources", "expected a mapping, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "resources.", kResourceFields));
  if (const json* v = Field(j, "gpus")) GP_RETURN_IF_ERROR(ParseGpus(*v, out));
  if (const json* v = Field(j, "gpu_memory")) {
    GP_ASSIGN_OR_RETURN(out.gpu_memory_mib, SizeField(*v, "resources.gpu_memory"));
    GP_RETURN_IF_ERROR(
        CheckMebibytes("resources.gpu_memory", out.gpu_memory_mib, kMaxGpuMemoryMib));
  }
  if (const json* v = Field(j, "gpu_models")) {
    GP_ASSIGN_OR_RETURN(out.gpu_models, ModelList(*v, "resources.gpu_models"));
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
  if (const json* v = Field(j, "disk")) {
    GP_ASSIGN_OR_RETURN(out.disk_mib, SizeField(*v, "resources.disk"));
    GP_RETURN_IF_ERROR(CheckMebibytes("resources.disk", out.disk_mib, kMaxDiskMib));
  }
  if (const json* v = Field(j, "min_compute_capability")) {
    GP_ASSIGN_OR_RETURN(out.min_compute_capability, ComputeCapabilityField(*v));
  }
  if (const json* v = Field(j, "node_labels")) GP_RETURN_IF_ERROR(ParseNodeLabels(*v, out));
  if (const json* v = Field(j, "prefer")) GP_RETURN_IF_ERROR(ParsePrefer(*v, out));
  if (const json* v = Field(j, "nodes")) {
    bool whole = v->is_number_integer() &&
                 (v->is_number_unsigned() ? v->get<uint64_t>() <= uint64_t{kMaxNodes}
                                          : v->get<int64_t>() <= kMaxNodes);
    if (!whole) {
      return FieldError("resources.nodes", "must be a whole number of nodes from 1 to " +
                                               std::to_string(kMaxNodes) + ", got " +
                                               DescribeValue(*v));
    }
    out.nodes = static_cast<int32_t>(v->get<int64_t>());
  }
  return Status::Ok();
}

Status ParseEnv(const json& j, std::map<std::string, std::string>& out, const SpecLimits& limits) {
  if (!j.is_object())
    return FieldError("env", "expected a mapping of NAME: value, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckEnvCount(j.size(), limits));
  size_t total = 0;
  for (const auto& [name, value] : j.items()) {
    GP_RETURN_IF_ERROR(CheckEnvName(name));
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      text = value.dump();
    } else {
      return FieldError("env." + name,
                        "must be a string, number or boolean, got " + DescribeValue(value));
    }
    GP_RETURN_IF_ERROR(CheckEnvValueBytes(name, text.size(), limits));
    total += name.size() + text.size();
    out[name] = std::move(text);
  }
  return CheckEnvBytes(total, limits);
}

}  // namespace

Result<JobSpec> ParseJobSpec(std::string_view text) {
  YamlOptions options;
  options.what = "spec";
  options.max_bytes = kMaxSpecBytes;
  options.empty_message = "empty spec; expected a mapping with run or command";
  options.text_valued_keys = {"env"};
  YamlLines lines;
  GP_ASSIGN_OR_RETURN(json j, ParseYamlDocument(text, options, &lines));
  auto spec = JobSpecFromJson(j);
  if (!spec.ok()) return WithLine(spec.status(), lines);
  return spec;
}

Result<JobSpec> JobSpecFromJson(const json& j, const SpecLimits& limits) {
  if (!j.is_object()) return FieldError("", "expected a mapping, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "", kTopFields));
  JobSpec spec;
  spec.name = "job";
  if (const json* v = Field(j, "name")) {
    GP_ASSIGN_OR_RETURN(spec.name, StringField(*v, "name"));
  }
  const json* run = Field(j, "run");
  const json* command = Field(j, "command");
  if (run && command) return FieldError("run/command", "give run or command, not both");
  if (run) {
    GP_ASSIGN_OR_RETURN(spec.run, StringField(*run, "run"));
    if (spec.run.empty()) return FieldError("run", "must not be empty");
  }
  if (command) {
    if (!command->is_array()) {
      return FieldError("command", "must be a list of strings (use run for a shell command), got " +
                                       DescribeValue(*command));
    }
    if (command->empty()) return FieldError("command", "must not be empty");
    GP_RETURN_IF_ERROR(CheckCommandArgs(command->size(), limits));
    size_t total = 0;
    for (const json& arg : *command)
      total += arg.is_string() ? arg.get_ref<const std::string&>().size() : 0;
    GP_RETURN_IF_ERROR(CheckCommandBytes(total, limits));
    for (size_t i = 0; i < command->size(); ++i) {
      GP_ASSIGN_OR_RETURN(std::string arg,
                          StringField((*command)[i], "command[" + std::to_string(i) + "]"));
      spec.command.push_back(std::move(arg));
    }
  }
  if (const json* v = Field(j, "env")) GP_RETURN_IF_ERROR(ParseEnv(*v, spec.env, limits));
  if (const json* v = Field(j, "image")) {
    GP_ASSIGN_OR_RETURN(spec.image, StringField(*v, "image"));
  }
  if (const json* v = Field(j, "executor")) {
    GP_ASSIGN_OR_RETURN(spec.executor, StringField(*v, "executor"));
  }
  if (const json* v = Field(j, "network")) {
    if (v->is_boolean()) {
      spec.network = v->get<bool>() ? NetworkMode::kPrivate : NetworkMode::kNone;
    } else if (v->is_string() && v->get<std::string>() == "host") {
      spec.network = NetworkMode::kHost;
    } else {
      return FieldError("network", "must be true, false or \"host\", got " + DescribeValue(*v));
    }
  }
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
      return FieldError(
          "max_runtime",
          "must be a duration such as \"2h\" or a number of seconds, got " + DescribeValue(*v));
    }
  }
  if (const json* v = Field(j, "priority")) {
    GP_ASSIGN_OR_RETURN(std::string text, StringField(*v, "priority"));
    auto p = ParseJobPriority(text);
    if (!p.ok()) return p.status().WithContext("priority");
    spec.priority = *p;
  }
  if (const json* v = Field(j, "group")) {
    GP_ASSIGN_OR_RETURN(spec.group, StringField(*v, "group"));
  }
  if (const json* v = Field(j, "checkpoint")) {
    CheckpointSpec checkpoint;
    GP_RETURN_IF_ERROR(ParseCheckpoint(*v, checkpoint));
    spec.checkpoint = std::move(checkpoint);
  }
  if (const json* v = Field(j, "workdir")) {
    GP_ASSIGN_OR_RETURN(spec.workdir, StringField(*v, "workdir"));
    if (spec.workdir.empty()) return FieldError("workdir", "must not be empty");
  }
  if (const json* v = Field(j, "inputs")) {
    GP_ASSIGN_OR_RETURN(spec.inputs, StringField(*v, "inputs"));
  }
  if (const json* v = Field(j, "max_restarts")) {
    bool ok = v->is_number_unsigned()  ? v->get<uint64_t>() <= uint64_t{kMaxRestarts}
              : v->is_number_integer() ? v->get<int64_t>() >= 0 && v->get<int64_t>() <= kMaxRestarts
                                       : false;
    if (!ok) {
      return FieldError("max_restarts", "must be a whole number from 0 to " +
                                            std::to_string(kMaxRestarts) + ", got " +
                                            DescribeValue(*v));
    }
    spec.max_restarts = static_cast<int32_t>(v->get<int64_t>());
  }
  if (const json* v = Field(j, "distributed")) {
    GP_ASSIGN_OR_RETURN(std::string text, StringField(*v, "distributed"));
    auto d = ParseDistributed(text);
    if (!d.ok())
      return FieldError("distributed", "must be torch or none, got " + QuoteForError(text));
    spec.distributed = *d;
  }
  if (const json* v = Field(j, "session")) {
    SessionSpec session;
    GP_RETURN_IF_ERROR(ParseSession(*v, session));
    spec.session = std::move(session);
    // A session waits for its user: it is interactive unless it says.
    if (!Field(j, "priority")) spec.priority = JobPriority::kInteractive;
    if (spec.run.empty() && spec.command.empty()) spec.run = DefaultSessionCommand(*spec.session);
  }
  GP_RETURN_IF_ERROR(ValidateJobSpec(spec, limits));
  return spec;
}

std::string DefaultSessionCommand(const SessionSpec& session) {
  if (session.kind == SessionKind::kJupyter) {
    // The agent gives the socket and the token (GPUPOOL_JUPYTER_SOCKET,
    // JUPYTER_TOKEN); the server's proxy serves it under base_url.
    return "exec jupyter notebook --no-browser --sock=\"$GPUPOOL_JUPYTER_SOCKET\" "
           "--NotebookApp.base_url=\"/v1/sessions/$GPUPOOL_JOB_ID/proxy/\" "
           "--NotebookApp.allow_remote_access=True";
  }
  // A shell session's own process only keeps it alive; users come in with
  // gpupool shell and exec.
  return "while :; do sleep 3600; done";
}

Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits) {
  if (!IsValidName(spec.name)) {
    return FieldError("name", "must be 1 to " + std::to_string(kMaxNameChars) +
                                  " characters of A-Z, a-z, 0-9, '.', '_' and '-', got " +
                                  QuoteForError(spec.name));
  }
  bool has_run = !spec.run.empty();
  bool has_command = !spec.command.empty();
  if (has_run && has_command) return FieldError("run/command", "give run or command, not both");
  if (!has_run && !has_command && spec.image.empty()) {
    return FieldError("run/command",
                      "one of run or command is required (only a job with an image may leave "
                      "both out, to run the image's own command)");
  }
  if (!spec.image.empty()) {
    auto ref = ParseImageRef(spec.image);
    if (!ref.ok()) return ref.status().WithContext("image");
  }
  if (!spec.executor.empty() && std::find(std::begin(kExecutorNames), std::end(kExecutorNames),
                                          spec.executor) == std::end(kExecutorNames)) {
    return FieldError("executor", "unknown executor " + QuoteForError(spec.executor) +
                                      " (one of: sandbox, process, docker, podman)");
  }
  if (spec.executor == "process" && !spec.image.empty()) {
    return FieldError("executor", "the process executor cannot run an image (use sandbox)");
  }
  if ((spec.executor == "docker" || spec.executor == "podman") && spec.image.empty()) {
    return FieldError("image",
                      "the " + spec.executor + " executor needs an image (image: docker://...)");
  }
  if (has_run) {
    if (spec.run.find_first_not_of(" \t\r\n") == std::string::npos) {
      return FieldError("run", "must not be blank");
    }
    GP_RETURN_IF_ERROR(CheckRunBytes(spec.run.size(), limits));
    GP_RETURN_IF_ERROR(CheckText("run", spec.run));
  }
  if (has_command) {
    GP_RETURN_IF_ERROR(CheckCommandArgs(spec.command.size(), limits));
    size_t total = 0;
    for (const std::string& arg : spec.command) total += arg.size();
    GP_RETURN_IF_ERROR(CheckCommandBytes(total, limits));
    if (spec.command[0].empty()) return FieldError("command[0]", "the program must not be empty");
    for (size_t i = 0; i < spec.command.size(); ++i) {
      GP_RETURN_IF_ERROR(CheckText("command[" + std::to_string(i) + "]", spec.command[i]));
    }
  }
  GP_RETURN_IF_ERROR(CheckEnvCount(spec.env.size(), limits));
  size_t env_bytes = 0;
  for (const auto& [name, value] : spec.env) {
    GP_RETURN_IF_ERROR(CheckEnvName(name));
    GP_RETURN_IF_ERROR(CheckEnvValueBytes(name, value.size(), limits));
    GP_RETURN_IF_ERROR(CheckText("env." + name, value));
    env_bytes += name.size() + value.size();
  }
  GP_RETURN_IF_ERROR(CheckEnvBytes(env_bytes, limits));
  const Resources& r = spec.resources;
  GP_RETURN_IF_ERROR(CheckGpus(r.gpus, r.gpu_milli));
  GP_RETURN_IF_ERROR(CheckMebibytes("resources.gpu_memory", r.gpu_memory_mib, kMaxGpuMemoryMib));
  if (r.gpu_models.size() > kMaxGpuModels) {
    return FieldError("resources.gpu_models", "at most " + std::to_string(kMaxGpuModels) +
                                                  " models, got " +
                                                  std::to_string(r.gpu_models.size()));
  }
  for (size_t i = 0; i < r.gpu_models.size(); ++i) {
    const std::string& model = r.gpu_models[i];
    std::string path = "resources.gpu_models[" + std::to_string(i) + "]";
    if (model.find_first_not_of(" \t") == std::string::npos) {
      return FieldError(path, "must not be empty");
    }
    if (model.size() > kMaxGpuModelChars) {
      return FieldError(path, "at most " + std::to_string(kMaxGpuModelChars) + " characters");
    }
    GP_RETURN_IF_ERROR(CheckText(path, model));
  }
  GP_RETURN_IF_ERROR(CheckCpuMilli(r.cpu_milli));
  GP_RETURN_IF_ERROR(CheckMebibytes("resources.memory", r.memory_mib, kMaxMemoryMib));
  GP_RETURN_IF_ERROR(CheckMebibytes("resources.disk", r.disk_mib, kMaxDiskMib));
  if (r.min_compute_capability != 0 &&
      (r.min_compute_capability < 10 || r.min_compute_capability > kMaxComputeCapability)) {
    return FieldError("resources.min_compute_capability",
                      "must be from 1.0 to 99.9, got " + std::to_string(r.min_compute_capability) +
                          " (major * 10 + minor)");
  }
  if (r.node_labels.size() > kMaxNodeLabels) {
    return FieldError("resources.node_labels", "at most " + std::to_string(kMaxNodeLabels) +
                                                   " labels, got " +
                                                   std::to_string(r.node_labels.size()));
  }
  for (const auto& [key, value] : r.node_labels) GP_RETURN_IF_ERROR(CheckLabel(key, value));
  if (r.preferred_models.size() > kMaxGpuModels) {
    return FieldError("resources.prefer.models", "at most " + std::to_string(kMaxGpuModels) +
                                                     " models, got " +
                                                     std::to_string(r.preferred_models.size()));
  }
  for (size_t i = 0; i < r.preferred_models.size(); ++i) {
    const std::string& model = r.preferred_models[i];
    std::string path = "resources.prefer.models[" + std::to_string(i) + "]";
    if (model.find_first_not_of(" \t") == std::string::npos)
      return FieldError(path, "must not be empty");
    if (model.size() > kMaxGpuModelChars) {
      return FieldError(path, "at most " + std::to_string(kMaxGpuModelChars) + " characters");
    }
    GP_RETURN_IF_ERROR(CheckText(path, model));
    // A preferred model must be allowed: "A100-SXM4-80GB" is an "A100".
    bool allowed = r.gpu_models.empty() ||
                   std::any_of(r.gpu_models.begin(), r.gpu_models.end(),
                               [&](const std::string& m) { return GpuModelMatches(model, m); });
    if (!allowed) {
      return FieldError(path, QuoteForError(model) + " is not one of resources.gpu_models");
    }
  }
  if (r.preferred_models.empty() && r.prefer_wait_ms != 0) {
    return FieldError("resources.prefer.models", "is required with resources.prefer.wait");
  }
  GP_RETURN_IF_ERROR(
      CheckDurationMs("resources.prefer.wait", r.prefer_wait_ms, 0, kMaxPreferWaitSeconds));
  GP_RETURN_IF_ERROR(CheckRuntimeMs(spec.max_runtime_ms));
  if (r.nodes < 1 || r.nodes > kMaxNodes) {
    return FieldError("resources.nodes", "must be from 1 to " + std::to_string(kMaxNodes) +
                                             ", got " + std::to_string(r.nodes));
  }
  if (spec.max_restarts < 0 || spec.max_restarts > kMaxRestarts) {
    return FieldError("max_restarts", "must be from 0 to " + std::to_string(kMaxRestarts) +
                                          ", got " + std::to_string(spec.max_restarts));
  }
  if (r.nodes > 1 && spec.network == NetworkMode::kNone) {
    return FieldError("network",
                      "a multi-node job needs the network: its ranks talk to each other");
  }
  if (r.nodes > 1 && spec.distributed == Distributed::kTorch) {
    for (const char* name : kTorchRendezvousEnv) {
      if (spec.env.count(name)) {
        return FieldError("env." + std::string(name),
                          "reserved in a multi-node torch job (the agent sets the rendezvous)");
      }
    }
  }
  if (r.nodes > 1 && r.gpu_milli > 0) {
    return FieldError("resources.nodes",
                      "a multi-node job takes whole GPUs on each node, not a share of one");
  }
  if (static_cast<int>(spec.distributed) < 0 || static_cast<int>(spec.distributed) > 1) {
    return FieldError("distributed", "must be torch or none");
  }
  if (static_cast<int>(spec.priority) < 0 || static_cast<int>(spec.priority) > 2) {
    return FieldError("priority", "must be interactive, normal or opportunistic");
  }
  if (!IsValidName(spec.group)) {
    return FieldError("group", "must be 1 to " + std::to_string(kMaxNameChars) +
                                   " characters of A-Z, a-z, 0-9, '.', '_' and '-', got " +
                                   QuoteForError(spec.group));
  }
  if (spec.workdir.size() > kMaxWorkdirBytes) {
    return FieldError("workdir", "at most " + std::to_string(kMaxWorkdirBytes) + " bytes, got " +
                                     std::to_string(spec.workdir.size()));
  }
  // A path: a NUL would cut it short in every system call.
  GP_RETURN_IF_ERROR(CheckText("workdir", spec.workdir));
  if (!spec.inputs.empty() && !IsSha256Hex(spec.inputs)) {
    return FieldError("inputs", "must be a manifest id (64 lowercase hex digits), got " +
                                    QuoteForError(spec.inputs));
  }
  if (spec.session) {
    const SessionSpec& ss = *spec.session;
    if (r.nodes > 1) return FieldError("session", "a session runs on one node");
    if (ss.kind != SessionKind::kShell && ss.kind != SessionKind::kJupyter)
      return FieldError("session.kind", "must be shell or jupyter");
    if (ss.idle_timeout_ms != 0) {
      GP_RETURN_IF_ERROR(
          CheckDurationMs("session.idle_timeout", ss.idle_timeout_ms, 1, kMaxSessionIdleSeconds));
    }
    if (ss.ports.size() > kMaxSessionPorts) {
      return FieldError("session.ports", "at most " + std::to_string(kMaxSessionPorts) +
                                             " ports, got " + std::to_string(ss.ports.size()));
    }
    for (size_t i = 0; i < ss.ports.size(); ++i) {
      if (ss.ports[i] < 1 || ss.ports[i] > 65535) {
        return FieldError("session.ports[" + std::to_string(i) + "]",
                          "must be a TCP port from 1 to 65535, got " + std::to_string(ss.ports[i]));
      }
    }
    if (ss.jupyter_token.size() > kMaxJupyterTokenBytes) {
      return FieldError("session.jupyter_token",
                        "at most " + std::to_string(kMaxJupyterTokenBytes) + " bytes");
    }
    GP_RETURN_IF_ERROR(CheckText("session.jupyter_token", ss.jupyter_token));
  }
  if (spec.checkpoint) {
    const CheckpointSpec& c = *spec.checkpoint;
    if (c.interval_ms != 0) {
      GP_RETURN_IF_ERROR(CheckDurationMs("checkpoint.interval", c.interval_ms,
                                         kMinCheckpointIntervalSeconds,
                                         kMaxCheckpointIntervalSeconds));
    }
    GP_RETURN_IF_ERROR(CheckDurationMs("checkpoint.grace", c.grace_ms, 1, kMaxGraceSeconds));
    bool known = c.signal == "none";
    for (const char* sig : kCheckpointSignals) known = known || c.signal == sig;
    if (!known) {
      return FieldError("checkpoint.signal",
                        "unknown signal " + QuoteForError(c.signal) + " (one of: none, " +
                            Join(std::begin(kCheckpointSignals), std::end(kCheckpointSignals)) +
                            ")");
    }
  }
  return Status::Ok();
}

nlohmann::json JobSpecToJson(const JobSpec& spec) {
  json j = json::object();
  j["name"] = spec.name;
  if (!spec.run.empty()) j["run"] = spec.run;
  if (!spec.command.empty()) j["command"] = spec.command;
  if (!spec.env.empty()) j["env"] = spec.env;
  if (!spec.image.empty()) j["image"] = spec.image;
  if (!spec.executor.empty()) j["executor"] = spec.executor;
  if (spec.network == NetworkMode::kNone) j["network"] = false;
  if (spec.network == NetworkMode::kHost) j["network"] = "host";
  const Resources& r = spec.resources;
  json res = json::object();
  // A share is written as a fraction (0.5), which reads back exactly.
  if (r.gpu_milli > 0) {
    res["gpus"] = static_cast<double>(r.gpu_milli) / 1000.0;
  } else {
    res["gpus"] = r.gpus;
  }
  if (r.gpu_memory_mib != 0) res["gpu_memory"] = ExactMebibytes(r.gpu_memory_mib);
  if (!r.gpu_models.empty()) res["gpu_models"] = r.gpu_models;
  if (r.cpu_milli != 0) res["cpus"] = FormatMilli(r.cpu_milli);
  if (r.memory_mib != 0) res["memory"] = ExactMebibytes(r.memory_mib);
  if (r.disk_mib != 0) res["disk"] = ExactMebibytes(r.disk_mib);
  if (r.min_compute_capability != 0) {
    res["min_compute_capability"] = ComputeCapabilityText(r.min_compute_capability);
  }
  if (!r.node_labels.empty()) res["node_labels"] = r.node_labels;
  if (!r.preferred_models.empty()) {
    res["prefer"] = {{"models", r.preferred_models}, {"wait", ExactDuration(r.prefer_wait_ms)}};
  }
  if (r.nodes != 1) res["nodes"] = r.nodes;
  j["resources"] = std::move(res);
  if (spec.max_runtime_ms != 0) j["max_runtime"] = ExactDuration(spec.max_runtime_ms);
  if (spec.priority != JobPriority::kNormal) j["priority"] = JobPriorityName(spec.priority);
  if (spec.group != "default") j["group"] = spec.group;
  if (spec.checkpoint) {
    json c = json::object();
    if (spec.checkpoint->interval_ms != 0) {
      c["interval"] = ExactDuration(spec.checkpoint->interval_ms);
    }
    c["grace"] = ExactDuration(spec.checkpoint->grace_ms);
    c["signal"] = spec.checkpoint->signal;
    if (spec.checkpoint->standby) c["standby"] = true;
    j["checkpoint"] = std::move(c);
  }
  if (!spec.workdir.empty()) j["workdir"] = spec.workdir;
  if (!spec.inputs.empty()) j["inputs"] = spec.inputs;
  if (spec.distributed != Distributed::kTorch) j["distributed"] = DistributedName(spec.distributed);
  if (spec.max_restarts != 0) j["max_restarts"] = spec.max_restarts;
  if (spec.session) {
    const SessionSpec& ss = *spec.session;
    json sj = {{"kind", SessionKindName(ss.kind)},
               {"idle_timeout",
                ss.idle_timeout_ms == 0 ? json(0) : json(ExactDuration(ss.idle_timeout_ms))}};
    if (!ss.ports.empty()) sj["ports"] = ss.ports;
    if (ss.any_port) sj["any_port"] = true;
    if (!ss.jupyter_token.empty()) sj["jupyter_token"] = ss.jupyter_token;
    j["session"] = std::move(sj);
    // Written out, so that reading it back keeps a priority set otherwise.
    j["priority"] = JobPriorityName(spec.priority);
  }
  return j;
}

}  // namespace gpupool
