#include "common/dir_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool {

namespace {

struct flock WholeFile(short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = 0;
  l.l_len = 0;  // to the end, however long
  return l;
}

}  // namespace

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

Result<DirLock> DirLock::Acquire(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Status::FailedPrecondition("cannot open " + path + ": " + std::strerror(errno));
  }
  struct flock l = WholeFile(F_WRLCK);
  if (::fcntl(fd, F_SETLK, &l) != 0) {
    int err = errno;
    std::string holder;
    struct flock probe = WholeFile(F_WRLCK);
    if ((err == EACCES || err == EAGAIN) && ::fcntl(fd, F_GETLK, &probe) == 0 &&
        probe.l_type != F_UNLCK) {
      holder = " (pid " + std::to_string(probe.l_pid) + ")";
    }
    ::close(fd);
    if (err == EACCES || err == EAGAIN) {
      return Status::FailedPrecondition(dir + " is in use by another gpupool " + what + holder +
                                        "; stop it first or use another --data-dir");
    }
    return Status::FailedPrecondition("cannot lock " + path + ": " + std::strerror(err));
  }
  // For people: who holds it. The lock, not this text, is what counts.
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t n = ::pwrite(fd, pid.data(), pid.size(), 0);
    (void)n;
  }
  return DirLock(fd);
}

}  // namespace gpupool
