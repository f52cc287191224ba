// Tests of net/ over real sockets on 127.0.0.1. The loop runs on its own
// thread; the test thread talks to it through Post and futures, and uses the
// blocking Fetch or raw POSIX sockets as the client.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "net/event_loop.h"
#include "net/http.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/net_test_util.h"
#include "net/tcp_stream.h"
#include "net/websocket.h"

namespace gpupool::net {
namespace {

using namespace std::chrono_literals;
using test::kWait;
using test::OnLoop;
using test::RawClient;
using test::Recorder;

// ---- http.h -------------------------------------------------------------

TEST(UrlTest, Decode) {
  EXPECT_EQ(UrlDecode("a%20b%2Fc", false), "a b/c");
  EXPECT_EQ(UrlDecode("a+b", false), "a+b");
  EXPECT_EQ(UrlDecode("a+b", true), "a b");
  EXPECT_EQ(UrlDecode("%e2%82%ac", false), "\xe2\x82\xac");
  EXPECT_EQ(UrlDecode("100%", false), "100%");  // malformed escapes stay
  EXPECT_EQ(UrlDecode("%zz%4", false), "%zz%4");
  EXPECT_EQ(UrlDecode("", true), "");
}

TEST(UrlTest, EncodeRoundTrip) {
  EXPECT_EQ(UrlEncode("a b/c?d=e&f"), "a%20b%2Fc%3Fd%3De%26f");
  EXPECT_EQ(UrlEncode("safe-._~AZaz09"), "safe-._~AZaz09");
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  EXPECT_EQ(UrlDecode(UrlEncode(all), true), all);
}

TEST(UrlTest, Parse) {
  auto u = ParseUrl("http://127.0.0.1:8470");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8470);
  EXPECT_EQ(u->path, "");

  u = ParseUrl("ws://pool.example.org/v1/agent");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "ws");
  EXPECT_EQ(u->host, "pool.example.org");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/v1/agent");

  u = ParseUrl("http://[::1]:9000/prefix/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  EXPECT_EQ(u->path, "/prefix");

  u = ParseUrl("HTTP://[::1]/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "");

  u = ParseUrl("https://pool.example.org");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->port, 443);
  u = ParseUrl("WSS://127.0.0.1:8471/v1/agent");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "wss");
  EXPECT_EQ(u->port, 8471);
  EXPECT_EQ(u->path, "/v1/agent");
  EXPECT_EQ(ParseUrl("wss://h")->port, 443);

  EXPECT_FALSE(ParseUrl("127.0.0.1:8470"));
  EXPECT_FALSE(ParseUrl("httpss://x"));
  EXPECT_FALSE(ParseUrl("ftp://x"));
  EXPECT_FALSE(ParseUrl("http://"));
  EXPECT_FALSE(ParseUrl("http://host:"));
  EXPECT_FALSE(ParseUrl("http://host:0"));
  EXPECT_FALSE(ParseUrl("http://host:70000"));
  EXPECT_FALSE(ParseUrl("http://host:12ab"));
  EXPECT_FALSE(ParseUrl("http://[::1"));
  EXPECT_FALSE(ParseUrl("http://user@host"));
}

TEST(UrlTest, SplitPath) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(SplitPath("/v1/jobs/42/logs"), (V{"v1", "jobs", "42", "logs"}));
  EXPECT_EQ(SplitPath("//v1///jobs/"), (V{"v1", "jobs"}));
  EXPECT_EQ(SplitPath("/"), V{});
  EXPECT_EQ(SplitPath(""), V{});
}

TEST(HttpRequestTest, Header) {
  HttpRequest r;
  r.headers["authorization"] = "Bearer x";
  EXPECT_EQ(r.Header("authorization"), "Bearer x");
  EXPECT_EQ(r.Header("x-missing"), "");
}

// ---- EventLoop ----------------------------------------------------------

TEST(EventLoopTest, TimersFireInOrderAndCancelWorks) {
  EventLoop loop;
  std::vector<int> fired;
  loop.RunAfter(30, [&] { fired.push_back(3); });
  loop.RunAfter(10, [&] { fired.push_back(1); });
  auto cancelled = loop.RunAfter(20, [&] { fired.push_back(99); });
  loop.RunAfter(20, [&] { fired.push_back(2); });
  loop.Cancel(cancelled);
  loop.Cancel(12345);  // unknown ids are ignored
  loop.RunAfter(60, [&] { loop.Stop(); });
  loop.Run();
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 3}));
}

TEST(EventLoopTest, CancelFromAnEarlierCallbackSameTick) {
  EventLoop loop;
  bool second_fired = false;
  EventLoop::TimerId second = 0;
  // Both timers are due when the loop wakes; the first cancels the second.
  loop.RunAfter(0, [&] { loop.Cancel(second); });
  second = loop.RunAfter(0, [&] { second_fired = true; });
  loop.RunAfter(50, [&] { loop.Stop(); });
  loop.Run();
  EXPECT_FALSE(second_fired);
}

TEST(EventLoopTest, RunWaitsWithoutWorkUntilStop) {
  EventLoop loop;
  std::atomic<bool> returned{false};
  std::thread t([&] {
    loop.Run();
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned);  // no work, yet Run keeps going
  loop.Stop();             // from another thread
  t.join();
  EXPECT_TRUE(returned);
}

TEST(EventLoopTest, PostFromOtherThreads) {
  EventLoop loop;
  std::thread::id loop_thread;
  std::atomic<int> count{0};
  std::vector<std::thread::id> seen;
  std::thread runner([&] {
    loop_thread = std::this_thread::get_id();
    loop.Run();
  });
  constexpr int kThreads = 4, kPer = 250;
  std::vector<std::thread> posters;
  for (int i = 0; i < kThreads; ++i) {
    posters.emplace_back([&] {
      for (int j = 0; j < kPer; ++j) {
        loop.Post([&] {
          seen.push_back(std::this_thread::get_id());  // only the loop thread touches it
          if (++count == kThreads * kPer) loop.Stop();
        });
      }
    });
  }
  for (auto& t : posters) t.join();
  runner.join();
  EXPECT_EQ(count, kThreads * kPer);
  ASSERT_EQ(seen.size(), size_t{kThreads * kPer});
  for (auto id : seen) EXPECT_EQ(id, loop_thread);
}

TEST(EventLoopTest, PostOrderIsKept) {
  EventLoop loop;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) loop.Post([&, i] { order.push_back(i); });
  loop.Post([&] { loop.Stop(); });
  loop.Run();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(EventLoopTest, WatchReadableOnPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EventLoop loop;
  std::string got;
  int calls = 0;
  loop.WatchReadable(fds[0], [&] {
    ++calls;
    char buf[64];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    if (got == "hello") {
      EXPECT_EQ(write(fds[1], "x", 1), 1);  // readable again, but we stop
      loop.RunAfter(50, [&] { loop.Stop(); });
      return false;
    }
    return true;
  });
  std::thread writer([&] {
    EXPECT_EQ(write(fds[1], "hel", 3), 3);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(write(fds[1], "lo", 2), 2);
  });
  loop.Run();
  writer.join();
  EXPECT_EQ(got, "hello");
  EXPECT_GE(calls, 1);
  int calls_at_stop = calls;
  // Returning false unwatched the fd: the pending "x" is not delivered.
  loop.RunAfter(50, [&] { loop.Stop(); });
  loop.Run();
  EXPECT_EQ(calls, calls_at_stop);

  // The loop did not close the fd: it can be watched again and read.
  loop.WatchReadable(fds[0], [&] {
    char c;
    EXPECT_EQ(read(fds[0], &c, 1), 1);
    EXPECT_EQ(c, 'x');
    loop.UnwatchFd(fds[0]);
    loop.Stop();
    return true;
  });
  loop.Run();
  EXPECT_NE(fcntl(fds[0], F_GETFD), -1);
  // UnwatchFd before any event: the fd stays open and no callback runs.
  loop.WatchReadable(fds[0], [&] {
    ADD_FAILURE() << "unwatched fd reported";
    return false;
  });
  loop.UnwatchFd(fds[0]);
  EXPECT_EQ(write(fds[1], "y", 1), 1);
  loop.RunAfter(30, [&] { loop.Stop(); });
  loop.Run();
  EXPECT_NE(fcntl(fds[0], F_GETFD), -1);
  close(fds[0]);
  close(fds[1]);
}

// A socketpair end watched both ways: the write watch fires while the
// buffer has room and stops when its callback says so, and the read watch
// keeps working beside it.
TEST(EventLoopTest, WatchWritableAndReadableOnOneFd) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EventLoop loop;
  size_t written = 0;
  int write_calls = 0;
  std::string got;
  loop.WatchWritable(sv[0], [&] {
    ++write_calls;
    char block[4096] = {};
    ssize_t n;
    while ((n = write(sv[0], block, sizeof block)) > 0) written += static_cast<size_t>(n);
    // Full: the peer drains it below; a second wake-up proves the re-arm.
    return write_calls < 2;
  });
  loop.WatchReadable(sv[0], [&] {
    char buf[16];
    ssize_t n = read(sv[0], buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    if (got == "ping") loop.Stop();
    return true;
  });
  // Once the buffer is full, drain it so the write watch fires again.
  loop.RunAfter(20, [&] {
    char buf[65536];
    while (read(sv[1], buf, sizeof buf) > 0) {
    }
  });
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  loop.RunAfter(60, [&] { EXPECT_EQ(write(sv[1], "ping", 4), 4); });
  loop.RunAfter(5000, [&] { loop.Stop(); });
  loop.Run();
  EXPECT_EQ(write_calls, 2);
  EXPECT_GT(written, 4096u);
  EXPECT_EQ(got, "ping");
  loop.UnwatchFd(sv[0]);
  close(sv[0]);
  close(sv[1]);
}

// ---- HTTP server fixture ----------------------------------------------

class ServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpHandlers handlers, HttpServerOptions options = {}) {
    auto server = HttpServer::Start(loop_, options, std::move(handlers));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    base_url_ = "http://127.0.0.1:" + std::to_string(server_->port());
    thread_ = std::thread([this] { loop_.Run(); });
  }

  void TearDown() override {
    if (thread_.joinable()) {
      OnLoop(loop_, [this] { server_.reset(); });
      loop_.Stop();
      thread_.join();
    }
  }

  HttpCall Call(std::string method, std::string target, std::string body = "") {
    HttpCall c;
    c.base_url = base_url_;
    c.method = std::move(method);
    c.target = std::move(target);
    c.body = std::move(body);
    c.timeout_ms = 10'000;
    return c;
  }

  EventLoop loop_;
  std::unique_ptr<HttpServer> server_;
  std::string base_url_;
  std::thread thread_;
};

TEST_F(ServerTest, GetAndPostRoundTrip) {
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.headers["X-Echo-Method"] = req.method;
    r.body = req.method + " " + req.path + " q=" + req.query["q"] + " n=" + req.query["n"] +
             " auth=" + req.Header("authorization") + " ct=" + req.Header("content-type") +
             " body=" + req.body +
             " peer_ok=" + (req.peer.rfind("127.0.0.1:", 0) == 0 ? "yes" : "no") +
             " target=" + req.target;
    respond(std::move(r));
  };
  StartServer(std::move(h));

  auto call = Call("GET", "/v1/a%20b?q=x+y%26z&n=1");
  call.headers["Authorization"] = "Bearer t0k";
  auto res = Fetch(call);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->content_type, "application/json");
  EXPECT_EQ(res->headers["x-echo-method"], "GET");
  EXPECT_EQ(res->headers["server"], "gpupool");
  EXPECT_EQ(res->body,
            "GET /v1/a b q=x y&z n=1 auth=Bearer t0k ct= body= peer_ok=yes "
            "target=/v1/a%20b?q=x+y%26z&n=1");

  res = Fetch(Call("POST", "/v1/jobs", R"({"name":"j"})"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->headers["x-echo-method"], "POST");
  EXPECT_EQ(res->body,
            R"(POST /v1/jobs q= n= auth= ct=application/json body={"name":"j"} peer_ok=yes )"
            "target=/v1/jobs");
}

TEST_F(ServerTest, StatusCodesAndLargeBodies) {
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    if (req.path == "/missing") {
      r.status = 404;
      r.body = R"({"error":"no such thing"})";
    } else if (req.path == "/empty") {
      r.status = 204;
    } else {
      r.content_type = "text/plain";
      r.body = req.body + req.body;
    }
    respond(std::move(r));
  };
  StartServer(std::move(h));
  auto res = Fetch(Call("GET", "/missing"));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->body, R"({"error":"no such thing"})");
  res = Fetch(Call("DELETE", "/empty"));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 204);
  EXPECT_EQ(res->body, "");
  std::string big(3 << 20, 'z');
  big[12345] = 'a';
  res = Fetch(Call("PUT", "/big", big));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->content_type, "text/plain");
  EXPECT_EQ(res->body, big + big);
}

TEST_F(ServerTest, KeepAliveAndPipeliningAnswerInOrder) {
  HttpHandlers h;
  std::vector<std::string> peers;  // loop thread only
  h.on_request = [this, &peers](HttpRequest req, Responder respond) {
    peers.push_back(req.peer);
    HttpResponse r;
    r.body = "resp:" + req.path;
    if (req.path == "/slow") {
      // Answer late; the pipelined request behind it must wait its turn.
      auto shared = std::make_shared<Responder>(std::move(respond));
      loop_.RunAfter(100, [shared, r] { (*shared)(r); });
    } else {
      respond(std::move(r));
    }
  };
  StartServer(std::move(h));
  RawClient client(server_->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(
      client.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto responses = client.ReadResponses(2);
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_NE(responses[0].find("HTTP/1.1 200"), std::string::npos);
  EXPECT_NE(responses[0].find("resp:/slow"), std::string::npos) << responses[0];
  EXPECT_NE(responses[1].find("resp:/fast"), std::string::npos) << responses[1];
  // A third request, later, on the same connection.
  ASSERT_TRUE(client.Send("GET /third HTTP/1.1\r\nHost: x\r\n\r\n"));
  responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].find("resp:/third"), std::string::npos);
  // "Connection: close" is honoured.
  ASSERT_TRUE(client.Send("GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].find("Connection: close"), std::string::npos);
  EXPECT_TRUE(client.WaitForEof());
  auto seen = OnLoop(loop_, [&] { return peers; });
  ASSERT_EQ(seen.size(), 4u);
  for (const auto& p : seen) EXPECT_EQ(p, seen[0]);  // one connection throughout
}

TEST_F(ServerTest, ExpectContinueAndHead) {
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.body = "got " + std::to_string(req.body.size()) + " bytes";
    respond(std::move(r));
  };
  StartServer(std::move(h));
  RawClient client(server_->port());
  ASSERT_TRUE(
      client.Send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n"
                  "Expect: 100-continue\r\n\r\n"));
  auto interim = client.ReadResponses(1);  // sent before the body
  ASSERT_EQ(interim.size(), 1u);
  EXPECT_EQ(interim[0], "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(client.Send(std::string(5000, 'b')));
  auto responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].find("got 5000 bytes"), std::string::npos) << responses[0];

  auto res = Fetch(Call("HEAD", "/"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->headers["content-length"], "11");  // as for GET
  EXPECT_EQ(res->body, "");
}

TEST_F(ServerTest, LongPollAnsweredFromTimer) {
  HttpHandlers h;
  h.on_request = [this](HttpRequest, Responder respond) {
    auto shared = std::make_shared<Responder>(std::move(respond));
    EXPECT_TRUE(shared->pending());
    loop_.RunAfter(200, [shared] {
      EXPECT_TRUE(shared->pending());
      HttpResponse r;
      r.body = R"({"events":[1]})";
      (*shared)(r);
      EXPECT_FALSE(shared->pending());
      (*shared)(HttpResponse{});  // a second call has no effect
    });
  };
  StartServer(std::move(h));
  auto start = std::chrono::steady_clock::now();
  auto res = Fetch(Call("GET", "/v1/events?wait=1"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, R"({"events":[1]})");
}

TEST_F(ServerTest, ResponderCalledFromAnotherThread) {
  HttpHandlers h;
  std::vector<std::thread> workers;  // loop thread only
  h.on_request = [&](HttpRequest req, Responder respond) {
    workers.emplace_back([req = std::move(req), respond = std::move(respond)]() mutable {
      HttpResponse r;
      r.body = "worker:" + req.body;
      respond(std::move(r));
    });
  };
  StartServer(std::move(h));
  for (int i = 0; i < 5; ++i) {
    auto res = Fetch(Call("POST", "/work", std::to_string(i)));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(res->body, "worker:" + std::to_string(i));
  }
  auto threads = OnLoop(loop_, [&] { return std::move(workers); });
  for (auto& t : threads) t.join();
}

TEST_F(ServerTest, DroppedResponderGives500) {
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder) {};
  StartServer(std::move(h));
  auto res = Fetch(Call("GET", "/x"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 500);
  // The connection still works for the next call.
  res = Fetch(Call("GET", "/y"));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 500);
}

TEST_F(ServerTest, ResponderOfAVanishedClientIsHarmless) {
  HttpHandlers h;
  std::shared_ptr<Responder> held;
  std::promise<void> got_request;
  h.on_request = [&](HttpRequest, Responder respond) {
    held = std::make_shared<Responder>(std::move(respond));
    got_request.set_value();
  };
  StartServer(std::move(h));
  {
    RawClient client(server_->port());
    ASSERT_TRUE(client.Send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_EQ(got_request.get_future().wait_for(kWait), std::future_status::ready);
  }  // the client goes away while the server waits
  // The server notices: the responder stops being pending.
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (OnLoop(loop_, [&] { return held->pending(); })) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(10ms);
  }
  OnLoop(loop_, [&] {
    (*held)(HttpResponse{});  // no crash, nothing sent
    held.reset();
  });
}

TEST_F(ServerTest, BodyOverLimitGets413) {
  HttpHandlers h;
  std::atomic<int> calls{0};
  h.on_request = [&](HttpRequest, Responder respond) {
    ++calls;
    respond(HttpResponse{});
  };
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(std::move(h), options);
  auto res = Fetch(Call("POST", "/v1/jobs", std::string(1024, 'a')));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 200);
  res = Fetch(Call("POST", "/v1/jobs", std::string(200'000, 'a')));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 413);
  EXPECT_NE(res->body.find("exceeds 1024 bytes"), std::string::npos) << res->body;
  EXPECT_EQ(calls, 1);
}

TEST_F(ServerTest, IdleConnectionsAreClosed) {
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
  HttpServerOptions options;
  options.idle_timeout_ms = 200;
  StartServer(std::move(h), options);
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(client.ReadResponses(1).size(), 1u);
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.WaitForEof());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
}

TEST_F(ServerTest, MalformedRequestGets400) {
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
  StartServer(std::move(h));
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("NOT HTTP AT ALL\r\n\r\n"));
  auto responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].rfind("HTTP/1.1 400", 0), 0u) << responses[0];
  EXPECT_TRUE(client.WaitForEof());
}

// ---- slow clients ---------------------------------------------------------

TEST_F(ServerTest, SlowHeaderIsCutOffWithoutStallingOthers) {
  HttpHandlers h;
  std::atomic<int> calls{0};
  h.on_request = [&](HttpRequest, Responder respond) {
    ++calls;
    respond(HttpResponse{});
  };
  HttpServerOptions options;
  options.header_timeout_ms = 500;
  StartServer(std::move(h), options);
  auto start = std::chrono::steady_clock::now();
  RawClient slow(server_->port());
  ASSERT_TRUE(slow.ok());
  std::atomic<bool> stop{false};
  // One header byte every 200 ms (slowloris), a header that would take a
  // minute to finish: only the header timeout, counted from the first
  // byte and not reset by each one, ends it.
  const std::string request =
      "GET /slow HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(260, 'p') + "\r\n\r\n";
  std::atomic<size_t> sent{0};
  std::thread dribbler([&] {
    for (size_t i = 0; !stop && i < request.size(); ++i) {
      if (!slow.Send(request.substr(i, 1))) return;
      ++sent;
      std::this_thread::sleep_for(200ms);
    }
  });
  for (int i = 0; i < 5; ++i) {
    auto res = Fetch(Call("GET", "/fast"));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(res->status, 200);
  }
  EXPECT_TRUE(slow.WaitForClose());
  EXPECT_LT(sent.load(), request.size()) << "closed only once the header was complete";
  // Not before its time (a lower bound holds on any machine).
  EXPECT_GE(std::chrono::steady_clock::now() - start, 450ms);
  stop = true;
  dribbler.join();
  EXPECT_EQ(calls, 5);
}

TEST_F(ServerTest, SilentNewConnectionIsClosedAfterTheHeaderTimeout) {
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
  HttpServerOptions options;
  options.header_timeout_ms = 300;
  options.idle_timeout_ms = 60'000;  // applies between requests only
  StartServer(std::move(h), options);
  auto start = std::chrono::steady_clock::now();
  RawClient client(server_->port());
  EXPECT_TRUE(client.WaitForClose());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
}

TEST_F(ServerTest, HeaderTimeoutDoesNotCutIdleKeepAlive) {
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.body = "resp:" + req.path;
    respond(std::move(r));
  };
  HttpServerOptions options;
  options.header_timeout_ms = 200;
  options.idle_timeout_ms = 5'000;
  StartServer(std::move(h), options);
  RawClient client(server_->port());
  ASSERT_TRUE(client.Send("GET /one HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(client.ReadResponses(1).size(), 1u);
  std::this_thread::sleep_for(500ms);  // idle longer than the header timeout
  ASSERT_TRUE(client.Send("GET /two HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].find("resp:/two"), std::string::npos);
}

TEST_F(ServerTest, SlowBodyIsCutOff) {
  HttpHandlers h;
  std::atomic<int> calls{0};
  h.on_request = [&](HttpRequest, Responder respond) {
    ++calls;
    respond(HttpResponse{});
  };
  HttpServerOptions options;
  options.body_timeout_ms = 400;
  StartServer(std::move(h), options);
  RawClient client(server_->port());
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.Send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"));
  EXPECT_TRUE(client.WaitForClose());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 350ms);
  EXPECT_EQ(calls, 0);
}

TEST_F(ServerTest, HeaderOver16KiBGets431) {
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.body = std::to_string(req.Header("x-big").size());
    respond(std::move(r));
  };
  StartServer(std::move(h));
  auto call = Call("GET", "/");
  call.headers["X-Big"] = std::string(12 << 10, 'a');
  auto res = Fetch(call);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, std::to_string(12 << 10));
  call.headers["X-Big"] = std::string(20 << 10, 'a');
  res = Fetch(call);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 431);
}

// ---- KeepAliveClient ---------------------------------------------------

// A handler that answers with the caller's address (a new connection has a
// new port) and counts the requests it saw.
HttpHandlers PeerEcho(std::shared_ptr<std::atomic<int>> seen) {
  HttpHandlers h;
  h.on_request = [seen](HttpRequest req, Responder respond) {
    ++*seen;
    HttpResponse r;
    r.body = req.method + " " + req.peer;
    respond(std::move(r));
  };
  return h;
}

TEST_F(ServerTest, AKeepAliveClientReusesItsConnection) {
  auto seen = std::make_shared<std::atomic<int>>(0);
  StartServer(PeerEcho(seen));
  KeepAliveClient client;
  auto first = client.Fetch(Call("GET", "/a"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string peer = first->body.substr(first->body.find(' ') + 1);
  for (const char* method : {"POST", "GET", "PUT", "DELETE"}) {
    auto r = client.Fetch(Call(method, "/b", method == std::string("GET") ? "" : "{}"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, std::string(method) + " " + peer);  // the same connection
  }
  EXPECT_EQ(client.connections_opened(), 1);
  // A plain Fetch still opens (and closes) its own.
  auto once = Fetch(Call("GET", "/c"));
  ASSERT_TRUE(once.ok());
  EXPECT_NE(once->body, "GET " + peer);
}

TEST_F(ServerTest, AKeepAliveClientServesThreadsOnConnectionsOfTheirOwn) {
  auto seen = std::make_shared<std::atomic<int>>(0);
  StartServer(PeerEcho(seen));
  KeepAliveClient client;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        if (client.Fetch(Call("POST", "/jobs", "{}")).ok()) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 240);
  EXPECT_EQ(seen->load(), 240);
  EXPECT_LE(client.connections_opened(), 6);  // never more than the calls in flight
}

// The server went away (here: restarted on the same port) while a
// connection was kept: a GET goes again on a new connection; a POST is
// not sent twice, it fails.
TEST_F(ServerTest, AKeptConnectionTheServerClosedIsReplacedButAPostIsNotRepeated) {
  auto seen = std::make_shared<std::atomic<int>>(0);
  StartServer(PeerEcho(seen));
  const uint16_t port = server_->port();
  auto restart = [&] {
    OnLoop(loop_, [&] {
      server_->Close();
      server_.reset();
      HttpServerOptions options;
      options.port = port;
      auto again = HttpServer::Start(loop_, options, PeerEcho(seen));
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      server_ = *std::move(again);
    });
  };
  KeepAliveClient client;
  ASSERT_TRUE(client.Fetch(Call("GET", "/a")).ok());
  restart();
  auto get = client.Fetch(Call("GET", "/a"));
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(client.connections_opened(), 2);
  EXPECT_EQ(seen->load(), 2);

  restart();
  auto post = client.Fetch(Call("POST", "/jobs", "{}"));
  EXPECT_FALSE(post.ok());
  EXPECT_EQ(post.status().code(), StatusCode::kUnavailable) << post.status().ToString();
  EXPECT_EQ(seen->load(), 2);  // the restarted server never saw it
  // The next call opens a new connection.
  ASSERT_TRUE(client.Fetch(Call("POST", "/jobs", "{}")).ok());
  EXPECT_EQ(seen->load(), 3);
}

TEST(FetchTest, ConnectionRefusedIsUnavailable) {
  // Find a port nobody listens on: bind, read the port, close.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  HttpCall call;
  call.base_url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  call.target = "/v1/ping";
  auto res = Fetch(call);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(res.status().message(), "cannot connect to " + call.base_url + ": Connection refused");
}

TEST(FetchTest, BadUrlIsInvalidArgument) {
  HttpCall call;
  call.base_url = "127.0.0.1:8470";
  EXPECT_EQ(Fetch(call).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ServerTest, FetchTimesOut) {
  HttpHandlers h;
  std::vector<Responder> parked;  // never answered during the call
  h.on_request = [&](HttpRequest, Responder respond) { parked.push_back(std::move(respond)); };
  StartServer(std::move(h));
  auto call = Call("GET", "/never");
  call.timeout_ms = 200;
  auto res = Fetch(call);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kDeadlineExceeded);
  OnLoop(loop_, [&] { parked.clear(); });
}

// ---- SerializeHttpRequest and takeover ---------------------------------

// The serialized requests, sent to the server, parse back to the same
// fields: the body framed by Content-Length, chunked framing gone.
TEST_F(ServerTest, SerializedRequestsParseBackTheSame) {
  std::vector<HttpRequest> got;  // loop thread
  HttpHandlers h;
  h.on_request = [&](HttpRequest req, Responder respond) {
    got.push_back(std::move(req));
    respond(HttpResponse{});
  };
  StartServer(std::move(h));

  HttpRequest post;
  post.method = "POST";
  post.target = "/v1/x?a=1&b=two%20words";
  post.headers = {{"host", "example.org"},
                  {"x-custom", "v1, v2"},
                  {"transfer-encoding", "chunked"},
                  {"content-length", "999"},
                  {"content-type", "text/plain"}};
  post.body = std::string("line\r\n\0\xff", 8);
  HttpRequest get;
  get.method = "GET";
  get.target = "/plain";
  get.headers = {{"host", "example.org"}};
  HttpRequest empty_post;
  empty_post.method = "POST";
  empty_post.target = "/empty";
  empty_post.headers = {{"host", "example.org"}};

  std::string bytes = SerializeHttpRequest(post);
  EXPECT_EQ(bytes.rfind("POST /v1/x?a=1&b=two%20words HTTP/1.1\r\n", 0), 0u) << bytes;
  EXPECT_EQ(bytes.find("chunked"), std::string::npos) << bytes;
  EXPECT_EQ(SerializeHttpRequest(get), "GET /plain HTTP/1.1\r\nhost: example.org\r\n\r\n");

  RawClient client(server_->port());
  ASSERT_TRUE(client.Send(bytes + SerializeHttpRequest(get) + SerializeHttpRequest(empty_post)));
  ASSERT_EQ(client.ReadResponses(3).size(), 3u);
  OnLoop(loop_, [&] {
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].method, "POST");
    EXPECT_EQ(got[0].target, post.target);
    EXPECT_EQ(got[0].path, "/v1/x");
    EXPECT_EQ(got[0].query, (std::map<std::string, std::string>{{"a", "1"}, {"b", "two words"}}));
    EXPECT_EQ(got[0].body, post.body);
    auto want = post.headers;
    want.erase("transfer-encoding");
    want["content-length"] = "8";
    EXPECT_EQ(got[0].headers, want);
    EXPECT_EQ(got[1].method, "GET");
    EXPECT_EQ(got[1].headers, get.headers);  // no Content-Length without a body
    EXPECT_EQ(got[2].body, "");
    EXPECT_EQ(got[2].Header("content-length"), "0");
  });
}

// Timeouts far below the test's pauses: a taken-over connection must not
// be subject to them.
HttpServerOptions ShortTimeouts() {
  HttpServerOptions o;
  o.header_timeout_ms = 150;
  o.body_timeout_ms = 150;
  o.idle_timeout_ms = 150;
  return o;
}

TEST_F(ServerTest, TakeoverGetsTheRequestAndThePipelinedBytes) {
  auto taken = std::make_shared<test::RawRecorder>();
  std::vector<std::string> seen;  // loop thread
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.content_type = "text/plain";
    r.body = "plain:" + req.path;
    respond(std::move(r));
  };
  h.on_takeover = [&](const HttpRequest& req) -> std::shared_ptr<RawHandler> {
    seen.push_back(req.method + " " + req.path +
                   " x=" + (req.query.count("x") ? req.query.at("x") : "") + " body=" + req.body);
    return req.path == "/relay" ? taken : nullptr;
  };
  // The handler answers with a response it writes itself, once the bytes
  // sent after the request arrived, then closes.
  taken->on_data = [&](RawConnection& c, std::string_view) {
    if (taken->data.find("EXTRA") == std::string::npos) return;
    std::string body = "got:" + taken->data;
    c.Write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n");
    c.Write(body);
    c.Close();
  };
  StartServer(std::move(h), ShortTimeouts());

  RawClient client(server_->port());
  ASSERT_TRUE(client.Send(
      "POST /relay?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhelloEXTRA\r\n"));
  ASSERT_TRUE(client.WaitForEof());
  EXPECT_EQ(client.received(), "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\ngot:EXTRA\r\n");
  client.Close();  // the server's side waits (up to 2 s) for the client's end
  ASSERT_TRUE(taken->WaitClosed());
  EXPECT_EQ(taken->close_reason, "closed");

  // Declined: the same server answers as usual.
  auto res = Fetch(Call("GET", "/plain"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, "plain:/plain");
  OnLoop(loop_, [&] {
    EXPECT_EQ(seen,
              (std::vector<std::string>{"POST /relay x=1 body=hello", "GET /plain x= body="}));
    EXPECT_EQ(taken->sent, 0);  // no OnSent once Close() was called
  });
}

TEST_F(ServerTest, TakeoverOfAnUpgradeOutlivesTheTimeoutsAndEndsWithTheServer) {
  auto taken = std::make_shared<test::RawRecorder>();
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
  h.on_takeover = [&](const HttpRequest& req) -> std::shared_ptr<RawHandler> {
    if (req.Header("upgrade") != "websocket") return nullptr;
    return taken;
  };
  h.on_upgrade = [](const HttpRequest&) -> std::variant<std::shared_ptr<WsHandler>, HttpResponse> {
    ADD_FAILURE() << "on_upgrade called for a taken-over request";
    return HttpResponse{500, "application/json", {}, "{}"};
  };
  taken->on_open = [](RawConnection& c) {
    c.Write(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
  };
  taken->on_data = [](RawConnection& c, std::string_view bytes) {
    c.Write("echo:" + std::string(bytes));
  };
  StartServer(std::move(h), ShortTimeouts());

  RawClient client(server_->port());
  ASSERT_TRUE(
      client.Send("GET /kernel HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: "
                  "Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n"));
  auto head = client.ReadResponses(1);
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(head[0].rfind("HTTP/1.1 101 ", 0), 0u);
  std::this_thread::sleep_for(500ms);  // several header, body and idle timeouts
  const std::string frame("frame\0\xff", 7);
  ASSERT_TRUE(client.Send(frame));
  ASSERT_TRUE(client.ReadUntil("echo:" + frame));
  OnLoop(loop_, [&] {
    EXPECT_FALSE(taken->closed) << taken->close_reason;
    EXPECT_EQ(taken->data, frame);
    EXPECT_NE(taken->conn_->peer().find("127.0.0.1:"), std::string::npos);
    server_->Close();
    // OnClose ran inside Close().
    EXPECT_TRUE(taken->closed);
    EXPECT_EQ(taken->close_reason, "server shutting down");
  });
  EXPECT_TRUE(client.WaitForClose());
}

// ---- WebSocket ----------------------------------------------------------

class WsTest : public ServerTest {
 protected:
  // Starts a server whose upgrades get `make_handler()`, or a 401 when the
  // request lacks the right token.
  void StartWsServer(std::function<std::shared_ptr<WsHandler>()> make_handler) {
    HttpHandlers h;
    h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
    h.on_upgrade =
        [make_handler](
            const HttpRequest& req) -> std::variant<std::shared_ptr<WsHandler>, HttpResponse> {
      if (req.path != "/v1/agent") return HttpResponse{404, "application/json", {}, "{}"};
      if (req.Header("authorization") != "Bearer good") {
        return HttpResponse{401, "application/json", {}, R"({"error":"bad token"})"};
      }
      return make_handler();
    };
    StartServer(std::move(h));
  }

  WsClientOptions ClientOptions(std::string token = "good") {
    WsClientOptions o;
    o.url = "ws://127.0.0.1:" + std::to_string(server_->port()) + "/v1/agent";
    o.headers["Authorization"] = "Bearer " + token;
    o.connect_timeout_ms = 10'000;
    return o;
  }
};

TEST_F(WsTest, UpgradeRefusedIsReportedAsClose) {
  auto server_side = std::make_shared<Recorder>();
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions("bad"), client); });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_NE(client->close_reason.find("401"), std::string::npos) << client->close_reason;
  EXPECT_NE(client->close_reason.find("bad token"), std::string::npos) << client->close_reason;
  EXPECT_EQ(client->conn_, nullptr);
}

TEST_F(WsTest, ConnectFailureIsReportedAsClose) {
  StartWsServer([] { return std::make_shared<Recorder>(); });
  auto client = std::make_shared<Recorder>();
  auto options = ClientOptions();
  options.url = "ws://127.0.0.1:" + std::to_string(server_->port()) + "/elsewhere";
  OnLoop(loop_, [&] { WsConnect(loop_, options, client); });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_NE(client->close_reason.find("404"), std::string::npos) << client->close_reason;

  auto bad_url = std::make_shared<Recorder>();
  options.url = "http://127.0.0.1:1/x";
  OnLoop(loop_, [&] { WsConnect(loop_, options, bad_url); });
  ASSERT_TRUE(bad_url->WaitClosed());
  EXPECT_NE(bad_url->close_reason.find("invalid"), std::string::npos);
}

TEST_F(WsTest, EchoManyMessagesInOrderBothWays) {
  constexpr int kCount = 2000;
  auto server_side = std::make_shared<Recorder>();
  server_side->expect_messages = kCount;
  server_side->on_message = [](WsConnection& c, const std::string& text) {
    c.Send("echo:" + text);
  };
  server_side->on_open = [](WsConnection& c) {
    EXPECT_EQ(c.local(), "127.0.0.1");
    for (int i = 0; i < kCount; ++i) c.Send("push:" + std::to_string(i));
  };
  StartWsServer([server_side] { return server_side; });

  auto client = std::make_shared<Recorder>();
  client->expect_messages = 2 * kCount;
  client->on_open = [](WsConnection& c) {
    for (int i = 0; i < kCount; ++i) c.Send(std::to_string(i));
    EXPECT_GT(c.queued_bytes(), 0u);
    EXPECT_NE(c.peer().find("127.0.0.1:"), std::string::npos);
    EXPECT_EQ(c.local(), "127.0.0.1");  // the address alone: no port
  };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitOpen());
  ASSERT_TRUE(client->WaitMessages());
  ASSERT_TRUE(server_side->WaitMessages());

  OnLoop(loop_, [&] {
    std::vector<std::string> echoes, pushes;
    for (auto& m : client->messages) (m.rfind("echo:", 0) == 0 ? echoes : pushes).push_back(m);
    ASSERT_EQ(echoes.size(), size_t{kCount});
    ASSERT_EQ(pushes.size(), size_t{kCount});
    for (int i = 0; i < kCount; ++i) {
      EXPECT_EQ(echoes[i], "echo:" + std::to_string(i));
      EXPECT_EQ(pushes[i], "push:" + std::to_string(i));
      EXPECT_EQ(server_side->messages[i], std::to_string(i));
    }
    EXPECT_EQ(client->conn_->queued_bytes(), 0u);
    client->conn_->Close("client done");
  });
  ASSERT_TRUE(client->WaitClosed());
  ASSERT_TRUE(server_side->WaitClosed());
  EXPECT_EQ(client->close_reason, "client done");
  EXPECT_EQ(server_side->close_reason, "client done");
}

TEST_F(WsTest, BinaryAndTextMessagesKeepTheirKindAndOrder) {
  auto server_side = std::make_shared<Recorder>();
  server_side->expect_messages = 3;
  server_side->on_message = [](WsConnection& c, const std::string& text) { c.Send("t:" + text); };
  server_side->on_binary = [](WsConnection& c, const std::string& bytes) {
    c.SendBinary(bytes + std::string("\0\xff", 2));
  };
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  client->expect_messages = 3;
  // Not UTF-8, with a NUL: only a binary message may carry it.
  const std::string raw("\xff\x00\xc3tunnel", 9);
  client->on_open = [&](WsConnection& c) {
    c.Send("one");
    c.SendBinary(raw);
    c.Send("two");
  };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitMessages());
  ASSERT_TRUE(server_side->WaitMessages());
  OnLoop(loop_, [&] {
    EXPECT_EQ(server_side->messages, (std::vector<std::string>{"one", "binary:" + raw, "two"}));
    EXPECT_EQ(client->messages, (std::vector<std::string>{
                                    "t:one", "binary:" + raw + std::string("\0\xff", 2), "t:two"}));
    client->conn_->Close("");
  });
  ASSERT_TRUE(client->WaitClosed());
}

TEST_F(WsTest, LargeMessages) {
  auto server_side = std::make_shared<Recorder>();
  server_side->on_message = [](WsConnection& c, const std::string& text) { c.Send(text + text); };
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  client->expect_messages = 1;
  std::string big(2 << 20, 'q');
  client->on_open = [&](WsConnection& c) { c.Send(big); };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitMessages());
  OnLoop(loop_, [&] {
    EXPECT_EQ(client->messages[0], big + big);
    client->conn_->Close("");
  });
  ASSERT_TRUE(client->WaitClosed());
}

// A client's ping is answered by the server's WebSocket layer alone: the
// server's handler sees no message, the client gets OnPong.
TEST_F(WsTest, PingIsAnsweredWithPong) {
  class PongRecorder : public Recorder {
   public:
    void OnPong() override {
      if (++pongs == 2) two_pongs.set_value();
    }
    int pongs = 0;
    std::promise<void> two_pongs;
  };
  auto server_side = std::make_shared<Recorder>();
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<PongRecorder>();
  auto got_two = client->two_pongs.get_future();
  client->on_open = [](WsConnection& c) {
    c.Ping();
    c.Ping();  // still being sent: skipped
  };
  client->on_message = [](WsConnection&, const std::string&) {};
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitOpen());
  // More pings, each sent once the one before it went out, until two pongs came back.
  for (int i = 0;
       i < 50 && got_two.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready; ++i) {
    OnLoop(loop_, [&] {
      if (client->conn_) client->conn_->Ping();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(got_two.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  OnLoop(loop_, [&] {
    EXPECT_TRUE(server_side->messages.empty());
    client->conn_->Close("");
  });
  ASSERT_TRUE(client->WaitClosed());
}

TEST_F(WsTest, ServerCloseTriggersClientOnClose) {
  auto server_side = std::make_shared<Recorder>();
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitOpen());
  ASSERT_TRUE(server_side->WaitOpen());
  OnLoop(loop_, [&] {
    server_->Close();
    // OnClose ran inside Close(): no callback reaches the handler later.
    EXPECT_EQ(server_side->close_reason, "server shutting down");
  });
  ASSERT_TRUE(client->WaitClosed());
  ASSERT_TRUE(server_side->WaitClosed());
  EXPECT_EQ(client->close_reason, "server shutting down");
  // The listener is gone too.
  auto res = Fetch(Call("GET", "/"));
  EXPECT_FALSE(res.ok());
}

TEST_F(WsTest, ServerSideCloseWithReason) {
  auto server_side = std::make_shared<Recorder>();
  server_side->on_message = [](WsConnection& c, const std::string& text) {
    if (text == "bye") c.Close("go away");
  };
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  client->on_open = [](WsConnection& c) {
    c.Send("hello");
    c.Send("bye");
  };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitClosed());
  ASSERT_TRUE(server_side->WaitClosed());
  EXPECT_EQ(client->close_reason, "go away");
  EXPECT_EQ(server_side->close_reason, "go away");
  OnLoop(loop_, [&] {
    EXPECT_EQ(server_side->messages, (std::vector<std::string>{"hello", "bye"}));
  });
}

TEST_F(WsTest, ClientIdleTimeoutClosesASilentServerOnly) {
  auto server_side = std::make_shared<Recorder>();
  server_side->on_message = [](WsConnection& c, const std::string& text) { c.Send(text); };
  StartWsServer([server_side] { return server_side; });
  // The client runs on a loop of its own, so the server's can be frozen.
  EventLoop client_loop;
  std::thread client_thread([&] { client_loop.Run(); });
  auto client = std::make_shared<Recorder>();
  client->expect_messages = 1;
  auto options = ClientOptions();
  options.idle_timeout_ms = 300;
  OnLoop(client_loop, [&] { WsConnect(client_loop, options, client); });
  ASSERT_TRUE(client->WaitOpen());
  // Silence from the application for several idle periods: the client's
  // pings keep a live server's connection open.
  std::this_thread::sleep_for(1200ms);
  OnLoop(client_loop, [&] {
    ASSERT_NE(client->conn_, nullptr) << client->close_reason;
    client->conn_->Send("still here");
  });
  ASSERT_TRUE(client->WaitMessages());
  // Freeze the server's loop until the client gives up on it. The task holds
  // its own reference: it may still be waking when the test's ends.
  loop_.Post([client] { client->WaitClosed(); });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_EQ(client->close_reason, "timed out");
  client_loop.Stop();
  client_thread.join();
}

TEST_F(WsTest, ManyConcurrentConnections) {
  constexpr int kConns = 200, kPer = 5;
  StartWsServer([] {
    auto r = std::make_shared<Recorder>();
    r->on_message = [](WsConnection& c, const std::string& text) { c.Send(text); };
    return r;
  });
  std::vector<std::shared_ptr<Recorder>> clients;
  for (int i = 0; i < kConns; ++i) {
    auto c = std::make_shared<Recorder>();
    c->expect_messages = kPer;
    c->on_open = [i](WsConnection& conn) {
      for (int j = 0; j < kPer; ++j) conn.Send(std::to_string(i) + "/" + std::to_string(j));
    };
    clients.push_back(c);
  }
  OnLoop(loop_, [&] {
    for (auto& c : clients) WsConnect(loop_, ClientOptions(), c);
  });
  for (auto& c : clients) ASSERT_TRUE(c->WaitMessages());
  OnLoop(loop_, [&] {
    for (int i = 0; i < kConns; ++i) {
      for (int j = 0; j < kPer; ++j) {
        EXPECT_EQ(clients[i]->messages[j], std::to_string(i) + "/" + std::to_string(j));
      }
      clients[i]->conn_->Close("done");
    }
  });
  for (auto& c : clients) ASSERT_TRUE(c->WaitClosed());
}

TEST_F(WsTest, PausedServerReadsNothingUntilResumedThenAllInOrder) {
  constexpr int kCount = 200;
  auto server_side = std::make_shared<Recorder>();
  server_side->expect_messages = kCount;
  server_side->on_open = [](WsConnection& c) { c.PauseReading(true); };
  // A second pause mid-stream, from inside OnMessage, resumed by a timer.
  server_side->on_message = [&](WsConnection& c, const std::string& text) {
    if (text != "100") return;
    c.PauseReading(true);
    loop_.RunAfter(20, [&] { server_side->conn_->PauseReading(false); });
  };
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  client->on_open = [](WsConnection& c) {
    for (int i = 0; i < kCount; ++i) c.Send(std::to_string(i));
  };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitOpen());
  ASSERT_TRUE(server_side->WaitOpen());
  // All written to the socket; none may arrive while paused.
  ASSERT_TRUE(test::WaitUntil(loop_, [&] { return client->conn_->queued_bytes() == 0; }));
  std::this_thread::sleep_for(100ms);
  OnLoop(loop_, [&] {
    EXPECT_TRUE(server_side->messages.empty());
    server_side->conn_->PauseReading(false);
    server_side->conn_->PauseReading(false);  // twice: still one read loop
  });
  ASSERT_TRUE(server_side->WaitMessages());
  std::this_thread::sleep_for(20ms);
  OnLoop(loop_, [&] {
    ASSERT_EQ(server_side->messages.size(), size_t{kCount});  // none repeated
    for (int i = 0; i < kCount; ++i) EXPECT_EQ(server_side->messages[i], std::to_string(i));
    client->conn_->Close("done");
  });
  ASSERT_TRUE(client->WaitClosed());
  ASSERT_TRUE(server_side->WaitClosed());
  EXPECT_EQ(server_side->close_reason, "done");
}

size_t SysctlMax(const char* path) {  // the last of "min default max"
  std::ifstream in(path);
  size_t min = 0, def = 0, max = 0;
  in >> min >> def >> max;
  return max;
}

// The client pauses while its read is under way, so the first message is
// held. The server then sends more than both socket buffers can hold at
// their largest: the rest must stay in its queue, whatever the timing.
TEST_F(WsTest, PausedClientPushesBackOnTheServersQueue) {
  const size_t kernel =
      SysctlMax("/proc/sys/net/ipv4/tcp_rmem") + SysctlMax("/proc/sys/net/ipv4/tcp_wmem");
  ASSERT_GT(kernel, 0u);
  constexpr size_t kMessage = 1 << 20;
  const size_t count = kernel / kMessage + 16;
  auto server_side = std::make_shared<Recorder>();
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<Recorder>();
  client->expect_messages = count;
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(client->WaitOpen());
  ASSERT_TRUE(server_side->WaitOpen());
  OnLoop(loop_, [&] {
    client->conn_->PauseReading(true);
    for (size_t i = 0; i < count; ++i) {
      server_side->conn_->SendBinary(std::string(kMessage, static_cast<char>('a' + i % 26)));
    }
  });
  std::this_thread::sleep_for(200ms);
  OnLoop(loop_, [&] {
    EXPECT_TRUE(client->messages.empty());
    // The socket buffers hold at most `kernel` bytes, the paused client at
    // most the one message it was reading: the rest is still queued.
    EXPECT_GE(server_side->conn_->queued_bytes(), count * kMessage - kernel - 2 * kMessage);
    client->conn_->PauseReading(false);
  });
  ASSERT_TRUE(client->WaitMessages());
  OnLoop(loop_, [&] {
    ASSERT_EQ(client->messages.size(), count);
    for (size_t i = 0; i < count; ++i) {
      const std::string& m = client->messages[i];
      ASSERT_EQ(m.size(), 7 + kMessage);
      EXPECT_EQ(m[7], static_cast<char>('a' + i % 26)) << i;
      EXPECT_EQ(m.back(), static_cast<char>('a' + i % 26)) << i;
    }
    EXPECT_EQ(server_side->conn_->queued_bytes(), 0u);
    client->messages.clear();
    client->conn_->Close("done");
  });
  ASSERT_TRUE(client->WaitClosed());
}

TEST_F(WsTest, OnSentFollowsEachWrittenMessage) {
  class SentRecorder : public Recorder {
   public:
    void OnSent() override {
      ASSERT_NE(conn_, nullptr) << "OnSent after OnClose";
      queued.push_back(conn_->queued_bytes());
      // Sending from inside OnSent only queues: order is kept.
      if (queued.size() == 1) conn_->Send("from OnSent");
    }
    std::vector<size_t> queued;
  };
  auto server_side = std::make_shared<Recorder>();
  server_side->expect_messages = 4;
  StartWsServer([server_side] { return server_side; });
  auto client = std::make_shared<SentRecorder>();
  client->on_open = [](WsConnection& c) {
    c.Send("a");
    c.Send("b");
    c.Send(std::string(100'000, 'c'));
  };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(), client); });
  ASSERT_TRUE(server_side->WaitMessages());
  ASSERT_TRUE(test::WaitUntil(loop_, [&] { return client->queued.size() == 4; }));
  OnLoop(loop_, [&] {
    EXPECT_EQ(server_side->messages,
              (std::vector<std::string>{"a", "b", std::string(100'000, 'c'), "from OnSent"}));
    EXPECT_EQ(client->queued.back(), 0u);
    EXPECT_EQ(client->conn_->queued_bytes(), 0u);
    client->conn_->Send("last");
    client->conn_->Close("done");  // "last" is written, but no OnSent after Close
  });
  ASSERT_TRUE(client->WaitClosed());
  OnLoop(loop_, [&] { EXPECT_EQ(client->queued.size(), 4u); });
}

// ---- TcpListen / TcpConnect -----------------------------------------------

class TcpStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    thread_ = std::thread([this] { loop_.Run(); });
  }
  void TearDown() override {
    OnLoop(loop_, [this] { listener_.reset(); });
    loop_.Stop();
    thread_.join();
  }
  EventLoop loop_;
  std::unique_ptr<TcpListener> listener_;
  std::thread thread_;
};

// Echoes; stops reading while more than 1 MiB of echo is queued.
class EchoHandler : public test::RawRecorder {
 public:
  EchoHandler() {
    on_data = [this](RawConnection& c, std::string_view bytes) {
      c.Write(std::string(bytes));
      if (c.queued_bytes() > (1 << 20)) {
        c.PauseReading(true);
        paused = true;
        ++pauses;
      }
    };
    on_sent = [this](RawConnection& c) {
      if (paused && c.queued_bytes() < (256 << 10)) {
        paused = false;
        c.PauseReading(false);
      }
    };
  }
  bool paused = false;
  int pauses = 0;
};

TEST_F(TcpStreamTest, EchoEightMiBBothWaysWithPausedReading) {
  constexpr size_t kTotal = 8 << 20, kChunk = 100'000, kMaxQueued = 1 << 20;
  std::string payload(kTotal, '\0');
  for (size_t i = 0; i < kTotal; ++i) payload[i] = static_cast<char>((i * 7 + i / 4099) % 251);
  std::vector<std::shared_ptr<EchoHandler>> servers;  // loop thread
  auto listening = OnLoop(loop_, [&] {
    return TcpListen(loop_, "127.0.0.1", 0, [&] {
      servers.push_back(std::make_shared<EchoHandler>());
      return servers.back();
    });
  });
  ASSERT_TRUE(listening.ok()) << listening.status().ToString();
  listener_ = std::move(listening).value();
  ASSERT_NE(listener_->port(), 0);

  // The client sends while less than kMaxQueued is queued, and a timer
  // pauses and resumes its reading every few milliseconds.
  auto client = std::make_shared<test::RawRecorder>();
  size_t offset = 0;
  int toggles = 0;
  bool toggle_pending = false;  // a timer refers to this test's locals
  auto fill = [&](RawConnection& c) {
    while (offset < kTotal && c.queued_bytes() < kMaxQueued) {
      size_t n = std::min(kChunk, kTotal - offset);
      c.Write(payload.substr(offset, n));
      offset += n;
    }
  };
  std::function<void()> toggle = [&] {
    toggle_pending = false;
    if (!client->conn_ || client->data.size() >= kTotal) return;
    client->conn_->PauseReading(++toggles % 2 == 1);
    toggle_pending = true;
    loop_.RunAfter(2, toggle);
  };
  client->on_open = [&](RawConnection& c) {
    fill(c);
    toggle_pending = true;
    loop_.RunAfter(1, toggle);
  };
  client->on_sent = fill;
  client->on_data = [&](RawConnection& c, std::string_view) {
    if (client->data.size() >= kTotal) {
      c.PauseReading(false);
      c.Close();
    }
  };
  OnLoop(loop_, [&] { TcpConnect(loop_, "127.0.0.1", listener_->port(), client); });
  ASSERT_TRUE(client->WaitClosed());
  ASSERT_EQ(servers.size(), 1u);
  ASSERT_TRUE(servers[0]->WaitClosed());
  OnLoop(loop_, [&] {
    EXPECT_EQ(client->close_reason, "closed");
    EXPECT_EQ(servers[0]->close_reason, "closed by peer");
    EXPECT_EQ(servers[0]->data.size(), kTotal);
    EXPECT_TRUE(servers[0]->data == payload);
    EXPECT_EQ(client->data.size(), kTotal);
    EXPECT_TRUE(client->data == payload);
    EXPECT_GE(toggles, 2);
    EXPECT_GT(client->sent, 0);
  });
  ASSERT_TRUE(test::WaitUntil(loop_, [&] { return !toggle_pending; }));
}

TEST_F(TcpStreamTest, ConnectToAClosedPortNamesIt) {
  // A port that was free a moment ago: bound, then closed.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  uint16_t port = ntohs(addr.sin_port);
  close(fd);

  auto client = std::make_shared<test::RawRecorder>();
  OnLoop(loop_, [&] { TcpConnect(loop_, "127.0.0.1", port, client); });
  ASSERT_TRUE(client->WaitClosed());
  OnLoop(loop_, [&] {
    EXPECT_FALSE(client->opened);
    EXPECT_EQ(
        client->close_reason.rfind("cannot connect to 127.0.0.1:" + std::to_string(port) + ": ", 0),
        0u)
        << client->close_reason;
  });
}

TEST_F(TcpStreamTest, ListenerCloseStopsAccepting) {
  auto listening = OnLoop(loop_, [&] {
    return TcpListen(loop_, "127.0.0.1", 0, [] { return std::make_shared<EchoHandler>(); });
  });
  ASSERT_TRUE(listening.ok());
  listener_ = std::move(listening).value();
  uint16_t port = listener_->port();
  OnLoop(loop_, [&] { listener_->Close(); });
  auto client = std::make_shared<test::RawRecorder>();
  OnLoop(loop_, [&] { TcpConnect(loop_, "127.0.0.1", port, client); });
  ASSERT_TRUE(client->WaitClosed());
  OnLoop(loop_, [&] { EXPECT_FALSE(client->opened) << client->close_reason; });
  OnLoop(loop_, [&] {
    auto bad = TcpListen(loop_, "no.such.host.invalid", 0, [] { return nullptr; });
    EXPECT_FALSE(bad.ok());
  });
}

}  // namespace
}  // namespace gpupool::net
