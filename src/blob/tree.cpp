#include "blob/tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/safe_fs.h"

namespace gpupool::blob {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchBytes = 32 << 20;  // chunk bytes held before asking the store

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

// Cuts the regular file open as `fd` into chunks, reading at most `size`
// bytes (what its listing said), so a file that grows while it is read
// cannot keep the reader busy for ever.
Status ChunkFile(int fd, int64_t size, ManifestEntry& entry, const StoreTreeOptions& options,
                 Uploader& up, TreeStats& stats) {
  const ChunkerOptions& chunker = options.chunker;
  std::string buf;
  size_t start = 0;  // of the unchunked bytes in buf
  int64_t left = size;
  bool eof = false;
  while (true) {
    // Keep at least max_size bytes ahead of the cut, unless the file ends.
    if (!eof && buf.size() - start < chunker.max_size) {
      buf.erase(0, start);
      start = 0;
      size_t have = buf.size();
      size_t want = static_cast<size_t>(std::min<int64_t>(left, 4 * chunker.max_size));
      buf.resize(have + want);
      ssize_t n = want == 0 ? 0 : ::read(fd, buf.data() + have, want);
      if (n < 0 && errno == EINTR) {
        buf.resize(have);
        continue;
      }
      if (n < 0) return Status::FromErrno("cannot read " + entry.path);
      buf.resize(have + static_cast<size_t>(n));
      left -= n;
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
    GP_RETURN_IF_ERROR(up.Add(buf.substr(start, len)));
    start += len;
    if (options.on_scanned) options.on_scanned(stats.bytes + entry.size);
  }
  return Status::Ok();
}

// One walk of StoreTree: every directory is read through its descriptor,
// every entry opened relative to its parent's, as `options.read_as`.
class TreeWalk {
 public:
  TreeWalk(const StoreTreeOptions& options, Manifest& m, Uploader& up, TreeStats& stats)
      : options_(options), m_(m), up_(up), stats_(stats) {}

  // The entries of directory `dir_fd`, which is `rel` in the tree.
  Status StoreDir(int dir_fd, const std::string& rel, int depth) {
    if (depth > kMaxDepth) return Status::InvalidArgument(rel + ": the tree is too deep");
    GP_ASSIGN_OR_RETURN(std::vector<Listed> listing, List(dir_fd));
    for (size_t i = 0; i < listing.size(); ++i) {
      Listed& l = listing[i];
      std::string path = (rel.empty() ? "" : rel + "/") + l.name;
      if (!l.st.ok()) {
        GP_RETURN_IF_ERROR(SkipOrFail(path, l.st.status()));
        continue;
      }
      const struct stat& st = *l.st;
      bool is_dir = S_ISDIR(st.st_mode);
      if (options_.ignore && options_.ignore(path, is_dir)) continue;
      ManifestEntry entry;
      entry.path = path;
      entry.mode = st.st_mode & 0777;
      if (S_ISLNK(st.st_mode)) {
        if (!l.target.ok()) {
          GP_RETURN_IF_ERROR(SkipOrFail(path, l.target.status()));
          continue;
        }
        entry.type = EntryType::kSymlink;
        entry.mode = 0;
        entry.target = *std::move(l.target);
        m_.entries.push_back(std::move(entry));
        continue;
      }
      if (!is_dir && !S_ISREG(st.st_mode)) continue;  // sockets, devices, fifos
      if (!is_dir && !l.opened) GP_RETURN_IF_ERROR(OpenFiles(dir_fd, rel, listing, i));
      Result<UniqueFd> opened =
          is_dir ? As([&] { return OpenEntry(dir_fd, l.name, st); }) : std::move(*l.opened);
      l.opened.reset();
      if (!opened.ok()) {
        GP_RETURN_IF_ERROR(SkipOrFail(path, opened.status()));
        continue;
      }
      if (is_dir) {
        entry.type = EntryType::kDir;
        m_.entries.push_back(std::move(entry));
        GP_RETURN_IF_ERROR(StoreDir(opened->get(), path, depth + 1));
      } else {
        entry.type = EntryType::kFile;
        GP_RETURN_IF_ERROR(ChunkFile(opened->get(), st.st_size, entry, options_, up_, stats_));
        ++stats_.files;
        stats_.bytes += entry.size;
        m_.entries.push_back(std::move(entry));
      }
    }
    return Status::Ok();
  }

  // Runs `f` (a file-system call) as options_.read_as.
  template <typename F>
  auto As(F&& f) -> decltype(f()) {
    auto id = ScopedFsIdentity::Assume(options_.read_as);
    if (!id.ok()) return id.status();
    return f();
  }

 private:
  // One entry of a directory as listed: its lstat, a symlink's target, a
  // regular file's descriptor once opened.
  struct Listed {
    std::string name;
    Result<struct stat> st = Status::Internal("not listed");
    Result<std::string> target = std::string();
    std::optional<Result<UniqueFd>> opened;
  };

  // Opens the regular files of `listing` from `from` on, up to kOpenBatch
  // of them, with one switch of identity (a switch costs about ten system
  // calls; a tree of many small files would spend most of its time there).
  // Ignored entries are skipped; the batch ends at the next directory;
  // descriptors are closed as each file is read.
  Status OpenFiles(int dir_fd, const std::string& rel, std::vector<Listed>& listing, size_t from) {
    GP_ASSIGN_OR_RETURN(ScopedFsIdentity id, ScopedFsIdentity::Assume(options_.read_as));
    size_t batch = 0;
    for (size_t i = from; i < listing.size() && batch < kOpenBatch; ++i) {
      Listed& l = listing[i];
      // No descriptor is held while the walk is in a subdirectory.
      if (l.st.ok() && S_ISDIR(l.st->st_mode)) break;
      if (!l.st.ok() || !S_ISREG(l.st->st_mode) || l.opened) continue;
      if (options_.ignore && options_.ignore((rel.empty() ? "" : rel + "/") + l.name, false)) {
        continue;
      }
      l.opened = OpenEntry(dir_fd, l.name, *l.st);
      ++batch;
    }
    return Status::Ok();
  }

  // The entries of `dir_fd`, sorted, each looked at once, all as
  // options_.read_as (one switch of identity for the directory).
  Result<std::vector<Listed>> List(int dir_fd) {
    GP_ASSIGN_OR_RETURN(ScopedFsIdentity id, ScopedFsIdentity::Assume(options_.read_as));
    GP_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir_fd));
    std::vector<Listed> out;
    out.reserve(names.size());
    for (std::string& name : names) {
      Listed l;
      l.st = StatEntry(dir_fd, name);
      if (l.st.ok() && S_ISLNK(l.st->st_mode)) l.target = ReadLinkAt(dir_fd, name);
      l.name = std::move(name);
      out.push_back(std::move(l));
    }
    return out;
  }

  static constexpr int kMaxDepth = 2048;  // manifests hold paths of up to 4096 bytes
  static constexpr size_t kOpenBatch = 64;
  static constexpr size_t kSkippedExamples = 5;

  // An entry that changed between its listing and its opening (the other
  // party is changing the tree) is left out and counted; anything else
  // (an entry the reader may not read, an I/O error) fails the walk.
  Status SkipOrFail(const std::string& path, const Status& why) {
    if (why.code() != StatusCode::kFailedPrecondition && why.code() != StatusCode::kNotFound) {
      return Status(why.code(), path + ": " + why.message());
    }
    ++stats_.skipped;
    if (stats_.skipped_examples.size() < kSkippedExamples) {
      stats_.skipped_examples.push_back(path + " (" +
                                        (why.code() == StatusCode::kNotFound
                                             ? std::string("removed while being read")
                                             : std::string("changed while being read")) +
                                        ")");
    }
    return Status::Ok();
  }

  const StoreTreeOptions& options_;
  Manifest& m_;
  Uploader& up_;
  TreeStats& stats_;
};

// The directory StoreTree walks: `dir` by its path, or beneath
// options.beneath with no symlink followed.
Result<UniqueFd> OpenTreeRoot(const std::string& dir, const StoreTreeOptions& options) {
  if (options.beneath.empty()) {
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return Status::InvalidArgument(dir + " is not a directory");
    return fd;
  }
  std::string rel = fs::path(dir)
                        .lexically_normal()
                        .lexically_relative(fs::path(options.beneath).lexically_normal())
                        .string();
  if (rel == ".") rel.clear();
  if (rel.starts_with("..") || fs::path(rel).is_absolute()) {
    return Status::InvalidArgument(dir + " does not lie under " + options.beneath);
  }
  UniqueFd top(::open(options.beneath.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!top.valid()) return Status::InvalidArgument(options.beneath + " is not a directory");
  auto fd = OpenDirBeneath(top.get(), rel);
  if (!fd.ok() && fd.status().code() == StatusCode::kFailedPrecondition) {
    return Status::FailedPrecondition(dir + " is not a directory (a symlink on the way?)");
  }
  return fd;
}

}  // namespace

Result<Manifest> StoreTree(const std::string& dir, ChunkStore& store,
                           const StoreTreeOptions& options, TreeStats* stats) {
  GP_RETURN_IF_ERROR(ValidateChunkerOptions(options.chunker));
  GP_ASSIGN_OR_RETURN(UniqueFd root, OpenTreeRoot(dir, options));
  TreeStats local;
  TreeStats& s = stats != nullptr ? *stats : local;
  s = {};
  Uploader up(store, options.zstd_level, options.known_stored, s);
  Manifest m;
  TreeWalk walk(options, m, up, s);
  GP_RETURN_IF_ERROR(walk.StoreDir(root.get(), "", 0));
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

}  // namespace gpupool::blob
