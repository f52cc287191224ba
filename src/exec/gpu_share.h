// GPU shares held to their memory cap by the CUDA driver interposer
// libgpushare.so (src/gpushare): what the executors give a task whose GPU
// is shared, and the files they make for it.
//
// The agent decides which tasks are capped and at what (agent/task_gpus.h)
// and hands the executor a GpuShare. The executor then, in Prepare, writes
// the task's files in its task directory, which the job cannot write:
//
//   TASK_DIR/gpushare/            the agent's, 0755
//     limits         the limits (gpushare/limits.h format), 0644, the agent's
//     usage          the task's usage ledger (gpushare/ledger.h): created
//                    empty, owned by the task's account, 0600; the library
//                    sizes it on first use
//     ld.so.preload  "/gpupool/share/libgpushare.so\n", 0644, the agent's
//
// and in Start gives them to the job. The sandbox binds them (exec/sandbox.h):
//
//   /gpupool/share/libgpushare.so  the library, read-only
//   /gpupool/share/limits          the limits, read-only
//   /gpupool/share/usage           the ledger, read-write
//   /etc/ld.so.preload             the preload file, read-only: the dynamic
//                                  loader maps the library into every
//                                  dynamically linked process of the job,
//                                  whatever its environment says
//
// The process executor (no isolation) sets LD_PRELOAD and GPUSHARE_LIMITS
// instead, which the job can undo: advisory only. docker and podman do not
// inject the library (see container_command.h).
//
// Pure functions except CheckGpushareLibrary (stat) and WriteGpuShareFiles.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::exec {

// A task's GPU share as libgpushare.so enforces it.
struct GpuShare {
  int64_t memory_bytes = 0;    // cap per GPU for the whole task (> 0)
  int32_t share_milli = 1000;  // compute share in thousandths; 1000 = whole
  friend bool operator==(const GpuShare&, const GpuShare&) = default;
};

// Where the job finds the interposer's files inside the sandbox.
inline constexpr const char* kShareLibraryInJob = "/gpupool/share/libgpushare.so";
inline constexpr const char* kShareLimitsInJob = "/gpupool/share/limits";
inline constexpr const char* kShareUsageInJob = "/gpupool/share/usage";

// The task's files (see above) in `task_dir`.
struct GpuShareFiles {
  std::string dir;
  std::string limits;
  std::string usage;
  std::string preload;
};
GpuShareFiles GpuShareFilesIn(const std::string& task_dir);

// The limits file's text for `share`, naming `usage_path` as the ledger
// (as the job sees it): "gpushare 1\nmemory_bytes N\nshare_milli M\n
// mode work-conserving\nusage PATH\n".
std::string GpuShareLimitsText(const GpuShare& share, std::string_view usage_path);

// The preload file's text: the library as the job sees it, one line.
std::string GpuSharePreloadText();

// Whether `path` (ExecConfig::gpushare_library) can be injected: an
// absolute path of a readable regular file. FailedPrecondition saying why
// otherwise ("GPU sharing is not available on this node: ...").
Status CheckGpushareLibrary(const std::string& path);

// Writes the task's files (replacing any left from before): the limits
// naming `usage_in_job` as the ledger, the preload file, and an empty
// ledger given to `uid`/`gid` (uid < 0: left to this process's account).
// The directory must be `task_dir`'s own, not the job's: nothing there is
// followed through a symlink.
Status WriteGpuShareFiles(const std::string& task_dir, const GpuShare& share,
                          std::string_view usage_in_job, int uid, int gid);

}  // namespace gpupool::exec
