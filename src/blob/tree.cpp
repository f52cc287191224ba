#include "blob/tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
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

// Writes the files of a manifest as their chunks arrive, in manifest order.
// Chunks are gathered and written with one writev per ~4 MiB, since small
// writes cost ext4 far more per byte than large ones.
class FileWriter {
 public:
  FileWriter(const fs::path& dest, std::vector<const ManifestEntry*> files)
      : dest_(dest), files_(std::move(files)) {}
  ~FileWriter() { Abandon(); }

  // The next chunk of the manifest's files, in order.
  Status Add(VerifiedChunk c) {
    GP_RETURN_IF_ERROR(OpenThrough());
    if (file_ == files_.size()) return Status::Internal("more chunks than the manifest's files");
    const ManifestEntry& e = *files_[file_];
    const ChunkRef& ref = e.chunks[chunk_];
    if (c.id != ref.id) return Status::Internal(e.path + ": chunk out of order");
    if (static_cast<int64_t>(c.bytes.size()) != ref.size) {
      return Status::DataLoss(e.path + ": chunk " + c.id.substr(0, 12) + " has " +
                              std::to_string(c.bytes.size()) + " bytes, the manifest says " +
                              std::to_string(ref.size));
    }
    pending_bytes_ += c.bytes.size();
    pending_.push_back(std::move(c.bytes));
    if (++chunk_ < e.chunks.size()) {
      return pending_bytes_ >= kWriteBytes || pending_.size() >= kWriteChunks ? Flush() : Status::Ok();
    }
    GP_RETURN_IF_ERROR(Flush());
    return Close();
  }

  // The file the next chunk is for.
  std::string current() const { return file_ < files_.size() ? files_[file_]->path : ""; }

  // After the last chunk: the files that have none (empty ones at the end).
  Status Finish() {
    GP_RETURN_IF_ERROR(OpenThrough());
    if (file_ != files_.size()) return Status::Internal("fewer chunks than the manifest's files");
    return Status::Ok();
  }

 private:
  static constexpr size_t kWriteBytes = 4 << 20;
  static constexpr size_t kWriteChunks = 512;  // well under IOV_MAX

  // Opens the current file, creating and closing the empty ones on the way.
  Status OpenThrough() {
    while (fd_ < 0 && file_ < files_.size()) {
      const ManifestEntry& e = *files_[file_];
      tmp_ = dest_ / e.path;
      tmp_ += ".gpupool-partial";
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd_ < 0) return Errno("cannot create " + tmp_.string());
      chunk_ = 0;
      if (!e.chunks.empty()) break;
      GP_RETURN_IF_ERROR(Close());
    }
    return Status::Ok();
  }

  Status Flush() {
    std::vector<iovec> iov;
    iov.reserve(pending_.size());
    for (std::string& b : pending_) iov.push_back({b.data(), b.size()});
    size_t at = 0;  // first iovec not fully written
    while (at < iov.size()) {
      ssize_t n = ::writev(fd_, iov.data() + at, static_cast<int>(iov.size() - at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errno("cannot write " + files_[file_]->path);
      for (auto left = static_cast<size_t>(n); left > 0;) {
        size_t step = std::min(left, iov[at].iov_len);
        iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + step;
        iov[at].iov_len -= step;
        left -= step;
        if (iov[at].iov_len == 0) ++at;
      }
    }
    pending_.clear();
    pending_bytes_ = 0;
    return Status::Ok();
  }

  // The current file, complete: its mode, then its final name.
  Status Close() {
    const ManifestEntry& e = *files_[file_];
    Status s;
    if (::fchmod(fd_, e.mode) != 0) s = Errno("chmod " + e.path);
    ::close(fd_);
    fd_ = -1;
    if (s.ok() && ::rename(tmp_.c_str(), (dest_ / e.path).c_str()) != 0) {
      s = Errno("rename " + e.path);
    }
    if (!s.ok()) ::unlink(tmp_.c_str());
    ++file_;
    return s;
  }

  // Nothing half-written is left under a file's final name, nor beside it.
  void Abandon() {
    if (fd_ < 0) return;
    ::close(fd_);
    ::unlink(tmp_.c_str());
    fd_ = -1;
  }

  const fs::path dest_;
  const std::vector<const ManifestEntry*> files_;
  size_t file_ = 0;   // the file being written
  size_t chunk_ = 0;  // its next chunk
  int fd_ = -1;
  fs::path tmp_;
  std::vector<std::string> pending_;  // chunk bytes not written yet
  size_t pending_bytes_ = 0;
};

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
  std::vector<const ManifestEntry*> dirs, files;
  for (const ManifestEntry& e : manifest.entries) {
    if (e.type == EntryType::kDir) {
      if (::mkdir((fs::path(dest) / e.path).c_str(), 0700) != 0) {
        return Errno("cannot create " + e.path);
      }
      dirs.push_back(&e);
    } else if (e.type == EntryType::kFile) {
      files.push_back(&e);
    }
  }
  std::vector<ChunkId> ids;
  for (const ManifestEntry* f : files) {
    for (const ChunkRef& c : f->chunks) ids.push_back(c.id);
  }
  FileWriter writer(dest, files);
  Status written;  // the writer's own errors name their file
  Status read = store.ReadChunks(ids, [&](VerifiedChunk c) {
    written = writer.Add(std::move(c));
    return written;
  });
  if (!written.ok()) return written;
  if (!read.ok()) return read.WithContext(writer.current());
  GP_RETURN_IF_ERROR(writer.Finish());
  for (const ManifestEntry& e : manifest.entries) {
    if (e.type != EntryType::kSymlink) continue;
    if (::symlink(e.target.c_str(), (fs::path(dest) / e.path).c_str()) != 0) {
      return Errno("cannot link " + e.path);
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
