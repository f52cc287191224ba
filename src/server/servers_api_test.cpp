// `gpupool admin servers` (GET /v1/admin/servers): the roles from what the
// database last heard, and the one server of a SQLite pool through the API.
// (The PostgreSQL list: pg_store_test's PgLeaderTest and
// tests/integration/test_failover.py.)
#include "server/servers_api.h"

#include <gtest/gtest.h>

#include "server/api_testing.h"

namespace gpupool::server {
namespace {

ServerSeen Seen(int64_t seen_ago_ms, bool leading) {
  ServerSeen s;
  s.seen_ago_ms = seen_ago_ms;
  s.leading = leading;
  return s;
}

TEST(ServerRoleTest, TheLeaseHolderLeadsAndASilenceLongerThanALeaseIsUnreachable) {
  EXPECT_EQ(ServerRole(Seen(9000, true), 6000), "leader");
  EXPECT_EQ(ServerRole(Seen(2500, false), 6000), "standby");
  EXPECT_EQ(ServerRole(Seen(6000, false), 6000), "standby");
  EXPECT_EQ(ServerRole(Seen(6001, false), 6000), "unreachable");
}

class ServersApiTest : public ApiTestServer {};

TEST_F(ServersApiTest, ASqlitePoolIsItsOneServer) {
  auto r = Call("GET", "/v1/admin/servers", admin_);
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = Json(r);
  EXPECT_EQ(j["store"], "sqlite");
  EXPECT_EQ(j["epoch"], 0);
  ASSERT_EQ(j["servers"].size(), 1u);
  EXPECT_EQ(j["servers"][0]["role"], "leader");
  EXPECT_EQ(j["servers"][0]["address"], base_);
  EXPECT_EQ(j["servers"][0]["id"], "test:1:00");
}

}  // namespace
}  // namespace gpupool::server
