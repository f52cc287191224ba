#include "share/share_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "gpushare/share_files.h"

namespace gpupool::share {

namespace {

// Never truncated below its size on the way: a job that has the file
// mapped (an agent that restarts re-creates its tasks' files) would fault.
Result<UniqueFd> MakeZeroed(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    return Status::Internal("cannot create " + path + ": " + std::strerror(errno));
  }
  const char zeros[GPUSHARE_SHARE_FILE_BYTES] = {};
  if (::ftruncate(fd.get(), GPUSHARE_SHARE_FILE_BYTES) != 0 ||
      ::pwrite(fd.get(), zeros, sizeof zeros, 0) != static_cast<ssize_t>(sizeof zeros)) {
    return Status::Internal("cannot write " + path + ": " + std::strerror(errno));
  }
  return fd;
}

}  // namespace

int64_t MonotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Result<TaskShareFiles> TaskShareFiles::Create(const std::string& want_path,
                                              const std::string& grant_path) {
  GP_ASSIGN_OR_RETURN(UniqueFd want, MakeZeroed(want_path));
  GP_ASSIGN_OR_RETURN(UniqueFd grant_fd, MakeZeroed(grant_path));
  void* p = ::mmap(nullptr, GPUSHARE_SHARE_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
                   grant_fd.get(), 0);
  if (p == MAP_FAILED) {
    return Status::Internal("cannot map " + grant_path + ": " + std::strerror(errno));
  }
  return TaskShareFiles(std::move(want), static_cast<gpushare_grant_file*>(p));
}

TaskShareFiles::TaskShareFiles(TaskShareFiles&& other) noexcept
    : want_(std::move(other.want_)), grant_(std::exchange(other.grant_, nullptr)) {}

TaskShareFiles& TaskShareFiles::operator=(TaskShareFiles&& other) noexcept {
  if (this != &other) {
    if (grant_ != nullptr) ::munmap(grant_, GPUSHARE_SHARE_FILE_BYTES);
    want_ = std::move(other.want_);
    grant_ = std::exchange(other.grant_, nullptr);
  }
  return *this;
}

TaskShareFiles::~TaskShareFiles() {
  if (grant_ != nullptr) ::munmap(grant_, GPUSHARE_SHARE_FILE_BYTES);
}

int64_t TaskShareFiles::ReadLastActiveNs() const {
  gpushare_want_file want{};
  ssize_t n = ::pread(want_.get(), &want, sizeof want, 0);
  if (n != static_cast<ssize_t>(sizeof want)) return 0;
  // A read racing the task's store may see a torn word; it only misjudges
  // this task's own activity, for one tick.
  return static_cast<int64_t>(want.last_active_ns);
}

void TaskShareFiles::WriteGrant(const Grant& grant, int64_t now_ns) {
  uint64_t until = grant.state == GrantState::kRun ? static_cast<uint64_t>(grant.until_ns) : 0;
  __atomic_store_n(&grant_->grant, gpushare_grant_pack(static_cast<unsigned>(grant.state), until),
                   __ATOMIC_RELEASE);
  __atomic_store_n(&grant_->beat_ns, static_cast<uint64_t>(now_ns), __ATOMIC_RELEASE);
}

}  // namespace gpupool::share
