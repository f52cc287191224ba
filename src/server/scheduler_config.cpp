#include "server/scheduler_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "common/files.h"
#include "common/units.h"
#include "model/yaml.h"

namespace gpupool::server {
namespace {

using nlohmann::json;

constexpr int64_t kMaxHalfLifeSeconds = 365LL * 24 * 3600;
constexpr int64_t kMaxWindowSeconds = 30LL * 24 * 3600;
constexpr int64_t kMaxWeight = 1'000'000;
constexpr int64_t kMaxGuaranteedGpus = 1'000'000;
constexpr int64_t kMaxReservations = 1000;
constexpr int64_t kMaxCandidates = 1000;
constexpr double kMaxModelSpeed = 1000;
constexpr size_t kMaxGroupNameChars = 128;

constexpr const char* kTopFields[] = {
    "half_life",  "anti_thrash_window", "groups",   "model_speed", "backfill_reservations",
    "preemption", "candidates",         "placement"};
constexpr const char* kGroupFields[] = {"weight", "guaranteed_gpus"};

// The value of an integer JSON number that fits in int64, or nullopt.
std::optional<int64_t> IntValue(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

// A duration as text ("7d", "30m") or a number of seconds, in [0, max].
Result<int64_t> Duration(const json& v, const std::string& path, int64_t max_seconds) {
  int64_t ms = 0;
  if (v.is_string()) {
    auto parsed = ParseDurationMs(v.get_ref<const std::string&>());
    if (!parsed.ok()) return parsed.status().WithContext(path);
    ms = *parsed;
  } else if (v.is_number_integer()) {
    auto n = IntValue(v);
    if (!n || *n < 0 || *n > max_seconds) {
      return FieldError(path, "must be from 0 to " + FormatDurationMs(max_seconds * 1000) +
                                  ", got " + DescribeValue(v));
    }
    ms = *n * 1000;
  } else {
    return FieldError(path,
                      "must be a duration such as \"7d\" or \"30m\", got " + DescribeValue(v));
  }
  if (ms < 0 || ms > max_seconds * 1000) {
    return FieldError(path, "must be from 0 to " + FormatDurationMs(max_seconds * 1000) + ", got " +
                                FormatDurationMs(ms));
  }
  return ms;
}

Result<int64_t> Integer(const json& v, const std::string& path, int64_t min, int64_t max) {
  auto n = IntValue(v);
  if (!n || *n < min || *n > max) {
    return FieldError(path, "must be an integer from " + std::to_string(min) + " to " +
                                std::to_string(max) + ", got " + DescribeValue(v));
  }
  return *n;
}

// GPUs as thousandths: 4 -> 4000, 0.5 -> 500 (at most three decimals).
Result<int64_t> GpuMilli(const json& v, const std::string& path) {
  std::string range = "must be a number of GPUs from 0 to " + std::to_string(kMaxGuaranteedGpus) +
                      " with at most three decimals, got " + DescribeValue(v);
  if (!v.is_number()) return FieldError(path, range);
  double d = v.get<double>();
  if (!std::isfinite(d) || d < 0 || d > static_cast<double>(kMaxGuaranteedGpus)) {
    return FieldError(path, range);
  }
  int64_t milli = std::llround(d * 1000.0);
  if (static_cast<double>(milli) / 1000.0 != d) return FieldError(path, range);
  return milli;
}

bool IsValidGroupName(const std::string& name) {
  if (name.empty() || name.size() > kMaxGroupNameChars) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status ParseGroups(const json& v, sched::SchedulerConfig& out) {
  if (!v.is_object()) {
    return FieldError("groups",
                      "expected a mapping such as {vision: {weight: 2}}, got " + DescribeValue(v));
  }
  for (const auto& [name, g] : v.items()) {
    std::string path = "groups." + name;
    if (!IsValidGroupName(name)) {
      return FieldError(path,
                        "invalid group name (1 to 128 characters of A-Z, a-z, 0-9, '.', '_' "
                        "and '-')");
    }
    sched::GroupConfig group;
    group.name = name;
    if (!g.is_null()) {
      if (!g.is_object()) {
        return FieldError(path, "expected a mapping such as {weight: 2, guaranteed_gpus: 4}, got " +
                                    DescribeValue(g));
      }
      GP_RETURN_IF_ERROR(CheckKnownFields(g, path + ".", kGroupFields));
      if (auto it = g.find("weight"); it != g.end() && !it->is_null()) {
        GP_ASSIGN_OR_RETURN(group.weight, Integer(*it, path + ".weight", 1, kMaxWeight));
      }
      if (auto it = g.find("guaranteed_gpus"); it != g.end() && !it->is_null()) {
        GP_ASSIGN_OR_RETURN(group.guaranteed_milli, GpuMilli(*it, path + ".guaranteed_gpus"));
      }
    }
    out.groups.push_back(std::move(group));
  }
  return Status::Ok();
}

Status ParseModelSpeed(const json& v, sched::SchedulerConfig& out) {
  if (!v.is_object()) {
    return FieldError("model_speed",
                      "expected a mapping such as {A100: 2.0, T4: 0.5}, got " + DescribeValue(v));
  }
  for (const auto& [model, speed] : v.items()) {
    std::string path = "model_speed." + model;
    if (model.find_first_not_of(" \t") == std::string::npos) {
      return FieldError(path, "the model name must not be empty");
    }
    if (!speed.is_number() || !std::isfinite(speed.get<double>()) || speed.get<double>() <= 0 ||
        speed.get<double>() > kMaxModelSpeed) {
      return FieldError(path, "must be a number above 0 and at most 1000 (1.0 = ordinary), got " +
                                  DescribeValue(speed));
    }
    out.model_speed[model] = speed.get<double>();
  }
  return Status::Ok();
}

// The config in a parsed document; errors name the field path.
Result<sched::SchedulerConfig> ConfigFromJson(const json& j) {
  if (!j.is_object()) return FieldError("", "expected a mapping, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "", kTopFields));
  sched::SchedulerConfig config;
  auto field = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("half_life")) {
    GP_ASSIGN_OR_RETURN(config.half_life_ms, Duration(*v, "half_life", kMaxHalfLifeSeconds));
  }
  if (const json* v = field("anti_thrash_window")) {
    GP_ASSIGN_OR_RETURN(config.anti_thrash_window_ms,
                        Duration(*v, "anti_thrash_window", kMaxWindowSeconds));
  }
  if (const json* v = field("groups")) GP_RETURN_IF_ERROR(ParseGroups(*v, config));
  if (const json* v = field("model_speed")) GP_RETURN_IF_ERROR(ParseModelSpeed(*v, config));
  if (const json* v = field("backfill_reservations")) {
    GP_ASSIGN_OR_RETURN(int64_t n, Integer(*v, "backfill_reservations", 0, kMaxReservations));
    config.max_reservations = static_cast<int32_t>(n);
  }
  if (const json* v = field("candidates")) {
    GP_ASSIGN_OR_RETURN(int64_t n, Integer(*v, "candidates", 1, kMaxCandidates));
    config.candidates = static_cast<int32_t>(n);
  }
  if (const json* v = field("placement")) {
    if (!v->is_string()) return FieldError("placement", "must be a name, got " + DescribeValue(*v));
    auto p = sched::ParsePlacementScore(v->get<std::string>());
    if (!p.ok()) return FieldError("placement", p.status().message());
    config.placement = *p;
  }
  if (const json* v = field("preemption")) {
    if (!v->is_boolean())
      return FieldError("preemption", "must be true or false, got " + DescribeValue(*v));
    config.preemption = v->get<bool>();
  }
  return config;
}

}  // namespace

Result<sched::SchedulerConfig> ParseSchedulerConfig(std::string_view text) {
  YamlOptions options;
  options.what = "scheduler config";
  options.empty_message = "empty scheduler config; expected a mapping such as {half_life: 7d}";
  YamlLines lines;
  GP_ASSIGN_OR_RETURN(json j, ParseYamlDocument(text, options, &lines));
  auto config = ConfigFromJson(j);
  if (!config.ok()) return WithLine(config.status(), lines);
  return config;
}

Result<sched::SchedulerConfig> LoadSchedulerConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return Status::InvalidArgument(text.status().message());
  auto config = ParseSchedulerConfig(*text);
  if (!config.ok()) return config.status().WithContext(path);
  return config;
}

}  // namespace gpupool::server
