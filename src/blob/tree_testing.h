// Test helpers for tests of trees in the blob store: files of random bytes
// and a store that counts what a restore reads. Header-only; tests only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "blob/chunk_store.h"

namespace gpupool::blob::testing {

inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Writes `data` to `p`, creating its directories.
inline void Write(const std::filesystem::path& p, const std::string& data) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
}

// Passes everything to `inner`, counting the chunks read through Get (which
// the default ReadChunks uses) and the ids asked about; `delay` slows each
// read down.
struct CountingStore : ChunkStore {
  explicit CountingStore(ChunkStore& inner) : inner(inner) {}
  Result<std::vector<ChunkId>> Missing(const std::vector<ChunkId>& ids) override {
    asked += static_cast<int>(ids.size());
    return inner.Missing(ids);
  }
  Status Put(const ChunkId& id, std::string_view frame) override { return inner.Put(id, frame); }
  Result<std::string> Get(const ChunkId& id) override {
    ++reads;
    std::this_thread::sleep_for(delay);
    return inner.Get(id);
  }
  Status Remove(const ChunkId& id) override { return inner.Remove(id); }
  Result<std::vector<ChunkId>> List() override { return inner.List(); }

  ChunkStore& inner;
  std::atomic<int> reads{0};
  std::atomic<int> asked{0};  // ids asked about (Missing)
  std::chrono::milliseconds delay{0};
};

}  // namespace gpupool::blob::testing
