#include "agent/task_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace gpupool::agent {
namespace {

TEST(TaskFilesTest, RecordsRoundTripWithOffsets) {
  std::string data = EncodeRecord('o', 100, "hello") + EncodeRecord('e', 101, "oops: a b") +
                     EncodeRecord('o', 102, "");
  size_t consumed = 0;
  auto recs = ParseRecords(data, 1000, &consumed);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(consumed, data.size());
  EXPECT_EQ(recs[0].offset, 1000);
  EXPECT_EQ(recs[0].stream, "stdout");
  EXPECT_EQ(recs[0].ts_ms, 100);
  EXPECT_EQ(recs[0].text, "hello");
  EXPECT_EQ(recs[1].offset, 1000 + static_cast<int64_t>(EncodeRecord('o', 100, "hello").size()));
  EXPECT_EQ(recs[1].stream, "stderr");
  EXPECT_EQ(recs[1].text, "oops: a b");
  EXPECT_EQ(recs[2].text, "");
}

TEST(TaskFilesTest, IncompleteTailIsLeftForLater) {
  std::string data = EncodeRecord('o', 1, "done") + "o 2 half";
  size_t consumed = 0;
  auto recs = ParseRecords(data, 0, &consumed);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(consumed, EncodeRecord('o', 1, "done").size());
}

TEST(TaskFilesTest, MalformedRecordIsKeptAsText) {
  size_t consumed = 0;
  auto recs = ParseRecords("garbage line\n", 0, &consumed);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].text, "garbage line");
  EXPECT_EQ(recs[0].stream, "stdout");
}

TEST(TaskFilesTest, ShimRecordsCarryPidsAndResult) {
  TaskResult r{3, 0, "", false, 99};
  std::string data = EncodeRecord('p', 1, EncodePids({10, 20, 30})) + EncodeRecord('o', 2, "out") +
                     EncodeRecord('r', 3, EncodeResult(r));
  size_t consumed = 0;
  auto recs = ParseRecords(data, 0, &consumed);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].kind, 'p');
  auto pids = DecodePids(recs[0].text);
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_EQ(pids->shim_pid, 10);
  EXPECT_EQ(pids->shim_start_time, 20u);
  EXPECT_EQ(pids->job_pid, 30);
  EXPECT_EQ(recs[1].kind, 'o');
  EXPECT_EQ(recs[2].kind, 'r');
  EXPECT_EQ(DecodeResult(recs[2].text)->exit_code, 3);
  EXPECT_FALSE(DecodePids("1 2").ok());
  EXPECT_FALSE(DecodePids("0 2 3").ok());
}

TEST(TaskFilesTest, ResultRoundTripAndErrors) {
  TaskResult r{137, 9, "exceeded max_runtime of 1s", true, 1234};
  auto d = DecodeResult(EncodeResult(r));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->exit_code, 137);
  EXPECT_EQ(d->signal, 9);
  EXPECT_EQ(d->reason, r.reason);
  EXPECT_TRUE(d->failed);
  EXPECT_EQ(d->finished_ms, 1234);
  EXPECT_FALSE(DecodeResult("{").ok());
  EXPECT_THAT(DecodeResult("{}").status().message(), ::testing::HasSubstr("exit_code"));
}

TEST(TaskFilesTest, LeasesRoundTrip) {
  AttemptLease l{123456, 20000};
  EXPECT_EQ(EncodeLeaseFile(l), "123456 20000\n");
  auto d = DecodeLeaseFile(EncodeLeaseFile(l));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, l);
  EXPECT_FALSE(DecodeLeaseFile("").ok());
  EXPECT_FALSE(DecodeLeaseFile("12").ok());
  EXPECT_FALSE(DecodeLeaseFile("12 0").ok());
  EXPECT_FALSE(DecodeLeaseFile("-5 100").ok());
  int64_t a = BootTimeMs();
  EXPECT_GT(a, 0);
  EXPECT_GE(BootTimeMs(), a);
}

TEST(TaskFilesTest, ProcessStartTimeTellsLiveFromGone) {
  auto self = ProcessStartTime(::getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(ProcessStartTime(::getpid()), self);
  EXPECT_FALSE(ProcessStartTime(0).has_value());
  EXPECT_FALSE(ProcessStartTime(999999999).has_value());
}

}  // namespace
}  // namespace gpupool::agent
