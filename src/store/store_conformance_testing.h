// Helpers shared by the files of the Store conformance suite
// (store/store_conformance.h): assertions on Status and Result, and InTx,
// which runs one function in its own transaction. For the suite's sources
// only.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <type_traits>
#include <utility>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::conformance {

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

#define CONF_EXPECT_OK(expr)                                             \
  do {                                                                   \
    const auto& conf_v_ = (expr);                                        \
    EXPECT_TRUE(StatusOf(conf_v_).ok()) << StatusOf(conf_v_).ToString(); \
  } while (0)

#define CONF_ASSERT_OK(expr)                                             \
  do {                                                                   \
    const auto& conf_v_ = (expr);                                        \
    ASSERT_TRUE(StatusOf(conf_v_).ok()) << StatusOf(conf_v_).ToString(); \
  } while (0)

#define CONF_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  CONF_ASSERT_OK_AND_ASSIGN_IMPL_(GP_CONCAT_(conf_r_, __LINE__), lhs, expr)
#define CONF_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();     \
  lhs = std::move(tmp).value()

template <typename T>
struct IsResult : std::false_type {};
template <typename T>
struct IsResult<Result<T>> : std::true_type {};

// Runs `fn(tx)` in its own transaction and returns its result: a Result<T>
// for functions returning one (committed when OK), a Status otherwise.
template <typename F>
auto InTx(Store& store, F&& fn) {
  using R = std::invoke_result_t<F&, Tx&>;
  if constexpr (IsResult<R>::value) {
    std::optional<R> out;
    Status st = store.Transact([&](Tx& tx) {
      out.emplace(fn(tx));
      return out->ok() ? Status::Ok() : out->status();
    });
    if (!st.ok()) return R(st);
    return std::move(*out);
  } else {
    return store.Transact([&](Tx& tx) { return fn(tx); });
  }
}

}  // namespace gpupool::conformance
