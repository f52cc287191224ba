#include "blob/tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

namespace gpupool::blob {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchBytes = 32 << 20;  // chunk bytes held before asking the store

Status Errno(const std::string& what) {
  return Status::Internal(what + ": " + std::strerror(errno));
}

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

using Batch = std::vector<std::pair<ChunkId, std::string>>;  // (id, chunk bytes)

// Chunks waiting to be offered to the store: only the ones it lacks are put.
// A full batch goes to the store on a thread of its own while the next one
// is being cut and hashed, so reading and hashing overlap with the store's
// round trips (one batch in flight at most).
class Uploader {
 public:
  Uploader(ChunkStore& store, int level, TreeStats& stats)
      : store_(store), level_(level), stats_(stats) {}
  ~Uploader() { (void)Wait(); }

  Status Add(ChunkId id, std::string bytes) {
    held_ += bytes.size();
    pending_.push_back({std::move(id), std::move(bytes)});
    if (held_ < kBatchBytes) return Status::Ok();
    GP_RETURN_IF_ERROR(Wait());
    in_flight_ = std::thread([this, batch = std::move(pending_)] { sent_ = Send(batch); });
    pending_.clear();
    held_ = 0;
    return Status::Ok();
  }

  // Sends what is left and waits for everything.
  Status Finish() {
    GP_RETURN_IF_ERROR(Wait());
    Batch last = std::move(pending_);
    pending_.clear();
    return Send(last);
  }

 private:
  Status Wait() {
    if (in_flight_.joinable()) in_flight_.join();
    return sent_;
  }

  // Only one Send runs at a time, so it alone updates the upload counters.
  Status Send(const Batch& batch) {
    std::vector<ChunkId> ids;
    for (const auto& [id, bytes] : batch) ids.push_back(id);
    GP_ASSIGN_OR_RETURN(std::vector<ChunkId> missing, store_.Missing(ids));
    std::sort(missing.begin(), missing.end());
    Batch frames;
    for (const auto& [id, bytes] : batch) {
      if (!std::binary_search(missing.begin(), missing.end(), id)) continue;
      GP_ASSIGN_OR_RETURN(std::string frame, CompressChunk(Bytes(bytes), level_));
      // A chunk repeated within the batch is put once.
      missing.erase(std::lower_bound(missing.begin(), missing.end(), id));
      ++stats_.new_chunks;
      stats_.uploaded_bytes += static_cast<int64_t>(frame.size());
      frames.emplace_back(id, std::move(frame));
    }
    return store_.PutMany(frames);
  }

  ChunkStore& store_;
  int level_;
  TreeStats& stats_;
  Batch pending_;
  size_t held_ = 0;
  std::thread in_flight_;
  Status sent_;  // of the batch in flight, read after joining it
};

Status ChunkFile(const fs::path& path, ManifestEntry& entry, const StoreTreeOptions& options,
                 Uploader& up, TreeStats& stats) {
  const ChunkerOptions& chunker = options.chunker;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Errno("cannot read " + path.string());
  std::string buf;
  size_t start = 0;  // of the unchunked bytes in buf
  bool eof = false;
  Status status;
  while (status.ok()) {
    // Keep at least max_size bytes ahead of the cut, unless the file ends.
    if (!eof && buf.size() - start < chunker.max_size) {
      buf.erase(0, start);
      start = 0;
      size_t have = buf.size();
      buf.resize(have + 4 * chunker.max_size);
      ssize_t n = ::read(fd, buf.data() + have, buf.size() - have);
      if (n < 0 && errno == EINTR) {
        buf.resize(have);
        continue;
      }
      if (n < 0) {
        status = Errno("cannot read " + path.string());
        break;
      }
      buf.resize(have + static_cast<size_t>(n));
      eof = n == 0;
      continue;
    }
    if (start == buf.size()) break;  // eof and nothing left
    auto rest = Bytes(std::string_view(buf).substr(start));
    size_t len = NextChunkLength(rest, chunker);
    std::string piece = buf.substr(start, len);
    ChunkId id = ComputeChunkId(Bytes(piece));
    entry.chunks.push_back({id, static_cast<int64_t>(len)});
    entry.size += static_cast<int64_t>(len);
    ++stats.chunks;
    start += len;
    if (options.on_scanned) options.on_scanned(stats.bytes + entry.size);
    status = up.Add(std::move(id), std::move(piece));
  }
  ::close(fd);
  return status;
}

Status StoreDir(const fs::path& root, const std::string& rel, const StoreTreeOptions& options,
                Manifest& m, Uploader& up, TreeStats& stats) {
  std::error_code ec;
  std::vector<fs::directory_entry> children;
  for (const auto& e : fs::directory_iterator(root / rel, ec)) children.push_back(e);
  if (ec) return Status::Internal("cannot list " + (root / rel).string() + ": " + ec.message());
  // A stable order, so that the same tree gives the same manifest.
  std::sort(children.begin(), children.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  for (const auto& child : children) {
    std::string path = (rel.empty() ? "" : rel + "/") + child.path().filename().string();
    struct stat st;
    if (::lstat(child.path().c_str(), &st) != 0)
      return Errno("cannot stat " + child.path().string());
    bool is_dir = S_ISDIR(st.st_mode);
    if (options.ignore && options.ignore(path, is_dir)) continue;
    ManifestEntry entry;
    entry.path = path;
    entry.mode = st.st_mode & 0777;
    if (is_dir) {
      entry.type = EntryType::kDir;
      m.entries.push_back(std::move(entry));
      GP_RETURN_IF_ERROR(StoreDir(root, path, options, m, up, stats));
    } else if (S_ISLNK(st.st_mode)) {
      entry.type = EntryType::kSymlink;
      entry.mode = 0;
      entry.target = fs::read_symlink(child.path(), ec).string();
      if (ec) return Status::Internal("cannot read the link " + path + ": " + ec.message());
      m.entries.push_back(std::move(entry));
    } else if (S_ISREG(st.st_mode)) {
      entry.type = EntryType::kFile;
      GP_RETURN_IF_ERROR(ChunkFile(child.path(), entry, options, up, stats));
      ++stats.files;
      stats.bytes += entry.size;
      m.entries.push_back(std::move(entry));
    }
  }
  return Status::Ok();
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("write");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status RestoreFile(const ManifestEntry& e, ChunkStore& store, const fs::path& dest) {
  fs::path final_path = dest / e.path;
  fs::path tmp = final_path;
  tmp += ".gpupool-partial";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("cannot create " + tmp.string());
  Status s;
  for (const ChunkRef& c : e.chunks) {
    auto frame = store.Get(c.id);
    if (!frame.ok()) {
      s = frame.status().WithContext(e.path);
      break;
    }
    auto bytes = OpenChunk(c.id, *frame);
    if (!bytes.ok()) {
      s = bytes.status().WithContext(e.path);
      break;
    }
    if (static_cast<int64_t>(bytes->size()) != c.size) {
      s = Status::DataLoss(e.path + ": chunk " + c.id.substr(0, 12) + " has " +
                           std::to_string(bytes->size()) + " bytes, the manifest says " +
                           std::to_string(c.size));
      break;
    }
    s = WriteAll(fd, *bytes);
    if (!s.ok()) break;
  }
  if (s.ok() && ::fchmod(fd, e.mode) != 0) s = Errno("chmod " + e.path);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) s = Errno("rename " + e.path);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace

Result<Manifest> StoreTree(const std::string& dir, ChunkStore& store,
                           const StoreTreeOptions& options, TreeStats* stats) {
  GP_RETURN_IF_ERROR(ValidateChunkerOptions(options.chunker));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + " is not a directory");
  }
  TreeStats local;
  TreeStats& s = stats != nullptr ? *stats : local;
  s = {};
  Uploader up(store, options.zstd_level, s);
  Manifest m;
  GP_RETURN_IF_ERROR(StoreDir(fs::path(dir), "", options, m, up, s));
  GP_RETURN_IF_ERROR(up.Finish());
  return m;
}

Status RestoreTree(const Manifest& manifest, ChunkStore& store, const std::string& dest) {
  std::error_code ec;
  if (fs::exists(dest, ec) && !fs::is_empty(dest, ec)) {
    return Status::FailedPrecondition(dest + " is not empty");
  }
  fs::create_directories(dest, ec);
  if (ec) return Status::Internal("cannot create " + dest + ": " + ec.message());
  // The manifest's own rules (decoded or built here): relative paths under
  // listed directories, symlinks that stay inside; checked again for
  // manifests built in memory.
  GP_RETURN_IF_ERROR(DecodeManifest(EncodeManifest(manifest)).status());
  GP_RETURN_IF_ERROR(store.Prefetch(manifest.ChunkIds()));
  std::vector<const ManifestEntry*> dirs;
  for (const ManifestEntry& e : manifest.entries) {
    fs::path path = fs::path(dest) / e.path;
    switch (e.type) {
      case EntryType::kDir:
        if (::mkdir(path.c_str(), 0700) != 0) return Errno("cannot create " + e.path);
        dirs.push_back(&e);
        break;
      case EntryType::kFile:
        GP_RETURN_IF_ERROR(RestoreFile(e, store, dest));
        break;
      case EntryType::kSymlink:
        if (::symlink(e.target.c_str(), path.c_str()) != 0) return Errno("cannot link " + e.path);
        break;
    }
  }
  // Directories get their modes last, so a read-only one could still be filled.
  for (const ManifestEntry* d : dirs) {
    if (::chmod((fs::path(dest) / d->path).c_str(), d->mode) != 0) {
      return Errno("cannot chmod " + d->path);
    }
  }
  return Status::Ok();
}

}  // namespace gpupool::blob
