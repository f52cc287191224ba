#include "blob/read_ahead.h"

#include <utility>

namespace gpupool::blob {

namespace {

size_t SizeOf(const VerifiedChunk& c) { return c.frame.size() + c.bytes.size(); }

}  // namespace

ChunkReadAhead::ChunkReadAhead(Producer produce, size_t max_bytes) : max_bytes_(max_bytes) {
  thread_ = std::thread([this, produce = std::move(produce)] {
    Status s = produce([this](VerifiedChunk c) { return Push(std::move(c)); });
    std::lock_guard lock(mu_);
    produced_ = std::move(s);
    done_ = true;
    changed_.notify_all();
  });
}

ChunkReadAhead::~ChunkReadAhead() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    changed_.notify_all();
  }
  thread_.join();
}

Status ChunkReadAhead::Push(VerifiedChunk chunk) {
  std::unique_lock lock(mu_);
  changed_.wait(
      lock, [&] { return cancelled_ || queue_.empty() || held_ + SizeOf(chunk) <= max_bytes_; });
  if (cancelled_) return Status::FailedPrecondition("the reader stopped");
  held_ += SizeOf(chunk);
  queue_.push_back(std::move(chunk));
  changed_.notify_all();
  return Status::Ok();
}

Result<VerifiedChunk> ChunkReadAhead::Next() {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (queue_.empty()) {
    if (!produced_.ok()) return produced_;
    return Status::Internal("read ahead: the producer ended before the chunk asked for");
  }
  VerifiedChunk c = std::move(queue_.front());
  queue_.pop_front();
  held_ -= SizeOf(c);
  changed_.notify_all();
  return c;
}

}  // namespace gpupool::blob
