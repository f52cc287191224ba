// The selftest's verdicts from what it saw (agent/selftest.h); the checks
// against a real machine and server: tests/integration/test_selftest.py.
#include "agent/selftest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.h"

namespace gpupool::agent {
namespace {

using ::testing::HasSubstr;

TEST(SelftestTest, FreeSpaceWarnsThenFails) {
  SelftestOptions o;
  o.warn_free_bytes = 20LL << 30;
  o.min_free_bytes = 2LL << 30;
  EXPECT_EQ(DiskCheck("/var", 100LL << 30, o).result, CheckResult::kPass);
  SelftestCheck low = DiskCheck("/var", 10LL << 30, o);
  EXPECT_EQ(low.result, CheckResult::kWarn);
  EXPECT_THAT(low.fix, HasSubstr("--data-dir"));
  EXPECT_EQ(DiskCheck("/var", 1LL << 30, o).result, CheckResult::kFail);
  EXPECT_THAT(DiskCheck("/var", 1LL << 30, o).detail, HasSubstr("1 GiB free at /var"));
}

TEST(SelftestTest, TheClockOffsetComesFromTheDateHeaderAndTheRequestsMiddle) {
  // 2026-11-28T12:00:00Z = 1795867200 s.
  const int64_t noon = 1'795'867'200'000;
  auto same = ClockOffsetMs("Sat, 28 Nov 2026 12:00:00 GMT", noon + 400, noon + 600);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(*same, 0);  // the date's second, on average half past it
  auto behind = ClockOffsetMs("Sat, 28 Nov 2026 12:00:10 GMT", noon + 400, noon + 600);
  EXPECT_EQ(*behind, 10'000);
  EXPECT_FALSE(ClockOffsetMs("yesterday", noon, noon).ok());
  EXPECT_FALSE(ClockOffsetMs("Sat, 28 Nov 2026 12:00:00 GMT trailing", noon, noon).ok());

  EXPECT_EQ(ClockCheck(300).result, CheckResult::kPass);
  EXPECT_THAT(ClockCheck(300).detail, HasSubstr("behind"));
  EXPECT_THAT(ClockCheck(-300).detail, HasSubstr("ahead of"));
  EXPECT_EQ(ClockCheck(-5'000).result, CheckResult::kWarn);
  EXPECT_EQ(ClockCheck(120'000).result, CheckResult::kFail);
  EXPECT_THAT(ClockCheck(120'000).fix, HasSubstr("set-ntp"));
}

TEST(SelftestTest, TheCudaProbesLineBecomesTheCheck) {
  SelftestCheck ok = CudaProbeCheck(
      R"({"ok": true, "driver_version": 12040, "devices": ["NVIDIA L4", "NVIDIA L4"]})", 2);
  EXPECT_EQ(ok.result, CheckResult::kPass);
  EXPECT_THAT(ok.detail, HasSubstr("CUDA 12.4, 2 device(s)"));
  SelftestCheck fewer = CudaProbeCheck(R"({"ok": true, "driver_version": 12040,
                                           "devices": ["NVIDIA L4"]})",
                                       2);
  EXPECT_EQ(fewer.result, CheckResult::kWarn);
  SelftestCheck failed = CudaProbeCheck(
      R"({"ok": false, "step": "cuInit", "error": 100, "message": "no CUDA-capable device"})", 1);
  EXPECT_EQ(failed.result, CheckResult::kFail);
  EXPECT_EQ(failed.detail, "cuInit failed (CUDA error 100): no CUDA-capable device");
  EXPECT_THAT(failed.fix, HasSubstr("nvidia-smi"));
  EXPECT_EQ(CudaProbeCheck("Segmentation fault", 1).result, CheckResult::kFail);
}

TEST(SelftestTest, TheReportFailsOnAnyFailedCheck) {
  SelftestReport r;
  r.checks = {{"a", CheckResult::kPass, "", ""},
              {"b", CheckResult::kWarn, "", "x"},
              {"c", CheckResult::kSkip, "", ""}};
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(SelftestToJson(r)["checks"][1]["result"], "warn");
  r.checks.push_back({"d", CheckResult::kFail, "why", "fix"});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(SelftestToJson(r)["ok"], false);
}

TEST(SelftestTest, EccAndXidErrorsWarnWhereTheyCanBeRead) {
  SelftestCheck clean = GpuHealthCheck("0, 0\n1, [N/A]\n", "[  1.0] usb 1-1: new device\n");
  EXPECT_EQ(clean.result, CheckResult::kPass);
  EXPECT_EQ(clean.detail, "0 uncorrected ECC errors; 0 Xid errors in the kernel log");
  SelftestCheck ecc = GpuHealthCheck("0, 0\n1, 7\n", "");
  EXPECT_EQ(ecc.result, CheckResult::kWarn);
  EXPECT_THAT(ecc.detail, HasSubstr("GPU 1: 7 uncorrected ECC errors"));
  EXPECT_THAT(ecc.detail, HasSubstr("kernel log not readable"));
  SelftestCheck xid = GpuHealthCheck(
      "", "[ 9.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n");
  EXPECT_EQ(xid.result, CheckResult::kWarn);
  EXPECT_THAT(xid.detail, HasSubstr("1 Xid errors"));
  EXPECT_THAT(xid.detail, HasSubstr("fallen off the bus"));
  EXPECT_EQ(GpuHealthCheck("", "").result, CheckResult::kSkip);  // nothing readable
}

TEST(SelftestTest, TheKeptReportBecomesTheNodesVerifiedLabels) {
  char tmpl[] = "/tmp/selftest-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/agent";
  EXPECT_TRUE(SelftestLabels(dir).empty());  // never checked: no label
  SelftestReport passed;
  passed.checks = {{"disk", CheckResult::kWarn, "", "x"}};
  ASSERT_TRUE(SaveSelftest(dir, passed, 1'795'867'200'000).ok());
  EXPECT_EQ(SelftestLabels(dir), (std::map<std::string, std::string>{
                                     {kVerifiedLabel, "true"}, {kVerifiedAtLabel, "2026-11-28"}}));
  SelftestReport failed;
  failed.checks = {{"gpu driver", CheckResult::kFail, "no NVML", "install it"}};
  ASSERT_TRUE(SaveSelftest(dir, failed, 1'795'867'200'000).ok());
  EXPECT_EQ(SelftestLabels(dir).at(kVerifiedLabel), "false");
  // A file that is not a report: no label rather than a guess.
  ASSERT_TRUE(WriteFileAtomic(dir + "/selftest.json", R"({"ok": "yes"})").ok());
  EXPECT_TRUE(SelftestLabels(dir).empty());
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace gpupool::agent
