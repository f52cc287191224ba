// Directory trees into the chunk store and back: how a checkpoint or a job's
// input directory is uploaded (StoreTree) and restored (RestoreTree).
//
// StoreTree cuts every regular file into content-defined chunks
// (blob/chunker.h), asks the store which chunks it lacks, in batches, and
// puts only those, so a tree that changed a little costs only its changed
// chunks. It returns the tree's manifest (blob/manifest.h); the caller stores
// the manifest last, so a manifest never names a chunk that is not stored.
//
// While StoreTree reads and cuts the next batch of chunks, the previous one
// is hashed and offered to the store on another thread: the store is called
// from a thread other than the caller's (one call at a time).
//
// RestoreTree writes a manifest's tree into an empty directory, verifying
// every chunk it reads (a corrupt one is DataLoss and nothing half-written
// is left under a file's final name), optionally over an older tree on disk
// (RestoreBase) so that only what changed is read.
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
  // True for a chunk the store is known to hold (e.g. one of the tree's
  // previous upload): the store is not asked about it. Called from another
  // thread than the caller's. Empty: every chunk is asked about.
  std::function<bool(const ChunkId& id)> known_stored;
};

// Other kinds of files (sockets, devices, fifos) are left out.
Result<Manifest> StoreTree(const std::string& dir, ChunkStore& store,
                           const StoreTreeOptions& options = {}, TreeStats* stats = nullptr);

// A tree on disk that a restore may take files from: what RestoreTree made
// of `manifest` in `dir`, unchanged since (its bytes are trusted, not
// verified again: keep it where only the restorer writes). Files taken over
// are moved out of `dir`; the caller removes what is left.
struct RestoreBase {
  Manifest manifest;
  std::string dir;
};

struct RestoreStats {
  int64_t files = 0;
  int64_t bytes = 0;         // of the files
  int64_t reused_bytes = 0;  // already in place in base files taken over
  int64_t read_chunks = 0;   // asked of the store
};

// `dest` must not exist or be an empty directory. The chunks are read with
// one ChunkStore::ReadChunks call, in manifest order.
//
// With a `base`, each file of the manifest may take over the base file that
// holds the most of its bytes in place (the same chunk at the same offset,
// as the base manifest says), whatever its path, and then only its other
// chunks are read and written: a checkpoint that changed a little since the
// base is restored by moving the base's files and patching them.
Status RestoreTree(const Manifest& manifest, ChunkStore& store, const std::string& dest,
                   const RestoreBase* base = nullptr, RestoreStats* stats = nullptr);

}  // namespace gpupool::blob
