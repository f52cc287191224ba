#include "common/disk_usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <unordered_set>
#include <vector>

#include "common/unique_fd.h"

namespace gpupool {
namespace {

bool IsDotOrDotDot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

// Opens `name` in `parent_fd` as a directory stream, only if it is still
// the directory `listed` (not swapped for another since it was counted).
DIR* OpenListedDir(int parent_fd, const char* name, const struct stat& listed) {
  UniqueFd fd(::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return nullptr;
  struct stat opened;
  if (::fstat(fd.get(), &opened) != 0 || opened.st_dev != listed.st_dev ||
      opened.st_ino != listed.st_ino) {
    return nullptr;
  }
  DIR* d = ::fdopendir(fd.get());
  if (d != nullptr) fd.Release();  // the stream owns it now
  return d;
}

}  // namespace

int64_t DiskUsage(const std::string& path, const DiskUsageOptions& options) {
  struct stat st;
  if (::fstatat(AT_FDCWD, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
  const dev_t dev = st.st_dev;
  int64_t total = options.count_root ? static_cast<int64_t>(st.st_blocks) * 512 : 0;
  auto past_limit = [&] { return options.stop_after > 0 && total > options.stop_after; };
  if (!S_ISDIR(st.st_mode) || past_limit()) return total;
  DIR* top = OpenListedDir(AT_FDCWD, path.c_str(), st);
  if (top == nullptr) return total;

  std::unordered_set<ino_t> linked;  // inodes with several names, counted once
  std::vector<DIR*> stack{top};
  while (!stack.empty()) {
    DIR* cur = stack.back();
    const struct dirent* e = ::readdir(cur);
    if (e == nullptr) {
      ::closedir(cur);
      stack.pop_back();
      continue;
    }
    const char* name = e->d_name;
    if (IsDotOrDotDot(name)) continue;
    if (::fstatat(::dirfd(cur), name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_dev != dev) continue;  // a mount point: another file system
    const bool is_dir = S_ISDIR(st.st_mode);
    if (!is_dir && st.st_nlink > 1 && !linked.insert(st.st_ino).second) continue;
    total += static_cast<int64_t>(st.st_blocks) * 512;
    if (past_limit()) break;
    if (!is_dir) continue;
    if (DIR* sub = OpenListedDir(::dirfd(cur), name, st)) stack.push_back(sub);
  }
  for (DIR* d : stack) ::closedir(d);
  return total;
}

}  // namespace gpupool
