#include "sim/metrics.h"

#include <gtest/gtest.h>

#include "sim/svg.h"

namespace gpupool::sim {
namespace {

constexpr int64_t kHour = 3600LL * 1000;

TEST(Stats, PercentileInterpolatesBetweenRanks) {
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_NEAR(Percentile({1, 2, 3, 4}, 95), 3.85, 1e-12);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(Mean({1, 2, 6}), 3);
}

TEST(Stats, JainIndex) {
  EXPECT_DOUBLE_EQ(JainIndex({}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({0, 0}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({3, 3, 3, 3}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);
  EXPECT_NEAR(JainIndex({1, 2}), 9.0 / 10.0, 1e-12);
}

TEST(Stats, StepsAndIntervals) {
  const std::vector<Step> steps = {{10, 2}, {20, 4}, {40, 0}};
  EXPECT_DOUBLE_EQ(StepMean(steps, 0, 10), 0);    // before the first step
  EXPECT_DOUBLE_EQ(StepMean(steps, 10, 30), 3);   // 2 for 10, 4 for 10
  EXPECT_DOUBLE_EQ(StepMean(steps, 0, 50), 2.0);  // (20 + 80) / 50
  EXPECT_DOUBLE_EQ(StepMean(steps, 30, 30), 0);

  const std::vector<Interval> iv = {{0, 10, 1}, {5, 25, 2}};
  EXPECT_DOUBLE_EQ(IntervalIntegral(iv, 0, 100), 10 + 40);
  EXPECT_DOUBLE_EQ(IntervalIntegral(iv, 5, 10), 5 + 10);
  const auto b = BucketMeans(iv, 0, 25, 10);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_DOUBLE_EQ(b[0], (10 + 10) / 10.0);  // 1 for 10 ms, 2 for 5 ms
  EXPECT_DOUBLE_EQ(b[1], 2);
  EXPECT_DOUBLE_EQ(b[2], 2);  // cut at 25: 2 for the 5 ms there
  EXPECT_EQ(SeriesBucketMs(7 * 24 * kHour), 30 * 60 * 1000);
  EXPECT_EQ(SeriesBucketMs(2 * kHour), 60 * 1000);
}

// Two labs, one 2-GPU node each; a hand-made run over a 10-hour window.
TEST(Metrics, ComputedFromAKnownRun) {
  auto trace = ParseTrace(
      "t",
      R"({"type":"group","name":"a"})"
      "\n"
      R"({"type":"group","name":"b"})"
      "\n"
      R"({"type":"node","name":"a-1","owner_group":"a","gpus":2,"gpu_model":"T4","gpu_memory":"16GiB","cpus":8,"memory":"64GiB"})"
      "\n"
      R"({"type":"node","name":"b-1","owner_group":"b","gpus":2,"gpu_model":"T4","gpu_memory":"16GiB","cpus":8,"memory":"64GiB"})"
      "\n");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  SimResult run;
  run.mode = SimMode::kPooled;
  run.seed = 4;
  run.last_submit_ms = 10 * kHour;
  run.end_ms = 12 * kHour;
  run.drained = true;
  auto job = [](int64_t id, const std::string& g, sched::PriorityClass c, int64_t submit,
                int64_t start, int64_t end, int64_t milli, int64_t work) {
    JobRecord j;
    j.job_id = id;
    j.group = g;
    j.priority = c;
    j.submit_ms = submit;
    j.first_start_ms = start;
    j.end_ms = end;
    j.gpu_milli = milli;
    j.work_ms = work;
    j.attempts = start >= 0 ? 1 : 0;
    return j;
  };
  using PC = sched::PriorityClass;
  // a: a 2-GPU job for 4 h (preempted once, 1 h lost), a session served at once.
  run.jobs.push_back(job(1, "a", PC::kNormal, 0, 0, 6 * kHour, 2000, 4 * kHour));
  run.jobs.back().preemptions = 1;
  run.jobs.back().attempts = 2;
  run.jobs.push_back(
      job(2, "a", PC::kInteractive, kHour, kHour + 30 * 1000, 2 * kHour, 1000, kHour));
  // b: a session that waited 2 minutes, and one that never started.
  run.jobs.push_back(job(3, "b", PC::kInteractive, 0, 2 * 60 * 1000, kHour, 1000, kHour));
  run.jobs.push_back(job(4, "b", PC::kInteractive, 11 * kHour, -1, -1, 1000, kHour));
  AttemptRecord a1{1,
                   "1.1",
                   "a",
                   PC::kNormal,
                   {"a-1"},
                   2000,
                   1.0,
                   0,
                   2 * kHour,
                   kHour,
                   AttemptEnd::kPreempted,
                   kHour,
                   "owner",
                   false,
                   false};
  AttemptRecord a2{1,
                   "1.2",
                   "a",
                   PC::kNormal,
                   {"b-1"},
                   2000,
                   1.0,
                   3 * kHour,
                   6 * kHour,
                   6 * kHour,
                   AttemptEnd::kCompleted,
                   0,
                   "",
                   false,
                   false};
  AttemptRecord a3{2,
                   "2.1",
                   "a",
                   PC::kInteractive,
                   {"a-1"},
                   1000,
                   1.0,
                   kHour + 30 * 1000,
                   2 * kHour,
                   2 * kHour,
                   AttemptEnd::kCompleted,
                   0,
                   "",
                   false,
                   false};
  run.attempts = {a1, a2, a3};
  // Samples: 4 GPUs present throughout; allocation as the attempts above
  // (job 3's attempt is left out of the samples on purpose: samples and
  // attempts are independent inputs).
  run.samples = {{0, 4000, 2000, 1, 1},      {kHour, 4000, 3000, 0, 0},
                 {2 * kHour, 4000, 0, 1, 1}, {3 * kHour, 4000, 2000, 0, 0},
                 {6 * kHour, 4000, 0, 0, 0}, {11 * kHour, 4000, 0, 1, 1}};

  const ModeMetrics m = ComputeMetrics(*trace, run, kHour);
  EXPECT_EQ(m.window_ms, 10 * kHour);
  EXPECT_DOUBLE_EQ(m.gpus_total, 4);
  // Allocated GPU-hours in the window: 2 + 3 + 0 + 2*3 = 11 of 40.
  EXPECT_NEAR(m.allocated_gpu_hours, 11, 1e-9);
  EXPECT_NEAR(m.allocation_pct, 27.5, 1e-9);
  // Useful: a1 1 h x 2, a2 3 h x 2, a3 ~1 h x 1.
  EXPECT_NEAR(m.useful_gpu_hours, 2 + 6 + (kHour - 30 * 1000) / double(kHour), 1e-9);
  // Waiting during [0, 1 h) and [2 h, 3 h): 20% of the window, 2.5 of 4 GPUs allocated.
  EXPECT_NEAR(m.saturated_time_pct, 20, 1e-9);
  EXPECT_NEAR(m.allocation_at_saturation_pct, 25, 1e-9);
  EXPECT_NEAR(m.unallocated_gpus_while_waiting, 3, 1e-9);
  // Lost: a1 held 2 GPUs for an hour past its checkpoint.
  EXPECT_NEAR(m.lost_gpu_hours_preemption, 2, 1e-9);
  EXPECT_EQ(m.preemptions, 1);
  EXPECT_EQ(m.preemptions_by_reason.at("owner"), 1);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.unfinished, 1);
  EXPECT_NEAR(m.makespan_h, 6, 1e-9);
  // Sessions: 3, one within a minute; one never started (censored at 12 h - 11 h).
  EXPECT_EQ(m.interactive.jobs, 3);
  EXPECT_EQ(m.interactive.never_started, 1);
  EXPECT_EQ(m.interactive_within_1min, 1);
  EXPECT_NEAR(m.interactive_within_1min_pct, 100.0 / 3, 1e-9);
  EXPECT_NEAR(m.interactive.delay_p50_s, 120, 1e-9);
  EXPECT_NEAR(m.interactive.delay_mean_s, (30 + 120 + 3600) / 3.0, 1e-9);
  // Groups: a used 2*2 + 2*3 + 1*(1h - 30 s) GPU-hours; b used none (job 3 has no attempt record).
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_NEAR(m.groups[0].used_gpu_hours, 10 + (kHour - 30 * 1000) / double(kHour), 1e-9);
  EXPECT_DOUBLE_EQ(m.groups[1].used_gpu_hours, 0);
  EXPECT_DOUBLE_EQ(m.jain_usage_over_share, 0.5);
  // Served by the window's end: all of a's work; b's job 3 (1 GPU-hour) of 2.
  EXPECT_DOUBLE_EQ(m.groups[0].served_fraction, 1);
  EXPECT_DOUBLE_EQ(m.groups[1].served_fraction, 0.5);
  // Own load: a asked for 9 GPU-hours of its 2 GPUs x 1.0 x 10 h.
  EXPECT_DOUBLE_EQ(m.groups[0].owned_speed_gpus, 2);
  EXPECT_NEAR(m.groups[0].own_load, 9.0 / 20.0, 1e-12);
  EXPECT_NEAR(m.jain_served_over_demand, 2.25 / (2 * 1.25), 1e-12);
  EXPECT_EQ(m.groups[1].interactive, 2);
  EXPECT_EQ(m.groups[1].interactive_within_1min, 0);
  // The series covers the run in 1-hour buckets.
  ASSERT_EQ(m.series.size(), 12u);
  EXPECT_DOUBLE_EQ(m.series[1].allocated_gpus, 3);
  EXPECT_DOUBLE_EQ(m.series[4].useful_gpus, 2);
  auto j = MetricsJson(m);
  EXPECT_EQ(j["seed"], 4);
  EXPECT_EQ(j["interactive_within_1min"], 1);
}

TEST(Svg, LineChartHasItsSeriesAndEscapesText) {
  LineChart c;
  c.title = "pooled <vs> per-lab & more";
  c.x_max = 7;
  c.y_max = 100;
  c.series.push_back({"pooled", {{0, 10}, {1, 50}, {2, 70}}, "mean 43%", false});
  c.series.push_back({"per-lab", {{0, 5}, {1, 20}}, "", true});
  const std::string svg = LineChartSvg(c);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\"", 0), 0u);
  EXPECT_NE(svg.find("pooled &lt;vs&gt; per-lab &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<vs>"), std::string::npos);
  size_t polylines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    ++polylines;
  }
  EXPECT_EQ(polylines, 2u);
  // x = 1 of [0, 7] over the 510-pixel frame from 60; y = 50% of 370 pixels from 40.
  EXPECT_NE(svg.find("132.9,225.0"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">pooled</text>"), std::string::npos);
  EXPECT_NE(svg.find(">mean 43%</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(Svg, BarChartDrawsOneBarPerGroupAndSeries) {
  BarChart c;
  c.title = "delay";
  c.series = {"pooled", "per-lab"};
  c.groups = {{"a", "2 GPUs", {1, 3}, {"1 h", "3 h"}},
              {"b", "", {0.5, 2}, {"", ""}},
              {"c", "", {0, 0}, {}}};
  const std::string svg = BarChartSvg(c);
  size_t rects = 0;
  for (size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1)) ++rects;
  // background + 6 bars + frame + 2 legend swatches
  EXPECT_EQ(rects, 1u + 6u + 1u + 2u);
  EXPECT_NE(svg.find(">3 h</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2 GPUs</text>"), std::string::npos);
  EXPECT_DOUBLE_EQ(NiceStep(100, 8), 20);
  EXPECT_DOUBLE_EQ(NiceStep(7, 8), 1);
  EXPECT_DOUBLE_EQ(NiceStep(0.3, 8), 0.05);
}

}  // namespace
}  // namespace gpupool::sim
