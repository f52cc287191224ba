// TunnelMux: two muxes wired back to back, as the server and an agent.
#include "proto/tunnel_mux.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gpupool::proto {
namespace {

using ::testing::HasSubstr;

// One side: a mux and what its application received.
struct Side {
  explicit Side(bool server, TunnelMuxOptions o = {}) {
    o.opens_odd = server;
    TunnelMux::Events e;
    e.opened = [this](uint32_t s, const std::string& target) { opened[s] = target; };
    e.data = [this](uint32_t s, std::string_view d) {
      received[s].append(d);
      if (consume) mux->Consumed(s, d.size());
    };
    e.closed = [this](uint32_t s, const std::string& reason) { closed[s] = reason; };
    mux = std::make_unique<TunnelMux>(o, e);
  }
  std::unique_ptr<TunnelMux> mux;
  bool consume = true;  // the application uses what arrives at once
  std::map<uint32_t, std::string> opened, received, closed;
};

// Moves frames both ways (through their encoding) until neither side has
// any, or `limit` frames went; returns the frames sent by `a`.
std::vector<TunnelFrame> Pump(Side& a, Side& b, int limit = 1'000'000) {
  std::vector<TunnelFrame> from_a;
  for (int n = 0; n < limit; ++n) {
    auto fa = a.mux->NextFrame();
    auto fb = b.mux->NextFrame();
    if (!fa && !fb) break;
    if (fa) {
      from_a.push_back(*fa);
      auto decoded = DecodeTunnelFrame(EncodeTunnelFrame(*fa));
      EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_TRUE(b.mux->OnFrame(*decoded).ok());
    }
    if (fb) {
      auto decoded = DecodeTunnelFrame(EncodeTunnelFrame(*fb));
      EXPECT_TRUE(decoded.ok());
      EXPECT_TRUE(a.mux->OnFrame(*decoded).ok());
    }
  }
  return from_a;
}

std::string Bytes(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 31);
  return s;
}

TEST(TunnelFrameTest, RoundTripsAndRejectsBadFrames) {
  for (const TunnelFrame& f : {TunnelFrame{TunnelFrameKind::kOpen, 7, "tcp:8888", 65536},
                               TunnelFrame{TunnelFrameKind::kWindow, 0xfffffffe, "", 0xffffffff},
                               TunnelFrame{TunnelFrameKind::kData, 2, std::string("a\0b", 3), 0},
                               TunnelFrame{TunnelFrameKind::kClose, 9, "session ended", 0}}) {
    auto back = DecodeTunnelFrame(EncodeTunnelFrame(f));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, f);
  }
  EXPECT_THAT(DecodeTunnelFrame("\x03\x00").status().message(), HasSubstr("shorter than"));
  EXPECT_THAT(DecodeTunnelFrame(std::string("\x09\x00\x00\x00\x01", 5)).status().message(),
              HasSubstr("unknown kind 9"));
  EXPECT_THAT(DecodeTunnelFrame(std::string("\x03\x00\x00\x00\x00", 5)).status().message(),
              HasSubstr("stream 0"));
  EXPECT_THAT(DecodeTunnelFrame(std::string("\x02\x00\x00\x00\x01\x00", 6)).status().message(),
              HasSubstr("credit is cut short"));
}

TEST(TunnelMuxTest, BytesArriveInOrderBothWaysAndCloseAfterThem) {
  Side server(true), agent(false);
  uint32_t id = server.mux->Open("tcp:8888");
  EXPECT_EQ(id % 2, 1u);
  std::string up = Bytes(3 << 20, 'a'), down = Bytes(700'000, 'z');
  size_t up_at = 0, down_at = 0;
  for (int round = 0; round < 10'000 && (up_at < up.size() || down_at < down.size()); ++round) {
    up_at += server.mux->Write(id, std::string_view(up).substr(up_at));
    if (agent.opened.count(id))
      down_at += agent.mux->Write(id, std::string_view(down).substr(down_at));
    Pump(server, agent, 64);
  }
  server.mux->Close(id);
  agent.mux->Close(id, "");
  Pump(server, agent);
  EXPECT_EQ(agent.opened[id], "tcp:8888");
  EXPECT_EQ(agent.received[id], up);
  EXPECT_EQ(server.received[id], down);
  EXPECT_TRUE(agent.closed.count(id) && server.closed.count(id));
  EXPECT_EQ(server.mux->streams(), 0u);  // both closes sent: forgotten
  EXPECT_EQ(agent.mux->streams(), 0u);
}

TEST(TunnelMuxTest, ASlowReaderHoldsAtMostItsWindowAndTheWriterIsHeldBack) {
  TunnelMuxOptions o;
  o.window = 64 * 1024;
  o.max_frame = 16 * 1024;
  o.max_buffered = 256 * 1024;
  Side server(true, o), agent(false, o);
  agent.consume = false;  // the reader does not keep up
  uint32_t id = server.mux->Open("tcp:9000");
  Pump(server, agent);
  std::string big = Bytes(1 << 20, 'q');
  EXPECT_EQ(server.mux->Write(id, big), 256u * 1024);  // the writer's buffer is bounded
  Pump(server, agent);
  EXPECT_EQ(agent.received[id].size(), 64u * 1024);  // exactly one window in flight
  EXPECT_EQ(server.mux->buffered(id), 192u * 1024);
  EXPECT_FALSE(server.mux->NextFrame().has_value());  // no credit: nothing to send
  // The reader catches up: half a window granted back at a time.
  agent.mux->Consumed(id, 16 * 1024);
  EXPECT_FALSE(agent.mux->NextFrame().has_value());  // less than half a window: no grant yet
  agent.mux->Consumed(id, 16 * 1024);
  Pump(server, agent);
  EXPECT_EQ(agent.received[id].size(), 96u * 1024);
  EXPECT_EQ(agent.received[id], big.substr(0, 96 * 1024));
}

TEST(TunnelMuxTest, ABusyStreamDelaysAnotherByAtMostAFrame) {
  TunnelMuxOptions o;
  o.window = 1 << 20;
  o.max_frame = 8 * 1024;
  Side server(true, o), agent(false, o);
  uint32_t busy = server.mux->Open("tcp:1");
  uint32_t quiet = server.mux->Open("tcp:2");
  Pump(server, agent);  // opens and grants
  ASSERT_EQ(server.mux->Write(busy, Bytes(1 << 20, 'b')), 1u << 20);
  // The busy stream gets going; then the quiet one has 100 bytes to send.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(agent.mux->OnFrame(*server.mux->NextFrame()).ok());
  ASSERT_EQ(server.mux->Write(quiet, "hello"), 5u);
  std::vector<uint32_t> order;
  for (int i = 0; i < 3; ++i) {
    auto f = server.mux->NextFrame();
    ASSERT_TRUE(f.has_value());
    order.push_back(f->stream);
    ASSERT_TRUE(agent.mux->OnFrame(*f).ok());
  }
  EXPECT_NE(std::find(order.begin(), order.begin() + 2, quiet), order.begin() + 2)
      << "the quiet stream waited more than one of the busy stream's frames";
  EXPECT_EQ(agent.received[quiet], "hello");
}

TEST(TunnelMuxTest, ProtocolViolationsAreRefused) {
  Side server(true), agent(false);
  TunnelMuxOptions small;
  small.window = 10;
  small.opens_odd = false;
  TunnelMux strict(small, {});
  // Data on a stream nobody opened; an open with the receiver's own parity.
  EXPECT_THAT(strict.OnFrame({TunnelFrameKind::kData, 3, "x", 0}).message(),
              HasSubstr("data on no open stream"));
  EXPECT_THAT(strict.OnFrame({TunnelFrameKind::kOpen, 4, "tcp:1", 10}).message(),
              HasSubstr("one of our ids"));
  ASSERT_TRUE(strict.OnFrame({TunnelFrameKind::kOpen, 5, "tcp:1", 10}).ok());
  EXPECT_THAT(strict.OnFrame({TunnelFrameKind::kOpen, 5, "tcp:1", 10}).message(),
              HasSubstr("opened twice"));
  // More than the window granted.
  EXPECT_THAT(strict.OnFrame({TunnelFrameKind::kData, 5, std::string(11, 'x'), 0}).message(),
              HasSubstr("past the window of 10"));
  ASSERT_TRUE(strict.OnFrame({TunnelFrameKind::kData, 5, std::string(10, 'x'), 0}).ok());
  ASSERT_TRUE(strict.OnFrame({TunnelFrameKind::kClose, 5, "", 0}).ok());
  EXPECT_THAT(strict.OnFrame({TunnelFrameKind::kData, 5, "", 0}).message(),
              HasSubstr("after its close"));
  // A late grant for a forgotten stream is harmless.
  EXPECT_TRUE(strict.OnFrame({TunnelFrameKind::kWindow, 77, "", 5}).ok());
}

TEST(TunnelMuxTest, NoDataBeforeThePeerGrantsAWindow) {
  Side server(true), agent(false);
  uint32_t id = server.mux->Open("tcp:8888");
  ASSERT_EQ(server.mux->Write(id, "early"), 5u);
  auto open = server.mux->NextFrame();
  ASSERT_TRUE(open && open->kind == TunnelFrameKind::kOpen);
  EXPECT_FALSE(server.mux->NextFrame().has_value());  // waits for the acceptor's grant
  ASSERT_TRUE(agent.mux->OnFrame(*open).ok());
  Pump(server, agent);
  EXPECT_EQ(agent.received[id], "early");
}

}  // namespace
}  // namespace gpupool::proto
