#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool {

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("cannot read " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return Status::Internal("cannot read " + path + ": " + std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<std::string> ReadFileTrimmed(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string s, ReadFile(path));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

namespace {

// Writes all of `content` to `fd`; on failure closes it and says why.
Status WriteAllOrClose(int fd, const std::string& path, const std::string& content) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return Status::Internal("cannot write " + path + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& content, WriteOptions options) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, options.mode);
  if (fd < 0) return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
  GP_RETURN_IF_ERROR(WriteAllOrClose(fd, tmp, content));
  ::fchmod(fd, static_cast<mode_t>(options.mode));  // the umask may have narrowed it
  if (options.fsync && ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    return Status::Internal("cannot sync " + tmp + ": " + std::strerror(e));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Internal("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status SyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Internal("cannot open " + path + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return Status::Internal("cannot sync " + path + ": " + std::strerror(e));
  return Status::Ok();
}

Status WriteNewFile(const std::string& path, const std::string& content, int mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Status::Internal("cannot create " + path + ": " + std::strerror(errno));
  GP_RETURN_IF_ERROR(WriteAllOrClose(fd, path, content));
  ::fchmod(fd, static_cast<mode_t>(mode));  // the umask may have narrowed it
  ::close(fd);
  return Status::Ok();
}

}  // namespace gpupool
