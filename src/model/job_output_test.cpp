#include "model/job_output.h"

#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

using Verdict = OutputBudget::Verdict;

TEST(OutputLimitMarker, SaysTheLimitAndIsRecognized) {
  EXPECT_EQ(OutputLimitMarker(int64_t{1} << 30),
            "output limit of 1 GiB reached: further output dropped");
  EXPECT_TRUE(IsOutputLimitMarker(OutputLimitMarker(4096)));
  EXPECT_FALSE(IsOutputLimitMarker("output limit of  reached: further output dropped"));
  EXPECT_FALSE(IsOutputLimitMarker("output limit of 1 GiB reached"));
  EXPECT_FALSE(IsOutputLimitMarker("pulling image"));
}

TEST(EffectiveOutputLimit, ThePolicyLowersNeverRaises) {
  EXPECT_EQ(EffectiveOutputLimit(1000, 0), 1000);
  EXPECT_EQ(EffectiveOutputLimit(1000, 500), 500);
  EXPECT_EQ(EffectiveOutputLimit(1000, 5000), 1000);
  // A server from before the limit sends none: the default holds.
  EXPECT_EQ(EffectiveOutputLimit(0, 0), kDefaultMaxJobOutputBytes);
  EXPECT_EQ(EffectiveOutputLimit(0, 500), 500);
}

TEST(OutputBudget, KeepsLinesUpToTheLimitThenMarksOnceAndDropsTheRest) {
  // Room for exactly two lines of 10 bytes.
  OutputBudget b(2 * LogLineCost("0123456789"));
  EXPECT_EQ(b.Output("0123456789"), Verdict::kKeep);
  EXPECT_EQ(b.Output("0123456789"), Verdict::kKeep);
  EXPECT_FALSE(b.reached());
  EXPECT_EQ(b.Output("x"), Verdict::kDropMarked);
  EXPECT_TRUE(b.reached());
  b.MarkerKept(OutputLimitMarker(b.limit()));
  EXPECT_EQ(b.Output(""), Verdict::kDrop);
  EXPECT_EQ(b.Output("y"), Verdict::kDrop);
  // Events still pass, within the allowance.
  EXPECT_EQ(b.Event("exited"), Verdict::kKeep);
  std::string big(kLogEventAllowanceBytes, 'e');
  EXPECT_EQ(b.Event(big), Verdict::kDrop);
  // A marker sent later (a resend, a hostile agent) is not kept twice.
  EXPECT_EQ(b.Event(OutputLimitMarker(b.limit())), Verdict::kDrop);
}

TEST(OutputBudget, AMarkerEventFromTheAgentReachesTheLimit) {
  OutputBudget b(1000);
  EXPECT_EQ(b.Output("a"), Verdict::kKeep);
  EXPECT_EQ(b.Event(OutputLimitMarker(100)), Verdict::kKeep);
  EXPECT_TRUE(b.reached());
  EXPECT_EQ(b.Output("b"), Verdict::kDrop);
  EXPECT_EQ(b.Event(OutputLimitMarker(100)), Verdict::kDrop);
}

TEST(OutputBudget, ResumesFromWhatWasKept) {
  OutputBudget b(100, 95, false);
  EXPECT_EQ(b.Output("x"), Verdict::kDropMarked);
  OutputBudget reached(100, 50, true);
  EXPECT_EQ(reached.Output("x"), Verdict::kDrop);
}

TEST(OutputBudget, ALineLargerThanTheLimitIsDroppedWhole) {
  OutputBudget b(100);
  EXPECT_EQ(b.Output(std::string(200, 'z')), Verdict::kDropMarked);
  EXPECT_EQ(b.used(), 0);
}

TEST(ValidUtf8, KeepsWellFormedTextAndReplacesEveryBadByte) {
  EXPECT_EQ(ValidUtf8("plain ascii"), "plain ascii");
  const std::string good = "\xC3\xBC \xE2\x82\xAC \xF0\x9F\x98\x80";  // ü € 😀
  EXPECT_EQ(ValidUtf8(good), good);
  EXPECT_EQ(ValidUtf8("a\xFF"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  // Overlong, surrogate, beyond U+10FFFF, truncated: each byte replaced.
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80").size(), 12u);
  EXPECT_EQ(ValidUtf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8(std::string("\0x", 2)), std::string("\0x", 2));
  EXPECT_TRUE(IsValidUtf8(good));
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_FALSE(IsValidUtf8("a\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));
  EXPECT_TRUE(IsValidUtf8(ValidUtf8("\xED\xA0\x80 \xC0")));
}

TEST(Utf8CutPoint, NeverSplitsACharacter) {
  const std::string euro = "ab\xE2\x82\xAC";  // 5 bytes
  EXPECT_EQ(Utf8CutPoint(euro, 10), 5u);
  EXPECT_EQ(Utf8CutPoint(euro, 5), 5u);
  EXPECT_EQ(Utf8CutPoint(euro, 4), 2u);
  EXPECT_EQ(Utf8CutPoint(euro, 3), 2u);
  EXPECT_EQ(Utf8CutPoint(euro, 2), 2u);
  // Junk is cut where asked.
  EXPECT_EQ(Utf8CutPoint("\x82\x82\x82\x82\x82", 3), 3u);
  // A character at the very start is not cut to nothing.
  EXPECT_EQ(Utf8CutPoint("\xE2\x82\xAC", 2), 2u);
}

}  // namespace
}  // namespace gpupool
