// BuildPassInput is a pure function of the store's view and its context:
// these tests build views by hand, with no store, no clock and no agents.
#include "server/pass_input.h"

#include <gtest/gtest.h>

#include "model/job_spec.h"

namespace gpupool::server {
namespace {

Node MakeNode(const std::string& id, int gpus) {
  Node n;
  n.id = id;
  n.name = "name-" + id;
  n.state = NodeState::kReady;
  n.cpu_milli = 16000;
  n.memory_mib = 65536;
  for (int i = 0; i < gpus; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + id + "-" + std::to_string(i);
    g.name = "Simulated A100";
    g.memory_mib = 40960;
    g.simulated = true;
    n.gpus.push_back(g);
  }
  return n;
}

Job MakeJob(int64_t id, int gpus, const std::string& group = "lab") {
  Job j;
  j.id = id;
  j.owner = "alice";
  j.state = JobState::kPending;
  j.spec.group = group;
  j.spec.command = {"true"};
  j.spec.resources.gpus = gpus;
  j.spec.resources.cpu_milli = 1000;
  j.spec.resources.memory_mib = 1024;
  return j;
}

PassContext Context(int64_t now, std::set<std::string> connected = {"a", "b"}) {
  PassContext ctx;
  ctx.now_ms = now;
  ctx.half_life_ms = 3'600'000;
  ctx.connected = [connected](const std::string& id) { return connected.count(id) > 0; };
  return ctx;
}

const sched::NodeView* NodeOf(const PassInput& in, const std::string& id) {
  for (const sched::NodeView& n : in.snapshot.nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

TEST(PassInputTest, OnlyConnectedLendingNodesAreReady) {
  PoolView view;
  view.nodes = {MakeNode("a", 2), MakeNode("b", 2), MakeNode("c", 2)};
  NodeLending paused;
  paused.mode = "paused";
  view.nodes[1].lending = paused;
  PassInput in = BuildPassInput(view, Context(1000, {"a", "b"}));
  ASSERT_EQ(in.snapshot.nodes.size(), 3u);
  EXPECT_TRUE(NodeOf(in, "a")->ready);
  EXPECT_FALSE(NodeOf(in, "b")->ready);  // connected, but its provider paused it
  EXPECT_FALSE(NodeOf(in, "c")->ready);  // not connected
  EXPECT_EQ(in.snapshot.now_ms, 1000);
}

TEST(PassInputTest, GpusNotLentAreNotOfferedAndPartlyLentOnesTakeSharesOnly) {
  PoolView view;
  view.nodes = {MakeNode("a", 2)};
  NodeLending lending;
  lending.gpus = {{"GPU-a-0", 8192}};  // GPU-a-1 is not lent; GPU-a-0 only 8 GiB of it
  view.nodes[0].lending = lending;
  PassInput in = BuildPassInput(view, Context(0));
  const sched::NodeView* a = NodeOf(in, "a");
  ASSERT_EQ(a->gpus.size(), 1u);
  EXPECT_EQ(a->gpus[0].uuid, "GPU-a-0");
  EXPECT_EQ(a->gpus[0].memory_mib, 8192);
  EXPECT_EQ(a->gpus[0].free_milli, 999);  // never wholly free: no whole-GPU job fits
}

TEST(PassInputTest, LiveAttemptsHoldTheirGpusAndOnlyTheCurrentOneRuns) {
  PoolView view;
  view.nodes = {MakeNode("a", 2)};
  Job running = MakeJob(1, 1);
  running.state = JobState::kRunning;
  running.current_attempt = "1.2";
  view.live_jobs = {running};
  Attempt current, stale;
  current.id = "1.2";
  current.job_id = 1;
  current.node_id = "a";
  current.gpu_uuids = {"GPU-a-0"};
  current.gpu_milli = 1000;
  current.created_ms = 0;
  stale = current;
  stale.id = "1.1";
  stale.gpu_uuids = {"GPU-a-1"};
  view.live_attempts = {current, stale};
  PassInput in = BuildPassInput(view, Context(60'000));
  const sched::NodeView* a = NodeOf(in, "a");
  EXPECT_EQ(a->gpus[0].free_milli, 0);
  EXPECT_EQ(a->gpus[1].free_milli, 0);  // a stale attempt still holds until it ends
  EXPECT_EQ(a->cpu_milli_free, 16000 - 2 * 1000);
  ASSERT_EQ(in.snapshot.running.size(), 1u);
  EXPECT_EQ(in.snapshot.running[0].attempt_id, "1.2");
  // Its group is charged for its time so far, without anything written.
  ASSERT_EQ(in.snapshot.usage.count("lab"), 1u);
  EXPECT_GT(in.snapshot.usage.at("lab").milli_ms, 0);
}

// With prices, fair share counts an hour of a GPU by its price: a lab on an
// A100 at 2.00 is charged four times a lab on a T4 at 0.50 for the same
// time; without prices, the same.
TEST(PassInputTest, FairShareUsageIsWeightedByTheGpusPrices) {
  PoolView view;
  view.nodes = {MakeNode("a", 1), MakeNode("b", 1)};
  view.nodes[1].gpus[0].name = "Simulated T4";
  for (int64_t id : {1, 2}) {
    Job j = MakeJob(id, 1, id == 1 ? "vision" : "nlp");
    j.state = JobState::kRunning;
    j.current_attempt = std::to_string(id) + ".1";
    view.live_jobs.push_back(j);
    Attempt a;
    a.id = j.current_attempt;
    a.job_id = id;
    a.node_id = id == 1 ? "a" : "b";
    a.gpu_uuids = {view.nodes[id - 1].gpus[0].uuid};
    a.gpu_milli = 500;  // a half share pays half, in fair share too
    view.live_attempts.push_back(a);
  }
  PassContext undecayed = Context(60'000);
  undecayed.half_life_ms = 0;  // exact sums, no decay's rounding
  PassInput plain = BuildPassInput(view, undecayed);
  EXPECT_EQ(plain.snapshot.usage.at("vision").milli_ms, plain.snapshot.usage.at("nlp").milli_ms);
  accounting::PriceBook prices(
      {{1, accounting::PricedResource::kGpu, "A100", 2'000'000, 0, "admin"},
       {2, accounting::PricedResource::kGpu, "T4", 500'000, 0, "admin"}});
  PassContext ctx = undecayed;
  ctx.usage_prices = &prices;
  PassInput weighted = BuildPassInput(view, ctx);
  EXPECT_EQ(weighted.snapshot.usage.at("vision").milli_ms,
            4 * weighted.snapshot.usage.at("nlp").milli_ms);
  EXPECT_EQ(weighted.snapshot.usage.at("nlp").milli_ms, plain.snapshot.usage.at("nlp").milli_ms);
  // What a lab lent comes off its usage, never below zero; others' stay.
  const int64_t vision = weighted.snapshot.usage.at("vision").milli_ms;
  ctx.lending_bonus = {{"vision", vision / 4}, {"nlp", 1'000'000'000'000}};
  PassInput lent = BuildPassInput(view, ctx);
  EXPECT_EQ(lent.snapshot.usage.at("vision").milli_ms, vision - vision / 4);
  EXPECT_EQ(lent.snapshot.usage.at("nlp").milli_ms, 0);
}

// What a preemption would cost is the work since the attempt's newest
// checkpoint, not since its start.
TEST(PassInputTest, ARunningAttemptsNewestCheckpointBoundsTheWorkAtStake) {
  PoolView view;
  view.nodes = {MakeNode("a", 2)};
  Job job = MakeJob(1, 1);
  job.state = JobState::kRunning;
  job.current_attempt = "1.1";
  view.live_jobs = {job};
  Attempt a;
  a.id = "1.1";
  a.job_id = 1;
  a.node_id = "a";
  a.gpu_uuids = {"GPU-a-0"};
  a.gpu_milli = 1000;
  a.started_ms = 10'000;
  view.live_attempts = {a};
  PassInput before = BuildPassInput(view, Context(60'000));
  ASSERT_EQ(before.snapshot.running.size(), 1u);
  EXPECT_LE(before.snapshot.running[0].last_checkpoint_ms, 10'000);  // never: since the start
  view.live_attempts[0].last_checkpoint_ms = 50'000;
  PassInput after = BuildPassInput(view, Context(60'000));
  EXPECT_EQ(after.snapshot.running[0].last_checkpoint_ms, 50'000);
}

TEST(PassInputTest, ProviderPolicyAndRecentRefusalsExcludeNodesWithReasons) {
  PoolView view;
  view.nodes = {MakeNode("a", 2), MakeNode("b", 2)};
  NodeLending only_bob;
  only_bob.gpus = {{"GPU-a-0", 40960}, {"GPU-a-1", 40960}};
  only_bob.allow_users = {"bob"};
  view.nodes[0].lending = only_bob;
  view.pending = {std::make_shared<const Job>(MakeJob(7, 1))};
  std::map<int64_t, std::map<std::string, int64_t>> refused = {{7, {{"b", 5000}}}};
  PassContext ctx = Context(1000);
  ctx.refused = &refused;
  PassInput in = BuildPassInput(view, ctx);
  ASSERT_EQ(in.snapshot.pending.size(), 1u);
  EXPECT_EQ(in.snapshot.pending[0].request.excluded_nodes, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(in.exclusions.count(7), 1u);
  EXPECT_NE(in.exclusions[7].find("name-a (refused by the provider's policy"), std::string::npos)
      << in.exclusions[7];
  EXPECT_NE(in.exclusions[7].find("name-b (it refused the job lately)"), std::string::npos)
      << in.exclusions[7];
  // Once the refusal has expired, only the policy keeps the job off a node.
  ctx.now_ms = 5000;
  in = BuildPassInput(view, ctx);
  EXPECT_EQ(in.snapshot.pending[0].request.excluded_nodes, (std::vector<std::string>{"a"}));
}

TEST(PassInputTest, AJobTheSchedulerWouldRejectIsSkippedNotFatal) {
  PoolView view;
  view.nodes = {MakeNode("a", 2)};
  Job bad = MakeJob(3, 1);
  bad.spec.resources.gpus = -4;  // a record no valid spec produces
  view.pending = {std::make_shared<const Job>(bad), std::make_shared<const Job>(MakeJob(4, 1))};
  PassInput in = BuildPassInput(view, Context(0));
  ASSERT_EQ(in.snapshot.pending.size(), 1u);
  EXPECT_EQ(in.snapshot.pending[0].job_id, 4);
  ASSERT_EQ(in.skipped.count(3), 1u);
  EXPECT_EQ(in.skipped[3].rfind("cannot be scheduled: ", 0), 0u) << in.skipped[3];
}

}  // namespace
}  // namespace gpupool::server

namespace gpupool::server {
namespace {

// An account at its budget's limit: its pending jobs are left out with the
// reason, others' (and other accounts' of the same user) are not.
TEST(PassInputTest, JobsOfAnAccountAtItsLimitWaitWithTheReason) {
  PoolView view;
  view.nodes.push_back(MakeNode("a", 4));
  Job lab = MakeJob(1, 1, "vision");
  Job own = MakeJob(2, 1, "default");  // alice's own account
  Job other = MakeJob(3, 1, "physics");
  for (const Job& j : {lab, own, other}) view.pending.push_back(std::make_shared<const Job>(j));
  PassContext ctx = Context(1000);
  ctx.held_accounts = {{"group:vision", "group vision reached its budget"},
                       {"user:alice", "user alice has no credits left"}};
  PassInput in = BuildPassInput(view, ctx);
  ASSERT_EQ(in.snapshot.pending.size(), 1u);
  EXPECT_EQ(in.snapshot.pending[0].job_id, 3);
  EXPECT_EQ(in.skipped.at(1), "held: group vision reached its budget");
  EXPECT_EQ(in.skipped.at(2), "held: user alice has no credits left");
}

}  // namespace
}  // namespace gpupool::server
