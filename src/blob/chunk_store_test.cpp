#include "blob/chunk_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "blob/tree_testing.h"
#include "common/files.h"

namespace gpupool::blob {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

using testing::RandomBytes;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpupool-blob-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ChunkId, IsTheSha256OfTheBytes) {
  EXPECT_EQ(ComputeChunkId(Bytes("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ComputeChunkId(Bytes("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(IsChunkId(ComputeChunkId(Bytes("x"))));
  EXPECT_FALSE(IsChunkId("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
  EXPECT_FALSE(IsChunkId("ba78"));
  EXPECT_FALSE(IsChunkId("../../../../etc/passwd" + std::string(42, 'a')));
}

TEST(Chunk, CompressesAndOpensOnlyWhatMatchesItsId) {
  std::string data = RandomBytes(100'000, 1) + std::string(100'000, 'z');
  ChunkId id = ComputeChunkId(Bytes(data));
  auto frame = CompressChunk(Bytes(data));
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_LT(frame->size(), data.size());  // the zeros compress
  auto back = OpenChunk(id, *frame);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);

  // Another chunk's bytes under this id, a flipped byte, a truncated frame,
  // garbage: each is DataLoss, never data.
  auto other = CompressChunk(Bytes("other"));
  EXPECT_EQ(OpenChunk(id, *other).status().code(), StatusCode::kDataLoss);
  std::string flipped = *frame;
  flipped[flipped.size() / 2] ^= 0x40;
  EXPECT_EQ(OpenChunk(id, flipped).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(OpenChunk(id, frame->substr(0, frame->size() - 10)).status().code(),
            StatusCode::kDataLoss);
  EXPECT_THAT(OpenChunk(id, "not zstd").status().message(), HasSubstr("not a zstd frame"));
  // A frame that claims more than the limit is refused before decompressing.
  EXPECT_THAT(OpenChunk(id, *frame, 1000).status().message(), HasSubstr("over the limit"));
  EXPECT_EQ(OpenChunk("nope", *frame).status().code(), StatusCode::kInvalidArgument);
}

TEST(FsChunkStore, PutGetMissingRemoveList) {
  TempDir dir;
  auto store = FsChunkStore::Open(dir.path() + "/chunks", /*fsync=*/false);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<ChunkId> ids;
  for (uint32_t i = 0; i < 5; ++i) {
    std::string data = RandomBytes(1000 + i, i);
    ids.push_back(ComputeChunkId(Bytes(data)));
    if (i % 2 == 0) {
      ASSERT_TRUE((*store)->Put(ids.back(), *CompressChunk(Bytes(data))).ok());
    }
  }
  auto missing = (*store)->Missing(ids);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, (std::vector<ChunkId>{ids[1], ids[3]}));
  auto got = (*store)->Get(ids[2]);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*OpenChunk(ids[2], *got), RandomBytes(1002, 2));
  EXPECT_EQ((*store)->Get(ids[1]).status().code(), StatusCode::kNotFound);
  // Put is idempotent.
  EXPECT_TRUE((*store)->Put(ids[0], *CompressChunk(Bytes(RandomBytes(1000, 0)))).ok());
  auto listed = (*store)->List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(std::set<ChunkId>(listed->begin(), listed->end()),
            (std::set<ChunkId>{ids[0], ids[2], ids[4]}));
  EXPECT_TRUE((*store)->Remove(ids[0]).ok());
  EXPECT_TRUE((*store)->Remove(ids[0]).ok());  // already gone: fine
  EXPECT_EQ((*store)->Get(ids[0]).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store)->Missing({"bad"}).status().code(), StatusCode::kInvalidArgument);
}

TEST(FsChunkStore, NeverStoresACorruptChunk) {
  TempDir dir;
  auto store = *FsChunkStore::Open(dir.path(), false);
  std::string data = RandomBytes(5000, 9);
  ChunkId id = ComputeChunkId(Bytes(data));
  Status s = store->Put(id, *CompressChunk(Bytes(RandomBytes(5000, 10))));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(store->PathOf(id)));
  EXPECT_EQ(*store->Missing({id}), std::vector<ChunkId>{id});
}

TEST(FsChunkStore, ACorruptedStoredChunkIsDetectedOnRead) {
  TempDir dir;
  auto store = *FsChunkStore::Open(dir.path(), false);
  std::string data = RandomBytes(5000, 3);
  ChunkId id = ComputeChunkId(Bytes(data));
  ASSERT_TRUE(store->Put(id, *CompressChunk(Bytes(data))).ok());
  // Bit rot on disk.
  std::string stored = *ReadFile(store->PathOf(id));
  stored[stored.size() - 5] ^= 1;
  std::ofstream(store->PathOf(id), std::ios::binary | std::ios::trunc) << stored;
  auto got = store->Get(id);
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(id.substr(0, 12)));
  // It is missing now, so the next upload puts a good copy.
  EXPECT_EQ(*store->Missing({id}), std::vector<ChunkId>{id});
  EXPECT_TRUE(fs::exists(store->PathOf(id) + ".corrupt"));
  ASSERT_TRUE(store->Put(id, *CompressChunk(Bytes(data))).ok());
  EXPECT_EQ(*OpenChunk(id, *store->Get(id)), data);
}

TEST(FsChunkStore, AWriterKilledMidPutLeavesNoChunkBehind) {
  TempDir dir;
  auto store = *FsChunkStore::Open(dir.path(), true);
  // Children write big chunks and are killed at random moments; whatever
  // is listed afterwards must be whole.
  for (int round = 0; round < 20; ++round) {
    std::string data = RandomBytes(4 << 20, 100 + round);
    ChunkId id = ComputeChunkId(Bytes(data));
    std::string frame = *CompressChunk(Bytes(data), 1);
    pid_t pid = ::fork();
    if (pid == 0) {
      (void)store->Put(id, frame);
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(round * 500));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  for (const ChunkId& id : *store->List()) {
    auto got = store->Get(id);
    EXPECT_TRUE(got.ok()) << id << ": " << got.status().ToString();
  }
}

}  // namespace
}  // namespace gpupool::blob
