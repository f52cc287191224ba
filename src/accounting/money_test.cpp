// Credits as exact micro-credits: parsing refuses what is not an amount,
// formatting gives what people read.
#include "common/money.h"

#include <gtest/gtest.h>

namespace gpupool::accounting {
namespace {

TEST(MoneyTest, ParsesAmountsExactly) {
  EXPECT_EQ(*ParseCredits("2.50", "price"), 2'500'000);
  EXPECT_EQ(*ParseCredits("1000", "price"), 1'000'000'000);
  EXPECT_EQ(*ParseCredits("0.000001", "price"), 1);
  EXPECT_EQ(*ParseCredits("+3", "price"), 3'000'000);
  EXPECT_EQ(*ParseCredits(".5", "price"), 500'000);
  EXPECT_EQ(*ParseCredits("007.25", "price"), 7'250'000);
  EXPECT_EQ(*ParseCredits("-4.5", "amount", kMaxAmount, true), -4'500'000);
}

TEST(MoneyTest, RefusesWhatIsNotAnAmountNamingTheField) {
  for (const char* bad : {"", "abc", "2.5x", "1e3", "1.", "1,5", " 2", "--1", "0x10", "."}) {
    auto r = ParseCredits(bad, "price");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("price: ", 0), 0u) << r.status().message();
  }
  EXPECT_NE(ParseCredits("0.0000001", "price").status().message().find("six decimals"),
            std::string::npos);
  EXPECT_NE(ParseCredits("-1", "price").status().message().find("negative"), std::string::npos);
  EXPECT_FALSE(ParseCredits("1000000001", "amount").ok());  // past a billion credits
  EXPECT_FALSE(ParseCredits("99999999999999999999999", "amount").ok());
  EXPECT_FALSE(ParseCredits("5", "price", 4 * kMicrosPerCredit).ok());
  EXPECT_TRUE(ParseCredits("-0", "price").ok());  // zero is not negative
}

TEST(MoneyTest, FormatsWithTwoDecimalsAtLeast) {
  EXPECT_EQ(FormatCredits(2'500'000), "2.50");
  EXPECT_EQ(FormatCredits(0), "0.00");
  EXPECT_EQ(FormatCredits(1), "0.000001");
  EXPECT_EQ(FormatCredits(-3'125'000), "-3.125");
  EXPECT_EQ(FormatCredits(1'000'000'000), "1000.00");
  for (Micros m : {Micros{0}, Micros{1}, Micros{123'456'789}, Micros{-42}, kMaxAmount}) {
    EXPECT_EQ(*ParseCredits(FormatCredits(m), "x", kMaxAmount, true), m);
  }
}

}  // namespace
}  // namespace gpupool::accounting
