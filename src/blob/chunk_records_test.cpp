#include "blob/chunk_records.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace gpupool::blob {
namespace {

using ::testing::HasSubstr;

std::string IdOf(std::string_view data) {
  return ComputeChunkId({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
}

const std::string kA = IdOf("a");
const std::string kB = IdOf("b");

TEST(ChunkRecords, EncodesHeaderThenFrame) {
  std::string body = EncodeChunkRecords({{kA, "xyz"}});
  EXPECT_EQ(body, kA + " 3\nxyz");
  EXPECT_EQ(body.size(), ChunkRecordBytes(3));
}

TEST(ChunkRecords, RoundTripsSeveralRecordsInOrder) {
  std::mt19937 rng(7);
  std::string big(100'000, '\0');
  for (char& c : big) c = static_cast<char>(rng());  // includes '\n' and ' ' bytes
  std::vector<ChunkFrame> records = {{kA, big}, {kB, "\n"}, {kA, "again"}};
  std::string body = EncodeChunkRecords(records);
  size_t expected = 0;
  for (const auto& r : records) expected += ChunkRecordBytes(r.second.size());
  EXPECT_EQ(body.size(), expected);
  auto decoded = DecodeChunkRecords(body);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, records);
}

TEST(ChunkRecords, EmptyBodyIsNoRecords) {
  auto decoded = DecodeChunkRecords("");
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->empty());
  EXPECT_EQ(EncodeChunkRecords({}), "");
}

TEST(ChunkRecords, AppendMatchesEncode) {
  std::string out;
  AppendChunkRecord(out, kA, "one");
  AppendChunkRecord(out, kB, "two!");
  EXPECT_EQ(out, EncodeChunkRecords({{kA, "one"}, {kB, "two!"}}));
}

void ExpectError(std::string_view body, std::string_view message) {
  auto decoded = DecodeChunkRecords(body);
  ASSERT_FALSE(decoded.ok()) << "accepted: " << body;
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr(std::string(message)));
}

TEST(ChunkRecords, RefusesMalformedHeaders) {
  ExpectError(kA + " 3", "records[0] (chunk " + kA.substr(0, 12) + "): header is not terminated");
  ExpectError(kA + "\nxyz", "records[0] (chunk " + kA.substr(0, 12) + "): header must be");
  ExpectError("zz " + kA.substr(2) + " 3\nxyz", "records[0]: chunk id must be 64 lowercase hex");
  ExpectError(kA.substr(0, 63) + " 3\nxyz", "chunk id must be 64 lowercase");
  std::string upper = kA;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  ExpectError(upper + " 1\nx", "chunk id must be 64 lowercase");
  ExpectError(kA + " \nxyz", "missing frame length");
  ExpectError(kA + " -3\nxyz", "frame length must be decimal digits");
  ExpectError(kA + " +3\nxyz", "frame length must be decimal digits");
  ExpectError(kA + " 3 \nxyz", "frame length must be decimal digits");
  ExpectError(kA + " 03\nxyz", "leading zero");
  ExpectError(kA + " 0\n", "frame length must not be 0");
  ExpectError(kA + " 12345678901\nx", "records[0]");
}

TEST(ChunkRecords, RefusesAFrameRunningPastTheEnd) {
  ExpectError(kA + " 4\nxyz", "records[0] (chunk " + kA.substr(0, 12) +
                                  "): length 4 runs past the end of the body (3 bytes left)");
}

TEST(ChunkRecords, NamesTheIndexOfTheBadRecord) {
  std::string body = EncodeChunkRecords({{kA, "one"}, {kB, "two"}});
  ExpectError(body + kB + " 9\nshort", "records[2] (chunk " + kB.substr(0, 12) + ")");
  ExpectError(body + "garbage", "records[2]: header is not terminated");
}

TEST(ChunkRecords, RefusesTrailingBytes) {
  ExpectError(EncodeChunkRecords({{kA, "one"}}) + "\n", "records[1]");
}

TEST(ChunkRecords, NameShortensTheId) {
  EXPECT_EQ(ChunkRecordName(3, kA), "records[3] (chunk " + kA.substr(0, 12) + ")");
  EXPECT_EQ(ChunkRecordName(0, ""), "records[0]");
}

}  // namespace
}  // namespace gpupool::blob
