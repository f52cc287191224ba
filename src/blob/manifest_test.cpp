#include "blob/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gpupool::blob {
namespace {

using ::testing::HasSubstr;

ChunkId Id(char c) { return std::string(64, c); }

Manifest Example() {
  Manifest m;
  m.entries.push_back({"model", EntryType::kDir, 0755, 0, {}, ""});
  m.entries.push_back(
      {"model/weights.pt", EntryType::kFile, 0600, 30, {{Id('a'), 20}, {Id('b'), 10}}, ""});
  m.entries.push_back({"model/copy.pt", EntryType::kFile, 0644, 20, {{Id('a'), 20}}, ""});
  m.entries.push_back({"empty", EntryType::kFile, 0644, 0, {}, ""});
  m.entries.push_back({"latest", EntryType::kSymlink, 0, 0, {}, "model/weights.pt"});
  return m;
}

TEST(Manifest, RoundTripsAndSummarizes) {
  Manifest m = Example();
  std::string text = EncodeManifest(m);
  auto back = DecodeManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(m.TotalBytes(), 50);
  EXPECT_EQ(m.ChunkIds(), (std::vector<ChunkId>{Id('a'), Id('b')}));
  EXPECT_EQ(ManifestId(text), ManifestId(EncodeManifest(*back)));
  EXPECT_TRUE(IsChunkId(ManifestId(text)));
}

std::string Error(const std::string& entries) {
  auto m = DecodeManifest(R"({"version": 1, "entries": )" + entries + "}");
  return m.ok() ? "(accepted)" : m.status().message();
}

TEST(Manifest, RejectsEntriesThatCouldWriteOutsideTheTree) {
  EXPECT_THAT(Error(R"([{"path": "/etc/passwd", "type": "file", "size": 0, "chunks": []}])"),
              HasSubstr("entries[0].path: must be relative"));
  EXPECT_THAT(Error(R"([{"path": "../x", "type": "file", "size": 0, "chunks": []}])"),
              HasSubstr("entries[0].path: must not contain \".\" or \"..\""));
  EXPECT_THAT(Error(R"([{"path": "a//b", "type": "dir"}])"), HasSubstr("empty components"));
  EXPECT_THAT(Error(R"([{"path": "a/b", "type": "file", "size": 0, "chunks": []}])"),
              HasSubstr("lies under \"a\", which is not listed before it as a dir"));
  // A file may not lie under a symlink (it would be written through it).
  EXPECT_THAT(Error(R"([{"path": "a", "type": "symlink", "target": "."},
                        {"path": "a/b", "type": "file", "size": 0, "chunks": []}])"),
              HasSubstr("entries[1].path: lies under \"a\""));
  EXPECT_THAT(Error(R"([{"path": "up", "type": "symlink", "target": "../../etc"}])"),
              HasSubstr("entries[0].target: must be a relative path that stays inside"));
  EXPECT_THAT(Error(R"([{"path": "abs", "type": "symlink", "target": "/etc"}])"),
              HasSubstr("stays inside"));
  EXPECT_EQ(Error(R"([{"path": "d", "type": "dir"},
                      {"path": "d/up", "type": "symlink", "target": "../x"}])"),
            "(accepted)");
  EXPECT_THAT(Error(R"([{"path": "x", "type": "dir"}, {"path": "x", "type": "dir"}])"),
              HasSubstr("entries[1].path: is listed twice"));
}

TEST(Manifest, RejectsInconsistentFiles) {
  std::string a = Id('a');
  EXPECT_THAT(
      Error(R"([{"path": "f", "type": "file", "size": 5, "chunks": [[")" + a + R"(", 4]]}])"),
      HasSubstr("entries[0].size: is 5 but its chunks hold 4 bytes"));
  EXPECT_THAT(Error(R"([{"path": "f", "type": "file", "size": 4, "chunks": [["zz", 4]]}])"),
              HasSubstr("entries[0].chunks[0]: not a SHA-256 chunk id"));
  EXPECT_THAT(
      Error(R"([{"path": "f", "type": "file", "size": 0, "chunks": [[")" + a + R"(", 0]]}])"),
      HasSubstr("chunk size out of range"));
  EXPECT_THAT(Error(R"([{"path": "f", "type": "fifo"}])"),
              HasSubstr("entries[0].type: must be file, dir or symlink"));
  EXPECT_THAT(Error(R"([{"path": "f", "type": "dir", "mode": 99999}])"),
              HasSubstr("entries[0].mode: must be from 0 to 07777"));
  EXPECT_THAT(Error(R"([{"path": "f", "type": "dir", "owner": "root"}])"), HasSubstr("owner"));
  EXPECT_THAT(DecodeManifest(R"({"version": 2, "entries": []})").status().message(),
              HasSubstr("unsupported manifest version 2"));
  EXPECT_FALSE(DecodeManifest("[]").ok());
  EXPECT_FALSE(DecodeManifest("{").ok());
}

TEST(Manifest, LimitsSizesCountsAndNumbers) {
  std::string a = Id('a');
  // Sizes past int64_t are out of range, not wrapped.
  EXPECT_THAT(Error(R"([{"path": "f", "type": "file", "size": 1, "chunks": [[")" + a +
                    R"(", 18446744073709551615]]}])"),
              HasSubstr("entries[0].chunks[0]: chunk size out of range"));
  EXPECT_THAT(
      Error(R"([{"path": "f", "type": "file", "size": 18446744073709551615, "chunks": []}])"),
      HasSubstr("entries[0].size: must be an integer of at most 9223372036854775807"));
  EXPECT_THAT(Error(R"([{"path": "f", "type": "dir", "mode": 18446744073709551615}])"),
              HasSubstr("entries[0].mode: must be an integer of at most"));
  // Paths and targets: the JSON reader stops strings longer than a path.
  EXPECT_EQ(Error(R"([{"path": ")" + std::string(5000, 'p') + R"(", "type": "dir"}])"),
            "manifest: entries[0].path: JSON string of 5000 bytes, more than 4096");
  EXPECT_EQ(
      Error(R"([{"path": "l", "type": "symlink", "target": ")" + std::string(5000, 't') + R"("}])"),
      "manifest: entries[0].target: JSON string of 5000 bytes, more than 4096");
  EXPECT_EQ(Error(R"([{"path": "d", "type": "dir"},)" + std::string(40, ' ') + "[[[[[[[[[" +
                  std::string(100'000, '[')),
            "manifest: JSON nested deeper than 32 levels (at entries[1][0][0][0][0][0][0][0][0]"
            "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0])");
  // A NUL in a target: symlink(2) would read "a/../.." and leave the tree.
  EXPECT_EQ(Error(R"([{"path": "l", "type": "symlink", "target": "a/../..\u0000/b"}])"),
            "entries[0].target: must not contain NUL");
  EXPECT_EQ(Error(R"([{"path": "a\u0000b", "type": "dir"}])"),
            "entries[0].path: must not contain NUL");
  // More entries than allowed: counted before any is read.
  std::string many = "[0";
  for (size_t i = 0; i < kMaxManifestEntries; ++i) many += ",0";
  EXPECT_EQ(Error(many + "]"), "entries: at most 1000000 entries, got 1000001");
}

TEST(ValidateManifest, LimitsTargetsAndChunkCounts) {
  Manifest m;
  m.entries.push_back({"l", EntryType::kSymlink, 0, 0, {}, std::string(5000, 't')});
  EXPECT_EQ(ValidateManifest(m).message(), "entries[0].target: is too long");
  m.entries[0].target = std::string("x\0", 2);
  EXPECT_EQ(ValidateManifest(m).message(), "entries[0].target: must not contain NUL");
  // Chunks are counted before any size is added up.
  Manifest big;
  big.entries.push_back({"f", EntryType::kFile, 0644, 0, {}, ""});
  big.entries[0].chunks.resize(kMaxManifestChunks + 1, ChunkRef{"", int64_t{1} << 26});
  EXPECT_EQ(ValidateManifest(big).message(),
            "entries[0].chunks: more than 4194304 chunks in the manifest");
}

}  // namespace
}  // namespace gpupool::blob
