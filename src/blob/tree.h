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
//
// Both may face a tree that someone else changes meanwhile (a job writing
// its checkpoint directory while the agent uploads it): they work only
// through directory descriptors and never follow a symlink
// (common/safe_fs.h). StoreTree opens each entry relative to its parent's
// descriptor and checks that what it opened is what it listed; an entry
// that changed in between is left out and counted (TreeStats::skipped), so
// a directory swapped for a symlink to elsewhere is never entered. A root
// caller reading for an unprivileged account gives StoreTreeOptions::read_as,
// and every open is then made with that account's permissions. RestoreTree
// makes directories with mkdirat, files with O_EXCL | O_NOFOLLOW, renames
// within the destination, and symlinks last: nothing is written through a
// link or outside the destination.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "blob/chunk_store.h"
#include "blob/chunker.h"
#include "blob/manifest.h"
#include "common/safe_fs.h"
#include "common/status.h"

namespace gpupool::blob {

struct TreeStats {
  int64_t files = 0;
  int64_t bytes = 0;           // of the files
  int64_t chunks = 0;          // chunk references in the manifest
  int64_t new_chunks = 0;      // chunks the store lacked and got
  int64_t uploaded_bytes = 0;  // compressed bytes of those
  // Entries left out because they changed between their listing and their
  // opening (became a symlink, were swapped or removed), and the first few
  // of them: "path (changed while being read)".
  int64_t skipped = 0;
  std::vector<std::string> skipped_examples;
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
  // A directory above `dir` that the caller trusts: `dir` is then reached
  // from it with no symlink followed (openat2 RESOLVE_BENEATH |
  // RESOLVE_NO_SYMLINKS), so a tree whose own location another party can
  // change (a job's checkpoint directory inside its work directory) cannot
  // be redirected. Empty: `dir` is opened by its path, symlinks on the way
  // followed (a user's own directory).
  std::string beneath;
  // The account whose permissions every open of the walk is made with (the
  // calling thread's file-system identity, switched for each open): a root
  // agent reads a job's tree as the job's uid, so that nothing the job could
  // not read itself can end up in the manifest. Unset: the process's own.
  FsIdentity read_as;
};

// Symlinks are stored as symlinks (never followed); other kinds of files
// (sockets, devices, fifos) are left out. An entry the reader may not open
// fails the walk (PermissionDenied naming it); one that changed meanwhile
// is left out (TreeStats::skipped). A file is read up to the size it had
// when listed.
Result<Manifest> StoreTree(const std::string& dir, ChunkStore& store,
                           const StoreTreeOptions& options = {}, TreeStats* stats = nullptr);

// A tree on disk that a restore may take files from: what RestoreTree made
// of `manifest` in `dir`, unchanged since (its bytes are trusted, not
// verified again: keep it where only the restorer writes). Files taken over
// are moved out of `dir` (renameat between directory descriptors; a base
// file reached only through a symlink is not used); the caller removes what
// is left.
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

// `dest` must not exist or be an empty directory; it is never followed if
// it is a symlink (FailedPrecondition), while its parents are resolved as
// usual (the caller's own path). The chunks are read with one
// ChunkStore::ReadChunks call, in manifest order.
//
// With a `base`, each file of the manifest may take over the base file that
// holds the most of its bytes in place (the same chunk at the same offset,
// as the base manifest says), whatever its path, and then only its other
// chunks are read and written: a checkpoint that changed a little since the
// base is restored by moving the base's files and patching them.
Status RestoreTree(const Manifest& manifest, ChunkStore& store, const std::string& dest,
                   const RestoreBase* base = nullptr, RestoreStats* stats = nullptr);

}  // namespace gpupool::blob
