#include "blob/tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "blob/tree_testing.h"
#include "common/files.h"

namespace gpupool::blob {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::CountingStore;
using testing::RandomBytes;
using testing::Write;

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

// The source tree as a map path -> contents (files) or "->target" (links).
std::map<std::string, std::string> Contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string rel = fs::relative(e.path(), dir).string();
    if (e.is_symlink()) {
      out[rel] = "->" + fs::read_symlink(e.path()).string();
    } else if (e.is_regular_file()) {
      out[rel] = *ReadFile(e.path().string());
    } else {
      out[rel] = "<dir>";
    }
  }
  return out;
}

TEST_F(TreeTest, ChunksKnownToBeStoredAreNotAskedAbout) {
  auto first = StoreTree(src_.string(), *store_);
  ASSERT_TRUE(first.ok());
  std::set<ChunkId> known;
  for (const ChunkId& id : first->ChunkIds()) known.insert(id);
  Write(src_ / "model/new.bin", RandomBytes(100000, 9));
  CountingStore counting(*store_);
  StoreTreeOptions options;
  options.known_stored = [&](const ChunkId& id) { return known.count(id) > 0; };
  TreeStats stats;
  auto second = StoreTree(src_.string(), counting, options, &stats);
  ASSERT_TRUE(second.ok());
  const int fresh = static_cast<int>(second->ChunkIds().size() - first->ChunkIds().size());
  EXPECT_GT(fresh, 0);
  EXPECT_EQ(counting.asked.load(), fresh);  // only new.bin's chunks
  EXPECT_EQ(stats.new_chunks, fresh);
  // The tree restores whole: the known chunks were indeed stored.
  ASSERT_TRUE(RestoreTree(*second, *store_, (root_ / "out").string()).ok());
  EXPECT_EQ(*ReadFile((root_ / "out/model/new.bin").string()), RandomBytes(100000, 9));
}

class RestoreOverBaseTest : public TreeTest {
 protected:
  // The base: checkpoint 1 restored into base_dir, as an agent stages it.
  void SetUp() override {
    TreeTest::SetUp();
    state_ = RandomBytes(4 << 20, 7);
    Write(root_ / "v1/ckpt-1/state.bin", state_);
    Write(root_ / "v1/ckpt-1/meta.json", "{\"step\": 1}");
    Write(root_ / "v1/ckpt-1/gone.txt", "only in the base");
    base_.manifest = *StoreTree((root_ / "v1").string(), *store_);
    base_.dir = (root_ / "base").string();
    ASSERT_TRUE(RestoreTree(base_.manifest, *store_, base_.dir).ok());
  }

  // Checkpoint 2 of the same job: state.bin with a few scattered 4 KiB
  // blocks rewritten, under a new directory name.
  void WriteV2() {
    std::string state = state_;
    for (size_t at : {size_t{100000}, size_t{1500000}, size_t{3900000}}) {
      state.replace(at, 4096, RandomBytes(4096, static_cast<uint32_t>(at)));
    }
    Write(root_ / "v2/ckpt-2/state.bin", state);
    Write(root_ / "v2/ckpt-2/meta.json", "{\"step\": 2}");
    Write(root_ / "v2/ckpt-2/new.txt", "new in 2");
  }

  std::string state_;
  RestoreBase base_;
};

TEST_F(RestoreOverBaseTest, ReadsOnlyTheChunksTheBaseLacks) {
  WriteV2();
  auto m = StoreTree((root_ / "v2").string(), *store_);
  ASSERT_TRUE(m.ok());
  CountingStore counting(*store_);
  RestoreStats stats;
  Status s = RestoreTree(*m, counting, (root_ / "out").string(), &base_, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Contents(root_ / "out"), Contents(root_ / "v2"));
  size_t state_chunks = 0;
  for (const ManifestEntry& e : m->entries) {
    if (e.path == "ckpt-2/state.bin") state_chunks = e.chunks.size();
  }
  // Three changed blocks touch at most two chunks each; the small files
  // differ whole.
  EXPECT_LE(counting.reads.load(), 6 + 2);
  EXPECT_GT(state_chunks, 20u);
  EXPECT_EQ(stats.read_chunks, counting.reads.load());
  EXPECT_GT(stats.reused_bytes, static_cast<int64_t>(state_.size() * 9 / 10));
  // The base's state.bin was moved; the file nobody took is left.
  EXPECT_FALSE(fs::exists(root_ / "base/ckpt-1/state.bin"));
  EXPECT_TRUE(fs::exists(root_ / "base/ckpt-1/gone.txt"));
}

TEST_F(RestoreOverBaseTest, AShiftedFileIsStillRestoredExactly) {
  // Bytes inserted at the front move every offset: little is in place.
  Write(root_ / "v2/ckpt-2/state.bin", "inserted" + state_);
  auto m = StoreTree((root_ / "v2").string(), *store_);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(RestoreTree(*m, *store_, (root_ / "out").string(), &base_).ok());
  EXPECT_EQ(Contents(root_ / "out"), Contents(root_ / "v2"));
}

TEST_F(RestoreOverBaseTest, ABaseFileThatDoesNotMatchItsManifestIsNotUsed) {
  WriteV2();
  auto m = StoreTree((root_ / "v2").string(), *store_);
  ASSERT_TRUE(m.ok());
  fs::resize_file(root_ / "base/ckpt-1/state.bin", 1000);
  CountingStore counting(*store_);
  ASSERT_TRUE(RestoreTree(*m, counting, (root_ / "out").string(), &base_).ok());
  EXPECT_EQ(Contents(root_ / "out"), Contents(root_ / "v2"));
  EXPECT_GT(counting.reads.load(), 20);  // state.bin read whole
}

TEST_F(RestoreOverBaseTest, TheSameTreeAgainReadsNothing) {
  CountingStore counting(*store_);
  ASSERT_TRUE(RestoreTree(base_.manifest, counting, (root_ / "out").string(), &base_).ok());
  EXPECT_EQ(Contents(root_ / "out"), Contents(root_ / "v1"));
  EXPECT_TRUE(counting.reads.load() == 0);
}

}  // namespace
}  // namespace gpupool::blob
