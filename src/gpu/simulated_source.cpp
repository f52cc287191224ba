// GpuSource that reports GPUs which do not exist (see gpu_source.h), for
// demos, the simulator and tests.
//
// Every GPU says it is simulated (GpuInfo::simulated, "GPU-SIM-" UUIDs, driver
// and CUDA version "simulated"). The name is the model text as written in the
// spec ("A100"); the compute capability is a plausible one for well-known
// models and 8.0 otherwise. Telemetry is constant: no memory used, 0 %
// utilization, 30 C, 0 mW, no processes.

#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/units.h"
#include "gpu/gpu_source.h"

namespace gpupool {
namespace {

constexpr int kMaxGpus = 64;
constexpr const char* kExample = "2xA100:80GiB,1xT4:16GiB";
constexpr int32_t kIdleTemperatureC = 30;

struct GpuGroup {
  int count = 1;
  std::string model;
  int64_t memory_mib = 0;
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Status BadPart(std::string_view part, std::string_view why) {
  return Status::InvalidArgument("simulate-gpus: \"" + std::string(part) +
                                 "\": " + std::string(why));
}

// "2xA100:80GiB" or "A100:80GiB".
Result<GpuGroup> ParseGroup(std::string_view part) {
  GpuGroup group;
  std::string_view rest = part;
  size_t digits = 0;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits > 0 && digits < rest.size() && rest[digits] == 'x') {
    if (digits > 3) return BadPart(part, "count must be between 1 and 64");
    group.count = std::stoi(std::string(rest.substr(0, digits)));
    if (group.count < 1 || group.count > kMaxGpus) {
      return BadPart(part, "count must be between 1 and 64");
    }
    rest.remove_prefix(digits + 1);
  }
  size_t colon = rest.find(':');
  std::string_view model = colon == std::string_view::npos ? "" : Trim(rest.substr(0, colon));
  if (model.empty()) {
    return BadPart(part, "expected MODEL:MEMORY such as A100:80GiB");
  }
  group.model = std::string(model);
  Result<int64_t> memory = ParseMebibytes(Trim(rest.substr(colon + 1)));
  if (!memory.ok()) return BadPart(part, memory.status().message());
  if (*memory <= 0) return BadPart(part, "memory must be more than 0");
  group.memory_mib = *memory;
  return group;
}

Result<std::vector<GpuGroup>> ParseSpec(std::string_view spec) {
  if (Trim(spec).empty()) {
    return Status::InvalidArgument(std::string("simulate-gpus: empty; expected e.g. ") + kExample);
  }
  std::vector<GpuGroup> groups;
  int total = 0;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    std::string_view part = Trim(spec.substr(start, comma - start));
    if (part.empty()) {
      return Status::InvalidArgument("simulate-gpus: empty entry in \"" + std::string(spec) + "\"");
    }
    GP_ASSIGN_OR_RETURN(GpuGroup group, ParseGroup(part));
    total += group.count;
    groups.push_back(std::move(group));
    start = comma + 1;
  }
  if (total > kMaxGpus) {
    return Status::InvalidArgument("simulate-gpus: \"" + std::string(spec) +
                                   "\": " + std::to_string(total) + " GPUs, at most " +
                                   std::to_string(kMaxGpus));
  }
  return groups;
}

struct ComputeCapability {
  int32_t major;
  int32_t minor;
};

// Published compute capabilities of common models; 8.0 for anything else.
ComputeCapability GuessComputeCapability(std::string_view model) {
  struct Known {
    const char* word;
    ComputeCapability cc;
  };
  static constexpr Known kKnown[] = {
      {"H100", {9, 0}}, {"H200", {9, 0}}, {"GH200", {9, 0}}, {"A100", {8, 0}}, {"A30", {8, 0}},
      {"A10", {8, 6}},  {"A40", {8, 6}},  {"A16", {8, 6}},   {"A2", {8, 6}},   {"L4", {8, 9}},
      {"L40", {8, 9}},  {"L40S", {8, 9}}, {"V100", {7, 0}},  {"T4", {7, 5}},   {"P100", {6, 0}},
      {"3060", {8, 6}}, {"3070", {8, 6}}, {"3080", {8, 6}},  {"3090", {8, 6}}, {"4070", {8, 9}},
      {"4080", {8, 9}}, {"4090", {8, 9}}, {"5090", {12, 0}}, {"2080", {7, 5}},
  };
  for (const Known& k : kKnown) {
    if (GpuModelMatches(model, k.word)) return k.cc;
  }
  return {8, 0};
}

// "GPU-SIM-" and 32 hex digits grouped like a UUID, stable for (seed, index).
std::string SimulatedUuid(std::string_view seed, int index) {
  std::string h = Sha256Hex(std::string(seed) + ":" + std::to_string(index));
  return "GPU-SIM-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" +
         h.substr(16, 4) + "-" + h.substr(20, 12);
}

class SimulatedSource final : public GpuSource {
 public:
  SimulatedSource(std::string spec, GpuSnapshot snapshot)
      : spec_(std::move(spec)), snapshot_(std::move(snapshot)) {}

  Result<GpuSnapshot> Read() override { return snapshot_; }
  std::string Describe() const override { return "simulated GPUs: " + spec_; }

 private:
  std::string spec_;
  GpuSnapshot snapshot_;
};

}  // namespace

Result<std::unique_ptr<GpuSource>> OpenSimulatedGpus(std::string_view spec, std::string_view seed) {
  GP_ASSIGN_OR_RETURN(std::vector<GpuGroup> groups, ParseSpec(spec));
  GpuSnapshot snapshot;
  snapshot.driver_version = "simulated";
  snapshot.cuda_version = "simulated";
  int index = 0;
  for (const GpuGroup& group : groups) {
    ComputeCapability cc = GuessComputeCapability(group.model);
    for (int i = 0; i < group.count; ++i, ++index) {
      GpuInfo gpu;
      gpu.index = index;
      gpu.uuid = SimulatedUuid(seed, index);
      gpu.name = group.model;
      gpu.memory_mib = group.memory_mib;
      gpu.cc_major = cc.major;
      gpu.cc_minor = cc.minor;
      gpu.simulated = true;
      GpuTelemetry telemetry;
      telemetry.uuid = gpu.uuid;
      telemetry.memory_used_mib = 0;
      telemetry.utilization_percent = 0;
      telemetry.temperature_c = kIdleTemperatureC;
      telemetry.power_mw = 0;
      telemetry.energy_mj = 0;
      snapshot.gpus.push_back(std::move(gpu));
      snapshot.telemetry.push_back(std::move(telemetry));
    }
  }
  return std::unique_ptr<GpuSource>(
      std::make_unique<SimulatedSource>(std::string(Trim(spec)), std::move(snapshot)));
}

}  // namespace gpupool
