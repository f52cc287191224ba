#include "blob/cached_chunk_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "blob/tree.h"

namespace gpupool::blob {
namespace {

namespace fs = std::filesystem;

struct Chunk {
  ChunkId id;
  std::string frame;
};

// Random bytes barely compress, so every frame of `n` bytes is about as big.
Chunk MakeChunk(uint32_t seed, size_t n = 1000) {
  std::mt19937 gen(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(gen());
  auto span = std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return {ComputeChunkId(span), *CompressChunk(span)};
}

// A later modified_ms than everything before it.
void Tick() { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }

class CachedChunkStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) /
        ("cache-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    remote_ = *FsChunkStore::Open((root_ / "remote").string(), false);
    for (uint32_t i = 0; i < 6; ++i) {
      chunks_.push_back(MakeChunk(i));
      ASSERT_TRUE(remote_->Put(chunks_[i].id, chunks_[i].frame).ok());
    }
    frame_ = static_cast<int64_t>(chunks_[0].frame.size());
  }

  std::unique_ptr<CachedChunkStore> Open(int64_t limit, FetchManyFn fetch_many = {}) {
    CachedChunkStoreOptions o;
    o.dir = (root_ / "cache").string();
    o.limit_bytes = limit;
    auto c = CachedChunkStore::Open(o, *remote_, std::move(fetch_many));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A FetchManyFn over the remote that records what it was asked for.
  FetchManyFn Fetcher(std::vector<std::vector<ChunkId>>* calls) {
    return [this, calls](const std::vector<ChunkId>& ids, const ChunkSink& sink) {
      calls->push_back(ids);
      for (const ChunkId& id : ids) {
        GP_ASSIGN_OR_RETURN(VerifiedChunk c, remote_->Read(id));
        GP_RETURN_IF_ERROR(sink(std::move(c)));
      }
      return Status::Ok();
    };
  }

  bool Cached(int i) { return fs::exists(CachePath(i)); }
  std::string CachePath(int i) {
    return (root_ / "cache" / chunks_[i].id.substr(0, 2) / chunks_[i].id).string();
  }
  // ReadChunks, checking that each chunk handed over is the one asked for
  // with the right bytes; `got` lists them.
  Status Read(CachedChunkStore& c, const std::vector<ChunkId>& ids, std::vector<ChunkId>* got) {
    got->clear();
    return c.ReadChunks(ids, [&](VerifiedChunk v) {
      auto frame = remote_->Get(v.id);
      EXPECT_TRUE(frame.ok() && *frame == v.frame);
      EXPECT_EQ(OpenChunk(v.id, v.frame).value(), v.bytes);
      got->push_back(v.id);
      return Status::Ok();
    });
  }
  void Get(CachedChunkStore& c, int i) {
    auto frame = c.Get(chunks_[i].id);
    ASSERT_TRUE(frame.ok()) << frame.status().ToString();
    EXPECT_EQ(*frame, chunks_[i].frame);
  }

  fs::path root_;
  std::unique_ptr<FsChunkStore> remote_;
  std::vector<Chunk> chunks_;
  int64_t frame_ = 0;
};

TEST_F(CachedChunkStoreTest, GetFetchesOnceThenServesTheCopy) {
  auto c = Open(1 << 20);
  Get(*c, 0);
  Get(*c, 0);
  EXPECT_EQ(c->stats().misses, 1);
  EXPECT_EQ(c->stats().hits, 1);
  EXPECT_EQ(c->stats().cached_bytes, frame_);
  EXPECT_TRUE(Cached(0));
  // Served from the cache even when the remote lost it.
  ASSERT_TRUE(remote_->Remove(chunks_[0].id).ok());
  Get(*c, 0);
  EXPECT_EQ(c->Get(std::string(64, 'a')).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->Get("nope").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CachedChunkStoreTest, ReadChunksDownloadsOnlyWhatTheCacheLacksInOneBatch) {
  std::vector<std::vector<ChunkId>> calls;
  auto c = Open(1 << 20, Fetcher(&calls));
  Get(*c, 1);
  std::vector<ChunkId> ids = {chunks_[0].id, chunks_[1].id, chunks_[2].id, chunks_[0].id};
  std::vector<ChunkId> got;
  ASSERT_TRUE(Read(*c, ids, &got).ok());
  EXPECT_EQ(got, ids);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::vector<ChunkId>{chunks_[0].id, chunks_[2].id}));
  EXPECT_TRUE(Cached(0) && Cached(1) && Cached(2));
  EXPECT_EQ(c->stats().misses, 1);  // only the first Get
  EXPECT_EQ(c->stats().hits, 2);    // chunk 1, and chunk 0 the second time
  EXPECT_EQ(c->stats().fetched_chunks, 3);
}

TEST_F(CachedChunkStoreTest, ReadChunksWithoutBatchFetchGetsOneByOne) {
  auto c = Open(1 << 20);
  std::vector<ChunkId> got;
  ASSERT_TRUE(Read(*c, {chunks_[3].id, chunks_[4].id}, &got).ok());
  EXPECT_EQ(got.size(), 2u);
  EXPECT_TRUE(Cached(3) && Cached(4));
  EXPECT_EQ(Read(*c, {chunks_[3].id, std::string(64, 'b')}, &got).code(), StatusCode::kNotFound);
  EXPECT_EQ(Read(*c, {"nope"}, &got).code(), StatusCode::kInvalidArgument);
}

TEST_F(CachedChunkStoreTest, ReadChunksStopsAtTheSinksError) {
  std::vector<std::vector<ChunkId>> calls;
  auto c = Open(1 << 20, Fetcher(&calls));
  int handed = 0;
  Status s = c->ReadChunks({chunks_[0].id, chunks_[1].id, chunks_[2].id}, [&](VerifiedChunk) {
    return ++handed == 2 ? Status::Internal("disk full") : Status::Ok();
  });
  EXPECT_EQ(s, Status::Internal("disk full"));
  EXPECT_EQ(handed, 2);
}

TEST_F(CachedChunkStoreTest, EvictsLeastRecentlyUsedDownToTheLowWater) {
  // Room for 3.5 frames; eviction goes down to 90% of that (3.15 frames).
  auto c = Open(3 * frame_ + frame_ / 2);
  for (int i : {0, 1, 2}) {
    Get(*c, i);
    Tick();
  }
  Get(*c, 0);  // used again: now the newest
  Tick();
  Get(*c, 3);  // 4 frames: over the limit
  EXPECT_TRUE(Cached(0));
  EXPECT_FALSE(Cached(1));  // the least recently used
  EXPECT_TRUE(Cached(2));
  EXPECT_TRUE(Cached(3));
  EXPECT_EQ(c->stats().evicted_chunks, 1);
  EXPECT_EQ(c->stats().cached_bytes, 3 * frame_);
  Tick();
  Get(*c, 4);
  EXPECT_FALSE(Cached(2));  // next in line
  EXPECT_TRUE(Cached(0) && Cached(3) && Cached(4));
}

TEST_F(CachedChunkStoreTest, NeverEvictsChunksAReadIsAboutToServe) {
  std::vector<std::vector<ChunkId>> calls;
  auto c = Open(2 * frame_ + frame_ / 2, Fetcher(&calls));
  Get(*c, 0);
  Get(*c, 1);
  // 3, 4 and 5 may all arrive before 0 and 1 are read: each copy takes the
  // cache over its limit, and only the fetched copies may go.
  std::vector<ChunkId> ids = {chunks_[3].id, chunks_[4].id, chunks_[5].id, chunks_[0].id,
                              chunks_[1].id};
  std::vector<ChunkId> got;
  ASSERT_TRUE(Read(*c, ids, &got).ok());
  EXPECT_EQ(got, ids);
  EXPECT_EQ(c->stats().hits, 2);
  EXPECT_EQ(c->stats().misses, 2);  // the two Gets
  EXPECT_TRUE(Cached(0) && Cached(1));
  EXPECT_LE(c->stats().cached_bytes, 2 * frame_ + frame_ / 2);
}

TEST_F(CachedChunkStoreTest, AReadLargerThanTheCacheKeepsItAtItsLimit) {
  std::vector<std::vector<ChunkId>> calls;
  auto c = Open(frame_ + frame_ / 2, Fetcher(&calls));
  // Chunk 0 comes again after its copy was evicted for chunk 1's.
  std::vector<ChunkId> ids = {chunks_[0].id, chunks_[1].id, chunks_[2].id, chunks_[0].id};
  std::vector<ChunkId> got;
  ASSERT_TRUE(Read(*c, ids, &got).ok());
  EXPECT_EQ(got, ids);
  EXPECT_EQ(calls.size(), 1u);
  EXPECT_EQ(c->stats().fetched_chunks, 3);
  EXPECT_EQ(c->stats().misses, 1);  // the repeat, from the remote
  EXPECT_LE(c->stats().cached_bytes, frame_ + frame_ / 2);
}

TEST_F(CachedChunkStoreTest, CorruptCachedChunkIsRefetched) {
  auto c = Open(1 << 20);
  Get(*c, 0);
  {  // bit rot: one byte flipped in the middle of the cached frame
    std::fstream f(CachePath(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(frame_ / 2);
    f.put('\x5a' ^ chunks_[0].frame[frame_ / 2]);
  }
  Get(*c, 0);
  EXPECT_EQ(c->stats().corrupt_dropped, 1);
  EXPECT_EQ(c->stats().misses, 2);
  EXPECT_EQ(c->stats().cached_bytes, frame_);
  EXPECT_FALSE(fs::exists(CachePath(0) + ".corrupt"));
  Get(*c, 0);  // the fresh copy
  EXPECT_EQ(c->stats().hits, 1);
}

TEST_F(CachedChunkStoreTest, CorruptRemoteChunkIsDataLossAndNotKept) {
  Chunk other = MakeChunk(99);
  // A remote that hands out another chunk's bytes under this id.
  struct LyingStore : ChunkStore {
    std::string frame;
    Result<std::vector<ChunkId>> Missing(const std::vector<ChunkId>& ids) override { return ids; }
    Status Put(const ChunkId&, std::string_view) override { return Status::Ok(); }
    Result<std::string> Get(const ChunkId&) override { return frame; }
    Status Remove(const ChunkId&) override { return Status::Ok(); }
    Result<std::vector<ChunkId>> List() override { return std::vector<ChunkId>{}; }
  } lying;
  lying.frame = other.frame;
  CachedChunkStoreOptions o;
  o.dir = (root_ / "cache").string();
  auto c = *CachedChunkStore::Open(o, lying);
  EXPECT_EQ(c->Get(chunks_[0].id).status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(Cached(0));
}

TEST_F(CachedChunkStoreTest, PutsGoToTheRemoteAndKeepACopy) {
  auto c = Open(1 << 20);
  Chunk fresh = MakeChunk(42);
  ASSERT_TRUE(c->Missing({fresh.id}).ok());
  EXPECT_EQ(c->Missing({fresh.id, chunks_[0].id}).value(), std::vector<ChunkId>{fresh.id});
  ASSERT_TRUE(c->PutMany({{fresh.id, fresh.frame}}).ok());
  EXPECT_TRUE(c->Missing({fresh.id})->empty());  // the remote has it
  EXPECT_TRUE(fs::exists(root_ / "cache" / fresh.id.substr(0, 2) / fresh.id));
  EXPECT_EQ(c->Put(chunks_[5].id, "garbage").code(), StatusCode::kDataLoss);
  ASSERT_TRUE(c->Remove(fresh.id).ok());
  EXPECT_FALSE(fs::exists(root_ / "cache" / fresh.id.substr(0, 2) / fresh.id));
  EXPECT_EQ(c->Missing({fresh.id}).value(), std::vector<ChunkId>{fresh.id});
  EXPECT_EQ(c->stats().cached_bytes, 0);
}

TEST_F(CachedChunkStoreTest, OpenCountsWhatTheDirectoryHoldsAndTrims) {
  {
    auto c = Open(1 << 20);
    for (int i : {0, 1, 2, 3}) {
      Get(*c, i);
      Tick();
    }
  }
  auto c = Open(2 * frame_ + frame_ / 2);
  EXPECT_LE(c->stats().cached_bytes, 2 * frame_);
  EXPECT_FALSE(Cached(0));
  EXPECT_TRUE(Cached(3));
}

TEST_F(CachedChunkStoreTest, RestoresATreeAndTheSecondRestoreIsAllHits) {
  fs::path src = root_ / "src";
  fs::create_directories(src / "sub");
  std::ofstream(src / "a.txt") << std::string(100000, 'a');
  std::ofstream(src / "sub" / "b.bin") << MakeChunk(7, 300000).frame;
  auto m = StoreTree(src.string(), *remote_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  std::vector<std::vector<ChunkId>> calls;
  auto c = Open(64 << 20, Fetcher(&calls));
  ASSERT_TRUE(RestoreTree(*m, *c, (root_ / "out1").string()).ok());
  EXPECT_EQ(calls.size(), 1u);
  EXPECT_EQ(c->stats().misses, 0);
  ASSERT_TRUE(RestoreTree(*m, *c, (root_ / "out2").string()).ok());
  EXPECT_EQ(calls.size(), 1u);  // nothing left to download
  EXPECT_EQ(c->stats().fetched_chunks, static_cast<int64_t>(m->ChunkIds().size()));
  std::ifstream in(root_ / "out2" / "a.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, std::string(100000, 'a'));
}

}  // namespace
}  // namespace gpupool::blob
