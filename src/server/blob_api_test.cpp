// The blob store and checkpoint endpoints end to end: the real HTTP server on
// an event loop thread, a real SQLite store, real blob files in a temporary
// directory, requests through net::Fetch.
#include "server/blob_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/files.h"
#include "common/ids.h"
#include "net/http_client.h"
#include "server/api.h"
#include "server/api_testing.h"
#include "server/blob_testing.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::MakeUpload;
using testing::Upload;

constexpr int64_t kHourMs = 3'600'000;

class BlobApiTest : public ApiTestServer {
 protected:
  // Agents upload for attempt 1.1 (job 1, placed on their node a).
  net::HttpResponse Upload(const testing::Upload& u, const std::string& token) {
    std::string query = token == agent_ ? "?attempt=1.1" : "";
    auto chunks = Call("POST", "/v1/blobs/chunks" + query, token, u.Records(),
                       std::string(blob::kChunkRecordsContentType));
    EXPECT_EQ(chunks.status, 200) << chunks.body;
    return Call("PUT", "/v1/blobs/manifests/" + u.id + query, token, u.manifest);
  }
  static std::string IdList(const std::vector<std::string>& ids) {
    return json{{"chunks", ids}}.dump();
  }
};

TEST_F(BlobApiTest, MissingThenUploadThenFetch) {
  testing::Upload u = MakeUpload({"one", "two", "three"});
  auto ids = u.ChunkIds();
  auto missing = Call("POST", "/v1/blobs/missing", alice_, IdList(ids));
  ASSERT_EQ(missing.status, 200) << missing.body;
  EXPECT_EQ(Json(missing)["missing"], json(ids));

  auto up = Call("POST", "/v1/blobs/chunks", alice_, u.Records(),
                 std::string(blob::kChunkRecordsContentType));
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_EQ(Json(up)["stored"], 3);
  EXPECT_EQ(Json(Call("POST", "/v1/blobs/missing", alice_, IdList(ids)))["missing"], json::array());

  auto fetched = Call("POST", "/v1/blobs/chunks/fetch", alice_, IdList({ids[2], ids[0]}));
  ASSERT_EQ(fetched.status, 200) << fetched.body;
  EXPECT_EQ(fetched.content_type, blob::kChunkRecordsContentType);
  auto records = blob::DecodeChunkRecords(fetched.body);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ(*records, (std::vector<blob::ChunkFrame>{u.frames[2], u.frames[0]}));
}

TEST_F(BlobApiTest, ChunkEndpointErrors) {
  testing::Upload u = MakeUpload({"one", "two"});
  auto bad_id = Call("POST", "/v1/blobs/missing", alice_, IdList({u.frames[0].first, "nope"}));
  EXPECT_EQ(bad_id.status, 400);
  EXPECT_THAT(ErrorMessage(bad_id), HasSubstr("chunks[1]"));
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", alice_, "{}").status, 400);
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", alice_, "not json").status, 400);

  auto frames = u.frames;
  frames[1].second = "not a zstd frame";
  const std::string records_type(blob::kChunkRecordsContentType);
  auto corrupt =
      Call("POST", "/v1/blobs/chunks", alice_, blob::EncodeChunkRecords(frames), records_type);
  EXPECT_EQ(corrupt.status, 400);
  EXPECT_THAT(ErrorMessage(corrupt),
              HasSubstr("records[1] (chunk " + u.frames[1].first.substr(0, 12) + ")"));
  auto truncated = Call("POST", "/v1/blobs/chunks", alice_,
                        u.Records().substr(0, u.Records().size() - 1), records_type);
  EXPECT_EQ(truncated.status, 400);
  EXPECT_THAT(ErrorMessage(truncated), HasSubstr("records[1]"));
  auto wrong_type = Call("POST", "/v1/blobs/chunks", alice_, u.Records(), "application/json");
  EXPECT_EQ(wrong_type.status, 400);

  auto absent = Call("POST", "/v1/blobs/chunks/fetch", alice_, IdList({u.frames[1].first}));
  EXPECT_EQ(absent.status, 404);
  EXPECT_THAT(ErrorMessage(absent), HasSubstr(u.frames[1].first));
}

TEST_F(BlobApiTest, CorruptChunkOnFetchIs500AndBecomesMissing) {
  testing::Upload u = MakeUpload({"precious"});
  ASSERT_EQ(Upload(u, alice_).status, 201);
  const std::string id = u.frames[0].first;
  ASSERT_TRUE(
      WriteFileAtomic(static_cast<blob::FsChunkStore&>(blobs_->chunks()).PathOf(id), "rot").ok());
  auto r = Call("POST", "/v1/blobs/chunks/fetch", alice_, IdList({id}));
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(Json(r)["error"]["code"], "DATA_LOSS");
  EXPECT_THAT(ErrorMessage(r), HasSubstr(id));
  EXPECT_EQ(Json(Call("POST", "/v1/blobs/missing", agent_, IdList({id})))["missing"], json({id}));
}

TEST_F(BlobApiTest, ManifestPutGetAndErrors) {
  testing::Upload u = MakeUpload({"alpha", "beta"});
  // Killed during the upload: half the chunks, then the manifest.
  ASSERT_EQ(Call("POST", "/v1/blobs/chunks", alice_, blob::EncodeChunkRecords({u.frames[0]}),
                 std::string(blob::kChunkRecordsContentType))
                .status,
            200);
  auto early = Call("PUT", "/v1/blobs/manifests/" + u.id, alice_, u.manifest);
  EXPECT_EQ(early.status, 409);
  EXPECT_EQ(ErrorMessage(early), "1 chunk is missing, e.g. " + u.frames[1].first);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + u.id, alice_).status, 404);

  auto put = Upload(u, alice_);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(Json(put), (json{{"id", u.id}, {"bytes", 9}, {"files", 2}, {"chunks", 2}}));
  EXPECT_EQ(Call("PUT", "/v1/blobs/manifests/" + u.id, agent_, u.manifest).status, 200);
  auto got = Call("GET", "/v1/blobs/manifests/" + u.id, alice_);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.body, u.manifest);
  EXPECT_EQ(blob::ManifestId(got.body), u.id);

  auto mismatch = Call("PUT", "/v1/blobs/manifests/" + std::string(64, 'a'), alice_, u.manifest);
  EXPECT_EQ(mismatch.status, 400);
  EXPECT_EQ(Call("PUT", "/v1/blobs/manifests/xyz", alice_, u.manifest).status, 400);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/XYZ", alice_).status, 400);
  std::string bad = R"({"version": 1, "entries": [{"path": "/abs", "type": "dir", "mode": 493}]})";
  auto undecodable = Call("PUT", "/v1/blobs/manifests/" + blob::ManifestId(bad), alice_, bad);
  EXPECT_EQ(undecodable.status, 400);
  EXPECT_THAT(ErrorMessage(undecodable), HasSubstr("entries[0]"));
}

TEST_F(BlobApiTest, CheckpointsPostListGetAndFencing) {
  std::string node = PlaceJob();
  testing::Upload u1 = MakeUpload({"step 100"});
  testing::Upload u2 = MakeUpload({"step 200"});
  ASSERT_EQ(Upload(u1, agent_).status, 201);

  auto not_stored = PostCheckpoint(1, "1.1", u2.id, agent_);
  EXPECT_EQ(not_stored.status, 409);
  EXPECT_THAT(ErrorMessage(not_stored), HasSubstr("is not stored"));
  EXPECT_EQ(PostCheckpoint(1, "1.1", u1.id, alice_).status, 403);  // members do not
  EXPECT_EQ(PostCheckpoint(1, "bad", u1.id, agent_).status, 400);
  EXPECT_EQ(PostCheckpoint(1, "1.1", "xyz", agent_).status, 400);
  EXPECT_EQ(PostCheckpoint(7, "7.1", u1.id, agent_).status, 404);

  auto first = PostCheckpoint(1, "1.1", u1.id, agent_);
  ASSERT_EQ(first.status, 201) << first.body;
  json c1 = Json(first);
  EXPECT_EQ(c1["job"], 1);
  EXPECT_EQ(c1["number"], 1);
  EXPECT_EQ(c1["attempt"], "1.1");
  EXPECT_EQ(c1["manifest"], u1.id);
  EXPECT_EQ(c1["bytes"], 8);
  EXPECT_EQ(c1["files"], 1);
  EXPECT_EQ(c1["created_ms"], clock_.NowMs());
  auto retry = PostCheckpoint(1, "1.1", u1.id, agent_);
  EXPECT_EQ(retry.status, 200);
  EXPECT_EQ(Json(retry), c1);
  ASSERT_EQ(Upload(u2, agent_).status, 201);
  ASSERT_EQ(PostCheckpoint(1, "1.1", u2.id, admin_).status, 201);  // admins may

  auto list = Call("GET", "/v1/jobs/1/checkpoints", alice_);
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(Json(list)["checkpoints"].size(), 2u);
  EXPECT_EQ(Json(list)["checkpoints"][0], c1);
  EXPECT_EQ(Json(Call("GET", "/v1/jobs/1/checkpoints/latest", alice_))["number"], 2);
  // Agents register checkpoints; to them others' job records do not exist.
  EXPECT_EQ(Call("GET", "/v1/jobs/1/checkpoints/latest", agent_).status, 404);
  EXPECT_EQ(Json(Call("GET", "/v1/jobs/1/checkpoints/1", admin_)), c1);
  EXPECT_EQ(Call("GET", "/v1/jobs/1/checkpoints/3", alice_).status, 404);
  EXPECT_EQ(Call("GET", "/v1/jobs/1/checkpoints/zero", alice_).status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs/1/checkpoints", bob_).status, 404);  // not his job
  EXPECT_EQ(Call("GET", "/v1/jobs/1/checkpoints/latest", bob_).status, 404);

  // The attempt ends; the next one restores checkpoint 2, and the old
  // attempt is fenced off.
  OnLoop([&] {
    proto::TaskReport r{"1.1", proto::TaskState::kVacated, 0, 15, "reclaimed", 0};
    EXPECT_TRUE(
        pool_->AgentMessage(node, 1, std::string(proto::kTaskStatus), proto::Encode(r)).ok());
    EXPECT_EQ(*pool_->Schedule(), 1);
    return 0;
  });
  auto stale = PostCheckpoint(1, "1.1", u1.id, agent_);
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(Json(stale)["error"]["code"], "ABORTED");  // the agent stops such an attempt
  EXPECT_EQ(ErrorMessage(stale), "attempt 1.1 is not the live attempt of job 1");
  auto starts = OnLoop([&] { return *pool_->PendingOrders(node, 0); });
  std::vector<proto::StartTask> start_tasks;
  for (const auto& m : starts) {
    if (m.type == proto::kStart) start_tasks.push_back(*proto::DecodeStartTask(m.body));
  }
  ASSERT_EQ(start_tasks.size(), 2u);
  EXPECT_EQ(start_tasks[1].restore_checkpoint, 2);
  EXPECT_EQ(start_tasks[1].restore_manifest, u2.id);
}

TEST_F(BlobApiTest, AgentsMayOnlyUseBlobsAndCheckpoints) {
  EXPECT_EQ(Call("GET", "/v1/jobs", agent_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", join_, IdList({})).status, 403);
  EXPECT_EQ(Call("GET", "/v1/nodes", agent_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/admin/gc", agent_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/admin/gc", alice_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", "wrong-token", IdList({})).status, 401);
  EXPECT_EQ(Call("GET", "/v1/blobs/nothing", agent_).status, 404);
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", agent_, IdList({})).status, 200);
}

TEST_F(BlobApiTest, SubmitChecksInputsAgainstTheBlobStore) {
  testing::Upload u = MakeUpload({"train.py"});
  json spec = {{"name", "j"}, {"run", "python train.py"}, {"workdir", "/home/alice/proj"}};
  auto no_inputs = Call("POST", "/v1/jobs", alice_, spec.dump());
  EXPECT_EQ(no_inputs.status, 400);
  EXPECT_THAT(ErrorMessage(no_inputs), HasSubstr("workdir: the gpupool CLI uploads"));
  spec["inputs"] = u.id;
  auto not_uploaded = Call("POST", "/v1/jobs", alice_, spec.dump());
  EXPECT_EQ(not_uploaded.status, 400);
  EXPECT_EQ(ErrorMessage(not_uploaded),
            "inputs: manifest " + u.id.substr(0, 12) + "... is not uploaded");
  ASSERT_EQ(Upload(u, alice_).status, 201);
  auto ok = Call("POST", "/v1/jobs", alice_, spec.dump());
  EXPECT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(Json(ok)["spec"]["inputs"], u.id);
}

TEST_F(BlobApiTest, AdminGcKeepsReachableAndYoungBlobs) {
  PlaceJob();
  testing::Upload checkpoint = MakeUpload({"weights"});
  testing::Upload orphan = MakeUpload({"abandoned upload"});
  ASSERT_EQ(Upload(checkpoint, agent_).status, 201);
  ASSERT_EQ(PostCheckpoint(1, "1.1", checkpoint.id, agent_).status, 201);
  ASSERT_EQ(Upload(orphan, alice_).status, 201);

  auto young = Call("POST", "/v1/admin/gc", admin_);
  ASSERT_EQ(young.status, 200) << young.body;
  EXPECT_EQ(Json(young), (json{{"manifests_removed", 0},
                               {"chunks_removed", 0},
                               {"bytes_freed", 0},
                               {"chunks_kept", 2}}));
  clock_.AdvanceMs(2 * kHourMs);  // past the grace
  auto old = Call("POST", "/v1/admin/gc", admin_);
  ASSERT_EQ(old.status, 200) << old.body;
  EXPECT_EQ(Json(old)["manifests_removed"], 1);
  EXPECT_EQ(Json(old)["chunks_removed"], 1);
  EXPECT_EQ(Json(old)["chunks_kept"], 1);
  EXPECT_GT(Json(old)["bytes_freed"].get<int64_t>(), 0);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + checkpoint.id, agent_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + orphan.id, alice_).status, 404);
}

class BlobApiKeepTwoTest : public BlobApiTest {
 protected:
  PoolOptions Options() override {
    PoolOptions o;
    o.checkpoint_keep = 2;
    return o;
  }
};

TEST_F(BlobApiKeepTwoTest, RetentionThroughTheApi) {
  PlaceJob();
  for (const char* step : {"s1", "s2", "s3"}) {
    testing::Upload u = MakeUpload({step});
    ASSERT_EQ(Upload(u, agent_).status, 201);
    ASSERT_EQ(PostCheckpoint(1, "1.1", u.id, agent_).status, 201);
  }
  json list = Json(Call("GET", "/v1/jobs/1/checkpoints", alice_))["checkpoints"];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["number"], 2);
  EXPECT_EQ(list[1]["number"], 3);
}

}  // namespace
}  // namespace gpupool::server

namespace gpupool::server {
namespace {

// Agents are charged for the attempt they name, which must be on their node.
TEST_F(BlobApiTest, AnAgentUploadsForAnAttemptOfItsOwnNodeAndIsChargedToItsJob) {
  PlaceJob();  // job 1 of alice, attempt 1.1 on node a
  testing::Upload u = MakeUpload({"checkpoint bytes"});
  const std::string type(blob::kChunkRecordsContentType);
  auto anonymous = Call("POST", "/v1/blobs/chunks", agent_, u.Records(), type);
  EXPECT_EQ(anonymous.status, 400);
  EXPECT_THAT(ErrorMessage(anonymous), HasSubstr("?attempt=JOB.N"));
  EXPECT_EQ(Call("POST", "/v1/blobs/chunks?attempt=9.1", agent_, u.Records(), type).status, 404);
  // Alice's quota bounds what her job's checkpoints upload.
  ASSERT_EQ(Call("PUT", "/v1/quotas/users/alice", admin_, R"({"bytes":4})").status, 200);
  auto over = Call("POST", "/v1/blobs/chunks?attempt=1.1", agent_, u.Records(), type);
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_THAT(ErrorMessage(over), HasSubstr("user alice stores 0 B of the 4 B it may"));
  auto missing = Call("POST", "/v1/blobs/missing", agent_, IdList(u.ChunkIds()));
  EXPECT_EQ(Json(missing)["missing"].size(), 1u);  // nothing stored
  ASSERT_EQ(Call("DELETE", "/v1/quotas/users/alice", admin_).status, 200);
  EXPECT_EQ(Upload(u, agent_).status, 201);
}

}  // namespace
}  // namespace gpupool::server
