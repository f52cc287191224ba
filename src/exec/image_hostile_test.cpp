// ImageCache against hostile images (tests/images/make_hostile_image.py),
// with the real skopeo and umoci, pulled as a task's account as a root
// agent does: a layer that tries to write outside its bundle, plant a
// setuid root binary or device nodes, hard-link a host file; an image over
// the size limit, declared or only once decompressed; a local image the
// account may not read.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/ids.h"
#include "exec/image_cache.h"
#include "exec/image_tools.h"
#include "exec/subprocess.h"

namespace gpupool::exec {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kTaskUid = 190611;  // a task account of the default range

// In the source tree (GPUPOOL_SOURCE_DIR: src/exec/CMakeLists.txt).
std::string RepoPath(const std::string& rel) { return std::string(GPUPOOL_SOURCE_DIR) + "/" + rel; }

void BuildHostile(const std::string& out, const std::string& kind, int mib = 0) {
  std::vector<std::string> argv = {"/usr/bin/python3",
                                   RepoPath("tests/images/make_hostile_image.py"), out, kind};
  if (mib > 0) argv.insert(argv.end(), {"--bomb-mib", std::to_string(mib)});
  Result<CommandResult> r = RunCommand(argv);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_tail;
}

ImageRef Ref(const std::string& text) {
  Result<ImageRef> r = ParseImageRef(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ImageRef{};
}

// Every file under `dir` (no symlink followed) with mode bits in `bits`, or
// of a type in `types` (S_IFCHR...).
std::vector<std::string> Find(const std::string& dir, mode_t bits, std::vector<mode_t> types) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    bool hit = (st.st_mode & bits) != 0;
    for (mode_t t : types) hit = hit || (st.st_mode & S_IFMT) == t;
    if (hit) found.push_back(it->path().string());
  }
  return found;
}

class HostileImageTest : public ::testing::Test {
 protected:
  // The images, built once, in a directory task accounts may read (as a
  // provider's local images must be).
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/gpupool-hostile-image-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    ::chmod(base_.c_str(), 0755);
    BuildHostile(base_ + "/escape", "escape");
    BuildHostile(base_ + "/bomb", "bomb", 256);
    BuildHostile(base_ + "/big", "big", 48);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  void SetUp() override {
    ASSERT_FALSE(base_.empty());
    ASSERT_EQ(::geteuid(), 0u) << "these tests pull as a task account, which needs root";
    // The cache's parents must be traversable by task accounts (the
    // agent's set-up), so it lives in its own 0755 directory.
    dir_ = base_ + "/cache-" + RandomHex(4);
  }

  ImageCacheOptions Options(int64_t max_image_bytes = kDefaultMaxImageBytes) {
    ImageCacheOptions o;
    o.dir = dir_;
    o.max_image_bytes = max_image_bytes;
    return o;
  }

  Result<ImageLease> Pull(ImageCache& cache, const std::string& ref) {
    return cache.Acquire(
        Ref(ref), [](const std::string&) {}, {}, FsIdentity{kTaskUid, kTaskUid});
  }

  // Nothing of a failed attempt is left behind.
  void ExpectNothingLeft() {
    for (const char* sub : {"/roots", "/tmp", "/refs"}) {
      EXPECT_TRUE(fs::is_empty(dir_ + sub)) << sub;
    }
  }

  static std::string base_;
  std::string dir_;
};

std::string HostileImageTest::base_;

TEST_F(HostileImageTest, ALayerCannotEscapeItsBundleNorPlantPrivilegesOnTheHost) {
  const std::string passwd_before = *ReadFile("/etc/passwd");
  struct stat passwd_st {};
  ASSERT_EQ(::stat("/etc/passwd", &passwd_st), 0);
  ImageCache cache(Options());
  auto lease = Pull(cache, "oci:" + base_ + "/escape/layout:test");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();

  // Nothing was written outside the bundle: not at the host's root, not in
  // /tmp, not beside the cache or the rootfs.
  for (const std::string& dir :
       {std::string("/"), std::string("/tmp"), base_, dir_, dir_ + "/roots",
        fs::path(lease->rootfs()).parent_path().string()}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      EXPECT_FALSE(e.path().filename().string().starts_with("escape-")) << e.path();
    }
  }
  // The hard link to /etc/passwd did not link the host's file.
  struct stat after {};
  ASSERT_EQ(::stat("/etc/passwd", &after), 0);
  EXPECT_EQ(after.st_nlink, passwd_st.st_nlink);
  EXPECT_EQ(*ReadFile("/etc/passwd"), passwd_before);

  // Nothing in the cache raises privileges: no setuid or setgid file, no
  // device node; the published root is root's, not the pulling account's.
  EXPECT_THAT(Find(dir_, S_ISUID | S_ISGID, {S_IFCHR, S_IFBLK}), ::testing::IsEmpty());
  struct stat suid {};
  ASSERT_EQ(::lstat((lease->rootfs() + "/bin/busybox-suid").c_str(), &suid), 0);
  EXPECT_EQ(suid.st_uid, 0u);
  EXPECT_EQ(suid.st_mode & 07777, 0755u);
  for (const auto& e : fs::recursive_directory_iterator(fs::path(lease->rootfs()).parent_path())) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << e.path();
  }
  // The image works as an image.
  EXPECT_TRUE(fs::is_regular_file(lease->rootfs() + "/bin/busybox"));
  EXPECT_EQ(lease->config().working_dir, "/app");
  EXPECT_THAT(Find(dir_ + "/tmp", 0, {}), ::testing::IsEmpty());
}

TEST_F(HostileImageTest, AnImageDeclaredOverTheLimitIsNotPulled) {
  ImageCache cache(Options(int64_t{16} << 20));
  auto lease = Pull(cache, "oci:" + base_ + "/big/layout:test");
  ASSERT_EQ(lease.status().code(), StatusCode::kResourceExhausted) << lease.status().ToString();
  EXPECT_THAT(lease.status().message(),
              HasSubstr("compressed, more than this node's limit of 16 MiB"));
  EXPECT_THAT(lease.status().message(), HasSubstr("max-image-size"));
  ExpectNothingLeft();
}

TEST_F(HostileImageTest, ALayerThatDecompressesPastTheLimitIsStopped) {
  // 256 MiB of zeros in a few hundred KiB: under the limit as declared.
  ImageCache cache(Options(int64_t{32} << 20));
  auto lease = Pull(cache, "oci:" + base_ + "/bomb/layout:test");
  ASSERT_EQ(lease.status().code(), StatusCode::kResourceExhausted) << lease.status().ToString();
  EXPECT_THAT(lease.status().message(), HasSubstr("unpacked, it takes more than this node's limit "
                                                  "of 32 MiB per image (max-image-size)"));
  ExpectNothingLeft();
  // With room for it, the same image is fine.
  ImageCache roomy(Options(int64_t{1} << 30));
  auto ok = Pull(roomy, "oci:" + base_ + "/bomb/layout:test");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_GT(ok->bytes(), int64_t{256} << 20);
}

TEST_F(HostileImageTest, ALocalImageTheAccountCannotReadIsRefused) {
  // Root's own archive, in a directory only root may enter: a job naming it
  // would have the agent read it for it.
  const std::string hidden = base_ + "/hidden";
  fs::create_directories(hidden);
  ::chmod(hidden.c_str(), 0700);
  fs::copy(base_ + "/escape/layout", hidden + "/layout", fs::copy_options::recursive);
  ImageCache cache(Options());
  auto lease = Pull(cache, "oci:" + hidden + "/layout:test");
  ASSERT_FALSE(lease.ok());
  EXPECT_THAT(lease.status().message(), HasSubstr("Permission denied"));
  ExpectNothingLeft();
  // As the agent itself (no account), it would have been read; the image's
  // setuid bits are cleared on that path too (the files are the agent's).
  auto as_agent = cache.Acquire(Ref("oci:" + hidden + "/layout:test"), {});
  EXPECT_TRUE(as_agent.ok()) << as_agent.status().ToString();
  EXPECT_THAT(Find(dir_, S_ISUID | S_ISGID, {S_IFCHR, S_IFBLK}), ::testing::IsEmpty());
}

TEST(ImageToolsTest, ToolsRunAsTheAccountWithoutPrivilegesInTheirOwnDirectory) {
  ASSERT_EQ(::geteuid(), 0u);
  // The pull's directory, behind one only root may cross (as the agent's
  // data directory is).
  char tmpl[] = "/tmp/gpupool-pull-tools-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string closed = tmpl;
  const std::string work = closed + "/pull";
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  ASSERT_EQ(::chown(work.c_str(), kTaskUid, kTaskUid), 0);
  PullTools tools(FsIdentity{kTaskUid, kTaskUid}, work);
  EXPECT_EQ(tools.dir(), kPullMount);
  std::vector<std::string> lines;
  auto r = tools.Run({"sh", "-c",
                      "id -u; id -g; id -G; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; "
                      "echo HOME=$HOME; pwd; echo made > made; cat " +
                          closed + "/pull/made 2>/dev/null || echo closed"},
                     [&](std::string_view l) { lines.emplace_back(l); }, 0, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_tail;
  const std::string id = std::to_string(kTaskUid);
  EXPECT_THAT(lines,
              ::testing::ElementsAre(id, id, id, "CapEff:\t0000000000000000", "NoNewPrivs:\t1",
                                     std::string("HOME=") + kPullMount, kPullMount, "closed"));
  EXPECT_EQ(*ReadFile(work + "/made"), "made\n");  // written through the bind
  // The host's mount point stays empty: the bind lived in the tool's namespace.
  EXPECT_TRUE(fs::is_empty(kPullStage));
  // Unset: the agent's own run, where the directory is.
  EXPECT_EQ(PullTools(FsIdentity{}, work).dir(), work);
  fs::remove_all(closed);
}

TEST(ImageToolsTest, SizeWatchStopsOncePastTheLimit) {
  char tmpl[] = "/tmp/gpupool-size-watch-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  SizeWatch watch(dir, 1 << 20, {}, std::chrono::milliseconds(0));
  EXPECT_FALSE(watch());
  ASSERT_TRUE(WriteFileAtomic(dir + "/big", std::string(2 << 20, 'x')).ok());
  EXPECT_TRUE(watch());
  EXPECT_GT(watch.over(), 1 << 20);
  bool asked = false;
  SizeWatch cancelled(dir, 0, [&] { return asked = true; });
  EXPECT_TRUE(cancelled());  // the caller's own cancel first
  EXPECT_TRUE(asked);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpupool::exec
