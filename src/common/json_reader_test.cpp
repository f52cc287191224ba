#include "common/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ParseError(std::string_view text, const JsonLimits& limits = {}) {
  auto r = ParseJsonObject(text, "request body", limits);
  EXPECT_FALSE(r.ok()) << "accepted: " << text.substr(0, 200);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

// {"a":{"a":...{"a":1}...}} with `levels` objects.
std::string NestedObjects(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += i == 0 ? "{" : "\"a\":{";
  s += "\"x\":1";
  s += std::string(levels, '}');
  return s;
}

TEST(ParseJsonObject, ParsesAnObject) {
  auto j = ParseJsonObject(R"({"a": [1, {"b": "c"}], "d": null, "e": 1.5, "f": true})", "body");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(*j, json::parse(R"({"a": [1, {"b": "c"}], "d": null, "e": 1.5, "f": true})"));
}

TEST(ParseJsonObject, RejectsMalformedTextAndOtherRoots) {
  EXPECT_THAT(ParseError("{\"a\": }"),
              StartsWith("request body: invalid JSON: [json.exception.parse_error.101] parse "
                         "error at line 1, column 7"));
  EXPECT_THAT(ParseError(""), StartsWith("request body: invalid JSON: "));
  EXPECT_THAT(ParseError("{} {}"), StartsWith("request body: invalid JSON: "));
  EXPECT_EQ(ParseError("[1, 2]"), "request body: must be a JSON object");
  EXPECT_EQ(ParseError("\"text\""), "request body: must be a JSON object");
  EXPECT_THAT(ParseError("{\"a\": \"\xff\"}"), HasSubstr("invalid JSON"));
}

TEST(ParseJsonObject, DuplicateKeysKeepTheLastValueAsBefore) {
  auto j = ParseJsonObject(R"({"a": 1, "a": 2})", "body");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["a"], 2);
}

TEST(ParseJsonObject, LimitsNesting) {
  EXPECT_TRUE(ParseJsonObject(NestedObjects(32), "body").ok());
  EXPECT_EQ(
      ParseError(NestedObjects(33)), "request body: JSON nested deeper than 32 levels (at " + [] {
        std::string p = "a";
        for (int i = 0; i < 31; ++i) p += ".a";
        return p;
      }() + ")");
  EXPECT_EQ(ParseError(R"({"x": [[[1]]]})", JsonLimits{.max_depth = 3}),
            "request body: JSON nested deeper than 3 levels (at x[0][0])");
  EXPECT_EQ(ParseError(R"({"x": [1, 2, [[1]]]})", JsonLimits{.max_depth = 3}),
            "request body: JSON nested deeper than 3 levels (at x[2][0])");
  EXPECT_TRUE(ParseJsonObject(R"({"x": [[1]]})", "body", JsonLimits{.max_depth = 3}).ok());
}

// nlohmann's recursive walks (dump, copy, ==) would overflow the stack on
// such a tree; the parse must stop at level 33 without building it.
TEST(ParseJsonObject, RejectsAMillionOpenBracketsQuickly) {
  const std::string brackets(1'000'000, '[');
  EXPECT_EQ(
      ParseError(brackets), "request body: JSON nested deeper than 32 levels (at " + [] {
        std::string p;
        for (int i = 0; i < 32; ++i) p += "[0]";
        return p;
      }() + ")");
  EXPECT_THAT(ParseError("{\"a\":" + brackets), HasSubstr("JSON nested deeper than 32 levels"));
  std::string balanced =
      "{\"a\":" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  EXPECT_THAT(ParseError(balanced), HasSubstr("JSON nested deeper than 32 levels"));
  std::string objects;
  for (int i = 0; i < 200'000; ++i) objects += "{\"a\":";
  EXPECT_THAT(ParseError(objects), HasSubstr("JSON nested deeper than 32 levels"));
}

TEST(ParseJsonObject, LimitsStringsAndKeys) {
  const std::string at_limit(64 * 1024, 'x');
  EXPECT_TRUE(ParseJsonObject("{\"run\": \"" + at_limit + "\"}", "body").ok());
  EXPECT_EQ(ParseError("{\"env\": {\"A\": \"" + at_limit + "y\"}}"),
            "request body: env.A: JSON string of 65537 bytes, more than 65536");
  EXPECT_EQ(ParseError("{\"l\": [\"a\", \"" + at_limit + "y\"]}"),
            "request body: l[1]: JSON string of 65537 bytes, more than 65536");
  EXPECT_EQ(ParseError("{\"env\": {\"" + at_limit + "y\": 1}}"),
            "request body: env: JSON object key of 65537 bytes, more than 65536");
  EXPECT_EQ(ParseError("{\"" + at_limit + "y\": 1}"),
            "request body: (root): JSON object key of 65537 bytes, more than 65536");
  // Escapes count as the bytes they decode to.
  EXPECT_EQ(ParseError(R"({"a": "\u00e9\u00e9"})", JsonLimits{.max_string_bytes = 3}),
            "request body: a: JSON string of 4 bytes, more than 3");
  EXPECT_TRUE(
      ParseJsonObject(R"({"a": "\u00e9"})", "body", JsonLimits{.max_string_bytes = 2}).ok());
}

TEST(ParseJsonObject, LimitsTheNumberOfValues) {
  JsonLimits limits{.max_values = 5};
  EXPECT_TRUE(ParseJsonObject(R"({"a": [1, 2, 3]})", "body", limits).ok());
  EXPECT_EQ(ParseError(R"({"a": [1, 2, 3, 4]})", limits), "request body: more than 5 JSON values");
  std::string many = "{\"a\": [0";
  for (int i = 0; i < (1 << 20); ++i) many += ",0";
  many += "]}";
  EXPECT_EQ(ParseError(many), "request body: more than 1048576 JSON values");
}

TEST(JsonReader, IntRejectsValuesPastInt64) {
  json j = json::parse(R"({"a": 18446744073709551615, "b": 9223372036854775807, "c": -5})");
  JsonReader r(j, "body");
  EXPECT_EQ(r.Int("b"), INT64_MAX);
  EXPECT_EQ(r.Int("c"), -5);
  EXPECT_EQ(r.Int("a"), 0);
  EXPECT_EQ(r.status().message(),
            "body.a: must be an integer of at most 9223372036854775807, got "
            "18446744073709551615");
}

TEST(JsonReader, IntInChecksTheRange) {
  json j = json::parse(R"({"a": 4294967297, "b": 7})");
  {
    JsonReader r(j, "body");
    EXPECT_EQ(r.IntIn("b", 0, 10), 7);
    EXPECT_EQ(r.IntIn("missing", 0, 10, false, 3), 3);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.IntIn("a", INT32_MIN, INT32_MAX), 0);
    EXPECT_EQ(r.status().message(),
              "body.a: must be from -2147483648 to 2147483647, got 4294967297");
  }
}

TEST(JsonReader, CountsAreCheckedBeforeEntriesAreRead) {
  json j = json::parse(
      R"({"l": ["a", "b", "c"], "m": {"a": "x", "b": "y"}, "i": {"a": 1, "b": 2}, "e": [1, 2]})");
  {
    JsonReader r(j, "body");
    EXPECT_EQ(r.StrList("l", true, 3).size(), 3u);
    EXPECT_EQ(r.StrMap("m", true, 2).size(), 2u);
    EXPECT_EQ(r.IntMap("i", true, 2).size(), 2u);
    int seen = 0;
    r.Each("e", true, 2, [&](const json&, const std::string&) {
      ++seen;
      return Status::Ok();
    });
    EXPECT_EQ(seen, 2);
    EXPECT_TRUE(r.Finish().ok());
  }
  auto error = [&](auto read) {
    JsonReader r(j, "body");
    read(r);
    return r.status().message();
  };
  EXPECT_EQ(error([](JsonReader& r) { r.StrList("l", true, 2); }),
            "body.l: at most 2 entries, got 3");
  EXPECT_EQ(error([](JsonReader& r) { r.StrMap("m", true, 1); }),
            "body.m: at most 1 entries, got 2");
  EXPECT_EQ(error([](JsonReader& r) { r.IntMap("i", true, 1); }),
            "body.i: at most 1 entries, got 2");
  EXPECT_EQ(error([](JsonReader& r) {
              r.Each("e", true, 1, [](const json&, const std::string&) {
                ADD_FAILURE() << "read an entry";
                return Status::Ok();
              });
            }),
            "body.e: at most 1 entries, got 2");
  json big = json::parse(R"({"i": {"a": 18446744073709551615}})");
  JsonReader r(big, "body");
  r.IntMap("i");
  EXPECT_EQ(r.status().message(),
            "body.i.a: must be an integer of at most 9223372036854775807, got "
            "18446744073709551615");
}

}  // namespace
}  // namespace gpupool
