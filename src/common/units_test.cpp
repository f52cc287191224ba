#include "common/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kTiB = int64_t{1} << 40;

template <typename F>
void ExpectError(F parse, const std::string& text, const std::string& message) {
  auto r = parse(text);
  ASSERT_FALSE(r.ok()) << "accepted \"" << text << "\" as " << *r;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(message)) << text;
}

// ---------------------------------------------------------------------------
// ParseBytes / ParseMebibytes

TEST(ParseBytes, Good) {
  struct Case {
    const char* text;
    int64_t bytes;
  };
  const Case cases[] = {
      {"0", 0},
      {"1024", 1024},
      {"1B", 1},
      {"1b", 1},
      {"24GiB", 24 * kGiB},
      {"24Gi", 24 * kGiB},
      {"24 GiB", 24 * kGiB},
      {" 24GiB ", 24 * kGiB},
      {"512MiB", 512 * kMiB},
      {"1KiB", kKiB},
      {"1Ki", kKiB},
      {"2TiB", 2 * kTiB},
      {"1.5GB", 1'500'000'000},
      {"1.5GiB", 3 * kGiB / 2},
      {"1K", 1000},
      {"1k", 1000},
      {"1KB", 1000},
      {"1M", 1'000'000},
      {"1MB", 1'000'000},
      {"3G", 3'000'000'000},
      {"1T", 1'000'000'000'000},
      {"1.5", 2},       // rounded up to whole bytes
      {"0.001KiB", 2},  // 1.024 bytes
      {".5KiB", 512},
      {"1.KiB", 1024},
      {"1048576TiB", int64_t{1} << 60},  // the largest accepted size
  };
  for (const Case& c : cases) {
    auto r = ParseBytes(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.bytes) << c.text;
  }
}

TEST(ParseBytes, Bad) {
  ExpectError(ParseBytes, "", "invalid size \"\": expected a number");
  ExpectError(ParseBytes, "GiB", "invalid size \"GiB\": expected a number");
  ExpectError(ParseBytes, ".", "expected a number");
  ExpectError(ParseBytes, "-1", "invalid size \"-1\": must not be negative");
  ExpectError(ParseBytes, "-1GiB", "must not be negative");
  ExpectError(ParseBytes, "+1GiB", "expected a number");
  ExpectError(ParseBytes, "1.2345GiB", "invalid size \"1.2345GiB\": at most three decimal places");
  ExpectError(ParseBytes, "24XB", "invalid size \"24XB\": unknown unit \"XB\"");
  ExpectError(ParseBytes, "1e3", "unknown unit \"e3\"");
  ExpectError(ParseBytes, "1PiB", "unknown unit \"PiB\"");
  ExpectError(ParseBytes, "1 2GiB", "unknown unit \"2GiB\"");
  ExpectError(ParseBytes, "1GiBs", "unknown unit");
  ExpectError(ParseBytes, "1mib", "unknown unit");  // milli-bytes make no sense
  ExpectError(ParseBytes, "99999999999999999999", "too large");
  ExpectError(ParseBytes, "1048577TiB", "invalid size \"1048577TiB\": too large");
  ExpectError(ParseBytes, "999999999999999T", "too large");
}

TEST(ParseMebibytes, RoundsUp) {
  EXPECT_EQ(ParseMebibytes("0").value(), 0);
  EXPECT_EQ(ParseMebibytes("1").value(), 1);  // one byte still needs a MiB
  EXPECT_EQ(ParseMebibytes("1MiB").value(), 1);
  EXPECT_EQ(ParseMebibytes("1048577").value(), 2);
  EXPECT_EQ(ParseMebibytes("1.5GiB").value(), 1536);
  EXPECT_EQ(ParseMebibytes("80GiB").value(), 80 * 1024);
  EXPECT_EQ(ParseMebibytes("1GB").value(), 954);  // 953.67 MiB
  EXPECT_EQ(ParseMebibytes("64TiB").value(), int64_t{64} << 20);
  EXPECT_EQ(ParseMebibytes("1048576TiB").value(), int64_t{1} << 40);
  ExpectError(ParseMebibytes, "24XB", "unknown unit \"XB\"");
  ExpectError(ParseMebibytes, "-1MiB", "must not be negative");
}

// ---------------------------------------------------------------------------
// ParseMilli

TEST(ParseMilli, Good) {
  EXPECT_EQ(ParseMilli("0").value(), 0);
  EXPECT_EQ(ParseMilli("0.5").value(), 500);
  EXPECT_EQ(ParseMilli(".5").value(), 500);
  EXPECT_EQ(ParseMilli("2").value(), 2000);
  EXPECT_EQ(ParseMilli("2.").value(), 2000);
  EXPECT_EQ(ParseMilli("0.001").value(), 1);
  EXPECT_EQ(ParseMilli("1.234").value(), 1234);
  EXPECT_EQ(ParseMilli("1.50").value(), 1500);
  EXPECT_EQ(ParseMilli("250m").value(), 250);
  EXPECT_EQ(ParseMilli("0m").value(), 0);
  EXPECT_EQ(ParseMilli(" 3 ").value(), 3000);
  EXPECT_EQ(ParseMilli("1024").value(), 1'024'000);
}

TEST(ParseMilli, Bad) {
  ExpectError(ParseMilli, "", "invalid amount \"\": expected a number");
  ExpectError(ParseMilli, "two", "invalid amount \"two\": expected a number");
  ExpectError(ParseMilli, "-1", "invalid amount \"-1\": must not be negative");
  ExpectError(ParseMilli, "-0.5", "must not be negative");
  ExpectError(ParseMilli, "1.2345", "invalid amount \"1.2345\": at most three decimal places");
  ExpectError(ParseMilli, "0.5m", "invalid amount \"0.5m\": expected a number such as 0.5");
  ExpectError(ParseMilli, "2x", "invalid amount \"2x\"");
  ExpectError(ParseMilli, "2 cores", "invalid amount \"2 cores\"");
  ExpectError(ParseMilli, "1e3", "invalid amount \"1e3\"");
  ExpectError(ParseMilli, "1000000000000000", "too large");
}

// ---------------------------------------------------------------------------
// ParseDurationMs

TEST(ParseDurationMs, Good) {
  struct Case {
    const char* text;
    int64_t ms;
  };
  const Case cases[] = {
      {"0", 0},
      {"0s", 0},
      {"45", 45'000},
      {"1.5", 1'500},
      {"90s", 90'000},
      {"1.5s", 1'500},
      {"500ms", 500},
      {"2m", 120'000},
      {"2h", 7'200'000},
      {"1.5h", 5'400'000},
      {"1h30m", 5'400'000},
      {"2d", 172'800'000},
      {"1d2h3m4s5ms", 93'784'005},
      {"1m1.5s", 61'500},
      {"365d", int64_t{365} * 86'400'000},
  };
  for (const Case& c : cases) {
    auto r = ParseDurationMs(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.ms) << c.text;
  }
}

TEST(ParseDurationMs, Bad) {
  ExpectError(ParseDurationMs, "", "invalid duration \"\": empty");
  ExpectError(ParseDurationMs, "s", "invalid duration \"s\": expected a number");
  ExpectError(ParseDurationMs, "h1", "expected a number");
  ExpectError(ParseDurationMs, " 5s", "expected a number");
  ExpectError(ParseDurationMs, "2 hours", "invalid duration \"2 hours\": every part needs a unit");
  ExpectError(ParseDurationMs, "1h30", "invalid duration \"1h30\": every part needs a unit");
  ExpectError(ParseDurationMs, "2y", "invalid duration \"2y\": unknown unit \"y\"");
  ExpectError(ParseDurationMs, "2hours", "unknown unit \"hours\"");
  ExpectError(ParseDurationMs, "5S", "unknown unit \"S\"");
  ExpectError(ParseDurationMs, "-5s", "invalid duration \"-5s\": must not be negative");
  ExpectError(ParseDurationMs, "1h-5m", "invalid duration \"1h-5m\": must not be negative");
  ExpectError(ParseDurationMs, "1.0001s",
              "invalid duration \"1.0001s\": at most three decimal places");
  ExpectError(ParseDurationMs, "1-2s", "invalid duration \"1-2s\": expected a number");
  ExpectError(ParseDurationMs, "1.2.3s", "invalid duration \"1.2.3s\": expected a number");
  ExpectError(ParseDurationMs, "99999999999d", "invalid duration \"99999999999d\": too large");
  ExpectError(ParseDurationMs, "9999999999999999999s", "too large");
}

// ---------------------------------------------------------------------------
// Formatting

TEST(FormatBytes, Examples) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1), "1 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(1100), "1.1 KiB");
  EXPECT_EQ(FormatBytes(25'769'803'776), "24 GiB");
  EXPECT_EQ(FormatBytes(kTiB), "1 TiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 50), "1 PiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 60), "1024 PiB");
  // Never "1024.0 KiB": a value that rounds up to the next unit moves there.
  EXPECT_EQ(FormatBytes(kMiB - 1), "1.0 MiB");
  EXPECT_EQ(FormatBytes(kGiB - kKiB), "1.0 GiB");
}

TEST(FormatMebibytes, Examples) {
  EXPECT_EQ(FormatMebibytes(1), "1 MiB");
  EXPECT_EQ(FormatMebibytes(512), "512 MiB");
  EXPECT_EQ(FormatMebibytes(1024), "1 GiB");
  EXPECT_EQ(FormatMebibytes(1536), "1.5 GiB");
  EXPECT_EQ(FormatMebibytes(81'920), "80 GiB");
  EXPECT_EQ(FormatMebibytes(15'360), "15 GiB");
  EXPECT_EQ(FormatMebibytes(int64_t{64} << 20), "64 TiB");
}

TEST(FormatMebibytes, ParsesBackWhenExact) {
  for (int64_t mib : {int64_t{1}, int64_t{512}, int64_t{1024}, int64_t{1536}, int64_t{81'920},
                      int64_t{1} << 20, int64_t{64} << 20}) {
    auto back = ParseMebibytes(FormatMebibytes(mib));
    ASSERT_TRUE(back.ok()) << FormatMebibytes(mib);
    EXPECT_EQ(*back, mib);
  }
}

TEST(FormatDurationMs, Examples) {
  EXPECT_EQ(FormatDurationMs(0), "0s");
  EXPECT_EQ(FormatDurationMs(1), "1ms");
  EXPECT_EQ(FormatDurationMs(999), "999ms");
  EXPECT_EQ(FormatDurationMs(1000), "1s");
  EXPECT_EQ(FormatDurationMs(1500), "1.5s");
  EXPECT_EQ(FormatDurationMs(59'999), "59.9s");
  EXPECT_EQ(FormatDurationMs(60'000), "1m");
  EXPECT_EQ(FormatDurationMs(90'000), "1m30s");
  EXPECT_EQ(FormatDurationMs(3'600'000), "1h");
  EXPECT_EQ(FormatDurationMs(3'661'000), "1h1m1s");
  EXPECT_EQ(FormatDurationMs(5'400'000), "1h30m");
  EXPECT_EQ(FormatDurationMs(86'400'000), "1d");
  EXPECT_EQ(FormatDurationMs(90'061'000), "1d1h1m");  // seconds are dropped past a day
  EXPECT_EQ(FormatDurationMs(-1500), "-1.5s");
}

TEST(FormatDurationMs, ParsesBack) {
  for (int64_t ms :
       {int64_t{0}, int64_t{1}, int64_t{500}, int64_t{1000}, int64_t{1500}, int64_t{90'000},
        int64_t{3'661'000}, int64_t{5'400'000}, int64_t{86'400'000}, int64_t{365} * 86'400'000}) {
    auto back = ParseDurationMs(FormatDurationMs(ms));
    ASSERT_TRUE(back.ok()) << FormatDurationMs(ms) << ": " << back.status().ToString();
    EXPECT_EQ(*back, ms) << FormatDurationMs(ms);
  }
}

TEST(FormatMilli, Examples) {
  EXPECT_EQ(FormatMilli(0), "0");
  EXPECT_EQ(FormatMilli(1), "0.001");
  EXPECT_EQ(FormatMilli(10), "0.01");
  EXPECT_EQ(FormatMilli(500), "0.5");
  EXPECT_EQ(FormatMilli(1250), "1.25");
  EXPECT_EQ(FormatMilli(2000), "2");
  EXPECT_EQ(FormatMilli(1'024'000), "1024");
  EXPECT_EQ(FormatMilli(-500), "-0.5");
  EXPECT_EQ(FormatMilli(-2500), "-2.5");
}

TEST(FormatMilli, ParsesBack) {
  for (int64_t milli = 0; milli <= 3000; ++milli) {
    auto back = ParseMilli(FormatMilli(milli));
    ASSERT_TRUE(back.ok()) << FormatMilli(milli);
    ASSERT_EQ(*back, milli) << FormatMilli(milli);
  }
}

}  // namespace
}  // namespace gpupool
