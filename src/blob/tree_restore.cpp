// RestoreTree (blob/tree.h): a manifest's tree written into a directory,
// only through directory descriptors. Nothing is ever written through a
// symlink or outside the destination: directories are made with mkdirat and
// opened with O_NOFOLLOW, files created with O_CREAT | O_EXCL | O_NOFOLLOW
// beside their final name and renamed into place within their directory,
// symlinks created last (so no write can go through one), and a base tree
// is taken over with renameat between directory descriptors.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "blob/tree.h"
#include "common/safe_fs.h"

namespace gpupool::blob {
namespace {

constexpr char kPartial[] = ".gpupool-partial";

// "a/b/c" -> "a/b" and "c"; "c" -> "" and "c".
std::string ParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}
std::string NameOf(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// renameat that never replaces what is at the destination.
int RenameNoReplace(int from_dir, const std::string& from, int to_dir, const std::string& to) {
  int r = ::renameat2(from_dir, from.c_str(), to_dir, to.c_str(), RENAME_NOREPLACE);
  if (r != 0 && errno == EINVAL) {
    // A file system without RENAME_NOREPLACE: check, then rename (the
    // destination directory is the restorer's alone).
    struct stat st;
    if (::fstatat(to_dir, to.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      errno = EEXIST;
      return -1;
    }
    r = ::renameat(from_dir, from.c_str(), to_dir, to.c_str());
  }
  return r;
}

// Directory descriptors of a tree by relative path, the last one kept:
// files come in manifest order, so consecutive files mostly share one.
class DirCache {
 public:
  explicit DirCache(int root) : root_(root) {}
  // A descriptor valid until the next call.
  Result<int> Get(const std::string& rel) {
    if (rel.empty()) return root_;
    if (!fd_.valid() || rel != rel_) {
      GP_ASSIGN_OR_RETURN(fd_, OpenDirBeneath(root_, rel));
      rel_ = rel;
    }
    return fd_.get();
  }

 private:
  const int root_;
  UniqueFd fd_;
  std::string rel_;
};

// How one file of a manifest is written: from scratch, or over a file of
// the base tree that already holds some of its chunks at their offsets.
struct FilePlan {
  const ManifestEntry* entry = nullptr;
  std::string base;              // the base file to take over (its path in the base); empty: none
  std::vector<size_t> needed;    // indices into entry->chunks, ascending
  std::vector<int64_t> offsets;  // of each of entry->chunks
};

// Chooses, for each file, the base file that holds the most of its bytes in
// place (the same chunk at the same offset), each base file for one file at
// most, and lists the chunks still to be written. `base_fd`: the base tree
// (-1: none).
std::vector<FilePlan> PlanFiles(const std::vector<const ManifestEntry*>& files,
                                const RestoreBase* base, int base_fd) {
  // (chunk id, offset) -> the base files holding that chunk there.
  std::unordered_map<std::string, std::vector<size_t>> in_place;
  std::vector<const ManifestEntry*> base_files;
  if (base != nullptr && base_fd >= 0) {
    DirCache dirs(base_fd);
    for (const ManifestEntry& b : base->manifest.entries) {
      if (b.type != EntryType::kFile) continue;
      // Only a base file that is there as the base manifest says, reached
      // without following a symlink.
      auto parent = dirs.Get(ParentOf(b.path));
      if (!parent.ok()) continue;
      struct stat st;
      if (::fstatat(*parent, NameOf(b.path).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode) || st.st_size != b.size) {
        continue;
      }
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
      plan.base = base_files[*best]->path;
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
  FileWriter(int dest_fd, int base_fd, const std::vector<FilePlan>& plans)
      : dest_dirs_(dest_fd), base_dirs_(base_fd), plans_(plans) {}
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
    while (!fd_.valid() && file_ < plans_.size()) {
      const FilePlan& plan = plans_[file_];
      const std::string& path = plan.entry->path;
      GP_ASSIGN_OR_RETURN(int parent, dest_dirs_.Get(ParentOf(path)));
      parent_ = UniqueFd(::fcntl(parent, F_DUPFD_CLOEXEC, 0));
      if (!parent_.valid()) return Status::FromErrno("dup");
      tmp_ = NameOf(path) + kPartial;
      if (plan.base.empty()) {
        fd_ = UniqueFd(::openat(parent_.get(), tmp_.c_str(),
                                O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!fd_.valid()) return Status::FromErrno("cannot create " + path + kPartial);
      } else {
        GP_ASSIGN_OR_RETURN(int from, base_dirs_.Get(ParentOf(plan.base)));
        if (RenameNoReplace(from, NameOf(plan.base), parent_.get(), tmp_) != 0) {
          return Status::FromErrno("cannot take " + plan.base + " over");
        }
        fd_ = UniqueFd(::openat(parent_.get(), tmp_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
        if (!fd_.valid()) return Status::FromErrno("cannot open " + path + kPartial);
        struct stat st;
        if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
          return Status::Internal("the base file " + plan.base + " is not a regular file");
        }
        if (::ftruncate(fd_.get(), plan.entry->size) != 0)
          return Status::FromErrno("cannot size " + path);
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
      ssize_t n = ::pwritev(fd_.get(), iov.data() + at, static_cast<int>(iov.size() - at), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::FromErrno("cannot write " + plans_[file_].entry->path);
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
    if (::fchmod(fd_.get(), e.mode) != 0) s = Status::FromErrno("chmod " + e.path);
    fd_.Reset();
    if (s.ok() && RenameNoReplace(parent_.get(), tmp_, parent_.get(), NameOf(e.path)) != 0) {
      s = Status::FromErrno("rename " + e.path);
    }
    if (!s.ok()) ::unlinkat(parent_.get(), tmp_.c_str(), 0);
    parent_.Reset();
    ++file_;
    return s;
  }

  // Nothing half-written is left under a file's final name, nor beside it.
  void Abandon() {
    if (!fd_.valid()) return;
    fd_.Reset();
    ::unlinkat(parent_.get(), tmp_.c_str(), 0);
    parent_.Reset();
  }

  DirCache dest_dirs_;
  DirCache base_dirs_;
  const std::vector<FilePlan>& plans_;
  size_t file_ = 0;  // the plan being written
  size_t next_ = 0;  // its next needed chunk (index into needed)
  UniqueFd fd_;      // the file being written, as tmp_ in parent_
  UniqueFd parent_;
  std::string tmp_;
  std::vector<std::string> pending_;  // bytes of a run of chunks not written yet
  size_t pending_bytes_ = 0;
  int64_t run_start_ = 0;  // file offsets of that run
  int64_t run_end_ = 0;
};

// Makes the manifest's directories under `dest_fd`, in manifest order (a
// directory is listed after its parent).
Status MakeDirs(int dest_fd, const std::vector<const ManifestEntry*>& dirs) {
  DirCache parents(dest_fd);
  for (const ManifestEntry* d : dirs) {
    GP_ASSIGN_OR_RETURN(int parent, parents.Get(ParentOf(d->path)));
    if (::mkdirat(parent, NameOf(d->path).c_str(), 0700) != 0) {
      return Status::FromErrno("cannot create " + d->path);
    }
  }
  return Status::Ok();
}

}  // namespace

Status RestoreTree(const Manifest& manifest, ChunkStore& store, const std::string& dest,
                   const RestoreBase* base, RestoreStats* stats) {
  // `dest` itself is never followed if it is a symlink; its parents are the
  // caller's.
  GP_ASSIGN_OR_RETURN(UniqueFd dest_fd, OpenOrMakeDirPath(dest, 0700));
  GP_ASSIGN_OR_RETURN(std::vector<std::string> present, ListDir(dest_fd.get()));
  if (!present.empty()) return Status::FailedPrecondition(dest + " is not empty");
  // The manifest's own rules (decoded or built in memory): relative paths
  // under listed directories, symlinks that stay inside.
  GP_RETURN_IF_ERROR(ValidateManifest(manifest));
  std::vector<const ManifestEntry*> dirs, files;
  for (const ManifestEntry& e : manifest.entries) {
    if (e.type == EntryType::kDir) dirs.push_back(&e);
    if (e.type == EntryType::kFile) files.push_back(&e);
  }
  GP_RETURN_IF_ERROR(MakeDirs(dest_fd.get(), dirs));
  UniqueFd base_fd;
  if (base != nullptr) {
    base_fd = UniqueFd(::open(base->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  const std::vector<FilePlan> plans = PlanFiles(files, base, base_fd.get());
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
  FileWriter writer(dest_fd.get(), base_fd.get(), plans);
  Status written;  // the writer's own errors name their file
  Status read = store.ReadChunks(ids, [&](VerifiedChunk c) {
    written = writer.Add(std::move(c));
    return written;
  });
  if (!written.ok()) return written;
  if (!read.ok()) return read.WithContext(writer.current());
  GP_RETURN_IF_ERROR(writer.Finish());
  DirCache parents(dest_fd.get());
  for (const ManifestEntry& e : manifest.entries) {
    if (e.type != EntryType::kSymlink) continue;
    GP_ASSIGN_OR_RETURN(int parent, parents.Get(ParentOf(e.path)));
    if (::symlinkat(e.target.c_str(), parent, NameOf(e.path).c_str()) != 0) {
      return Status::FromErrno("cannot link " + e.path);
    }
  }
  // Directories get their modes last, so a read-only one could still be
  // filled, children before parents (a parent without search permission
  // would hide them); each is opened again without following a symlink.
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const ManifestEntry* d = *it;
    GP_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirBeneath(dest_fd.get(), d->path));
    if (::fchmod(fd.get(), d->mode) != 0) return Status::FromErrno("cannot chmod " + d->path);
  }
  return Status::Ok();
}

}  // namespace gpupool::blob
