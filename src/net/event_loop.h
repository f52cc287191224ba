// EventLoop: one thread that runs callbacks, timers, fd watches and signal
// handlers, in the order they become ready. Wraps a boost::asio::io_context
// so that code outside net/ never includes Asio or Beast.
//
// Threading: Run() is called from one thread; every callback runs on it.
// Post() may be called from any thread; everything else only from the loop
// thread (or before Run starts).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>

namespace gpupool::net {

class EventLoop {
 public:
  using TimerId = uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs until Stop() is called. Callbacks run on the calling thread.
  void Run();
  // Makes Run() return soon; safe from any thread.
  void Stop();

  // Runs `fn` on the loop thread soon. Thread-safe.
  void Post(std::function<void()> fn);

  // Runs `fn` once after `delay_ms`; Cancel() before it fires prevents it.
  TimerId RunAfter(int64_t delay_ms, std::function<void()> fn);
  void Cancel(TimerId id);

  // Calls `fn` each time one of the signals arrives (e.g. SIGINT, SIGTERM).
  void OnSignals(std::initializer_list<int> signals, std::function<void(int)> fn);

  // Calls `fn` whenever `fd` becomes readable, until UnwatchFd(fd) or until
  // `fn` returns false. The loop does not own or close the fd; it does put it
  // in non-blocking mode (and leaves it so). Unwatch before closing the fd.
  void WatchReadable(int fd, std::function<bool()> fn);
  // Calls `fn` whenever `fd` becomes writable, until UnwatchFd(fd) or until
  // `fn` returns false (typically once the pending bytes are written). Read
  // and write watches of one fd are independent; UnwatchFd ends both.
  void WatchWritable(int fd, std::function<bool()> fn);
  void UnwatchFd(int fd);

  // The underlying boost::asio::io_context, for code inside net/ only.
  void* native_handle();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool::net
