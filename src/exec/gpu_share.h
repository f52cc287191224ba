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
//     want           the compute share's want file (gpushare/share_files.h),
//                    64 zero bytes, owned by the task's account, 0600: the
//                    library stamps it when the job launches kernels
//     grant          the compute share's grant file, 64 zero bytes, 0644,
//                    the agent's: the agent's share loop writes it
//                    (agent/share_loop.h)
//
// and in Start gives them to the job. The sandbox binds them (exec/sandbox.h):
//
//   /gpupool/share/libgpushare.so  the library, read-only
//   /gpupool/share/limits          the limits, read-only
//   /gpupool/share/usage           the ledger, read-write
//   /gpupool/share/want            the want file, read-write
//   /gpupool/share/grant           the grant file, read-only
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
  bool strict = false;         // the compute share's mode: strict, else work-conserving
  // An MPS GPU (agent/mps.h): its control daemon's pipe directory on this
  // machine, which the executor gives the job with the MPS client's
  // variables (exec/mps_client.h); MPS then holds the compute share, not
  // the agent's share loop. Empty: no MPS.
  std::string mps_pipe_dir = {};
  // Its daemon's /dev/shm (MPS's shared memory), bound over the job's own;
  // empty: the job keeps a private /dev/shm.
  std::string mps_shm_dir = {};
  friend bool operator==(const GpuShare&, const GpuShare&) = default;
};

// Where the job finds the interposer's files inside the sandbox.
inline constexpr const char* kShareLibraryInJob = "/gpupool/share/libgpushare.so";
inline constexpr const char* kShareLimitsInJob = "/gpupool/share/limits";
inline constexpr const char* kShareUsageInJob = "/gpupool/share/usage";
inline constexpr const char* kShareWantInJob = "/gpupool/share/want";
inline constexpr const char* kShareGrantInJob = "/gpupool/share/grant";
// The directory of the job's share files inside the sandbox.
inline constexpr const char* kShareDirInJob = "/gpupool/share";

// The task's files (see above) in `task_dir`.
struct GpuShareFiles {
  std::string dir;
  std::string limits;
  std::string usage;
  std::string preload;
  std::string want;
  std::string grant;
};
GpuShareFiles GpuShareFilesIn(const std::string& task_dir);

// The limits file's text for `share`, naming the ledger and the compute
// share's files in `dir_in_job` (the directory where the job sees them):
// "gpushare 1\nmemory_bytes N\nshare_milli M\nmode work-conserving\n
// usage DIR/usage\nwant DIR/want\ngrant DIR/grant\n" (mode strict for a
// strict share).
std::string GpuShareLimitsText(const GpuShare& share, std::string_view dir_in_job);

// The preload file's text: the library as the job sees it, one line.
std::string GpuSharePreloadText();

// Whether `path` (ExecConfig::gpushare_library) can be injected: an
// absolute path of a readable regular file. FailedPrecondition saying why
// otherwise ("GPU sharing is not available on this node: ...").
Status CheckGpushareLibrary(const std::string& path);

// Writes the task's files (replacing any left from before): the limits
// naming the files in `dir_in_job`, the preload file, the grant file, and
// an empty ledger and a zeroed want file given to `uid`/`gid` (uid < 0:
// left to this process's account).
// The directory must be `task_dir`'s own, not the job's: nothing there is
// followed through a symlink.
Status WriteGpuShareFiles(const std::string& task_dir, const GpuShare& share,
                          std::string_view dir_in_job, int uid, int gid);

}  // namespace gpupool::exec
