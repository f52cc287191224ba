// How the image cache (exec/image_cache.h) handles what anyone's registry
// sent: skopeo and umoci run as an unprivileged account, the bytes they
// write are bounded, and the root they unpack is sealed before anyone uses
// it.
//
// - PullTools: runs skopeo and umoci for one pull as a task's account:
//   in a private mount namespace where the pull's own directory is bound
//   at kPullMount (the account cannot traverse the agent's data directory
//   to it), with the account's uid and gid, no supplementary group but its
//   own, no capabilities, no_new_privs, and a clean environment (PATH, the
//   proxy and CA variables; HOME and TMPDIR in the pull's directory). A
//   malicious layer that makes umoci write outside its bundle, create
//   device nodes or hard-link host files then meets that account's
//   permissions, not root's.
// - SizeWatch: a RunCommand cancel hook that measures a directory while a
//   tool writes into it and stops the tool once it passes a limit (a layer
//   that decompresses to far more than it declared).
// - SealRoot: an unpacked root's files given to root:root (through
//   directory descriptors, no symlink followed) with every setuid and
//   setgid bit cleared: the unpacking account can no longer change a
//   published root, and no file of an image can raise anyone's privileges
//   on the host, where the cache's roots are reachable (DIR/roots is 0711).
//   An agent that is not root clears the bits (the files are its own).
//
// Thread-safety: free functions are reentrant; a SizeWatch belongs to one
// RunCommand call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/safe_fs.h"
#include "common/status.h"
#include "exec/subprocess.h"
#include "model/image_ref.h"

namespace gpupool::exec {

// Where the tools see a pull's directory when they run as an account:
// a tmpfs of their own mount namespace on kPullStage (created empty on the
// host once), the directory bound on it.
inline constexpr const char* kPullStage = "/run/gpupool-image-pull";
inline constexpr const char* kPullMount = "/run/gpupool-image-pull/pull";

class PullTools {
 public:
  // `work_dir`: the pull's directory, `as`'s own. `as` unset: the tools run
  // as the agent, with its environment, and see `work_dir` where it is.
  PullTools(const FsIdentity& as, std::string work_dir);

  // The pull's directory as the tools see it.
  const std::string& dir() const { return tool_dir_; }

  // RunCommand (or RunPlan, as the account) of `argv`.
  Result<CommandResult> Run(std::vector<std::string> argv,
                            const std::function<void(std::string_view)>& on_stdout_line,
                            int64_t timeout_ms, const std::function<bool()>& cancelled) const;

 private:
  const FsIdentity as_;
  const std::string work_dir_;
  const std::string tool_dir_;
};

class SizeWatch {
 public:
  // Measures `dir` at most every `every` (longer when a measurement itself
  // takes long: at most a fifth of the time goes to measuring). `limit` <= 0:
  // never stops the tool for its size. `cancelled`: asked first, as
  // RunCommand would.
  SizeWatch(std::string dir, int64_t limit, std::function<bool()> cancelled,
            std::chrono::milliseconds every = std::chrono::milliseconds(500));

  // The hook: true once cancelled, or once `dir` took more than the limit.
  bool operator()();
  // The size that passed the limit (0: it was not passed).
  int64_t over() const { return over_; }

 private:
  const std::string dir_;
  const int64_t limit_;
  const std::function<bool()> cancelled_;
  const std::chrono::milliseconds every_;
  std::chrono::steady_clock::time_point next_{};
  int64_t over_ = 0;
};

// "image <text>: ", how every error about an image starts.
std::string ImagePrefix(const ImageRef& ref);

// A tool that ran and failed, as an error of the image (image_cache.h
// lists them): DeadlineExceeded on a timeout, Unavailable when cancelled or
// for a registry's trouble, NotFound for an unknown registry image,
// InvalidArgument for a local file that is no usable image; each ends with
// the tool's own last stderr line.
Status ToolFailure(const ImageRef& ref, const std::string& what, const std::string& tool,
                   const CommandResult& r, int64_t timeout_ms);

// RunCommand's own failure (the tool could not be started):
// FailedPrecondition.
Status NotRun(const ImageRef& ref, const std::string& what, const Status& s);

// Clears the setuid and setgid bits of everything under `root` and, with
// `to_root`, gives it all to root:root first (which needs root:
// PermissionDenied otherwise). No symlink is followed.
Status SealRoot(const std::string& root, bool to_root);

}  // namespace gpupool::exec
