// Small file helpers with errors as values. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace gpupool {

// Whether `path` names something (a symbolic link: what it points to).
bool PathExists(const std::string& path);

// The whole file; NotFound when it cannot be opened.
Result<std::string> ReadFile(const std::string& path);

// ReadFile without trailing newlines and spaces (token and URL files).
Result<std::string> ReadFileTrimmed(const std::string& path);

struct WriteOptions {
  int mode = 0644;
  bool fsync = false;  // flush to disk before the rename (survives power loss)
};

// Writes `content` to a temporary file beside `path` and renames it over
// `path`, so readers see the old or the new content, never a part.
Status WriteFileAtomic(const std::string& path, const std::string& content,
                       WriteOptions options = {});

// fsync of a file, or of a directory (its entries: a rename in it).
Status SyncPath(const std::string& path, bool directory);

// Creates `path`, which must not exist, with `content`: cheaper than
// WriteFileAtomic (no rename), for a file nobody reads before it is written
// whole (one in a directory made just now, read by a process started
// after). Fails when it exists.
Status WriteNewFile(const std::string& path, const std::string& content, int mode = 0644);

}  // namespace gpupool
