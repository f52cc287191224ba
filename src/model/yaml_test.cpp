#include "model/yaml.h"

#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

constexpr const char* kDoc = R"(name: x
resources:
  gpus: 2
weekly:
  - from: "08:00"
    to: "18:00"
  - from: "20:00"
env: {A.B: 1, "C[0]": 2}
)";

YamlLines LinesOf(const char* text) {
  YamlLines lines;
  auto j = ParseYamlDocument(text, {}, &lines);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return lines;
}

TEST(YamlLines, EveryFieldAndListElement) {
  EXPECT_EQ(LinesOf(kDoc), (YamlLines{{"name", 1},
                                      {"resources", 2},
                                      {"resources.gpus", 3},
                                      {"weekly", 4},
                                      {"weekly[0]", 5},
                                      {"weekly[0].from", 5},
                                      {"weekly[0].to", 6},
                                      {"weekly[1]", 7},
                                      {"weekly[1].from", 7},
                                      {"env", 8},
                                      {"env.A.B", 8},
                                      {"env.C[0]", 8}}));
}

TEST(YamlLines, WithoutTheOutputNothingChanges) {
  YamlLines lines;
  auto with = ParseYamlDocument(kDoc, {}, &lines);
  auto without = ParseYamlDocument(kDoc, {});
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(*with, *without);
}

std::string Message(const Status& s) { return WithLine(s, LinesOf(kDoc)).message(); }

TEST(WithLine, NamesTheLineOfTheField) {
  EXPECT_EQ(Message(FieldError("name", "must be short")), "name (line 1): must be short");
  EXPECT_EQ(Message(FieldError("resources.gpus", "too many")), "resources.gpus (line 3): too many");
  EXPECT_EQ(Message(FieldError("weekly[1].from", "expected \"HH:MM\"")),
            "weekly[1].from (line 7): expected \"HH:MM\"");
  // Keys with dots or brackets, as readers write them.
  EXPECT_EQ(Message(FieldError("env.A.B", "bad")), "env.A.B (line 8): bad");
  EXPECT_EQ(Message(FieldError("env.C[0]", "bad")), "env.C[0] (line 8): bad");
  // The code is kept; only the path gains the line.
  Status s = WithLine(FieldError("weekly[0].to", "x: y"), LinesOf(kDoc));
  EXPECT_EQ(s, Status::InvalidArgument("weekly[0].to (line 6): x: y"));
}

TEST(WithLine, FieldsNotInTheDocumentTakeTheLineOfTheirMapping) {
  EXPECT_EQ(Message(FieldError("weekly[1].to", "is required")),
            "weekly[1].to (line 7): is required");
  EXPECT_EQ(Message(FieldError("resources.prefer.models", "is required")),
            "resources.prefer.models (line 2): is required");
  EXPECT_EQ(Message(FieldError("weekly[5]", "out of range")), "weekly[5] (line 4): out of range");
}

TEST(WithLine, OtherStatusesAreUnchanged) {
  const Status unchanged[] = {
      Status::Ok(),
      Status::NotFound("name: no such thing"),
      Status::Internal("resources.gpus: oops"),
      FieldError("", "expected a mapping"),                // (root)
      FieldError("run/command", "one of run or command"),  // not a path in the document
      FieldError("other.field", "unknown"),
      Status::InvalidArgument("line 3, column 2: mapping values are not allowed here"),
      Status::InvalidArgument("no path here"),
      Status::InvalidArgument("name (line 1): already has its line"),
      Status::InvalidArgument("resources.gpus (line 3): already has its line"),
  };
  for (const Status& s : unchanged) EXPECT_EQ(WithLine(s, LinesOf(kDoc)), s) << s.ToString();
}

TEST(WithLine, SyntaxErrorsKeepTheirPosition) {
  YamlLines lines;
  auto j = ParseYamlDocument("a: 1\nb:\n  c: 2\n   d: 3\n", {}, &lines);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message().rfind("line 4, column", 0), 0u) << j.status().message();
  EXPECT_EQ(WithLine(j.status(), lines), j.status());
}

}  // namespace
}  // namespace gpupool
