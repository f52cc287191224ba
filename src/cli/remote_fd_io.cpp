#include "cli/remote_fd_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpupool::cli {

namespace {

constexpr size_t kChunk = 64 * 1024;

// epoll refuses regular files, block devices and /dev/null-like character
// devices; they never block, so they are read in a loop of posted tasks.
bool Pollable(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode)) return false;
  if (S_ISCHR(st.st_mode)) return ::isatty(fd);
  return true;  // pipes, sockets
}

}  // namespace

FdReader::FdReader(net::EventLoop& loop, int fd, std::function<void(std::string_view)> on_data,
                   std::function<void()> on_eof)
    : loop_(loop),
      fd_(fd),
      pollable_(Pollable(fd)),
      on_data_(std::move(on_data)),
      on_eof_(std::move(on_eof)),
      buf_(kChunk, '\0') {}

void FdReader::Start() {
  if (started_ || done_) return;
  started_ = true;
  if (!paused_) Watch();
}

void FdReader::Resume() {
  if (!paused_) return;
  paused_ = false;
  if (started_ && !done_) Watch();
}

void FdReader::Watch() {
  if (pollable_) {
    loop_.WatchReadable(fd_, [this] { return ReadOnce(); });
    return;
  }
  std::weak_ptr<int> alive = alive_;
  loop_.Post([this, alive] {
    if (alive.lock() && ReadOnce()) Watch();
  });
}

bool FdReader::ReadOnce() {
  if (paused_ || done_) return false;
  ssize_t n = ::read(fd_, buf_.data(), buf_.size());
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) {
    done_ = true;
    on_eof_();
    return false;
  }
  on_data_(std::string_view(buf_.data(), static_cast<size_t>(n)));
  return !paused_ && !done_;
}

void FdReader::Stop() {
  done_ = true;
  alive_.reset();
  if (pollable_ && started_) loop_.UnwatchFd(fd_);
}

FdWriter::FdWriter(net::EventLoop& loop, int fd, std::function<void()> on_drained,
                   std::function<void(int)> on_error)
    : loop_(loop), fd_(fd), on_drained_(std::move(on_drained)), on_error_(std::move(on_error)) {
  // A full pipe or terminal must not stall the loop (and with it the
  // signals and the other stream); the caller restores the flags at exit.
  if (Pollable(fd)) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0 && !(flags & O_NONBLOCK)) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  }
}

void FdWriter::Write(std::string_view bytes) {
  if (failed_ || bytes.empty()) return;
  if (pending() == 0) {
    size_t done = WriteSome(bytes);
    if (failed_) return;
    bytes.remove_prefix(done);
    if (bytes.empty()) return;
  }
  if (offset_ > 0 && offset_ * 2 > pending_.size()) {
    pending_.erase(0, offset_);
    offset_ = 0;
  }
  pending_.append(bytes);
  if (!watching_) {
    watching_ = true;
    loop_.WatchWritable(fd_, [this] { return Flush(); });
  }
}

size_t FdWriter::WriteSome(std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      int err = n < 0 ? errno : EIO;
      failed_ = true;
      pending_.clear();
      offset_ = 0;
      on_error_(err);
      break;
    }
  }
  return done;
}

bool FdWriter::Flush() {
  if (failed_) return watching_ = false;
  offset_ += WriteSome(std::string_view(pending_).substr(offset_));
  if (!failed_ && pending() > 0) return true;
  pending_.clear();
  offset_ = 0;
  watching_ = false;
  on_drained_();
  return false;
}

void FdWriter::Stop() {
  failed_ = true;
  if (watching_) loop_.UnwatchFd(fd_);
  watching_ = false;
}

}  // namespace gpupool::cli
