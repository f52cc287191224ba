#include "agent/agent_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/files.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class AgentStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-agent-state-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/agent.json";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static ino_t Inode(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  }
  std::string dir_, path_;
};

TEST_F(AgentStateTest, ANewAgentHasNoStateAndSavesReadBackInPlace) {
  AgentStateFile file(path_);
  auto none = file.Load();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);

  ASSERT_TRUE(file.Save({7, "node-abc"}).ok());
  ino_t first = Inode(path_);
  for (int64_t seq = 8; seq <= 1'000; ++seq) ASSERT_TRUE(file.Save({seq, "node-abc"}).ok());
  EXPECT_EQ(Inode(path_), first) << "saved in place: no new file per save";
  EXPECT_EQ(fs::file_size(path_), AgentStateFile::kBytes);

  // What a restarted agent reads (a new object, as after a restart).
  auto loaded = AgentStateFile(path_).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(*loaded);
  EXPECT_EQ((*loaded)->last_server_seq, 1'000);
  EXPECT_EQ((*loaded)->node_id, "node-abc");
}

TEST_F(AgentStateTest, AnOlderLongerFileLeavesNothingBehind) {
  // A file from before (written whole, and longer than a record).
  std::ofstream(path_) << R"({"last_server_seq": 3, "node_id": "n"})" << std::string(600, ' ')
                       << "\n";
  AgentStateFile file(path_);
  ASSERT_EQ((*file.Load())->last_server_seq, 3);
  ASSERT_TRUE(file.Save({4, "n"}).ok());
  EXPECT_EQ(fs::file_size(path_), AgentStateFile::kBytes);
  EXPECT_EQ((*AgentStateFile(path_).Load())->last_server_seq, 4);
}

TEST_F(AgentStateTest, AFileThatIsNoStateIsAnErrorNotAFreshStart) {
  std::ofstream(path_) << "{\"last_server_seq\": \"seven\"}\n";
  auto bad = AgentStateFile(path_).Load();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path_));
  std::ofstream(path_, std::ios::trunc) << "not json";
  EXPECT_FALSE(AgentStateFile(path_).Load().ok());
}

TEST_F(AgentStateTest, ANodeIdTooLongForARecordIsStillSavedWhole) {
  AgentStateFile file(path_);
  ASSERT_TRUE(file.Save({1, "short"}).ok());
  std::string id(400, 'x');
  ASSERT_TRUE(file.Save({2, id}).ok());
  auto loaded = AgentStateFile(path_).Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)->node_id, id);
  ASSERT_TRUE(file.Save({3, "short"}).ok());  // back to a record
  EXPECT_EQ((*AgentStateFile(path_).Load())->last_server_seq, 3);
  EXPECT_EQ(fs::file_size(path_), AgentStateFile::kBytes);
}

}  // namespace
}  // namespace gpupool::agent
