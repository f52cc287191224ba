// Hostile agents against a real server: the HTTP server, agent hub, pool,
// blob API and SQLite store of ApiTestServer, with enrolled agents speaking
// the real protocol over real WebSockets. Node b is honest and runs alice's
// job; node a (and others) try what an enrolled but malicious or broken
// agent could: speak for b's attempt, read b's blobs, post b's checkpoints,
// claim GPUs it does not have, flood the channel. Each must be refused and
// audited, and b's job must still run and finish.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <tuple>

#include "proto/channel.h"
#include "proto/messages.h"
#include "server/api_testing.h"
#include "server/blob_testing.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// The agent's end of a channel, driven by the test.
class TestAgent : public net::WsHandler {
 public:
  void OnOpen(std::shared_ptr<net::WsConnection> c) override {
    std::lock_guard lock(mu);
    conn = std::move(c);
    opened = true;
  }
  void OnMessage(std::string text) override {
    auto env = proto::DecodeEnvelope(text);
    if (!env.ok()) return;
    std::lock_guard lock(mu);
    acked = std::max(acked, env->ack);
    received.push_back(*std::move(env));
  }
  void OnClose(std::string reason) override {
    std::lock_guard lock(mu);
    close_reason = std::move(reason);
    closed = true;
  }
  bool Welcomed() {
    std::lock_guard lock(mu);
    for (const auto& e : received) {
      if (e.type == proto::kWelcome) return true;
    }
    return false;
  }
  // The orders of `type` received so far.
  std::vector<proto::Envelope> Orders(std::string_view type) {
    std::lock_guard lock(mu);
    std::vector<proto::Envelope> out;
    for (const auto& e : received) {
      if (e.type == type) out.push_back(e);
    }
    return out;
  }

  std::mutex mu;
  std::shared_ptr<net::WsConnection> conn;  // used on the loop thread only
  std::vector<proto::Envelope> received;
  int64_t acked = 0;
  bool opened = false, closed = false;
  std::string close_reason;
};

proto::Hello HelloOf(const std::string& node, const std::string& gpu_uuid) {
  proto::Hello h;
  h.node_name = node;
  h.agent_instance = node + "-i1";
  h.cpu_milli = 8000;
  h.memory_mib = 32768;
  h.gpus.push_back({0, gpu_uuid, "A100", 81920, 8, 0, true});
  return h;
}

class AgentGuardTest : public ApiTestServer {
 protected:
  template <typename F>
  void WaitFor(F pred, const std::string& what, int timeout_ms = 30'000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(pred()) << "timed out waiting for " << what;
  }

  std::string Enroll(const std::string& node) {
    return OnLoop([&] {
      auto t = auth_->EnrollAgent(node, "", "", "");
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      return t.ok() ? t->secret : std::string();
    });
  }

  std::shared_ptr<TestAgent> Connect(const std::string& token) {
    auto agent = std::make_shared<TestAgent>();
    OnLoop([&] {
      net::WsClientOptions o;
      o.url = "ws://127.0.0.1:" + std::to_string(http_->port()) + "/v1/agent/connect";
      o.headers["Authorization"] = "Bearer " + token;
      net::WsConnect(loop_, o, agent);
      return 0;
    });
    WaitFor(
        [&] {
          std::lock_guard lock(agent->mu);
          return agent->opened || agent->closed;
        },
        "the agent's connection");
    return agent;
  }

  void Send(TestAgent& agent, int64_t seq, std::string_view type, const std::string& body) {
    SendRaw(agent, proto::EncodeEnvelope(
                       {proto::kProtocolVersion, seq, agent.acked, std::string(type), body}));
  }
  void SendRaw(TestAgent& agent, std::string text) {
    OnLoop([&] {
      if (agent.conn) agent.conn->Send(std::move(text));
      return 0;
    });
  }

  // Connects with `token` and says `hello`; waits for the welcome.
  std::shared_ptr<TestAgent> Join(const std::string& token, const proto::Hello& hello) {
    auto agent = Connect(token);
    Send(*agent, 0, proto::kHello, proto::Encode(hello));
    WaitFor([&] { return agent->Welcomed() || agent->closed; }, "the welcome");
    EXPECT_TRUE(agent->Welcomed()) << agent->close_reason;
    return agent;
  }
  // Says `hello` and expects the server to close the connection for it.
  std::string Refused(const std::string& token, const proto::Hello& hello) {
    auto agent = Connect(token);
    Send(*agent, 0, proto::kHello, proto::Encode(hello));
    WaitFor([&] { return agent->closed; }, "the connection to close");
    EXPECT_FALSE(agent->Welcomed());
    return agent->close_reason;
  }

  // The audit log's refusals of node `node` with `action`.
  std::vector<json> Refusals(const std::string& node, const std::string& action) {
    auto r = Call("GET", "/v1/audit?limit=1000", admin_);
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<json> out;
    const json audit = Json(r);
    for (const json& e : audit["entries"]) {
      if (e["actor"] == "node:" + node && e["action"] == action && e["ok"] == false)
        out.push_back(e);
    }
    return out;
  }

  // Node b (honest) runs alice's job 1 as attempt 1.1.
  void StartJobOnB(const std::string& inputs = "") {
    b_token_ = Enroll("b");
    b_ = Join(b_token_, HelloOf("b", "b-gpu0"));
    json spec = {{"name", "honest"}, {"run", "train"}, {"resources", {{"gpus", 1}}}};
    if (!inputs.empty()) spec["inputs"] = inputs;
    auto submitted = Call("POST", "/v1/jobs", alice_, spec.dump());
    ASSERT_EQ(submitted.status, 201) << submitted.body;
    EXPECT_EQ(OnLoop([&] { return *pool_->Schedule(); }), 1);
    WaitFor([&] { return !b_->Orders(proto::kStart).empty(); }, "b's start order");
    Send(*b_, ++b_seq_, proto::kTaskStatus,
         proto::Encode(proto::TaskReport{"1.1", proto::TaskState::kRunning}));
    WaitFor([&] { return Json(Call("GET", "/v1/jobs/1", alice_))["state"] == "running"; },
            "job 1 to run");
  }
  // b's job ends well: the pool kept serving it.
  void FinishJobOnB() {
    Send(*b_, ++b_seq_, proto::kTaskStatus,
         proto::Encode(proto::TaskReport{"1.1", proto::TaskState::kExited}));
    WaitFor([&] { return Json(Call("GET", "/v1/jobs/1", alice_))["state"] == "succeeded"; },
            "job 1 to succeed");
    EXPECT_EQ(Call("GET", "/v1/jobs", alice_).status, 200);
  }

  std::string b_token_;
  std::shared_ptr<TestAgent> b_;
  int64_t b_seq_ = 0;
};

TEST_F(AgentGuardTest, ReportsAboutAnotherNodesAttemptAreRefusedAndAudited) {
  StartJobOnB();
  // Node a knows attempt 1.1 (ids are guessable) and speaks for it.
  proto::Hello hello = HelloOf("a", "a-gpu0");
  hello.tasks.push_back(proto::TaskReport{"1.1", proto::TaskState::kRunning});
  auto a = Join(agent_, hello);
  Send(*a, 1, proto::kTaskStatus,
       proto::Encode(proto::TaskReport{"1.1", proto::TaskState::kExited, 3}));
  proto::LogChunk chunk;
  chunk.attempt_id = "1.1";
  chunk.lines.push_back({0, "stdout", 1, "forged output"});
  Send(*a, 2, proto::kLogs, proto::Encode(chunk));
  NodeEvent reclaim;
  reclaim.ts_ms = 1;
  reclaim.kind = "reclaim";
  reclaim.reason = "forged";
  reclaim.attempts = {"1.1"};
  Send(*a, 3, proto::kNodeEvent, proto::Encode(reclaim));
  WaitFor(
      [&] {
        std::lock_guard lock(a->mu);
        return a->acked >= 3;
      },
      "a's messages to be applied");

  json job = Json(Call("GET", "/v1/jobs/1", alice_));
  EXPECT_EQ(job["state"], "running") << job.dump();
  auto logs = Call("GET", "/v1/jobs/1/logs", alice_);
  EXPECT_THAT(logs.body, ::testing::Not(HasSubstr("forged output")));
  // The hello's report, the exit, the output and the event: each audited.
  auto refused = Refusals("a", "agent.foreign_attempt");
  ASSERT_EQ(refused.size(), 4u) << Json(Call("GET", "/v1/audit", admin_)).dump();
  for (const json& e : refused) {
    EXPECT_EQ(e["target"], "1.1");
    EXPECT_THAT(e["detail"].get<std::string>(), HasSubstr("which runs on node b"));
  }
  // a's event log does not claim b's attempt.
  json events = Json(Call("GET", "/v1/events?node=a", alice_));
  ASSERT_EQ(events["events"].size(), 1u) << events.dump();
  EXPECT_EQ(events["events"][0]["attempts"], json::array());
  FinishJobOnB();
}

// A hostile agent reports its own task in a state outside the protocol's
// table: each message is refused as malformed (logged, skipped, acked so
// that it is not resent forever), nothing about the job changes (it is not
// read as "lost", which would requeue it), and the channel goes on.
TEST_F(AgentGuardTest, ATaskStateOutsideTheProtocolIsRefusedAndChangesNothing) {
  StartJobOnB();
  const json before = Json(Call("GET", "/v1/jobs/1", alice_));
  ::testing::internal::CaptureStderr();
  const std::vector<std::string> bodies = {R"({"attempt_id":"1.1","state":"pwned"})",
                                           R"({"attempt_id":"1.1","state":""})",
                                           R"({"attempt_id":"1.1","state":5})"};
  for (const std::string& body : bodies) Send(*b_, ++b_seq_, proto::kTaskStatus, body);
  WaitFor(
      [&] {
        std::lock_guard lock(b_->mu);
        return b_->acked >= b_seq_;
      },
      "b's hostile reports to be acked");
  const std::string log = ::testing::internal::GetCapturedStderr();
  for (int64_t seq = b_seq_ - 2; seq <= b_seq_; ++seq) {
    EXPECT_THAT(log, HasSubstr("rejected message " + std::to_string(seq) + " (task_status)"))
        << log;
  }
  EXPECT_THAT(log, HasSubstr(R"(body.state: must be one of starting, running, exited, failed, )"
                             R"(lost, vacated, refused, not "pwned")"));
  EXPECT_THAT(log, HasSubstr(R"(not "")"));
  EXPECT_THAT(log, HasSubstr("body.state: must be a string"));
  EXPECT_FALSE(b_->closed);

  const json after = Json(Call("GET", "/v1/jobs/1", alice_));
  EXPECT_EQ(after["state"], "running") << after.dump();
  EXPECT_EQ(after["attempts"], 1);
  EXPECT_EQ(after["attempt_list"], before["attempt_list"]);
  EXPECT_EQ(after["reason"], before["reason"]);
  FinishJobOnB();  // later messages on the same channel still apply
}

TEST_F(AgentGuardTest, AgentsReadAndPostOnlyTheirOwnNodesBlobs) {
  testing::Upload inputs = testing::MakeUpload({"alice's data"});
  ASSERT_EQ(Call("POST", "/v1/blobs/chunks", alice_, inputs.Records(),
                 std::string(blob::kChunkRecordsContentType))
                .status,
            200);
  ASSERT_EQ(Call("PUT", "/v1/blobs/manifests/" + inputs.id, alice_, inputs.manifest).status, 201);
  StartJobOnB(inputs.id);
  auto a = Join(agent_, HelloOf("a", "a-gpu0"));
  const std::string fetch_body = json{{"chunks", inputs.ChunkIds()}}.dump();

  // b restores its job's inputs; a may not read them.
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + inputs.id, b_token_).status, 200);
  EXPECT_EQ(Call("POST", "/v1/blobs/chunks/fetch", b_token_, fetch_body).status, 200);
  auto manifest = Call("GET", "/v1/blobs/manifests/" + inputs.id, agent_);
  EXPECT_EQ(manifest.status, 403) << manifest.body;
  EXPECT_THAT(ErrorMessage(manifest), HasSubstr("belongs to no job running on this node"));
  EXPECT_EQ(Call("POST", "/v1/blobs/chunks/fetch", agent_, fetch_body).status, 403);

  // b checkpoints; a cannot upload for b's attempt, and posts a checkpoint
  // for it of a tree a member uploaded.
  testing::Upload ckpt = testing::MakeUpload({"step 100"});
  testing::Upload forged = testing::MakeUpload({"forged weights"});
  auto a_upload = Call("POST", "/v1/blobs/chunks?attempt=1.1", agent_, forged.Records(),
                       std::string(blob::kChunkRecordsContentType));
  EXPECT_EQ(a_upload.status, 403) << a_upload.body;
  EXPECT_THAT(ErrorMessage(a_upload), HasSubstr("runs on another node"));
  for (const auto& [u, token, query] : {std::tuple{ckpt, b_token_, std::string("?attempt=1.1")},
                                        std::tuple{forged, alice_, std::string()}}) {
    ASSERT_EQ(Call("POST", "/v1/blobs/chunks" + query, token, u.Records(),
                   std::string(blob::kChunkRecordsContentType))
                  .status,
              200);
    ASSERT_EQ(Call("PUT", "/v1/blobs/manifests/" + u.id + query, token, u.manifest).status, 201);
  }
  EXPECT_EQ(PostCheckpoint(1, "1.1", ckpt.id, b_token_).status, 201);
  auto post = PostCheckpoint(1, "1.1", forged.id, agent_);
  EXPECT_EQ(post.status, 403);
  EXPECT_THAT(ErrorMessage(post), HasSubstr("does not run on node a"));
  json list = Json(Call("GET", "/v1/jobs/1/checkpoints", alice_));
  ASSERT_EQ(list["checkpoints"].size(), 1u);
  EXPECT_EQ(list["checkpoints"][0]["manifest"], ckpt.id);
  // b reads its job's checkpoint (a restore); a does not.
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + ckpt.id, b_token_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + ckpt.id, agent_).status, 403);

  EXPECT_EQ(Refusals("a", "agent.blob_read").size(), 3u);
  EXPECT_EQ(Refusals("a", "agent.upload").size(), 1u);
  auto posted = Refusals("a", "agent.checkpoint");
  ASSERT_EQ(posted.size(), 1u);
  EXPECT_EQ(posted[0]["target"], "1.1");
  EXPECT_TRUE(Refusals("b", "agent.blob_read").empty());
  FinishJobOnB();
  // Once the job has ended, b reads its blobs no more either.
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + inputs.id, b_token_).status, 403);
}

TEST_F(AgentGuardTest, AStageOrderLetsItsNodeReadTheCheckpointForAWhile) {
  testing::Upload ckpt = testing::MakeUpload({"staged"});
  ASSERT_EQ(Call("POST", "/v1/blobs/chunks", alice_, ckpt.Records(),
                 std::string(blob::kChunkRecordsContentType))
                .status,
            200);
  ASSERT_EQ(Call("PUT", "/v1/blobs/manifests/" + ckpt.id, alice_, ckpt.manifest).status, 201);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + ckpt.id, agent_).status, 403);
  OnLoop([&] {
    agent_blobs_->GrantStage("a", ckpt.id);
    return 0;
  });
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + ckpt.id, agent_).status, 200);
  EXPECT_EQ(Call("POST", "/v1/blobs/chunks/fetch", agent_, json{{"chunks", ckpt.ChunkIds()}}.dump())
                .status,
            200);
  clock_.AdvanceMs(31 * 60'000);
  EXPECT_EQ(Call("GET", "/v1/blobs/manifests/" + ckpt.id, agent_).status, 403);
}

TEST_F(AgentGuardTest, ImpossibleHardwareClaimsAreRefusedAndAudited) {
  StartJobOnB();
  // Another node's GPU.
  EXPECT_THAT(Refused(agent_, HelloOf("a", "b-gpu0")), HasSubstr("b-gpu0 is node b's GPU"));
  auto refused = Refusals("a", "agent.hello");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0]["detail"].get<std::string>(), HasSubstr("gpupool admin node revoke b"));
  // Refused nodes may not come straight back.
  auto again = Connect(agent_);
  EXPECT_FALSE(again->opened);

  proto::Hello many = HelloOf("c", "c-gpu0");
  for (int i = 1; i < 128; ++i)
    many.gpus.push_back({i, "c-gpu" + std::to_string(i), "A100", 81920, 8, 0, true});
  EXPECT_THAT(Refused(Enroll("c"), many), HasSubstr("128 GPUs on one node"));
  proto::Hello huge = HelloOf("d", "d-gpu0");
  huge.gpus[0].memory_mib = int64_t{1} << 39;
  EXPECT_THAT(Refused(Enroll("d"), huge), HasSubstr("MiB on one GPU"));
  proto::Hello twice = HelloOf("e", "e-gpu0");
  twice.gpus.push_back({1, "e-gpu0", "A100", 81920, 8, 0, true});
  EXPECT_THAT(Refused(Enroll("e"), twice), HasSubstr("listed twice"));
  for (const char* n : {"c", "d", "e"}) EXPECT_EQ(Refusals(n, "agent.hello").size(), 1u) << n;

  // None of them became a node; b still holds its GPU and runs its job.
  json nodes = Json(Call("GET", "/v1/nodes", alice_));
  ASSERT_EQ(nodes["nodes"].size(), 1u) << nodes.dump();
  EXPECT_EQ(nodes["nodes"][0]["name"], "b");
  FinishJobOnB();
}

TEST_F(AgentGuardTest, AGpuIsFreeAgainOnceItsNodeIsRevoked) {
  StartJobOnB();
  FinishJobOnB();
  EXPECT_THAT(Refused(Enroll("c"), HelloOf("c", "b-gpu0")), HasSubstr("is node b's GPU"));
  ASSERT_EQ(Call("POST", "/v1/nodes/b/revoke", admin_).status, 200);
  auto c2 = Enroll("c2");
  auto joined = Join(c2, HelloOf("c2", "b-gpu0"));
  EXPECT_TRUE(joined->Welcomed());
}

class AgentFloodTest : public AgentGuardTest {
 protected:
  AgentHubOptions HubOpts() override {
    AgentHubOptions o;
    o.channel.messages_per_s = 50;
    o.channel.message_burst = 100;
    o.channel.max_text_bytes = 64 << 10;
    o.channel.max_binary_bytes = 128 << 10;
    o.channel.text_bytes_per_s = 256 << 10;
    o.channel.text_byte_burst = 256 << 10;
    o.channel.cooldown_ms = 600'000;
    return o;
  }
};

TEST_F(AgentFloodTest, AFloodingAgentIsCutOffAuditedAndKeptOutWhileOthersAreServed) {
  StartJobOnB();
  auto a = Join(agent_, HelloOf("a", "a-gpu0"));
  // Thousands of messages as fast as the socket takes them.
  const std::string heartbeat =
      proto::EncodeEnvelope({proto::kProtocolVersion, 0, 0, std::string(proto::kHeartbeat),
                             proto::Encode(proto::Heartbeat{})});
  OnLoop([&] {
    for (int i = 0; i < 5000 && a->conn; ++i) a->conn->Send(heartbeat);
    return 0;
  });
  WaitFor([&] { return a->closed; }, "the flooding agent to be cut off");
  EXPECT_THAT(a->close_reason, HasSubstr("flooding: more than 50 messages a second"));
  auto refused = Refusals("a", "agent.flood");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0]["detail"].get<std::string>(), HasSubstr("flooding"));
  // It is kept out for the cooldown; users and b are served meanwhile.
  EXPECT_FALSE(Connect(agent_)->opened);
  EXPECT_EQ(Call("GET", "/v1/nodes", alice_).status, 200);
  FinishJobOnB();
}

TEST_F(AgentFloodTest, HugeMessagesAreRefusedAndAudited) {
  // Over the channel's limit for one JSON message, and over what the
  // connection reads at all.
  for (const auto& [node, bytes] : {std::pair{"c", 100 << 10}, std::pair{"d", 1 << 20}}) {
    auto agent = Join(Enroll(node), HelloOf(node, std::string(node) + "-gpu0"));
    proto::LogChunk chunk;
    chunk.attempt_id = "9.1";
    chunk.lines.push_back({0, "stdout", 1, std::string(bytes, 'x')});
    Send(*agent, 1, proto::kLogs, proto::Encode(chunk));
    WaitFor([&] { return agent->closed; }, std::string("node ") + node + " to be cut off");
    // The one the server read says why; the other is cut off while it is
    // read (WebSocket close code 1009), and the audit log says why.
    if (std::string(node) == "c") {
      EXPECT_THAT(agent->close_reason,
                  HasSubstr("bytes is over the agent channel's limit of 65536"));
    }
    auto refused = Refusals(node, "agent.flood");
    ASSERT_EQ(refused.size(), 1u) << node;
    EXPECT_THAT(refused[0]["detail"].get<std::string>(),
                std::string(node) == "c" ? HasSubstr("over the agent channel's limit of 65536")
                                         : HasSubstr("message too big: over the limit of 131072"));
  }
}

TEST_F(AgentFloodTest, ABusyHonestAgentIsPacedNotCutOff) {
  StartJobOnB();
  // 1.2 MiB of output in 60 KiB messages: almost five times the byte budget's
  // burst.
  const std::string line(60 << 10, 'o');
  for (int i = 0; i < 20; ++i) {
    proto::LogChunk chunk;
    chunk.attempt_id = "1.1";
    chunk.lines.push_back({static_cast<int64_t>(i) * (60 << 10), "stdout", 1, line});
    Send(*b_, ++b_seq_, proto::kLogs, proto::Encode(chunk));
  }
  WaitFor(
      [&] {
        std::lock_guard lock(b_->mu);
        return b_->acked >= b_seq_ || b_->closed;
      },
      "b's output to be applied");
  EXPECT_FALSE(b_->closed) << b_->close_reason;
  EXPECT_TRUE(Refusals("b", "agent.flood").empty());
  FinishJobOnB();
}

class AgentHttpFloodTest : public AgentGuardTest {
 protected:
  ApiOptions ApiOpts() override {
    ApiOptions o = AgentGuardTest::ApiOpts();
    o.per_agent = {5, 10};
    return o;
  }
};

TEST_F(AgentHttpFloodTest, AnAgentsRequestsHaveABucketOfTheirOwn) {
  const std::string body = json{{"chunks", json::array()}}.dump();
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    auto r = Call("POST", "/v1/blobs/missing", agent_, body);
    if (r.status == 429) {
      ++refused;
      EXPECT_THAT(ErrorMessage(r), HasSubstr("more than 10 requests in a burst"));
      EXPECT_FALSE(r.headers["retry-after"].empty());
    } else {
      EXPECT_EQ(r.status, 200) << r.body;
    }
  }
  EXPECT_GE(refused, 20);
  // Another agent, and users, are not held back by it.
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", Enroll("b"), body).status, 200);
  EXPECT_EQ(Call("GET", "/v1/jobs", alice_).status, 200);
}

}  // namespace
}  // namespace gpupool::server
