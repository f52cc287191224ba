#include "sim/campus.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace gpupool::sim {
namespace {

constexpr int64_t kHour = 3600LL * 1000;
constexpr int64_t kDay = 24 * kHour;

Trace Generate(const CampusOptions& o) {
  auto t = GenerateCampus(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Trace{};
}

TEST(Campus, SameSeedSameTraceOtherSeedDiffers) {
  CampusOptions o;
  o.seed = 11;
  const std::string a = FormatTrace(Generate(o));
  const std::string b = FormatTrace(Generate(o));
  EXPECT_EQ(a, b);
  o.seed = 12;
  const std::string c = FormatTrace(Generate(o));
  EXPECT_NE(a, c);
  EXPECT_GT(a.size(), 10000u);
}

TEST(Campus, TraceIsValidAndRecordsItsSeed) {
  CampusOptions o;
  o.seed = 5;
  const Trace t = Generate(o);
  EXPECT_TRUE(ValidateTrace(t).ok()) << ValidateTrace(t).ToString();
  EXPECT_EQ(t.meta.seed, 5u);
  EXPECT_EQ(t.meta.generator, "campus");
  EXPECT_NE(t.meta.params.find("\"load\""), std::string::npos);
  EXPECT_EQ(t.groups.size(), 8u);
  // Ids follow submit order.
  for (size_t i = 1; i < t.jobs.size(); ++i) {
    EXPECT_LE(t.jobs[i - 1].submit_ms, t.jobs[i].submit_ms);
    EXPECT_EQ(t.jobs[i].id, t.jobs[i - 1].id + 1);
  }
}

TEST(Campus, ChangingOneKnobKeepsTheOtherStreams) {
  CampusOptions o;
  o.seed = 3;
  const Trace base = Generate(o);
  o.interactive_per_day = 30;
  const Trace more = Generate(o);
  EXPECT_EQ(base.nodes, more.nodes);
  EXPECT_EQ(base.events, more.events);
  auto count = [](const Trace& t, sched::PriorityClass c) {
    return std::count_if(t.jobs.begin(), t.jobs.end(),
                         [&](const TraceJob& j) { return j.priority == c; });
  };
  EXPECT_EQ(count(base, sched::PriorityClass::kNormal), count(more, sched::PriorityClass::kNormal));
  EXPECT_GT(count(more, sched::PriorityClass::kInteractive),
            2 * count(base, sched::PriorityClass::kInteractive));
}

TEST(Campus, LabsDifferInLoadAndJobsFitTheirLab) {
  CampusOptions o;
  o.seed = 42;
  o.days = 14;
  const Trace t = Generate(o);
  std::map<std::string, double> capacity, work;
  std::map<std::string, int> max_gpus, nodes_of;
  for (const auto& n : t.nodes) {
    capacity[n.owner_group] += n.gpus * n.speed;
    max_gpus[n.owner_group] = std::max(max_gpus[n.owner_group], n.gpus);
    ++nodes_of[n.owner_group];
  }
  int gangs = 0, checkpointing = 0, batch = 0;
  for (const auto& j : t.jobs) {
    if (j.priority != sched::PriorityClass::kNormal) continue;
    ++batch;
    work[j.group] += static_cast<double>(j.duration_ms) * static_cast<double>(j.GpuMilli()) / 1000;
    EXPECT_LE(j.gpus, max_gpus[j.group]) << "job " << j.id;
    if (j.nodes > 1) {
      ++gangs;
      EXPECT_GE(nodes_of[j.group], 2);
    }
    if (j.checkpoint_interval_ms > 0) ++checkpointing;
  }
  double lo = 1e18, hi = 0;
  for (const auto& [lab, cap] : capacity) {
    const double load = work[lab] / (cap * static_cast<double>(14 * kDay));
    lo = std::min(lo, load);
    hi = std::max(hi, load);
  }
  EXPECT_LT(lo, 0.35) << "some lab is mostly idle";
  EXPECT_GT(hi, 1.0) << "some lab is overloaded on its own machines";
  EXPECT_GT(gangs, 0);
  EXPECT_GT(checkpointing, batch / 2);
  EXPECT_LT(checkpointing, batch);
}

TEST(Campus, SessionsComeInWorkingHoursAndDurationsAreHeavyTailed) {
  CampusOptions o;
  o.seed = 8;
  const Trace t = Generate(o);
  int sessions = 0, daytime = 0, sweeps = 0;
  std::vector<double> batch;
  for (const auto& j : t.jobs) {
    const int64_t day = j.submit_ms / kDay % 7;
    const double hour = static_cast<double>(j.submit_ms % kDay) / kHour;
    if (j.priority == sched::PriorityClass::kInteractive) {
      ++sessions;
      if (day < 5 && hour >= 8 && hour < 21) ++daytime;
      EXPECT_EQ(j.checkpoint_interval_ms, 0);
      EXPECT_TRUE(j.gpus == 1 || j.gpu_milli == 500);
    } else if (j.priority == sched::PriorityClass::kOpportunistic) {
      ++sweeps;
    } else {
      batch.push_back(static_cast<double>(j.duration_ms));
    }
  }
  EXPECT_GT(sessions, 100);
  EXPECT_GT(daytime, sessions * 8 / 10);
  EXPECT_GT(sweeps, 0);
  std::sort(batch.begin(), batch.end());
  const double median = batch[batch.size() / 2];
  EXPECT_GT(batch.back(), 15 * median) << "heavy tail";
}

TEST(Campus, DeadlinesAndDeparturesFollowTheirKnobs) {
  // The busiest two days of a lab hold more of its batch work when rushes
  // before deadlines are steeper (and the total stays about the same).
  auto busiest_two_days = [](const Trace& t) {
    std::map<std::string, std::vector<int64_t>> submits;
    for (const auto& j : t.jobs) {
      if (j.priority == sched::PriorityClass::kNormal) submits[j.group].push_back(j.submit_ms);
    }
    double share = 0;
    for (const auto& [lab, times] : submits) {
      size_t best = 0;
      for (int64_t from = 0; from + 2 * kDay <= 7 * kDay; from += kHour) {
        best = std::max<size_t>(best, std::count_if(times.begin(), times.end(), [&](int64_t x) {
                                  return x >= from && x < from + 2 * kDay;
                                }));
      }
      share += static_cast<double>(best) / static_cast<double>(times.size());
    }
    return share / static_cast<double>(submits.size());
  };
  CampusOptions o;
  o.seed = 21;
  o.deadline_burst = 1;
  const Trace calm = Generate(o);
  o.deadline_burst = 4;
  const Trace rushed = Generate(o);
  EXPECT_GT(busiest_two_days(rushed), busiest_two_days(calm) + 0.15);
  EXPECT_NEAR(static_cast<double>(rushed.jobs.size()), static_cast<double>(calm.jobs.size()),
              0.3 * static_cast<double>(calm.jobs.size()));

  const double expected = o.leave_per_node_day * o.days * static_cast<double>(rushed.nodes.size());
  const auto leaves =
      std::count_if(rushed.events.begin(), rushed.events.end(),
                    [](const TraceNodeEvent& e) { return e.kind == NodeEventKind::kLeave; });
  EXPECT_GT(static_cast<double>(leaves), expected * 0.4);
  EXPECT_LT(static_cast<double>(leaves), expected * 1.8);
  o.leave_per_node_day = 0;
  EXPECT_TRUE(Generate(o).events.empty());
}

TEST(Campus, RejectsBadKnobs) {
  CampusOptions o;
  o.labs = 0;
  EXPECT_FALSE(GenerateCampus(o).ok());
  o = {};
  o.days = -1;
  EXPECT_FALSE(GenerateCampus(o).ok());
  o = {};
  o.min_nodes = 3;
  o.max_nodes = 2;
  EXPECT_FALSE(GenerateCampus(o).ok());
  o = {};
  o.gang_fraction = 1.5;
  auto r = GenerateCampus(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gang_fraction"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::sim
