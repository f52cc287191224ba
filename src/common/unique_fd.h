// UniqueFd: the one owner of a file descriptor in gpupool. It closes the
// descriptor when it goes out of scope; it is move-only, so exactly one
// owner closes it. Release() hands the descriptor to someone else (who then
// closes it); Reset() closes it early.
//
// Not thread-safe: one thread owns a UniqueFd at a time, like any value.
// close() errors are ignored (there is nothing useful to do with them for
// the descriptors held here: pipes, sockets, directories).
#pragma once

#include <unistd.h>

#include <utility>

namespace gpupool {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) Reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller closes the descriptor.
  int Release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held, if any, and holds `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0 && fd_ != fd) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace gpupool
