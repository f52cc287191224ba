// An agent that does not keep to the output limit, on the real agent
// channel of a real HTTP server over SQLite (server/api_testing.h): it
// floods the logs of its attempt far past the limit, in both message forms,
// and resends what it sent. What the API then serves is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "model/job_output.h"
#include "proto/messages.h"
#include "server/api_testing.h"

namespace gpupool::server {
namespace {

constexpr int64_t kLimit = 64 * 1024;

// Says hello for node "a" with attempt 1.1 running; records the server's acks.
class HostileAgent : public net::WsHandler {
 public:
  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    conn_ = std::move(conn);
    proto::Hello h = NodeAHello();
    proto::TaskReport running;
    running.attempt_id = "1.1";
    running.state = proto::TaskState::kRunning;
    h.tasks.push_back(running);
    conn_->Send(proto::EncodeEnvelope(
        {proto::kProtocolVersion, 0, 0, std::string(proto::kHello), proto::Encode(h)}));
  }
  void OnMessage(std::string text) override {
    auto env = proto::DecodeEnvelope(text);
    if (!env.ok()) return;
    if (env->type == proto::kWelcome) welcomed = true;
    if (env->ack > acked) acked = env->ack;
  }
  void OnBinary(std::string) override {}
  void OnClose(std::string reason) override {
    close_reason = std::move(reason);
    closed = true;
  }
  // On the loop: one reliable message.
  void Send(const std::string& type, const std::string& body) {
    conn_->Send(proto::EncodeEnvelope({proto::kProtocolVersion, ++seq, 0, type, body}));
  }

  std::atomic<bool> welcomed{false}, closed{false};
  std::atomic<int64_t> acked{0};
  int64_t seq = 0;
  std::string close_reason;

 private:
  std::shared_ptr<net::WsConnection> conn_;
};

class LogFloodTest : public ApiTestServer {
 protected:
  PoolOptions Options() override {
    PoolOptions o;
    o.logs.max_job_output_bytes = kLimit;
    return o;
  }
  template <typename F>
  void WaitFor(F pred, int timeout_ms = 60'000) {
    for (int i = 0; i < timeout_ms / 5 && !pred(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(pred()) << "timed out";
  }
};

TEST_F(LogFloodTest, AnAgentIgnoringTheLimitGetsNoMoreThanTheLimitStored) {
  PlaceJob();
  auto agent = std::make_shared<HostileAgent>();
  OnLoop([&] {
    net::WsClientOptions o;
    o.url = "ws://127.0.0.1:" + std::to_string(http_->port()) + "/v1/agent/connect";
    o.headers["Authorization"] = "Bearer " + agent_;
    net::WsConnect(loop_, o, agent);
    return 0;
  });
  WaitFor([&] { return agent->welcomed.load(); });
  // 40 messages of 500 lines of 100 bytes (2 MB, 30 times the limit), half
  // of them compact, and every one sent twice (a resend under a new seq).
  std::vector<std::string> bodies;
  int64_t offset = 0;
  for (int m = 0; m < 40; ++m) {
    proto::LogChunk c;
    c.attempt_id = "1.1";
    c.compact = m % 2 == 0;
    for (int i = 0; i < 500; ++i) {
      c.lines.push_back({offset, i % 3 == 0 ? "stderr" : "stdout", 1000 + offset,
                         std::string(100, static_cast<char>('a' + m % 26))});
      offset += 118;
    }
    bodies.push_back(proto::Encode(c));
  }
  int64_t last = OnLoop([&] {
    for (const std::string& b : bodies) {
      agent->Send(std::string(proto::kLogs), b);
      agent->Send(std::string(proto::kLogs), b);
    }
    // Its own marker, late, and events past the allowance.
    proto::LogChunk tail{"1.1", {{offset, "event", 1, OutputLimitMarker(kLimit)}}};
    for (int i = 0; i < 100; ++i) {
      tail.lines.push_back({offset + 1 + i * 2000, "event", 2, std::string(1900, 'v')});
    }
    agent->Send(std::string(proto::kLogs), proto::Encode(tail));
    return agent->seq;
  });
  WaitFor([&] { return agent->acked.load() >= last || agent->closed.load(); });
  ASSERT_FALSE(agent->closed.load()) << agent->close_reason;

  int64_t output = 0, events = 0, markers = 0, lines = 0;
  int64_t cursor = 0;
  while (true) {
    auto page = Json(Call("GET", "/v1/jobs/1/logs?after=" + std::to_string(cursor), alice_));
    ASSERT_TRUE(page.is_object()) << page.dump();
    if (page["lines"].empty()) break;
    for (const auto& l : page["lines"]) {
      std::string text = l["text"].get<std::string>();
      ++lines;
      if (l["stream"] == "event") {
        events += LogLineCost(text);
        markers += text == OutputLimitMarker(kLimit);
      } else {
        output += LogLineCost(text);
      }
    }
    cursor = page["next_cursor"].get<int64_t>();
  }
  EXPECT_EQ(markers, 1);  // the server's own, not the agent's late one again
  EXPECT_LE(output, kLimit);
  EXPECT_GT(output, kLimit - LogLineCost(std::string(100, 'a')));
  EXPECT_LE(output + events,
            kLimit + kLogEventAllowanceBytes + LogLineCost(OutputLimitMarker(kLimit)));
  auto job = Json(Call("GET", "/v1/jobs/1", alice_));
  ASSERT_EQ(job["output"]["limit_reached"].size(), 1u) << job["output"].dump();
  EXPECT_EQ(job["output"]["limit_reached"][0]["event"], OutputLimitMarker(kLimit));
  EXPECT_EQ(job["output"]["lines"], lines);
  EXPECT_LE(job["output"]["bytes"].get<int64_t>(),
            kLimit + kLogEventAllowanceBytes + LogLineCost(OutputLimitMarker(kLimit)));
  // The pool served another user meanwhile and still does.
  EXPECT_EQ(Call("GET", "/v1/jobs", bob_).status, 200);
}

}  // namespace
}  // namespace gpupool::server
