// Test helpers for the blob store tests: uploads made of real chunks and a
// real manifest. Header-only; tests only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "blob/chunk_records.h"
#include "blob/chunk_store.h"
#include "blob/manifest.h"

namespace gpupool::server::testing {

// A directory tree to upload: one file per content, each its own chunk.
struct Upload {
  std::vector<blob::ChunkFrame> frames;  // (chunk id, zstd frame), one per file
  std::string manifest;                  // its encoded text
  std::string id;                        // ManifestId(manifest)
  int64_t bytes = 0;

  std::vector<std::string> ChunkIds() const {
    std::vector<std::string> ids;
    for (const auto& f : frames) ids.push_back(f.first);
    return ids;
  }
  std::string Records() const { return blob::EncodeChunkRecords(frames); }
};

inline Upload MakeUpload(const std::vector<std::string>& contents) {
  Upload u;
  blob::Manifest m;
  m.entries.push_back({"data", blob::EntryType::kDir, 0755, 0, {}, ""});
  for (size_t i = 0; i < contents.size(); ++i) {
    const std::string& c = contents[i];
    auto bytes = std::span(reinterpret_cast<const uint8_t*>(c.data()), c.size());
    std::string id = blob::ComputeChunkId(bytes);
    u.frames.emplace_back(id, *blob::CompressChunk(bytes));
    blob::ManifestEntry e;
    e.path = "data/file" + std::to_string(i);
    e.size = static_cast<int64_t>(c.size());
    e.chunks = {{id, e.size}};
    m.entries.push_back(e);
    u.bytes += e.size;
  }
  u.manifest = blob::EncodeManifest(m);
  u.id = blob::ManifestId(u.manifest);
  return u;
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "gpupool-blobsrv-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gpupool::server::testing
