// Helpers for the tests of net/ (net_test, tls_test): run code on a loop
// thread, a raw socket client, and a WebSocket handler that records what
// it gets. Test code only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "net/event_loop.h"
#include "net/http_server.h"
#include "net/websocket.h"

namespace gpupool::net::test {

using namespace std::chrono_literals;
constexpr auto kWait = std::chrono::seconds(20);  // generous: only reached when something is broken

// Runs `fn` on the loop thread and waits for it.
template <typename Fn>
auto OnLoop(EventLoop& loop, Fn fn) -> decltype(fn()) {
  using R = decltype(fn());
  std::promise<R> done;
  auto future = done.get_future();
  loop.Post([&] {
    if constexpr (std::is_void_v<R>) {
      fn();
      done.set_value();
    } else {
      done.set_value(fn());
    }
  });
  EXPECT_EQ(future.wait_for(kWait), std::future_status::ready);
  return future.get();
}

// Polls `pred` on the loop thread until it holds; false after kWait.
template <typename Pred>
bool WaitUntil(EventLoop& loop, Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (OnLoop(loop, [&] { return static_cast<bool>(pred()); })) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// A raw client socket, to see exactly what goes over the wire.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() { Close(); }
  bool ok() const { return ok_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // False once the server closed the connection (no SIGPIPE).
  bool Send(std::string_view data) {
    return send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Reads until `n` complete responses (with Content-Length) are buffered.
  std::vector<std::string> ReadResponses(size_t n) {
    std::vector<std::string> out;
    while (out.size() < n) {
      size_t head_end = buf_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = buf_.substr(0, head_end);
        size_t cl = head.find("Content-Length: ");
        size_t len = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
        if (buf_.size() >= head_end + 4 + len) {
          out.push_back(buf_.substr(0, head_end + 4 + len));
          buf_.erase(0, head_end + 4 + len);
          continue;
        }
      }
      if (!ReadMore()) break;
    }
    return out;
  }
  // True when the server closed the connection (EOF) within the timeout.
  bool WaitForEof() {
    while (true) {
      if (!ReadMore()) return eof_;
    }
  }
  // True when the server closed or reset the connection within the timeout.
  bool WaitForClose() {
    while (true) {
      if (!ReadMore()) return eof_ || reset_;
    }
  }
  // Reads until `text` is among the bytes received (see received()).
  bool ReadUntil(std::string_view text) {
    while (buf_.find(text) == std::string::npos) {
      if (!ReadMore()) return false;
    }
    return true;
  }
  const std::string& received() const { return buf_; }

 private:
  bool ReadMore() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kWait).count())) != 1) return false;
    char tmp[4096];
    ssize_t n = read(fd_, tmp, sizeof tmp);
    if (n <= 0) {
      eof_ = n == 0;
      reset_ = n < 0 && errno == ECONNRESET;
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool ok_ = false;
  bool eof_ = false;
  bool reset_ = false;
  std::string buf_;
};

// Records callbacks; all methods run on the loop thread. Futures signal
// the test thread.
class Recorder : public WsHandler {
 public:
  void OnOpen(std::shared_ptr<WsConnection> conn) override {
    EXPECT_FALSE(closed_) << "OnOpen after OnClose";
    conn_ = conn;
    if (on_open) on_open(*conn);
    opened_.set_value();
  }
  void OnMessage(std::string text) override {
    EXPECT_FALSE(closed_) << "OnMessage after OnClose";
    messages.push_back(text);
    if (on_message) on_message(*conn_, text);
    if (expect_messages > 0 && messages.size() == expect_messages) all_messages_.set_value();
  }
  // Binary messages are recorded among the text ones as "binary:" + bytes.
  void OnBinary(std::string bytes) override {
    EXPECT_FALSE(closed_) << "OnBinary after OnClose";
    messages.push_back("binary:" + bytes);
    if (on_binary) on_binary(*conn_, bytes);
    if (expect_messages > 0 && messages.size() == expect_messages) all_messages_.set_value();
  }
  void OnClose(std::string reason) override {
    EXPECT_FALSE(closed_) << "OnClose twice";
    closed_ = true;
    close_reason = reason;
    conn_.reset();
    closed_promise_.set_value();
  }

  std::function<void(WsConnection&)> on_open;
  std::function<void(WsConnection&, const std::string&)> on_message;
  std::function<void(WsConnection&, const std::string&)> on_binary;
  size_t expect_messages = 0;
  std::vector<std::string> messages;
  std::string close_reason;
  std::shared_ptr<WsConnection> conn_;

  bool WaitOpen() { return opened_future_.wait_for(kWait) == std::future_status::ready; }
  bool WaitClosed() { return closed_future_.wait_for(kWait) == std::future_status::ready; }
  bool WaitMessages() { return all_future_.wait_for(kWait) == std::future_status::ready; }

 private:
  bool closed_ = false;
  std::promise<void> opened_;
  std::promise<void> closed_promise_;
  std::promise<void> all_messages_;
  std::future<void> opened_future_ = opened_.get_future();
  std::future<void> closed_future_ = closed_promise_.get_future();
  std::future<void> all_future_ = all_messages_.get_future();
};

// Records the callbacks of a raw connection (a takeover, net/tcp_stream.h);
// all methods run on the loop thread.
class RawRecorder : public RawHandler {
 public:
  void OnOpen(std::shared_ptr<RawConnection> conn) override {
    EXPECT_FALSE(closed) << "OnOpen after OnClose";
    conn_ = conn;
    opened = true;
    if (on_open) on_open(*conn);
  }
  void OnData(std::string_view bytes) override {
    EXPECT_TRUE(opened && !closed) << "OnData outside OnOpen..OnClose";
    data.append(bytes);
    if (on_data) on_data(*conn_, bytes);
  }
  void OnSent() override {
    EXPECT_TRUE(opened && !closed) << "OnSent outside OnOpen..OnClose";
    ++sent;
    if (on_sent) on_sent(*conn_);
  }
  void OnClose(std::string reason) override {
    EXPECT_FALSE(closed) << "OnClose twice";
    closed = true;
    close_reason = reason;
    conn_.reset();
    closed_promise_.set_value();
  }
  bool WaitClosed() { return closed_future_.wait_for(kWait) == std::future_status::ready; }

  std::function<void(RawConnection&)> on_open;
  std::function<void(RawConnection&, std::string_view)> on_data;
  std::function<void(RawConnection&)> on_sent;
  std::string data;
  int sent = 0;
  bool opened = false;
  bool closed = false;
  std::string close_reason;
  std::shared_ptr<RawConnection> conn_;

 private:
  std::promise<void> closed_promise_;
  std::future<void> closed_future_ = closed_promise_.get_future();
};

}  // namespace gpupool::net::test
