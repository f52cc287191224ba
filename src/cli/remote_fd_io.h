// Local fds (stdin, stdout, stderr) on the CLI's event loop, for the byte
// paths of `gpupool exec` and `gpupool shell`: a reader that can be paused
// (back-pressure toward the server) and a writer that buffers when the fd
// would block (back-pressure from a slow terminal or pipe).
//
// Both work on fds epoll cannot watch too (a regular file or /dev/null on
// stdin or stdout, which never block). Loop thread only. Call Stop() before
// the loop is destroyed; the destructors do not touch the loop.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "net/event_loop.h"

namespace gpupool::cli {

// Reads chunks of up to 64 KiB once started, until end of file (or a read
// error, taken as the end) or Stop().
class FdReader {
 public:
  FdReader(net::EventLoop& loop, int fd, std::function<void(std::string_view)> on_data,
           std::function<void()> on_eof);
  void Start();
  // No on_data while paused; Pause may be called from inside on_data.
  void Pause() { paused_ = true; }
  void Resume();
  bool paused() const { return paused_; }
  void Stop();

 private:
  bool ReadOnce();  // false: stop watching
  void Watch();

  net::EventLoop& loop_;
  int fd_;
  bool pollable_;  // epoll can watch it; else reads never block
  std::function<void(std::string_view)> on_data_;
  std::function<void()> on_eof_;
  std::string buf_;
  bool started_ = false, paused_ = false, done_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // for posted reads
};

// Writes what it is given in order; bytes the fd does not take at once are
// kept and written when it becomes writable, then on_drained runs. After a
// write error (EPIPE: the reader went away) on_error runs once with errno
// and later bytes are dropped. Makes a pipe, socket or terminal fd
// non-blocking (see TerminalGuard for putting that back).
class FdWriter {
 public:
  FdWriter(net::EventLoop& loop, int fd, std::function<void()> on_drained,
           std::function<void(int err)> on_error);
  void Write(std::string_view bytes);
  size_t pending() const { return pending_.size() - offset_; }
  void Stop();

 private:
  // Writes from `data` until done or the fd would block; the bytes written.
  size_t WriteSome(std::string_view data);
  bool Flush();  // false: stop watching

  net::EventLoop& loop_;
  int fd_;
  std::function<void()> on_drained_;
  std::function<void(int)> on_error_;
  std::string pending_;
  size_t offset_ = 0;
  bool watching_ = false, failed_ = false;
};

}  // namespace gpupool::cli
