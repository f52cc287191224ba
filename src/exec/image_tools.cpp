#include "exec/image_tools.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "common/disk_usage.h"
#include "common/units.h"
#include "exec/launch.h"

namespace gpupool::exec {
namespace {

// What a tool keeps of the agent's environment when it runs as an account:
// how to reach registries, nothing else (no credentials, no agent paths).
constexpr const char* kKeptEnv[] = {"PATH",         "http_proxy",  "https_proxy", "no_proxy",
                                    "HTTP_PROXY",   "HTTPS_PROXY", "NO_PROXY",    "SSL_CERT_FILE",
                                    "SSL_CERT_DIR", "TZ"};

// Clears the setuid and setgid bits of `name` in `dir_fd` (never through a
// symlink: fchmodat with AT_SYMLINK_NOFOLLOW).
Status ClearSetId(int dir_fd, const std::string& name, const struct stat& st,
                  const std::string& path) {
  if ((st.st_mode & (S_ISUID | S_ISGID)) == 0) return Status::Ok();
  if (::fchmodat(dir_fd, name.c_str(), st.st_mode & 01777, AT_SYMLINK_NOFOLLOW) != 0) {
    return Status::Internal("cannot chmod " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status SealBelow(int dir_fd, const std::string& where, bool to_root, int depth) {
  if (depth > 4096) return Status::Internal(where + ": the tree is too deep");
  GP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir_fd));
  for (const std::string& name : names) {
    const std::string path = where + "/" + name;
    if (to_root && ::fchownat(dir_fd, name.c_str(), 0, 0, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::Internal("cannot give " + path + " to root: " + std::strerror(errno));
    }
    GP_ASSIGN_OR_RETURN(struct stat st, StatEntry(dir_fd, name));
    if (S_ISLNK(st.st_mode)) continue;
    // A chown by root clears them from files already (Linux does for any
    // caller); say so explicitly rather than rely on it.
    GP_RETURN_IF_ERROR(ClearSetId(dir_fd, name, st, path));
    if (S_ISDIR(st.st_mode)) {
      GP_ASSIGN_OR_RETURN(UniqueFd sub, OpenEntry(dir_fd, name, st));
      GP_RETURN_IF_ERROR(SealBelow(sub.get(), path, to_root, depth + 1));
    }
  }
  return Status::Ok();
}

// skopeo repeats the image name ("initializing source oci-archive:/x.tar::
// ..."); the message already names it.
std::string SimplifySkopeoError(std::string line, const ImageRef& ref) {
  for (const std::string& lead :
       {"Error parsing image name \"" + ref.text + "\": ",
        "initializing source " + ref.text + ":: ", "initializing source " + ref.text + ": "}) {
    if (line.starts_with(lead)) return line.substr(lead.size());
  }
  return line;
}

}  // namespace

PullTools::PullTools(const FsIdentity& as, std::string work_dir)
    : as_(as),
      work_dir_(std::move(work_dir)),
      tool_dir_(as_.set() ? std::string(kPullMount) : work_dir_) {}

Result<CommandResult> PullTools::Run(std::vector<std::string> argv,
                                     const std::function<void(std::string_view)>& on_stdout_line,
                                     int64_t timeout_ms,
                                     const std::function<bool()>& cancelled) const {
  if (!as_.set()) return RunCommand(argv, on_stdout_line, timeout_ms, cancelled);
  // The mount point, empty and root's, on the host.
  if (::mkdir(kPullStage, 0755) != 0 && errno != EEXIST) {
    return Status::Internal(std::string("cannot create ") + kPullStage + ": " +
                            std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(kPullStage, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
    return Status::Internal(std::string(kPullStage) + " is not a directory of root's");
  }
  LaunchPlan plan;
  plan.argv = std::move(argv);
  plan.uid = as_.uid;
  plan.gid = as_.gid >= 0 ? as_.gid : as_.uid;
  plan.cwd = tool_dir_;
  plan.stage_dir = kPullStage;
  plan.stage_binds = {{work_dir_, "pull"}};
  plan.env = {"HOME=" + tool_dir_, "TMPDIR=" + tool_dir_};
  for (const char* name : kKeptEnv) {
    if (const char* v = std::getenv(name)) plan.env.push_back(std::string(name) + "=" + v);
  }
  return RunPlan(plan, on_stdout_line, timeout_ms, cancelled);
}

SizeWatch::SizeWatch(std::string dir, int64_t limit, std::function<bool()> cancelled,
                     std::chrono::milliseconds every)
    : dir_(std::move(dir)), limit_(limit), cancelled_(std::move(cancelled)), every_(every) {}

bool SizeWatch::operator()() {
  if (cancelled_ && cancelled_()) return true;
  if (limit_ <= 0) return false;
  auto now = std::chrono::steady_clock::now();
  if (now < next_) return false;
  int64_t used = DiskUsage(dir_);
  auto took = std::chrono::steady_clock::now() - now;
  next_ = now + std::max<std::chrono::steady_clock::duration>(every_, 5 * took);
  if (used <= limit_) return false;
  over_ = used;
  return true;
}

std::string ImagePrefix(const ImageRef& ref) { return "image " + ref.text + ": "; }

Status ToolFailure(const ImageRef& ref, const std::string& what, const std::string& tool,
                   const CommandResult& r, int64_t timeout_ms) {
  const std::string prefix = ImagePrefix(ref);
  if (r.timed_out) {
    return Status::DeadlineExceeded(prefix + what + ": " + tool + " timed out after " +
                                    FormatDurationMs(timeout_ms));
  }
  if (r.cancelled) return Status::Unavailable(prefix + what + ": stopped");
  std::string line = SimplifySkopeoError(LastErrorLine(r.stderr_tail), ref);
  if (line.empty()) {
    line = r.signal != 0 ? tool + " was killed by signal " + std::to_string(r.signal)
                         : tool + " exited with status " + std::to_string(r.exit_code);
  }
  if (!ref.local()) {
    if (line.find("manifest unknown") != std::string::npos ||
        line.find("name unknown") != std::string::npos) {
      return Status::NotFound(prefix + "not found: " + line);
    }
    return Status::Unavailable(prefix + what + ": " + line);
  }
  return Status::InvalidArgument(prefix + what + ": " + line);
}

// RunCommand's own failure (the tool could not be started).
Status NotRun(const ImageRef& ref, const std::string& what, const Status& s) {
  return Status(StatusCode::kFailedPrecondition, ImagePrefix(ref) + what + ": " + s.message());
}

Status SealRoot(const std::string& root, bool to_root) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::Internal("cannot open " + root + ": " + std::strerror(errno));
  if (to_root && ::fchown(fd.get(), 0, 0) != 0) {
    int e = errno;
    if (e == EPERM) return Status::PermissionDenied("cannot give " + root + " to root");
    return Status::Internal("cannot give " + root + " to root: " + std::strerror(e));
  }
  return SealBelow(fd.get(), root, to_root, 0);
}

}  // namespace gpupool::exec
