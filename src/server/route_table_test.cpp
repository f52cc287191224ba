#include "server/route_table.h"

#include <gtest/gtest.h>

namespace gpupool::server {
namespace {

using Table = RouteTable<std::string>;  // the "handler" is a name here

Table Sample() {
  Table t;
  t.Add("GET", "/v1/jobs", Access::kHandlerAuthorizes, Action::kJobRead, "list");
  t.Add("GET", "/v1/jobs/{id}", Access::kHandlerAuthorizes, Action::kJobRead, "get");
  t.Add("POST", "/v1/jobs/{id}/cancel", Access::kHandlerAuthorizes, Action::kJobCancel, "cancel");
  t.Add("GET", "/v1/nodes/{node}/events", Access::kAuthorizedFirst, Action::kPoolRead, "events");
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
  EXPECT_EQ(m->route->access, Access::kAuthorizedFirst);
  EXPECT_EQ(m->route->action, Action::kPoolRead);
  // Empty segments do not count, as net::SplitPath reads paths.
  m = t.Find("GET", "//v1/jobs/");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->handler, "list");
}

TEST(RouteTableTest, AnythingElseIsNotFoundNamingMethodAndPath) {
  Table t = Sample();
  for (auto [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"DELETE", "/v1/jobs/42"},          // a pattern that matches, another method
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
  t.Add("GET", "/v1/nodes/{node}", Access::kAuthorizedFirst, Action::kPoolRead, "one node");
  t.Add("GET", "/v1/nodes/special", Access::kAuthorizedFirst, Action::kAdminister, "never reached");
  auto m = t.Find("GET", "/v1/nodes/special");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->handler, "one node");
  EXPECT_EQ(t.routes().size(), 2u);
}

TEST(RouteTableTest, ARestParameterTakesEveryRemainingSegment) {
  Table t;
  t.AddPublic("GET", "/ui/{file...}", "asset");
  t.Add("GET", "/ui", Access::kAuthorizedFirst, Action::kPoolRead, "never: the rest needs one");
  auto m = t.Find("GET", "/ui/js/app.js");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->route->handler, "asset");
  EXPECT_EQ(m->route->access, Access::kPublic);
  EXPECT_EQ(m->params.at("file"), "js/app.js");
  m = t.Find("GET", "/ui/index.html");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->params.at("file"), "index.html");
  // At least one segment: "/ui" itself is the other route.
  m = t.Find("GET", "/ui");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->handler, "never: the rest needs one");
  // Segments are what SplitPath gives: ".." is passed on as a segment for
  // the handler to refuse, never resolved here.
  m = t.Find("GET", "/ui/../secret");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->params.at("file"), "../secret");
}

}  // namespace
}  // namespace gpupool::server
