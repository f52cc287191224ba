#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

namespace gpupool::server {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
  // `dropped` is destroyed here, outside the lock: a task's captures may
  // run code (a Responder answering 500) that must not hold it.
}

void WorkerPool::Submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void WorkerPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace gpupool::server
