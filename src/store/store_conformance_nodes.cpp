// The Store conformance suite (store/store_conformance.h): the nodes facet
// (NodesTx): nodes, node events, agent credentials and the outbox.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

}  // namespace

// ---------------------------------------------------------------------------
// Nodes

TEST_P(StoreConformanceTest, NodesPutGetByNameListAndReplace) {
  Node a = MakeNode("n-2", "alpha");
  a.gpus = {GpuInfo{0, "GPU-aaa", "NVIDIA A100-SXM4-80GB", 81920, 8, 0, false, /*minor*/ 4},
            GpuInfo{1, "GPU-SIM-bbb", "NVIDIA T4", 15360, 7, 5, true}};
  // A MIG instance keeps what it is a slice of.
  GpuInfo mig{2, "MIG-ccc", "NVIDIA A100-SXM4-80GB", 40192, 8, 0, false, 5};
  mig.parent_uuid = "GPU-ddd";
  mig.mig_profile = "3g.40gb";
  mig.mig_slices = 3;
  mig.mig_gpu_instance = 2;
  mig.mig_compute_instance = 0;
  a.gpus.insert(a.gpus.begin() + 1, mig);
  a.labels = {{"zone", "eu-1"}, {"owner", "lab \"x\""}};
  a.owner_group = "vision";
  Node b = MakeNode("n-1", "beta");
  b.state = NodeState::kOffline;
  b.driver_version = "";
  Node c = MakeNode("n-3", "gamma");
  c.state = NodeState::kLost;
  for (const Node& n : {c, b, a}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(n); }));
  }
  for (const Node& want : {a, b, c}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto by_id,
                              InTx(store(), [&](Tx& tx) { return tx.GetNode(want.id); }));
    ASSERT_TRUE(by_id.has_value()) << want.id;
    EXPECT_EQ(*by_id, want);
    CONF_ASSERT_OK_AND_ASSIGN(auto by_name,
                              InTx(store(), [&](Tx& tx) { return tx.GetNodeByName(want.name); }));
    ASSERT_TRUE(by_name.has_value()) << want.name;
    EXPECT_EQ(*by_name, want);
  }
  CONF_ASSERT_OK_AND_ASSIGN(auto listed, InTx(store(), [](Tx& tx) { return tx.ListNodes(); }));
  EXPECT_EQ(listed, (std::vector<Node>{a, b, c}));  // by name, not id

  // Replace by id, including a rename that frees the old name.
  a.name = "alpha2";
  a.state = NodeState::kOffline;
  a.gpus.pop_back();
  a.labels.clear();
  a.owner_group = "";
  a.last_seen_ms = 1234;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(a); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto old_name,
                            InTx(store(), [](Tx& tx) { return tx.GetNodeByName("alpha"); }));
  EXPECT_FALSE(old_name.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetNode("n-2"); }));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, a);
  CONF_ASSERT_OK_AND_ASSIGN(auto none, InTx(store(), [](Tx& tx) { return tx.GetNode("n-9"); }));
  EXPECT_FALSE(none.has_value());
  // The freed name may be taken by another node.
  CONF_EXPECT_OK(InTx(store(), [](Tx& tx) { return tx.PutNode(MakeNode("n-4", "alpha")); }));
}

TEST_P(StoreConformanceTest, DuplicateNodeNameIsAlreadyExists) {
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.PutNode(MakeNode("n-1", "alpha")); }));
  Status st = InTx(store(), [](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutMeta("written", "before"));
    return tx.PutNode(MakeNode("n-2", "alpha"));
  });
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  CONF_ASSERT_OK_AND_ASSIGN(auto n2, InTx(store(), [](Tx& tx) { return tx.GetNode("n-2"); }));
  EXPECT_FALSE(n2.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto meta, InTx(store(), [](Tx& tx) { return tx.GetMeta("written"); }));
  EXPECT_FALSE(meta.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto n1,
                            InTx(store(), [](Tx& tx) { return tx.GetNodeByName("alpha"); }));
  ASSERT_TRUE(n1.has_value());
  EXPECT_EQ(n1->id, "n-1");
}

TEST_P(StoreConformanceTest, NodeLendingAndLeftStateRoundTrip) {
  NodeLending lending;
  lending.mode = "paused";
  lending.gpus = {{"GPU-aaa", 40960}};
  lending.not_lent = {{"GPU-bbb", "its owner runs process 4242 on it"}};
  lending.sharing = GpuSharing::kNone;
  lending.allow_users = {"alice", "bob"};
  lending.deny_users = {"mallory"};
  lending.allow_groups = {"vision"};
  lending.deny_groups = {"nlp"};
  lending.max_runtime_ms = 3'600'000;
  lending.next_change_ms = 1'700'000'000'000;
  Node lends = MakeNode("n-1", "alpha");
  lends.lending = lending;
  Node plain = MakeNode("n-2", "beta");  // an agent without a policy: no lending
  Node left = MakeNode("n-3", "gamma");
  left.state = NodeState::kLeft;
  left.lending = NodeLending{};  // the defaults: lends everything
  for (const Node& n : {lends, plain, left}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(n); }));
  }
  CONF_ASSERT_OK_AND_ASSIGN(auto listed, InTx(store(), [](Tx& tx) { return tx.ListNodes(); }));
  EXPECT_EQ(listed, (std::vector<Node>{lends, plain, left}));
  EXPECT_FALSE(listed[1].lending.has_value());
  ASSERT_TRUE(listed[2].lending.has_value());

  // Replacing a node replaces its lending, down to absent.
  lends.lending.reset();
  plain.lending = lending;
  for (const Node& n : {lends, plain}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutNode(n); }));
  }
  Reopen();
  for (const Node& want : {lends, plain, left}) {
    CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [&](Tx& tx) { return tx.GetNode(want.id); }));
    EXPECT_EQ(got, std::optional<Node>(want)) << want.id;
  }
}

// ---------------------------------------------------------------------------
// Node events

TEST_P(StoreConformanceTest, NodeEventsAppendListFilterAndPage) {
  auto event = [](std::string node, int64_t ts, std::string kind) {
    NodeEvent e;
    e.node_id = std::move(node);
    e.ts_ms = ts;
    e.kind = std::move(kind);
    return e;
  };
  NodeEvent reclaim = event("n-1", 10, "reclaim");
  reclaim.id = 99;  // ignored: the store assigns ids
  reclaim.reason = "reclaimed by the owner (\"gpupool agent reclaim\")";
  reclaim.gpus = {"GPU-a", "GPU-b"};
  reclaim.attempts = {"4.1", "7.2"};
  std::vector<NodeEvent> appended = {reclaim, event("n-2", 11, "pause"), event("n-1", 12, "resume"),
                                     event("n-1", 13, "leave")};
  std::vector<int64_t> ids;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    for (const NodeEvent& e : appended) {
      GP_ASSIGN_OR_RETURN(int64_t id, tx.AppendNodeEvent(e));
      ids.push_back(id);
    }
    return Status::Ok();
  }));
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_GT(ids[0], 0);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 4u);
  for (size_t i = 0; i < appended.size(); ++i) appended[i].id = ids[i];

  auto list = [&](const std::string& node, int64_t after, int32_t limit, int64_t before = 0) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListNodeEvents(node, after, before, limit); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<NodeEvent>{};
  };
  using V = std::vector<NodeEvent>;
  EXPECT_EQ(list("", 0, 100), appended);
  EXPECT_EQ(list("n-1", 0, 100), (V{appended[0], appended[2], appended[3]}));
  EXPECT_EQ(list("n-2", 0, 100), (V{appended[1]}));
  EXPECT_EQ(list("n-9", 0, 100), V{});
  EXPECT_EQ(list("n-1", ids[0], 1), (V{appended[2]}));
  EXPECT_EQ(list("", ids[2], 100), (V{appended[3]}));
  EXPECT_EQ(list("", 0, 0), V{});
  // Newest first: the latest page, then the one before it.
  EXPECT_EQ(list("", 0, 2, INT64_MAX), (V{appended[3], appended[2]}));
  EXPECT_EQ(list("", 0, 2, ids[2]), (V{appended[1], appended[0]}));
  EXPECT_EQ(list("n-1", 0, 100, INT64_MAX), (V{appended[3], appended[2], appended[0]}));
  EXPECT_EQ(list("n-1", 0, 1, ids[2]), (V{appended[0]}));
  EXPECT_EQ(list("n-1", ids[0], 100, ids[3]), (V{appended[2]}));
  EXPECT_EQ(list("", 0, 100, ids[0]), V{});

  // A rolled-back append leaves nothing; ids go on ascending after a reopen.
  Status st = InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendNodeEvent(event("n-1", 14, "policy")).status());
    return Status::FailedPrecondition("rolled back");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(list("", 0, 100), appended);
  Reopen();
  EXPECT_EQ(list("", 0, 100), appended);
  CONF_ASSERT_OK_AND_ASSIGN(int64_t next, InTx(store(), [&](Tx& tx) {
                              return tx.AppendNodeEvent(event("n-2", 15, "policy"));
                            }));
  EXPECT_GT(next, ids.back());
}

TEST_P(StoreConformanceTest, AgentCredentialsReplaceAndRevoke) {
  AgentCredential a{"gpu-1", "hash1", "0a1b", "sha256:00", "", 10, false, 0};
  AgentCredential b{"gpu-2", "hash2", "", "", "carol", 11, false, 0};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutAgentCredential(b));
    return tx.PutAgentCredential(a);
  }));
  a.revoked = true;
  a.revoked_ms = 20;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutAgentCredential(a); }));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto got,
                            InTx(store(), [](Tx& tx) { return tx.GetAgentCredential("gpu-1"); }));
  EXPECT_EQ(got, std::optional<AgentCredential>(a));
  CONF_ASSERT_OK_AND_ASSIGN(auto all,
                            InTx(store(), [](Tx& tx) { return tx.ListAgentCredentials(); }));
  EXPECT_EQ(all, (std::vector<AgentCredential>{a, b}));
}

// ---------------------------------------------------------------------------
// Outbox

TEST_P(StoreConformanceTest, OutboxSeqIsPerNodeGaplessAndNeverGoesBack) {
  auto push = [&](const std::string& node, const std::string& body) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.PushOutbox(node, "assign", body); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(-1);
  };
  auto list = [&](const std::string& node, int64_t after) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListOutbox(node, after); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or({});
  };
  EXPECT_EQ(push("n-1", R"({"a":1})"), 1);
  EXPECT_EQ(push("n-1", R"({"a":2})"), 2);
  EXPECT_EQ(push("n-2", R"({"b":1})"), 1);
  EXPECT_EQ(push("n-1", R"({"a":3})"), 3);

  using M = std::vector<OutboxMessage>;
  EXPECT_EQ(list("n-1", 0), (M{{"n-1", 1, "assign", R"({"a":1})"},
                               {"n-1", 2, "assign", R"({"a":2})"},
                               {"n-1", 3, "assign", R"({"a":3})"}}));
  EXPECT_EQ(list("n-1", 2), (M{{"n-1", 3, "assign", R"({"a":3})"}}));
  EXPECT_EQ(list("n-2", 0), (M{{"n-2", 1, "assign", R"({"b":1})"}}));
  EXPECT_EQ(list("n-9", 0), M{});

  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AckOutbox("n-1", 2); }));
  EXPECT_EQ(list("n-1", 0), (M{{"n-1", 3, "assign", R"({"a":3})"}}));
  EXPECT_EQ(list("n-2", 0).size(), 1u);
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AckOutbox("n-1", 3); }));
  EXPECT_EQ(list("n-1", 0), M{});
  EXPECT_EQ(push("n-1", "{}"), 4);  // the counter survives an empty outbox

  // A rolled back push leaves no gap.
  Status st = InTx(store(), [](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(int64_t seq, tx.PushOutbox("n-1", "x", "{}"));
    EXPECT_EQ(seq, 5);
    return Status::Unavailable("abandon");
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(push("n-1", "{}"), 5);

  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.AckOutbox("n-1", 100); }));
  Reopen();
  EXPECT_EQ(push("n-1", "{}"), 6);
  EXPECT_EQ(push("n-2", "{}"), 2);
  EXPECT_EQ(list("n-1", 0), (M{{"n-1", 6, "assign", "{}"}}));
}

}  // namespace gpupool
