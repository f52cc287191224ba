#include "common/safe_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace gpupool {

namespace {

std::string ErrnoText(int e) { return std::strerror(e); }

// The errno of a failed open of `what`, as a Status.
Status OpenError(int e, const std::string& what) {
  switch (e) {
    case ELOOP:
    case ENOTDIR:
    case EXDEV:
      return Status::FailedPrecondition(what + " is a symlink or not a directory");
    case ENOENT:
      return Status::NotFound(what + " does not exist");
    case EACCES:
    case EPERM:
      return Status::PermissionDenied("cannot open " + what + ": " + ErrnoText(e));
    default:
      return Status::Internal("cannot open " + what + ": " + ErrnoText(e));
  }
}

std::string Shown(std::string_view rel) { return rel.empty() ? "." : std::string(rel); }

// 1: openat2 works; 0: it does not; -1: not asked yet.
std::atomic<int> g_openat2{-1};

long Openat2(int dir_fd, const char* path, uint64_t flags, uint64_t resolve) {
  open_how how{};
  how.flags = flags;
  how.resolve = resolve;
  return ::syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
         (a.st_mode & S_IFMT) == (b.st_mode & S_IFMT);
}

}  // namespace

// ---- ScopedFsIdentity -----------------------------------------------------

Result<ScopedFsIdentity> ScopedFsIdentity::Assume(const FsIdentity& id) {
  ScopedFsIdentity s;
  if (!id.set()) return s;
  const int gid = id.gid >= 0 ? id.gid : id.uid;
  // setfsuid/setfsgid with an invalid id (-1) change nothing and return the
  // current one.
  s.old_uid_ = ::setfsuid(static_cast<uid_t>(-1));
  s.old_gid_ = ::setfsgid(static_cast<gid_t>(-1));
  int n = ::getgroups(0, nullptr);
  if (n < 0) return Status::Internal("getgroups: " + ErrnoText(errno));
  s.old_groups_.resize(static_cast<size_t>(n));
  if (n > 0 && ::getgroups(n, reinterpret_cast<gid_t*>(s.old_groups_.data())) != n) {
    return Status::Internal("getgroups: " + ErrnoText(errno));
  }
  // This thread only (glibc's setgroups would change every thread).
  if (::syscall(SYS_setgroups, 0, nullptr) != 0) {
    return Status::PermissionDenied("cannot drop the supplementary groups to read as uid " +
                                    std::to_string(id.uid) + ": " + ErrnoText(errno));
  }
  s.active_ = true;  // from here on the destructor restores
  ::setfsgid(static_cast<gid_t>(gid));
  if (::setfsgid(static_cast<gid_t>(-1)) != gid) {
    return Status::PermissionDenied("cannot take gid " + std::to_string(gid) +
                                    " as the file-system gid");
  }
  ::setfsuid(static_cast<uid_t>(id.uid));
  if (::setfsuid(static_cast<uid_t>(-1)) != id.uid) {
    return Status::PermissionDenied("cannot take uid " + std::to_string(id.uid) +
                                    " as the file-system uid");
  }
  return s;
}

ScopedFsIdentity::ScopedFsIdentity(ScopedFsIdentity&& o) noexcept
    : active_(std::exchange(o.active_, false)),
      old_uid_(o.old_uid_),
      old_gid_(o.old_gid_),
      old_groups_(std::move(o.old_groups_)) {}

ScopedFsIdentity::~ScopedFsIdentity() {
  if (!active_) return;
  // The uid first: back to root, the file-system capabilities return, and
  // with them the right to restore the rest.
  ::setfsuid(static_cast<uid_t>(old_uid_));
  ::setfsgid(static_cast<gid_t>(old_gid_));
  ::syscall(SYS_setgroups, old_groups_.size(), old_groups_.data());
}

// ---- opening beneath --------------------------------------------------------

Status CheckBeneathPath(std::string_view rel) {
  if (rel.empty()) return Status::Ok();
  if (rel.front() == '/') return Status::InvalidArgument(std::string(rel) + " is absolute");
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument(std::string(rel) + " is not a plain relative path");
    }
    start = end + 1;
  }
  return Status::Ok();
}

bool HaveOpenat2() {
  int known = g_openat2.load();
  if (known >= 0) return known == 1;
  long fd = Openat2(AT_FDCWD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  bool works = fd >= 0 || (errno != ENOSYS && errno != EPERM && errno != EINVAL && errno != E2BIG);
  if (fd >= 0) ::close(static_cast<int>(fd));
  g_openat2.store(works ? 1 : 0);
  return works;
}

Result<UniqueFd> OpenDirByComponents(int dir_fd, std::string_view rel) {
  GP_RETURN_IF_ERROR(CheckBeneathPath(rel));
  UniqueFd cur(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return OpenError(errno, ".");
  size_t start = 0;
  while (!rel.empty() && start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string part(rel.substr(start, end - start));
    UniqueFd next(
        ::openat(cur.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return OpenError(errno, std::string(rel.substr(0, end)));
    cur = std::move(next);
    start = end + 1;
  }
  return cur;
}

Result<UniqueFd> OpenDirBeneath(int dir_fd, std::string_view rel) {
  GP_RETURN_IF_ERROR(CheckBeneathPath(rel));
  if (!HaveOpenat2()) return OpenDirByComponents(dir_fd, rel);
  const std::string path = rel.empty() ? "." : std::string(rel);
  for (int attempt = 0;; ++attempt) {
    long fd = Openat2(dir_fd, path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                      RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    // EAGAIN: a rename raced with the lookup; the kernel asks to retry.
    if ((errno == EAGAIN || errno == EINTR) && attempt < 16) continue;
    if (errno == ENOSYS) return OpenDirByComponents(dir_fd, rel);
    return OpenError(errno, Shown(rel));
  }
}

Result<struct stat> StatEntry(int dir_fd, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return st;
  int e = errno;
  if (e == ENOENT) return Status::NotFound(name + " is gone");
  if (e == EACCES || e == EPERM) {
    return Status::PermissionDenied("cannot stat " + name + ": " + ErrnoText(e));
  }
  return Status::Internal("cannot stat " + name + ": " + ErrnoText(e));
}

Result<UniqueFd> OpenEntry(int dir_fd, const std::string& name, const struct stat& listed) {
  int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC;
  if (S_ISDIR(listed.st_mode)) {
    flags |= O_DIRECTORY;
  } else if (S_ISREG(listed.st_mode)) {
    flags |= O_NONBLOCK | O_NOCTTY;
  } else {
    return Status::InvalidArgument(name + " is neither a file nor a directory");
  }
  UniqueFd fd(::openat(dir_fd, name.c_str(), flags));
  if (!fd.valid()) {
    int e = errno;
    // O_NOFOLLOW on a symlink: ELOOP; O_DIRECTORY on something else: ENOTDIR.
    if (e == ELOOP || e == ENOTDIR || e == ENXIO) {
      return Status::FailedPrecondition(name + " changed while being read");
    }
    if (e == ENOENT) return Status::NotFound(name + " is gone");
    if (e == EACCES || e == EPERM) {
      return Status::PermissionDenied("cannot open " + name + ": " + ErrnoText(e));
    }
    return Status::Internal("cannot open " + name + ": " + ErrnoText(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return Status::Internal("fstat " + name + ": " + ErrnoText(errno));
  if (!SameFile(st, listed)) return Status::FailedPrecondition(name + " changed while being read");
  if (S_ISREG(st.st_mode)) {
    // Back to blocking reads (a regular file never blocks anyway).
    int fl = ::fcntl(fd.get(), F_GETFL);
    if (fl >= 0) ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  }
  return fd;
}

Result<std::string> ReadLinkAt(int dir_fd, const std::string& name) {
  std::string buf(256, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf.data(), buf.size());
    if (n < 0) {
      int e = errno;
      if (e == EINVAL) return Status::FailedPrecondition(name + " changed while being read");
      if (e == ENOENT) return Status::NotFound(name + " is gone");
      return Status::Internal("cannot read the link " + name + ": " + ErrnoText(e));
    }
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    if (buf.size() >= (1u << 16)) return Status::Internal("the link " + name + " is too long");
    buf.resize(buf.size() * 4);
  }
}

Result<std::vector<std::string>> ListDir(int dir_fd) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return OpenError(errno, ".");
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    int e = errno;
    ::close(fd);
    return Status::Internal("cannot list: " + ErrnoText(e));
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
    names.emplace_back(n);
    errno = 0;
  }
  int e = errno;
  ::closedir(d);
  if (e != 0) return Status::Internal("cannot list: " + ErrnoText(e));
  std::sort(names.begin(), names.end());
  return names;
}

Result<UniqueFd> MakeDirAt(int dir_fd, const std::string& name, mode_t mode, bool exist_ok) {
  if (::mkdirat(dir_fd, name.c_str(), mode) != 0) {
    int e = errno;
    if (e != EEXIST || !exist_ok) {
      if (e == EEXIST) return Status::FailedPrecondition(name + " exists already");
      return OpenError(e, name).WithContext("mkdir");
    }
  }
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return OpenError(errno, name);
  return fd;
}

Result<UniqueFd> OpenOrMakeDirPath(const std::string& path, mode_t mode) {
  namespace fs = std::filesystem;
  if (path.empty()) return Status::InvalidArgument("no directory given");
  fs::path p = fs::path(path).lexically_normal();
  if (p.has_relative_path() && !p.has_filename()) p = p.parent_path();  // "a/b/" -> "a/b"
  std::string last = p.filename().string();
  if (last.empty() || last == "." || last == ".." || p == p.root_path()) {
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return OpenError(errno, path);
    return fd;
  }
  fs::path parent = p.parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Status::Internal("cannot create " + parent.string() + ": " + ec.message());
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) return OpenError(errno, parent.string());
  auto fd = MakeDirAt(parent_fd.get(), last, mode, /*exist_ok=*/true);
  if (!fd.ok() && fd.status().code() == StatusCode::kFailedPrecondition) {
    return Status::FailedPrecondition(path + " is a symlink or not a directory");
  }
  return fd;
}

Result<std::string> ReadFileBeneath(int dir_fd, std::string_view rel, size_t max_bytes) {
  GP_RETURN_IF_ERROR(CheckBeneathPath(rel));
  if (rel.empty()) return Status::InvalidArgument("no file given");
  size_t slash = rel.rfind('/');
  std::string name(slash == std::string_view::npos ? rel : rel.substr(slash + 1));
  GP_ASSIGN_OR_RETURN(
      UniqueFd dir, OpenDirBeneath(dir_fd, slash == std::string_view::npos ? std::string_view()
                                                                           : rel.substr(0, slash)));
  UniqueFd fd(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return OpenError(errno, std::string(rel));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::FailedPrecondition(std::string(rel) + " is not a regular file");
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal("cannot read " + std::string(rel) + ": " + ErrnoText(errno));
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return Status::InvalidArgument(std::string(rel) + " holds more than " +
                                     std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

namespace {

Status ChownBelow(int dir_fd, int uid, int gid, int depth) {
  if (depth > 4096) return Status::Internal("the tree is too deep");
  GP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir_fd));
  for (const std::string& name : names) {
    if (::fchownat(dir_fd, name.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(gid),
                   AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::Internal("cannot give " + name + " to uid " + std::to_string(uid) + ": " +
                              ErrnoText(errno));
    }
    GP_ASSIGN_OR_RETURN(struct stat st, StatEntry(dir_fd, name));
    if (!S_ISDIR(st.st_mode)) continue;
    GP_ASSIGN_OR_RETURN(UniqueFd sub, OpenEntry(dir_fd, name, st));
    GP_RETURN_IF_ERROR(ChownBelow(sub.get(), uid, gid, depth + 1).WithContext(name));
  }
  return Status::Ok();
}

}  // namespace

Status ChownTree(int dir_fd, int uid, int gid) {
  if (::fchown(dir_fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid)) != 0) {
    return Status::Internal("cannot give a directory to uid " + std::to_string(uid) + ": " +
                            ErrnoText(errno));
  }
  return ChownBelow(dir_fd, uid, gid, 0);
}

}  // namespace gpupool
