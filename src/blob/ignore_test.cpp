#include "blob/ignore.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "blob/tree.h"

namespace gpupool::blob {
namespace {

struct Case {
  const char* rules;
  const char* path;
  bool is_dir;
  bool ignored;
};

// What .gitignore users expect, one line each.
const Case kCases[] = {
    // Nothing, comments and blank lines ignore nothing.
    {"", "a.txt", false, false},
    {"# a.txt\n\n   \n", "a.txt", false, false},
    {"\\#a.txt", "#a.txt", false, true},
    // A name without a slash matches at any depth, files and directories.
    {"*.pt", "model.pt", false, true},
    {"*.pt", "runs/1/model.pt", false, true},
    {"*.pt", "model.pth", false, false},
    {"data", "data", true, true},
    {"data", "x/data", false, true},
    {"data", "database", false, false},
    {"?.log", "a.log", false, true},
    {"?.log", "ab.log", false, false},
    {"[ab].txt", "b.txt", false, true},
    {"[ab].txt", "c.txt", false, false},
    {"[!ab].txt", "c.txt", false, true},
    {"*", "anything/at/all", false, true},
    {".*", ".env", false, true},
    {".*", "dir/.hidden", false, true},
    // Trailing slash: directories only (and what lies under them).
    {"build/", "build", true, true},
    {"build/", "build", false, false},
    {"build/", "src/build", true, true},
    {"build/", "build/out.o", false, true},
    // Leading slash anchors at the top.
    {"/build", "build", true, true},
    {"/build", "src/build", true, false},
    {"/*.txt", "a.txt", false, true},
    {"/*.txt", "doc/a.txt", false, false},
    // A slash in the middle anchors too; '*' does not cross '/'.
    {"doc/*.md", "doc/a.md", false, true},
    {"doc/*.md", "x/doc/a.md", false, false},
    {"doc/*.md", "doc/sub/a.md", false, false},
    // '**'
    {"**/cache", "cache", true, true},
    {"**/cache", "a/b/cache", true, true},
    {"**/cache/x", "a/cache/x", false, true},
    {"a/**/b", "a/b", false, true},
    {"a/**/b", "a/x/y/b", false, true},
    {"a/**/b", "c/a/x/b", false, false},
    {"out/**", "out/a", false, true},
    {"out/**", "out/a/b/c", false, true},
    {"out/**", "out", true, false},
    // Negation: the last match wins.
    {"*.pt\n!best.pt", "best.pt", false, false},
    {"*.pt\n!best.pt", "last.pt", false, true},
    {"!best.pt\n*.pt", "best.pt", false, true},
    {"\\!x", "!x", false, true},
    {"logs/\n!logs/", "logs", true, false},
    // A file under a left-out directory cannot be re-included.
    {"data/\n!data/keep.txt", "data/keep.txt", false, true},
    {"data/*\n!data/keep.txt", "data/keep.txt", false, false},
    {"data/*\n!data/keep.txt", "data/drop.txt", false, true},
    // Trailing spaces are dropped unless escaped; CRLF files work.
    {"a.txt   ", "a.txt", false, true},
    {"a\\ ", "a ", false, true},
    {"a.txt\r\nb.txt\r\n", "b.txt", false, true},
    // Degenerate lines match nothing.
    {"/", "a", false, false},
    {"!", "a", false, false},
};

TEST(IgnoreRules, Table) {
  for (const Case& c : kCases) {
    IgnoreRules rules = IgnoreRules::Parse(c.rules);
    EXPECT_EQ(rules.Ignored(c.path, c.is_dir), c.ignored)
        << "rules \"" << c.rules << "\", path \"" << c.path << "\"" << (c.is_dir ? " (dir)" : "");
  }
}

TEST(IgnoreRules, CountsPatterns) {
  EXPECT_TRUE(IgnoreRules::Parse("# only a comment\n\n").empty());
  EXPECT_EQ(IgnoreRules::Parse("a\n!b\nc/\n").size(), 3u);
  EXPECT_FALSE(IgnoreRules().AsHook());  // nothing to ignore: no hook at all
}

class IgnoreForTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        ("ignore-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(IgnoreForTest, NoFileIgnoresNothing) {
  auto rules = IgnoreFor(dir_.string());
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();
  EXPECT_TRUE(rules->empty());
  EXPECT_FALSE(rules->Ignored(".git", true));  // nothing implicit
}

TEST_F(IgnoreForTest, LeavesFilesOutOfTheManifest) {
  Write(".gpupoolignore", "# big things\n*.ckpt\ndata/\n!keep.ckpt\n");
  Write("train.py", "print(1)\n");
  Write("model.ckpt", "weights");
  Write("keep.ckpt", "kept");
  Write("data/a.bin", "a");
  Write("src/data", "a file named data stays");
  auto rules = IgnoreFor(dir_.string());
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();

  auto store = FsChunkStore::Open(dir_.string() + "-store", false);
  ASSERT_TRUE(store.ok());
  StoreTreeOptions options;
  options.ignore = rules->AsHook();
  auto m = StoreTree(dir_.string(), **store, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<std::string> paths;
  for (const ManifestEntry& e : m->entries) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{".gpupoolignore", "keep.ckpt", "src", "src/data",
                                             "train.py"}));
}

}  // namespace
}  // namespace gpupool::blob
