// BlobService on real files in a temporary directory.
#include "server/blob_service.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/files.h"
#include "server/blob_testing.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;
using testing::MakeUpload;
using testing::Upload;
namespace fs = std::filesystem;

constexpr int64_t kHourMs = 3'600'000;

class BlobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BlobServiceOptions o;
    o.dir = dir_.path() + "/blobs";
    o.fsync = false;
    auto b = BlobService::Open(o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    blobs_ = *std::move(b);
  }

  void Store(const Upload& u) {
    ASSERT_TRUE(blobs_->PutChunks(u.Records()).ok());
    auto m = blobs_->PutManifest(u.id, u.manifest);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
  }

  // Sets a file's modification time `ago_ms` into the past.
  static void Age(const std::string& path, int64_t ago_ms) {
    int64_t t = RealClock().NowMs() - ago_ms;
    struct timespec times[2];
    times[0].tv_sec = times[1].tv_sec = t / 1000;
    times[0].tv_nsec = times[1].tv_nsec = (t % 1000) * 1'000'000;
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  }
  // The files Open(options) keeps them in.
  std::string ChunkPath(const std::string& id) {
    return static_cast<blob::FsChunkStore&>(blobs_->chunks()).PathOf(id);
  }
  std::string ManifestPath(const std::string& id) {
    return static_cast<blob::FsObjectStore&>(blobs_->manifests())
        .PathOf(BlobService::ManifestKey(id));
  }
  void AgeAll(const Upload& u, int64_t ago_ms) {
    for (const auto& id : u.ChunkIds()) Age(ChunkPath(id), ago_ms);
    if (blobs_->HasManifest(u.id)) Age(ManifestPath(u.id), ago_ms);
  }
  Result<GcStats> Gc(const std::set<std::string>& reachable) {
    return blobs_->CollectGarbage(reachable, RealClock().NowMs(), kHourMs);
  }

  testing::TempDir dir_;
  std::unique_ptr<BlobService> blobs_;
};

TEST_F(BlobServiceTest, LayoutUnderTheDataDir) {
  Upload u = MakeUpload({"alpha"});
  Store(u);
  const std::string id = u.frames[0].first;
  EXPECT_TRUE(fs::exists(dir_.path() + "/blobs/chunks/" + id.substr(0, 2) + "/" + id));
  EXPECT_TRUE(fs::exists(dir_.path() + "/blobs/manifests/" + u.id + ".json"));
}

TEST_F(BlobServiceTest, MissingInTheOrderGivenAndRefusesBadIds) {
  Upload u = MakeUpload({"a", "b", "c"});
  ASSERT_TRUE(blobs_->PutChunks(blob::EncodeChunkRecords({u.frames[1]})).ok());
  auto ids = u.ChunkIds();
  auto missing = blobs_->Missing({ids[2], ids[1], ids[0]});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, (std::vector<std::string>{ids[2], ids[0]}));
  auto bad = blobs_->Missing({ids[0], "ABC"});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"ABC\""));
}

TEST_F(BlobServiceTest, PutChunksVerifiesEachRecordAndNamesTheBadOne) {
  Upload u = MakeUpload({"one", "two", "three"});
  auto frames = u.frames;
  frames[2].second = frames[0].second;  // a valid frame under the wrong id
  auto stored = blobs_->PutChunks(blob::EncodeChunkRecords(frames));
  EXPECT_EQ(stored.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(stored.status().message(),
              HasSubstr("records[2] (chunk " + u.frames[2].first.substr(0, 12) + ")"));
  // Every record is checked before any is stored: a bad body stores nothing.
  EXPECT_EQ(*blobs_->Missing(u.ChunkIds()), u.ChunkIds());

  auto malformed = blobs_->PutChunks(u.frames[0].first + " 5\nab");
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr("records[0]"));

  auto all = blobs_->PutChunks(u.Records());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, 3);
  EXPECT_TRUE(blobs_->Missing(u.ChunkIds())->empty());
}

TEST_F(BlobServiceTest, FetchReturnsAPrefixInOrderUnderTheCap) {
  Upload u = MakeUpload({std::string(5000, 'x'), std::string(6000, 'y'), "z"});
  ASSERT_TRUE(blobs_->PutChunks(u.Records()).ok());
  auto ids = u.ChunkIds();
  auto all = blobs_->FetchChunks({ids[2], ids[0], ids[1]}, blob::kMaxChunkRecordsBytes);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto records = blob::DecodeChunkRecords(*all);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(*records, (std::vector<blob::ChunkFrame>{u.frames[2], u.frames[0], u.frames[1]}));

  // A cap that fits the first record only: a one-record prefix.
  size_t first = blob::ChunkRecordBytes(u.frames[0].second.size());
  auto capped = blobs_->FetchChunks(ids, first + 10);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(*blob::DecodeChunkRecords(*capped), std::vector<blob::ChunkFrame>{u.frames[0]});
  // At least one record, however small the cap.
  auto tiny = blobs_->FetchChunks(ids, 1);
  EXPECT_EQ(blob::DecodeChunkRecords(*tiny)->size(), 1u);
}

TEST_F(BlobServiceTest, FetchOfAMissingChunkIsNotFoundNamingIt) {
  Upload u = MakeUpload({"here", "absent"});
  ASSERT_TRUE(blobs_->PutChunks(blob::EncodeChunkRecords({u.frames[0]})).ok());
  auto r = blobs_->FetchChunks(u.ChunkIds(), blob::kMaxChunkRecordsBytes);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(u.frames[1].first));
}

TEST_F(BlobServiceTest, CorruptChunkOnFetchIsDataLossSetAsideAndReplaceable) {
  Upload u = MakeUpload({"precious bytes"});
  Store(u);
  const std::string id = u.frames[0].first;
  std::string path = ChunkPath(id);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "rotten";
  }
  auto r = blobs_->FetchChunks({id}, blob::kMaxChunkRecordsBytes);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(id));
  // Set aside: missing now, so the next upload replaces it.
  EXPECT_EQ(*blobs_->Missing({id}), std::vector<std::string>{id});
  ASSERT_TRUE(blobs_->PutChunks(u.Records()).ok());
  auto again = blobs_->FetchChunks({id}, blob::kMaxChunkRecordsBytes);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*blob::DecodeChunkRecords(*again), u.frames);
}

TEST_F(BlobServiceTest, PutManifestChecksIdTextAndChunks) {
  Upload u = MakeUpload({"a", "b"});
  ASSERT_TRUE(blobs_->PutChunks(u.Records()).ok());

  auto bad_id = blobs_->PutManifest("xyz", u.manifest);
  EXPECT_EQ(bad_id.status().code(), StatusCode::kInvalidArgument);
  auto mismatch = blobs_->PutManifest(std::string(64, 'a'), u.manifest);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("hashes to " + u.id));

  std::string evil = R"({"version": 1, "entries": [{"path": "../x", "type": "dir", "mode": 493}]})";
  auto undecodable = blobs_->PutManifest(blob::ManifestId(evil), evil);
  EXPECT_EQ(undecodable.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(undecodable.status().message(), HasSubstr("entries[0]"));
  EXPECT_FALSE(blobs_->HasManifest(blob::ManifestId(evil)));

  auto stored = blobs_->PutManifest(u.id, u.manifest);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(stored->created);
  EXPECT_EQ(stored->files, 2);
  EXPECT_EQ(stored->chunks, 2);
  EXPECT_EQ(stored->bytes, 2);
  auto again = blobs_->PutManifest(u.id, u.manifest);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);  // idempotent
  EXPECT_EQ(*blobs_->GetManifest(u.id), u.manifest);
  auto described = blobs_->DescribeManifest(u.id);
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->files, 2);
  EXPECT_EQ(blobs_->GetManifest(std::string(64, 'f')).status().code(), StatusCode::kNotFound);
}

// Killed during upload: a client that stored half its chunks cannot store
// the manifest, so a stored manifest never names a missing chunk.
TEST_F(BlobServiceTest, ManifestWithMissingChunksIsRefusedAndNothingIsStored) {
  Upload u = MakeUpload({"c0", "c1", "c2", "c3"});
  ASSERT_TRUE(blobs_->PutChunks(blob::EncodeChunkRecords({u.frames[0], u.frames[1]})).ok());
  auto r = blobs_->PutManifest(u.id, u.manifest);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("2 chunks are missing, e.g. " + u.frames[2].first));
  EXPECT_FALSE(blobs_->HasManifest(u.id));
  EXPECT_FALSE(fs::exists(ManifestPath(u.id)));
  EXPECT_EQ(blobs_->GetManifest(u.id).status().code(), StatusCode::kNotFound);
  // Resuming the upload completes it.
  ASSERT_TRUE(blobs_->PutChunks(blob::EncodeChunkRecords({u.frames[2], u.frames[3]})).ok());
  EXPECT_TRUE(blobs_->PutManifest(u.id, u.manifest).ok());
}

TEST_F(BlobServiceTest, GcRemovesOnlyUnreachableBlobsPastTheGrace) {
  Upload kept = MakeUpload({"kept-1", "shared"});
  Upload dropped = MakeUpload({"dropped-1", "shared"});
  Upload young = MakeUpload({"young-1"});
  Store(kept);
  Store(dropped);
  Store(young);
  Upload stray = MakeUpload({"stray chunk"});  // uploaded, never in a manifest
  ASSERT_TRUE(blobs_->PutChunks(stray.Records()).ok());
  Upload fresh_stray = MakeUpload({"fresh stray"});
  ASSERT_TRUE(blobs_->PutChunks(fresh_stray.Records()).ok());
  AgeAll(kept, 2 * kHourMs);
  AgeAll(dropped, 2 * kHourMs);
  AgeAll(stray, 2 * kHourMs);

  auto stats = Gc({kept.id});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->manifests_removed, 1);  // dropped; young is within the grace
  EXPECT_EQ(stats->chunks_removed, 2);     // dropped-1 and the stray
  EXPECT_EQ(stats->chunks_kept, 4);        // kept-1, shared, young-1, fresh stray
  EXPECT_GT(stats->bytes_freed, 0);
  EXPECT_TRUE(blobs_->HasManifest(kept.id));
  EXPECT_FALSE(blobs_->HasManifest(dropped.id));
  EXPECT_TRUE(blobs_->HasManifest(young.id));
  EXPECT_TRUE(blobs_->Missing(kept.ChunkIds())->empty());
  EXPECT_TRUE(blobs_->Missing(young.ChunkIds())->empty());
  EXPECT_EQ(*blobs_->Missing({dropped.frames[0].first, stray.frames[0].first}),
            (std::vector<std::string>{dropped.frames[0].first, stray.frames[0].first}));
  EXPECT_TRUE(blobs_->Missing(fresh_stray.ChunkIds())->empty());

  // Once the young ones age they go too, and nothing reachable ever does.
  auto later = blobs_->CollectGarbage({kept.id}, RealClock().NowMs() + 2 * kHourMs, kHourMs);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->manifests_removed, 1);
  EXPECT_EQ(later->chunks_removed, 2);  // young-1, fresh stray
  EXPECT_EQ(later->chunks_kept, 2);
  EXPECT_TRUE(blobs_->Missing(kept.ChunkIds())->empty());
}

TEST_F(BlobServiceTest, AskingAndPuttingAgainRefreshTheAge) {
  Upload u = MakeUpload({"reused"});
  Store(u);
  AgeAll(u, 2 * kHourMs);
  // A client checks what is missing and re-PUTs the manifest before it
  // submits: collection must not take them in between.
  ASSERT_TRUE(blobs_->Missing(u.ChunkIds()).ok());
  ASSERT_TRUE(blobs_->PutManifest(u.id, u.manifest).ok());
  auto stats = Gc({});
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->manifests_removed, 0);
  EXPECT_EQ(stats->chunks_removed, 0);
}

TEST_F(BlobServiceTest, GcStopsAtAKeptManifestThatDoesNotDecode) {
  Upload u = MakeUpload({"x"});
  Store(u);
  ASSERT_TRUE(WriteFileAtomic(ManifestPath(u.id), "garbage").ok());
  AgeAll(u, 2 * kHourMs);
  auto stats = Gc({u.id});
  EXPECT_EQ(stats.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(blobs_->Missing(u.ChunkIds())->empty());  // its chunks were not touched
}

}  // namespace
}  // namespace gpupool::server

namespace gpupool::server {
namespace {

TEST_F(BlobServiceTest, AdmissionSeesOnlyNewBytesAndARefusalStoresNothing) {
  Upload first = MakeUpload({"alpha-alpha", "beta"});
  ASSERT_TRUE(blobs_->PutChunks(blob::EncodeChunkRecords({first.frames[0]})).ok());
  // Both chunks sent again: only the one not stored is new (its
  // decompressed size).
  std::vector<int64_t> offered;
  auto refuse = [&](int64_t bytes) {
    offered.push_back(bytes);
    return Status::ResourceExhausted("over quota");
  };
  auto refused = blobs_->PutChunks(first.Records(), refuse);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(offered, std::vector<int64_t>{4});  // "beta"
  auto missing = blobs_->Missing(first.ChunkIds());
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, std::vector<std::string>{first.ChunkIds()[1]});
  // A manifest not stored yet is offered too; refused, it is not written.
  ASSERT_TRUE(blobs_->PutChunks(first.Records()).ok());
  auto m = blobs_->PutManifest(first.id, first.manifest, refuse);
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(offered.back(), static_cast<int64_t>(first.manifest.size()));
  EXPECT_FALSE(blobs_->HasManifest(first.id));
  // Admitted, both are stored; stored already, nothing is offered.
  ASSERT_TRUE(
      blobs_->PutManifest(first.id, first.manifest, [](int64_t) { return Status::Ok(); }).ok());
  offered.clear();
  ASSERT_TRUE(blobs_->PutChunks(first.Records(), refuse).ok());
  ASSERT_TRUE(blobs_->PutManifest(first.id, first.manifest, refuse).ok());
  EXPECT_TRUE(offered.empty());
}

}  // namespace
}  // namespace gpupool::server
