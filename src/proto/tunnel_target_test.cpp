// TunnelTarget: the open frame's JSON, both ways, and what the agent refuses.
#include "proto/tunnel_target.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::proto {
namespace {

using ::testing::HasSubstr;

TunnelTarget Exec() {
  TunnelTarget t;
  t.attempt_id = "42.1";
  t.kind = TunnelTarget::Kind::kExec;
  t.argv = {"bash", "-l"};
  t.tty = true;
  t.rows = 24;
  t.cols = 80;
  t.term = "xterm-256color";
  return t;
}

TEST(TunnelTarget, RoundTripsEachKind) {
  TunnelTarget tcp;
  tcp.attempt_id = "7.2";
  tcp.port = 8888;
  TunnelTarget jupyter;
  jupyter.attempt_id = "7.2";
  jupyter.kind = TunnelTarget::Kind::kJupyter;
  for (const TunnelTarget& t : {tcp, jupyter, Exec()}) {
    auto back = DecodeTunnelTarget(EncodeTunnelTarget(t));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(EncodeTunnelTarget(tcp), R"({"attempt":"7.2","kind":"tcp","port":8888})");
  EXPECT_EQ(EncodeTunnelTarget(jupyter), R"({"attempt":"7.2","kind":"jupyter"})");
}

TEST(TunnelTarget, ExecDefaults) {
  auto t = DecodeTunnelTarget(R"({"attempt":"1.1","kind":"exec","argv":["id","-u"]})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->tty);
  EXPECT_EQ(t->rows, 0);
  EXPECT_EQ(t->term, "");
  EXPECT_EQ(t->argv, (std::vector<std::string>{"id", "-u"}));
}

void ExpectError(const std::string& text, const std::string& what) {
  auto t = DecodeTunnelTarget(text);
  ASSERT_FALSE(t.ok()) << text;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(what)) << text;
}

TEST(TunnelTarget, RejectsBadInputNamingTheField) {
  ExpectError("not json", "tunnel target: invalid JSON");
  ExpectError(R"({"kind":"tcp","port":1})", "tunnel target.attempt: is required");
  ExpectError(R"({"attempt":"x","kind":"tcp","port":1})", "tunnel target.attempt:");
  ExpectError(R"({"attempt":"1.1","kind":"ssh"})",
              "tunnel target.kind: must be tcp, jupyter or exec");
  ExpectError(R"({"attempt":"1.1","kind":"tcp"})", "tunnel target.port: is required");
  ExpectError(R"({"attempt":"1.1","kind":"tcp","port":0})",
              "tunnel target.port: must be from 1 to 65535");
  ExpectError(R"({"attempt":"1.1","kind":"tcp","port":65536})",
              "tunnel target.port: must be from 1 to 65535");
  ExpectError(R"({"attempt":"1.1","kind":"tcp","port":"80"})",
              "tunnel target.port: must be an integer");
  ExpectError(R"({"attempt":"1.1","kind":"jupyter","port":80})",
              "tunnel target.port: unknown field");
  ExpectError(R"({"attempt":"1.1","kind":"exec"})", "tunnel target.argv: is required");
  ExpectError(R"({"attempt":"1.1","kind":"exec","argv":[]})",
              "tunnel target.argv: must name a command");
  ExpectError(R"({"attempt":"1.1","kind":"exec","argv":[""]})",
              "tunnel target.argv[0]: must not be empty");
  ExpectError(R"({"attempt":"1.1","kind":"exec","argv":["a"],"rows":10001})",
              "tunnel target.rows: must be from 0 to 10000");
  ExpectError(R"({"attempt":"1.1","kind":"exec","argv":["a"],"cols":-1})",
              "tunnel target.cols: must be from 0 to 10000");
  ExpectError(R"({"attempt":"1.1","kind":"exec","argv":["a"],"term":"x;rm -rf"})",
              "tunnel target.term:");
  ExpectError(R"({"attempt":"1.1","kind":"exec","argv":["a"],"port":1})",
              "tunnel target.port: unknown field");
}

TEST(TunnelTarget, BoundsTheCommandLine) {
  TunnelTarget t = Exec();
  t.argv.assign(kMaxExecArgs + 1, "x");
  ExpectError(EncodeTunnelTarget(t), "tunnel target.argv: at most 1024");
  t.argv.assign(2, std::string(40 * 1024, 'a'));
  ExpectError(EncodeTunnelTarget(t), "tunnel target.argv: must be at most 65536 bytes");
  t.argv = {"a", std::string("b\0c", 3)};
  ExpectError(EncodeTunnelTarget(t), "tunnel target.argv[1]: must not contain a NUL byte");
}

}  // namespace
}  // namespace gpupool::proto
