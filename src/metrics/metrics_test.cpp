// The metrics library: pool, GPU and process families in Prometheus' text
// format, checked line by line and by Prometheus' own promtool (Debian's
// `prometheus` package), and the bounds ServerMetrics puts on label values.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

#include "metrics/families.h"
#include "metrics/pool_families.h"
#include "metrics/process_families.h"
#include "metrics/promtool_testing.h"
#include "metrics/server_metrics.h"

namespace gpupool::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

PoolSample TwoGpuPool() {
  PoolSample s;
  s.jobs = {{"running", "batch", "vision", 3}, {"pending", "interactive", "default", 2}};
  s.finished = {{"succeeded", "normal", "vision", 7}};
  s.pending_by_class = {{"interactive", 2}};
  s.nodes_by_status = {{"available", 1}, {"offline", 1}};
  s.agents_connected = 1;
  s.blob_bytes = 4096;
  GpuSample a100;
  a100.node = "lab-a";
  a100.gpu = 0;
  a100.uuid = "GPU-a";
  a100.model = "NVIDIA A100-SXM4-80GB";
  a100.memory_total_mib = 81920;
  a100.utilization_percent = 37;
  a100.memory_used_mib = 1024;
  a100.temperature_c = 55;
  a100.power_mw = 210000;
  a100.energy_mj = 9876543250;
  a100.allocated_milli = 500;
  a100.allocated_memory_mib = 40960;
  GpuSample sim;  // a simulated GPU that reports no power, temperature or energy
  sim.node = "lab-b";
  sim.gpu = 1;
  sim.uuid = "GPU-SIM-1";
  sim.model = "T4";
  sim.simulated = true;
  sim.memory_total_mib = 15360;
  sim.utilization_percent = 0;
  sim.memory_used_mib = 0;
  s.gpus = {a100, sim};
  return s;
}

TEST(PoolFamilies, GpusInBaseUnitsWithTheirLabels) {
  const std::string text = PoolText(TwoGpuPool());
  EXPECT_THAT(text, HasSubstr(R"(gpupool_gpu_info{node="lab-a",gpu="0",uuid="GPU-a",)"
                              R"(model="NVIDIA A100-SXM4-80GB",simulated="false"} 1)"
                              "\n"));
  const std::string a = R"({node="lab-a",gpu="0"})";
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_utilization_ratio" + a + " 0.37\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_memory_used_bytes" + a + " 1073741824\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_memory_total_bytes" + a + " 85899345920\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_temperature_celsius" + a + " 55\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_power_watts" + a + " 210\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_energy_joules_total" + a + " 9876543.25\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_allocated_ratio" + a + " 0.5\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_allocated_memory_bytes" + a + " 42949672960\n"));
  // The simulated GPU says so, and what it cannot report is absent, not -1.
  EXPECT_THAT(text, HasSubstr(R"(gpupool_gpu_info{node="lab-b",gpu="1",uuid="GPU-SIM-1",)"
                              R"(model="T4",simulated="true"} 1)"));
  const std::string b = R"({node="lab-b",gpu="1"})";
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_utilization_ratio" + b + " 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("gpupool_gpu_power_watts" + b)));
  EXPECT_THAT(text, Not(HasSubstr("gpupool_gpu_temperature_celsius" + b)));
  EXPECT_THAT(text, Not(HasSubstr("gpupool_gpu_energy_joules_total" + b)));
  EXPECT_THAT(text, Not(HasSubstr(" -1")));
  EXPECT_THAT(text, HasSubstr("# TYPE gpupool_gpu_energy_joules_total counter\n"));
}

TEST(PoolFamilies, JobsQueueNodesAgentsAndBlobs) {
  const std::string text = PoolText(TwoGpuPool());
  EXPECT_THAT(text, HasSubstr(R"(gpupool_jobs{state="running",class="batch",group="vision"} 3)"));
  EXPECT_THAT(text,
              HasSubstr(R"(gpupool_jobs{state="pending",class="interactive",group="default"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpupool_jobs_finished_total{state="succeeded",class="normal",group="vision"} 7)"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_queue_length{class="interactive"} 2)"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_nodes{status="offline"} 1)"));
  EXPECT_THAT(text, HasSubstr("gpupool_agents_connected 1\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_blob_store_bytes 4096\n"));
}

TEST(PoolFamilies, AnEmptyPoolShowsNoBareFamilies) {
  const std::string text = PoolText(PoolSample{});
  EXPECT_THAT(text, HasSubstr("gpupool_agents_connected 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("gpupool_gpu_")));
  EXPECT_THAT(text, Not(HasSubstr("gpupool_blob_store_bytes")));  // not known
  PromtoolRun run = PromtoolCheckMetrics(text);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

// A hostile agent names its node and GPU model as it likes: quotes,
// backslashes and newlines stay inside their label values.
TEST(PoolFamilies, AgentChosenNamesCannotBreakTheFormat) {
  PoolSample s = TwoGpuPool();
  s.gpus[0].model = "evil\"} 1\ngpupool_fake 1\n\\";
  s.gpus[0].node = "n\"o\\de";
  const std::string text = PoolText(s);
  EXPECT_THAT(text, Not(HasSubstr("\ngpupool_fake 1\n")));
  EXPECT_THAT(text, HasSubstr(R"(model="evil\"} 1\ngpupool_fake 1\n\\")"));
  EXPECT_THAT(text, HasSubstr(R"(node="n\"o\\de")"));
  PromtoolRun run = PromtoolCheckMetrics(text);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST(ServerMetrics, LabelValuesStayBounded) {
  ServerMetrics m;
  m.ApiRequest("/v1/jobs/{id}", "GET", 200, 0.002);
  m.ApiRequest("/v1/jobs/{id}", "GET", 200, 0.004);
  m.ApiRequest("", "BREW", 404, 0.001);           // no route, a made-up method
  m.ApiRequest("/v1/jobs", "POST", 1000, 0.001);  // not an HTTP status
  const std::string text = RenderText(m.Collect());
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpupool_api_requests_total{code="200",method="GET",route="/v1/jobs/{id}"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpupool_api_requests_total{code="404",method="other",route="unmatched"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(gpupool_api_requests_total{code="other",method="POST",route="/v1/jobs"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpupool_api_request_duration_seconds_count{method="GET",route="/v1/jobs/{id}"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(gpupool_api_request_duration_seconds_bucket{method="GET",route="/v1/jobs/{id}",le="0.0025"} 1)"));
  EXPECT_THAT(text, Not(HasSubstr("BREW")));
}

TEST(ServerMetrics, PassesWaitsCheckpointsMigrationsReclaims) {
  ServerMetrics m;
  m.SchedulingPass(0.003);
  m.Placed(4, 1);
  m.SchedulingPass(0.02);
  m.Placed(0, 0);
  m.QueueWait(42);
  m.CheckpointsUploaded(2, 3000);
  m.Migrations(1);
  m.Reclaim("GPU GPU-1: reclaimed by the owner");
  m.Reclaim("outside the availability windows");
  m.Reclaim("GPU GPU-2: its owner runs process 4242 on it");
  m.Reclaim("anything an agent says");  // a cause we do not know: "other", not a new series
  const std::string text = RenderText(m.Collect());
  EXPECT_THAT(text, HasSubstr("gpupool_scheduling_pass_duration_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_scheduling_placements_total 4\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_scheduling_preemptions_total 1\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_queue_wait_seconds_bucket{le=\"60\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_queue_wait_seconds_bucket{le=\"30\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_checkpoint_uploads_total 2\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_checkpoint_upload_bytes_total 3000\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_migrations_total 1\n"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_reclaims_total{cause="command"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_reclaims_total{cause="window"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_reclaims_total{cause="owner_activity"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(gpupool_reclaims_total{cause="other"} 1)"));
  EXPECT_THAT(text, Not(HasSubstr("anything an agent says")));
}

TEST(ReclaimCause, TheAgentsReasons) {
  EXPECT_EQ(ReclaimCause("reclaimed by the owner"), "command");
  EXPECT_EQ(ReclaimCause("outside the availability windows"), "window");
  EXPECT_EQ(ReclaimCause("GPU G: in use by its owner (utilization over 10%)"), "owner_activity");
  EXPECT_EQ(ReclaimCause("GPU G: not yet idle for the 5m idle-only lending asks"),
            "owner_activity");
  EXPECT_EQ(ReclaimCause("GPU G: no longer on this machine"), "other");
}

TEST(ProcessFamilies, ReadsThisProcess) {
  auto before = ReadProcessSample();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  auto after = ReadProcessSample();
  for (int fd : fds) ::close(fd);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->open_fds, before->open_fds + 10);
  EXPECT_GT(after->resident_bytes, 1 << 20);
  EXPECT_GE(after->virtual_bytes, after->resident_bytes);
  EXPECT_GT(after->max_fds, 0);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(after->start_time_seconds, now + 1);
  EXPECT_GT(after->start_time_seconds, now - 3600);  // this test started recently
  EXPECT_GE(after->cpu_seconds, 0);

  const std::string text = ProcessText(*after, now, "1.2.3");
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("process_open_fds " + std::to_string(after->open_fds) + "\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_build_info{version=\"1.2.3\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpupool_uptime_seconds "));
}

// Everything the server exposes at once passes Prometheus' own checker.
TEST(Exposition, PromtoolAcceptsAllOfIt) {
  ServerMetrics m;
  m.ApiRequest("/v1/jobs", "GET", 200, 0.001);
  m.SchedulingPass(0.001);
  m.Placed(1, 0);
  m.QueueWait(1);
  auto p = ReadProcessSample();
  ASSERT_TRUE(p.ok());
  const std::string all = RenderText(m.Collect()) + PoolText(TwoGpuPool()) +
                          ProcessText(*p, static_cast<double>(std::time(nullptr)), "0.1.0");
  PromtoolRun run = PromtoolCheckMetrics(all);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "");
}

// Splits exposition lines into what precedes the value and the value.
std::vector<std::pair<std::string, double>> Samples(const std::string& text) {
  std::vector<std::pair<std::string, double>> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    if (line.starts_with("#")) {
      out.emplace_back(line, 0);
      continue;
    }
    size_t space = line.rfind(' ');
    out.emplace_back(line.substr(0, space), std::stod(line.substr(space + 1)));
  }
  return out;
}

// RenderText writes what prometheus-cpp's own serializer writes: the same
// lines in the same order, escapes included, values equal as numbers.
TEST(RenderText, WritesWhatPrometheusCppsSerializerWrites) {
  ServerMetrics m;
  m.ApiRequest("/v1/jobs/{id}", "GET", 200, 0.0042);
  m.ApiRequest("/v1/jobs/{id}", "GET", 200, 3.5);
  m.ApiRequest("", "POST", 404, 0.00001);
  m.SchedulingPass(0.0123456789);
  m.Placed(7, 2);
  m.QueueWait(123456.789);
  m.CheckpointsUploaded(3, 9876543210);
  m.Reclaim("reclaimed by the owner");
  std::vector<prometheus::MetricFamily> families = m.Collect();
  prometheus::MetricFamily odd;  // escapes in label values, a summary, untyped
  odd.name = "gpupool_test_odd";
  odd.help = "odd";
  odd.type = prometheus::MetricType::Summary;
  prometheus::ClientMetric s;
  s.label = {{"x", "q\"uote\\ back\nline"}};
  s.summary.sample_count = 3;
  s.summary.sample_sum = 0.1 + 0.2;
  s.summary.quantile = {{0.5, 1.0 / 3}, {0.99, 2e-9}};
  odd.metric.push_back(s);
  families.push_back(odd);
  prometheus::MetricFamily untyped;
  untyped.name = "gpupool_test_untyped";
  untyped.help = "u";
  prometheus::ClientMetric u;
  u.untyped.value = 1e21;
  untyped.metric.push_back(u);
  families.push_back(untyped);

  const auto ours = Samples(RenderText(families));
  const auto theirs = Samples(prometheus::TextSerializer().Serialize(families));
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].first, theirs[i].first) << "line " << i;
    EXPECT_NEAR(ours[i].second, theirs[i].second, 1e-12 * std::abs(theirs[i].second))
        << ours[i].first;
  }
}

// The format asks HELP texts to escape \\ and newlines (prometheus-cpp
// 1.0's serializer does not: a newline there would end the line).
TEST(RenderText, EscapesHelpTexts) {
  prometheus::MetricFamily f;
  f.name = "gpupool_test_help";
  f.help = "a \\ backslash and a\nnewline";
  f.type = prometheus::MetricType::Gauge;
  f.metric.emplace_back();
  const std::string text = RenderText({f});
  EXPECT_THAT(text, HasSubstr("# HELP gpupool_test_help a \\\\ backslash and a\\nnewline\n"));
  PromtoolRun run = PromtoolCheckMetrics(text);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

}  // namespace
}  // namespace gpupool::metrics
