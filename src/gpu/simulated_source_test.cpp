#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/units.h"
#include "gpu/gpu_source.h"

namespace gpupool {
namespace {

GpuSnapshot ReadSpec(std::string_view spec, std::string_view seed = "node-a") {
  auto source = OpenSimulatedGpus(spec, seed);
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  if (!source.ok()) return {};
  auto snapshot = (*source)->Read();
  EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  return snapshot.ok() ? std::move(snapshot).value() : GpuSnapshot{};
}

// "GPU-SIM-" and 32 lowercase hex digits grouped 8-4-4-4-12.
bool LooksLikeSimulatedUuid(const std::string& uuid) {
  const std::string prefix = "GPU-SIM-";
  if (uuid.rfind(prefix, 0) != 0) return false;
  std::string rest = uuid.substr(prefix.size());
  if (rest.size() != 36) return false;
  for (size_t i = 0; i < rest.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    char c = rest[i];
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string SpecError(std::string_view spec) {
  auto source = OpenSimulatedGpus(spec, "node-a");
  EXPECT_FALSE(source.ok()) << spec;
  if (source.ok()) return "";
  EXPECT_EQ(source.status().code(), StatusCode::kInvalidArgument);
  return source.status().message();
}

TEST(SimulatedGpusTest, ParsesCountsModelsAndMemory) {
  auto source = OpenSimulatedGpus("2xA100:80GiB,1xT4:16GiB", "node-a");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ((*source)->Describe(), "simulated GPUs: 2xA100:80GiB,1xT4:16GiB");
  auto read = (*source)->Read();
  ASSERT_TRUE(read.ok());
  const GpuSnapshot& s = *read;

  EXPECT_EQ(s.driver_version, "simulated");
  EXPECT_EQ(s.cuda_version, "simulated");
  ASSERT_EQ(s.gpus.size(), 3u);
  ASSERT_EQ(s.telemetry.size(), 3u);
  const char* names[] = {"A100", "A100", "T4"};
  const int64_t memory[] = {81920, 81920, 16384};
  const int32_t cc_major[] = {8, 8, 7};
  const int32_t cc_minor[] = {0, 0, 5};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const GpuInfo& g = s.gpus[i];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.name, names[i]);
    EXPECT_EQ(g.memory_mib, memory[i]);
    EXPECT_EQ(g.cc_major, cc_major[i]);
    EXPECT_EQ(g.cc_minor, cc_minor[i]);
    EXPECT_TRUE(g.simulated);
    EXPECT_TRUE(LooksLikeSimulatedUuid(g.uuid)) << g.uuid;
    const GpuTelemetry& t = s.telemetry[i];
    EXPECT_EQ(t.uuid, g.uuid);
    EXPECT_EQ(t.memory_used_mib, 0);
    EXPECT_EQ(t.utilization_percent, 0);
    EXPECT_EQ(t.temperature_c, 30);
    EXPECT_EQ(t.power_mw, 0);
    EXPECT_TRUE(t.processes.empty());
  }
  std::set<std::string> uuids{s.gpus[0].uuid, s.gpus[1].uuid, s.gpus[2].uuid};
  EXPECT_EQ(uuids.size(), 3u);
}

TEST(SimulatedGpusTest, CountIsOptionalAndSpacesAreIgnored) {
  GpuSnapshot s = ReadSpec(" A100:80GiB , 3x RTX 4090 : 24GiB ");
  ASSERT_EQ(s.gpus.size(), 4u);
  EXPECT_EQ(s.gpus[0].name, "A100");
  EXPECT_EQ(s.gpus[1].name, "RTX 4090");
  EXPECT_EQ(s.gpus[3].index, 3);
  EXPECT_EQ(s.gpus[3].memory_mib, 24576);
}

TEST(SimulatedGpusTest, KnownModelsGetTheirComputeCapability) {
  GpuSnapshot s = ReadSpec(
      "H100:80GiB,V100:32GiB,A10:24GiB,L4:24GiB,RTX 3090:24GiB,RTX 4090:24GiB,Foo:1GiB,"
      "NVIDIA A100-SXM4-80GB:80GiB,1536MiB-card:1536MiB");
  ASSERT_EQ(s.gpus.size(), 9u);
  auto cc = [&](int i) {
    return std::to_string(s.gpus[i].cc_major) + "." + std::to_string(s.gpus[i].cc_minor);
  };
  EXPECT_EQ(cc(0), "9.0");
  EXPECT_EQ(cc(1), "7.0");
  EXPECT_EQ(cc(2), "8.6");
  EXPECT_EQ(cc(3), "8.9");
  EXPECT_EQ(cc(4), "8.6");
  EXPECT_EQ(cc(5), "8.9");
  EXPECT_EQ(cc(6), "8.0");
  EXPECT_EQ(cc(7), "8.0");
  EXPECT_EQ(s.gpus[8].name, "1536MiB-card");
  EXPECT_EQ(s.gpus[8].memory_mib, 1536);
}

TEST(SimulatedGpusTest, UuidsAreStablePerSeed) {
  GpuSnapshot a1 = ReadSpec("2xA100:80GiB", "node-a");
  GpuSnapshot a2 = ReadSpec("2xA100:80GiB", "node-a");
  GpuSnapshot b = ReadSpec("2xA100:80GiB", "node-b");
  ASSERT_EQ(a1.gpus.size(), 2u);
  ASSERT_EQ(b.gpus.size(), 2u);
  EXPECT_EQ(a1.gpus, a2.gpus);
  EXPECT_NE(a1.gpus[0].uuid, b.gpus[0].uuid);
  EXPECT_NE(a1.gpus[1].uuid, b.gpus[1].uuid);
  // The UUID belongs to the position, not the model.
  EXPECT_EQ(ReadSpec("T4:16GiB,A100:80GiB", "node-a").gpus[1].uuid, a1.gpus[1].uuid);
}

TEST(SimulatedGpusTest, ReadsAreRepeatable) {
  auto source = OpenSimulatedGpus("A100:80GiB", "n");
  ASSERT_TRUE(source.ok());
  auto first = (*source)->Read();
  auto second = (*source)->Read();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->gpus, second->gpus);
  EXPECT_EQ(first->telemetry, second->telemetry);
}

TEST(SimulatedGpusTest, AcceptsUpToSixtyFourGpus) {
  EXPECT_EQ(ReadSpec("64xA100:80GiB").gpus.size(), 64u);
  EXPECT_EQ(ReadSpec("32xA100:80GiB,32xT4:16GiB").gpus.size(), 64u);
}

TEST(SimulatedGpusTest, BadSpecsNameTheBadPart) {
  EXPECT_EQ(SpecError("2xA100"),
            "simulate-gpus: \"2xA100\": expected MODEL:MEMORY such as A100:80GiB");
  EXPECT_EQ(SpecError("A100:80GiB,:16GiB"),
            "simulate-gpus: \":16GiB\": expected MODEL:MEMORY such as A100:80GiB");
  EXPECT_EQ(SpecError("2x:16GiB"),
            "simulate-gpus: \"2x:16GiB\": expected MODEL:MEMORY such as A100:80GiB");
  EXPECT_EQ(SpecError("0xA100:80GiB"),
            "simulate-gpus: \"0xA100:80GiB\": count must be between 1 and 64");
  EXPECT_EQ(SpecError("65xA100:80GiB"),
            "simulate-gpus: \"65xA100:80GiB\": count must be between 1 and 64");
  EXPECT_EQ(SpecError("99999999999xA100:80GiB"),
            "simulate-gpus: \"99999999999xA100:80GiB\": count must be between 1 and 64");
  EXPECT_EQ(SpecError("A100:0GiB"), "simulate-gpus: \"A100:0GiB\": memory must be more than 0");
  EXPECT_EQ(SpecError("40xA100:80GiB,40xT4:16GiB"),
            "simulate-gpus: \"40xA100:80GiB,40xT4:16GiB\": 80 GPUs, at most 64");
  EXPECT_EQ(SpecError(""), "simulate-gpus: empty; expected e.g. 2xA100:80GiB,1xT4:16GiB");
  EXPECT_EQ(SpecError("  "), "simulate-gpus: empty; expected e.g. 2xA100:80GiB,1xT4:16GiB");
  EXPECT_EQ(SpecError("A100:80GiB,"), "simulate-gpus: empty entry in \"A100:80GiB,\"");
  EXPECT_EQ(SpecError("A100:80GiB,,T4:16GiB"),
            "simulate-gpus: empty entry in \"A100:80GiB,,T4:16GiB\"");
  // Memory errors carry the units parser's explanation.
  EXPECT_EQ(SpecError("A100:lots"),
            "simulate-gpus: \"A100:lots\": " + ParseMebibytes("lots").status().message());
  EXPECT_EQ(SpecError("A100:80XB"),
            "simulate-gpus: \"A100:80XB\": " + ParseMebibytes("80XB").status().message());
  EXPECT_EQ(SpecError("A100:"),
            "simulate-gpus: \"A100:\": " + ParseMebibytes("").status().message());
}

}  // namespace
}  // namespace gpupool
