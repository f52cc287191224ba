// The authorization matrix: every endpoint of the REST API, called by every
// kind of principal, against objects they own, share through a lab, or not.
// The expected table below is written out by hand, independently of
// server/authz.cpp's kRules: a change to either that the other does not
// share fails here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/api_testing.h"

namespace gpupool::server {
namespace {

using nlohmann::json;

// Who calls, in the order the columns of kMatrix list them. Destructive
// cells come last in each row (admin last of all).
enum Caller { kNone, kJoin, kReadOnly, kAgent, kBob, kCarol, kAlice, kPat, kAdmin, kCallers };
constexpr const char* kCallerNames[] = {"no token", "join token", "alice's jobs:read token",
                                        "agent a",  "bob",        "carol",
                                        "alice",    "pat",        "admin"};

// A: allowed (any answer but 401, 403 and 404); U: 401; F: 403; N: 404
// (someone else's object, hidden).
struct Row {
  const char* method;
  const char* path;
  const char* body;
  const char* expect;  // one letter per Caller, in order
};

// Objects: job 1 is alice's, in the lab "vision" whose members (alice,
// carol) share jobs; job 2 is bob's. Node "a" was enrolled with the join
// token, node "p1" by the provider pat.
constexpr Row kMatrix[] = {
    //                                                       none join ro agent bob carol alice pat
    //                                                       admin
    {"GET", "/v1/jobs", "", "UFAFAAAAA"},
    {"POST", "/v1/jobs", R"({"run":"true","group":"vision"})", "UFFFFAAFA"},
    {"POST", "/v1/jobs", R"({"run":"true"})", "UFFFAAAAA"},
    {"GET", "/v1/jobs/1", "", "UNANNAANA"},
    {"GET", "/v1/jobs/2", "", "UNNNANNNA"},
    {"GET", "/v1/jobs/1/logs", "", "UNANNAANA"},
    {"GET", "/v1/jobs/1/checkpoints", "", "UNANNAANA"},
    {"POST", "/v1/jobs/1/cancel", "", "UNFNNAANA"},
    {"POST", "/v1/jobs/2/cancel", "", "UNNNANNNA"},
    {"POST", "/v1/jobs/1/checkpoints", R"({"attempt":"1.1","manifest":"MANIFEST"})", "UFFAFFFFA"},
    {"GET", "/v1/queue", "", "UFAFAAAAA"},
    {"GET", "/v1/groups", "", "UFFFAAAAA"},
    {"GET", "/v1/nodes", "", "UFFFAAAAA"},
    {"GET", "/v1/nodes/a/events", "", "UFFFAAAAA"},
    {"GET", "/v1/events", "", "UFFFAAAAA"},
    {"POST", "/v1/blobs/missing", R"({"chunks":[]})", "UFFAAAAAA"},
    {"POST", "/v1/blobs/chunks/fetch", R"({"chunks":[]})", "UFAAAAAAA"},
    {"POST", "/v1/admin/gc", "", "UFFFFFFFA"},
    {"DELETE", "/v1/jobs/1/checkpoints", "", "UNFNNAANA"},
    {"DELETE", "/v1/jobs/2/checkpoints/1", "", "UNNNANNNA"},
    {"GET", "/v1/quotas", "", "UFAFAAAAA"},
    {"GET", "/v1/quotas/users/alice", "", "UFAFFFAFA"},
    {"GET", "/v1/quotas/groups/vision", "", "UFAFFAAFA"},
    {"PUT", "/v1/quotas/users/bob", R"({"bytes":1048576})", "UFFFFFFFA"},
    {"DELETE", "/v1/quotas/groups/vision", "", "UFFFFFFFA"},
    {"POST", "/v1/admin/backups", "", "UFFFFFFFA"},
    {"GET", "/v1/admin/servers", "", "UFFFFFFFA"},
    {"GET", "/v1/selftest/bytes?n=16", "", "UAAAAAAAA"},
    // Money: prices are the pool's; accounts, ledgers, usage and statements
    // the caller's own and her labs'; prices, grants and budgets admins'.
    {"GET", "/v1/prices", "", "UFFFAAAAA"},
    {"POST", "/v1/prices/quote", R"({"run":"true"})", "UFFFAAAAA"},
    {"POST", "/v1/prices", R"({"class":"A100","price":"1"})", "UFFFFFFFA"},
    {"GET", "/v1/accounts", "", "UFAFAAAAA"},
    {"GET", "/v1/accounts/user:alice", "", "UFAFFFAFA"},
    {"GET", "/v1/accounts/group:vision", "", "UFAFFAAFA"},
    {"GET", "/v1/accounts/user:alice/history", "", "UFAFFFAFA"},
    {"GET", "/v1/accounts/group:vision/history?since=7d", "", "UFAFFAAFA"},
    {"GET", "/v1/ledger?account=user:alice", "", "UFAFFFAFA"},
    {"GET", "/v1/ledger?account=group:vision", "", "UFAFFAAFA"},
    {"GET", "/v1/statement?account=group:vision&month=2026-11", "", "UFAFFAAFA"},
    {"GET", "/v1/usage", "", "UFAFAAAAA"},
    {"GET", "/v1/usage?account=group:vision", "", "UFAFFAAFA"},
    {"POST", "/v1/accounts/group:vision/credits", R"({"amount":"5"})", "UFFFFFFFA"},
    {"PUT", "/v1/budgets/group:vision", R"({"monthly":"5"})", "UFFFFFFFA"},
    {"GET", "/v1/whoami", "", "UAAAAAAAA"},
    {"GET", "/v1/users", "", "UFFFFFFFA"},
    {"POST", "/v1/users", R"({"name":"newcomer"})", "UFFFFFFFA"},
    {"POST", "/v1/users/victim/disable", "", "UFFFFFFFA"},
    {"POST", "/v1/users/alice/password", R"({"password":"a long enough one"})", "UFFFFFAFA"},
    {"POST", "/v1/groups", R"({"name":"newlab"})", "UFFFFFFFA"},
    {"GET", "/v1/groups/vision/members", "", "UFFFAAAAA"},
    {"POST", "/v1/groups/vision/members", R"({"add":["bob"]})", "UFFFFFFFA"},
    {"POST", "/v1/tokens", "{}", "UFFFAAAAA"},
    {"POST", "/v1/tokens", R"({"user":"victim"})", "UFFFFFFFA"},
    {"GET", "/v1/tokens", "", "UFFFAAAAA"},
    {"GET", "/v1/tokens?all=1", "", "UFFFFFFFA"},
    {"POST", "/v1/tokens/VICTIM/revoke", "", "UFFFNNNNA"},
    {"GET", "/v1/audit", "", "UFFFFFFFA"},
    {"POST", "/v1/agent/enroll", R"({"node":"fresh"})", "UAFFFFFAA"},
    {"GET", "/v1/agents", "", "UFFFAAAAA"},
    {"POST", "/v1/nodes/p1/revoke", "", "UFFFFFFAA"},
    {"POST", "/v1/nodes/p1/allow", "", "UFFFFFFFA"},
    {"POST", "/v1/nodes/a/revoke", "", "UFFFFFFFA"},
    {"GET", "/v1/join-token", "", "UFFFFFFFA"},
    {"POST", "/v1/join-token/rotate", "", "UFFFFFFFA"},
    {"GET", "/metrics", "", "UFFFAAAAA"},
};

class AuthzMatrixTest : public ApiTestServer, public ::testing::WithParamInterface<Row> {
 protected:
  void SetUp() override {
    ApiTestServer::SetUp();
    carol_ = AddUser("carol", Role::kMember);
    AddUser("victim", Role::kMember);
    auto victim_token = auth_->CreateToken("victim", Role::kMember, "", kAllScopes, 0);
    ASSERT_TRUE(victim_token.ok());
    victim_token_id_ = victim_token->id;
    auto ro = auth_->CreateToken("alice", Role::kMember, "ro", kScopeJobsRead, 0);
    ASSERT_TRUE(ro.ok());
    read_only_ = ro->secret;
    ASSERT_TRUE(auth_->AddGroup("vision", true).ok());
    ASSERT_TRUE(auth_->ChangeMembers("vision", {"alice", "carol"}, {}, std::nullopt).ok());
    ASSERT_TRUE(auth_->AddGroup("nlp", false).ok());
    ASSERT_TRUE(auth_->ChangeMembers("nlp", {"bob"}, {}, std::nullopt).ok());
    ASSERT_TRUE(auth_->EnrollAgent("p1", "pat", "", "").ok());
    JobSpec vision;
    vision.group = "vision";
    PlaceJob(vision);  // job 1, alice's, attempt 1.1 on node a
    OnLoop([&] {
      JobSpec spec;
      spec.name = "bobs";
      spec.run = "true";
      EXPECT_TRUE(pool_->Submit(spec, "bob").ok());  // job 2
      return 0;
    });
  }

  std::string TokenOf(Caller c) const {
    switch (c) {
      case kNone:
        return "";
      case kJoin:
        return join_;
      case kReadOnly:
        return read_only_;
      case kAgent:
        return agent_;
      case kBob:
        return bob_;
      case kCarol:
        return carol_;
      case kAlice:
        return alice_;
      case kPat:
        return pat_;
      default:
        return admin_;
    }
  }

  static char Outcome(int status) {
    switch (status) {
      case 401:
        return 'U';
      case 403:
        return 'F';
      case 404:
        return 'N';
      default:
        return 'A';
    }
  }

  std::string carol_, read_only_, victim_token_id_;
};

// "default" is everyone's group when a job names none: a lab of that name
// would hand its members every such job.
TEST_F(ApiTestServer, NoLabMayBeNamedDefault) {
  auto g = auth_->AddGroup("default", true);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("default"), std::string::npos);
  EXPECT_TRUE(auth_->AddGroup("defaults", true).ok());
}

TEST_P(AuthzMatrixTest, EveryCallerGetsWhatTheTableSays) {
  const Row& row = GetParam();
  ASSERT_EQ(std::string(row.expect).size(), static_cast<size_t>(kCallers));
  std::string path = row.path;
  if (auto at = path.find("VICTIM"); at != std::string::npos) path.replace(at, 6, victim_token_id_);
  std::string body = row.body;
  if (auto at = body.find("MANIFEST"); at != std::string::npos)
    body.replace(at, 8, std::string(64, '0'));
  for (int c = 0; c < kCallers; ++c) {
    auto r = Call(row.method, path, TokenOf(static_cast<Caller>(c)), body);
    EXPECT_EQ(Outcome(r.status), row.expect[c])
        << row.method << " " << row.path << " by " << kCallerNames[c] << ": HTTP " << r.status
        << " " << r.body;
  }
}

INSTANTIATE_TEST_SUITE_P(AllEndpoints, AuthzMatrixTest, ::testing::ValuesIn(kMatrix),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           std::string name =
                               std::string(info.param.method) + "_" + std::to_string(info.index);
                           return name;
                         });

}  // namespace
}  // namespace gpupool::server
