// A manifest: what one checkpoint or one job-input tree holds, as a list of
// entries (files, directories, symlinks) and, for each file, the chunks
// (blob/chunk_store.h) its bytes are made of, in order. A manifest is stored
// and sent as JSON; its id is the SHA-256 of that text (ManifestId), so it
// is verified like a chunk.
//
//   {"version": 1,
//    "entries": [{"path": "model", "type": "dir", "mode": 493},
//                {"path": "model/weights.pt", "type": "file", "mode": 420,
//                 "size": 81920, "chunks": [["3f9a...", 65536], ["b71c...", 16384]]},
//                {"path": "latest", "type": "symlink", "target": "model"}]}
//
// Decoding is strict, because a manifest decides where files are written
// when a checkpoint is restored: paths are relative, made of non-empty
// components other than "." and "..", unique, and every directory a path
// lies under is listed before it as a dir entry; symlink targets must stay
// inside the tree; chunk sizes sum to the file's size; counts are bounded.
// Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "blob/chunk_store.h"
#include "common/status.h"

namespace gpupool::blob {

struct ChunkRef {
  ChunkId id;
  int64_t size = 0;  // uncompressed bytes
  friend bool operator==(const ChunkRef&, const ChunkRef&) = default;
};

enum class EntryType { kFile, kDir, kSymlink };

struct ManifestEntry {
  std::string path;  // relative, '/'-separated
  EntryType type = EntryType::kFile;
  uint32_t mode = 0644;          // permission bits (masked to 0777); 0 for symlinks
  int64_t size = 0;              // files
  std::vector<ChunkRef> chunks;  // files
  std::string target;            // symlinks
  friend bool operator==(const ManifestEntry&, const ManifestEntry&) = default;
};

struct Manifest {
  std::vector<ManifestEntry> entries;
  // Sum of the files' sizes.
  int64_t TotalBytes() const;
  // Every chunk id it uses, each once, in first-use order.
  std::vector<ChunkId> ChunkIds() const;
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

// Limits a decoded manifest must keep. The chunk count is what the largest
// manifest text could hold anyway (a chunk reference takes about 70 bytes);
// with it, and chunks of at most kMaxChunkBytes, no sum of sizes can
// overflow. The JSON limits: strings no longer than a path, values no more
// than 1M entries and 4M chunks need.
inline constexpr size_t kMaxManifestEntries = 1'000'000;
inline constexpr size_t kMaxManifestChunks = size_t{1} << 22;  // in all files together
inline constexpr size_t kMaxManifestBytes = 256 << 20;
inline constexpr size_t kMaxPathBytes = 4096;                      // paths and symlink targets
inline constexpr size_t kMaxManifestJsonValues = size_t{1} << 25;  // 32M

std::string EncodeManifest(const Manifest& m);
// InvalidArgument naming the entry ("entries[3].path: must not contain \"..\"").
Result<Manifest> DecodeManifest(std::string_view text);
// The rules DecodeManifest enforces beyond the JSON's shape, for a manifest
// built in memory: relative paths, each once, under directories listed
// before them; files' chunks well formed and summing to their size;
// symlinks that stay inside. InvalidArgument naming the entry.
Status ValidateManifest(const Manifest& m);
// The id of an encoded manifest (SHA-256 of its text).
ChunkId ManifestId(std::string_view encoded);

// Whether `path` is a relative path as manifests allow it; the reason if not.
Status CheckRelativePath(std::string_view path);

}  // namespace gpupool::blob
