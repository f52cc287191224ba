// See shared_state.h.
#include "shared_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>

namespace fake_cuda {
namespace {

// The start time of a running (not zombie) process, or nullopt.
std::optional<unsigned long long> StartTime(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  std::vector<std::string> after;  // fields 3, 4, ...
  while (after.size() < 20 && fields >> field) after.push_back(field);
  if (after.size() < 20 || after[0] == "Z" || after[0] == "X") return std::nullopt;
  return std::strtoull(after[19].c_str(), nullptr, 10);
}

Record Self() {
  static long cached_pid = -1;
  static unsigned long long cached_start = 0;
  static std::mutex self_mu;
  std::lock_guard<std::mutex> lock(self_mu);
  if (cached_pid != getpid()) {
    cached_pid = getpid();
    cached_start = StartTime(cached_pid).value_or(0);
  }
  return {cached_pid, cached_start, 0};
}

bool Alive(const Record& r) {
  if (r.pid == getpid()) return r.start == Self().start;
  auto start = StartTime(r.pid);
  return start && *start == r.start;
}

std::optional<std::string> StateDir() {
  const char* env = std::getenv("FAKE_CUDA_STATE_DIR");
  std::string dir = env && *env ? env : "/tmp/fake-cuda-" + std::to_string(getuid());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "fake_cuda: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return std::nullopt;
  }
  return dir;
}

std::string FileName(const std::string& uuid, const char* suffix) {
  std::string name;
  for (unsigned char c : uuid) name += std::isalnum(c) || c == '-' ? static_cast<char>(c) : '_';
  return name + suffix;
}

// The state file of one device, opened afresh and locked for one operation.
class LockedFile {
 public:
  LockedFile(const std::string& uuid, const char* suffix) {
    auto dir = StateDir();
    if (!dir) return;
    std::string path = *dir + "/" + FileName(uuid, suffix);
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      std::fprintf(stderr, "fake_cuda: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
      return;
    }
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~LockedFile() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  bool ok() const { return fd_ >= 0; }

  std::string Read() const {
    std::string text;
    char buffer[4096];
    off_t offset = 0;
    for (;;) {
      ssize_t n = pread(fd_, buffer, sizeof buffer, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
      offset += n;
    }
    return text;
  }

  void Write(const std::string& text) const {
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (ftruncate(fd_, static_cast<off_t>(text.size())) != 0) {
      std::fprintf(stderr, "fake_cuda: ftruncate: %s\n", std::strerror(errno));
    }
  }

 private:
  int fd_ = -1;
};

std::vector<Record> ParseRecords(std::istream& in) {
  std::vector<Record> records;
  Record r;
  while (in >> r.pid >> r.start >> r.value) records.push_back(r);
  return records;
}

std::string FormatRecords(const std::vector<Record>& records) {
  std::string text;
  for (const Record& r : records) {
    text += std::to_string(r.pid) + " " + std::to_string(r.start) + " " + std::to_string(r.value) +
            "\n";
  }
  return text;
}

}  // namespace

CUresult WithMemory(const std::string& uuid,
                    const std::function<CUresult(std::vector<Record>&)>& body) {
  LockedFile file(uuid, ".mem");
  if (!file.ok()) return CUDA_ERROR_UNKNOWN;
  std::istringstream in(file.Read());
  std::vector<Record> records = ParseRecords(in);
  std::erase_if(records, [](const Record& r) { return !Alive(r) || r.value == 0; });
  CUresult result = body(records);
  std::erase_if(records, [](const Record& r) { return r.value == 0; });
  file.Write(FormatRecords(records));
  return result;
}

Record& OwnRecord(std::vector<Record>& records) {
  Record self = Self();
  for (Record& r : records) {
    if (r.pid == self.pid && r.start == self.start) return r;
  }
  records.push_back(self);
  return records.back();
}

CUresult WithTimeline(const std::string& uuid,
                      const std::function<CUresult(int64_t&, std::vector<Record>&)>& body) {
  LockedFile file(uuid, ".time");
  if (!file.ok()) return CUDA_ERROR_UNKNOWN;
  std::istringstream in(file.Read());
  std::string key;
  int64_t busy_until = 0;
  if (!(in >> key >> busy_until) || key != "busy_until_ns") busy_until = 0;
  std::vector<Record> records = ParseRecords(in);
  CUresult result = body(busy_until, records);
  file.Write("busy_until_ns " + std::to_string(busy_until) + "\n" + FormatRecords(records));
  return result;
}

unsigned long long SumRecords(const std::vector<Record>& records, long pid) {
  unsigned long long sum = 0;
  for (const Record& r : records) {
    if (pid == 0 || r.pid == pid) sum += r.value;
  }
  return sum;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntil(int64_t deadline_ns) {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000),
              static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void RemoveStateFiles() {
  auto dir = StateDir();
  if (!dir) return;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(*dir, ec)) {
    std::string ext = entry.path().extension().string();
    if (ext == ".mem" || ext == ".time") std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace fake_cuda
