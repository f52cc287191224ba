// Directory trees into the chunk store and back: how a checkpoint or a job's
// input directory is uploaded (StoreTree) and restored (RestoreTree).
//
// StoreTree cuts every regular file into content-defined chunks
// (blob/chunker.h), asks the store which chunks it lacks, in batches, and
// puts only those, so a tree that changed a little costs only its changed
// chunks. It returns the tree's manifest (blob/manifest.h); the caller stores
// the manifest last, so a manifest never names a chunk that is not stored.
//
// While StoreTree cuts and hashes the next batch of chunks, the previous one
// is offered to the store on another thread: the store is called from a
// thread other than the caller's (one call at a time).
//
// RestoreTree writes a manifest's tree into an empty directory, verifying
// every chunk (a corrupt one is DataLoss and nothing half-written is left
// under a file's final name).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "blob/chunk_store.h"
#include "blob/chunker.h"
#include "blob/manifest.h"
#include "common/status.h"

namespace gpupool::blob {

struct TreeStats {
  int64_t files = 0;
  int64_t bytes = 0;           // of the files
  int64_t chunks = 0;          // chunk references in the manifest
  int64_t new_chunks = 0;      // chunks the store lacked and got
  int64_t uploaded_bytes = 0;  // compressed bytes of those
};

struct StoreTreeOptions {
  ChunkerOptions chunker;
  int zstd_level = 3;
  // Returns true for a path (relative, '/'-separated; directories too) to
  // leave out, e.g. from a .gpupoolignore. Empty: keep everything.
  std::function<bool(const std::string& path, bool is_dir)> ignore;
  // Called as files are read, with the file bytes chunked so far (all
  // files), after every chunk: a progress bar's "scanned". Empty: not called.
  std::function<void(int64_t scanned_bytes)> on_scanned;
};

// Other kinds of files (sockets, devices, fifos) are left out.
Result<Manifest> StoreTree(const std::string& dir, ChunkStore& store,
                           const StoreTreeOptions& options = {}, TreeStats* stats = nullptr);

// `dest` must not exist or be an empty directory. The store is asked to
// Prefetch every chunk first.
Status RestoreTree(const Manifest& manifest, ChunkStore& store, const std::string& dest);

}  // namespace gpupool::blob
