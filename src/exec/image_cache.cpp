#include "exec/image_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "common/disk_usage.h"
#include "common/files.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/safe_fs.h"
#include "common/units.h"
#include "exec/image_tools.h"
#include "exec/subprocess.h"
#include "model/oci_image.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The tag the image gets in the temporary layout skopeo copies into.
constexpr char kPullTag[] = "gpupool";
constexpr char kSha256[] = "sha256:";

std::string ErrnoText(int e) { return std::strerror(e); }

// flock(2), retried on EINTR. Returns 0 or the errno (EWOULDBLOCK: busy).
int Flock(int fd, int op) {
  while (::flock(fd, op) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// Opens `path` (creating it) and takes `op` on it, blocking.
Result<UniqueFd> OpenLocked(const std::string& path, int op) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Status::Internal("cannot open " + path + ": " + ErrnoText(errno));
  if (int e = Flock(fd.get(), op); e != 0) {
    return Status::Internal("cannot lock " + path + ": " + ErrnoText(e));
  }
  return fd;
}

// Removes a tree; directories without write permission (image roots may
// have some) are opened up first. Errors are logged, not returned: callers
// remove what is already unpublished.
void MakeTreeWritable(const fs::path& dir) {
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ec);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_directory(ec2) && !it->is_symlink(ec2)) MakeTreeWritable(it->path());
  }
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (!ec) return;
  MakeTreeWritable(path);
  fs::remove_all(path, ec);
  if (ec) GP_LOG(kWarn) << "image cache: cannot remove " << path << ": " << ec.message();
}

// A directory under tmp/ that its owner holds with an exclusive flock; the
// tree is removed on destruction.
class WorkDir {
 public:
  WorkDir() = default;
  WorkDir(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  WorkDir(WorkDir&& o) noexcept = default;
  WorkDir& operator=(WorkDir&& o) noexcept {
    if (this != &o) {
      Remove();
      path_ = std::move(o.path_);
      o.path_.clear();
      fd_ = std::move(o.fd_);
    }
    return *this;
  }
  ~WorkDir() { Remove(); }
  const std::string& path() const { return path_; }

 private:
  void Remove() {
    if (!path_.empty()) RemoveTree(path_);
    path_.clear();
    fd_.Reset();
  }
  std::string path_;
  UniqueFd fd_;
};

// Gives `dir` (just made, 0700) to `as`, if set.
Status GiveDir(int fd, const std::string& dir, const FsIdentity& as) {
  if (!as.set()) return Status::Ok();
  int gid = as.gid >= 0 ? as.gid : as.uid;
  if (::fchown(fd, static_cast<uid_t>(as.uid), static_cast<gid_t>(gid)) != 0) {
    return Status::Internal("cannot give " + dir + " to uid " + std::to_string(as.uid) + ": " +
                            ErrnoText(errno));
  }
  return Status::Ok();
}

// Makes directory `dir` (0700) for `as`.
Status MakeDirFor(const std::string& dir, const FsIdentity& as) {
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return Status::Internal("cannot create " + dir + ": " + ErrnoText(errno));
  }
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::Internal("cannot open " + dir + ": " + ErrnoText(errno));
  return GiveDir(fd.get(), dir, as);
}

// Creates and locks tmp/<prefix>XXXXXX, `as`'s. Call with the global lock
// held, so no cleaner sees it between mkdtemp and flock.
Result<WorkDir> MakeWorkDir(const std::string& tmp_dir, const std::string& prefix,
                            const FsIdentity& as = {}) {
  std::string tmpl = tmp_dir + "/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Status::Internal("cannot create a directory in " + tmp_dir + ": " + ErrnoText(errno));
  }
  UniqueFd fd(::open(tmpl.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  Status given = fd.valid() ? GiveDir(fd.get(), tmpl, as) : Status::Ok();
  if (fd.get() < 0 || !given.ok() || Flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    RemoveTree(tmpl);
    if (!given.ok()) return given;
    return Status::Internal("cannot lock " + tmpl + ": " + ErrnoText(e));
  }
  return WorkDir(tmpl, std::move(fd));
}

// The entries of tmp/ that no process holds: leftovers of a crash. Call with
// the global lock held; the caller removes them (destroys the WorkDirs)
// after releasing it.
std::vector<WorkDir> ClaimStaleWork(const std::string& tmp_dir) {
  std::vector<WorkDir> stale;
  std::error_code ec;
  for (fs::directory_iterator it(tmp_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string path = it->path().string();
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) {
      ::unlink(path.c_str());  // a stray file
      continue;
    }
    if (Flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // in use
    GP_LOG(kInfo) << "image cache: removing leftover " << path;
    stale.emplace_back(path, std::move(fd));
  }
  return stale;
}

bool IsHexDigest(std::string_view hex) {
  return hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string HexOf(std::string_view digest) { return DigestHex(digest); }

// "sha256:0123456789ab" for messages.
std::string ShortDigest(const std::string& digest) { return digest.substr(0, 7 + 12); }

std::string Prefix(const ImageRef& ref) { return ImagePrefix(ref); }

// ---- image documents ------------------------------------------------------

// Reads `path` as `as` (the pull's account: what it wrote is only read
// with its permissions).
Result<std::string> ReadAs(const FsIdentity& as, const std::string& path) {
  GP_ASSIGN_OR_RETURN(ScopedFsIdentity id, ScopedFsIdentity::Assume(as));
  return ReadFile(path);
}

Result<json> ReadJson(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(path + " is not valid JSON");
  return j;
}

struct PulledImage {
  std::string digest;  // of the manifest
  ImageConfig config;
};

// index.json -> the manifest tagged `tag` -> its config blob, in the pull's
// directory `work_dir`, read as `as` (what the tools wrote, only with their
// account's permissions) through descriptors.
Result<PulledImage> ReadLayout(const std::string& work_dir, const std::string& tag,
                               const FsIdentity& as) {
  UniqueFd work(::open(work_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!work.valid()) return Status::Internal("cannot open " + work_dir + ": " + ErrnoText(errno));
  auto read = [&](const std::string& rel) -> Result<std::string> {
    GP_ASSIGN_OR_RETURN(ScopedFsIdentity id, ScopedFsIdentity::Assume(as));
    return ReadFileBeneath(work.get(), rel, kMaxImageJsonBytes);
  };
  GP_ASSIGN_OR_RETURN(std::string index, read("layout/index.json"));
  auto tagged = TaggedManifestDigest(index, tag);
  if (!tagged.ok()) return Status::InvalidArgument("the copied layout has no manifest");
  PulledImage image;
  image.digest = *tagged;
  std::string hex = HexOf(image.digest);
  if (hex.empty()) return Status::InvalidArgument("unsupported digest \"" + image.digest + "\"");
  GP_ASSIGN_OR_RETURN(std::string manifest_text, read("layout/blobs/sha256/" + hex));
  GP_ASSIGN_OR_RETURN(ImageManifestInfo manifest, ParseImageManifest(manifest_text));
  if (manifest.is_index || manifest.config_digest.empty()) {
    return Status::InvalidArgument("the manifest has no config (is it an image index?)");
  }
  std::string config_hex = HexOf(manifest.config_digest);
  if (config_hex.empty()) return Status::InvalidArgument("the manifest's config digest is invalid");
  GP_ASSIGN_OR_RETURN(std::string config, read("layout/blobs/sha256/" + config_hex));
  Result<ImageConfig> parsed = ParseImageConfig(config);
  if (!parsed.ok()) return parsed.status().WithContext("image config");
  image.config = *std::move(parsed);
  return image;
}

// ---- ref keys -------------------------------------------------------------

std::string StatKey(const struct stat& st) {
  int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return "|size=" + std::to_string(st.st_size) + "|mtime_ns=" + std::to_string(mtime_ns) +
         "|ino=" + std::to_string(st.st_ino);
}

// stat(2) as `as`.
int StatAs(const FsIdentity& as, const std::string& path, struct stat* st) {
  auto id = ScopedFsIdentity::Assume(as);
  if (!id.ok()) {
    errno = EPERM;
    return -1;
  }
  return ::stat(path.c_str(), st);
}

// The key a ref is cached under (see the header), or why it cannot be used.
// A local image is looked at as `as`, who will read it: a job cannot name
// a file its account could not read.
Result<std::string> RefKey(const ImageRef& ref, const FsIdentity& as) {
  if (!ref.local()) return "docker|" + ref.text;
  const std::string prefix = Prefix(ref);
  struct stat st {};
  if (StatAs(as, ref.location, &st) != 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) {
      return Status::NotFound(prefix + "not found: " + ref.location + " does not exist");
    }
    return Status::PermissionDenied(prefix + "cannot read " + ref.location + ": " + ErrnoText(e));
  }
  if (ref.kind != ImageRef::Kind::kOciDir) {
    if (S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument(prefix + ref.location +
                                     " is a directory, not an archive (use oci:DIR for a layout)");
    }
    return ref.text + StatKey(st);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(prefix + ref.location + " is not a directory");
  }
  std::string index_path = ref.location + "/index.json";
  if (StatAs(as, index_path, &st) != 0) {
    return Status::NotFound(prefix + "not found: " + ref.location +
                            " is not an OCI layout (no index.json)");
  }
  if (!ref.tag.empty()) {
    Result<std::string> index = ReadAs(as, index_path);
    Result<std::string> tagged =
        index.ok() ? TaggedManifestDigest(*index, ref.tag) : Result<std::string>(index.status());
    if (tagged.status().code() == StatusCode::kNotFound && index.ok()) {
      return Status::NotFound(prefix + "not found: no tag \"" + ref.tag + "\" in " + ref.location);
    }
    if (!tagged.ok()) {
      return Status::InvalidArgument(prefix + "cannot read " + index_path + ": " +
                                     tagged.status().message());
    }
  }
  return ref.text + StatKey(st);
}

Status MakeDir(const std::string& path, mode_t at_least) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Status::Internal("cannot create " + path + ": " + ec.message());
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::Internal("cannot stat " + path + ": " + ErrnoText(errno));
  }
  if ((st.st_mode & at_least) != at_least &&
      ::chmod(path.c_str(), (st.st_mode & 07777) | at_least) != 0) {
    return Status::Internal("cannot chmod " + path + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

Status TooLargeUnpacked(const ImageRef& ref, int64_t limit) {
  return Status::ResourceExhausted(
      Prefix(ref) + "unpacked, it takes more than this node's limit of " + FormatBytes(limit) +
      " per image (max-image-size); unpacking was stopped");
}

// What the image's manifest declares (`skopeo inspect`), run through `tool`.
Result<ImageManifestInfo> Inspect(const ImageRef& ref, const ImageCacheOptions& options,
                                  const PullTools& tools, const std::function<bool()>& cancelled) {
  const int64_t timeout = options.command_timeout_ms;
  // What skopeo prints, bounded: a registry may send anything.
  auto run = [&](std::vector<std::string> argv, std::string& out) -> Status {
    bool too_long = false;
    Result<CommandResult> r = tools.Run(
        std::move(argv),
        [&](std::string_view line) {
          if (out.size() + line.size() + 1 > kMaxImageJsonBytes) {
            too_long = true;
            return;
          }
          out.append(line);
          out += '\n';
        },
        timeout, cancelled);
    if (!r.ok()) return NotRun(ref, "cannot pull", r.status());
    if (!r->ok()) return ToolFailure(ref, "cannot pull", "skopeo", *r, timeout);
    if (too_long) {
      return Status::InvalidArgument(Prefix(ref) + "cannot pull: its manifest is larger than " +
                                     FormatBytes(kMaxImageJsonBytes));
    }
    return Status::Ok();
  };
  std::string raw;
  GP_RETURN_IF_ERROR(run({options.skopeo, "inspect", "--raw", ref.text}, raw));
  auto info = ParseImageManifest(raw);
  if (!info.ok()) {
    return Status::InvalidArgument(Prefix(ref) + "cannot pull: " + info.status().message());
  }
  if (!info->is_index && info->bytes) return info;
  // An index (multi-platform), or a schema 1 manifest without sizes: ask
  // for the image skopeo will copy for this platform.
  std::string full;
  GP_RETURN_IF_ERROR(run({options.skopeo, "inspect", ref.text}, full));
  auto summary = ParseSkopeoInspect(full);
  if (!summary.ok()) {
    return Status::InvalidArgument(Prefix(ref) + "cannot pull: " + summary.status().message());
  }
  if (!summary->bytes && info->layers >= 0) summary->layers = info->layers;
  return summary;
}

// Completes an unpacked bundle: sealed, measured, metadata, permissions,
// and "ready" last.
Status CompleteBundle(const ImageRef& ref, const PulledImage& image, const std::string& bundle,
                      const FsIdentity& as, int64_t max_bytes, int64_t now_ms) {
  auto cache_error = [&](const Status& s) {
    return Status(s.code(), Prefix(ref) + "cache: " + s.message());
  };
  // The account's no more: root's, and no setuid or setgid bit left (an
  // agent that is not root pulled as itself: the bits go all the same).
  if (Status s = SealRoot(bundle, as.set()); !s.ok()) return cache_error(s);
  // Measured once more, whole: the watch looks only every so often.
  const int64_t bytes = DiskUsage(bundle);
  if (max_bytes > 0 && bytes > max_bytes) return TooLargeUnpacked(ref, max_bytes);
  std::error_code ec;
  for (fs::directory_iterator it(bundle, ec), end; !ec && it != end; it.increment(ec)) {
    // umoci's record for `umoci repack`, as large as the file list.
    if (it->path().extension() == ".mtree") fs::remove(it->path(), ec);
  }
  if (::chmod(bundle.c_str(), 0711) != 0 || ::chmod((bundle + "/rootfs").c_str(), 0755) != 0) {
    return cache_error(Status::Internal("cannot chmod " + bundle + ": " + ErrnoText(errno)));
  }
  json meta = {
      {"digest", image.digest}, {"ref", ref.text}, {"config", ImageConfigToJson(image.config)}};
  WriteOptions readable;
  readable.mode = 0644;
  Status s = WriteFileAtomic(bundle + "/image-config.json", meta.dump(2) + "\n", readable);
  if (s.ok()) s = WriteFileAtomic(bundle + "/lock", "", readable);
  if (s.ok()) s = WriteFileAtomic(bundle + "/last_used", std::to_string(now_ms) + "\n");
  if (s.ok()) s = WriteFileAtomic(bundle + "/size", std::to_string(bytes) + "\n");
  if (s.ok()) s = WriteFileAtomic(bundle + "/ready", "");
  if (!s.ok()) return cache_error(s);
  return Status::Ok();
}

}  // namespace

// ---- ImageLease -----------------------------------------------------------

ImageLease::ImageLease(ImageLease&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      rootfs_(std::move(other.rootfs_)),
      digest_(std::move(other.digest_)),
      config_(std::move(other.config_)),
      cached_(other.cached_),
      bytes_(other.bytes_) {}

ImageLease& ImageLease::operator=(ImageLease&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    rootfs_ = std::move(other.rootfs_);
    digest_ = std::move(other.digest_);
    config_ = std::move(other.config_);
    cached_ = other.cached_;
    bytes_ = other.bytes_;
  }
  return *this;
}

ImageLease::~ImageLease() { Release(); }

void ImageLease::Release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---- ImageCache -----------------------------------------------------------

ImageCache::ImageCache(ImageCacheOptions options) : options_(std::move(options)) {
  std::error_code ec;
  fs::path abs = fs::absolute(options_.dir, ec);
  if (!ec) options_.dir = abs.lexically_normal().string();
  while (options_.dir.size() > 1 && options_.dir.back() == '/') options_.dir.pop_back();
}

int64_t ImageCache::Now() const {
  return options_.clock != nullptr ? options_.clock->NowMs() : real_clock_.NowMs();
}

std::string ImageCache::RootPath(const std::string& hex) const {
  return options_.dir + "/roots/" + hex;
}

std::string ImageCache::RefPath(const std::string& key_hash) const {
  return options_.dir + "/refs/" + key_hash + ".json";
}

Status ImageCache::EnsureLayout() const {
  if (options_.dir.empty()) return Status::InvalidArgument("image cache: no directory configured");
  GP_RETURN_IF_ERROR(MakeDir(options_.dir, 0711));
  GP_RETURN_IF_ERROR(MakeDir(options_.dir + "/roots", 0711));
  // tmp/ is crossed (not listed) by the accounts pulls run as, each into
  // its own directory.
  GP_RETURN_IF_ERROR(MakeDir(options_.dir + "/tmp", 0711));
  for (const char* sub : {"/refs", "/pulls"}) {
    GP_RETURN_IF_ERROR(MakeDir(options_.dir + sub, 0700));
  }
  return Status::Ok();
}

Result<int> ImageCache::LockGlobal() const {
  GP_ASSIGN_OR_RETURN(UniqueFd fd, OpenLocked(options_.dir + "/lock", LOCK_EX));
  return fd.Release();
}

std::optional<ImageLease> ImageCache::LeaseRoot(const std::string& hex, bool cached) const {
  const std::string root = RootPath(hex);
  if (::access((root + "/ready").c_str(), F_OK) != 0) return std::nullopt;
  UniqueFd fd(::open((root + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  // Only an evictor holds it exclusively, and it holds the global lock too,
  // which the caller has: this cannot block for long, but never wait.
  if (Flock(fd.get(), LOCK_SH | LOCK_NB) != 0) return std::nullopt;
  Result<json> meta = ReadJson(root + "/image-config.json");
  if (!meta.ok() || !meta->is_object()) return std::nullopt;
  Result<ImageConfig> config = ImageConfigFromJson(meta->value("config", json()), "config");
  if (!config.ok()) return std::nullopt;
  Result<std::string> size = ReadFileTrimmed(root + "/size");
  Status touched = WriteFileAtomic(root + "/last_used", std::to_string(Now()) + "\n");
  if (!touched.ok()) GP_LOG(kWarn) << "image cache: " << touched.message();

  ImageLease lease;
  lease.fd_ = fd.Release();
  lease.rootfs_ = root + "/rootfs";
  lease.digest_ = kSha256 + hex;
  lease.config_ = *std::move(config);
  lease.cached_ = cached;
  lease.bytes_ = size.ok() ? std::strtoll(size->c_str(), nullptr, 10) : 0;
  return lease;
}

std::optional<ImageLease> ImageCache::LookupLocked(const std::string& key_hash) const {
  Result<json> ref = ReadJson(RefPath(key_hash));
  if (!ref.ok() || !ref->is_object()) return std::nullopt;
  std::string hex = HexOf(ref->value("digest", ""));
  if (hex.empty()) return std::nullopt;
  std::optional<ImageLease> lease = LeaseRoot(hex, /*cached=*/true);
  if (!lease && ::access((RootPath(hex) + "/ready").c_str(), F_OK) != 0) {
    ::unlink(RefPath(key_hash).c_str());  // its root is gone
  }
  return lease;
}

Result<ImageLease> ImageCache::Acquire(const ImageRef& ref, const ProgressFn& progress,
                                       const std::function<bool()>& cancelled,
                                       const FsIdentity& as) {
  const std::string prefix = Prefix(ref);
  auto report = [&](const std::string& event) {
    if (progress) progress(event);
  };
  auto cache_error = [&](const Status& s) {
    return Status(s.code(), prefix + "cache: " + s.message());
  };
  if (Status s = EnsureLayout(); !s.ok()) return cache_error(s);
  GP_ASSIGN_OR_RETURN(std::string key, RefKey(ref, as));
  const std::string key_hash = Sha256Hex(key);

  auto lookup = [&]() -> Result<std::optional<ImageLease>> {
    Result<int> lock = LockGlobal();
    if (!lock.ok()) return cache_error(lock.status());
    UniqueFd global(*lock);
    return LookupLocked(key_hash);
  };
  auto cached = [&](ImageLease lease) -> Result<ImageLease> {
    report("image cached (" + ShortDigest(lease.digest()) + ", " + FormatBytes(lease.bytes()) +
           ")");
    return lease;
  };

  GP_ASSIGN_OR_RETURN(std::optional<ImageLease> found, lookup());
  if (found) return cached(*std::move(found));

  // One pull per ref key at a time. The holder removes the lock file when
  // done; a waiter that then gets a lock on the removed file tries again.
  const std::string pull_lock_path = options_.dir + "/pulls/" + key_hash + ".lock";
  UniqueFd pull_lock;
  while (true) {
    Result<UniqueFd> fd = OpenLocked(pull_lock_path, LOCK_EX);
    if (!fd.ok()) return cache_error(fd.status());
    struct stat held {
    }, now{};
    if (::fstat(fd->get(), &held) == 0 && ::stat(pull_lock_path.c_str(), &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
      pull_lock = *std::move(fd);
      break;
    }
  }
  struct PullLockRemover {
    const std::string& path;
    ~PullLockRemover() { ::unlink(path.c_str()); }  // before pull_lock closes
  } remover{pull_lock_path};

  GP_ASSIGN_OR_RETURN(found, lookup());  // pulled while this process waited?
  if (found) return cached(*std::move(found));

  GP_ASSIGN_OR_RETURN(ImageLease lease, Pull(ref, key, key_hash, progress, cancelled, as));
  if (Status s = Evict(); !s.ok()) GP_LOG(kWarn) << "image cache: " << s.message();
  report("image ready (" + ShortDigest(lease.digest()) + ", " + FormatBytes(lease.bytes()) + ")");
  return lease;
}

Result<ImageLease> ImageCache::Pull(const ImageRef& ref, const std::string& key,
                                    const std::string& key_hash, const ProgressFn& progress,
                                    const std::function<bool()>& cancelled, const FsIdentity& as) {
  const std::string prefix = Prefix(ref);
  auto report = [&](const std::string& event) {
    if (progress) progress(event);
  };
  auto cache_error = [&](const Status& s) {
    return Status(s.code(), prefix + "cache: " + s.message());
  };
  const std::string tmp_dir = options_.dir + "/tmp";
  const int64_t timeout = options_.command_timeout_ms;
  const int64_t limit = options_.max_image_bytes;

  // A work directory of our own (the pull's account's); leftovers of
  // crashed pulls go.
  WorkDir work;
  {
    std::vector<WorkDir> stale;
    Result<int> lock = LockGlobal();
    if (!lock.ok()) return cache_error(lock.status());
    UniqueFd global(*lock);
    stale = ClaimStaleWork(tmp_dir);
    Result<WorkDir> made = MakeWorkDir(tmp_dir, "pull-", as);
    if (!made.ok()) return cache_error(made.status());
    work = *std::move(made);
    global.Reset();
  }  // the stale trees are removed here, without the global lock
  // The tools see the work directory as tools.dir().
  const PullTools tools(as, work.path());

  report("pulling image " + ref.text);
  if (Status s = MakeDirFor(work.path() + "/skopeo-tmp", as); !s.ok()) return cache_error(s);
  const std::string skopeo_tmp = tools.dir() + "/skopeo-tmp";
  const std::string layout = tools.dir() + "/layout";

  // How many layers, for "N/M layers", and how large, for the limit.
  GP_ASSIGN_OR_RETURN(ImageManifestInfo declared, Inspect(ref, options_, tools, cancelled));
  if (declared.bytes && limit > 0 && *declared.bytes > limit) {
    return Status::ResourceExhausted(prefix + "its layers take " + FormatBytes(*declared.bytes) +
                                     " compressed, more than this node's limit of " +
                                     FormatBytes(limit) + " per image (max-image-size)");
  }
  const int layers = declared.layers;

  std::set<std::string> blobs;
  auto on_copy_line = [&](std::string_view line) {
    constexpr std::string_view kBlob = "Copying blob ";
    if (!line.starts_with(kBlob)) return;
    std::string_view id = line.substr(kBlob.size());
    id = id.substr(0, id.find(' '));
    if (!blobs.insert(std::string(id)).second) return;
    int n = static_cast<int>(blobs.size());
    report("pulling image " + std::to_string(n) + "/" +
           (layers >= 0 ? std::to_string(std::max(layers, n)) : std::string("?")) + " layers");
  };
  std::vector<std::string> copy = {options_.skopeo, "--tmpdir", skopeo_tmp, "copy"};
  if (!ref.local()) copy.insert(copy.end(), {"--retry-times", "3"});
  copy.insert(copy.end(), {ref.text, "oci:" + layout + ":" + kPullTag});
  {
    SizeWatch watch(work.path(), limit, cancelled);
    Result<CommandResult> r = tools.Run(copy, on_copy_line, timeout, std::ref(watch));
    if (!r.ok()) return NotRun(ref, "cannot pull", r.status());
    if (watch.over() > 0) {
      return Status::ResourceExhausted(prefix + "the download passed this node's limit of " +
                                       FormatBytes(limit) +
                                       " per image (max-image-size) and was stopped");
    }
    if (!r->ok()) return ToolFailure(ref, "cannot pull", "skopeo", *r, timeout);
  }

  Result<PulledImage> image = ReadLayout(work.path(), kPullTag, as);
  if (!image.ok()) {
    return Status::InvalidArgument(prefix + "cannot read the image: " + image.status().message());
  }
  const std::string hex = HexOf(image->digest);
  json ref_record = {{"key", key}, {"ref", ref.text}, {"digest", image->digest}};

  // Publishes the ref (and the root, if `bundle` is set); returns the lease.
  auto publish = [&](const std::string& bundle) -> Result<std::optional<ImageLease>> {
    Result<int> lock = LockGlobal();
    if (!lock.ok()) return cache_error(lock.status());
    UniqueFd global(*lock);
    const std::string root = RootPath(hex);
    struct stat st {};
    if (!bundle.empty() && ::lstat(root.c_str(), &st) != 0 &&
        ::rename(bundle.c_str(), root.c_str()) != 0) {
      return cache_error(
          Status::Internal("cannot rename " + bundle + " to " + root + ": " + ErrnoText(errno)));
    }
    std::optional<ImageLease> lease = LeaseRoot(hex, /*cached=*/false);
    if (lease) {
      Status s = WriteFileAtomic(RefPath(key_hash), ref_record.dump() + "\n");
      if (!s.ok()) return cache_error(s);
    }
    return lease;
  };

  // The same image may be unpacked already, under another reference.
  GP_ASSIGN_OR_RETURN(std::optional<ImageLease> existing, publish(""));
  if (existing) return *std::move(existing);

  report("unpacking image");
  const std::string bundle = work.path() + "/bundle";
  {
    SizeWatch watch(bundle, limit, cancelled);
    Result<CommandResult> r = tools.Run({options_.umoci, "unpack", "--rootless", "--image",
                                         layout + ":" + kPullTag, tools.dir() + "/bundle"},
                                        {}, timeout, std::ref(watch));
    if (!r.ok()) return NotRun(ref, "cannot unpack", r.status());
    if (watch.over() > 0) return TooLargeUnpacked(ref, limit);
    if (!r->ok()) return ToolFailure(ref, "cannot unpack", "umoci", *r, timeout);
  }
  GP_RETURN_IF_ERROR(CompleteBundle(ref, *image, bundle, as, limit, Now()));
  GP_ASSIGN_OR_RETURN(std::optional<ImageLease> lease, publish(bundle));
  if (!lease) {
    return cache_error(Status::Internal("the root of " + image->digest + " vanished"));
  }
  return *std::move(lease);
}

std::vector<ImageCache::Entry> ImageCache::ScanLocked(bool check_in_use) const {
  std::vector<Entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(options_.dir + "/roots", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string hex = it->path().filename().string();
    if (!IsHexDigest(hex)) continue;
    std::string root = RootPath(hex);
    if (::access((root + "/ready").c_str(), F_OK) != 0) continue;
    Entry e;
    e.digest = kSha256 + hex;
    if (Result<std::string> s = ReadFileTrimmed(root + "/size"); s.ok()) {
      e.bytes = std::strtoll(s->c_str(), nullptr, 10);
    }
    if (Result<std::string> s = ReadFileTrimmed(root + "/last_used"); s.ok()) {
      e.last_used_ms = std::strtoll(s->c_str(), nullptr, 10);
    }
    if (check_in_use) {
      UniqueFd fd(::open((root + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
      e.in_use = fd.get() >= 0 && Flock(fd.get(), LOCK_EX | LOCK_NB) != 0;
    }
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.last_used_ms, a.digest) < std::tie(b.last_used_ms, b.digest);
  });
  return entries;
}

std::vector<ImageCache::Entry> ImageCache::List() const {
  if (!EnsureLayout().ok()) return {};
  Result<int> lock = LockGlobal();
  if (!lock.ok()) return {};
  UniqueFd global(*lock);
  return ScanLocked(/*check_in_use=*/true);
}

Status ImageCache::Evict() {
  GP_RETURN_IF_ERROR(EnsureLayout().WithContext("image cache"));
  std::vector<WorkDir> trash;  // removed after the global lock is released
  GP_ASSIGN_OR_RETURN(int lock, LockGlobal());
  UniqueFd global(lock);

  std::vector<Entry> entries = ScanLocked(/*check_in_use=*/false);
  int64_t total = 0;
  for (const Entry& e : entries) total += e.bytes;
  for (const Entry& e : entries) {
    if (total <= options_.max_bytes) break;
    const std::string hex = e.digest.substr(7);
    const std::string root = RootPath(hex);
    UniqueFd root_lock(::open((root + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
    if (root_lock.get() < 0 || Flock(root_lock.get(), LOCK_EX | LOCK_NB) != 0) continue;  // leased
    // Unpublish with one rename, then delete at leisure; the moved root is
    // locked as a work dir so no cleaner takes it meanwhile.
    std::string dest = options_.dir + "/tmp/evict-" + hex.substr(0, 12) + "-" + RandomHex(4);
    if (::rename(root.c_str(), dest.c_str()) != 0) {
      GP_LOG(kWarn) << "image cache: cannot move " << root << " to " << dest << ": "
                    << ErrnoText(errno);
      continue;
    }
    UniqueFd dir_fd(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir_fd.get() >= 0) Flock(dir_fd.get(), LOCK_EX | LOCK_NB);
    trash.emplace_back(dest, std::move(dir_fd));
    GP_LOG(kInfo) << "image cache: evicting " << e.digest << " (" << FormatBytes(e.bytes) << ")";
    total -= e.bytes;
  }

  // Drop refs whose root is gone (evicted now or earlier).
  std::error_code ec;
  for (fs::directory_iterator it(options_.dir + "/refs", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    Result<json> ref = ReadJson(it->path().string());
    std::string hex = ref.ok() && ref->is_object() ? HexOf(ref->value("digest", "")) : "";
    if (hex.empty() || ::access((RootPath(hex) + "/ready").c_str(), F_OK) != 0) {
      fs::remove(it->path(), ec);
      ec.clear();
    }
  }
  global.Reset();
  trash.clear();
  return Status::Ok();
}

}  // namespace gpupool::exec
