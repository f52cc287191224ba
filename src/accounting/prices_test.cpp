// The price book: versions apply from their time on, classes are matched
// as gpu_models matches them, and costs are exact however time is cut.
#include "accounting/prices.h"

#include <random>

#include <gtest/gtest.h>

#include "accounting/accounting_testing.h"

namespace gpupool::accounting {
namespace {

using namespace testing;

PriceVersion Gpu(std::string cls, Micros per_hour, int64_t from, int64_t id = 0) {
  return {id, PricedResource::kGpu, std::move(cls), per_hour, from, "admin"};
}
PriceVersion Other(PricedResource r, Micros per_hour, int64_t from) {
  return {0, r, "", per_hour, from, "admin"};
}
GpuInfo Named(std::string name, std::string mig = "") {
  GpuInfo g;
  g.name = std::move(name);
  g.mig_profile = std::move(mig);
  return g;
}

TEST(PricesTest, ChecksVersions) {
  EXPECT_TRUE(CheckPriceVersion(Gpu("A100", 2 * kCredit, 0)).ok());
  EXPECT_TRUE(CheckPriceVersion(Gpu("3g.40gb", 1, 0)).ok());
  EXPECT_TRUE(CheckPriceVersion(Other(PricedResource::kCpu, 0, 0)).ok());
  auto bad = [](const PriceVersion& v, const char* field) {
    Status st = CheckPriceVersion(v);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message().rfind(field, 0), 0u) << st.message();
  };
  bad(Gpu("", kCredit, 0), "class:");
  bad(Gpu("A 100", kCredit, 0), "class:");
  bad(Gpu(std::string(65, 'a'), kCredit, 0), "class:");
  bad(Gpu("A100", -1, 0), "price:");
  bad(Gpu("A100", kMaxPricePerUnit + 1, 0), "price:");
  PriceVersion cpu_with_class = Other(PricedResource::kCpu, 1, 0);
  cpu_with_class.gpu_class = "A100";
  bad(cpu_with_class, "class:");
}

TEST(PricesTest, TheMostSpecificClassNamesAGpu) {
  PriceBook book({Gpu("A100", 2 * kCredit, 0), Gpu("T4", kCredit / 2, 0),
                  Gpu("A100-SXM4-80GB", 3 * kCredit, 0), Gpu("3g.40gb", kCredit, 0)});
  EXPECT_EQ(book.ClassOf(Named("NVIDIA A100-SXM4-80GB")), "A100-SXM4-80GB");
  EXPECT_EQ(book.ClassOf(Named("NVIDIA A100-PCIE-40GB")), "A100");
  EXPECT_EQ(book.ClassOf(Named("Tesla T4")), "T4");
  EXPECT_EQ(book.ClassOf(Named("NVIDIA A10")), "");  // "A10" is not an A100, no default
  EXPECT_EQ(book.ClassOf(Named("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "3g.40gb")), "A100-SXM4-80GB");
  EXPECT_EQ(book.ClassOf(Named("MIG 3g.40gb", "3g.40gb")), "3g.40gb");
  PriceBook with_default({Gpu("A100", 2 * kCredit, 0), Gpu("default", kCredit, 0)});
  EXPECT_EQ(with_default.ClassOf(Named("NVIDIA A10")), "default");
  EXPECT_EQ(with_default.ClassOf(Named("NVIDIA A100-PCIE-40GB")), "A100");
}

TEST(PricesTest, FairShareWeighsAGpuByItsPriceOverTheCheapest) {
  EXPECT_EQ(PriceBook().UsageWeightMilli(Named("NVIDIA A100"), 0), 1000);  // no prices
  PriceBook book({Gpu("A100", 2 * kCredit, 0), Gpu("T4", kCredit / 2, 0), Gpu("H100", 0, 0),
                  Gpu("T4", kCredit, 100), Other(PricedResource::kCpu, kCredit / 100, 0)});
  EXPECT_EQ(book.UsageWeightMilli(Named("NVIDIA A100-SXM4-80GB"), 50), 4000);
  EXPECT_EQ(book.UsageWeightMilli(Named("Tesla T4"), 50), 1000);
  // Free and unpriced GPUs count as the cheapest; a CPU price is no GPU's.
  EXPECT_EQ(book.UsageWeightMilli(Named("NVIDIA H100 80GB HBM3"), 50), 1000);
  EXPECT_EQ(book.UsageWeightMilli(Named("NVIDIA L4"), 50), 1000);
  // From a price change on, the weights are the new prices'.
  EXPECT_EQ(book.UsageWeightMilli(Named("NVIDIA A100-SXM4-80GB"), 100), 2000);
  EXPECT_EQ(book.UsageWeightMilli(Named("Tesla T4"), 100), 1000);
  PriceBook thirds({Gpu("A100", kCredit, 0), Gpu("T4", 3 * kCredit, 0)});
  EXPECT_EQ(thirds.UsageWeightMilli(Named("NVIDIA A100"), 0), 1000);
  EXPECT_EQ(thirds.UsageWeightMilli(Named("Tesla T4"), 0), 3000);
}

TEST(PricesTest, AChangeAppliesFromItsTimeOnNeverBefore) {
  PriceBook book({Gpu("A100", 2 * kCredit, 0, 1), Gpu("A100", 4 * kCredit, 10 * kHour, 2)});
  MeteredUse one{"A100", 1000, 0, 0};
  EXPECT_EQ(book.PriceAt(PricedResource::kGpu, "A100", 10 * kHour - 1), 2 * kCredit);
  EXPECT_EQ(book.PriceAt(PricedResource::kGpu, "A100", 10 * kHour), 4 * kCredit);
  // Held from 9h to 11h: one hour at 2, one at 4.
  EXPECT_EQ(book.CostSince(one, 9 * kHour, 11 * kHour), 6 * kCredit);
  EXPECT_EQ(book.Charge(one, 9 * kHour, 9 * kHour, 10 * kHour), 2 * kCredit);
  EXPECT_EQ(book.PerHour(one, 9 * kHour), 2 * kCredit);
  EXPECT_EQ(book.PerHour(one, 10 * kHour), 4 * kCredit);
  ASSERT_EQ(book.InForce(10 * kHour).size(), 1u);
  EXPECT_EQ(book.InForce(10 * kHour)[0].per_unit, 4 * kCredit);
  EXPECT_TRUE(book.InForce(-1).empty());
}

TEST(PricesTest, SharesPayTheirFractionAndCpuAndMemoryAddUp) {
  PriceBook book({Gpu("A100", 2 * kCredit, 0), Other(PricedResource::kCpu, kCredit / 10, 0),
                  Other(PricedResource::kMemory, kCredit / 100, 0)});
  // A quarter of an A100, 4 CPUs, 16 GiB for two hours.
  MeteredUse use{"A100", 250, 4000, 16 * 1024};
  EXPECT_EQ(book.CostSince(use, 0, 2 * kHour),
            2 * (kCredit / 2 + 4 * kCredit / 10 + 16 * kCredit / 100));
  // A GPU of no priced class pays for its CPUs and memory only.
  EXPECT_EQ(book.CostSince({"", 1000, 1000, 0}, 0, kHour), kCredit / 10);
}

TEST(PricesTest, ChargesOfAnyCutAddUpToTheWholeCost) {
  std::mt19937_64 rng(7);
  PriceBook book({Gpu("T4", 333'333, 0, 1), Gpu("T4", 777'777, 5 * kHour + 17, 2),
                  Other(PricedResource::kCpu, 123'457, 3 * kHour), Gpu("T4", 1, 9 * kHour, 3)});
  for (int round = 0; round < 200; ++round) {
    MeteredUse use{"T4", static_cast<int64_t>(rng() % 4000 + 1), static_cast<int64_t>(rng() % 9000),
                   0};
    int64_t start = static_cast<int64_t>(rng() % (12 * kHour));
    int64_t end = start + static_cast<int64_t>(rng() % (6 * kHour));
    Micros sum = 0;
    for (int64_t t = start; t < end;) {
      int64_t next = std::min(end, t + 1 + static_cast<int64_t>(rng() % (kHour / 3)));
      Micros c = book.Charge(use, start, t, next);
      ASSERT_GE(c, 0);
      sum += c;
      t = next;
    }
    EXPECT_EQ(sum, book.CostSince(use, start, end)) << "round " << round;
  }
}

}  // namespace
}  // namespace gpupool::accounting
