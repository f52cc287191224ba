#include "common/files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace gpupool {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-files-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(FilesTest, AnAtomicWriteReplacesTheFileWholeAndLeavesNoTemporary) {
  std::string path = dir_ + "/state";
  ASSERT_TRUE(WriteFileAtomic(path, "one\n").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "two\n", {0600, true}).ok());
  EXPECT_EQ(ReadFile(path).value_or(""), "two\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(FilesTest, ANewFileIsWrittenWithItsModeAndNeverOverAnExistingOne) {
  std::string path = dir_ + "/exec.json";
  ::umask(077);  // narrower than the mode asked for
  ASSERT_TRUE(WriteNewFile(path, "{}\n", 0644).ok());
  ::umask(022);
  EXPECT_EQ(ReadFile(path).value_or(""), "{}\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);

  Status again = WriteNewFile(path, "other\n");
  EXPECT_FALSE(again.ok());
  EXPECT_THAT(again.message(), HasSubstr(path));
  EXPECT_EQ(ReadFile(path).value_or(""), "{}\n") << "an existing file is left as it was";
  EXPECT_FALSE(WriteNewFile(dir_ + "/missing/file", "x").ok());
}

}  // namespace
}  // namespace gpupool
