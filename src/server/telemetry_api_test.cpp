// The telemetry history through the real API: readings of the agents'
// heartbeats downsampled, written to the history store and read back per
// node, for the pool and per job; who may read what; bad ranges refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/api_testing.h"
#include "server/telemetry_api.h"
#include "store/history_store.h"

namespace gpupool::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class TelemetryApiTest : public ApiTestServer {
 protected:
  void SetUp() override {
    ApiTestServer::SetUp();
    HistoryOptions o;
    auto store = HistoryStore::Open(dir_.path() + "/telemetry.db", o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    history_ = *std::move(store);
    telemetry_ =
        std::make_unique<TelemetryApi>(loop_, *pool_, clock_, *history_, TelemetryOptions{});
    OnLoop([&] {
      api_->AddModule(*telemetry_);
      return 0;
    });
  }
  void TearDown() override {
    telemetry_.reset();  // joins its worker before the store and the loop go
    ApiTestServer::TearDown();
    history_.reset();
  }
  // A heartbeat of node "a"'s GPU with `utilization`, then a sample.
  void Beat(int32_t utilization) {
    OnLoop([&] {
      auto nodes = pool_->ListNodes();
      EXPECT_TRUE(nodes.ok());
      proto::Heartbeat hb;
      hb.telemetry = {{"a-gpu0", 2048, utilization, 60, 200000, -1, {}}};
      pool_->AgentHeartbeat(nodes->at(0).node.id, hb);
      telemetry_->Sample();
      return 0;
    });
  }
  json Get(const std::string& target, const std::string& token, int status = 200) {
    net::HttpResponse r = Call("GET", target, token);
    EXPECT_EQ(r.status, status) << target << ": " << r.body;
    return Json(r);
  }

  std::unique_ptr<HistoryStore> history_;
  std::unique_ptr<TelemetryApi> telemetry_;
};

TEST_F(TelemetryApiTest, ANodesGpusAreAveragedIntoBucketsAndReadBack) {
  clock_.SetMs(1'800'000'000'000);  // on a 10 s boundary
  const int64_t t0 = clock_.NowMs();
  PlaceJob();
  Beat(87);
  clock_.AdvanceMs(5000);
  Beat(47);
  clock_.AdvanceMs(5000);  // the first 10 s bucket has closed
  Beat(10);
  const std::string range =
      "?since=" + std::to_string(t0) + "&until=" + std::to_string(t0 + 10'000);
  json node = Get("/v1/nodes/a/telemetry" + range + "&step=10s", alice_);
  ASSERT_EQ(node["gpus"].size(), 1u) << node.dump();
  EXPECT_EQ(node["step_ms"], 10000);
  const json& fields = node["fields"];
  auto field = [&](const json& point, const std::string& name) {
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i] == name) return point[i];
    return json();
  };
  ASSERT_EQ(node["gpus"][0]["points"].size(), 1u) << node.dump();
  const json& p = node["gpus"][0]["points"][0];
  EXPECT_EQ(field(p, "t_ms"), t0);
  EXPECT_EQ(field(p, "samples"), 2);
  EXPECT_DOUBLE_EQ(field(p, "utilization").get<double>(), 0.67);
  EXPECT_DOUBLE_EQ(field(p, "utilization_max").get<double>(), 0.87);
  EXPECT_DOUBLE_EQ(field(p, "allocated").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(field(p, "power_w").get<double>(), 200.0);
  EXPECT_TRUE(field(p, "energy_j").is_null());  // the agent reported none

  json pool = Get("/v1/pool/telemetry" + range, alice_);
  ASSERT_EQ(pool["points"].size(), 1u) << pool.dump();
  // fields: t_ms, samples, gpus, gpus_reporting, allocated_gpus, utilization_sum, ...
  EXPECT_EQ(pool["points"][0][2], 1.0);
  EXPECT_EQ(pool["points"][0][4], 1.0);
  EXPECT_DOUBLE_EQ(pool["points"][0][5].get<double>(), 0.67);

  // The job's own GPU over its attempt: alice's; bob may not see it.
  json job = Get("/v1/jobs/1/telemetry", alice_);
  ASSERT_EQ(job["attempts"].size(), 1u) << job.dump();
  EXPECT_EQ(job["attempts"][0]["node"], "a");
  EXPECT_EQ(job["attempts"][0]["gpus"][0]["gpu"], 0);
  EXPECT_GE(job["attempts"][0]["gpus"][0]["points"].size(), 1u);
  Get("/v1/jobs/1/telemetry", bob_, 404);
}

TEST_F(TelemetryApiTest, AShareKeepsWhatItsOwnProcessesHeldWithItsJob) {
  clock_.SetMs(1'800'000'000'000);
  const int64_t t0 = clock_.NowMs();
  JobSpec half;
  half.resources.gpu_milli = 500;
  PlaceJob(half);
  // Its agent reports the share's cap and use with two heartbeats, and a
  // use for an attempt that is not on this GPU (dropped by the pool).
  for (int64_t used : {1000, 3000}) {
    OnLoop([&] {
      auto nodes = pool_->ListNodes();
      EXPECT_TRUE(nodes.ok());
      proto::Heartbeat hb;
      hb.telemetry = {{"a-gpu0", 9000, 50, 60, 200000, -1, {}}};
      hb.shares = {{"1.1", "a-gpu0", 40960, used}, {"9.9", "a-gpu0", 1, 77777}};
      pool_->AgentHeartbeat(nodes->at(0).node.id, hb);
      telemetry_->Sample();
      return 0;
    });
    clock_.AdvanceMs(5000);
  }
  Beat(50);  // the first bucket has closed
  json job = Get("/v1/jobs/1/telemetry", alice_);
  ASSERT_EQ(job["attempts"].size(), 1u) << job.dump();
  const json& attempt = job["attempts"][0];
  ASSERT_TRUE(attempt.contains("share")) << job.dump();
  ASSERT_EQ(attempt["share"].size(), 1u);
  EXPECT_EQ(attempt["share"][0]["gpu"], 0);
  const json& fields = job["fields"];
  auto field = [&](const json& point, const std::string& name) {
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i] == name) return point[i];
    return json();
  };
  const json& p = attempt["share"][0]["points"].at(0);
  EXPECT_EQ(field(p, "t_ms"), t0);
  EXPECT_DOUBLE_EQ(field(p, "memory_used_mib").get<double>(), 2000.0);  // its own, not 9000
  EXPECT_DOUBLE_EQ(field(p, "memory_used_max_mib").get<double>(), 3000.0);
  EXPECT_DOUBLE_EQ(field(p, "memory_total_mib").get<double>(), 40960.0);  // the cap
  EXPECT_TRUE(field(p, "utilization").is_null());
  // The whole GPU's series is there too, with the GPU's own memory use.
  EXPECT_DOUBLE_EQ(field(attempt["gpus"][0]["points"].at(0), "memory_used_mib").get<double>(),
                   9000.0);
  // The node's own series are the node's GPUs only.
  json node = Get("/v1/nodes/a/telemetry?since=" + std::to_string(t0) + "&step=10s", alice_);
  EXPECT_EQ(node["gpus"].size(), 1u) << node.dump();
}

TEST_F(TelemetryApiTest, WhoMayReadAndWhatIsRefused) {
  PlaceJob();
  Get("/v1/nodes/a/telemetry", agent_, 403);
  Get("/v1/pool/telemetry", "", 401);
  Get("/v1/nodes/nowhere/telemetry", alice_, 404);
  json bad = Get("/v1/pool/telemetry?since=yesterday", alice_, 400);
  EXPECT_THAT(bad.dump(), HasSubstr("since"));
  bad = Get("/v1/pool/telemetry?step=0s", alice_, 400);
  EXPECT_THAT(bad.dump(), HasSubstr("step"));
  // A year at 10 s is far more than a series may hold.
  bad = Get("/v1/pool/telemetry?since=365d&step=10s", alice_, 400);
  EXPECT_THAT(bad.dump(), HasSubstr("points"));
}

TEST(ParseTiers, TheDefaultAndMistakes) {
  auto tiers = ParseTiers("10s:1d,5m:30d");
  ASSERT_TRUE(tiers.ok());
  ASSERT_EQ(tiers->size(), 2u);
  EXPECT_EQ((*tiers)[0].step_ms, 10'000);
  EXPECT_EQ((*tiers)[1].keep_ms, 30LL * 86'400'000);
  EXPECT_FALSE(ParseTiers("").ok());
  EXPECT_THAT(ParseTiers("10s").status().message(), HasSubstr("STEP:KEEP"));
  EXPECT_THAT(ParseTiers("1m:30s").status().message(), HasSubstr("less than one step"));
  EXPECT_THAT(ParseTiers("10s:1d,15s:2d").status().message(), HasSubstr("multiple"));
}

}  // namespace
}  // namespace gpupool::server
