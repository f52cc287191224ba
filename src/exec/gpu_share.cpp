#include "exec/gpu_share.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/safe_fs.h"
#include "gpushare/share_files.h"

namespace gpupool::exec {
namespace {

constexpr const char* kShareDirName = "gpushare";

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Creates `name` in `dir_fd` afresh (whatever was there is removed first,
// never followed) holding `content`, with `mode`, owned by uid:gid when
// uid >= 0.
Status WriteNewFile(int dir_fd, const std::string& dir, const char* name, std::string_view content,
                    mode_t mode, int uid, int gid) {
  const std::string path = dir + "/" + name;
  if (::unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT) {
    return Status::Internal(Errno("cannot replace " + path));
  }
  UniqueFd fd(::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return Status::Internal(Errno("cannot create " + path));
  while (!content.empty()) {
    ssize_t n = ::write(fd.get(), content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal(Errno("cannot write " + path));
    content.remove_prefix(static_cast<size_t>(n));
  }
  if (::fchmod(fd.get(), mode) != 0) return Status::Internal(Errno("cannot chmod " + path));
  if (uid >= 0 && ::fchown(fd.get(), static_cast<uid_t>(uid), static_cast<gid_t>(gid)) != 0) {
    return Status::Internal(Errno("cannot give " + path + " to uid " + std::to_string(uid)));
  }
  return Status::Ok();
}

}  // namespace

GpuShareFiles GpuShareFilesIn(const std::string& task_dir) {
  std::string dir = task_dir + "/" + kShareDirName;
  return {dir,           dir + "/limits", dir + "/usage", dir + "/ld.so.preload",
          dir + "/want", dir + "/grant"};
}

std::string GpuShareLimitsText(const GpuShare& share, std::string_view dir_in_job) {
  const std::string dir(dir_in_job);
  return "gpushare 1\nmemory_bytes " + std::to_string(share.memory_bytes) + "\nshare_milli " +
         std::to_string(share.share_milli) + "\nmode " +
         (share.strict ? "strict" : "work-conserving") + "\nusage " + dir + "/usage\nwant " + dir +
         "/want\ngrant " + dir + "/grant\n";
}

std::string GpuSharePreloadText() { return std::string(kShareLibraryInJob) + "\n"; }

Status CheckGpushareLibrary(const std::string& path) {
  const std::string prefix = "GPU sharing is not available on this node: ";
  if (path.empty()) return Status::FailedPrecondition(prefix + "no libgpushare.so was found");
  if (path.front() != '/') {
    return Status::FailedPrecondition(prefix + "the interposer's path " + path +
                                      " is not absolute");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::FailedPrecondition(prefix + "cannot use " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(prefix + path + " is not a file");
  if (::access(path.c_str(), R_OK) != 0) {
    return Status::FailedPrecondition(prefix + "cannot read " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status WriteGpuShareFiles(const std::string& task_dir, const GpuShare& share,
                          std::string_view dir_in_job, int uid, int gid) {
  const GpuShareFiles files = GpuShareFilesIn(task_dir);
  UniqueFd task(::open(task_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!task.valid()) return Status::Internal(Errno("cannot open " + task_dir));
  auto dir = MakeDirAt(task.get(), kShareDirName, 0755, /*exist_ok=*/true);
  if (!dir.ok()) return dir.status().WithContext(files.dir);
  if (::fchmod(dir->get(), 0755) != 0) return Status::Internal(Errno("cannot chmod " + files.dir));
  GP_RETURN_IF_ERROR(WriteNewFile(dir->get(), files.dir, "limits",
                                  GpuShareLimitsText(share, dir_in_job), 0644, -1, -1));
  GP_RETURN_IF_ERROR(
      WriteNewFile(dir->get(), files.dir, "ld.so.preload", GpuSharePreloadText(), 0644, -1, -1));
  // The compute share's files, zero-filled as gpushare/share_files.h wants:
  // the agent's share loop reads want and writes grant.
  const std::string zeros(GPUSHARE_SHARE_FILE_BYTES, '\0');
  GP_RETURN_IF_ERROR(WriteNewFile(dir->get(), files.dir, "grant", zeros, 0644, -1, -1));
  GP_RETURN_IF_ERROR(WriteNewFile(dir->get(), files.dir, "want", zeros, 0600, uid, gid));
  // Empty: the library sizes the ledger when it first maps it.
  return WriteNewFile(dir->get(), files.dir, "usage", "", 0600, uid, gid);
}

}  // namespace gpupool::exec
