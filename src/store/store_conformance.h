// The Store conformance suite: the behaviour every Store backend must show.
//
// The tests use only the Store/Tx interface, so one suite checks every
// backend: SQLite (store_test), memory (memory_store_test), PostgreSQL
// later. They are split by the Tx facet they exercise
// (store_conformance_{jobs,nodes,identity,logs,storage}.cpp; transactions
// across facets in store_conformance.cpp). A backend's test file
// instantiates it once, at namespace scope inside namespace gpupool:
//
//   StoreBackend SqliteBackend() {
//     return {"sqlite", [](const std::string& dir) -> Result<std::unique_ptr<Store>> {
//               ... open dir + "/state.db" ... }};
//   }
//   GPUPOOL_STORE_CONFORMANCE_SUITE(Sqlite, SqliteBackend());
//
// Factory contract: `dir` is an existing, empty directory unique to one test
// and removed after it. The first call for a `dir` must return an empty store;
// a later call for the same `dir` (after the previous store was destroyed)
// must return a store holding everything committed before ("reopen"). A
// backend without files (a database server) derives a database or schema name
// from `dir`; one in memory keeps its state per `dir` in the factory (see
// memory_store_test.cpp).
//
// Beyond store.h, the suite pins down: ids start at 1 in an empty store and
// InsertJob ignores the caller's job.id; an attempt or log line naming a
// missing job is NotFound; nested Transact is FailedPrecondition; an
// exception thrown by the callback rolls back and propagates.
//
// Threading: gtest's, single-threaded.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool {

using StoreFactory = std::function<Result<std::unique_ptr<Store>>(const std::string& dir)>;

struct StoreBackend {
  std::string name;  // the test name suffix; letters, digits and '_' only
  StoreFactory open;
};

// Names instantiations after StoreBackend::name. Defined in
// store_conformance.cpp: referencing it also makes the linker keep the
// suite's tests when they come from a static library.
std::string StoreBackendName(const ::testing::TestParamInfo<StoreBackend>& info);

class StoreConformanceTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override;     // makes the directory and opens the store
  void TearDown() override;  // closes the store and removes the directory

  Store& store() { return *store_; }
  const std::string& dir() const { return dir_; }
  // Destroys the store and opens a new one on the same directory.
  void Reopen();

 private:
  std::string dir_;
  std::unique_ptr<Store> store_;
};

}  // namespace gpupool

// Instantiates the suite for one backend; use at namespace scope inside
// namespace gpupool.
#define GPUPOOL_STORE_CONFORMANCE_SUITE(prefix, ...)                                     \
  INSTANTIATE_TEST_SUITE_P(prefix, StoreConformanceTest, ::testing::Values(__VA_ARGS__), \
                           ::gpupool::StoreBackendName)
