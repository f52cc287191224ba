#include "store/memory_store.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "store/store_conformance.h"

namespace gpupool {

// The suite's reopen: a store over the state an earlier store on the same
// directory left (kept here, by directory, for the test's duration).
StoreBackend MemoryBackend() {
  return {"memory", [](const std::string& dir) -> Result<std::unique_ptr<Store>> {
            static auto* states = new std::map<std::string, std::shared_ptr<MemoryState>>();
            auto& state = (*states)[dir];
            auto store = MemoryStore::Over(state);
            state = store->state();
            return std::unique_ptr<Store>(std::move(store));
          }};
}
GPUPOOL_STORE_CONFORMANCE_SUITE(Memory, MemoryBackend());

namespace {

TEST(MemoryStoreTest, ConformanceSuiteIsLinked) {
  const auto* unit = ::testing::UnitTest::GetInstance();
  int conformance = 0;
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    if (std::string(unit->GetTestSuite(i)->name()) == "Memory/StoreConformanceTest") {
      conformance = unit->GetTestSuite(i)->total_test_count();
    }
  }
  EXPECT_GE(conformance, 15);
}

}  // namespace
}  // namespace gpupool
