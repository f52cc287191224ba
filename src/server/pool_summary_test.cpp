// The pool at a glance (GET /v1/pool/summary) and the node list's pages
// (GET /v1/nodes?offset=&limit=): the counting rules on hand-made nodes,
// then both endpoints through the real API.
#include "server/pool_summary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/api_testing.h"

namespace gpupool::server {
namespace {

using nlohmann::json;

GpuInfo Gpu(const std::string& uuid, const std::string& name, bool simulated = false) {
  GpuInfo g;
  g.uuid = uuid;
  g.name = name;
  g.simulated = simulated;
  return g;
}

NodeStatus Node(const std::string& status, bool connected, std::vector<GpuInfo> gpus) {
  NodeStatus n;
  n.node.name = "n";
  n.node.gpus = std::move(gpus);
  n.status = status;
  n.connected = connected;
  return n;
}

TEST(SummarizePool, CountsUsedFreeAndUnavailableInThousandthsPerModel) {
  // Lends both GPUs: one whole GPU in use, a quarter of the other.
  NodeStatus busy = Node("busy", true, {Gpu("g1", "A100"), Gpu("g2", "A100")});
  busy.gpu_used_milli = {{"g1", 1000}, {"g2", 250}};
  // Lends g3 only; g4 is its owner's now.
  NodeStatus partial = Node("available", true, {Gpu("g3", "A100"), Gpu("g4", "T4", true)});
  partial.node.lending = NodeLending{};
  partial.node.lending->gpus = {{"g3", 81920}};
  // Paused and offline machines lend nothing, though work may still run.
  NodeStatus paused = Node("paused", true, {Gpu("g5", "T4")});
  paused.gpu_used_milli = {{"g5", 500}};
  NodeStatus offline = Node("offline", false, {Gpu("g6", "A100")});
  // A MIG slice is a model of its own.
  GpuInfo slice = Gpu("MIG-1", "A100");
  slice.parent_uuid = "g7";
  slice.mig_profile = "3g.40gb";
  NodeStatus mig = Node("available", true, {slice});

  PoolSummary s = SummarizePool({busy, partial, paused, offline, mig});
  EXPECT_EQ(s.nodes, 5);
  EXPECT_EQ(s.nodes_online, 4);  // the paused one is online; the offline one is not
  ASSERT_EQ(s.gpus.size(), 3u);
  const GpuModelSummary& a100 = s.gpus[0];
  EXPECT_EQ(a100.model, "A100");
  EXPECT_EQ(a100.gpus, 4);
  EXPECT_EQ(a100.used_milli, 1250);
  EXPECT_EQ(a100.free_milli, 750 + 1000);   // g2's rest, g3
  EXPECT_EQ(a100.unavailable_milli, 1000);  // g6, offline
  EXPECT_FALSE(a100.simulated);
  EXPECT_EQ(s.gpus[1].model, "A100 (MIG 3g.40gb)");
  EXPECT_EQ(s.gpus[1].free_milli, 1000);
  const GpuModelSummary& t4 = s.gpus[2];
  EXPECT_EQ(t4.model, "T4");
  EXPECT_EQ(t4.gpus, 2);
  EXPECT_EQ(t4.used_milli, 500);
  EXPECT_EQ(t4.free_milli, 0);
  EXPECT_EQ(t4.unavailable_milli, 1000 + 500);  // g4 not lent, g5's rest (paused)
  EXPECT_TRUE(t4.simulated);
  for (const GpuModelSummary& m : s.gpus)
    EXPECT_EQ(m.used_milli + m.free_milli + m.unavailable_milli, 1000 * m.gpus) << m.model;
}

TEST(SummarizePool, AnEmptyPoolHasNothing) {
  PoolSummary s = SummarizePool({});
  EXPECT_EQ(s.nodes, 0);
  EXPECT_TRUE(s.gpus.empty());
}

class NodePagesTest : public ApiTestServer {
 protected:
  void SetUp() override {
    ApiTestServer::SetUp();
    summary_ = std::make_unique<SummaryApi>(*pool_);
    OnLoop([&] {
      api_->AddModule(*summary_);
      for (const char* name : {"a", "b", "c"}) {
        proto::Hello h = NodeAHello();
        h.node_name = name;
        h.agent_instance = std::string("i-") + name;
        h.gpus[0].uuid = std::string(name) + "-gpu0";
        EXPECT_TRUE(pool_->AgentHello(h).ok());
      }
      return 0;
    });
  }
  void TearDown() override {
    ApiTestServer::TearDown();
    summary_.reset();
  }
  std::unique_ptr<SummaryApi> summary_;
};

std::vector<std::string> Names(const json& page) {
  std::vector<std::string> out;
  for (const json& n : page["nodes"]) out.push_back(n["name"]);
  return out;
}

TEST_F(NodePagesTest, TheNodeListComesInPagesWithItsTotal) {
  json all = Json(Call("GET", "/v1/nodes", alice_));
  ASSERT_EQ(all["total"], 3);
  const std::vector<std::string> names = Names(all);
  ASSERT_EQ(names.size(), 3u);

  json first = Json(Call("GET", "/v1/nodes?limit=2", alice_));
  EXPECT_EQ(first["total"], 3);
  EXPECT_EQ(first["offset"], 0);
  EXPECT_EQ(Names(first), (std::vector<std::string>{names[0], names[1]}));
  json second = Json(Call("GET", "/v1/nodes?limit=2&offset=2", alice_));
  EXPECT_EQ(Names(second), (std::vector<std::string>{names[2]}));
  json past = Json(Call("GET", "/v1/nodes?offset=10", alice_));
  EXPECT_TRUE(past["nodes"].empty());
  EXPECT_EQ(past["offset"], 3);

  for (const char* bad : {"/v1/nodes?limit=0", "/v1/nodes?offset=-1", "/v1/nodes?limit=x"}) {
    net::HttpResponse r = Call("GET", bad, alice_);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_THAT(r.body, ::testing::HasSubstr(std::string(bad).find("offset") != std::string::npos
                                                 ? "offset"
                                                 : "limit"))
        << bad;
  }
  // One node, by name, is unchanged.
  EXPECT_EQ(Json(Call("GET", "/v1/nodes/b", alice_))["name"], "b");
  EXPECT_EQ(Call("GET", "/v1/nodes/zz", alice_).status, 404);
}

TEST_F(NodePagesTest, TheSummaryCountsThePoolForAnyoneWhoMayReadIt) {
  json s = Json(Call("GET", "/v1/pool/summary", alice_));
  EXPECT_EQ(s["nodes"], 3);
  EXPECT_EQ(s["nodes_online"], 3);
  ASSERT_EQ(s["gpus"].size(), 1u);
  EXPECT_EQ(s["gpus"][0]["model"], "A100");
  EXPECT_EQ(s["gpus"][0]["gpus"], 3);
  EXPECT_EQ(s["gpus"][0]["free_milli"], 3000);
  EXPECT_EQ(s["gpus"][0]["simulated"], true);
  EXPECT_EQ(Call("GET", "/v1/pool/summary", "").status, 401);
}

}  // namespace
}  // namespace gpupool::server
