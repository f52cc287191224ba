// Idempotent submission (POST /v1/jobs with Idempotency-Key) through the
// real HTTP server and store: a retried submission makes one job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/api_testing.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

class SubmitKeyTest : public ApiTestServer {
 protected:
  net::HttpResponse Submit(const std::string& token, const std::string& spec,
                           const std::string& key) {
    return Call("POST", "/v1/jobs", token, spec, "", {{"idempotency-key", key}});
  }
};

TEST_F(SubmitKeyTest, ARetriedSubmissionAnswersTheJobItMadeAndMakesNoOther) {
  const std::string spec = R"({"run": "train", "name": "a"})";
  auto first = Submit(alice_, spec, "7f3c-retry:1");
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(first.headers.count("idempotent-replayed"), 0u);
  const int64_t id = Json(first)["id"];
  auto again = Submit(alice_, spec, "7f3c-retry:1");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Json(again)["id"], id);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(Json(Call("GET", "/v1/jobs", alice_))["jobs"].size(), 1u);

  // The key with another spec is refused, naming the job; nothing is made.
  auto other = Submit(alice_, R"({"run": "eval", "name": "a"})", "7f3c-retry:1");
  EXPECT_EQ(other.status, 409) << other.body;
  EXPECT_THAT(ErrorMessage(other), HasSubstr("was already used for job " + std::to_string(id)));
  // Keys are per user: bob's same key makes bob's own job.
  auto bobs = Submit(bob_, spec, "7f3c-retry:1");
  EXPECT_EQ(bobs.status, 201) << bobs.body;
  EXPECT_NE(Json(bobs)["id"], id);
  EXPECT_EQ(Json(Call("GET", "/v1/jobs", alice_))["jobs"].size(), 1u);
}

TEST_F(SubmitKeyTest, AMalformedKeyIsRefusedAndStoresNothing) {
  for (const std::string& key : {std::string(), std::string(201, 'k'), std::string("a b"),
                                 std::string("k/1"), std::string("ключ")}) {
    auto r = Submit(alice_, R"({"run": "train"})", key);
    EXPECT_EQ(r.status, 400) << key;
    EXPECT_THAT(ErrorMessage(r), HasSubstr("header Idempotency-Key")) << key;
  }
  EXPECT_EQ(Json(Call("GET", "/v1/jobs", alice_))["jobs"].size(), 0u);
}

}  // namespace
}  // namespace gpupool::server
