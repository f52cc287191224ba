#include "agent/staging.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "blob/http_chunk_store.h"
#include "common/files.h"
#include "common/log.h"
#include "common/units.h"

namespace gpupool::agent {
namespace fs = std::filesystem;

namespace {

constexpr char kManifestFile[] = "manifest.json";
constexpr int64_t kPruneEveryMs = 10 * 60 * 1000;

std::string JobDir(const std::string& staging_dir, int64_t job_id) {
  return staging_dir + "/job-" + std::to_string(job_id);
}

std::string PendingMark(const std::string& staging_dir, int64_t job_id) {
  return JobDir(staging_dir, job_id) + ".pending";
}

// An exclusive flock on a job's lock file, released on destruction.
class JobLock {
 public:
  // Waits up to `wait_ms` (< 0: for ever), also while `until_gone` exists
  // (when not empty). FailedPrecondition when it is still held (or the file
  // still there) after that.
  static Result<JobLock> Take(const std::string& staging_dir, int64_t job_id, int64_t wait_ms,
                              const std::string& until_gone = "") {
    std::error_code ec;
    fs::create_directories(staging_dir, ec);
    if (ec) return Status::Internal("cannot create " + staging_dir + ": " + ec.message());
    ::chmod(staging_dir.c_str(), 0700);
    std::string path = JobDir(staging_dir, job_id) + ".lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::Internal("cannot open " + path);
    JobLock lock(fd);
    if (wait_ms < 0) {
      while (::flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) return Status::Internal("cannot lock " + path);
      }
      return lock;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    for (;;) {
      if (until_gone.empty() || !PathExists(until_gone)) {
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
          // Marked again while this waited for the lock: wait on.
          if (until_gone.empty() || !PathExists(until_gone)) return lock;
          ::flock(fd, LOCK_UN);
        } else if (errno != EWOULDBLOCK && errno != EINTR) {
          return Status::Internal("cannot lock " + path);
        }
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status::FailedPrecondition("job " + std::to_string(job_id) + " is being staged");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  JobLock(JobLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  JobLock& operator=(JobLock&&) = delete;
  ~JobLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }

 private:
  explicit JobLock(int fd) : fd_(fd) {}
  int fd_;
};

// The server's chunks, read until `stop` is set (an agent shutting down
// does not wait for a staging to finish).
class StoppableStore : public blob::ChunkStore {
 public:
  StoppableStore(blob::HttpChunkStore& remote, const std::atomic<bool>& stop)
      : remote_(remote), stop_(stop) {}
  Result<std::vector<blob::ChunkId>> Missing(const std::vector<blob::ChunkId>& ids) override {
    return remote_.Missing(ids);
  }
  Status Put(const blob::ChunkId& id, std::string_view frame) override {
    return remote_.Put(id, frame);
  }
  Result<std::string> Get(const blob::ChunkId& id) override { return remote_.Get(id); }
  Status Remove(const blob::ChunkId& id) override { return remote_.Remove(id); }
  Result<std::vector<blob::ChunkId>> List() override { return remote_.List(); }
  Status ReadChunks(const std::vector<blob::ChunkId>& ids, const blob::ChunkSink& sink) override {
    return remote_.ReadChunks(ids, [&](blob::VerifiedChunk c) {
      if (stop_.load()) return Status::FailedPrecondition("the agent is stopping");
      return sink(std::move(c));
    });
  }

 private:
  blob::HttpChunkStore& remote_;
  const std::atomic<bool>& stop_;
};

// The staged tree in `dir` (job-<ID> or a moved copy), if complete.
Result<blob::RestoreBase> ReadStaged(const std::string& dir) {
  std::string path = dir + "/" + kManifestFile;
  if (!PathExists(path)) return Status::NotFound("nothing staged in " + dir);
  GP_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  GP_ASSIGN_OR_RETURN(blob::Manifest m, blob::DecodeManifest(text));
  return blob::RestoreBase{std::move(m), dir + "/tree"};
}

}  // namespace

std::string StagingDirIn(const std::string& data_dir) { return data_dir + "/staged"; }

Status StageTree(const std::string& staging_dir, int64_t job_id, const blob::Manifest& manifest,
                 blob::ChunkStore& store, blob::RestoreStats* stats, const std::string& done) {
  GP_ASSIGN_OR_RETURN(JobLock lock, JobLock::Take(staging_dir, job_id, -1));
  // Removed under the lock once the tree is in place (or not).
  struct Done {
    const std::string& path;
    ~Done() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } unmark{done};
  const std::string dir = JobDir(staging_dir, job_id);
  const std::string next = dir + ".new";
  const std::string text = blob::EncodeManifest(manifest);
  auto staged = ReadStaged(dir);
  if (staged.ok() && blob::EncodeManifest(staged->manifest) == text) {
    ::utimensat(AT_FDCWD, dir.c_str(), nullptr, 0);  // still wanted: not pruned yet
    if (stats != nullptr) {
      *stats = {};
      stats->bytes = stats->reused_bytes = manifest.TotalBytes();
    }
    return Status::Ok();
  }
  std::error_code ec;
  fs::remove_all(next, ec);
  Status s =
      blob::RestoreTree(manifest, store, next + "/tree", staged.ok() ? &*staged : nullptr, stats);
  if (s.ok()) s = WriteFileAtomic(next + "/" + kManifestFile, text);
  if (s.ok()) {
    fs::remove_all(dir, ec);
    if (ec || ::rename(next.c_str(), dir.c_str()) != 0) {
      s = Status::Internal("cannot put the staged tree of job " + std::to_string(job_id) +
                           " in place");
    }
  }
  if (!s.ok()) fs::remove_all(next, ec);
  return s;
}

Result<blob::RestoreBase> TakeStaged(const std::string& staging_dir, int64_t job_id,
                                     const std::string& into, int64_t wait_ms) {
  const std::string dir = JobDir(staging_dir, job_id);
  const std::string pending = PendingMark(staging_dir, job_id);
  if (!PathExists(dir) && !PathExists(dir + ".new") && !PathExists(pending)) {
    return Status::NotFound("nothing staged for job " + std::to_string(job_id));
  }
  auto lock = JobLock::Take(staging_dir, job_id, wait_ms, pending);
  if (!lock.ok()) return Status::NotFound(lock.status().message());
  GP_RETURN_IF_ERROR(ReadStaged(dir).status());
  std::error_code ec;
  fs::create_directories(fs::path(into).parent_path(), ec);
  if (::rename(dir.c_str(), into.c_str()) != 0) {
    return Status::Internal("cannot take the staged tree of job " + std::to_string(job_id) +
                            " to " + into + ": " + std::strerror(errno));
  }
  return ReadStaged(into);
}

int PruneStaged(const std::string& staging_dir, int64_t max_age_ms) {
  int removed = 0;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (const auto& entry : fs::directory_iterator(staging_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("job-", 0) != 0 || name.ends_with(".lock") || name.ends_with(".pending")) {
      continue;
    }
    auto age = now - fs::last_write_time(entry.path(), ec);
    if (ec || age < std::chrono::milliseconds(max_age_ms)) continue;
    int64_t job_id = std::atoll(name.substr(4).c_str());
    auto lock = JobLock::Take(staging_dir, job_id, 0);
    if (!lock.ok()) continue;  // being staged or taken now
    fs::remove_all(entry.path(), ec);
    if (!ec) ++removed;
  }
  return removed;
}

Stager::Stager(std::string staging_dir, BlobAccess access)
    : staging_dir_(std::move(staging_dir)), access_(std::move(access)) {
  // Marks of stagings an earlier agent process did not finish.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(staging_dir_, ec)) {
    if (entry.path().extension() == ".pending") fs::remove(entry.path(), ec);
  }
  thread_ = std::thread([this] { Run(); });
}

Stager::~Stager() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  stop_reading_ = true;
  wake_.notify_all();
  thread_.join();
}

void Stager::Stage(const proto::StageCheckpoint& order) {
  // Marked before this returns, so that a start order that follows at once
  // waits for the staging instead of missing it (TakeStaged).
  std::error_code ec;
  fs::create_directories(staging_dir_, ec);
  ::chmod(staging_dir_.c_str(), 0700);
  (void)WriteFileAtomic(PendingMark(staging_dir_, order.job_id), "");
  {
    std::lock_guard lock(mu_);
    std::erase_if(queue_, [&](const auto& o) { return o.job_id == order.job_id; });
    queue_.push_back(order);
  }
  wake_.notify_all();
}

void Stager::Run() {
  for (;;) {
    proto::StageCheckpoint order;
    {
      std::unique_lock lock(mu_);
      if (!wake_.wait_for(lock, std::chrono::milliseconds(kPruneEveryMs),
                          [&] { return stopping_ || !queue_.empty(); })) {
        lock.unlock();
        if (int n = PruneStaged(staging_dir_, kStagedMaxAgeMs); n > 0) {
          GP_LOG(kInfo) << "removed " << n << " staged checkpoints nobody took";
        }
        continue;
      }
      if (stopping_) return;
      order = queue_.front();
      queue_.pop_front();
    }
    blob::HttpChunkStore remote(RemoteStoreOptions(access_));
    StoppableStore store(remote, stop_reading_);
    auto start = std::chrono::steady_clock::now();
    auto manifest = remote.GetManifest(order.manifest);
    blob::RestoreStats stats;
    Status s = manifest.ok() ? StageTree(staging_dir_, order.job_id, *manifest, store, &stats,
                                         PendingMark(staging_dir_, order.job_id))
                             : manifest.status();
    if (!s.ok()) ::unlink(PendingMark(staging_dir_, order.job_id).c_str());
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    const std::string what =
        "job " + std::to_string(order.job_id) + " checkpoint " + std::to_string(order.checkpoint);
    if (s.ok()) {
      GP_LOG(kInfo) << "staged " << what << " in " << ms << " ms ("
                    << FormatBytes(stats.bytes - stats.reused_bytes) << " read, "
                    << FormatBytes(stats.reused_bytes) << " already staged)";
    } else {
      GP_LOG(kWarn) << "cannot stage " << what << ": " << s.ToString();
    }
  }
}

}  // namespace gpupool::agent
