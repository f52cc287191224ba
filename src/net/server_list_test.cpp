// A pool's several servers as one address (net/server_list.h): real HTTP
// servers for the leader and a standby, a closed port for a dead server.
#include "net/server_list.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "net/event_loop.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/net_test_util.h"

namespace gpupool::net {
namespace {

using test::OnLoop;

// A port nothing listens on.
std::string DeadUrl() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

class ServerListTest : public ::testing::Test {
 protected:
  // The leader answers "leader METHOD PATH"; the standby redirects to
  // `redirect_to` (the leader unless a test says otherwise) or, with no
  // leader known, answers 503.
  void SetUp() override {
    HttpHandlers leader;
    leader.on_request = [this](HttpRequest req, Responder respond) {
      ++leader_calls_;
      HttpResponse r;
      r.body = "leader " + req.method + " " + req.target + " " + req.Header("authorization");
      respond(std::move(r));
    };
    HttpHandlers standby;
    standby.on_request = [this](HttpRequest req, Responder respond) {
      ++standby_calls_;
      HttpResponse r;
      if (no_leader_) {
        r.status = 503;
      } else {
        r.status = 307;
        r.headers["Location"] = redirect_to_ + req.target;
      }
      respond(std::move(r));
    };
    auto l = HttpServer::Start(loop_, {}, leader);
    auto s = HttpServer::Start(loop_, {}, standby);
    ASSERT_TRUE(l.ok() && s.ok());
    leader_ = std::move(*l);
    standby_ = std::move(*s);
    leader_url_ = "http://127.0.0.1:" + std::to_string(leader_->port());
    standby_url_ = "http://127.0.0.1:" + std::to_string(standby_->port());
    redirect_to_ = leader_url_;
    thread_ = std::thread([this] { loop_.Run(); });
  }
  void TearDown() override {
    OnLoop(loop_, [this] {
      leader_.reset();
      standby_.reset();
    });
    loop_.Stop();
    thread_.join();
  }
  HttpCall Call(const std::string& servers, const std::string& method = "GET") {
    HttpCall c;
    c.base_url = servers;
    c.method = method;
    c.target = "/v1/jobs?x=1";
    c.headers["Authorization"] = "Bearer secret";
    c.timeout_ms = 10'000;
    return c;
  }

  EventLoop loop_;
  std::unique_ptr<HttpServer> leader_, standby_;
  std::string leader_url_, standby_url_, redirect_to_;
  std::atomic<int> leader_calls_{0}, standby_calls_{0};
  std::atomic<bool> no_leader_{false};
  std::thread thread_;
};

TEST(SplitServerListTest, TakesCommaSeparatedUrls) {
  EXPECT_EQ(SplitServerList("https://a:1, https://b:2/,,https://c:3"),
            (std::vector<std::string>{"https://a:1", "https://b:2", "https://c:3"}));
  EXPECT_EQ(SplitServerList("https://a:1"), (std::vector<std::string>{"https://a:1"}));
  EXPECT_TRUE(SplitServerList(" , ").empty());
}

TEST_F(ServerListTest, ADeadServerIsPassedOverAndTheOneThatAnsweredIsTriedFirstNextTime) {
  const std::string list = DeadUrl() + "," + leader_url_;
  for (const char* method : {"GET", "POST"}) {  // refused: nothing was sent, so POST moves on too
    auto r = Fetch(Call(list, method));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, std::string("leader ") + method + " /v1/jobs?x=1 Bearer secret");
  }
  KeepAliveClient keep;
  auto r = keep.Fetch(Call(list));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(leader_calls_.load(), 3);
}

TEST_F(ServerListTest, AStandbysRedirectToAServerOfTheListIsFollowed) {
  auto r = Fetch(Call(standby_url_ + "," + leader_url_, "POST"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "leader POST /v1/jobs?x=1 Bearer secret");
  EXPECT_EQ(standby_calls_.load(), 1);
}

TEST_F(ServerListTest, ARedirectOutsideTheListIsNotFollowedSoTheTokenStaysHome) {
  redirect_to_ = "http://attacker.example:80";
  auto r = Fetch(Call(standby_url_ + "," + DeadUrl()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 307);
  EXPECT_EQ(leader_calls_.load(), 0);
}

TEST_F(ServerListTest, AStandbyWithoutALeaderSendsTheCallToTheNextServer) {
  no_leader_ = true;
  auto r = Fetch(Call(standby_url_ + "," + leader_url_));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(standby_calls_.load(), 1);
  EXPECT_EQ(leader_calls_.load(), 1);
}

TEST_F(ServerListTest, WhenNoServerAnswersTheLastErrorSaysSo) {
  auto r = Fetch(Call(DeadUrl() + "," + DeadUrl()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot connect"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::net
