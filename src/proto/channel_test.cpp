#include "proto/channel.h"

#include <gtest/gtest.h>

namespace gpupool::proto {
namespace {

TEST(OutboxTest, AssignsSequentialSeqsAndForgetsAcked) {
  Outbox out;
  EXPECT_EQ(out.Push("logs", "{}"), 1);
  EXPECT_EQ(out.Push("task_status", "{\"a\":1}"), 2);
  EXPECT_EQ(out.Push("logs", "{}"), 3);
  EXPECT_EQ(out.size(), 3u);
  out.Ack(2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.After(0)[0].seq, 3);
  EXPECT_EQ(out.bytes(), 2u);
  // An old ack arriving late changes nothing.
  out.Ack(1);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out.Push("logs", "{}"), 4);
}

TEST(OutboxTest, ResendsOnlyWhatThePeerLacks) {
  Outbox out;
  for (int i = 0; i < 5; ++i) out.Push("logs", "{}");
  auto resend = out.After(3);
  ASSERT_EQ(resend.size(), 2u);
  EXPECT_EQ(resend[0].seq, 4);
  EXPECT_EQ(resend[1].seq, 5);
}

TEST(InboundSequenceTest, AppliesInOrderOnce) {
  InboundSequence in;
  EXPECT_EQ(in.Check(1), InboundSequence::Verdict::kApply);
  in.MarkApplied(1);
  EXPECT_EQ(in.Check(1), InboundSequence::Verdict::kDuplicate);
  EXPECT_EQ(in.Check(3), InboundSequence::Verdict::kGap);
  EXPECT_EQ(in.Check(2), InboundSequence::Verdict::kApply);
  InboundSequence resumed(7);
  EXPECT_EQ(resumed.Check(7), InboundSequence::Verdict::kDuplicate);
  EXPECT_EQ(resumed.Check(8), InboundSequence::Verdict::kApply);
}

}  // namespace
}  // namespace gpupool::proto
