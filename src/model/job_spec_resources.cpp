// See job_spec_resources.h. Moved out of job_spec.cpp.
#include "model/job_spec_resources.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"
#include "model/spec_fields.h"
#include "model/yaml.h"

namespace gpupool {
namespace {

using nlohmann::json;
using namespace spec_fields;  // NOLINT: the spec's shared field helpers

constexpr size_t kMaxGpuModels = 32;
constexpr size_t kMaxGpuModelChars = 128;
constexpr int64_t kMaxGpus = 64;
constexpr int64_t kMaxGpuMemoryMib = int64_t{1} << 20;  // 1 TiB
constexpr int64_t kMaxCpus = 1024;
constexpr int64_t kMaxMemoryMib = int64_t{64} << 20;  // 64 TiB
constexpr int64_t kMaxDiskMib = int64_t{1024} << 20;  // 1 PiB
constexpr size_t kMaxNodeLabels = 64;
constexpr size_t kMaxLabelKeyChars = 128;
constexpr size_t kMaxLabelValueChars = 256;
constexpr int32_t kMaxComputeCapability = 99 * 10 + 9;  // "99.9"
constexpr int64_t kMaxPreferWaitSeconds = 7LL * 24 * 3600;
constexpr int64_t kDefaultPreferWaitMs = 10LL * 60 * 1000;
constexpr int32_t kMaxNodes = 256;  // ranks of one multi-node job
constexpr const char* kResourceFields[] = {
    "gpus",        "gpu_memory", "gpu_models", "cpus",  "memory", "min_compute_capability",
    "node_labels", "prefer",     "disk",       "nodes", "mig"};
constexpr const char* kPreferFields[] = {"models", "wait"};

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

// "8.6" for 86.
std::string ComputeCapabilityText(int32_t cc) {
  return std::to_string(cc / 10) + "." + std::to_string(cc % 10);
}

Status CheckCpuMilli(int64_t milli) {
  if (milli < 0 || milli > kMaxCpus * 1000) {
    return FieldError("resources.cpus", "must be from 0 to " + std::to_string(kMaxCpus) + ", got " +
                                            FormatMilli(milli));
  }
  return Status::Ok();
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

// A MIG request takes one instance whole: no more GPUs, no share, no
// memory amount (the profile says the memory).
Status CheckMig(const Resources& r) {
  if (!r.WantsMig()) return Status::Ok();
  constexpr std::string_view kPath = "resources.mig";
  if (r.mig.slices < 1 || r.mig.memory_gb < 1) {
    return FieldError(kPath, "a MIG profile needs at least 1 slice and 1 GB");
  }
  if (r.gpu_milli > 0) {
    return FieldError(kPath,
                      "a MIG instance is taken whole; it cannot be combined with a share of a GPU "
                      "(gpus: " +
                          FormatMilli(r.gpu_milli) + ")");
  }
  if (r.gpus != 1) {
    return FieldError(kPath,
                      "asks for exactly one MIG instance per node; it cannot be combined "
                      "with gpus: " +
                          std::to_string(r.gpus) + " (leave gpus out or say 1)");
  }
  if (r.gpu_memory_mib != 0) {
    return FieldError(kPath,
                      "the profile names the instance's memory; it cannot be combined with "
                      "gpu_memory (ask for a larger profile instead)");
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

// "mig: 3g.40gb": one MIG instance of at least that profile. Without gpus
// it is one GPU (the instance); gpus may say 1, nothing else.
Status ParseMig(const json& v, const json* gpus, Resources& out) {
  constexpr std::string_view kPath = "resources.mig";
  GP_ASSIGN_OR_RETURN(std::string text, StringField(v, kPath));
  auto mig = ParseMigProfile(text);
  if (!mig.ok()) return mig.status().WithContext(kPath);
  out.mig = *mig;
  if (gpus == nullptr) out.gpus = 1;
  return CheckMig(out);
}

}  // namespace

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
  if (const json* v = Field(j, "mig")) GP_RETURN_IF_ERROR(ParseMig(*v, Field(j, "gpus"), out));
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

Status ValidateResources(const Resources& r) {
  GP_RETURN_IF_ERROR(CheckMig(r));
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
  if (r.nodes < 1 || r.nodes > kMaxNodes) {
    return FieldError("resources.nodes", "must be from 1 to " + std::to_string(kMaxNodes) +
                                             ", got " + std::to_string(r.nodes));
  }
  if (r.nodes > 1 && r.gpu_milli > 0) {
    return FieldError("resources.nodes",
                      "a multi-node job takes whole GPUs on each node, not a share of one");
  }
  return Status::Ok();
}

json ResourcesToJson(const Resources& r) {
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
  if (r.WantsMig()) res["mig"] = FormatMigProfile(r.mig);
  return res;
}

}  // namespace gpupool
