// Small file helpers with errors as values. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace gpupool {

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

}  // namespace gpupool
