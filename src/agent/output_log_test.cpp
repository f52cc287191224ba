#include "agent/output_log.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "agent/task_files.h"
#include "common/files.h"

namespace gpupool::agent {
namespace {

using ::testing::HasSubstr;

// An output.log in a temporary file, read back as records.
class OutputLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/gpupool-output-log-XXXXXX";
    fd_ = ::mkstemp(path);
    ASSERT_GE(fd_, 0);
    path_ = path;
  }
  void TearDown() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  std::vector<OutputRecord> Records() {
    auto data = ReadFile(path_);
    EXPECT_TRUE(data.ok());
    size_t consumed = 0;
    auto recs = ParseRecords(*data, 0, &consumed);
    EXPECT_EQ(consumed, data->size()) << "output.log ends in the middle of a record";
    return recs;
  }
  int64_t Size() { return static_cast<int64_t>(ReadFile(path_)->size()); }
  std::vector<std::string> Texts(char kind) {
    std::vector<std::string> out;
    for (const auto& r : Records()) {
      if (r.kind == kind) out.push_back(r.text);
    }
    return out;
  }

  int fd_ = -1;
  std::string path_;
};

TEST_F(OutputLogTest, SplitsLinesPerStreamAndKeepsTheShimsRecords) {
  OutputLog log(fd_, 1 << 20);
  log.Record('p', 1, "10 20 30");
  log.Add('o', "hel", 3, 2);
  log.Add('e', "oops\r\nsecond", 12, 3);
  log.Add('o', "lo\nworld\n", 9, 4);
  log.Finish('e', 5);
  log.Finish('o', 5);
  log.Event("pulling image\nmulti-line", 6);
  log.Record('x', 7, "");
  auto recs = Records();
  ASSERT_EQ(recs.size(), 7u);
  EXPECT_EQ(recs[0].kind, 'p');
  EXPECT_EQ(recs[1].text, "oops");
  EXPECT_EQ(recs[1].kind, 'e');
  EXPECT_EQ(recs[2].text, "hello");
  EXPECT_EQ(recs[2].ts_ms, 4);
  EXPECT_EQ(recs[3].text, "world");
  EXPECT_EQ(recs[4].text, "second");  // stderr's last line, without a newline
  EXPECT_EQ(recs[5].text, "pulling image multi-line");
  EXPECT_EQ(recs[6].kind, 'x');
  EXPECT_EQ(log.last_stderr_line(), "second");
  EXPECT_FALSE(log.limit_reached());
}

TEST_F(OutputLogTest, LongLinesAreCutBetweenCharactersAndJunkIsMadeValid) {
  OutputLog log(fd_, 1 << 20);
  // A line of euro signs (3 bytes each) longer than kMaxLineBytes.
  std::string euros;
  while (euros.size() < kMaxLineBytes + 100) euros += "\xE2\x82\xAC";
  euros += "\n";
  log.Add('o', euros.data(), euros.size(), 1);
  std::string junk =
      "a\xFF\xFE"
      "b\n";
  log.Add('o', junk.data(), junk.size(), 2);
  auto texts = Texts('o');
  ASSERT_EQ(texts.size(), 3u);
  EXPECT_LE(texts[0].size(), kMaxLineBytes);
  EXPECT_EQ(texts[0].size() % 3, 0u);  // whole characters
  EXPECT_EQ(texts[0] + texts[1] + "\n", euros);
  EXPECT_EQ(texts[2],
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
}

TEST_F(OutputLogTest, ALimitKeepsTheJobGoingAndMarksOnce) {
  const int64_t limit = 10'000;
  OutputLog log(fd_, limit);
  std::string y;
  for (int i = 0; i < 1000; ++i) y += "y\n";
  for (int i = 0; i < 200; ++i) log.Add(i % 2 ? 'e' : 'o', y.data(), y.size(), i);
  EXPECT_TRUE(log.limit_reached());
  log.Event("exceeded max_runtime of 1s", 300);
  log.Record('r', 301, "{}");
  auto recs = Records();
  int64_t kept = 0, markers = 0;
  for (const auto& r : recs) {
    if (r.kind == 'o' || r.kind == 'e') kept += LogLineCost(r.text);
    if (r.kind == 'v' && r.text == OutputLimitMarker(limit)) ++markers;
  }
  EXPECT_EQ(markers, 1);
  EXPECT_LE(kept, limit);
  EXPECT_GT(kept, limit - LogLineCost("y") - 1);
  // The events after the limit and the result are still there.
  ASSERT_GE(recs.size(), 2u);
  EXPECT_EQ(recs[recs.size() - 2].text, "exceeded max_runtime of 1s");
  EXPECT_EQ(recs.back().kind, 'r');
  EXPECT_LE(Size(), limit + 200);
}

TEST_F(OutputLogTest, FloodsWithoutNewlinesOrOfBinaryJunkStayBounded) {
  const int64_t limit = 64 * 1024;
  OutputLog log(fd_, limit);
  std::mt19937 rng(1);
  std::string junk(65536, '\0');
  for (int round = 0; round < 200; ++round) {
    for (char& c : junk) c = static_cast<char>(rng());
    log.Add('o', junk.data(), junk.size(), round);
    std::string no_newline(65536, 'z');
    log.Add('e', no_newline.data(), no_newline.size(), round);
  }
  log.Finish('o', 1000);
  log.Finish('e', 1000);
  EXPECT_TRUE(log.limit_reached());
  // Junk grows when made valid (up to 3 bytes a byte) and is counted so.
  EXPECT_LE(Size(), limit + 200);
  EXPECT_EQ(Texts('v'), std::vector<std::string>{OutputLimitMarker(limit)});
}

TEST_F(OutputLogTest, PastTheLimitThePipesAreDrainedAtABoundedRate) {
  OutputLog log(fd_, 100);
  std::string chunk(64 * 1024, 'y');
  chunk.back() = '\n';
  EXPECT_EQ(log.DrainPauseMs(0), 0);
  log.Add('o', chunk.data(), chunk.size(), 0);  // reaches the limit
  ASSERT_TRUE(log.limit_reached());
  int64_t fed = 0;
  while (fed < OutputLog::kDrainBytesPerSecond) {
    EXPECT_EQ(log.DrainPauseMs(100), 0);
    log.Add('o', chunk.data(), chunk.size(), 100);
    fed += static_cast<int64_t>(chunk.size());
  }
  EXPECT_EQ(log.DrainPauseMs(100), 900);  // the rest of this second
  EXPECT_EQ(log.DrainPauseMs(600), 400);
  EXPECT_EQ(log.DrainPauseMs(1100), 0);  // the next second
  log.Add('o', chunk.data(), chunk.size(), 1100);
  EXPECT_EQ(log.DrainPauseMs(1100), 0);
  // The wall clock jumps back an hour: the pipes are never left unread
  // longer than a second.
  while (log.DrainPauseMs(1100) == 0) log.Add('o', chunk.data(), chunk.size(), 1100);
  EXPECT_EQ(log.DrainPauseMs(1100 - 3'600'000), 1000);
  log.Add('o', chunk.data(), chunk.size(), 1100 - 3'600'000);  // a new window starts
  EXPECT_EQ(log.DrainPauseMs(1100 - 3'600'000), 0);
}

TEST_F(OutputLogTest, EventsPassTheLimitOnlyWithinTheirAllowance) {
  OutputLog log(fd_, 100);
  std::string line(200, 'a');
  line += "\n";
  log.Add('o', line.data(), line.size(), 1);
  EXPECT_TRUE(log.limit_reached());
  std::string event(1000, 'v');
  for (int i = 0; i < 1000; ++i) log.Event(event, 2);
  EXPECT_LE(Size(), 100 + kLogEventAllowanceBytes + 200);
  EXPECT_THAT(Texts('v').front(), HasSubstr("output limit of 100 B reached"));
}

}  // namespace
}  // namespace gpupool::agent
