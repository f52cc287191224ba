// GET /metrics through the real API: who may scrape, what a scrape shows of
// a pool with a node, its GPU's telemetry and a placed job, what the server
// counted, and that a user cannot grow the number of series through the
// job spec's group.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "metrics/promtool_testing.h"
#include "server/api_testing.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class MetricsApiTest : public ApiTestServer {
 protected:
  std::string ScrapeToken() {
    auto t = auth_->CreateToken("alice", Role::kMember, "prometheus", kScopeMetrics, 0);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? t->secret : "";
  }
  std::string Scrape(const std::string& token) {
    net::HttpResponse r = Call("GET", "/metrics", token);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_THAT(r.content_type, HasSubstr("text/plain; version=0.0.4"));
    return r.body;
  }
};

TEST_F(MetricsApiTest, AScrapeOnlyTokenReadsTheMetricsAndNothingElse) {
  const std::string scrape = ScrapeToken();
  EXPECT_THAT(Scrape(scrape), HasSubstr("gpupool_build_info{version="));
  net::HttpResponse jobs = Call("GET", "/v1/jobs", scrape);
  EXPECT_EQ(jobs.status, 403);
  EXPECT_THAT(ErrorMessage(jobs), HasSubstr("jobs:read"));
  EXPECT_EQ(Call("GET", "/metrics", "").status, 401);
  EXPECT_EQ(Call("GET", "/metrics", agent_).status, 403);
}

TEST_F(MetricsApiTest, AScrapeShowsTheNodeItsGpuAndThePlacedJob) {
  PlaceJob();
  OnLoop([&] {
    proto::Heartbeat hb;
    hb.telemetry = {{"a-gpu0", 2048, 87, 64, 250000, 5'000'000, {}}};
    auto nodes = pool_->ListNodes();
    EXPECT_TRUE(nodes.ok());
    pool_->AgentHeartbeat(nodes->at(0).node.id, hb);
    return 0;
  });
  const std::string text = Scrape(admin_);
  EXPECT_THAT(text, HasSubstr(R"(gpupool_gpu_info{node="a",gpu="0",uuid="a-gpu0",model="A100",)"
                              R"(simulated="true"} 1)"));
  const std::string gpu = R"({node="a",gpu="0"})";
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_utilization_ratio" + gpu + " 0.87\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_memory_used_bytes" + gpu + " 2147483648\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_power_watts" + gpu + " 250\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_energy_joules_total" + gpu + " 5000\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_allocated_ratio" + gpu + " 1\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_allocated_memory_bytes" + gpu + " 85899345920\n"));
  EXPECT_THAT(text,
              HasSubstr(R"(gpupool_jobs{state="scheduled",class="normal",group="default"} 1)"));
  EXPECT_THAT(text, HasSubstr("gpupool_scheduling_placements_total 1\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_queue_wait_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_nodes{status="busy"} 1)"));
  metrics::PromtoolRun run = metrics::PromtoolCheckMetrics(text);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(MetricsApiTest, RequestsAreCountedByRoutePatternNotByPath) {
  PlaceJob();
  EXPECT_EQ(Call("GET", "/v1/jobs/1", alice_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/jobs/999", alice_).status, 404);
  EXPECT_EQ(Call("GET", "/v1/no-such-thing", alice_).status, 404);
  const std::string text = Scrape(admin_);
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpupool_api_requests_total{code="200",method="GET",route="/v1/jobs/{id}"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpupool_api_requests_total{code="404",method="GET",route="/v1/jobs/{id}"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpupool_api_requests_total{code="404",method="GET",route="unmatched"} 1)"));
  EXPECT_THAT(text, Not(HasSubstr("/v1/jobs/999")));
  EXPECT_THAT(text, Not(HasSubstr("no-such-thing")));
}

// Any user may name any group in a spec; only labs and configured groups
// become label values, the rest are counted together as "other".
TEST_F(MetricsApiTest, MadeUpGroupsCannotGrowTheSeries) {
  ASSERT_TRUE(auth_->AddGroup("vision", false).ok());
  ASSERT_TRUE(auth_->ChangeMembers("vision", {"alice"}, {}, std::nullopt).ok());
  for (const char* group : {"vision", "made-up-1", "made-up-2", "made-up-3"}) {
    JobSpec spec;
    spec.name = "j";
    spec.run = "true";
    spec.group = group;
    spec.resources.gpus = 1;
    auto job = OnLoop([&] { return pool_->Submit(spec, "alice"); });
    EXPECT_TRUE(job.ok()) << job.status().ToString();
  }
  const std::string text = Scrape(admin_);
  EXPECT_THAT(text, HasSubstr(R"(gpupool_jobs{state="pending",class="normal",group="vision"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_jobs{state="pending",class="normal",group="other"} 3)"));
  EXPECT_THAT(text, Not(HasSubstr("made-up")));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_queue_length{class="normal"} 4)"));
}

TEST_F(MetricsApiTest, FinishedJobsAreCountedOnce) {
  OnLoop([&] {
    JobSpec spec;
    spec.name = "j";
    spec.run = "true";
    EXPECT_TRUE(pool_->Submit(spec, "alice").ok());
    EXPECT_TRUE(pool_->Submit(spec, "bob").ok());
    return 0;
  });
  EXPECT_EQ(Call("POST", "/v1/jobs/1/cancel", alice_).status, 200);
  Call("POST", "/v1/jobs/1/cancel", alice_);  // again: it does not end twice
  EXPECT_EQ(Call("POST", "/v1/jobs/2/cancel", bob_).status, 200);
  const std::string text = Scrape(admin_);
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpupool_jobs_finished_total{state="cancelled",class="normal",group="default"} 2)"));
}

}  // namespace
}  // namespace gpupool::server
