#include "blob/tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
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

// Chunks waiting to be offered to the store: each is hashed, and only the
// ones the store lacks are compressed and put. A full batch is handed to a
// thread of its own while the next one is read and cut; up to two batches
// are in flight, so that one is hashed while the other waits for the
// store's answer (store calls are made one at a time). The ids come out in
// the order the chunks went in.
class Uploader {
 public:
  Uploader(ChunkStore& store, int level, std::function<bool(const ChunkId&)> known_stored,
           TreeStats& stats)
      : store_(store), level_(level), known_stored_(std::move(known_stored)), stats_(stats) {}
  ~Uploader() { (void)WaitAll(); }

  Status Add(std::string bytes) {
    held_ += bytes.size();
    pending_.push_back(std::move(bytes));
    if (held_ < kBatchBytes) return Status::Ok();
    return Launch();
  }

  // Sends what is left, waits for everything, and returns the id of every
  // chunk added, in order.
  Result<std::vector<ChunkId>> Finish() {
    if (!pending_.empty()) GP_RETURN_IF_ERROR(Launch());
    GP_RETURN_IF_ERROR(WaitAll());
    std::vector<ChunkId> all;
    for (std::vector<ChunkId>& ids : ids_) {
      for (ChunkId& id : ids) all.push_back(std::move(id));
    }
    return all;
  }

 private:
  static constexpr size_t kInFlight = 2;

  Status Launch() {
    if (in_flight_.size() == kInFlight) {
      in_flight_.front().join();
      in_flight_.pop_front();
    }
    size_t slot = 0;
    {
      std::lock_guard lock(mu_);
      GP_RETURN_IF_ERROR(failed_);
      slot = ids_.size();
      ids_.emplace_back();
    }
    in_flight_.emplace_back([this, slot, batch = std::move(pending_)] {
      Status s = Send(batch, slot);
      std::lock_guard lock(mu_);
      if (!s.ok() && failed_.ok()) failed_ = s;
    });
    pending_.clear();
    held_ = 0;
    return Status::Ok();
  }

  Status WaitAll() {
    while (!in_flight_.empty()) {
      in_flight_.front().join();
      in_flight_.pop_front();
    }
    return Failed();
  }

  Status Failed() {
    std::lock_guard lock(mu_);
    return failed_;
  }

  Status Send(const std::vector<std::string>& batch, size_t slot) {
    std::vector<ChunkId> ids;
    ids.reserve(batch.size());
    for (const std::string& bytes : batch) ids.push_back(ComputeChunkId(Bytes(bytes)));
    std::vector<ChunkId> ask;  // whether the store holds them
    for (const ChunkId& id : ids) {
      if (!known_stored_ || !known_stored_(id)) ask.push_back(id);
    }
    std::lock_guard lock(mu_);  // the store, the counters and ids_
    ids_[slot] = ids;
    std::vector<ChunkId> missing;
    if (!ask.empty()) {
      GP_ASSIGN_OR_RETURN(missing, store_.Missing(ask));
    }
    std::sort(missing.begin(), missing.end());
    std::vector<std::pair<ChunkId, std::string>> frames;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!std::binary_search(missing.begin(), missing.end(), ids[i])) continue;
      GP_ASSIGN_OR_RETURN(std::string frame, CompressChunk(Bytes(batch[i]), level_));
      // A chunk repeated within the batch is put once.
      missing.erase(std::lower_bound(missing.begin(), missing.end(), ids[i]));
      ++stats_.new_chunks;
      stats_.uploaded_bytes += static_cast<int64_t>(frame.size());
      frames.emplace_back(ids[i], std::move(frame));
    }
    return store_.PutMany(frames);
  }

  ChunkStore& store_;
  int level_;
  const std::function<bool(const ChunkId&)> known_stored_;
  TreeStats& stats_;                  // new_chunks, uploaded_bytes guarded by mu_
  std::vector<std::string> pending_;  // chunk bytes of the batch being filled
  size_t held_ = 0;
  std::deque<std::thread> in_flight_;
  std::mutex mu_;
  std::vector<std::vector<ChunkId>> ids_;  // per batch, in order; guarded by mu_
  Status failed_;                          // the first batch's error; guarded by mu_
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
    // Its id comes from the uploader's thread (StoreTree fills it in).
    entry.chunks.push_back({"", static_cast<int64_t>(len)});
    entry.size += static_cast<int64_t>(len);
    ++stats.chunks;
    status = up.Add(buf.substr(start, len));
    start += len;
    if (options.on_scanned) options.on_scanned(stats.bytes + entry.size);
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

// How one file of a manifest is written: from scratch, or over a file of
// the base tree that already holds some of its chunks at their offsets.
struct FilePlan {
  const ManifestEntry* entry = nullptr;
  fs::path base;                 // the base file to take over; empty: none
  std::vector<size_t> needed;    // indices into entry->chunks, ascending
  std::vector<int64_t> offsets;  // of each of entry->chunks
};

// Chooses, for each file, the base file that holds the most of its bytes in
// place (the same chunk at the same offset), each base file for one file at
// most, and lists the chunks still to be written.
std::vector<FilePlan> PlanFiles(const std::vector<const ManifestEntry*>& files,
                                const RestoreBase* base) {
  // (chunk id, offset) -> the base files holding that chunk there.
  std::unordered_map<std::string, std::vector<size_t>> in_place;
  std::vector<const ManifestEntry*> base_files;
  if (base != nullptr) {
    for (const ManifestEntry& b : base->manifest.entries) {
      if (b.type != EntryType::kFile) continue;
      // Only a base file that is there as the base manifest says.
      struct stat st;
      fs::path p = fs::path(base->dir) / b.path;
      if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != b.size) continue;
      int64_t at = 0;
      for (const ChunkRef& c : b.chunks) {
        in_place[c.id + ":" + std::to_string(at)].push_back(base_files.size());
        at += c.size;
      }
      base_files.push_back(&b);
    }
  }
  std::vector<bool> taken(base_files.size(), false);
  std::vector<FilePlan> plans;
  for (const ManifestEntry* f : files) {
    FilePlan plan;
    plan.entry = f;
    int64_t at = 0;
    for (const ChunkRef& c : f->chunks) {
      plan.offsets.push_back(at);
      at += c.size;
    }
    std::map<size_t, int64_t> reusable;  // base file -> bytes it holds in place
    for (size_t i = 0; i < f->chunks.size(); ++i) {
      auto it = in_place.find(f->chunks[i].id + ":" + std::to_string(plan.offsets[i]));
      if (it == in_place.end()) continue;
      for (size_t b : it->second) {
        if (!taken[b]) reusable[b] += f->chunks[i].size;
      }
    }
    std::optional<size_t> best;
    for (const auto& [b, bytes] : reusable) {
      if (!best || bytes > reusable[*best]) best = b;
    }
    std::set<std::string> held;  // "id:offset" the chosen base file holds
    if (best) {
      taken[*best] = true;
      plan.base = fs::path(base->dir) / base_files[*best]->path;
      int64_t b_at = 0;
      for (const ChunkRef& c : base_files[*best]->chunks) {
        held.insert(c.id + ":" + std::to_string(b_at));
        b_at += c.size;
      }
    }
    for (size_t i = 0; i < f->chunks.size(); ++i) {
      if (!held.count(f->chunks[i].id + ":" + std::to_string(plan.offsets[i]))) {
        plan.needed.push_back(i);
      }
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

// Writes the planned files as their needed chunks arrive, in plan order.
// Chunks that follow each other in a file are gathered and written with one
// pwritev per ~4 MiB, since small writes cost ext4 far more per byte than
// large ones.
class FileWriter {
 public:
  FileWriter(const fs::path& dest, const std::vector<FilePlan>& plans)
      : dest_(dest), plans_(plans) {}
  ~FileWriter() { Abandon(); }

  // The next needed chunk, in plan order.
  Status Add(VerifiedChunk c) {
    GP_RETURN_IF_ERROR(OpenThrough());
    if (file_ == plans_.size()) return Status::Internal("more chunks than the manifest's files");
    const FilePlan& plan = plans_[file_];
    const ManifestEntry& e = *plan.entry;
    const size_t index = plan.needed[next_];
    const ChunkRef& ref = e.chunks[index];
    if (c.id != ref.id) return Status::Internal(e.path + ": chunk out of order");
    if (static_cast<int64_t>(c.bytes.size()) != ref.size) {
      return Status::DataLoss(e.path + ": chunk " + c.id.substr(0, 12) + " has " +
                              std::to_string(c.bytes.size()) + " bytes, the manifest says " +
                              std::to_string(ref.size));
    }
    const int64_t offset = plan.offsets[index];
    if (!pending_.empty() && offset != run_end_) GP_RETURN_IF_ERROR(Flush());
    if (pending_.empty()) run_start_ = offset;
    run_end_ = offset + ref.size;
    pending_bytes_ += c.bytes.size();
    pending_.push_back(std::move(c.bytes));
    if (++next_ < plan.needed.size()) {
      bool full = pending_bytes_ >= kWriteBytes || pending_.size() >= kWriteChunks;
      return full ? Flush() : Status::Ok();
    }
    GP_RETURN_IF_ERROR(Flush());
    return Close();
  }

  // The file the next chunk is for.
  std::string current() const { return file_ < plans_.size() ? plans_[file_].entry->path : ""; }

  // After the last chunk: the files that need none (empty, or all in place).
  Status Finish() {
    GP_RETURN_IF_ERROR(OpenThrough());
    if (file_ != plans_.size()) return Status::Internal("fewer chunks than the manifest's files");
    return Status::Ok();
  }

 private:
  static constexpr size_t kWriteBytes = 4 << 20;
  static constexpr size_t kWriteChunks = 512;  // well under IOV_MAX

  // Opens the current file, and completes the ones that need no chunk on
  // the way.
  Status OpenThrough() {
    while (fd_ < 0 && file_ < plans_.size()) {
      const FilePlan& plan = plans_[file_];
      tmp_ = dest_ / plan.entry->path;
      tmp_ += ".gpupool-partial";
      if (plan.base.empty()) {
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd_ < 0) return Errno("cannot create " + tmp_.string());
      } else {
        if (::rename(plan.base.c_str(), tmp_.c_str()) != 0) {
          return Errno("cannot take " + plan.base.string() + " over");
        }
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd_ < 0) return Errno("cannot open " + tmp_.string());
        if (::ftruncate(fd_, plan.entry->size) != 0) return Errno("cannot size " + tmp_.string());
      }
      next_ = 0;
      if (!plan.needed.empty()) break;
      GP_RETURN_IF_ERROR(Close());
    }
    return Status::Ok();
  }

  Status Flush() {
    std::vector<iovec> iov;
    iov.reserve(pending_.size());
    for (std::string& b : pending_) iov.push_back({b.data(), b.size()});
    size_t at = 0;  // first iovec not fully written
    off_t offset = run_start_;
    while (at < iov.size()) {
      ssize_t n = ::pwritev(fd_, iov.data() + at, static_cast<int>(iov.size() - at), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errno("cannot write " + plans_[file_].entry->path);
      offset += n;
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
    const ManifestEntry& e = *plans_[file_].entry;
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
  const std::vector<FilePlan>& plans_;
  size_t file_ = 0;  // the plan being written
  size_t next_ = 0;  // its next needed chunk (index into needed)
  int fd_ = -1;
  fs::path tmp_;
  std::vector<std::string> pending_;  // bytes of a run of chunks not written yet
  size_t pending_bytes_ = 0;
  int64_t run_start_ = 0;  // file offsets of that run
  int64_t run_end_ = 0;
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
  Uploader up(store, options.zstd_level, options.known_stored, s);
  Manifest m;
  GP_RETURN_IF_ERROR(StoreDir(fs::path(dir), "", options, m, up, s));
  GP_ASSIGN_OR_RETURN(std::vector<ChunkId> ids, up.Finish());
  // The chunks were added file by file in manifest order.
  size_t next = 0;
  for (ManifestEntry& e : m.entries) {
    for (ChunkRef& c : e.chunks) {
      if (next == ids.size()) return Status::Internal("fewer chunk ids than chunks");
      c.id = std::move(ids[next++]);
    }
  }
  if (next != ids.size()) return Status::Internal("more chunk ids than chunks");
  return m;
}

Status RestoreTree(const Manifest& manifest, ChunkStore& store, const std::string& dest,
                   const RestoreBase* base, RestoreStats* stats) {
  std::error_code ec;
  if (fs::exists(dest, ec) && !fs::is_empty(dest, ec)) {
    return Status::FailedPrecondition(dest + " is not empty");
  }
  fs::create_directories(dest, ec);
  if (ec) return Status::Internal("cannot create " + dest + ": " + ec.message());
  // The manifest's own rules (decoded or built in memory): relative paths
  // under listed directories, symlinks that stay inside.
  GP_RETURN_IF_ERROR(ValidateManifest(manifest));
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
  const std::vector<FilePlan> plans = PlanFiles(files, base);
  std::vector<ChunkId> ids;
  RestoreStats local;
  RestoreStats& st = stats != nullptr ? *stats : local;
  st = {};
  for (const FilePlan& p : plans) {
    ++st.files;
    st.bytes += p.entry->size;
    st.reused_bytes += p.entry->size;
    for (size_t i : p.needed) {
      ids.push_back(p.entry->chunks[i].id);
      st.reused_bytes -= p.entry->chunks[i].size;
    }
  }
  st.read_chunks = static_cast<int64_t>(ids.size());
  FileWriter writer(dest, plans);
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
