#include "store/log_chunk.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpupool {
namespace {

LogLine Line(int64_t offset, std::string stream, int64_t ts, std::string text) {
  LogLine l;
  l.offset = offset;
  l.stream = std::move(stream);
  l.ts_ms = ts;
  l.text = std::move(text);
  return l;
}

TEST(LogChunk, PacksAndUnpacksEveryField) {
  std::vector<LogLine> lines = {
      Line(0, "stdout", 1'700'000'000'000, "hello"),
      Line(25, "stderr", 1'699'999'999'000, ""),  // time going back
      Line(10, "event", 1'700'000'000'500, "offset going back"),
      Line(1'000'000'000'000, "weird-stream", 0, std::string("\0\xFF\n", 3)),
  };
  std::vector<int64_t> cursors = {7, 8, 100, 101};
  std::string packed;
  PackState prev;
  for (size_t i = 0; i < lines.size(); ++i) PackLogLine(lines[i], cursors[i], prev, packed);
  EXPECT_EQ(prev.cursor, 101);
  auto got = UnpackLogLines(packed, "3.2", 4);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    LogLine want = lines[i];
    want.attempt_id = "3.2";
    want.rank = 4;
    want.cursor = cursors[i];
    EXPECT_EQ((*got)[i], want) << "line " << i;
  }
}

TEST(LogChunk, AppendingContinuesFromTheLastLine) {
  std::string packed;
  PackState prev;
  PackLogLine(Line(0, "stdout", 5, "a"), 1, prev, packed);
  PackState saved = prev;
  std::string more = packed;
  PackLogLine(Line(2, "stdout", 6, "b"), 2, saved, more);
  auto got = UnpackLogLines(more, "1.1", 0);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[1].text, "b");
  EXPECT_EQ((*got)[1].cursor, 2);
  EXPECT_EQ((*got)[1].offset, 2);
}

TEST(LogChunk, TruncatedOrJunkIsDataLoss) {
  std::string packed;
  PackState prev;
  PackLogLine(Line(0, "stdout", 5, "some text"), 1, prev, packed);
  auto cut = UnpackLogLines(packed.substr(0, packed.size() - 3), "1.1", 0);
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  auto junk = UnpackLogLines(std::string(20, '\xFF'), "1.1", 0);
  EXPECT_EQ(junk.status().code(), StatusCode::kDataLoss);
  auto bad_stream = UnpackLogLines(std::string("\x02\x02\x02\x09", 4), "1.1", 0);
  EXPECT_EQ(bad_stream.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(UnpackLogLines("", "1.1", 0)->empty());
}

TEST(LogChunk, CompressesAFloodToAlmostNothing) {
  std::string packed;
  PackState prev;
  for (int i = 0; i < 20000; ++i) PackLogLine(Line(i * 2, "stdout", 42, "y"), i + 1, prev, packed);
  std::string z = CompressLogChunk(packed);
  ASSERT_FALSE(z.empty());
  EXPECT_LT(z.size(), packed.size() / 20);
  auto back = DecompressLogChunk(z, packed.size());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, packed);
  EXPECT_EQ(DecompressLogChunk(z, packed.size() + 1).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecompressLogChunk("not zstd", 10).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace gpupool
