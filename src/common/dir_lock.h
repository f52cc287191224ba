// DirLock: one live process per data directory.
//
// A server, an agent and `gpupool dev` each take DATA_DIR/lock at start and
// hold it until they exit, so a second one started on the same directory
// (by hand, or by a `gpupool dev` restarted while the first one's children
// still run) refuses to start instead of running beside it ("two of
// everything").
//
// The lock is a POSIX record lock (fcntl F_SETLK) on the whole file, not an
// flock(2): record locks belong to the process, so a child forked without
// exec (the agent's shims) does not hold it, and an agent restarted while
// its jobs' shims still run can take it again. The kernel drops it when the
// process dies however it dies (SIGKILL included). F_GETLK names the holder,
// which the refusal quotes; the holder's pid is also written into the file
// for people.
//
// Caveat of record locks: closing *any* descriptor of the file in the
// holding process drops the lock, so nothing else may open DATA_DIR/lock.
// Thread-safe: a DirLock is only moved and destroyed.
#pragma once

#include <string>

#include "common/status.h"

namespace gpupool {

class DirLock {
 public:
  DirLock() = default;
  DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  // Takes `dir`/lock (creating it, mode 0600). `what` names the kind of
  // process for the message ("server", "agent", "dev pool"). Failed-
  // Precondition when another live process holds it: "DIR is in use by
  // another gpupool <what> (pid N); stop it first or use another
  // --data-dir". The descriptor is close-on-exec.
  static Result<DirLock> Acquire(const std::string& dir, const std::string& what);

  bool held() const { return fd_ >= 0; }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace gpupool
