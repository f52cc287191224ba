#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace gpupool {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s, Status::Ok());
}

TEST(Status, Factories) {
  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m"), StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
      {Status::NotFound("m"), StatusCode::kNotFound, "NOT_FOUND"},
      {Status::AlreadyExists("m"), StatusCode::kAlreadyExists, "ALREADY_EXISTS"},
      {Status::FailedPrecondition("m"), StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
      {Status::Unauthenticated("m"), StatusCode::kUnauthenticated, "UNAUTHENTICATED"},
      {Status::PermissionDenied("m"), StatusCode::kPermissionDenied, "PERMISSION_DENIED"},
      {Status::ResourceExhausted("m"), StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
      {Status::Unavailable("m"), StatusCode::kUnavailable, "UNAVAILABLE"},
      {Status::DeadlineExceeded("m"), StatusCode::kDeadlineExceeded, "DEADLINE_EXCEEDED"},
      {Status::Internal("m"), StatusCode::kInternal, "INTERNAL"},
      {Status::DataLoss("m"), StatusCode::kDataLoss, "DATA_LOSS"},
      {Status::Aborted("m"), StatusCode::kAborted, "ABORTED"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.name;
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(StatusCodeName(c.code), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(999)), "UNKNOWN");
}

TEST(Status, ToString) {
  EXPECT_EQ(Status::InvalidArgument("resources.gpus: must be at least 0").ToString(),
            "INVALID_ARGUMENT: resources.gpus: must be at least 0");
  EXPECT_EQ(Status::NotFound("").ToString(), "NOT_FOUND: ");
}

TEST(Status, Equality) {
  EXPECT_EQ(Status::NotFound("a"), Status::NotFound("a"));
  EXPECT_NE(Status::NotFound("a"), Status::NotFound("b"));
  EXPECT_NE(Status::NotFound("a"), Status::Internal("a"));
  EXPECT_NE(Status::NotFound("a"), Status::Ok());
}

TEST(Status, WithContext) {
  Status s = Status::InvalidArgument("must be a string");
  Status c = s.WithContext("name");
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.message(), "name: must be a string");
  EXPECT_EQ(s.message(), "must be a string");  // the original is unchanged
  EXPECT_EQ(c.WithContext("spec").message(), "spec: name: must be a string");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
  EXPECT_EQ(Status::Ok().WithContext("ignored").message(), "");
}

TEST(Result, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  *r = 7;
  EXPECT_EQ(r.value(), 7);
  EXPECT_EQ(r.value_or(1), 7);
}

TEST(Result, HoldsError) {
  Result<int> r = Status::NotFound("job 42");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "job 42");
  EXPECT_EQ(r.value_or(1), 1);
}

TEST(Result, ArrowAndMoveOnly) {
  Result<std::string> s = std::string("hello");
  EXPECT_EQ(s->size(), 5u);
  const Result<std::string>& cs = s;
  EXPECT_EQ(cs->size(), 5u);
  EXPECT_EQ(*cs, "hello");

  Result<std::unique_ptr<int>> p = std::make_unique<int>(5);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 5);

  Result<std::vector<int>> v = std::vector<int>{1, 2, 3};
  std::vector<int> moved = *std::move(v);
  EXPECT_EQ(moved.size(), 3u);
}

#ifndef NDEBUG
TEST(ResultDeathTest, OkStatusIsAProgrammerError) {
  EXPECT_DEATH(
      {
        Result<int> r = Status::Ok();
        (void)r;
      },
      "OK status");
}
#endif

Status FailIf(bool fail) { return fail ? Status::Unavailable("down") : Status::Ok(); }

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

int g_after_return_calls = 0;

Status UseReturnIfError(bool fail) {
  GP_RETURN_IF_ERROR(FailIf(fail));
  ++g_after_return_calls;
  return Status::Ok();
}

TEST(Macros, ReturnIfError) {
  g_after_return_calls = 0;
  EXPECT_TRUE(UseReturnIfError(false).ok());
  EXPECT_EQ(g_after_return_calls, 1);
  Status s = UseReturnIfError(true);
  EXPECT_EQ(s, Status::Unavailable("down"));
  EXPECT_EQ(g_after_return_calls, 1);
}

TEST(Macros, ReturnIfErrorEvaluatesOnce) {
  int calls = 0;
  auto f = [&]() -> Status {
    GP_RETURN_IF_ERROR((++calls, Status::Ok()));
    return Status::Ok();
  };
  EXPECT_TRUE(f().ok());
  EXPECT_EQ(calls, 1);
}

Result<int> Quarter(int x) {
  GP_ASSIGN_OR_RETURN(int h, Half(x));
  GP_ASSIGN_OR_RETURN(h, Half(h));  // assigns to an existing variable
  return h;
}

Status QuarterStatus(int x, int* out) {
  GP_ASSIGN_OR_RETURN(*out, Quarter(x));
  return Status::Ok();
}

TEST(Macros, AssignOrReturn) {
  EXPECT_EQ(Quarter(8).value(), 2);
  Result<int> odd = Quarter(6);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().message(), "3 is odd");
  Result<int> odd2 = Quarter(5);
  EXPECT_EQ(odd2.status().message(), "5 is odd");

  int out = -1;
  EXPECT_TRUE(QuarterStatus(12, &out).ok());
  EXPECT_EQ(out, 3);
  out = -1;
  EXPECT_EQ(QuarterStatus(2, &out), Status::InvalidArgument("1 is odd"));
  EXPECT_EQ(out, -1);
}

Result<std::unique_ptr<int>> MakePtr(bool fail) {
  if (fail) return Status::Internal("no");
  return std::make_unique<int>(9);
}

Result<int> Deref(bool fail) {
  GP_ASSIGN_OR_RETURN(std::unique_ptr<int> p, MakePtr(fail));
  return *p;
}

TEST(Macros, AssignOrReturnMovesValues) {
  EXPECT_EQ(Deref(false).value(), 9);
  EXPECT_EQ(Deref(true).status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace gpupool
