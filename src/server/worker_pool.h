// WorkerPool: a few threads that run slow tasks (disk reads and writes,
// decompression, hashing) off the server's event loop.
//
// Submit() may be called from any thread. Tasks run in submission order on
// whichever thread is free, several at a time. A task that needs the Pool or
// the store posts its continuation back to the event loop
// (net::EventLoop::Post); a net::Responder may be called from a task
// directly.
//
// The destructor waits for the running tasks and destroys the queued ones
// without running them (a Responder they hold then answers 500), so destroy
// the WorkerPool before whatever its tasks refer to (the event loop).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpupool::server {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(std::function<void()> task);

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace gpupool::server
