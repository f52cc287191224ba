// The Store conformance suite (store/store_conformance.h): the identity and
// meta facets (IdentityTx, MetaTx): tokens, users, groups, the audit log,
// named values.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/job_spec.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

}  // namespace

// ---------------------------------------------------------------------------
// Meta and tokens

TEST_P(StoreConformanceTest, MetaGetPutOverwrite) {
  CONF_ASSERT_OK_AND_ASSIGN(auto none, InTx(store(), [](Tx& tx) { return tx.GetMeta("k"); }));
  EXPECT_FALSE(none.has_value());
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutMeta("k", "v1"));
    GP_RETURN_IF_ERROR(tx.PutMeta("empty", ""));
    return tx.PutMeta("k", "v2");
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto k, InTx(store(), [](Tx& tx) { return tx.GetMeta("k"); }));
  EXPECT_EQ(k, std::optional<std::string>("v2"));
  CONF_ASSERT_OK_AND_ASSIGN(auto empty, InTx(store(), [](Tx& tx) { return tx.GetMeta("empty"); }));
  EXPECT_EQ(empty, std::optional<std::string>(""));
}

TEST_P(StoreConformanceTest, TokensPutGetRevoke) {
  TokenRecord t{"ab12cd", "alice", "member", 10, 0, false, "", "*"};
  TokenRecord u{"ef34", "agent-join", "agent-join", 11, 99999, false, "join", "*"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutToken(t));
    return tx.PutToken(u);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetToken("ab12cd"); }));
  EXPECT_EQ(got, std::optional<TokenRecord>(t));
  t.revoked = true;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutToken(t); }));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetToken("ab12cd"); }));
  EXPECT_EQ(got, std::optional<TokenRecord>(t));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetToken("ef34"); }));
  EXPECT_EQ(got, std::optional<TokenRecord>(u));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetToken("nope"); }));
  EXPECT_FALSE(got.has_value());
}

TEST_P(StoreConformanceTest, TokensListedBySubjectWithNamesAndScopes) {
  TokenRecord a{"h1", "alice", "member", 10, 0, false, "laptop", "jobs:read"};
  TokenRecord b{"h2", "bob", "member", 11, 500, false, "", "*"};
  TokenRecord c{"h3", "alice", "member", 12, 0, true, "ci", "jobs:read,jobs:write"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    for (const TokenRecord& t : {c, b, a}) GP_RETURN_IF_ERROR(tx.PutToken(t));
    return Status::Ok();
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto alice,
                            InTx(store(), [](Tx& tx) { return tx.ListTokens("alice"); }));
  EXPECT_EQ(alice, (std::vector<TokenRecord>{a, c}));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListTokens(""); }));
  EXPECT_EQ(all, (std::vector<TokenRecord>{a, b, c}));
}

TEST_P(StoreConformanceTest, UsersAndGroupsRoundTrip) {
  UserRecord alice{"alice", "member", "$argon2id$v=19$m=65536,t=2,p=1$abc$def", false, 5};
  UserRecord root{"root", "admin", "", false, 1};
  GroupRecord vision{"vision", {"alice", "bob"}, true, 7};
  GroupRecord nlp{"nlp", {}, false, 8};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutUser(root));
    GP_RETURN_IF_ERROR(tx.PutUser(alice));
    GP_RETURN_IF_ERROR(tx.PutGroup(vision));
    return tx.PutGroup(nlp);
  }));
  alice.disabled = true;
  vision.members.push_back("carol");
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PutUser(alice));
    return tx.PutGroup(vision);
  }));
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(auto users, InTx(store(), [](Tx& tx) { return tx.ListUsers(); }));
  EXPECT_EQ(users, (std::vector<UserRecord>{alice, root}));
  CONF_ASSERT_OK_AND_ASSIGN(auto got, InTx(store(), [](Tx& tx) { return tx.GetUser("alice"); }));
  EXPECT_EQ(got, std::optional<UserRecord>(alice));
  CONF_ASSERT_OK_AND_ASSIGN(got, InTx(store(), [](Tx& tx) { return tx.GetUser("nobody"); }));
  EXPECT_FALSE(got.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto groups, InTx(store(), [](Tx& tx) { return tx.ListGroups(); }));
  EXPECT_EQ(groups, (std::vector<GroupRecord>{nlp, vision}));
  CONF_ASSERT_OK_AND_ASSIGN(auto g, InTx(store(), [](Tx& tx) { return tx.GetGroup("vision"); }));
  EXPECT_EQ(g, std::optional<GroupRecord>(vision));
}

TEST_P(StoreConformanceTest, AuditAppendsInOrderAndSurvivesRollbackOfOthers) {
  AuditEntry login{0, 100, "alice", "login", "alice", "password", "127.0.0.1:5000", true};
  AuditEntry failed{0, 101, "mallory", "login", "alice", "wrong password", "10.0.0.9:1", false};
  CONF_ASSERT_OK_AND_ASSIGN(int64_t first,
                            InTx(store(), [&](Tx& tx) { return tx.AppendAudit(login); }));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t second,
                            InTx(store(), [&](Tx& tx) { return tx.AppendAudit(failed); }));
  EXPECT_LT(first, second);
  Status st = InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendAudit(login).status());
    return Status::Internal("boom");
  });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  Reopen();
  login.id = first;
  failed.id = second;
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListAudit(0, 0, 10); }));
  EXPECT_EQ(all, (std::vector<AuditEntry>{login, failed}));
  CONF_ASSERT_OK_AND_ASSIGN(auto rest,
                            InTx(store(), [&](Tx& tx) { return tx.ListAudit(first, 0, 10); }));
  EXPECT_EQ(rest, (std::vector<AuditEntry>{failed}));
  CONF_ASSERT_OK_AND_ASSIGN(auto one, InTx(store(), [](Tx& tx) { return tx.ListAudit(0, 0, 1); }));
  EXPECT_EQ(one.size(), 1u);
  // Newest first, and the page below an id.
  CONF_ASSERT_OK_AND_ASSIGN(auto newest,
                            InTx(store(), [](Tx& tx) { return tx.ListAudit(0, INT64_MAX, 10); }));
  EXPECT_EQ(newest, (std::vector<AuditEntry>{failed, login}));
  CONF_ASSERT_OK_AND_ASSIGN(auto below,
                            InTx(store(), [&](Tx& tx) { return tx.ListAudit(0, second, 10); }));
  EXPECT_EQ(below, (std::vector<AuditEntry>{login}));
  CONF_ASSERT_OK_AND_ASSIGN(auto last,
                            InTx(store(), [](Tx& tx) { return tx.ListAudit(0, INT64_MAX, 1); }));
  EXPECT_EQ(last, (std::vector<AuditEntry>{failed}));
}

}  // namespace gpupool
