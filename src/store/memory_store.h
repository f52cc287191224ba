// MemoryStore: the Store backend that keeps everything in memory. The
// simulator runs the server's code against it; tests use it where a real
// database adds nothing.
//
// Contract (beyond store/store.h, which it follows in full: it passes the
// shared conformance suite in store/store_conformance.h):
// - Nothing survives the process. A MemoryStore made over the MemoryState
//   of an earlier one (Over) sees everything that one committed, which is
//   how the conformance suite's "reopen" is met and how a caller hands a
//   store's contents on.
// - Transact keeps an undo log of every change the callback makes (to the
//   tables and to their indexes); when the callback returns an error or
//   throws, the log is replayed backwards, so a failed transaction leaves
//   nothing behind, counters (ids, cursors, sequence numbers) included.
//   Calling Transact inside a callback is FailedPrecondition, as for SQLite.
// - Its errors are the codes store.h names (NotFound, AlreadyExists); it
//   never fails otherwise.
// - Its behaviour is SQLite's wherever store.h leaves room (the order of
//   equal keys, the log and storage bookkeeping), so a simulation behaves
//   as the server does. Log "chunks" are runs of kMemoryLogChunkLines lines
//   of a job; stored_bytes counts what a line holds in memory.
// - Cost: lookups by key are O(log n); ListJobs by state or owner and
//   ListAttempts by job, node or liveness walk an index, not every row.
//
// Threading: like every Store, one thread at a time; two stores over one
// MemoryState must not be used at the same time either.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "common/status.h"
#include "store/store.h"

namespace gpupool {

// Lines of a job's log that DeleteRemovedLogChunks frees as one chunk.
inline constexpr int64_t kMemoryLogChunkLines = 1024;

struct MemoryState;  // the tables and their indexes (store/memory_tables.h)

class MemoryStore : public Store {
 public:
  // An empty store.
  MemoryStore();
  // A store over the state of an earlier one (see the contract).
  static std::unique_ptr<MemoryStore> Over(std::shared_ptr<MemoryState> state);
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  Status Transact(const std::function<Status(Tx&)>& fn) override;

  // What this store holds; pass it to Over to keep it after this store.
  std::shared_ptr<MemoryState> state() const { return state_; }

 private:
  explicit MemoryStore(std::shared_ptr<MemoryState> state);
  std::shared_ptr<MemoryState> state_;
};

}  // namespace gpupool
