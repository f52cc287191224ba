// Downloading (and verifying) chunks while the caller writes the ones that
// came before: the pipeline of a restore.
//
// ChunkReadAhead runs `produce` on a thread of its own. What it hands to its
// sink waits in a queue of at most `max_bytes` (frames and bytes) until the
// caller takes it with Next(), in order. A producer that would pass the
// limit waits; one chunk larger than the limit still goes through alone.
//
// Destroying the read-ahead before the producer finished cancels it: its
// sink returns FailedPrecondition, so `produce` must stop at its sink's first error
// (HttpChunkStore::FetchMany does), and the destructor joins the thread.
//
// Thread-safety: Next() from one thread at a time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "blob/chunk_store.h"
#include "common/status.h"

namespace gpupool::blob {

class ChunkReadAhead {
 public:
  using Producer = std::function<Status(const ChunkSink& sink)>;

  explicit ChunkReadAhead(Producer produce, size_t max_bytes = size_t{64} << 20);
  ~ChunkReadAhead();
  ChunkReadAhead(const ChunkReadAhead&) = delete;
  ChunkReadAhead& operator=(const ChunkReadAhead&) = delete;

  // The next chunk, once it is there. After the last one: the producer's
  // error if it failed, else Internal (the caller asked for more than the
  // producer was to make).
  Result<VerifiedChunk> Next();

 private:
  Status Push(VerifiedChunk chunk);

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<VerifiedChunk> queue_;  // guarded by mu_
  size_t held_ = 0;                  // bytes in queue_; guarded by mu_
  bool done_ = false;                // the producer returned; guarded by mu_
  bool cancelled_ = false;           // guarded by mu_
  Status produced_;                  // what it returned; guarded by mu_
  const size_t max_bytes_;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace gpupool::blob
