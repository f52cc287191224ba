// `gpupool submit` with a workdir: uploads the directory to the pool's blob
// store (only the chunks the server lacks travel), stores its manifest, and
// says what it cost. DIR/.gpupoolignore decides what is left out
// (blob/ignore.h). Runs on the calling thread; draws on stderr.
#pragma once

#include <cstdint>
#include <string>

#include "blob/tree.h"
#include "cli/client.h"
#include "common/status.h"

namespace gpupool::cli {

struct WorkdirUpload {
  std::string manifest;       // the manifest id: the job's `inputs`
  blob::TreeStats stats;      // files, bytes, new chunks, bytes uploaded
  int64_t unique_chunks = 0;  // distinct chunks of the tree
  int64_t took_ms = 0;
};

// `progress`: redraw a one-line progress bar on stderr (bytes scanned of the
// total, bytes uploaded, rate) at most ten times a second; the caller
// decides (a TTY, not --quiet). The line is cleared at the end.
Result<WorkdirUpload> UploadWorkdir(const Endpoint& e, const std::string& dir, bool progress);

// "uploaded 3.1 MiB of 812 MiB (12 new chunks of 4031) in 0.4 s"
std::string UploadSummary(const WorkdirUpload& u);

}  // namespace gpupool::cli
