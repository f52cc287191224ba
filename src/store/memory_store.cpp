#include "store/memory_store.h"

#include <utility>

#include "store/memory_tables.h"

namespace gpupool {

MemoryStore::MemoryStore() : state_(std::make_shared<MemoryState>()) {}
MemoryStore::MemoryStore(std::shared_ptr<MemoryState> state) : state_(std::move(state)) {}
MemoryStore::~MemoryStore() = default;

std::unique_ptr<MemoryStore> MemoryStore::Over(std::shared_ptr<MemoryState> state) {
  if (state == nullptr) return std::make_unique<MemoryStore>();
  return std::unique_ptr<MemoryStore>(new MemoryStore(std::move(state)));
}

Status MemoryStore::Transact(const std::function<Status(Tx&)>& fn) {
  MemoryState& s = *state_;
  if (s.in_tx) {
    return Status::FailedPrecondition(
        "Store::Transact called inside another transaction (nested transactions are not "
        "supported)");
  }
  s.in_tx = true;
  MemoryTx tx(s);
  Status st;
  try {
    st = fn(tx);
  } catch (...) {
    s.journal.Rollback();
    s.in_tx = false;
    throw;
  }
  if (st.ok()) {
    s.journal.Commit();
  } else {
    s.journal.Rollback();
  }
  s.in_tx = false;
  return st;
}

}  // namespace gpupool
