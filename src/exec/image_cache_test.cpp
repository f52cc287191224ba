// ImageCache against the real skopeo and umoci, on images built by
// tests/images/make_test_image.sh (busybox-static, no network).
#include "exec/image_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/ids.h"
#include "exec/subprocess.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The script, in the source tree (GPUPOOL_SOURCE_DIR: src/exec/CMakeLists.txt;
// __FILE__ may be relative to a directory the test does not run in).
std::string ScriptPath() {
  return std::string(GPUPOOL_SOURCE_DIR) + "/tests/images/make_test_image.sh";
}

void BuildImage(const std::string& out_dir, const std::vector<std::string>& extra_env) {
  std::vector<std::string> argv = {"sh", ScriptPath(), out_dir};
  argv.insert(argv.end(), extra_env.begin(), extra_env.end());
  Result<CommandResult> r = RunCommand(argv);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_tail;
}

ImageRef Ref(const std::string& text) {
  Result<ImageRef> r = ParseImageRef(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ImageRef{};
}

int64_t ElapsedMs(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class ImageCacheTest : public ::testing::Test {
 protected:
  // Three images, built once: A (the standard one), B and C (extra env).
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/gpupool-image-cache-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    auto start = std::chrono::steady_clock::now();
    BuildImage(base_ + "/a", {});
    BuildImage(base_ + "/b", {"VARIANT=b"});
    BuildImage(base_ + "/c", {"VARIANT=c"});
    std::cout << "[ timing ] built 3 test images in " << ElapsedMs(start) << " ms\n";
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  void SetUp() override {
    ASSERT_FALSE(base_.empty());
    dir_ = base_ + "/cache-" + RandomHex(4);
  }

  ImageCacheOptions Options(int64_t max_bytes = int64_t{1} << 40) {
    ImageCacheOptions o;
    o.dir = dir_;
    o.max_bytes = max_bytes;
    o.clock = &clock_;
    return o;
  }

  struct Acquired {
    Result<ImageLease> lease = Status::Internal("not run");
    std::vector<std::string> events;
    int64_t ms = 0;
  };
  static Acquired AcquireWith(ImageCache& cache, const std::string& ref) {
    Acquired a;
    auto start = std::chrono::steady_clock::now();
    a.lease = cache.Acquire(Ref(ref), [&](const std::string& e) { a.events.push_back(e); });
    a.ms = ElapsedMs(start);
    return a;
  }
  ImageLease MustAcquire(ImageCache& cache, const std::string& ref) {
    Acquired a = AcquireWith(cache, ref);
    EXPECT_TRUE(a.lease.ok()) << a.lease.status().ToString();
    return std::move(a.lease).value();
  }

  // Nothing of a failed attempt may be left behind.
  void ExpectNothingLeft() {
    EXPECT_THAT(DirEntries(dir_ + "/roots"), ElementsAre());
    EXPECT_THAT(DirEntries(dir_ + "/tmp"), ElementsAre());
    EXPECT_THAT(DirEntries(dir_ + "/refs"), ElementsAre());
    EXPECT_THAT(DirEntries(dir_ + "/pulls"), ElementsAre());
  }

  static std::string base_;
  std::string dir_;
  FakeClock clock_;
};

std::string ImageCacheTest::base_;

TEST_F(ImageCacheTest, FirstAcquirePullsAndUnpacksThenItIsCached) {
  ImageCache cache(Options());
  const std::string ref = "oci-archive:" + base_ + "/a/busybox.tar";
  Acquired first = AcquireWith(cache, ref);
  ASSERT_TRUE(first.lease.ok()) << first.lease.status().ToString();
  const ImageLease& lease = *first.lease;
  EXPECT_FALSE(lease.cached());
  EXPECT_TRUE(lease.held());
  EXPECT_THAT(lease.digest(), StartsWith("sha256:"));
  EXPECT_EQ(lease.digest().size(), 7u + 64u);
  EXPECT_EQ(lease.rootfs(), dir_ + "/roots/" + lease.digest().substr(7) + "/rootfs");
  EXPECT_TRUE(fs::is_regular_file(lease.rootfs() + "/bin/busybox"));
  EXPECT_TRUE(fs::is_symlink(lease.rootfs() + "/bin/sh"));
  EXPECT_TRUE(fs::is_directory(lease.rootfs() + "/app"));
  EXPECT_GT(lease.bytes(), 1'000'000);  // busybox alone is ~2 MB

  EXPECT_THAT(lease.config().env, Contains("GREETING=hello-from-image"));
  EXPECT_THAT(lease.config().env, Contains("PATH=/bin"));
  EXPECT_EQ(lease.config().working_dir, "/app");
  EXPECT_THAT(lease.config().entrypoint, ElementsAre("/bin/sh", "-c"));
  EXPECT_THAT(lease.config().cmd, ElementsAre("echo image-default-cmd"));
  EXPECT_EQ(lease.config().user, "");

  ASSERT_EQ(first.events.size(), 4u) << ::testing::PrintToString(first.events);
  EXPECT_EQ(first.events[0], "pulling image " + ref);
  EXPECT_EQ(first.events[1], "pulling image 1/1 layers");
  EXPECT_EQ(first.events[2], "unpacking image");
  EXPECT_THAT(first.events[3], StartsWith("image ready (" + lease.digest().substr(0, 19) + ", "));
  EXPECT_THAT(first.events[3], HasSubstr("MiB)"));

  // Other uids must reach rootfs: every directory on the way is traversable.
  auto mode = [](const std::string& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  const std::string root = dir_ + "/roots/" + lease.digest().substr(7);
  EXPECT_EQ(mode(dir_) & 0111, 0111u);
  EXPECT_EQ(mode(dir_ + "/roots") & 0111, 0111u);
  EXPECT_EQ(mode(root) & 0111, 0111u);
  EXPECT_EQ(mode(lease.rootfs()), 0755u);
  EXPECT_EQ(mode(root + "/image-config.json") & 0444, 0444u);

  // Only the root is kept: no copied layout, no work directory, no lock.
  EXPECT_THAT(DirEntries(dir_ + "/tmp"), ElementsAre());
  EXPECT_THAT(DirEntries(dir_ + "/pulls"), ElementsAre());
  EXPECT_THAT(DirEntries(dir_ + "/refs").size(), 1u);

  Acquired second = AcquireWith(cache, ref);
  ASSERT_TRUE(second.lease.ok()) << second.lease.status().ToString();
  EXPECT_TRUE(second.lease->cached());
  EXPECT_EQ(second.lease->digest(), lease.digest());
  EXPECT_EQ(second.lease->rootfs(), lease.rootfs());
  EXPECT_EQ(second.lease->config(), lease.config());
  EXPECT_EQ(second.lease->bytes(), lease.bytes());
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_THAT(second.events[0], StartsWith("image cached (" + lease.digest().substr(0, 19)));
  EXPECT_LT(second.ms, 500);
  std::cout << "[ timing ] first acquire (pull + unpack) " << first.ms << " ms, cached acquire "
            << second.ms << " ms\n";

  // A new ImageCache on the same directory (another shim) finds it too.
  ImageCache other(Options());
  ImageLease third = MustAcquire(other, ref);
  EXPECT_TRUE(third.cached());
  std::vector<ImageCache::Entry> entries = other.List();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].digest, lease.digest());
  EXPECT_EQ(entries[0].bytes, lease.bytes());
  EXPECT_EQ(entries[0].last_used_ms, clock_.NowMs());
  EXPECT_TRUE(entries[0].in_use);
}

TEST_F(ImageCacheTest, ReleasedLeaseIsNotInUse) {
  ImageCache cache(Options());
  ImageLease lease = MustAcquire(cache, "oci-archive:" + base_ + "/a/busybox.tar");
  ImageLease moved = std::move(lease);
  EXPECT_FALSE(lease.held());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(moved.held());
  ASSERT_EQ(cache.List().size(), 1u);
  EXPECT_TRUE(cache.List()[0].in_use);
  moved.Release();
  EXPECT_FALSE(moved.held());
  EXPECT_FALSE(cache.List()[0].in_use);
}

TEST_F(ImageCacheTest, AllLocalFormsWork) {
  ImageCache cache(Options());
  ImageLease archive = MustAcquire(cache, "oci-archive:" + base_ + "/a/busybox.tar");

  // The layout holds the very manifest the archive was made from: same
  // digest, so the root is shared and nothing is unpacked again.
  Acquired dir = AcquireWith(cache, "oci:" + base_ + "/a/layout:test");
  ASSERT_TRUE(dir.lease.ok()) << dir.lease.status().ToString();
  EXPECT_FALSE(dir.lease->cached());
  EXPECT_EQ(dir.lease->digest(), archive.digest());
  EXPECT_EQ(dir.lease->rootfs(), archive.rootfs());
  EXPECT_THAT(dir.events, ::testing::Not(Contains("unpacking image")));

  ImageLease untagged = MustAcquire(cache, "oci:" + base_ + "/a/layout");
  EXPECT_EQ(untagged.digest(), archive.digest());

  // docker-archive holds a Docker manifest: another digest, the same files.
  Acquired docker = AcquireWith(cache, "docker-archive:" + base_ + "/a/busybox-docker.tar");
  ASSERT_TRUE(docker.lease.ok()) << docker.lease.status().ToString();
  EXPECT_FALSE(docker.lease->cached());
  EXPECT_THAT(docker.events, Contains("pulling image 1/1 layers"));
  EXPECT_TRUE(fs::is_regular_file(docker.lease->rootfs() + "/bin/busybox"));
  EXPECT_THAT(docker.lease->config().env, Contains("GREETING=hello-from-image"));
  EXPECT_EQ(docker.lease->config().working_dir, "/app");
  EXPECT_THAT(docker.lease->config().entrypoint, ElementsAre("/bin/sh", "-c"));
  EXPECT_THAT(docker.lease->config().cmd, ElementsAre("echo image-default-cmd"));
  std::cout << "[ info   ] oci-archive " << archive.digest() << ", docker-archive "
            << docker.lease->digest() << "\n";
  EXPECT_EQ(cache.List().size(), docker.lease->digest() == archive.digest() ? 1u : 2u);
}

TEST_F(ImageCacheTest, RebuiltArchiveAtTheSamePathIsANewImage) {
  ImageCache cache(Options());
  const std::string path = base_ + "/rebuilt-" + RandomHex(4) + ".tar";
  fs::copy_file(base_ + "/a/busybox.tar", path);
  ImageLease before = MustAcquire(cache, "oci-archive:" + path);
  EXPECT_FALSE(before.cached());
  EXPECT_THAT(before.config().env, ::testing::Not(Contains("VARIANT=b")));

  // Replace it the way a build does: write beside, rename over.
  fs::copy_file(base_ + "/b/busybox.tar", path + ".new");
  fs::rename(path + ".new", path);
  Acquired after = AcquireWith(cache, "oci-archive:" + path);
  ASSERT_TRUE(after.lease.ok()) << after.lease.status().ToString();
  EXPECT_FALSE(after.lease->cached());
  EXPECT_NE(after.lease->digest(), before.digest());
  EXPECT_THAT(after.lease->config().env, Contains("VARIANT=b"));
  EXPECT_TRUE(MustAcquire(cache, "oci-archive:" + path).cached());
}

TEST_F(ImageCacheTest, BrokenImagesFailClearlyAndLeaveNothing) {
  ImageCache cache(Options());
  auto fails = [&](const std::string& ref) {
    Acquired a = AcquireWith(cache, ref);
    EXPECT_FALSE(a.lease.ok()) << ref;
    ExpectNothingLeft();
    return a.lease.ok() ? Status::Ok() : a.lease.status();
  };
  const std::string dir = base_ + "/broken-" + RandomHex(4);
  fs::create_directories(dir);

  Status missing = fails("oci-archive:" + dir + "/missing.tar");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "image oci-archive:" + dir + "/missing.tar: not found: " + dir +
                                   "/missing.tar does not exist");

  std::string garbage(64 * 1024, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 7919) % 251);
  ASSERT_TRUE(WriteFileAtomic(dir + "/garbage.tar", garbage).ok());
  Status bad = fails("oci-archive:" + dir + "/garbage.tar");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(),
              StartsWith("image oci-archive:" + dir + "/garbage.tar: cannot pull: "));
  EXPECT_THAT(bad.message(), HasSubstr("invalid tar header"));
  Status bad_docker = fails("docker-archive:" + dir + "/garbage.tar");
  EXPECT_THAT(bad_docker.message(),
              StartsWith("image docker-archive:" + dir + "/garbage.tar: cannot pull: "));

  Result<std::string> whole = ReadFile(base_ + "/a/busybox.tar");
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/truncated.tar", whole->substr(0, whole->size() / 2)).ok());
  Status truncated = fails("oci-archive:" + dir + "/truncated.tar");
  EXPECT_THAT(truncated.message(),
              StartsWith("image oci-archive:" + dir + "/truncated.tar: cannot pull: "));
  EXPECT_THAT(truncated.message(), HasSubstr("unexpected EOF"));

  // A layer whose bytes no longer match its digest, in a layout and in an
  // archive made from it.
  const std::string corrupt = dir + "/corrupt";
  fs::copy(base_ + "/a/layout", corrupt, fs::copy_options::recursive);
  std::string biggest;
  uintmax_t biggest_size = 0;
  for (const auto& e : fs::directory_iterator(corrupt + "/blobs/sha256")) {
    if (e.file_size() > biggest_size) biggest_size = e.file_size(), biggest = e.path().string();
  }
  {
    int fd = ::open(biggest.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "CORRUPTCORRUPT", 14, static_cast<off_t>(biggest_size / 2)), 14);
    ::close(fd);
  }
  Status corrupt_dir = fails("oci:" + corrupt + ":test");
  EXPECT_THAT(corrupt_dir.message(), StartsWith("image oci:" + corrupt + ":test: cannot pull: "));
  EXPECT_THAT(corrupt_dir.message(), HasSubstr("Digest did not match"));
  Result<CommandResult> tar = RunCommand({"tar", "-C", corrupt, "-cf", dir + "/corrupt.tar", "."});
  ASSERT_TRUE(tar.ok() && tar->exit_code == 0);
  Status corrupt_archive = fails("oci-archive:" + dir + "/corrupt.tar");
  EXPECT_THAT(corrupt_archive.message(),
              StartsWith("image oci-archive:" + dir + "/corrupt.tar: cannot pull: "));
  EXPECT_THAT(corrupt_archive.message(), HasSubstr("Digest did not match"));

  Status no_tag = fails("oci:" + base_ + "/a/layout:nosuchtag");
  EXPECT_EQ(no_tag.code(), StatusCode::kNotFound);
  EXPECT_EQ(no_tag.message(), "image oci:" + base_ + "/a/layout:nosuchtag: not found: no tag " +
                                  "\"nosuchtag\" in " + base_ + "/a/layout");
  Status not_layout = fails("oci:" + dir);
  EXPECT_EQ(not_layout.code(), StatusCode::kNotFound);
  EXPECT_THAT(not_layout.message(), HasSubstr("is not an OCI layout"));
}

TEST_F(ImageCacheTest, RegistryErrorsAreUnavailable) {
  ImageCache cache(Options());
  // Nothing listens on port 1: refused at once, no network needed.
  Acquired a = AcquireWith(cache, "docker://localhost:1/lab/train:v1");
  ASSERT_FALSE(a.lease.ok());
  EXPECT_EQ(a.lease.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(a.lease.status().message(),
              StartsWith("image docker://localhost:1/lab/train:v1: cannot pull: "));
  EXPECT_THAT(a.lease.status().message(), HasSubstr("connection refused"));
  ExpectNothingLeft();
}

// A layer that hashes right but is not a layer: skopeo copies it, umoci
// cannot unpack it.
TEST_F(ImageCacheTest, UnpackFailureLeavesNothing) {
  using nlohmann::json;
  const std::string layout = base_ + "/badlayer-" + RandomHex(4);
  fs::copy(base_ + "/a/layout", layout, fs::copy_options::recursive);
  auto blob = [&](const std::string& digest) {
    return layout + "/blobs/sha256/" + digest.substr(7);
  };
  auto put = [&](const std::string& content) {
    std::string digest = "sha256:" + Sha256Hex(content);
    EXPECT_TRUE(WriteFileAtomic(blob(digest), content).ok());
    return digest;
  };
  json index = json::parse(*ReadFile(layout + "/index.json"));
  json manifest = json::parse(*ReadFile(blob(index["manifests"][0]["digest"])));
  std::string not_a_layer(200'000, 'x');
  manifest["layers"][0]["digest"] = put(not_a_layer);
  manifest["layers"][0]["size"] = not_a_layer.size();
  std::string manifest_text = manifest.dump();
  index["manifests"][0]["digest"] = put(manifest_text);
  index["manifests"][0]["size"] = manifest_text.size();
  ASSERT_TRUE(WriteFileAtomic(layout + "/index.json", index.dump()).ok());

  ImageCache cache(Options());
  Acquired a = AcquireWith(cache, "oci:" + layout + ":test");
  ASSERT_FALSE(a.lease.ok());
  EXPECT_EQ(a.lease.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.lease.status().message(),
              StartsWith("image oci:" + layout + ":test: cannot unpack: "));
  EXPECT_THAT(a.events, Contains("unpacking image"));
  std::cout << "[ info   ] " << a.lease.status().message() << "\n";
  ExpectNothingLeft();
}

TEST_F(ImageCacheTest, MissingToolIsReported) {
  ImageCacheOptions o = Options();
  o.skopeo = "/nonexistent/skopeo";
  ImageCache cache(o);
  Acquired a = AcquireWith(cache, "oci-archive:" + base_ + "/a/busybox.tar");
  ASSERT_FALSE(a.lease.ok());
  EXPECT_EQ(a.lease.status().message(), "image oci-archive:" + base_ +
                                            "/a/busybox.tar: cannot pull: cannot run "
                                            "/nonexistent/skopeo: No such file or directory");
  ExpectNothingLeft();
}

TEST_F(ImageCacheTest, StaleWorkIsRemovedButHeldWorkIsNot) {
  ImageCache cache(Options());
  ASSERT_TRUE(cache.List().empty());  // creates the layout
  fs::create_directories(dir_ + "/tmp/pull-crashed/layout/blobs");
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/tmp/pull-crashed/layout/blobs/x", "half a blob").ok());
  fs::create_directories(dir_ + "/tmp/pull-running");
  int held = ::open((dir_ + "/tmp/pull-running").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);

  ImageLease lease = MustAcquire(cache, "oci-archive:" + base_ + "/a/busybox.tar");
  EXPECT_THAT(DirEntries(dir_ + "/tmp"), ElementsAre("pull-running"));
  ::close(held);
}

TEST_F(ImageCacheTest, EvictsLeastRecentlyUsedRootsNoLeaseHolds) {
  const std::string a = "oci-archive:" + base_ + "/a/busybox.tar";
  const std::string b = "oci-archive:" + base_ + "/b/busybox.tar";
  const std::string c = "oci-archive:" + base_ + "/c/busybox.tar";
  ImageCache big(Options());
  clock_.SetMs(1'000);
  ImageLease lease_b = MustAcquire(big, b);  // the oldest, but held
  clock_.SetMs(2'000);
  std::string digest_a = MustAcquire(big, a).digest();  // released at once
  clock_.SetMs(3'000);
  ImageLease lease_c = MustAcquire(big, c);
  std::string digest_c = lease_c.digest();
  lease_c.Release();

  std::vector<ImageCache::Entry> entries = big.List();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].digest, lease_b.digest());
  EXPECT_EQ(entries[0].last_used_ms, 1'000);
  EXPECT_TRUE(entries[0].in_use);
  EXPECT_EQ(entries[1].digest, digest_a);
  EXPECT_FALSE(entries[1].in_use);
  EXPECT_EQ(entries[2].digest, digest_c);
  const int64_t size_b = entries[0].bytes, size_c = entries[2].bytes;

  // Room for two: A goes (least recently used of those not held); B stays
  // although it is older, because a lease holds it.
  ImageCache two(Options(size_b + size_c));
  ASSERT_TRUE(two.Evict().ok());
  entries = two.List();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].digest, lease_b.digest());
  EXPECT_EQ(entries[1].digest, digest_c);
  EXPECT_FALSE(fs::exists(dir_ + "/roots/" + digest_a.substr(7)));
  EXPECT_EQ(DirEntries(dir_ + "/refs").size(), 2u);  // A's ref went with it
  EXPECT_THAT(DirEntries(dir_ + "/tmp"), ElementsAre());

  // Held roots stay even when the total is over the limit.
  ImageCache none(Options(1));
  lease_b = MustAcquire(none, b);  // replaces the old lease: B stays held
  clock_.SetMs(4'000);
  ASSERT_TRUE(none.Evict().ok());
  entries = none.List();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].digest, lease_b.digest());

  // Acquire evicts after an unpack: A comes back (pulled again), B goes once
  // released.
  lease_b.Release();
  clock_.SetMs(5'000);
  ImageCache one(Options(size_c + size_c / 2));
  Acquired again = AcquireWith(one, a);
  ASSERT_TRUE(again.lease.ok()) << again.lease.status().ToString();
  EXPECT_FALSE(again.lease->cached());
  entries = one.List();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].digest, digest_a);
  EXPECT_TRUE(entries[0].in_use);
}

TEST_F(ImageCacheTest, TwoProcessesPullingTheSameImagePullItOnce) {
  const std::string ref = "oci-archive:" + base_ + "/c/busybox.tar";
  int go[2], report[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(report), 0);
  // "<ok> <cached> <unpacked> <ms> <digest>" from one Acquire.
  auto describe = [](const Acquired& a) {
    bool unpacked = std::count(a.events.begin(), a.events.end(), "unpacking image") > 0;
    return std::to_string(a.lease.ok()) + " " + std::to_string(a.lease.ok() && a.lease->cached()) +
           " " + std::to_string(unpacked) + " " + std::to_string(a.ms) + " " +
           (a.lease.ok() ? a.lease->digest() : "-");
  };
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Starts when the parent is in the middle of its pull.
    char c;
    ::close(go[1]);
    if (::read(go[0], &c, 1) != 1) ::_exit(2);
    ImageCache cache(Options());
    std::string line = describe(AcquireWith(cache, ref));
    ssize_t n = ::write(report[1], line.data(), line.size());
    ::_exit(n == static_cast<ssize_t>(line.size()) ? 0 : 3);
  }
  ::close(go[0]);
  ::close(report[1]);
  ImageCache cache(Options());
  Acquired mine;
  bool released = false;
  auto start = std::chrono::steady_clock::now();
  mine.lease = cache.Acquire(Ref(ref), [&](const std::string& e) {
    mine.events.push_back(e);
    if (!released && e.starts_with("pulling image 1/")) {
      released = true;
      EXPECT_EQ(::write(go[1], "g", 1), 1);
      ::usleep(300'000);  // the child reaches the pull lock meanwhile
    }
  });
  mine.ms = ElapsedMs(start);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  char buf[256];
  ssize_t n = ::read(report[0], buf, sizeof buf);
  ASSERT_GT(n, 0);
  std::string theirs(buf, static_cast<size_t>(n));
  ::close(go[1]);
  ::close(report[0]);

  ASSERT_TRUE(mine.lease.ok()) << mine.lease.status().ToString();
  EXPECT_FALSE(mine.lease->cached());
  EXPECT_THAT(mine.events, Contains("unpacking image"));
  // The child waited for the parent's pull, then found the image cached
  // without pulling or unpacking it: "1 1 0 <ms> <same digest>".
  std::istringstream in(theirs);
  int ok = 0, cached = 0, unpacked = 0;
  int64_t ms = 0;
  std::string digest;
  in >> ok >> cached >> unpacked >> ms >> digest;
  EXPECT_EQ(ok, 1) << theirs;
  EXPECT_EQ(cached, 1) << theirs;
  EXPECT_EQ(unpacked, 0) << theirs;
  EXPECT_EQ(digest, mine.lease->digest());
  std::cout << "[ timing ] pull with a concurrent waiter " << mine.ms << " ms, the waiter " << ms
            << " ms\n";
  EXPECT_EQ(cache.List().size(), 1u);
  EXPECT_THAT(DirEntries(dir_ + "/tmp"), ElementsAre());
  EXPECT_THAT(DirEntries(dir_ + "/pulls"), ElementsAre());
}

}  // namespace
}  // namespace gpupool::exec
