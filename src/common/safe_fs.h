// Walking a directory tree that someone else may change while we look at it
// (a job's checkpoint, a job's work directory, a user's upload), without
// ever being led elsewhere by a symlink.
//
// The rule: a path that the other party can change is never resolved by
// the kernel from a path string with symlinks followed. Everything is
// opened relative to a directory descriptor, one entry at a time or with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS),
// and what was opened is checked with fstat against what was listed (same
// type, same device and inode), so an entry swapped for a symlink, a FIFO
// or another file between the listing and the open is noticed, not
// followed. Where the kernel lacks openat2 (before 5.6, or a seccomp filter
// that refuses it), OpenDirBeneath opens one component at a time with
// O_NOFOLLOW | O_DIRECTORY instead, which gives the same guarantee.
//
// A root process that reads a tree on behalf of an unprivileged account can
// also take that account's file-system identity for each open
// (ScopedFsIdentity): then even a path the walk got wrong, or a hard link to
// a root-only file, cannot be read, because the kernel checks the account's
// permissions, not root's.
//
// Thread-safety: the functions are reentrant. ScopedFsIdentity changes only
// the calling thread's credentials (see there).
#pragma once

#include <sys/stat.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace gpupool {

// An account's file-system identity: its uid and primary gid, and no
// supplementary groups. uid < 0: the process's own (nothing is switched).
struct FsIdentity {
  int uid = -1;
  int gid = -1;
  bool set() const { return uid >= 0; }
};

// While it lives, the calling thread opens, creates and stats files as `id`:
// its file-system uid and gid become id's (setfsuid/setfsgid), and its
// supplementary groups are cleared. These are per-thread credentials on
// Linux; the groups are changed with the raw setgroups system call, because
// glibc's setgroups() changes every thread of the process. Other threads of
// the process are not affected. A root thread whose fsuid becomes non-zero
// also loses CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and the other
// file-system capabilities for that time (capabilities(7)); they come back
// on restore. The destructor restores the previous identity.
//
// Needs CAP_SETUID and CAP_SETGID (a root process): PermissionDenied
// otherwise, and nothing is changed. With an unset `id`, does nothing.
// Do not create threads while one lives (they would inherit the identity).
class ScopedFsIdentity {
 public:
  static Result<ScopedFsIdentity> Assume(const FsIdentity& id);
  ScopedFsIdentity(ScopedFsIdentity&& o) noexcept;
  ScopedFsIdentity& operator=(ScopedFsIdentity&&) = delete;
  ScopedFsIdentity(const ScopedFsIdentity&) = delete;
  ~ScopedFsIdentity();

 private:
  ScopedFsIdentity() = default;
  bool active_ = false;
  int old_uid_ = -1;
  int old_gid_ = -1;
  std::vector<unsigned> old_groups_;
};

// Checks `rel` as a relative path beneath a directory: "" (the directory
// itself) or components other than "", "." and "..", '/'-separated.
Status CheckBeneathPath(std::string_view rel);

// Opens `rel` (see CheckBeneathPath) beneath `dir_fd` as a directory
// (O_RDONLY | O_DIRECTORY), following no symlink on the way: openat2 with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS where the
// kernel has it, OpenDirByComponents otherwise. Errors name `rel`:
//   FailedPrecondition  a component is a symlink or not a directory
//   NotFound            a component does not exist
//   PermissionDenied    EACCES / EPERM
//   InvalidArgument     `rel` is not a path beneath
Result<UniqueFd> OpenDirBeneath(int dir_fd, std::string_view rel);

// The fallback of OpenDirBeneath: openat(O_NOFOLLOW | O_DIRECTORY) on each
// component in turn. Same contract.
Result<UniqueFd> OpenDirByComponents(int dir_fd, std::string_view rel);

// Whether OpenDirBeneath can use openat2 here (asked of the kernel once).
bool HaveOpenat2();

// What fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW) says of an entry.
// NotFound when it is gone; PermissionDenied; Internal otherwise.
Result<struct stat> StatEntry(int dir_fd, const std::string& name);

// Opens entry `name` (one component) of `dir_fd` for reading, as what
// `listed` (its StatEntry) says it is, and only if it still is that: a
// directory (O_DIRECTORY | O_NOFOLLOW) or a regular file (O_NOFOLLOW |
// O_NONBLOCK | O_NOCTTY, so that a FIFO swapped in cannot block the reader).
// The opened file's fstat must show the same type, device and inode as
// `listed`: FailedPrecondition ("changed while being read") when it does
// not, or when the entry became a symlink; NotFound when it is gone.
// InvalidArgument for any other type (symlinks are read with ReadLinkAt).
Result<UniqueFd> OpenEntry(int dir_fd, const std::string& name, const struct stat& listed);

// The target of symlink `name` of `dir_fd`. FailedPrecondition when it is
// no longer a symlink.
Result<std::string> ReadLinkAt(int dir_fd, const std::string& name);

// The names in directory `dir_fd` but "." and "..", sorted. The descriptor
// is not consumed.
Result<std::vector<std::string>> ListDir(int dir_fd);

// Creates directory `name` in `dir_fd` (mkdirat, `mode`) and opens it
// without following a symlink. `exist_ok`: an existing directory is opened
// instead; anything else in its place (a symlink included) is
// FailedPrecondition.
Result<UniqueFd> MakeDirAt(int dir_fd, const std::string& name, mode_t mode, bool exist_ok);

// Opens `path` as a directory, creating it and its parents if missing:
// every component but the last is resolved as usual (the caller's own
// path), the last is never followed if it is a symlink (FailedPrecondition).
// "/", "." and paths ending in ".." are opened as they are.
Result<UniqueFd> OpenOrMakeDirPath(const std::string& path, mode_t mode);

// The regular file `rel` beneath `dir_fd` (OpenDirBeneath for its
// directory, O_NOFOLLOW for itself), at most `max_bytes` of it
// (InvalidArgument when it holds more).
Result<std::string> ReadFileBeneath(int dir_fd, std::string_view rel, size_t max_bytes);

// Gives `dir_fd` and everything under it to uid:gid (fchownat with
// AT_SYMLINK_NOFOLLOW, through directory descriptors: no symlink is
// followed, symlinks themselves change owner).
Status ChownTree(int dir_fd, int uid, int gid);

}  // namespace gpupool
