// A GPU share's files (exec/gpu_share.h): the limits text that
// libgpushare.so's own parser (gpushare/limits.h) must accept, the files in
// the task directory with their owners and modes, and the library check.
#include "exec/gpu_share.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "exec/run_plan_testing.h"
#include "gpushare/limits.h"
#include "gpushare/share_files.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(GpuShareTest, TheLimitsAreWhatTheLibraryReads) {
  std::string text = GpuShareLimitsText({4 * kGiB, 500}, kShareDirInJob);
  EXPECT_EQ(text,
            "gpushare 1\nmemory_bytes 4294967296\nshare_milli 500\nmode work-conserving\n"
            "usage /gpupool/share/usage\nwant /gpupool/share/want\ngrant /gpupool/share/grant\n");
  gpushare_limits parsed{};
  char err[256] = "";
  ASSERT_EQ(gpushare_parse_limits(text.data(), text.size(), &parsed, err, sizeof err), 0) << err;
  EXPECT_EQ(parsed.memory_bytes, uint64_t{4} << 30);
  EXPECT_EQ(parsed.share_milli, 500u);
  EXPECT_EQ(parsed.mode, GPUSHARE_WORK_CONSERVING);
  EXPECT_STREQ(parsed.usage_path, kShareUsageInJob);
  EXPECT_STREQ(parsed.want_path, kShareWantInJob);
  EXPECT_STREQ(parsed.grant_path, kShareGrantInJob);
  EXPECT_STREQ(GPUSHARE_LIMITS_PATH, kShareLimitsInJob);  // where the library looks
  EXPECT_EQ(GpuSharePreloadText(), "/gpupool/share/libgpushare.so\n");

  std::string strict = GpuShareLimitsText({kGiB, 250, /*strict=*/true}, "/t/gpushare");
  ASSERT_EQ(gpushare_parse_limits(strict.data(), strict.size(), &parsed, err, sizeof err), 0)
      << err;
  EXPECT_EQ(parsed.mode, GPUSHARE_STRICT);
  EXPECT_STREQ(parsed.want_path, "/t/gpushare/want");
  EXPECT_STREQ(parsed.grant_path, "/t/gpushare/grant");
}

TEST(GpuShareTest, TheTaskFilesBelongToTheAgentButTheLedger) {
  ASSERT_EQ(::geteuid(), 0u) << "runs as root, like the agent";
  TempDir task(0700);
  const GpuShareFiles files = GpuShareFilesIn(task.path());
  EXPECT_EQ(files.dir, task.path() + "/gpushare");
  EXPECT_EQ(files.limits, task.path() + "/gpushare/limits");
  EXPECT_EQ(files.usage, task.path() + "/gpushare/usage");
  EXPECT_EQ(files.preload, task.path() + "/gpushare/ld.so.preload");

  EXPECT_EQ(files.want, task.path() + "/gpushare/want");
  EXPECT_EQ(files.grant, task.path() + "/gpushare/grant");

  ASSERT_TRUE(WriteGpuShareFiles(task.path(), {kGiB, 250}, kShareDirInJob, 189703, 189704).ok());
  EXPECT_EQ(*ReadFile(files.limits), GpuShareLimitsText({kGiB, 250}, kShareDirInJob));
  EXPECT_EQ(*ReadFile(files.preload), "/gpupool/share/libgpushare.so\n");
  struct stat dir = Stat(files.dir), limits = Stat(files.limits), preload = Stat(files.preload),
              usage = Stat(files.usage);
  EXPECT_EQ(dir.st_mode & 07777, 0755u);
  EXPECT_EQ(dir.st_uid, 0u);
  EXPECT_EQ(limits.st_mode & 07777, 0644u);
  EXPECT_EQ(limits.st_uid, 0u);
  EXPECT_EQ(preload.st_mode & 07777, 0644u);
  EXPECT_EQ(preload.st_uid, 0u);
  EXPECT_TRUE(S_ISREG(usage.st_mode));
  EXPECT_EQ(usage.st_mode & 07777, 0600u);
  EXPECT_EQ(usage.st_uid, 189703u);
  EXPECT_EQ(usage.st_gid, 189704u);
  EXPECT_EQ(usage.st_size, 0);
  // The compute share's files: want the task's, grant the agent's, both
  // zero-filled to their layout's size.
  struct stat want = Stat(files.want), grant = Stat(files.grant);
  EXPECT_EQ(want.st_mode & 07777, 0600u);
  EXPECT_EQ(want.st_uid, 189703u);
  EXPECT_EQ(grant.st_mode & 07777, 0644u);
  EXPECT_EQ(grant.st_uid, 0u);
  EXPECT_EQ(*ReadFile(files.want), std::string(GPUSHARE_SHARE_FILE_BYTES, '\0'));
  EXPECT_EQ(*ReadFile(files.grant), std::string(GPUSHARE_SHARE_FILE_BYTES, '\0'));

  // Written again (a used ledger, a symlink in a file's place): replaced,
  // never followed; the ledger starts empty again.
  ASSERT_TRUE(WriteFileAtomic(task.path() + "/victim", "keep").ok());
  fs::remove(files.usage);
  fs::create_symlink(task.path() + "/victim", files.usage);
  ASSERT_TRUE(WriteFileAtomic(files.limits, "old").ok());
  ASSERT_TRUE(WriteGpuShareFiles(task.path(), {2 * kGiB, 500}, "/x", -1, -1).ok());
  EXPECT_EQ(*ReadFile(task.path() + "/victim"), "keep");
  EXPECT_TRUE(S_ISREG(Stat(files.usage).st_mode));
  EXPECT_EQ(Stat(files.usage).st_size, 0);
  EXPECT_EQ(Stat(files.usage).st_uid, 0u);  // uid -1: the agent's own account
  EXPECT_THAT(*ReadFile(files.limits), HasSubstr("memory_bytes 2147483648\n"));
  EXPECT_THAT(*ReadFile(files.limits), HasSubstr("usage /x/usage\n"));
}

TEST(GpuShareTest, ASymlinkedShareDirectoryIsRefused) {
  TempDir task(0700);
  TempDir elsewhere(0700);
  fs::create_symlink(elsewhere.path(), task.path() + "/gpushare");
  Status s = WriteGpuShareFiles(task.path(), {kGiB, 500}, kShareDirInJob, -1, -1);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists(elsewhere.path() + "/limits"));
  EXPECT_FALSE(WriteGpuShareFiles(task.path() + "/missing", {kGiB, 500}, "", -1, -1).ok());
}

TEST(GpuShareTest, TheLibraryMustBeAReadableFile) {
  TempDir dir(0755);
  const std::string lib = dir.path() + "/libgpushare.so";
  ASSERT_TRUE(WriteFileAtomic(lib, "elf").ok());
  EXPECT_TRUE(CheckGpushareLibrary(lib).ok());
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "no libgpushare.so was found"},
           {"lib/libgpushare.so", "the interposer's path lib/libgpushare.so is not absolute"},
           {dir.path() + "/gone.so", "cannot use " + dir.path() + "/gone.so: No such file"},
           {dir.path(), dir.path() + " is not a file"}}) {
    Status s = CheckGpushareLibrary(path);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_THAT(s.message(), HasSubstr("GPU sharing is not available on this node: " + why));
  }
}

}  // namespace
}  // namespace gpupool::exec
