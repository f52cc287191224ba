#include "server/route_table.h"

#include <gtest/gtest.h>

namespace gpupool::server {
namespace {

using Table = RouteTable<std::string>;  // the "handler" is a name here

Table Sample() {
  Table t;
  t.Add("GET", "/v1/jobs", Action::kJobRead, false, "list");
  t.Add("GET", "/v1/jobs/{id}", Action::kJobRead, false, "get");
  t.Add("POST", "/v1/jobs/{id}/cancel", Action::kJobCancel, false, "cancel");
  t.Add("GET", "/v1/nodes/{node}/events", Action::kPoolRead, true, "events");
  return t;
}

TEST(RouteTableTest, LiteralsMatchThemselvesAndParametersOneSegment) {
  Table t = Sample();
  auto m = t.Find("GET", "/v1/jobs/42");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->route->handler, "get");
  EXPECT_EQ(m->params.at("id"), "42");
  m = t.Find("GET", "/v1/nodes/gpu-7/events");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->handler, "events");
  EXPECT_EQ(m->params.at("node"), "gpu-7");
  EXPECT_TRUE(m->route->checked_before);
  EXPECT_EQ(m->route->action, Action::kPoolRead);
  // Empty segments do not count, as net::SplitPath reads paths.
  m = t.Find("GET", "//v1/jobs/");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->handler, "list");
}

TEST(RouteTableTest, AnythingElseIsNotFoundNamingMethodAndPath) {
  Table t = Sample();
  for (auto [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"DELETE", "/v1/jobs/42"},         // a pattern that matches, another method
           {"GET", "/v1/jobs/42/cancel"},      // POST only
           {"GET", "/v1/jobs/42/logs/extra"},  // longer than any pattern
           {"GET", "/v2/jobs"},                // a literal differs
           {"GET", "/"}}) {
    auto m = t.Find(method, path);
    ASSERT_FALSE(m.ok()) << method << " " << path;
    EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(m.status().message(), "no such endpoint: " + method + " " + path);
  }
}

TEST(RouteTableTest, TheFirstRouteAddedWins) {
  Table t;
  t.Add("GET", "/v1/nodes/{node}", Action::kPoolRead, true, "one node");
  t.Add("GET", "/v1/nodes/special", Action::kAdminister, true, "never reached");
  auto m = t.Find("GET", "/v1/nodes/special");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->handler, "one node");
  EXPECT_EQ(t.routes().size(), 2u);
}

}  // namespace
}  // namespace gpupool::server
