#include "server/scheduler_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sched/policies.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

std::string Error(std::string_view text) {
  auto r = ParseSchedulerConfig(text);
  EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(SchedulerConfig, EveryField) {
  auto r = ParseSchedulerConfig(R"(
half_life: 3d
anti_thrash_window: 45m
groups:
  vision: {weight: 2, guaranteed_gpus: 4}
  nlp: {guaranteed_gpus: 0.5}
  astro:
model_speed: {A100: 2.0, T4: 0.5, H100: 3}
backfill_reservations: 0
candidates: 16
placement: best-fit
preemption: false
)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const sched::SchedulerConfig& c = *r;
  EXPECT_EQ(c.half_life_ms, 3LL * 86'400'000);
  EXPECT_EQ(c.anti_thrash_window_ms, 45LL * 60'000);
  ASSERT_EQ(c.groups.size(), 3u);
  // In the order nlohmann keeps object keys (sorted).
  EXPECT_EQ(c.groups[0].name, "astro");
  EXPECT_EQ(c.groups[0].weight, 1);
  EXPECT_EQ(c.groups[0].guaranteed_milli, 0);
  EXPECT_EQ(c.groups[1].name, "nlp");
  EXPECT_EQ(c.groups[1].weight, 1);
  EXPECT_EQ(c.groups[1].guaranteed_milli, 500);
  EXPECT_EQ(c.groups[2].name, "vision");
  EXPECT_EQ(c.groups[2].weight, 2);
  EXPECT_EQ(c.groups[2].guaranteed_milli, 4000);
  EXPECT_EQ(c.model_speed.at("A100"), 2.0);
  EXPECT_EQ(c.model_speed.at("T4"), 0.5);
  EXPECT_EQ(c.model_speed.at("H100"), 3.0);
  EXPECT_EQ(c.max_reservations, 0);
  EXPECT_EQ(c.candidates, 16);
  EXPECT_EQ(c.placement, sched::PlacementScore::kBestFit);
  EXPECT_FALSE(c.preemption);
}

// The server's `placement` and the simulator's `--policy` (sim openb's
// sched::MakePolicy, sim campus's --placement/--policy) resolve the same
// names to the same scorers: every simulator policy is a placement, it
// names the scorer of the policy of that name, and Decide runs it.
TEST(SchedulerConfig, PlacementAcceptsEverySimulatorPolicy) {
  for (const std::string& name : sched::PolicyNames()) {
    auto r = ParseSchedulerConfig("placement: " + name + "\n");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->placement.name, name);
    auto scorer = sched::MakeScorer(r->placement.name);
    auto policy = sched::MakePolicy(name);
    ASSERT_NE(scorer, nullptr) << name;
    ASSERT_NE(policy, nullptr) << name;
    EXPECT_EQ(scorer->Name(), policy->Name());
    // The scheduler runs it: one GPU job on a one-node pool is placed.
    sched::Snapshot s;
    sched::NodeView n;
    n.id = "n1";
    n.cpu_milli_total = n.cpu_milli_free = 8000;
    n.memory_mib_total = n.memory_mib_free = 16384;
    sched::GpuView g;
    g.uuid = "n1-g0";
    g.model = "T4";
    g.memory_mib = g.free_memory_mib = 16384;
    n.gpus = {g};
    s.nodes = {n};
    sched::PendingJob j;
    j.job_id = 1;
    j.request.gpus = 1;
    s.pending = {j};
    auto d = sched::Scheduler(*r).Decide(s);
    ASSERT_TRUE(d.ok()) << name << ": " << d.status().ToString();
    EXPECT_EQ(d->placements.size(), 1u) << name;
  }
  auto bad = ParseSchedulerConfig("placement: tetris\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("placement"), std::string::npos);
  EXPECT_NE(bad.status().message().find("tetris"), std::string::npos);
  // A config built in code with an unknown name is refused by Decide too.
  sched::SchedulerConfig c;
  c.placement.name = "tetris";
  EXPECT_FALSE(sched::Scheduler(c).Decide(sched::Snapshot{}).ok());
}

TEST(SchedulerConfig, DefaultsWhenAbsent) {
  auto r = ParseSchedulerConfig("groups: {}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  sched::SchedulerConfig d;
  EXPECT_EQ(r->half_life_ms, d.half_life_ms);
  EXPECT_EQ(r->anti_thrash_window_ms, d.anti_thrash_window_ms);
  EXPECT_EQ(r->max_reservations, d.max_reservations);
  EXPECT_EQ(r->preemption, d.preemption);
  EXPECT_TRUE(r->groups.empty());
  // Numbers are seconds; 0 turns the decay off.
  EXPECT_EQ(ParseSchedulerConfig("half_life: 0")->half_life_ms, 0);
  EXPECT_EQ(ParseSchedulerConfig("anti_thrash_window: 90")->anti_thrash_window_ms, 90'000);
}

TEST(SchedulerConfig, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"", "empty scheduler config"},
      {"[1]", "(root): expected a mapping, got a list"},
      {"half_lif: 7d",
       "half_lif (line 1): unknown field (known: half_life, anti_thrash_window, groups, "
       "model_speed, "
       "backfill_reservations, preemption, candidates, placement)"},
      // fgd is a placement now (issue 21: every `gpupool sim --policy` name).
      {"placement: tetris",
       "placement (line 1): unknown placement \"tetris\"; expected one of random, first-fit, "
       "best-fit, dot-product, fgd, gpupool"},
      {"half_life: soon", "half_life (line 1): invalid duration \"soon\""},
      {"half_life: 400d", "half_life (line 1): must be from 0 to 365d, got 400d"},
      {"half_life: -5", "half_life (line 1): must be from 0 to 365d, got -5"},
      {"half_life: [7d]",
       "half_life (line 1): must be a duration such as \"7d\" or \"30m\", got a list"},
      {"anti_thrash_window: 31d", "anti_thrash_window (line 1): must be from 0 to 30d, got 31d"},
      {"groups: [vision]",
       "groups (line 1): expected a mapping such as {vision: {weight: 2}}, got a list"},
      {"groups: {vision: 2}",
       "groups.vision (line 1): expected a mapping such as {weight: 2, guaranteed_gpus: 4}, got 2"},
      {"groups: {'my lab': {weight: 1}}", "groups.my lab (line 1): invalid group name"},
      {"groups: {vision: {weight: 0}}",
       "groups.vision.weight (line 1): must be an integer from 1 to 1000000, got 0"},
      {"groups: {vision: {weight: 1.5}}",
       "groups.vision.weight (line 1): must be an integer from 1 to 1000000, got 1.5"},
      {"groups: {vision: {weight: '2'}}",
       "groups.vision.weight (line 1): must be an integer from 1 to 1000000, got \"2\""},
      {"groups: {vision: {guaranteed_gpus: -1}}",
       "groups.vision.guaranteed_gpus (line 1): must be a number of GPUs from 0 to 1000000 with at "
       "most "
       "three decimals, got -1"},
      {"groups: {vision: {guaranteed_gpus: 0.0001}}",
       "groups.vision.guaranteed_gpus (line 1): must be a number of GPUs"},
      {"groups: {vision: {quota: 4}}",
       "groups.vision.quota (line 1): unknown field (known: weight, guaranteed_gpus)"},
      {"model_speed: {A100: 0}",
       "model_speed.A100 (line 1): must be a number above 0 and at most 1000 (1.0 = ordinary), got "
       "0"},
      {"model_speed: {A100: fast}", "model_speed.A100 (line 1): must be a number above 0"},
      {"model_speed: [A100]",
       "model_speed (line 1): expected a mapping such as {A100: 2.0, T4: 0.5}"},
      {"backfill_reservations: -1",
       "backfill_reservations (line 1): must be an integer from 0 to 1000, got -1"},
      {"backfill_reservations: 2.5", "backfill_reservations (line 1): must be an integer"},
      {"candidates: 0", "candidates (line 1): must be an integer from 1 to 1000, got 0"},
      {"preemption: yes", "preemption (line 1): must be true or false, got \"yes\""},
      {"groups: {a: 1}\ngroups: {b: 2}", "groups: duplicate key"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    EXPECT_THAT(Error(c.yaml), HasSubstr(c.message));
  }
}

TEST(SchedulerConfig, ErrorsNameTheLine) {
  const std::string head = "# fair share\nhalf_life: 7d\ngroups:\n  vision:\n    weight: 2\n";
  EXPECT_EQ(Error(head + "\npreemption: maybe\n"),
            "preemption (line 7): must be true or false, got \"maybe\"");
  EXPECT_EQ(Error(head + "    guaranteed_gpus: -1\n"),
            "groups.vision.guaranteed_gpus (line 6): must be a number of GPUs from 0 to 1000000 "
            "with at most three decimals, got -1");
  EXPECT_EQ(Error(head + "  nlp: {weight: 1, quota: 4}\n"),
            "groups.nlp.quota (line 6): unknown field (known: weight, guaranteed_gpus)");
  EXPECT_EQ(Error(head + "model_speed:\n  A100: 2\n  T4: -1\n"),
            "model_speed.T4 (line 8): must be a number above 0 and at most 1000 (1.0 = ordinary), "
            "got -1");
  // Syntax errors keep their own position.
  EXPECT_THAT(Error(head + "   weight: 3\n"), testing::StartsWith("line 6, column"));
}

TEST(SchedulerConfig, LoadNamesTheFile) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("sched_config_test_" + std::to_string(::getpid()) + ".yaml"))
                         .string();
  {
    std::ofstream out(path);
    out << "groups:\n  vision: {weight: -2}\n";
  }
  auto r = LoadSchedulerConfig(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ": groups.vision.weight (line 2): must be"));
  {
    std::ofstream out(path);
    out << "groups:\n  vision: {weight: 2}\n";
  }
  r = LoadSchedulerConfig(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->groups.at(0).weight, 2);
  std::filesystem::remove(path);
  r = LoadSchedulerConfig(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::server
