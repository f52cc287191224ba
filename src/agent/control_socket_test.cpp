// Tests of the control socket over real Unix sockets in a temporary folder.
// The EventLoop runs on its own thread; the test thread is the client.
#include "agent/control_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

constexpr int64_t kTimeoutMs = 20'000;  // generous: only reached when something is broken

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

sockaddr_un Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

// A connected client socket, or -1.
int ConnectRaw(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = Address(path);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until EOF (or kTimeoutMs of silence); returns what arrived.
std::string ReadToEnd(int fd) {
  std::string in;
  char chunk[4096];
  pollfd pfd{fd, POLLIN, 0};
  while (::poll(&pfd, 1, kTimeoutMs) == 1) {
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    in.append(chunk, static_cast<size_t>(n));
  }
  return in;
}

// Sends raw bytes (ignoring an early close by the server) and returns the response.
std::string RawCall(const std::string& path, const std::string& bytes) {
  int fd = ConnectRaw(path);
  if (fd < 0) return "connect failed";
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string response = ReadToEnd(fd);
  ::close(fd);
  return response;
}

// Leaves a socket file that nobody listens on, like an agent that crashed.
void MakeStaleSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = Address(path);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
}

class ControlSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpctl-XXXXXX";  // short: sun_path holds 107 bytes
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/control.sock";
    thread_ = std::thread([this] { loop_.Run(); });
  }

  void TearDown() override {
    OnLoop([this] {
      server_.reset();
      pending_.clear();
    });
    loop_.Stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }

  // Runs `fn` on the loop thread and waits for it.
  template <typename Fn>
  auto OnLoop(Fn fn) -> decltype(fn()) {
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto future = task.get_future();
    loop_.Post([&task] { task(); });
    return future.get();
  }

  Result<std::unique_ptr<ControlServer>> Listen(ControlHandler handler,
                                                std::set<uid_t> allowed = {::geteuid()}) {
    return OnLoop([&] { return ControlServer::Listen(loop_, path_, allowed, handler); });
  }

  // Starts server_ with a handler that records each call and answers
  // {"ok": true, "echo": request} at once.
  void StartEcho(std::set<uid_t> allowed = {::geteuid()}) {
    auto server = Listen(
        [this](const ControlPeer& peer, const json& request, ControlReply reply) {
          peers_.push_back(peer);
          reply({{"ok", true}, {"echo", request}});
        },
        allowed);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  size_t HandlerCalls() {
    return OnLoop([this] { return peers_.size(); });
  }

  net::EventLoop loop_;
  std::string dir_;
  std::string path_;
  std::thread thread_;
  std::unique_ptr<ControlServer> server_;  // loop thread only
  std::vector<ControlPeer> peers_;         // loop thread only
  std::vector<ControlReply> pending_;      // loop thread only
};

TEST_F(ControlSocketTest, RequestReachesHandlerWithPeerCredentials) {
  StartEcho();
  auto r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, json({{"ok", true}, {"echo", {{"cmd", "status"}}}}));
  auto peers = OnLoop([this] { return peers_; });
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].uid, ::geteuid());  // SO_PEERCRED reports the effective ids
  EXPECT_EQ(peers[0].gid, ::getegid());
  EXPECT_EQ(peers[0].pid, ::getpid());
  EXPECT_EQ(server_->path(), path_);
}

TEST_F(ControlSocketTest, SocketFileIsWorldWritableWhateverTheUmask) {
  mode_t old = ::umask(077);
  StartEcho();
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0666u);
}

TEST_F(ControlSocketTest, AsynchronousReplyArrives) {
  auto server = Listen([this](const ControlPeer&, const json&, ControlReply reply) {
    loop_.RunAfter(200, [reply] { reply({{"ok", true}, {"late", true}}); });
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(server).value();
  auto start = std::chrono::steady_clock::now();
  auto r = CallControl(path_, {{"cmd", "reclaim"}}, kTimeoutMs);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["late"], true);
  EXPECT_GE(elapsed, 190ms);
}

TEST_F(ControlSocketTest, PeerWithoutPermissionIsRefusedBeforeTheHandler) {
  uid_t other = ::geteuid() == 4242 ? 4243 : 4242;
  StartEcho({other});
  auto r = CallControl(path_, {{"cmd", "leave"}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], false);
  std::string error = (*r)["error"];
  EXPECT_THAT(error, HasSubstr("permission denied: uid " + std::to_string(::geteuid())));
  EXPECT_THAT(error,
              HasSubstr("may not control this agent (allowed: uid " + std::to_string(other)));
  EXPECT_EQ(HandlerCalls(), 0u);

  // A config reload lets the same peer in.
  OnLoop([this] { server_->SetAllowedUids({::geteuid()}); });
  r = CallControl(path_, {{"cmd", "leave"}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], true);
  EXPECT_EQ(HandlerCalls(), 1u);
}

TEST_F(ControlSocketTest, MalformedRequestsAreRefusedBeforeTheHandler) {
  StartEcho();
  std::string response = RawCall(path_, "{\"cmd\": \n");
  ASSERT_FALSE(response.empty());
  EXPECT_EQ(response.back(), '\n');
  json j = json::parse(response, nullptr, false);
  EXPECT_EQ(j["ok"], false);
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("malformed request: invalid JSON"));

  auto r = CallControl(path_, json::array({"status"}), kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], false);
  EXPECT_THAT((*r)["error"].get<std::string>(),
              HasSubstr("malformed request: must be a JSON object"));
  EXPECT_EQ(HandlerCalls(), 0u);
}

TEST_F(ControlSocketTest, OversizedRequestIsRefused) {
  StartEcho();
  // Just under the limit passes.
  std::string fits(kMaxControlRequestBytes - 20, 'a');
  auto r = CallControl(path_, {{"x", fits}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], true);

  // A complete line over the limit.
  std::string big(kMaxControlRequestBytes + 10, 'a');
  r = CallControl(path_, {{"x", big}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], false);
  EXPECT_THAT((*r)["error"].get<std::string>(), HasSubstr("request too long"));

  // Endless bytes without a newline are cut off too.
  json j = json::parse(RawCall(path_, std::string(1 << 20, 'b')), nullptr, false);
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("request too long"));
  EXPECT_EQ(HandlerCalls(), 1u);
}

TEST_F(ControlSocketTest, MissingOrStaleSocketMeansNoAgent) {
  auto r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("no agent is listening on " + path_));

  MakeStaleSocket(path_);
  ASSERT_TRUE(Exists(path_));
  r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("no agent is listening on " + path_));
}

TEST_F(ControlSocketTest, StaleSocketFileIsReplaced) {
  MakeStaleSocket(path_);
  StartEcho();
  auto r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], true);
}

TEST_F(ControlSocketTest, SecondServerOnALiveSocketFails) {
  StartEcho();
  auto second = Listen([](const ControlPeer&, const json&, ControlReply) {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            "another agent is running with this data dir (" + path_ + ")");
  // The first one is untouched.
  auto r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], true);
}

TEST_F(ControlSocketTest, NonSocketFileIsLeftAlone) {
  {
    std::FILE* f = std::fopen(path_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  auto server = Listen([](const ControlPeer&, const json&, ControlReply) {});
  EXPECT_EQ(server.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Exists(path_));
}

TEST_F(ControlSocketTest, DestructorRemovesOnlyItsOwnSocketFile) {
  StartEcho();
  ASSERT_TRUE(Exists(path_));
  OnLoop([this] { server_.reset(); });
  EXPECT_FALSE(Exists(path_));

  // Someone replaced the file meanwhile: it stays.
  StartEcho();
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  MakeStaleSocket(path_);
  OnLoop([this] { server_.reset(); });
  EXPECT_TRUE(Exists(path_));
}

TEST_F(ControlSocketTest, CallTimesOutWhenTheHandlerNeverReplies) {
  auto server = Listen([this](const ControlPeer&, const json&, ControlReply reply) {
    pending_.push_back(std::move(reply));
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(server).value();
  auto start = std::chrono::steady_clock::now();
  auto r = CallControl(path_, {{"cmd", "status"}}, 300);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_GE(elapsed, 290ms);

  // Replying after the client left, twice, and after the server is gone is harmless.
  OnLoop([this] {
    ASSERT_EQ(pending_.size(), 1u);
    pending_[0]({{"ok", true}});
    pending_[0]({{"ok", true}});
    server_.reset();
    pending_[0]({{"ok", true}});
  });
}

TEST_F(ControlSocketTest, HandlerMayDestroyTheServer) {
  // The handler still uses its captures after the reset: they must outlive it.
  std::string seen;  // loop thread only
  auto server = Listen([this, &seen, note = std::string("left the pool")](
                           const ControlPeer&, const json&, ControlReply reply) {
    reply({{"ok", true}});
    server_.reset();
    seen = note;
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(server).value();
  auto r = CallControl(path_, {{"cmd", "leave"}}, kTimeoutMs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["ok"], true);
  EXPECT_EQ(OnLoop([&] { return server_ == nullptr ? seen : "server alive"; }), "left the pool");
  EXPECT_FALSE(Exists(path_));
}

TEST_F(ControlSocketTest, SilentClientIsDroppedAfterTenSeconds) {
  StartEcho();
  int fd = ConnectRaw(path_);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "{\"cmd\"", 6, MSG_NOSIGNAL), 6);  // never finished
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadToEnd(fd), "");  // without a reply
  auto elapsed = std::chrono::steady_clock::now() - start;
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, MSG_DONTWAIT), 0) << "not closed by the agent";
  ::close(fd);
  EXPECT_GE(elapsed, 9s);  // not before its time (a lower bound holds on any machine)
  EXPECT_EQ(HandlerCalls(), 0u);
}

TEST_F(ControlSocketTest, ConnectionsBeyondTheLimitAreClosed) {
  StartEcho();
  std::vector<int> idle;
  for (int i = 0; i < 32; ++i) {
    int fd = ConnectRaw(path_);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  auto r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("without a complete response"));

  for (int fd : idle) ::close(fd);
  // The server notices the closed clients on its own time; retry briefly.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  do {
    r = CallControl(path_, {{"cmd", "status"}}, kTimeoutMs);
  } while (!r.ok() && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(HandlerCalls(), 1u);
}

}  // namespace
}  // namespace gpupool::agent
