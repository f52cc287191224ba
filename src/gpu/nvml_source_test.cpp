// Tests OpenNvml against the fake libnvidia-ml.so.1 variants built from
// tests/fake_nvml, loaded through the ordinary dlopen path.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/gpu_source.h"

namespace gpupool {
namespace {

using nlohmann::json;

// The fake in FAKE_NVML_DIR (variant "") or one of its subdirectories.
std::string FakeLib(const std::string& variant = "") {
  std::string dir = FAKE_NVML_DIR;
  if (!variant.empty()) dir += "/" + variant;
  return dir + "/libnvidia-ml.so.1";
}

// Keeps a fake library loaded for the life of the test, so its call
// counters survive the GpuSource that uses it, and reads those counters,
// which start from zero.
class FakeLibrary {
 public:
  explicit FakeLibrary(const std::string& path) : handle_(dlopen(path.c_str(), RTLD_NOW)) {
    EXPECT_NE(handle_, nullptr) << dlerror();
    if (handle_ == nullptr) return;
    auto reset = reinterpret_cast<void (*)()>(dlsym(handle_, "fakeNvmlResetCallCounts"));
    EXPECT_NE(reset, nullptr);
    if (reset != nullptr) reset();
  }
  ~FakeLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeLibrary(const FakeLibrary&) = delete;
  FakeLibrary& operator=(const FakeLibrary&) = delete;

  int Calls(const char* function) const {
    if (handle_ == nullptr) return -1;
    using CountFn = int (*)(const char*);
    auto count = reinterpret_cast<CountFn>(dlsym(handle_, "fakeNvmlCallCount"));
    return count == nullptr ? -1 : count(function);
  }

 private:
  void* handle_;
};

json A100() {
  return {{"name", "NVIDIA A100-SXM4-80GB"},
          {"uuid", "GPU-1a2b3c4d-0000-1111-2222-333344445555"},
          {"memory_total_mib", 81920},
          {"memory_used_mib", 1024},
          {"cc", {8, 0}},
          {"utilization", 37},
          {"temperature", 55},
          {"power_mw", 210000},
          {"energy_mj", 9876543210},
          {"minor", 3},  // T4 has none: its position, 1
          {"processes",
           {{{"pid", 1234}, {"used_mib", 1000}},
            {{"pid", 5678}, {"used_mib", 20}},
            {{"pid", 91011}, {"used_mib", 4}}}}};
}

json T4() {
  return {{"name", "Tesla T4"},
          {"uuid", "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"},
          {"memory_total_mib", 15360},
          {"memory_used_mib", 0},
          {"cc", {7, 5}},
          {"utilization", 0},
          {"temperature", 31},
          {"power_mw", 9000},
          {"processes", json::array()}};
}

json BaseConfig() {
  return {{"driver_version", "550.54.15"},
          {"cuda_version", 12040},
          {"init_error", 0},
          {"devices", {A100(), T4()}}};
}

class NvmlSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    config_path_ = ::testing::TempDir() + "fake_nvml_" + info->name() + ".json";
    setenv("FAKE_NVML_CONFIG", config_path_.c_str(), 1);
    unsetenv("GPUPOOL_NVML_LIBRARY");
    WriteConfig(BaseConfig());
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_CONFIG");
    unsetenv("GPUPOOL_NVML_LIBRARY");
    std::remove(config_path_.c_str());
  }

  void WriteConfig(const json& config) {
    std::ofstream out(config_path_, std::ios::trunc);
    out << config.dump(2);
    ASSERT_TRUE(out.good());
  }

  std::unique_ptr<GpuSource> Open(const std::string& path) {
    auto source = OpenNvml(path);
    EXPECT_TRUE(source.ok()) << source.status().ToString();
    return source.ok() ? std::move(source).value() : nullptr;
  }

  GpuSnapshot ReadOk(GpuSource& source) {
    auto snapshot = source.Read();
    EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
    return snapshot.ok() ? std::move(snapshot).value() : GpuSnapshot{};
  }

  std::string config_path_;
};

TEST_F(NvmlSourceTest, ReadsDevicesTelemetryAndVersions) {
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);

  EXPECT_EQ(s.driver_version, "550.54.15");
  EXPECT_EQ(s.cuda_version, "12.4");
  ASSERT_EQ(s.gpus.size(), 2u);
  ASSERT_EQ(s.telemetry.size(), 2u);

  GpuInfo a100{
      0, "GPU-1a2b3c4d-0000-1111-2222-333344445555", "NVIDIA A100-SXM4-80GB", 81920, 8, 0, false};
  a100.minor_number = 3;  // configured
  GpuInfo t4{1, "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff", "Tesla T4", 15360, 7, 5, false};
  t4.minor_number = 1;  // the fake's default: the device's position
  EXPECT_EQ(s.gpus[0], a100);
  EXPECT_EQ(s.gpus[1], t4);

  const GpuTelemetry& t0 = s.telemetry[0];
  EXPECT_EQ(t0.uuid, a100.uuid);
  EXPECT_EQ(t0.memory_used_mib, 1024);
  EXPECT_EQ(t0.utilization_percent, 37);
  EXPECT_EQ(t0.temperature_c, 55);
  EXPECT_EQ(t0.power_mw, 210000);
  EXPECT_EQ(t0.energy_mj, 9876543210);  // past 32 bits: NVML's counter is 64-bit
  std::vector<GpuProcess> expected{{1234, 1000}, {5678, 20}, {91011, 4}};
  EXPECT_EQ(t0.processes, expected);

  const GpuTelemetry& t1 = s.telemetry[1];
  EXPECT_EQ(t1.uuid, t4.uuid);
  EXPECT_EQ(t1.memory_used_mib, 0);
  EXPECT_EQ(t1.utilization_percent, 0);
  EXPECT_EQ(t1.temperature_c, 31);
  EXPECT_EQ(t1.power_mw, 9000);
  EXPECT_EQ(t1.energy_mj, 0);
  EXPECT_TRUE(t1.processes.empty());

  EXPECT_EQ(source->Describe(), "NVML (" + FakeLib() + ", driver 550.54.15, CUDA 12.4)");
}

TEST_F(NvmlSourceTest, NoDevicesIsAnEmptySnapshot) {
  json config = BaseConfig();
  config["devices"] = json::array();
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_TRUE(s.telemetry.empty());
  EXPECT_EQ(s.driver_version, "550.54.15");
}

TEST_F(NvmlSourceTest, PrefersTheNewestEntryPoints) {
  FakeLibrary lib(FakeLib());
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  ReadOk(*source);
  EXPECT_EQ(lib.Calls("nvmlInit_v2"), 1);
  EXPECT_EQ(lib.Calls("nvmlInit"), 0);
  EXPECT_GE(lib.Calls("nvmlDeviceGetCount_v2"), 1);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetCount"), 0);
  EXPECT_GE(lib.Calls("nvmlDeviceGetHandleByIndex_v2"), 2);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetHandleByIndex"), 0);
  EXPECT_EQ(lib.Calls("nvmlSystemGetCudaDriverVersion_v2"), 1);
  EXPECT_EQ(lib.Calls("nvmlSystemGetCudaDriverVersion"), 0);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses_v3"), 2);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses"), 0);
}

TEST_F(NvmlSourceTest, FallsBackToV2ProcessesWithoutV3) {
  FakeLibrary lib(FakeLib("v2"));
  auto source = Open(FakeLib("v2"));
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.telemetry.size(), 2u);
  EXPECT_EQ(s.telemetry[0].processes,
            (std::vector<GpuProcess>{{1234, 1000}, {5678, 20}, {91011, 4}}));
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses_v2"), 2);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses"), 0);
}

TEST_F(NvmlSourceTest, LegacyLibraryUsesPlainEntryPoints) {
  FakeLibrary lib(FakeLib("legacy"));
  auto source = Open(FakeLib("legacy"));
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  EXPECT_EQ(s.cuda_version, "12.4");
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[1].index, 1);
  EXPECT_EQ(s.gpus[1].uuid, "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff");
  EXPECT_EQ(s.gpus[0].memory_mib, 81920);
  // No nvmlDeviceGetCudaComputeCapability: unknown is 0.0.
  EXPECT_EQ(s.gpus[0].cc_major, 0);
  EXPECT_EQ(s.gpus[0].cc_minor, 0);
  // No nvmlDeviceGetMinorNumber: -1, not known.
  EXPECT_EQ(s.gpus[0].minor_number, -1);
  EXPECT_EQ(s.gpus[1].minor_number, -1);
  // No nvmlDeviceGetPowerUsage: -1; the rest is still there.
  EXPECT_EQ(s.telemetry[0].power_mw, -1);
  EXPECT_EQ(s.telemetry[0].energy_mj, -1);  // nor nvmlDeviceGetTotalEnergyConsumption
  EXPECT_EQ(s.telemetry[0].temperature_c, 55);
  EXPECT_EQ(s.telemetry[0].utilization_percent, 37);
  // The unversioned process call uses the two-field struct.
  EXPECT_EQ(s.telemetry[0].processes,
            (std::vector<GpuProcess>{{1234, 1000}, {5678, 20}, {91011, 4}}));
  EXPECT_EQ(lib.Calls("nvmlInit"), 1);
  EXPECT_GE(lib.Calls("nvmlDeviceGetCount"), 1);
  EXPECT_GE(lib.Calls("nvmlDeviceGetHandleByIndex"), 2);
  EXPECT_EQ(lib.Calls("nvmlSystemGetCudaDriverVersion"), 1);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses"), 2);
}

TEST_F(NvmlSourceTest, MinorNumberThatCannotBeReadIsNotKnown) {
  json config = BaseConfig();
  config["devices"][0]["errors"] = {{"nvmlDeviceGetMinorNumber", 3}};
  config["devices"][1]["minor"] = 7;
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0].minor_number, -1);
  EXPECT_EQ(s.gpus[0].uuid, "GPU-1a2b3c4d-0000-1111-2222-333344445555");
  EXPECT_EQ(s.gpus[1].minor_number, 7);
}

TEST_F(NvmlSourceTest, FallsBackWhenANewerProcessCallIsNotImplemented) {
  json config = BaseConfig();
  config["missing"] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                       "nvmlDeviceGetComputeRunningProcesses_v2"};
  WriteConfig(config);
  FakeLibrary lib(FakeLib());
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.telemetry.size(), 2u);
  EXPECT_EQ(s.telemetry[0].processes.size(), 3u);
  EXPECT_EQ(lib.Calls("nvmlDeviceGetComputeRunningProcesses"), 2);
}

TEST_F(NvmlSourceTest, GrowsTheProcessBufferWhenTooSmall) {
  json config = BaseConfig();
  json processes = json::array();
  for (int i = 0; i < 100; ++i) processes.push_back({{"pid", 1000 + i}, {"used_mib", i}});
  config["devices"][0]["processes"] = processes;
  config["devices"][1]["processes"] = {{{"pid", 42}, {"used_mib", -1}}};
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.telemetry.size(), 2u);
  ASSERT_EQ(s.telemetry[0].processes.size(), 100u);
  EXPECT_EQ(s.telemetry[0].processes[99], (GpuProcess{1099, 99}));
  // Memory the driver cannot report is -1.
  EXPECT_EQ(s.telemetry[1].processes, (std::vector<GpuProcess>{{42, -1}}));
}

TEST_F(NvmlSourceTest, TelemetryFollowsTheDeviceBetweenReads) {
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot first = ReadOk(*source);
  ASSERT_EQ(first.telemetry.size(), 2u);
  EXPECT_EQ(first.telemetry[1].utilization_percent, 0);

  json config = BaseConfig();
  config["devices"][1]["utilization"] = 99;
  config["devices"][1]["temperature"] = 80;
  config["devices"][1]["memory_used_mib"] = 15000;
  config["devices"][1]["power_mw"] = 70000;
  config["devices"][1]["processes"] = {{{"pid", 777}, {"used_mib", 15000}}};
  config["devices"][0]["processes"] = json::array();
  WriteConfig(config);

  GpuSnapshot second = ReadOk(*source);
  ASSERT_EQ(second.telemetry.size(), 2u);
  EXPECT_EQ(second.gpus, first.gpus);
  const GpuTelemetry& t = second.telemetry[1];
  EXPECT_EQ(t.utilization_percent, 99);
  EXPECT_EQ(t.temperature_c, 80);
  EXPECT_EQ(t.memory_used_mib, 15000);
  EXPECT_EQ(t.power_mw, 70000);
  EXPECT_EQ(t.processes, (std::vector<GpuProcess>{{777, 15000}}));
  EXPECT_TRUE(second.telemetry[0].processes.empty());
}

TEST_F(NvmlSourceTest, TelemetryErrorsOnOneDeviceGiveMinusOne) {
  json config = BaseConfig();
  config["devices"][0]["errors"] = {{"nvmlDeviceGetTemperature", 3},
                                    {"nvmlDeviceGetPowerUsage", 3},
                                    {"nvmlDeviceGetUtilizationRates", 4},
                                    {"nvmlDeviceGetComputeRunningProcesses_v3", 4}};
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.telemetry.size(), 2u);
  const GpuTelemetry& t0 = s.telemetry[0];
  EXPECT_EQ(t0.memory_used_mib, 1024);
  EXPECT_EQ(t0.utilization_percent, -1);
  EXPECT_EQ(t0.temperature_c, -1);
  EXPECT_EQ(t0.power_mw, -1);
  EXPECT_TRUE(t0.processes.empty());
  EXPECT_EQ(s.telemetry[1].temperature_c, 31);
}

TEST_F(NvmlSourceTest, LeavesOutADeviceWhoseIdentityCannotBeRead) {
  json config = BaseConfig();
  config["devices"][0]["errors"] = {{"nvmlDeviceGetUUID", 15}};
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 1u);
  ASSERT_EQ(s.telemetry.size(), 1u);
  EXPECT_EQ(s.gpus[0].index, 1);
  EXPECT_EQ(s.gpus[0].name, "Tesla T4");
  EXPECT_EQ(s.telemetry[0].uuid, s.gpus[0].uuid);
}

TEST_F(NvmlSourceTest, DeviceCountFailureFailsTheRead) {
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  json config = BaseConfig();
  config["errors"] = {{"nvmlDeviceGetCount_v2", 15}};
  WriteConfig(config);
  auto s = source->Read();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.status().message(), "NVML: nvmlDeviceGetCount failed: GPU is lost");
}

TEST_F(NvmlSourceTest, InitFailureSaysWhy) {
  json config = BaseConfig();
  config["init_error"] = 9;
  WriteConfig(config);
  auto source = OpenNvml(FakeLib());
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(source.status().message(), "NVML: nvmlInit failed: Driver Not Loaded");
}

TEST_F(NvmlSourceTest, MissingLibrarySaysWhich) {
  auto source = OpenNvml("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(
      source.status().message().rfind("NVML: cannot load /nonexistent/libnvidia-ml.so.1: ", 0), 0u)
      << source.status().message();
  EXPECT_NE(source.status().message().find("GPUPOOL_NVML_LIBRARY"), std::string::npos);
}

TEST_F(NvmlSourceTest, MissingRequiredFunctionSaysWhich) {
  auto source = OpenNvml(FakeLib("broken"));
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(source.status().message(), "NVML: " + FakeLib("broken") +
                                           " lacks required functions: nvmlDeviceGetUUID (is it "
                                           "NVIDIA's libnvidia-ml?)");
}

TEST_F(NvmlSourceTest, EnvironmentVariableNamesTheLibrary) {
  setenv("GPUPOOL_NVML_LIBRARY", FakeLib().c_str(), 1);
  auto source = Open("");
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(ReadOk(*source).gpus.size(), 2u);
  EXPECT_EQ(source->Describe(), "NVML (" + FakeLib() + ", driver 550.54.15, CUDA 12.4)");

  // An explicit path wins over the variable.
  setenv("GPUPOOL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  EXPECT_NE(Open(FakeLib("v2")), nullptr);
  auto from_env = OpenNvml();
  ASSERT_FALSE(from_env.ok());
  EXPECT_NE(from_env.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST_F(NvmlSourceTest, ShutsDownOnDestruction) {
  FakeLibrary lib(FakeLib());
  int shutdowns = lib.Calls("nvmlShutdown");
  {
    auto source = Open(FakeLib());
    ASSERT_NE(source, nullptr);
    EXPECT_EQ(lib.Calls("nvmlShutdown"), shutdowns);
  }
  EXPECT_EQ(lib.Calls("nvmlShutdown"), shutdowns + 1);
}

TEST_F(NvmlSourceTest, TwoSourcesShareOneLibrary) {
  auto a = Open(FakeLib());
  auto b = Open(FakeLib());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  a.reset();
  // NVML counts nvmlInit calls; b's session is still open.
  EXPECT_EQ(ReadOk(*b).gpus.size(), 2u);
}

}  // namespace
}  // namespace gpupool

namespace gpupool {
namespace {

// An A100 in MIG mode: a 3g.40gb at index 0 and a 1g.10gb at index 2
// (index 1 free: the fake answers NOT_FOUND there, as NVML does).
json MigA100() {
  json gpu = A100();
  gpu["mig_mode"] = 1;
  gpu["processes"] = json::array();
  gpu["mig_devices"] = {{{"index", 0},
                         {"uuid", "MIG-aaaaaaaa-0000-5000-8000-000000000003"},
                         {"profile", "3g.40gb"},
                         {"memory_total_mib", 40192},
                         {"memory_used_mib", 13},
                         {"sm_count", 42},
                         {"gpu_instance_slices", 3},
                         {"gpu_instance_id", 2},
                         {"compute_instance_id", 0},
                         {"processes", {{{"pid", 4242}, {"used_mib", 900}}}}},
                        {{"index", 2},
                         {"uuid", "MIG-bbbbbbbb-0000-5000-8000-000000000001"},
                         {"profile", "1g.10gb"},
                         {"memory_total_mib", 9728},
                         {"sm_count", 14},
                         {"gpu_instance_slices", 1},
                         {"gpu_instance_id", 9},
                         {"compute_instance_id", 0}}};
  return gpu;
}

TEST_F(NvmlSourceTest, MigGpuIsReportedAsItsInstances) {
  json config = BaseConfig();
  config["devices"][0] = MigA100();
  config["devices"][1]["mig_mode"] = 0;  // MIG-capable, but off: a whole GPU
  WriteConfig(config);
  FakeLibrary lib(FakeLib());
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 3u);
  ASSERT_EQ(s.telemetry.size(), 3u);
  const GpuInfo& big = s.gpus[0];
  EXPECT_EQ(big.uuid, "MIG-aaaaaaaa-0000-5000-8000-000000000003");
  EXPECT_EQ(big.parent_uuid, "GPU-1a2b3c4d-0000-1111-2222-333344445555");
  EXPECT_EQ(big.name, "NVIDIA A100-SXM4-80GB");  // the parent's model, for gpu_models
  EXPECT_EQ(big.mig_profile, "3g.40gb");
  EXPECT_EQ(big.mig_slices, 3);
  EXPECT_EQ(big.memory_mib, 40192);
  EXPECT_EQ(big.mig_gpu_instance, 2);
  EXPECT_EQ(big.mig_compute_instance, 0);
  EXPECT_EQ(big.minor_number, 3);  // the parent's /dev/nvidia3
  EXPECT_EQ(big.index, 0);
  EXPECT_EQ(big.cc_major, 8);
  EXPECT_FALSE(big.simulated);
  const GpuInfo& small = s.gpus[1];
  EXPECT_EQ(small.uuid, "MIG-bbbbbbbb-0000-5000-8000-000000000001");
  EXPECT_EQ(small.mig_profile, "1g.10gb");
  EXPECT_EQ(small.mig_slices, 1);
  EXPECT_EQ(small.memory_mib, 9728);
  EXPECT_EQ(small.mig_gpu_instance, 9);
  // The T4 with MIG off is a whole GPU.
  EXPECT_EQ(s.gpus[2].uuid, "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff");
  EXPECT_FALSE(s.gpus[2].IsMig());
  EXPECT_EQ(s.gpus[2].mig_slices, 0);
  // Telemetry per instance: its memory and processes; no per-instance
  // utilization, temperature or power in NVML.
  EXPECT_EQ(s.telemetry[0].uuid, big.uuid);
  EXPECT_EQ(s.telemetry[0].memory_used_mib, 13);
  EXPECT_EQ(s.telemetry[0].processes, (std::vector<GpuProcess>{{4242, 900}}));
  EXPECT_EQ(s.telemetry[0].utilization_percent, -1);
  EXPECT_EQ(s.telemetry[0].temperature_c, -1);
  EXPECT_EQ(s.telemetry[1].processes, std::vector<GpuProcess>{});
  // Every index up to the maximum was asked for.
  EXPECT_EQ(lib.Calls("nvmlDeviceGetMigDeviceHandleByIndex"), 7);
}

TEST_F(NvmlSourceTest, MigProfileFromAttributesWhenTheNameHasNone) {
  json config = BaseConfig();
  json gpu = MigA100();
  gpu["mig_devices"][1]["profile"] = "";  // name "NVIDIA A100-SXM4-80GB MIG "
  gpu["mig_devices"][1]["compute_instance_slices"] = 1;
  config["devices"] = {gpu};
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[1].mig_profile, "1g.10gb");  // 9728 MiB: 9.5 GiB, rounded up
  EXPECT_EQ(s.gpus[1].mig_slices, 1);
}

TEST_F(NvmlSourceTest, MigModeWithoutInstancesReportsNothingOfThatGpu) {
  json config = BaseConfig();
  json gpu = MigA100();
  gpu["mig_devices"] = json::array();
  config["devices"][0] = gpu;
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].name, "Tesla T4");
}

TEST_F(NvmlSourceTest, MigInstanceThatCannotBeReadIsLeftOut) {
  json config = BaseConfig();
  json gpu = MigA100();
  gpu["mig_devices"][0]["errors"] = {{"nvmlDeviceGetUUID", 15}};  // GPU is lost
  config["devices"] = {gpu};
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].mig_profile, "1g.10gb");
}

TEST_F(NvmlSourceTest, PendingMigModeIsNotYetMig) {
  json config = BaseConfig();
  json gpu = MigA100();
  gpu["mig_mode"] = 0;
  gpu["mig_pending"] = 1;  // enabled, waiting for a reset
  config["devices"] = {gpu};
  WriteConfig(config);
  auto source = Open(FakeLib());
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].uuid, "GPU-1a2b3c4d-0000-1111-2222-333344445555");
  EXPECT_FALSE(s.gpus[0].IsMig());
}

TEST_F(NvmlSourceTest, DriverWithoutMigReportsWholeGpus) {
  json config = BaseConfig();
  config["devices"][0] = MigA100();
  WriteConfig(config);
  // The legacy fake exports no MIG entry points at all.
  auto source = Open(FakeLib("legacy"));
  ASSERT_NE(source, nullptr);
  GpuSnapshot s = ReadOk(*source);
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0].uuid, "GPU-1a2b3c4d-0000-1111-2222-333344445555");
  EXPECT_FALSE(s.gpus[0].IsMig());
}

}  // namespace
}  // namespace gpupool
