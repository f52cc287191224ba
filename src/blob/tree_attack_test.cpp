// StoreTree and RestoreTree against a tree that another party changes while
// they work (a hostile job rewriting its committed checkpoint while the
// agent uploads it), and against destinations that hold links.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "blob/tree.h"
#include "blob/tree_testing.h"
#include "common/files.h"

namespace gpupool::blob {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::RandomBytes;
using testing::Write;

constexpr char kMarker[] = "HOST-SECRET-4f1c9a0e-never-in-a-checkpoint";

class TreeAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-tree-attack-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    store_ = *FsChunkStore::Open(root_ / "chunks", false);
    src_ = root_ / "src";
    // The host's secrets, which the tree's owner would like to read: a
    // directory with a file of the same name as one in the tree.
    secrets_ = root_ / "secrets";
    Write(secrets_ / "secret.txt", kMarker);
    Write(secrets_ / "big.bin", kMarker);
    Write(src_ / "sub/big.bin", RandomBytes(3 << 20, 1));
    Write(src_ / "sub/secret.txt", "decoy");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Whether any file of `m` holds the marker: a chunk of exactly its bytes
  // (the secrets are one chunk each), or, for a manifest the pool would
  // accept, anywhere in its files restored and read back.
  bool LeaksMarker(const Manifest& m) {
    const std::string_view marker = kMarker;
    const ChunkId secret =
        ComputeChunkId({reinterpret_cast<const uint8_t*>(marker.data()), marker.size()});
    for (const ChunkId& id : m.ChunkIds()) {
      if (id == secret) return true;
    }
    if (!ValidateManifest(m).ok()) return false;  // an absolute symlink: not restorable
    static int n = 0;
    fs::path out = root_ / ("check-" + std::to_string(n++));
    Status s = RestoreTree(m, *store_, out.string());
    EXPECT_TRUE(s.ok()) << s.ToString();
    bool leaked = false;
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      if (e.is_symlink() || !e.is_regular_file()) continue;
      if (ReadFile(e.path().string())->find(kMarker) != std::string::npos) leaked = true;
    }
    fs::remove_all(out);
    return leaked;
  }

  fs::path root_, src_, secrets_;
  std::unique_ptr<FsChunkStore> store_;
};

// The swap happens while the walk is inside sub/ (reading big.bin, before
// it reaches secret.txt), deterministically: on_scanned runs after each
// chunk. A walk that resolves sub/secret.txt by path would now read the
// host's file through the symlink.
TEST_F(TreeAttackTest, ADirectorySwappedForASymlinkMidWalkIsNotFollowed) {
  bool swapped = false;
  StoreTreeOptions options;
  options.on_scanned = [&](int64_t) {
    if (swapped) return;
    swapped = true;
    fs::rename(src_ / "sub", src_ / "sub.moved");
    fs::create_directory_symlink(secrets_, src_ / "sub");
  };
  TreeStats stats;
  auto m = StoreTree(src_.string(), *store_, options, &stats);
  ASSERT_TRUE(swapped);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(LeaksMarker(*m));
  // What was read is the directory as it was listed: its descriptor was
  // kept while it moved.
  bool decoy = false;
  for (const ManifestEntry& e : m->entries) {
    if (e.path == "sub/secret.txt") decoy = e.size == 5;
  }
  EXPECT_TRUE(decoy) << EncodeManifest(*m);
}

// The same swap at the top: the tree's root itself is a symlink when the
// walk starts. Beneath a trusted directory, it is refused.
TEST_F(TreeAttackTest, ARootReachedThroughASymlinkIsRefusedBeneathATrustedDirectory) {
  fs::create_directory_symlink(secrets_, src_ / "ckpt");
  StoreTreeOptions options;
  options.beneath = root_.string();
  auto m = StoreTree((src_ / "ckpt").string(), *store_, options);
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().ToString();
  // A symlink higher up, too.
  fs::create_directory_symlink(src_, root_ / "src-link");
  m = StoreTree((root_ / "src-link/sub").string(), *store_, options);
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status().ToString();
  // A path that is not beneath it.
  m = StoreTree(secrets_.string(), *store_, [&] {
    StoreTreeOptions o;
    o.beneath = src_.string();
    return o;
  }());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  // The real directory is fine.
  options.beneath = root_.string();
  m = StoreTree((src_ / "sub").string(), *store_, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(LeaksMarker(*m));
}

// A racing swapper, as a hostile job runs it: directories of the tree flip
// between themselves and symlinks to the secrets while the tree is stored
// again and again. No walk may ever read a secret.
TEST_F(TreeAttackTest, RacingSwapsNeverLeakAHostByte) {
  Write(src_ / "sub/deeper/more.txt", "more");
  std::atomic<bool> stop{false};
  std::atomic<int64_t> flips{0};
  std::thread swapper([&] {
    while (!stop.load()) {
      std::error_code ec;
      fs::rename(src_ / "sub", src_ / "sub.real", ec);
      fs::create_directory_symlink(secrets_, src_ / "sub", ec);
      // Each state holds for a moment, as long as a walk takes to read a
      // few chunks: the attacker's pace, not a wait for an event.
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      fs::remove(src_ / "sub", ec);
      fs::rename(src_ / "sub.real", src_ / "sub", ec);
      ++flips;
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  struct Stop {  // however the test ends
    std::atomic<bool>& stop;
    std::thread& t;
    ~Stop() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } stopper{stop, swapper};
  int failed = 0;
  int64_t skipped = 0;
  std::vector<Manifest> manifests;
  for (int i = 0; i < 60; ++i) {
    TreeStats stats;
    auto m = StoreTree(src_.string(), *store_, {}, &stats);
    if (!m.ok()) {
      ++failed;
      continue;
    }
    skipped += stats.skipped;
    manifests.push_back(*std::move(m));
  }
  stop = true;
  swapper.join();
  EXPECT_GT(flips.load(), 0);
  int leaks = 0;
  for (const Manifest& m : manifests) leaks += LeaksMarker(m) ? 1 : 0;
  EXPECT_EQ(leaks, 0) << "of " << manifests.size() << " trees stored";
  // An entry changing under the walk is left out, never an error.
  EXPECT_EQ(failed, 0);
  RecordProperty("skipped", std::to_string(skipped));
}

// Read as the task's account, a root reader cannot be handed a file the
// account could not read, even by a hard link inside the tree (which no
// symlink check sees).
TEST_F(TreeAttackTest, ReadAsTheTasksAccountARootOnlyFileFailsTheWalk) {
  constexpr int kTaskUid = 190777;
  fs::permissions(root_, fs::perms(0755));
  fs::permissions(src_, fs::perms(0755));
  fs::permissions(src_ / "sub", fs::perms(0755));
  for (const char* f : {"sub/big.bin", "sub/secret.txt"}) {
    fs::permissions(src_ / f, fs::perms(0644));
  }
  // Root's file, 0600, linked into the tree.
  fs::permissions(secrets_ / "secret.txt", fs::perms(0600));
  ASSERT_EQ(::link((secrets_ / "secret.txt").c_str(), (src_ / "sub/linked.txt").c_str()), 0);
  StoreTreeOptions options;
  options.read_as = FsIdentity{kTaskUid, kTaskUid};
  auto m = StoreTree(src_.string(), *store_, options);
  if (::geteuid() != 0) {
    // Only root can take another identity: refused, nothing read.
    EXPECT_EQ(m.status().code(), StatusCode::kPermissionDenied) << m.status().ToString();
    return;
  }
  EXPECT_EQ(m.status().code(), StatusCode::kPermissionDenied) << m.status().ToString();
  EXPECT_THAT(m.status().message(), HasSubstr("sub/linked.txt"));
  // Without the link the same reader stores the tree; as root (no
  // read_as) the link's bytes would have been read.
  auto as_root = StoreTree(src_.string(), *store_);
  ASSERT_TRUE(as_root.ok());
  EXPECT_TRUE(LeaksMarker(*as_root));
  fs::remove(src_ / "sub/linked.txt");
  m = StoreTree(src_.string(), *store_, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(LeaksMarker(*m));
  // The reading thread is root again afterwards.
  EXPECT_TRUE(ReadFile((secrets_ / "secret.txt").string()).ok());
}

// ---- restores -----------------------------------------------------------------

class RestoreAttackTest : public TreeAttackTest {
 protected:
  void SetUp() override {
    TreeAttackTest::SetUp();
    Write(root_ / "v1/ckpt-1/state.bin", RandomBytes(1 << 20, 5));
    Write(root_ / "v1/ckpt-1/meta.json", "{\"step\": 1}");
    manifest_ = *StoreTree((root_ / "v1").string(), *store_);
    victim_ = root_ / "victim";
    fs::create_directories(victim_);
  }
  bool VictimEmpty() { return fs::is_empty(victim_); }

  Manifest manifest_;
  fs::path victim_;  // an empty host directory a restore must never write into
};

TEST_F(RestoreAttackTest, ADestinationThatIsASymlinkIsRefused) {
  fs::create_directories(root_ / "work");
  fs::create_directory_symlink(victim_, root_ / "work/.checkpoints");
  Status s = RestoreTree(manifest_, *store_, (root_ / "work/.checkpoints").string());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(VictimEmpty());
  EXPECT_TRUE(fs::is_symlink(root_ / "work/.checkpoints"));
  // A dangling one too: the restore would have created its target.
  fs::create_directory_symlink(root_ / "made-by-restore", root_ / "work/dangling");
  s = RestoreTree(manifest_, *store_, (root_ / "work/dangling").string());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_FALSE(fs::exists(root_ / "made-by-restore"));
}

// A base tree whose directory was swapped for a symlink to elsewhere: the
// files there are not taken over (moved away) nor trusted.
TEST_F(RestoreAttackTest, ABaseReachedThroughASymlinkIsNotTakenOver) {
  RestoreBase base{manifest_, (root_ / "base").string()};
  ASSERT_TRUE(RestoreTree(manifest_, *store_, base.dir).ok());
  // The victim holds what the base should: same names, same bytes.
  fs::rename(root_ / "base/ckpt-1", victim_ / "ckpt-1");
  fs::create_directory_symlink(victim_ / "ckpt-1", root_ / "base/ckpt-1");
  testing::CountingStore counting(*store_);
  RestoreStats stats;
  Status s = RestoreTree(manifest_, counting, (root_ / "out").string(), &base, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(stats.reused_bytes, 0);
  EXPECT_TRUE(fs::exists(victim_ / "ckpt-1/state.bin"));
  EXPECT_TRUE(fs::exists(victim_ / "ckpt-1/meta.json"));
  EXPECT_EQ(*ReadFile((root_ / "out/ckpt-1/meta.json").string()), "{\"step\": 1}");
}

// Symlinks a manifest holds are made last and never written through, even
// when a chain of them (each "inside" on its own) resolves outside.
TEST_F(RestoreAttackTest, SymlinkChainsAreMadeButNeverWrittenThrough) {
  Manifest m = manifest_;
  m.entries.push_back({"x", EntryType::kDir, 0755, 0, {}, ""});
  m.entries.push_back({"x/l", EntryType::kSymlink, 0, 0, {}, ".."});
  m.entries.push_back({"up", EntryType::kSymlink, 0, 0, {}, "x/l/.."});
  ASSERT_TRUE(ValidateManifest(m).ok());
  fs::path out = victim_ / "deep/out";
  Status s = RestoreTree(m, *store_, out.string());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(fs::read_symlink(out / "up"), "x/l/..");
  // Nothing was written beside `out` through "up" (which leads to deep/).
  EXPECT_EQ(std::distance(fs::directory_iterator(victim_ / "deep"), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace gpupool::blob
