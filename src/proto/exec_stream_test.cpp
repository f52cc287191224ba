// The exec stream's frames: encoding, reassembly from any split, and errors.
#include "proto/exec_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace gpupool::proto {
namespace {

using ::testing::HasSubstr;

std::vector<ExecFrame> ReadAll(ExecFrameReader& r) {
  std::vector<ExecFrame> out;
  while (true) {
    auto f = r.Next();
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok() || !*f) return out;
    out.push_back(std::move(**f));
  }
}

TEST(ExecStream, EncodesTheLayout) {
  EXPECT_EQ(EncodeExecFrame(ExecFrameType::kStdin, "hi"), std::string("\x01\0\0\0\x02hi", 7));
  EXPECT_EQ(EncodeExecFrame(ExecFrameType::kStdinEof), std::string("\x02\0\0\0\0", 5));
  EXPECT_EQ(EncodeExecResize(24, 300), std::string("\x03\0\0\0\x04\0\x18\x01\x2c", 9));
  EXPECT_EQ(EncodeExecSignal(2), std::string("\x04\0\0\0\x01\x02", 6));
  EXPECT_EQ(EncodeExecExit(130), std::string("\x13\0\0\0\x04\0\0\0\x82", 9));
}

TEST(ExecStream, RoundTripsInAnySplit) {
  std::string bytes = EncodeExecFrame(ExecFrameType::kStdout, "hello") +
                      EncodeExecFrame(ExecFrameType::kStderr, std::string(70000 / 2, 'e')) +
                      EncodeExecFrame(ExecFrameType::kError, "cannot run x") + EncodeExecExit(-1) +
                      EncodeExecResize(65535, 1);
  for (size_t step : {size_t{1}, size_t{3}, size_t{4096}, bytes.size()}) {
    ExecFrameReader r;
    std::vector<ExecFrame> got;
    for (size_t i = 0; i < bytes.size(); i += step) {
      r.Feed(std::string_view(bytes).substr(i, step));
      for (auto& f : ReadAll(r)) got.push_back(std::move(f));
    }
    ASSERT_EQ(got.size(), 5u) << step;
    EXPECT_EQ(got[0].payload, "hello");
    EXPECT_EQ(got[1].type, ExecFrameType::kStderr);
    EXPECT_EQ(got[1].payload.size(), 35000u);
    EXPECT_EQ(got[2].type, ExecFrameType::kError);
    EXPECT_EQ(*DecodeExecExit(got[3].payload), -1);
    auto rs = DecodeExecResize(got[4].payload);
    ASSERT_TRUE(rs.ok());
    EXPECT_EQ(rs->rows, 65535);
    EXPECT_EQ(rs->cols, 1);
    EXPECT_EQ(r.pending(), 0u);
  }
}

TEST(ExecStream, RejectsUnknownTypesAndOversizedFrames) {
  ExecFrameReader r;
  r.Feed(std::string("\x05\0\0\0\0", 5));
  auto f = r.Next();
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("unknown frame type 5"));
  EXPECT_FALSE(r.Next().ok());  // stays broken

  ExecFrameReader big;
  big.Feed(std::string("\x11\0\x01\0\x01", 5));  // 65537 bytes
  f = big.Next();
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("frame of 65537 bytes, more than 65536"));

  ExecFrameReader max;  // exactly the limit is fine
  max.Feed(EncodeExecFrame(ExecFrameType::kStdout, std::string(kMaxExecPayload, 'x')));
  f = max.Next();
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->has_value());
  EXPECT_EQ((*f)->payload.size(), kMaxExecPayload);
}

TEST(ExecStream, PayloadDecodersCheckSizes) {
  EXPECT_THAT(DecodeExecResize("abc").status().message(), HasSubstr("must be 4 bytes, got 3"));
  EXPECT_THAT(DecodeExecSignal("").status().message(), HasSubstr("must be 1 byte, got 0"));
  EXPECT_THAT(DecodeExecExit("12345").status().message(), HasSubstr("must be 4 bytes, got 5"));
  EXPECT_EQ(*DecodeExecSignal("\x0f"), 15);
}

}  // namespace
}  // namespace gpupool::proto
