#include "blob/tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/files.h"

namespace gpupool::blob {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

void Write(const fs::path& p, const std::string& data) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
}

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-tree-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    store_ = *FsChunkStore::Open(root_ / "chunks", false);
    src_ = root_ / "src";
    Write(src_ / "model/weights.pt", RandomBytes(3 << 20, 1));
    Write(src_ / "model/config.json", "{\"layers\": 12}\n");
    Write(src_ / "empty", "");
    Write(src_ / "run.sh", "#!/bin/sh\necho hi\n");
    fs::permissions(src_ / "run.sh", fs::perms(0755));
    fs::create_directories(src_ / "logs/old");
    fs::create_symlink("model/weights.pt", src_ / "latest");
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_, src_;
  std::unique_ptr<FsChunkStore> store_;
};

TEST_F(TreeTest, StoresAndRestoresATreeExactly) {
  TreeStats stats;
  auto m = StoreTree(src_, *store_, {}, &stats);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(stats.files, 4);
  EXPECT_EQ(stats.bytes, (3 << 20) + 15 + 18);
  EXPECT_GT(stats.chunks, 10);  // 3 MiB at 64 KiB on average
  EXPECT_EQ(stats.new_chunks, static_cast<int64_t>(m->ChunkIds().size()));
  // The manifest is valid as decoded from its text.
  auto decoded = DecodeManifest(EncodeManifest(*m));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();

  fs::path out = root_ / "out";
  ASSERT_TRUE(RestoreTree(*m, *store_, out).ok());
  EXPECT_EQ(*ReadFile(out / "model/weights.pt"), *ReadFile(src_ / "model/weights.pt"));
  EXPECT_EQ(*ReadFile(out / "model/config.json"), "{\"layers\": 12}\n");
  EXPECT_EQ(fs::file_size(out / "empty"), 0u);
  EXPECT_EQ(fs::status(out / "run.sh").permissions() & fs::perms::all, fs::perms(0755));
  EXPECT_TRUE(fs::is_directory(out / "logs/old"));
  EXPECT_EQ(fs::read_symlink(out / "latest"), "model/weights.pt");
  // Into a directory that is not empty: refused.
  EXPECT_EQ(RestoreTree(*m, *store_, out).code(), StatusCode::kFailedPrecondition);
}

TEST_F(TreeTest, AnEditedTreeUploadsOnlyTheChunksAroundTheEdit) {
  ASSERT_TRUE(StoreTree(src_, *store_).ok());
  TreeStats again;
  ASSERT_TRUE(StoreTree(src_, *store_, {}, &again).ok());
  EXPECT_EQ(again.new_chunks, 0);
  EXPECT_EQ(again.uploaded_bytes, 0);
  // Insert 100 bytes in the middle of the big file: the chunks after the
  // insertion shift but keep their boundaries, so only a few are new.
  std::string w = *ReadFile(src_ / "model/weights.pt");
  w.insert(w.size() / 2, RandomBytes(100, 7));
  Write(src_ / "model/weights.pt", w);
  TreeStats edited;
  auto m = StoreTree(src_, *store_, {}, &edited);
  ASSERT_TRUE(m.ok());
  EXPECT_GE(edited.new_chunks, 1);
  EXPECT_LE(edited.new_chunks, 3) << "of " << edited.chunks;
  EXPECT_LT(edited.uploaded_bytes, 3 * 256 * 1024 + 1024);
  fs::path out = root_ / "out";
  ASSERT_TRUE(RestoreTree(*m, *store_, out).ok());
  EXPECT_EQ(*ReadFile(out / "model/weights.pt"), w);
}

TEST_F(TreeTest, IgnoredPathsAreLeftOut) {
  StoreTreeOptions options;
  options.ignore = [](const std::string& path, bool is_dir) {
    return (is_dir && path == "logs") || path.ends_with(".json");
  };
  auto m = StoreTree(src_, *store_, options);
  ASSERT_TRUE(m.ok());
  for (const ManifestEntry& e : m->entries) {
    EXPECT_FALSE(e.path.starts_with("logs")) << e.path;
    EXPECT_FALSE(e.path.ends_with(".json")) << e.path;
  }
  EXPECT_EQ(m->entries.size(), 5u);  // model, model/weights.pt, empty, run.sh, latest
}

TEST_F(TreeTest, ReportsScannedBytesAsItReadsFiles) {
  std::vector<int64_t> seen;
  StoreTreeOptions options;
  options.on_scanned = [&seen](int64_t bytes) { seen.push_back(bytes); };
  TreeStats stats;
  ASSERT_TRUE(StoreTree(src_, *store_, options, &stats).ok());
  ASSERT_EQ(static_cast<int64_t>(seen.size()), stats.chunks);  // once per chunk
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_LT(seen.front(), 1 << 20);  // long before the 3 MiB file is done
  EXPECT_EQ(seen.back(), stats.bytes);
}

TEST_F(TreeTest, ACorruptChunkFailsTheRestoreAndLeavesNoPartialFile) {
  auto m = StoreTree(src_, *store_);
  ASSERT_TRUE(m.ok());
  const ManifestEntry& big = *std::find_if(m->entries.begin(), m->entries.end(), [](const auto& e) {
    return e.path == "model/weights.pt";
  });
  const ChunkId& victim = big.chunks[big.chunks.size() / 2].id;
  std::string frame = *ReadFile(store_->PathOf(victim));
  frame[frame.size() / 2] ^= 0x10;
  std::ofstream(store_->PathOf(victim), std::ios::binary | std::ios::trunc) << frame;
  fs::path out = root_ / "out";
  Status s = RestoreTree(*m, *store_, out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("model/weights.pt"));
  EXPECT_FALSE(fs::exists(out / "model/weights.pt"));
  EXPECT_FALSE(fs::exists(out / "model/weights.pt.gpupool-partial"));
  // The sender offers the tree again: only the corrupt chunk goes up again,
  // and the restore succeeds.
  TreeStats again;
  ASSERT_TRUE(StoreTree(src_, *store_, {}, &again).ok());
  EXPECT_EQ(again.new_chunks, 1);
  fs::path out2 = root_ / "out2";
  ASSERT_TRUE(RestoreTree(*m, *store_, out2).ok());
  EXPECT_EQ(*ReadFile(out2 / "model/weights.pt"), *ReadFile(src_ / "model/weights.pt"));
}

TEST_F(TreeTest, ARestoreNeverWritesOutsideItsDirectory) {
  Manifest evil;
  evil.entries.push_back({"../escape", EntryType::kFile, 0644, 0, {}, ""});
  EXPECT_EQ(RestoreTree(evil, *store_, root_ / "out").code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(root_ / "escape"));
}

}  // namespace
}  // namespace gpupool::blob
