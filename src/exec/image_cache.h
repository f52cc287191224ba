// ImageCache: the agent's local store of unpacked container images.
//
// A job may name an image (model/image_ref.h). The cache copies it with
// skopeo into a temporary OCI layout, unpacks it rootless with umoci, and
// keeps the unpacked root, keyed by the image's manifest digest, for every
// later job that names the same image. The total size of the roots is kept
// under a limit by evicting the least recently used roots that no job holds.
//
// Images are untrusted: their layers and configs come from anyone's
// registry. A root agent therefore pulls as the task's own account
// (Acquire's `as`; exec/image_tools.h): skopeo and umoci run as that uid
// with no capabilities and no_new_privs, a local image is read only if that
// account may read it, and what they wrote is read back with its
// permissions. Once unpacked, the root is sealed (root:root, no setuid or
// setgid bit) before it is published, so a layer can plant nothing that
// raises anyone's privileges on the host. The image document parsers are
// model/oci_image.h (bounded, fuzzed).
//
// Size: max_image_bytes bounds each image. The layers' sizes the manifest
// declares are checked before anything is copied; while skopeo copies and
// umoci unpacks, the bytes they wrote are measured (every half second or
// so) and the tool is stopped once they pass the limit (a layer that
// decompresses to far more than its size: a compression bomb); the
// unpacked root is measured once more, whole, before it is published. The
// job's error names the limit (ResourceExhausted, "... more than this
// node's limit of 20 GiB per image (max-image-size)").
//
// Who calls it: each task's shim (one process per task) builds its own
// ImageCache on the same directory, and the agent may too (List, Evict).
// Processes coordinate only through the directory, with flock(2):
//
//   DIR/lock                  global lock (exclusive), held only for short
//                             metadata steps: looking up and leasing a
//                             root, publishing one, choosing what to evict.
//                             Never held while skopeo or umoci runs.
//   DIR/pulls/<key>.lock      one per ref key, held for a whole pull, so two
//                             processes pulling the same image at once pull
//                             it once: the second waits, then finds it cached.
//                             Removed by its holder when the pull ends.
//   DIR/refs/<key>.json       ref key -> manifest digest.
//   DIR/roots/<hex>/          one unpacked image (a umoci bundle):
//       rootfs/               the image's root file system (mode 0755)
//       config.json           umoci's runtime config (unused by gpupool)
//       image-config.json     the image's config (ImageConfig) and digest
//       size                  bytes the root takes on disk (measured once)
//       last_used             ms since the epoch of the last Acquire
//       lock                  leases hold a shared flock on it; eviction
//                             takes it exclusively (non-blocking) or skips
//       ready                 written last, before the root is published
//   DIR/tmp/<name>/           work in progress (pulls, evicted roots being
//                             deleted), each held by its owner with an
//                             exclusive flock on the directory; entries no
//                             one holds are leftovers of a crash and are
//                             removed by the next pull. tmp/ is 0711; a
//                             pull's directory (0700) belongs to the
//                             account it runs as.
//
// A root is built inside tmp/ and published with one rename(2), so a crash
// never leaves a half root in roots/. Eviction renames a root back into
// tmp/ before deleting it.
//
// Ref keys: docker:// references are keyed by their text, so a tag is NOT
// re-resolved while its root is cached (name a digest, docker://x@sha256:...,
// to pin an image; evict to pick up a moved tag). Local references
// (oci-archive:, docker-archive:, oci:) are keyed by their text plus the
// size, mtime (ns) and inode of the file (index.json for an oci: directory),
// so an archive rebuilt at the same path is a new image.
//
// Permissions: jobs run as other unprivileged uids, which must reach the
// rootfs: DIR and DIR/roots get at least 0711, each root 0711, rootfs 0755.
// (DIR's parents must be traversable too; that is the agent's set-up.)
//
// Thread-safety: an ImageCache has no mutable in-memory state and may be
// used from several threads; every method blocks on the file locks above.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/safe_fs.h"
#include "common/status.h"
#include "exec/executor.h"
#include "model/image_ref.h"
#include "model/oci_image.h"

namespace gpupool::exec {

// From the image's OCI config (its "config" object): model/oci_image.h.
using ::gpupool::ImageConfig;

inline constexpr int64_t kDefaultMaxImageBytes = int64_t{20} << 30;

struct ImageCacheOptions {
  std::string dir;                        // e.g. DATA_DIR/images; created if missing
  int64_t max_bytes = int64_t{20} << 30;  // LRU limit on the unpacked roots
  // Each image: compressed as downloaded, and unpacked (0 = no limit).
  int64_t max_image_bytes = kDefaultMaxImageBytes;
  std::string skopeo = "skopeo";
  std::string umoci = "umoci";
  // Each skopeo or umoci run is killed after this long (0 = never).
  int64_t command_timeout_ms = int64_t{2} * 3600 * 1000;
  // Last-use times for the LRU order; nullptr = the real clock.
  const Clock* clock = nullptr;
};

// Holds one image root in use: while any lease on a root exists, eviction
// skips it. The lease is a shared flock on the root's lock file, so it works
// across processes; it is not inherited by exec'd programs (O_CLOEXEC).
// Move-only; released on destruction.
class ImageLease {
 public:
  ImageLease(ImageLease&& other) noexcept;
  ImageLease& operator=(ImageLease&& other) noexcept;
  ImageLease(const ImageLease&) = delete;
  ImageLease& operator=(const ImageLease&) = delete;
  ~ImageLease();

  const std::string& rootfs() const { return rootfs_; }  // absolute path of the unpacked root
  const ImageConfig& config() const { return config_; }
  const std::string& digest() const { return digest_; }  // manifest digest "sha256:..."
  bool cached() const { return cached_; }                // true: found in the cache, nothing pulled
  int64_t bytes() const { return bytes_; }               // what the root takes on disk
  bool held() const { return fd_ >= 0; }                 // false once released or moved from

  // Lets eviction take the root from now on (the destructor does it too).
  void Release();

 private:
  friend class ImageCache;
  ImageLease() = default;

  int fd_ = -1;
  std::string rootfs_;
  std::string digest_;
  ImageConfig config_;
  bool cached_ = false;
  int64_t bytes_ = 0;
};

class ImageCache {
 public:
  explicit ImageCache(ImageCacheOptions options);

  // Finds the image in the cache, or copies it with skopeo and unpacks it
  // with umoci, then evicts down to max_bytes. Progress events, in order:
  //   "pulling image <text>", "pulling image N/M layers" (one per blob
  //   skopeo copies), "unpacking image",
  //   "image ready (sha256:0123456789ab, 12 MiB)"; or only
  //   "image cached (sha256:0123456789ab, 12 MiB)" when nothing was pulled.
  // Errors start with "image <text>: " and end with the tool's own last
  // stderr line where there is one:
  //   NotFound          "image oci-archive:/x.tar: not found: /x.tar does not exist"
  //                     (also a missing oci: tag, a registry's "manifest unknown")
  //   InvalidArgument   "image ...: cannot pull: <skopeo's error>" (a local
  //                     file that is not a usable image), "...: cannot unpack: ..."
  //   Unavailable       "image docker://...: cannot pull: ..." (registry errors)
  //   DeadlineExceeded  "image ...: cannot pull: skopeo timed out after 2h"
  //   FailedPrecondition "image ...: cannot pull: cannot run skopeo: No such file or directory"
  //   Internal          "image ...: cache: <what failed in DIR>"
  //   ResourceExhausted "image ...: its layers take 30 GiB compressed, more than
  //                     this node's limit of 20 GiB per image (max-image-size)"
  //                     (also "the download passed ..." and "unpacked, it takes
  //                     more than ...")
  // On any error nothing of the attempt is left in the cache.
  // `cancelled`, when set, is asked while skopeo and umoci run: once it
  // says true they are killed and Acquire fails ("... stopped").
  // `as`, when set, is the account the pull runs and reads as (the task's);
  // unset: the agent's own (an agent that is not root).
  Result<ImageLease> Acquire(const ImageRef& ref, const ProgressFn& progress,
                             const std::function<bool()>& cancelled = {},
                             const FsIdentity& as = {});

  // Removes least recently used roots that no lease holds until the total
  // is at most max_bytes (roots in use may keep it above). Also drops refs
  // that point to removed roots.
  Status Evict();

  struct Entry {
    std::string digest;  // "sha256:..."
    int64_t bytes = 0;
    int64_t last_used_ms = 0;
    bool in_use = false;  // some lease holds it
  };
  // The published roots, least recently used first. Empty if DIR is unusable.
  std::vector<Entry> List() const;

  const ImageCacheOptions& options() const { return options_; }

 private:
  std::string RootPath(const std::string& hex) const;
  std::string RefPath(const std::string& key_hash) const;
  Status EnsureLayout() const;
  // The global lock's descriptor (close it to unlock).
  Result<int> LockGlobal() const;
  // With the global lock held: a lease on a published root, or nullopt.
  std::optional<ImageLease> LeaseRoot(const std::string& hex, bool cached) const;
  std::optional<ImageLease> LookupLocked(const std::string& key_hash) const;
  std::vector<Entry> ScanLocked(bool check_in_use) const;
  // With the ref's pull lock held: copy, unpack, publish.
  Result<ImageLease> Pull(const ImageRef& ref, const std::string& key, const std::string& key_hash,
                          const ProgressFn& progress, const std::function<bool()>& cancelled,
                          const FsIdentity& as);

  int64_t Now() const;  // ms, from options_.clock or real_clock_

  ImageCacheOptions options_;
  RealClock real_clock_;
};

}  // namespace gpupool::exec
