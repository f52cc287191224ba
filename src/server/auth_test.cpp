// Identities and credentials: Auth over a real SQLite store, the password
// hashes, the rate limiter, and the API's authentication answers (401, 429)
// through the real HTTP server.
#include "server/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.h"

#include "server/api_testing.h"
#include "server/passwords.h"
#include "server/rate_limiter.h"
#include "server/server_tls.h"

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

TEST(ScopesTest, ParseAndPrint) {
  EXPECT_EQ(*ParseScopes("*"), kAllScopes);
  EXPECT_EQ(*ParseScopes("jobs:read, pool:read"), kScopeJobsRead | kScopePoolRead);
  EXPECT_EQ(ScopesToString(kScopeJobsRead | kScopeTokens), "jobs:read,tokens");
  EXPECT_EQ(ScopesToString(kAllScopes), "*");
  auto bad = ParseScopes("jobs:read,root");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown scope \"root\""));
}

TEST(AuthorizeTest, ScopesNarrowARoleAndNeverWidenIt) {
  Principal member{"alice", Role::kMember, kScopeJobsRead, {}, {}, "t"};
  EXPECT_TRUE(Authorize(member, Action::kJobRead, {"alice"}).ok());
  Status no_scope = Authorize(member, Action::kJobCancel, {"alice"});
  EXPECT_EQ(no_scope.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(no_scope.message(), HasSubstr("scope jobs:write"));
  member.scopes = kAllScopes;
  EXPECT_EQ(Decide(member, Action::kAdminister), Decision::kNotYours);
  EXPECT_EQ(Decide(member, Action::kJobRead, {"bob", "vision"}), Decision::kNotYours);
  member.shared_groups = {"vision"};
  EXPECT_EQ(Decide(member, Action::kJobRead, {"bob", "vision"}), Decision::kAllowed);
  // Submitting to a lab needs membership, not sharing.
  EXPECT_EQ(Decide(member, Action::kJobSubmit, {"alice", "vision"}), Decision::kNotYours);
  member.groups = {"vision"};
  EXPECT_EQ(Decide(member, Action::kJobSubmit, {"alice", "vision"}), Decision::kAllowed);
}

TEST(PasswordsTest, Argon2idHashesVerifyOnlyTheirPassword) {
  auto hash = HashPassword("correct horse battery");
  ASSERT_TRUE(hash.ok()) << hash.status().ToString();
  EXPECT_THAT(*hash, ::testing::StartsWith("$argon2id$"));
  EXPECT_TRUE(VerifyPassword("correct horse battery", *hash));
  EXPECT_FALSE(VerifyPassword("correct horse batterY", *hash));
  EXPECT_FALSE(VerifyPassword("anything", ""));
  EXPECT_FALSE(VerifyPassword("anything", "$argon2id$garbage"));
  EXPECT_NE(*HashPassword("correct horse battery"), *hash);  // salted
  EXPECT_EQ(HashPassword("short").status().code(), StatusCode::kInvalidArgument);
}

TEST(RateLimiterTest, BurstThenRateWithRetryAfter) {
  FakeClock clock;
  clock.SetMs(1'000'000);
  RateLimiter limiter(clock, {2.0, 3.0});  // 2/s, burst 3
  EXPECT_EQ(limiter.Take("a"), 0);
  EXPECT_EQ(limiter.Take("a"), 0);
  EXPECT_EQ(limiter.Take("a"), 0);
  EXPECT_EQ(limiter.Take("a"), 500);  // one token comes back in 500 ms
  EXPECT_EQ(limiter.Take("b"), 0);    // others are not affected
  clock.AdvanceMs(500);
  EXPECT_EQ(limiter.Take("a"), 0);
  EXPECT_GT(limiter.Take("a"), 0);
  clock.AdvanceMs(120'000);  // full buckets are forgotten
  EXPECT_EQ(limiter.Take("c"), 0);
  EXPECT_EQ(limiter.tracked_keys(), 1u);
  RateLimiter off(clock, {});
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(off.Take("a"), 0);
}

// Issue 19, hole 11: the wall clock stepped back by hours must not lock a
// client out for those hours, nor stepped forward refill its bucket.
TEST(RateLimiterTest, WallClockJumpsNeitherRefillNorDrain) {
  FakeClock clock;
  RateLimiter limiter(clock, {1.0, 2.0});  // 1/s, burst 2
  EXPECT_EQ(limiter.Take("a"), 0);
  EXPECT_EQ(limiter.Take("a"), 0);
  EXPECT_EQ(limiter.Take("a"), 1000);
  clock.JumpWallMs(6 * 3'600'000);
  EXPECT_EQ(limiter.Take("a"), 1000) << "a jump forward is no time passing";
  clock.JumpWallMs(-12 * 3'600'000);
  clock.AdvanceMs(1000);
  EXPECT_EQ(limiter.Take("a"), 0) << "a jump back takes no time away";
}

TEST(ServerTlsTest, MakesItsCaOnceAndAServerCertificateEachStart) {
  testing::TempDir dir;
  auto first = SetUpServerTls(dir.path(), {"pool.example.edu", "10.1.2.3"}, "", "");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_THAT(first->ca_fingerprint, ::testing::StartsWith("sha256:"));
  auto key_mode = std::filesystem::status(dir.path() + "/tls/ca.key").permissions();
  EXPECT_EQ(key_mode & std::filesystem::perms::group_read, std::filesystem::perms::none);
  auto chain = ReadFile(first->config.cert_chain_file);
  ASSERT_TRUE(chain.ok());
  auto leaf = net::ReadCert(*chain);
  ASSERT_TRUE(leaf.ok());
  EXPECT_FALSE(leaf->is_ca);
  // The chain carries the CA after the leaf, for pinning clients.
  EXPECT_NE(chain->find(first->ca.cert), std::string::npos);
  auto again = SetUpServerTls(dir.path(), {}, "", "");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ca_fingerprint, first->ca_fingerprint);  // the same CA
  // An operator's certificate: served as is; agents check it by other means.
  auto own = SetUpServerTls(dir.path(), {}, "/etc/own.crt", "/etc/own.key");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->config.cert_chain_file, "/etc/own.crt");
  EXPECT_EQ(own->ca_fingerprint, "");
  EXPECT_EQ(own->config.client_ca_file, dir.path() + "/tls/ca.crt");  // still signs agents
}

class AuthTest : public ApiTestServer {};

TEST_F(AuthTest, MissingExpiredRevokedAndDisabledTokensAre401) {
  EXPECT_EQ(Call("GET", "/v1/jobs", "").status, 401);
  EXPECT_EQ(Call("GET", "/v1/jobs", "gpt_" + std::string(64, 'f')).status, 401);
  EXPECT_EQ(Call("GET", "/v1/jobs", std::string(10000, 'x')).status, 401);
  auto expiring = auth_->CreateToken("alice", Role::kMember, "short", kAllScopes, 60'000);
  ASSERT_TRUE(expiring.ok());
  EXPECT_EQ(Call("GET", "/v1/jobs", expiring->secret).status, 200);
  clock_.AdvanceMs(60'001);
  auto expired = Call("GET", "/v1/jobs", expiring->secret);
  EXPECT_EQ(expired.status, 401);
  EXPECT_EQ(expired.headers.count("www-authenticate"), 1u);

  // Revoked through the API by its owner: refused at once (not cached).
  auto made = Call("POST", "/v1/tokens", alice_, R"({"name":"ci","scopes":"jobs:read"})");
  ASSERT_EQ(made.status, 201) << made.body;
  std::string secret = Json(made)["token"], id = Json(made)["id"];
  EXPECT_EQ(Json(made)["scopes"], "jobs:read");
  EXPECT_EQ(Call("GET", "/v1/jobs", secret).status, 200);
  EXPECT_EQ(Call("POST", "/v1/jobs", secret, R"({"run":"true"})").status, 403);
  EXPECT_EQ(Call("POST", "/v1/tokens/" + id + "/revoke", bob_).status, 404);  // not his
  EXPECT_EQ(Call("POST", "/v1/tokens/" + id + "/revoke", alice_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/jobs", secret).status, 401);

  // Only the hash is stored.
  auto tokens = auth_->ListTokens("alice");
  ASSERT_TRUE(tokens.ok());
  for (const TokenRecord& t : *tokens) EXPECT_EQ(t.hash.find(secret), std::string::npos);

  // Disabling a user revokes every token of theirs.
  EXPECT_EQ(Call("GET", "/v1/whoami", bob_).status, 200);
  EXPECT_EQ(Call("POST", "/v1/users/bob/disable", admin_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/whoami", bob_).status, 401);
  EXPECT_EQ(Call("POST", "/v1/users/bob/enable", admin_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/whoami", bob_).status, 401);  // still revoked
  EXPECT_EQ(Call("POST", "/v1/users/admin/disable", admin_).status, 409);
}

TEST_F(AuthTest, UsersTokensAndEnrolledNodesComeInPages) {
  // All of a list without paging (the CLI's way), a page with its total.
  const nlohmann::json all = Json(Call("GET", "/v1/users", admin_));
  const size_t users = all["users"].size();
  ASSERT_GE(users, 3u) << all.dump();  // admin, alice, bob at least
  EXPECT_EQ(all["total"], users);
  const nlohmann::json page = Json(Call("GET", "/v1/users?offset=1&limit=2", admin_));
  ASSERT_EQ(page["users"].size(), 2u) << page.dump();
  EXPECT_EQ(page["total"], users);
  EXPECT_EQ(page["offset"], 1);
  EXPECT_EQ(page["users"][0]["name"], all["users"][1]["name"]);
  EXPECT_EQ(page["users"][1]["name"], all["users"][2]["name"]);
  const nlohmann::json past = Json(Call("GET", "/v1/users?offset=1000", admin_));
  EXPECT_TRUE(past["users"].empty());
  EXPECT_EQ(past["offset"], users);
  // Bad paging is refused with the parameter named, on every list.
  for (const char* path :
       {"/v1/users?limit=0", "/v1/tokens?all=1&offset=-1", "/v1/agents?limit=x"}) {
    auto r = Call("GET", path, admin_);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_THAT(ErrorMessage(r), ::testing::AnyOf(HasSubstr("limit"), HasSubstr("offset"))) << path;
  }
  // Tokens page over what the caller may see (never agents' tokens).
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(Call("POST", "/v1/tokens", alice_, R"({"name":"t"})").status, 201);
  const nlohmann::json mine = Json(Call("GET", "/v1/tokens?limit=2", alice_));
  EXPECT_EQ(mine["tokens"].size(), 2u);
  EXPECT_GE(mine["total"], 4);  // her own three and the one she signs in with
  for (const auto& t : mine["tokens"]) EXPECT_EQ(t["user"], "alice");
}

TEST_F(AuthTest, PasswordLoginIssuesATokenAndAuditsFailures) {
  auto added = Call("POST", "/v1/users", admin_,
                    R"({"name":"dana","role":"provider","password":"s3cret-enough"})");
  ASSERT_EQ(added.status, 201) << added.body;
  EXPECT_EQ(Json(added)["password_login"], true);
  auto wrong = Call("POST", "/v1/login", "", R"({"user":"dana","password":"nope-nope"})");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(ErrorMessage(wrong), "wrong user name or password");
  auto nobody = Call("POST", "/v1/login", "", R"({"user":"ghost","password":"nope-nope"})");
  EXPECT_EQ(ErrorMessage(nobody), ErrorMessage(wrong));  // no user enumeration
  auto ok = Call("POST", "/v1/login", "", R"({"user":"dana","password":"s3cret-enough"})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  std::string token = Json(ok)["token"];
  EXPECT_THAT(token, ::testing::StartsWith("gpt_"));
  EXPECT_EQ(token.size(), 4u + 64u);  // 256 random bits
  auto me = Json(Call("GET", "/v1/whoami", token));
  EXPECT_EQ(me["subject"], "dana");
  EXPECT_EQ(me["role"], "provider");

  auto audit = Json(Call("GET", "/v1/audit", admin_));
  std::vector<std::string> seen;
  for (const auto& e : audit["entries"]) {
    seen.push_back(e["action"].get<std::string>() + (e["ok"].get<bool>() ? "" : "!") + " " +
                   e["target"].get<std::string>());
    EXPECT_EQ(e["detail"].get<std::string>().find(token), std::string::npos);
  }
  EXPECT_THAT(seen, ::testing::IsSupersetOf(
                        {"user.add dana", "login! dana", "login! ghost", "login dana"}));
}

TEST_F(AuthTest, EnrollmentRevocationAndReenrollment) {
  auto enrolled = Call("POST", "/v1/agent/enroll", join_, R"({"node":"gpu-7"})");
  ASSERT_EQ(enrolled.status, 201) << enrolled.body;
  std::string node_token = Json(enrolled)["token"];
  EXPECT_THAT(node_token, ::testing::StartsWith("gpn_"));
  EXPECT_EQ(Json(Call("GET", "/v1/whoami", node_token))["role"], "agent");
  // The join token enrolls; it does not connect or read.
  EXPECT_EQ(Call("GET", "/v1/jobs", join_).status, 403);
  EXPECT_EQ(Call("POST", "/v1/agent/enroll", join_, R"({"node":"../etc"})").status, 400);

  EXPECT_EQ(Call("POST", "/v1/nodes/gpu-7/revoke", admin_).status, 200);
  EXPECT_EQ(revoked_, std::vector<std::string>{"gpu-7"});
  EXPECT_EQ(Call("POST", "/v1/blobs/missing", node_token, R"({"chunks":[]})").status, 401);
  auto again = Call("POST", "/v1/agent/enroll", join_, R"({"node":"gpu-7"})");
  EXPECT_EQ(again.status, 409);
  EXPECT_THAT(ErrorMessage(again), HasSubstr("gpupool admin node allow gpu-7"));
  EXPECT_EQ(Call("POST", "/v1/nodes/gpu-7/allow", admin_).status, 200);
  EXPECT_EQ(Call("POST", "/v1/agent/enroll", join_, R"({"node":"gpu-7"})").status, 201);
  EXPECT_EQ(Call("GET", "/v1/whoami", node_token).status, 401);  // the old one stays dead

  // A provider's node: only that provider (or an admin) may replace it.
  ASSERT_EQ(Call("POST", "/v1/agent/enroll", pat_, R"({"node":"pats"})").status, 201);
  EXPECT_EQ(Call("POST", "/v1/agent/enroll", join_, R"({"node":"pats"})").status, 403);
  EXPECT_EQ(Call("POST", "/v1/agent/enroll", pat_, R"({"node":"pats"})").status, 201);
}

TEST_F(AuthTest, JoinTokenCarriesTheCaFingerprintAndStillWorks) {
  Auth other(*store_, clock_);
  auto boot = other.Bootstrap(dir_.path(), "sha256:" + std::string(64, 'a'));
  ASSERT_TRUE(boot.ok());
  EXPECT_TRUE(boot->admin_token.empty());  // made once
  EXPECT_EQ(boot->join_token, join_ + "." + std::string(64, 'a'));
  auto who = other.Authenticate("Bearer " + boot->join_token);
  ASSERT_TRUE(who.ok()) << who.status().ToString();
  EXPECT_EQ(who->role, Role::kJoin);
}

TEST_F(AuthTest, RotatingTheJoinTokenRetiresTheOldOne) {
  EXPECT_EQ(Call("POST", "/v1/join-token/rotate", alice_).status, 403);
  auto rotated = Call("POST", "/v1/join-token/rotate", admin_);
  ASSERT_EQ(rotated.status, 200) << rotated.body;
  std::string fresh = Json(rotated)["token"];
  EXPECT_NE(fresh, join_);
  EXPECT_EQ(Json(Call("GET", "/v1/join-token", admin_))["token"], fresh);
  EXPECT_EQ(*ReadFileTrimmed(dir_.path() + "/join.token"), fresh);
  EXPECT_EQ(Call("POST", "/v1/agent/enroll", join_, R"({"node":"late"})").status, 401);
  EXPECT_EQ(Call("POST", "/v1/agent/enroll", fresh, R"({"node":"late"})").status, 201);
  EXPECT_EQ(Call("GET", "/v1/whoami", agent_).status, 200);  // enrolled agents go on
}

class RateLimitedApiTest : public ApiTestServer {
 protected:
  ApiOptions ApiOpts() override {
    ApiOptions o;
    o.per_token = {1.0, 5.0};
    return o;
  }
};

TEST_F(RateLimitedApiTest, AFloodFromOneTokenIsLimitedWhileOthersAreServed) {
  int limited = 0;
  std::string retry_after;
  for (int i = 0; i < 20; ++i) {
    auto r = Call("GET", "/v1/jobs", alice_);
    if (r.status == 429) {
      ++limited;
      retry_after = r.headers["retry-after"];
      EXPECT_THAT(ErrorMessage(r), HasSubstr("rate limit"));
    }
  }
  EXPECT_GE(limited, 14);
  EXPECT_EQ(retry_after, "1");
  EXPECT_EQ(Call("GET", "/v1/jobs", bob_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/jobs", admin_).status, 200);
  // Agents are not limited by this (their channel paces them).
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(Call("POST", "/v1/blobs/missing", agent_, R"({"chunks":[]})").status, 200);
}

// Single sign-on: a request without a token from the trusted proxy acts as
// the user its header names.
class ProxyAuthTest : public ApiTestServer {
 protected:
  ApiOptions ApiOpts() override {
    ApiOptions o = ApiTestServer::ApiOpts();
    o.proxy_user_header = "x-remote-user";
    o.proxy_trusted = {trusted_};
    return o;
  }
  net::HttpResponse AsProxy(const std::string& target, const std::string& user) {
    net::HttpCall c;
    c.base_url = base_;
    c.target = target;
    c.headers["x-remote-user"] = user;
    auto r = net::Fetch(c);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : net::HttpResponse{};
  }
  std::string trusted_ = "127.0.0.1";
};

TEST_F(ProxyAuthTest, TheTrustedProxysHeaderNamesTheUser) {
  auto me = AsProxy("/v1/whoami", "alice");
  ASSERT_EQ(me.status, 200) << me.body;
  EXPECT_EQ(Json(me)["subject"], "alice");
  // A user the pool has not seen becomes a member, once, in the audit log.
  EXPECT_EQ(Json(AsProxy("/v1/whoami", "newbie"))["role"], "member");
  EXPECT_EQ(Json(AsProxy("/v1/whoami", "newbie"))["role"], "member");
  auto audit = Json(Call("GET", "/v1/audit", admin_));
  int added = 0;
  for (const auto& e : audit["entries"])
    added += e["action"] == "user.add" && e["target"] == "newbie";
  EXPECT_EQ(added, 1);
  EXPECT_EQ(AsProxy("/v1/whoami", "../root").status, 401);
  ASSERT_EQ(Call("POST", "/v1/users/alice/disable", admin_).status, 200);
  EXPECT_EQ(AsProxy("/v1/whoami", "alice").status, 401);
  EXPECT_EQ(AsProxy("/v1/whoami", "").status, 401);  // no header: a token is needed
}

class UntrustedProxyTest : public ProxyAuthTest {
 protected:
  void SetUp() override {
    trusted_ = "10.9.9.9";
    ProxyAuthTest::SetUp();
  }
};

TEST_F(UntrustedProxyTest, TheHeaderFromAnyOtherAddressIsIgnored) {
  EXPECT_EQ(AsProxy("/v1/whoami", "admin").status, 401);
}

}  // namespace
}  // namespace gpupool::server
