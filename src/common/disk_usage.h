// DiskUsage: the one walker that sums what a directory tree takes on disk,
// for every limit and measurement that needs it (a job's disk limit in the
// shim, an image bundle's size in the image cache and while it unpacks).
//
// What it counts: st_blocks * 512 of every entry (allocated blocks, like
// du: a sparse file's holes cost nothing), each inode once (hard links),
// symlinks not followed, other mounts not entered (a mount point itself is
// skipped with whatever it holds). Entries that vanish midway are skipped; a
// directory that cannot be opened (no permission, out of descriptors,
// swapped for another since it was listed) counts its own blocks only.
//
// A hostile tree (a job's work directory) cannot lead it elsewhere: every
// entry is opened relative to its parent's descriptor with O_NOFOLLOW, and a
// directory is entered only if the opened one is still the one listed (same
// device and inode). It holds one descriptor per directory level of the
// current path (no recursion, so a deep tree costs no stack).
//
// Reentrant; reads only.
#pragma once

#include <cstdint>
#include <string>

namespace gpupool {

struct DiskUsageOptions {
  // Whether `path` itself counts (a file's size, a directory's own blocks),
  // or only what is below it.
  bool count_root = true;
  // Stops once the count passes this (0: counts all) and returns what it
  // has, so a check against a limit costs no more than the limit's worth of
  // entries.
  int64_t stop_after = 0;
};

// The bytes the tree at `path` takes (see above); 0 when `path` does not
// exist or cannot be looked at. `path` may be a file.
int64_t DiskUsage(const std::string& path, const DiskUsageOptions& options = {});

}  // namespace gpupool
