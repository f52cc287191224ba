#include "model/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpupool {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

JobSpec MustParse(std::string_view text) {
  auto r = ParseJobSpec(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << "\nfor:\n" << text;
  return r.ok() ? *r : JobSpec{};
}

std::string ParseError(std::string_view text) {
  auto r = ParseJobSpec(text);
  EXPECT_FALSE(r.ok()) << "accepted:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

std::string JsonError(const json& j) {
  auto r = JobSpecFromJson(j);
  EXPECT_FALSE(r.ok()) << "accepted: " << j.dump();
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

void ExpectRoundTrip(const JobSpec& spec) {
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec).ToString();
  json j = JobSpecToJson(spec);
  auto back = JobSpecFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << " for " << j.dump();
  EXPECT_EQ(*back, spec) << j.dump();
  // Through text too: YAML is a superset of JSON.
  auto from_text = ParseJobSpec(j.dump());
  ASSERT_TRUE(from_text.ok()) << from_text.status().ToString() << " for " << j.dump();
  EXPECT_EQ(*from_text, spec) << j.dump();
}

JobSpec Basic() {
  JobSpec s;
  s.name = "train";
  s.run = "python train.py";
  return s;
}

// ---------------------------------------------------------------------------
// YAML input.

TEST(ParseJobSpec, FullYaml) {
  JobSpec s = MustParse(R"(
name: resnet-50.v2_run
run: |
  python train.py --epochs 10
env:
  LR: "0.1"
  EPOCHS: 10
  RATIO: 0.50
  DEBUG: true
  EMPTY: ""
  TILDE: "~"
resources:
  gpus: 2
  gpu_memory: 40GiB
  gpu_models: [A100, H100]
  cpus: 0.5
  memory: 16Gi
max_runtime: 1h30m
)");
  EXPECT_EQ(s.name, "resnet-50.v2_run");
  EXPECT_EQ(s.run, "python train.py --epochs 10\n");
  EXPECT_TRUE(s.command.empty());
  // Env values are kept as written, whatever their YAML type.
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"LR", "0.1"},
                                                       {"EPOCHS", "10"},
                                                       {"RATIO", "0.50"},
                                                       {"DEBUG", "true"},
                                                       {"EMPTY", ""},
                                                       {"TILDE", "~"}}));
  EXPECT_EQ(s.resources.gpus, 2);
  EXPECT_EQ(s.resources.gpu_memory_mib, 40 * 1024);
  EXPECT_EQ(s.resources.gpu_models, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_EQ(s.resources.cpu_milli, 500);
  EXPECT_EQ(s.resources.memory_mib, 16 * 1024);
  EXPECT_EQ(s.max_runtime_ms, 90 * 60 * 1000);
}

TEST(ParseJobSpec, CommandList) {
  JobSpec s = MustParse("command: [python, -c, 'print(1)', \"\"]\n");
  EXPECT_EQ(s.command, (std::vector<std::string>{"python", "-c", "print(1)", ""}));
  EXPECT_TRUE(s.run.empty());

  s = MustParse("command:\n  - sleep\n  - \"10\"\n");
  EXPECT_EQ(s.command, (std::vector<std::string>{"sleep", "10"}));
}

TEST(ParseJobSpec, Defaults) {
  JobSpec s = MustParse("run: nvidia-smi");
  EXPECT_EQ(s.name, "job");
  EXPECT_EQ(s.run, "nvidia-smi");
  EXPECT_TRUE(s.env.empty());
  EXPECT_EQ(s.resources, Resources{});
  EXPECT_EQ(s.max_runtime_ms, 0);
}

TEST(ParseJobSpec, NullValuesMeanAbsent) {
  JobSpec s = MustParse("name:\nrun: x\nresources:\nenv: ~\nmax_runtime: null\n");
  EXPECT_EQ(s.name, "job");
  EXPECT_EQ(s.resources, Resources{});
  EXPECT_TRUE(s.env.empty());
}

TEST(ParseJobSpec, QuotedScalarsStayStrings) {
  EXPECT_EQ(MustParse("name: \"007\"\nrun: x").name, "007");
  EXPECT_EQ(MustParse("name: '1.5'\nrun: x").name, "1.5");
  EXPECT_EQ(MustParse("name: !!str 42\nrun: x").name, "42");
  EXPECT_EQ(MustParse("run: \"true\"").run, "true");
  // Plain 007 is the integer 7 in YAML 1.2, not a name.
  EXPECT_THAT(ParseError("name: 007\nrun: x"), HasSubstr("name (line 1): must be a string, got 7"));
  EXPECT_THAT(ParseError("run: true"), HasSubstr("run (line 1): must be a string, got true"));
}

TEST(ParseJobSpec, Yaml12CoreSchema) {
  // yes/no/on/off are strings in YAML 1.2 (booleans only in 1.1).
  EXPECT_EQ(MustParse("name: yes\nrun: x").name, "yes");
  EXPECT_EQ(MustParse("name: off\nrun: x").name, "off");
  EXPECT_EQ(MustParse("run: x\nresources: {gpus: 0x2}").resources.gpus, 2);
  EXPECT_EQ(MustParse("run: x\nresources: {gpus: 0o10}").resources.gpus, 8);
  EXPECT_EQ(MustParse("run: x\nresources: {gpus: +3}").resources.gpus, 3);
  EXPECT_EQ(MustParse("run: x\nresources: {gpus: !!int 4}").resources.gpus, 4);
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: .5}").resources.cpu_milli, 500);
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: 1e1}").resources.cpu_milli, 10000);
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: !!float 2}").resources.cpu_milli, 2000);
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: 2.}").resources.cpu_milli, 2000);
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: \"250m\"}").resources.cpu_milli, 250);
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: 250m}").resources.cpu_milli, 250);
  EXPECT_THAT(ParseError("run: x\nresources: {cpus: .inf}"),
              HasSubstr("resources.cpus (line 2): must be a number from 0 to 1024, got"));
  EXPECT_THAT(ParseError("run: x\nresources: {cpus: -.inf}"),
              HasSubstr("resources.cpus (line 2):"));
  EXPECT_THAT(ParseError("run: x\nresources: {cpus: .nan}"),
              HasSubstr("resources.cpus (line 2): must be a number from 0 to 1024, got nan"));
  EXPECT_THAT(ParseError("run: x\nresources: {cpus: 1e999}"),
              HasSubstr("resources.cpus (line 2): must be a number from 0 to 1024, got inf"));
  EXPECT_EQ(MustParse("run: x\nresources: {cpus: 1e-999}").resources.cpu_milli, 0);
  EXPECT_THAT(ParseError("run: x\nresources: {gpus: !!int abc}"),
              HasSubstr("resources.gpus: \"abc\" is not a valid !!int"));
  EXPECT_THAT(ParseError("run: x\nresources: {gpus: !custom 1}"),
              HasSubstr("resources.gpus: unsupported tag"));
  EXPECT_THAT(ParseError("run: x\nresources: {gpus: 0xFFFFFFFFFFFFFFFFFF}"),
              HasSubstr("resources.gpus: integer \"0xFFFFFFFFFFFFFFFFFF\" out of range"));
  EXPECT_THAT(
      ParseError("run: x\nresources: {gpus: 99999999999999999999999}"),
      HasSubstr(
          "resources.gpus (line 2): must be a whole number of GPUs from 0 to 64 or a share of "
          "one GPU such as 0.5 or \"500m\", got 9.99"));
  EXPECT_THAT(
      ParseError("run: x\nresources: {gpus: -9223372036854775808}"),
      HasSubstr(
          "resources.gpus (line 2): must be a whole number of GPUs from 0 to 64 or a share of "
          "one GPU such as 0.5 or \"500m\", got "
          "-9223372036854775808"));
  EXPECT_THAT(
      ParseError("run: x\nresources: {gpus: 18446744073709551615}"),
      HasSubstr(
          "resources.gpus (line 2): must be a whole number of GPUs from 0 to 64 or a share of "
          "one GPU such as 0.5 or \"500m\", got "
          "18446744073709551615"));
}

TEST(ParseJobSpec, EnvValuesKeptAsWritten) {
  JobSpec s = MustParse("run: x\nenv: {A: 0x1F, B: 1e3, C: True, D: 007, E: 1.0}");
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{
                       {"A", "0x1F"}, {"B", "1e3"}, {"C", "True"}, {"D", "007"}, {"E", "1.0"}}));
  EXPECT_THAT(ParseError("run: x\nenv: {A: [1]}"),
              HasSubstr("env.A (line 2): must be a string, number or boolean, got a list"));
  EXPECT_THAT(ParseError("run: x\nenv:\n  A:\n"),
              HasSubstr("env.A (line 3): must be a string, number or boolean, got null"));
}

TEST(ParseJobSpec, JsonText) {
  JobSpec s = MustParse(R"({"name": "j1", "command": ["echo", "hi"],
                            "env": {"N": 3, "F": 0.5, "B": false},
                            "resources": {"gpus": 1, "gpu_memory": "24GiB", "gpu_models": "T4",
                                          "cpus": 2, "memory": "512MiB"},
                            "max_runtime": 90})");
  EXPECT_EQ(s.name, "j1");
  EXPECT_EQ(s.command, (std::vector<std::string>{"echo", "hi"}));
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"N", "3"}, {"F", "0.5"}, {"B", "false"}}));
  EXPECT_EQ(s.resources.gpus, 1);
  EXPECT_EQ(s.resources.gpu_memory_mib, 24 * 1024);
  EXPECT_EQ(s.resources.gpu_models, std::vector<std::string>{"T4"});
  EXPECT_EQ(s.resources.cpu_milli, 2000);
  EXPECT_EQ(s.resources.memory_mib, 512);
  EXPECT_EQ(s.max_runtime_ms, 90'000);
}

TEST(ParseJobSpec, YamlSyntaxErrorsNameLineAndColumn) {
  EXPECT_THAT(ParseError("run: x\nresources:\n  gpus: 1\n   cpus: 2: 3\n"),
              StartsWith("line 4, column"));
  EXPECT_THAT(ParseError("run: [unclosed"), StartsWith("line 1, column"));
  EXPECT_THAT(ParseError("{\"run\": \"x\""), HasSubstr("line 1"));
}

TEST(ParseJobSpec, FieldErrorsNameTheLine) {
  const std::string head = "name: train\n\ncommand:\n  - python\n  - train.py\n";  // lines 1-5
  EXPECT_EQ(ParseError(head + "priority: urgent\n"),
            "priority (line 6): unknown priority \"urgent\" (one of: interactive, normal, "
            "opportunistic)");
  EXPECT_EQ(ParseError(head + "resources:\n  cpus: 1\n  gpus: -1\n"),
            "resources.gpus (line 8): must be a whole number of GPUs from 0 to 64 or a share of "
            "one GPU such as 0.5 or \"500m\", got -1");
  EXPECT_EQ(ParseError("command:\n  - python\n  - 3\n"),
            "command[1] (line 3): must be a string, got 3 (quote it: \"3\")");
  EXPECT_EQ(ParseError(head + "resources:\n  gpu_models: [A100]\n  prefer:\n    models:\n"
                              "      - A100\n      - H100\n"),
            "resources.prefer.models[1] (line 11): \"H100\" is not one of resources.gpu_models");
  // A missing field: the line of the mapping that lacks it.
  EXPECT_EQ(ParseError(head + "resources:\n  gpus: 1\n  prefer:\n    wait: 5m\n"),
            "resources.prefer.models (line 8): is required");
  // Errors that name no field of the document, and specs given as JSON
  // values, have no line.
  EXPECT_THAT(ParseError("name: x\n"), StartsWith("run/command: one of run or command"));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"priority", "urgent"}}),
              StartsWith("priority: unknown priority"));
}

TEST(ParseJobSpec, DocumentShape) {
  EXPECT_THAT(ParseError(""), HasSubstr("(root): empty spec"));
  EXPECT_THAT(ParseError("   \n# only a comment\n"), HasSubstr("(root): empty spec"));
  EXPECT_THAT(ParseError("~"), HasSubstr("(root): empty spec"));
  EXPECT_THAT(ParseError("just text"), HasSubstr("(root): expected a mapping, got \"just text\""));
  EXPECT_THAT(ParseError("- a\n- b\n"), HasSubstr("(root): expected a mapping, got a list"));
  EXPECT_THAT(ParseError("42"), HasSubstr("(root): expected a mapping, got 42"));
  EXPECT_THAT(ParseError("run: a\n---\nrun: b\n"),
              HasSubstr("(root): expected one YAML document, got 2"));
  EXPECT_THAT(ParseError("run: a\nrun: b\n"), HasSubstr("run: duplicate key"));
  EXPECT_THAT(ParseError("run: a\nresources: {gpus: 1, gpus: 2}"),
              HasSubstr("resources.gpus: duplicate key"));
  EXPECT_THAT(ParseError("run: a\n? [k]\n: v\n"), HasSubstr("(root): mapping keys must be"));
  EXPECT_THAT(ParseError(std::string(2 << 20, ' ')), HasSubstr("(root): spec too large"));
}

TEST(ParseJobSpec, StrayTopLevelTokens) {
  // yaml-cpp 0.7's LoadAll loops forever on these (jbeder/yaml-cpp#1040).
  EXPECT_THAT(ParseError(","), StartsWith("line 1, column 1: unexpected content"));
  EXPECT_THAT(ParseError(",{\"run\": \"x\"}"), StartsWith("line 1, column 1: unexpected content"));
  EXPECT_THAT(ParseError("run: x\n,\n"), StartsWith("line 2, column 1:"));
  EXPECT_THAT(ParseError("---\n---\n---\nrun: x\n"),
              HasSubstr("(root): expected one YAML document"));
}

TEST(ParseJobSpec, BytesThatAreNotText) {
  EXPECT_THAT(ParseError("run: \"a\xff b\"\n"), HasSubstr("line 1, column 8: not valid UTF-8"));
  EXPECT_THAT(ParseError("name: x\nrun: a\xc0\xaf"
                         "b\n"),
              HasSubstr("line 2, column 7: not valid UTF-8"));                   // overlong "/"
  EXPECT_THAT(ParseError("run: \xed\xa0\x80\n"), HasSubstr("not valid UTF-8"));  // surrogate
  EXPECT_THAT(ParseError("run: \xe2\x82"), HasSubstr("not valid UTF-8"));        // truncated
  EXPECT_THAT(ParseError(std::string("run: a\0b\n", 9)),
              HasSubstr("(root): spec contains a NUL byte at offset 6"));
  EXPECT_EQ(MustParse("run: \"caf\xc3\xa9 \xf0\x9f\x9a\x80\"\n").run,
            "caf\xc3\xa9 \xf0\x9f\x9a\x80");
}

TEST(ParseJobSpec, AliasBombIsRejected) {
  std::string text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    std::string prev(1, static_cast<char>(c - 1));
    text += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" +
            prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
            ", *" + prev + "]\n";
  }
  text += "run: x\n";
  EXPECT_THAT(ParseError(text), HasSubstr("too large"));
}

TEST(ParseJobSpec, DeepNestingIsRejected) {
  std::string text = "run: x\nenv: " + std::string(100, '[') + std::string(100, ']');
  EXPECT_THAT(ParseError(text), HasSubstr("nested too deeply"));
}

TEST(ParseJobSpec, AliasesWork) {
  JobSpec s = MustParse("run: &cmd echo hi\nenv: {CMD: *cmd}\n");
  EXPECT_EQ(s.env.at("CMD"), "echo hi");
}

// ---------------------------------------------------------------------------
// Field by field.

TEST(ParseJobSpec, SchedulingFields) {
  JobSpec s = MustParse(R"(
run: python3 notebook.py
priority: interactive
group: vision-lab
resources:
  gpus: 0.5
  gpu_memory: 20GiB
  gpu_models: [A100, L40S]
  min_compute_capability: "8.6"
  node_labels: {zone: eu-1, rack: 3, ib: true}
  prefer: {models: [L40S], wait: 15m}
checkpoint:
  interval: 30m
  grace: 60s
  signal: USR2
workdir: /home/ada/project
inputs: 3f9a000000000000000000000000000000000000000000000000000000000001
)");
  EXPECT_EQ(s.resources.gpus, 0);
  EXPECT_EQ(s.resources.gpu_milli, 500);
  EXPECT_EQ(s.resources.TotalGpuMilli(), 500);
  EXPECT_EQ(s.resources.gpu_memory_mib, 20 * 1024);
  EXPECT_EQ(s.resources.min_compute_capability, 86);
  EXPECT_EQ(s.resources.node_labels,
            (std::map<std::string, std::string>{{"zone", "eu-1"}, {"rack", "3"}, {"ib", "true"}}));
  EXPECT_EQ(s.resources.preferred_models, std::vector<std::string>{"L40S"});
  EXPECT_EQ(s.resources.prefer_wait_ms, 15 * 60'000);
  EXPECT_EQ(s.priority, JobPriority::kInteractive);
  EXPECT_EQ(s.group, "vision-lab");
  ASSERT_TRUE(s.checkpoint.has_value());
  EXPECT_TRUE(s.preemptible());
  EXPECT_EQ(*s.checkpoint, (CheckpointSpec{30 * 60'000, 60'000, "SIGUSR2"}));
  EXPECT_EQ(s.workdir, "/home/ada/project");
  EXPECT_EQ(s.inputs, "3f9a000000000000000000000000000000000000000000000000000000000001");
  ExpectRoundTrip(s);
}

TEST(ParseJobSpec, SchedulingDefaults) {
  JobSpec s = MustParse("run: x");
  EXPECT_EQ(s.priority, JobPriority::kNormal);
  EXPECT_EQ(s.group, "default");
  EXPECT_FALSE(s.checkpoint.has_value());
  EXPECT_FALSE(s.preemptible());
  // An empty checkpoint section still makes the job preemptible, with defaults.
  JobSpec c = MustParse("run: x\ncheckpoint: {}\nresources: {prefer: {models: T4}}");
  ASSERT_TRUE(c.checkpoint.has_value());
  EXPECT_EQ(*c.checkpoint, (CheckpointSpec{0, 30'000, "SIGUSR1"}));
  EXPECT_EQ(c.resources.preferred_models, std::vector<std::string>{"T4"});
  EXPECT_EQ(c.resources.prefer_wait_ms, 10 * 60'000);  // prefer.wait defaults to 10m
  EXPECT_EQ(MustParse("run: x\ncheckpoint: {signal: none}").checkpoint->signal, "none");
  EXPECT_TRUE(MustParse("run: x\ncheckpoint: {standby: true}").checkpoint->standby);
  EXPECT_FALSE(c.checkpoint->standby);
  // A preferred model may be more specific than an allowed one.
  EXPECT_EQ(MustParse("run: x\nresources: {gpu_models: A100, prefer: {models: A100-SXM4-80GB}}")
                .resources.preferred_models,
            std::vector<std::string>{"A100-SXM4-80GB"});
}

TEST(ParseJobSpec, GpuFractions) {
  struct Case {
    const char* gpus;
    int32_t whole;
    int32_t milli;
  };
  for (const Case& c :
       {Case{"0.5", 0, 500}, Case{"'500m'", 0, 500}, Case{"'0.25'", 0, 250}, Case{"0.001", 0, 1},
        Case{"'999m'", 0, 999}, Case{"'2'", 2, 0}, Case{"2.0", 2, 0}, Case{"'1000m'", 1, 0},
        Case{"1.0", 1, 0}, Case{"0", 0, 0}, Case{"'0'", 0, 0}, Case{"64", 64, 0}}) {
    SCOPED_TRACE(c.gpus);
    JobSpec s = MustParse(std::string("run: x\nresources: {gpus: ") + c.gpus + "}");
    EXPECT_EQ(s.resources.gpus, c.whole);
    EXPECT_EQ(s.resources.gpu_milli, c.milli);
    ExpectRoundTrip(s);
  }
  // The canonical JSON writes a share as a fraction.
  JobSpec share = Basic();
  share.resources.gpu_milli = 125;
  EXPECT_EQ(JobSpecToJson(share)["resources"]["gpus"], json(0.125));
}

TEST(ParseJobSpec, ComputeCapabilityForms) {
  for (auto [text, cc] : std::vector<std::pair<std::string, int32_t>>{{"'8.0'", 80},
                                                                      {"'8.6'", 86},
                                                                      {"8.6", 86},
                                                                      {"7.5", 75},
                                                                      {"9", 90},
                                                                      {"'12'", 120},
                                                                      {"'10.0'", 100},
                                                                      {"1.0", 10},
                                                                      {"'99.9'", 999}}) {
    SCOPED_TRACE(text);
    JobSpec s = MustParse("run: x\nresources: {min_compute_capability: " + text + "}");
    EXPECT_EQ(s.resources.min_compute_capability, cc);
    ExpectRoundTrip(s);
  }
  JobSpec s = Basic();
  s.resources.min_compute_capability = 75;
  EXPECT_EQ(JobSpecToJson(s)["resources"]["min_compute_capability"], "7.5");
}

TEST(JobSpecFromJson, Sizes) {
  auto mem = [](const std::string& v) {
    auto r = JobSpecFromJson(json{{"run", "x"}, {"resources", {{"memory", v}}}});
    EXPECT_TRUE(r.ok()) << v << ": " << r.status().ToString();
    return r.ok() ? r->resources.memory_mib : -1;
  };
  EXPECT_EQ(mem("1GiB"), 1024);
  EXPECT_EQ(mem("1 GiB"), 1024);
  EXPECT_EQ(mem("1.5GiB"), 1536);
  EXPECT_EQ(mem("1536MiB"), 1536);
  EXPECT_EQ(mem("1G"), 954);  // 10^9 bytes, rounded up to whole MiB
  EXPECT_EQ(mem("1KiB"), 1);
  EXPECT_EQ(mem("0"), 0);
  EXPECT_EQ(mem("64TiB"), int64_t{64} << 20);
  EXPECT_EQ(mem("2Ti"), int64_t{2} << 20);
}

TEST(JobSpecFromJson, Cpus) {
  auto cpus = [](const json& v) {
    auto r = JobSpecFromJson(json{{"run", "x"}, {"resources", {{"cpus", v}}}});
    EXPECT_TRUE(r.ok()) << v.dump() << ": " << r.status().ToString();
    return r.ok() ? r->resources.cpu_milli : -1;
  };
  EXPECT_EQ(cpus(2), 2000);
  EXPECT_EQ(cpus(0.5), 500);
  EXPECT_EQ(cpus(0.001), 1);
  EXPECT_EQ(cpus(0.1), 100);
  EXPECT_EQ(cpus(1023.999), 1023999);
  EXPECT_EQ(cpus(1024), 1024000);
  EXPECT_EQ(cpus(2.0), 2000);
  EXPECT_EQ(cpus("2"), 2000);
  EXPECT_EQ(cpus("0.25"), 250);
  EXPECT_EQ(cpus("500m"), 500);
  EXPECT_EQ(cpus(0), 0);
}

TEST(JobSpecFromJson, MaxRuntime) {
  auto rt = [](const json& v) {
    auto r = JobSpecFromJson(json{{"run", "x"}, {"max_runtime", v}});
    EXPECT_TRUE(r.ok()) << v.dump() << ": " << r.status().ToString();
    return r.ok() ? r->max_runtime_ms : -1;
  };
  EXPECT_EQ(rt("2h"), 2 * 3600 * 1000);
  EXPECT_EQ(rt("90s"), 90'000);
  EXPECT_EQ(rt("1h30m"), 5'400'000);
  EXPECT_EQ(rt("500ms"), 500);
  EXPECT_EQ(rt("45"), 45'000);
  EXPECT_EQ(rt("365d"), int64_t{365} * 86'400'000);
  EXPECT_EQ(rt(90), 90'000);
  EXPECT_EQ(rt(1.5), 1500);
  EXPECT_EQ(rt(0), 0);
}

TEST(JobSpecFromJson, GpuModels) {
  auto models = [](const json& v) {
    auto r = JobSpecFromJson(json{{"run", "x"}, {"resources", {{"gpu_models", v}}}});
    EXPECT_TRUE(r.ok()) << v.dump() << ": " << r.status().ToString();
    return r.ok() ? r->resources.gpu_models : std::vector<std::string>{};
  };
  EXPECT_EQ(models("A100"), std::vector<std::string>{"A100"});
  EXPECT_EQ(models(json::array({"A100", "a100-sxm4-80gb"})),
            (std::vector<std::string>{"A100", "a100-sxm4-80gb"}));
  EXPECT_EQ(models(json::array()), std::vector<std::string>{});
}

TEST(JobSpecFromJson, EnvNames) {
  for (const char* ok : {"A", "_", "a_b", "PATH", "X1", "_9", "gpupool_lower"}) {
    auto r = JobSpecFromJson(json{{"run", "x"}, {"env", {{ok, "v"}}}});
    EXPECT_TRUE(r.ok()) << ok << ": " << r.status().ToString();
  }
  for (const char* bad : {"1BAD", "A-B", "A B", "A.B", "Ä", "="}) {
    EXPECT_THAT(JsonError(json{{"run", "x"}, {"env", {{bad, "v"}}}}),
                HasSubstr("env." + std::string(bad) + ": invalid variable name"));
  }
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"env", {{"", "v"}}}}),
              HasSubstr("env.: invalid variable name"));
  EXPECT_TRUE(JobSpecFromJson(json{{"run", "x"}, {"env", {{std::string(256, 'A'), "v"}}}}).ok());
  EXPECT_EQ(
      JsonError(json{{"run", "x"}, {"env", {{std::string(300, 'A'), "v"}}}}),
      "env: variable name \"" + std::string(64, 'A') + "...\" is 300 bytes long, at most 256");
  for (const char* reserved : {"GPUPOOL_CHECKPOINT_DIR", "GPUPOOL_", "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_THAT(JsonError(json{{"run", "x"}, {"env", {{reserved, "v"}}}}),
                HasSubstr("env." + std::string(reserved) + ": reserved variable name"));
  }
}

TEST(JobSpecFromJson, NameRules) {
  EXPECT_EQ(JobSpecFromJson(json{{"run", "x"}, {"name", std::string(128, 'n')}})->name,
            std::string(128, 'n'));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"name", std::string(129, 'n')}}),
              HasSubstr("name: must be 1 to 128 characters"));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"name", ""}}),
              HasSubstr("name: must be 1 to 128 characters"));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"name", "a b"}}), HasSubstr("got \"a b\""));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"name", "a/b"}}), HasSubstr("name: "));
}

// Table of bad specs: each must fail with a message naming the field.
struct BadSpec {
  const char* yaml;
  const char* message;
  friend void PrintTo(const BadSpec& b, std::ostream* os) { *os << json(b.yaml).dump(); }
};

class BadSpecTest : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, Rejected) {
  EXPECT_THAT(ParseError(GetParam().yaml), HasSubstr(GetParam().message));
}

const BadSpec kBadSpecs[] = {
    // run / command
    {"name: x", "run/command: one of run or command is required (only a job with an image"},
    {"{}", "run/command: one of run or command is required"},
    {"run: a\ncommand: [b]", "run/command: give run or command, not both"},
    {"image: oci-archive:/i.tar\nrun: a\ncommand: [b]",
     "run/command: give run or command, not both"},
    // image, executor, network, disk
    {"run: a\nimage: busybox", "image (line 2): image \"busybox\": expected docker://REF"},
    {"run: a\nimage: 5", "image (line 2): must be a string"},
    {"run: a\nimage: oci-archive:img.tar", "the path must be absolute"},
    {"run: a\nexecutor: kvm",
     "executor (line 2): unknown executor \"kvm\" (one of: sandbox, process, docker, podman)"},
    {"image: oci:/srv/l\nexecutor: process",
     "executor (line 2): the process executor cannot run an image"},
    {"run: a\nexecutor: docker", "image: the docker executor needs an image (image: docker://...)"},
    {"run: a\nnetwork: no-thanks",
     "network (line 2): must be true, false or \"host\", got \"no-thanks\""},
    {"run: a\nnetwork: 1", "network (line 2): must be true, false or \"host\", got 1"},
    {"run: a\nresources: {disk: 10}", "resources.disk (line 2): must be a size with a unit"},
    {"run: a\nresources: {disk: 2000TiB}", "resources.disk (line 2): must be at most"},
    {"run: ''", "run (line 1): must not be empty"},
    {"run: '   '", "run (line 1): must not be blank"},
    {"run: [a, b]", "run (line 1): must be a string, got a list"},
    {"run: 5", "run (line 1): must be a string, got 5 (quote it: \"5\")"},
    {"command: []", "command (line 1): must not be empty"},
    {"command: ls -l", "command (line 1): must be a list of strings (use run for a shell command)"},
    {"command: {a: b}", "command (line 1): must be a list of strings"},
    {"command: [ls, -l, 3]", "command[2] (line 1): must be a string, got 3"},
    {"command: [ls, [a]]", "command[1] (line 1): must be a string, got a list"},
    {"command: [ls, ~]", "command[1] (line 1): must be a string, got null"},
    {"command: ['', x]", "command[0] (line 1): the program must not be empty"},
    {"run: \"a\\0b\"", "run (line 1): must not contain a NUL byte"},
    {"command: [\"a\\0b\"]", "command[0] (line 1): must not contain a NUL byte"},
    // unknown fields
    {"run: x\nfoo: 1",
     "foo (line 2): unknown field (known: name, run, command, env, resources, max_runtime, "
     "max_cost, priority, group, image, executor, network, checkpoint, workdir, inputs, "
     "distributed, max_restarts, session)"},
    {"run: x\nresources: {foo: 1}",
     "resources.foo (line 2): unknown field (known: gpus, gpu_memory, gpu_models, cpus, memory, "
     "min_compute_capability, node_labels, prefer, disk, nodes, mig)"},
    {"run: x\nresources: {gpu: 1}", "resources.gpu (line 2): unknown field"},
    // name
    {"run: x\nname: [a]", "name (line 2): must be a string, got a list"},
    {"run: x\nname: 'has space'", "name (line 2): must be 1 to 128 characters"},
    // env
    {"run: x\nenv: [A]", "env (line 2): expected a mapping of NAME: value, got a list"},
    {"run: x\nenv: A=1", "env (line 2): expected a mapping of NAME: value, got \"A=1\""},
    {"run: x\nenv: {1BAD: x}", "env.1BAD (line 2): invalid variable name"},
    {"run: x\nenv: {GPUPOOL_RESTORED: 1}", "env.GPUPOOL_RESTORED (line 2): reserved variable name"},
    {"run: x\nenv: {CUDA_VISIBLE_DEVICES: '0'}", "env.CUDA_VISIBLE_DEVICES (line 2): reserved"},
    {"run: x\nenv: {A: {B: c}}",
     "env.A (line 2): must be a string, number or boolean, got a mapping"},
    {"run: x\nenv: {A: \"x\\0y\"}", "env.A (line 2): must not contain a NUL byte"},
    // resources
    {"run: x\nresources: [gpus]", "resources (line 2): expected a mapping, got a list"},
    {"run: x\nresources: 4", "resources (line 2): expected a mapping, got 4"},
    {"run: x\nresources: {gpus: -1}",
     "resources.gpus (line 2): must be a whole number of GPUs from 0 to 64 or a share of one GPU "
     "such as "
     "0.5 or \"500m\", got -1"},
    {"run: x\nresources: {gpus: 65}",
     "resources.gpus (line 2): must be a whole number of GPUs from 0 to 64 or a share of one GPU "
     "such as "
     "0.5 or \"500m\", got 65"},
    {"run: x\nresources: {gpus: 1.5}",
     "resources.gpus (line 2): a share of a GPU must be less than 1; more than one GPU must be a "
     "whole "
     "number, got 1.5"},
    {"run: x\nresources: {gpus: '1500m'}",
     "resources.gpus (line 2): a share of a GPU must be less than 1; more than one GPU must be a "
     "whole "
     "number, got \"1500m\""},
    {"run: x\nresources: {gpus: '65'}",
     "resources.gpus (line 2): must be a whole number of GPUs from 0"},
    {"run: x\nresources: {gpus: 0.0005}", "resources.gpus (line 2): at most three decimal places"},
    {"run: x\nresources: {gpus: '0.0005'}",
     "resources.gpus (line 2): invalid amount \"0.0005\": at most three decimal places"},
    {"run: x\nresources: {gpus: half}", "resources.gpus (line 2): invalid amount \"half\""},
    {"run: x\nresources: {gpus: [1]}", "resources.gpus (line 2): must be a whole number of GPUs"},
    {"run: x\nresources: {gpus: true}",
     "resources.gpus (line 2): must be a whole number of GPUs from 0 to 64 or a share of one GPU "
     "such as "
     "0.5 or \"500m\", got true"},
    {"run: x\nresources: {gpu_memory: 24XB}",
     "resources.gpu_memory (line 2): invalid size \"24XB\": unknown unit \"XB\""},
    {"run: x\nresources: {gpu_memory: 2TiB}",
     "resources.gpu_memory (line 2): must be at most 1 TiB, got 2 TiB"},
    {"run: x\nresources: {gpu_memory: -1GiB}",
     "resources.gpu_memory (line 2): invalid size \"-1GiB\": must not be negative"},
    {"run: x\nresources: {gpu_memory: 24}",
     "resources.gpu_memory (line 2): must be a size with a unit such as \"24GiB\", got 24"},
    {"run: x\nresources: {gpu_memory: '24'}",
     "resources.gpu_memory (line 2): invalid size \"24\": missing unit"},
    {"run: x\nresources: {gpu_memory: 24.5}",
     "resources.gpu_memory (line 2): must be a size with a unit"},
    {"run: x\nresources: {gpu_memory: GiB}", "resources.gpu_memory (line 2): invalid size \"GiB\""},
    {"run: x\nresources: {gpu_memory: 1.2345GiB}",
     "resources.gpu_memory (line 2): invalid size \"1.2345GiB\": at most three decimal places"},
    {"run: x\nresources: {gpu_memory: 99999999999999TiB}",
     "resources.gpu_memory (line 2): invalid size \"99999999999999TiB\": too large"},
    {"run: x\nresources: {memory: 65TiB}",
     "resources.memory (line 2): must be at most 64 TiB, got 65 TiB"},
    {"run: x\nresources: {memory: [1]}", "resources.memory (line 2): must be a size with a unit"},
    {"run: x\nresources: {memory: 16}",
     "resources.memory (line 2): must be a size with a unit such as \"24GiB\", got 16"},
    {"run: x\nresources: {gpu_models: 5}",
     "resources.gpu_models (line 2): must be a string or a list of strings, got 5"},
    {"run: x\nresources: {gpu_models: [A100, 7]}",
     "resources.gpu_models[1] (line 2): must be a string, got 7"},
    {"run: x\nresources: {gpu_models: ['']}",
     "resources.gpu_models[0] (line 2): must not be empty"},
    {"run: x\nresources: {gpu_models: ''}", "resources.gpu_models[0] (line 2): must not be empty"},
    {"run: x\nresources: {cpus: -1}",
     "resources.cpus (line 2): must be a number from 0 to 1024, got -1"},
    {"run: x\nresources: {cpus: 1025}",
     "resources.cpus (line 2): must be a number from 0 to 1024, got 1025"},
    {"run: x\nresources: {cpus: 0.0001}", "resources.cpus (line 2): at most three decimal places"},
    {"run: x\nresources: {cpus: '-1'}",
     "resources.cpus (line 2): invalid amount \"-1\": must not be negative"},
    {"run: x\nresources: {cpus: '2000'}",
     "resources.cpus (line 2): must be from 0 to 1024, got 2000"},
    {"run: x\nresources: {cpus: 'two'}", "resources.cpus (line 2): invalid amount \"two\""},
    {"run: x\nresources: {cpus: 0.5m}", "resources.cpus (line 2): invalid amount \"0.5m\""},
    {"run: x\nresources: {cpus: 1.2345}", "resources.cpus (line 2): at most three decimal places"},
    {"run: x\nresources: {cpus: [1]}",
     "resources.cpus (line 2): must be a number from 0 to 1024, got a list"},
    // max_runtime
    {"run: x\nmax_runtime: 2 hours", "max_runtime (line 2): invalid duration \"2 hours\": "},
    {"run: x\nmax_runtime: 2y",
     "max_runtime (line 2): invalid duration \"2y\": unknown unit \"y\""},
    {"run: x\nmax_runtime: 366d", "max_runtime (line 2): must be at most 365d, got 366d"},
    {"run: x\nmax_runtime: -5",
     "max_runtime (line 2): must be a number of seconds from 0 to 31536000"},
    {"run: x\nmax_runtime: '-5s'",
     "max_runtime (line 2): invalid duration \"-5s\": must not be negative"},
    {"run: x\nmax_runtime: 31536001",
     "max_runtime (line 2): must be a number of seconds from 0 to 31536000"},
    {"run: x\nmax_runtime: 0.0005", "max_runtime (line 2): at most three decimal places"},
    {"run: x\nmax_runtime: true", "max_runtime (line 2): must be a duration such as \"2h\""},
    {"run: x\nmax_runtime: [1h]", "max_runtime (line 2): must be a duration such as \"2h\""},
    {"run: x\nmax_runtime: ''", "max_runtime (line 2): invalid duration \"\": empty"},
    {"run: x\nmax_runtime: 1h30",
     "max_runtime (line 2): invalid duration \"1h30\": every part needs a unit"},
    // min_compute_capability
    {"run: x\nresources: {min_compute_capability: '8.10'}",
     "resources.min_compute_capability (line 2): must be MAJOR.MINOR with one minor digit, such as "
     "\"8.0\" or \"8.6\", got \"8.10\""},
    {"run: x\nresources: {min_compute_capability: 8.65}",
     "resources.min_compute_capability (line 2): must be MAJOR.MINOR with one minor digit"},
    {"run: x\nresources: {min_compute_capability: 'v8'}",
     "resources.min_compute_capability (line 2): must be MAJOR.MINOR"},
    {"run: x\nresources: {min_compute_capability: -8.0}",
     "resources.min_compute_capability (line 2): must be a compute capability such as \"8.0\", got "
     "-8.0"},
    {"run: x\nresources: {min_compute_capability: '0.5'}",
     "resources.min_compute_capability (line 2): must be from 1.0 to 99.9, got \"0.5\""},
    {"run: x\nresources: {min_compute_capability: [8]}",
     "resources.min_compute_capability (line 2): must be a compute capability"},
    // node_labels
    {"run: x\nresources: {node_labels: [a]}",
     "resources.node_labels (line 2): expected a mapping of label: value, got a list"},
    {"run: x\nresources: {node_labels: {zone: [a]}}",
     "resources.node_labels.zone (line 2): must be a string, got a list"},
    {"run: x\nresources: {node_labels: {zone: 1.5}}",
     "resources.node_labels.zone (line 2): must be a string, got 1.5 (quote it: \"1.5\")"},
    {"run: x\nresources: {node_labels: {'a b': c}}",
     "resources.node_labels.a b (line 2): invalid label name"},
    // prefer
    {"run: x\nresources: {prefer: [A100]}",
     "resources.prefer (line 2): expected a mapping such as {models: [A100], wait: 10m}, got a "
     "list"},
    {"run: x\nresources: {prefer: {wait: 5m}}", "resources.prefer.models (line 2): is required"},
    {"run: x\nresources: {prefer: {models: []}}",
     "resources.prefer.models (line 2): must not be empty"},
    {"run: x\nresources: {prefer: {models: [A100], wait: soon}}",
     "resources.prefer.wait (line 2): invalid duration \"soon\""},
    {"run: x\nresources: {prefer: {models: [A100], wait: 8d}}",
     "resources.prefer.wait (line 2): must be from 0s to 7d, got 8d"},
    {"run: x\nresources: {prefer: {models: [A100], for: 5m}}",
     "resources.prefer.for (line 2): unknown field (known: models, wait)"},
    {"run: x\nresources: {gpu_models: [A100], prefer: {models: [H100]}}",
     "resources.prefer.models[0] (line 2): \"H100\" is not one of resources.gpu_models"},
    // priority and group
    {"run: x\npriority: urgent",
     "priority (line 2): unknown priority \"urgent\" (one of: interactive, normal, opportunistic)"},
    {"run: x\npriority: 1", "priority (line 2): must be a string, got 1"},
    {"run: x\ngroup: 'my lab'", "group (line 2): must be 1 to 128 characters"},
    {"run: x\ngroup: [a]", "group (line 2): must be a string, got a list"},
    // checkpoint
    {"run: x\ncheckpoint: true",
     "checkpoint (line 2): expected a mapping such as {interval: 30m, grace: 60s}, got true"},
    {"run: x\ncheckpoint: {every: 5m}",
     "checkpoint.every (line 2): unknown field (known: interval, grace, signal, standby)"},
    {"run: x\ncheckpoint: {standby: yes please}",
     "checkpoint.standby (line 2): must be true or false, got \"yes please\""},
    {"run: x\ncheckpoint: {interval: 5s}",
     "checkpoint.interval (line 2): must be from 10s to 7d, got 5s"},
    {"run: x\ncheckpoint: {interval: often}", "checkpoint.interval (line 2): invalid duration"},
    {"run: x\ncheckpoint: {grace: 2h}", "checkpoint.grace (line 2): must be from 1s to 1h, got 2h"},
    {"run: x\ncheckpoint: {grace: 0}", "checkpoint.grace (line 2): must be from 1s to 1h, got 0s"},
    {"run: x\ncheckpoint: {signal: SIGSTOP}",
     "checkpoint.signal (line 2): unknown signal \"SIGSTOP\""},
    {"run: x\ncheckpoint: {signal: 10}", "checkpoint.signal (line 2): must be a string, got 10"},
    {"run: x\nworkdir: \"\"", "workdir (line 2): must not be empty"},
    {"run: x\ninputs: abc", "inputs (line 2): must be a manifest id (64 lowercase hex digits)"},
    {"run: x\ninputs: 3F9A000000000000000000000000000000000000000000000000000000000000",
     "inputs (line 2): must be a manifest id"},
    // multi-node jobs
    {"run: x\nresources: {nodes: 0}", "resources.nodes (line 2): must be from 1 to 256, got 0"},
    {"run: x\nresources: {nodes: 257}",
     "resources.nodes (line 2): must be a whole number of nodes"},
    {"run: x\nresources: {nodes: 1.5}",
     "resources.nodes (line 2): must be a whole number of nodes"},
    {"run: x\nresources: {nodes: -1}", "resources.nodes (line 2): must be from 1 to 256, got -1"},
    {"run: x\nresources: {nodes: 2, gpus: 0.5}",
     "resources.nodes (line 2): a multi-node job takes whole GPUs on each node"},
    {"run: x\nnetwork: false\nresources: {nodes: 2}",
     "network (line 2): a multi-node job needs the network"},
    {"run: x\nresources: {nodes: 2}\nenv: {MASTER_PORT: 1}",
     "env.MASTER_PORT (line 3): reserved in a multi-node torch job"},
    {"run: x\ndistributed: mpi", "distributed (line 2): must be torch or none, got \"mpi\""},
    {"run: x\nmax_restarts: 101", "max_restarts (line 2): must be a whole number from 0 to 100"},
    {"run: x\nmax_restarts: -1", "max_restarts (line 2): must be a whole number from 0 to 100"},
    {"run: x\nmax_restarts: 1.5", "max_restarts (line 2): must be a whole number from 0 to 100"},
    {"session: {kind: vnc}", "session.kind (line 1): must be shell or jupyter, got \"vnc\""},
    {"session: yes", "session (line 1): expected a mapping"},
    {"session: {ports: [0]}", "session.ports[0] (line 1): must be a TCP port from 1 to 65535"},
    {"session: {ports: 8888}", "session.ports (line 1): must be a list of TCP ports"},
    {"session: {any_port: 1}", "session.any_port (line 1): must be true or false"},
    {"session: {idle: 1m}", "session.idle (line 1): unknown field (known: kind, idle_timeout"},
    {"session: {idle_timeout: 31d}", "session.idle_timeout (line 1)"},
    {"session: {}\nresources: {nodes: 2}", "session (line 1): a session runs on one node"},
};

TEST(JobSpecFromJson, Sessions) {
  auto spec = ParseJobSpec("session: {kind: jupyter, idle_timeout: 10m, ports: [6006, 8080]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_TRUE(spec->session.has_value());
  EXPECT_EQ(spec->session->kind, SessionKind::kJupyter);
  EXPECT_EQ(spec->session->idle_timeout_ms, 600'000);
  EXPECT_EQ(spec->session->ports, (std::vector<int>{6006, 8080}));
  EXPECT_FALSE(spec->session->any_port);
  // Interactive by default, running Jupyter on the agent's socket.
  EXPECT_EQ(spec->priority, JobPriority::kInteractive);
  EXPECT_NE(spec->run.find("jupyter notebook"), std::string::npos);
  EXPECT_NE(spec->run.find("$GPUPOOL_JUPYTER_SOCKET"), std::string::npos);
  auto back = JobSpecFromJson(JobSpecToJson(*spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *spec);

  // A shell session keeps its own command and priority when it gives them;
  // idle_timeout 0 means never.
  auto shell = ParseJobSpec(
      "session: {idle_timeout: 0, any_port: true}\npriority: normal\nrun: sleep 100\n");
  ASSERT_TRUE(shell.ok()) << shell.status().ToString();
  EXPECT_EQ(shell->session->kind, SessionKind::kShell);
  EXPECT_EQ(shell->session->idle_timeout_ms, 0);
  EXPECT_TRUE(shell->session->any_port);
  EXPECT_EQ(shell->priority, JobPriority::kNormal);
  EXPECT_EQ(shell->run, "sleep 100");
  back = JobSpecFromJson(JobSpecToJson(*shell));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *shell);
  // The default idle timeout is 30 minutes.
  EXPECT_EQ(ParseJobSpec("session: {}\n")->session->idle_timeout_ms, 30 * 60'000);
  EXPECT_FALSE(JobSpecToJson(*ParseJobSpec("run: x\n")).contains("session"));
}

TEST(JobSpecFromJson, MultiNode) {
  auto spec =
      ParseJobSpec("run: x\nresources: {nodes: 4, gpus: 2}\ndistributed: none\nmax_restarts: 3\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->resources.nodes, 4);
  EXPECT_TRUE(spec->gang());
  EXPECT_EQ(spec->distributed, Distributed::kNone);
  EXPECT_EQ(spec->max_restarts, 3);
  EXPECT_EQ(spec->resources.TotalGpuMilli(), 8000);
  auto back = JobSpecFromJson(JobSpecToJson(*spec));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *spec);
  // One node, and torch, are the defaults and are not written out.
  auto single = ParseJobSpec("run: x\n");
  EXPECT_EQ(single->resources.nodes, 1);
  EXPECT_FALSE(JobSpecToJson(*single).contains("distributed"));
  EXPECT_FALSE(JobSpecToJson(*single).contains("max_restarts"));
  EXPECT_FALSE(JobSpecToJson(*single)["resources"].contains("nodes"));
  // A single-node job may set torch's variables itself.
  EXPECT_TRUE(ParseJobSpec("run: x\nenv: {MASTER_PORT: 1}\n").ok());
}

INSTANTIATE_TEST_SUITE_P(All, BadSpecTest, ::testing::ValuesIn(kBadSpecs));

TEST(JobSpecFromJson, NotAnObject) {
  EXPECT_THAT(JsonError(json::array()), HasSubstr("(root): expected a mapping, got a list"));
  EXPECT_THAT(JsonError(json("run")), HasSubstr("(root): expected a mapping, got \"run\""));
  EXPECT_THAT(JsonError(json(nullptr)), HasSubstr("(root): expected a mapping, got null"));
}

TEST(JobSpecFromJson, JsonTypesAreStrict) {
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"resources", {{"gpus", 2.5}}}}),
              HasSubstr("resources.gpus: a share of a GPU must be less than 1; more than one GPU "
                        "must be a whole number, got 2.5"));
  EXPECT_EQ(JobSpecFromJson(json{{"run", "x"}, {"resources", {{"gpus", 2.0}}}})->resources.gpus, 2);
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"resources", {{"gpus", UINT64_MAX}}}}),
              HasSubstr("resources.gpus: must be a whole number of GPUs from 0 to 64 or a share of "
                        "one GPU such as 0.5 or \"500m\", got 18446744073709551615"));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"resources", {{"cpus", 1e300}}}}),
              HasSubstr("resources.cpus: must be a number from 0 to 1024"));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"max_runtime", INT64_MAX}}),
              HasSubstr("max_runtime: must be a number of seconds"));
  EXPECT_THAT(JsonError(json{{"command", json::array({"a", nullptr})}}),
              HasSubstr("command[1]: must be a string, got null"));
}

TEST(JobSpecFromJson, LimitsOnCounts) {
  json env = json::object();
  for (int i = 0; i < 256; ++i) env["V" + std::to_string(i)] = "x";
  EXPECT_TRUE(JobSpecFromJson(json{{"run", "x"}, {"env", env}}).ok());
  for (int i = 256; i < 300; ++i) env["V" + std::to_string(i)] = "x";
  EXPECT_EQ(JsonError(json{{"run", "x"}, {"env", env}}), "env: at most 256 entries, got 300");
  EXPECT_TRUE(JobSpecFromJson(json{{"command", std::vector<std::string>(1024, "a")}}).ok());
  EXPECT_EQ(JsonError(json{{"command", std::vector<std::string>(1025, "a")}}),
            "command: at most 1024 arguments, got 1025");
  EXPECT_THAT(JsonError(json{{"run", "x"},
                             {"resources", {{"gpu_models", std::vector<std::string>(33, "T4")}}}}),
              HasSubstr("resources.gpu_models: at most 32 models, got 33"));
  EXPECT_THAT(
      JsonError(json{{"run", "x"}, {"resources", {{"gpu_models", {std::string(200, 'A')}}}}}),
      HasSubstr("resources.gpu_models[0]: at most 128 characters"));
  json labels = json::object();
  for (int i = 0; i < 65; ++i) labels["l" + std::to_string(i)] = "v";
  EXPECT_EQ(JsonError(json{{"run", "x"}, {"resources", {{"node_labels", labels}}}}),
            "resources.node_labels: at most 64 labels, got 65");
  EXPECT_THAT(JsonError(json{
                  {"run", "x"},
                  {"resources", {{"prefer", {{"models", std::vector<std::string>(33, "T4")}}}}}}),
              HasSubstr("resources.prefer.models: at most 32 models, got 33"));
}

TEST(JobSpecFromJson, LimitsOnSizes) {
  const std::string k64(64 * 1024, 'a');
  const std::string k32(32 * 1024, 'a');
  // run: 64 KiB.
  EXPECT_TRUE(JobSpecFromJson(json{{"run", k64}}).ok());
  EXPECT_EQ(JsonError(json{{"run", k64 + "b"}}), "run: at most 65536 bytes, got 65537");
  // command: 64 KiB in all, whatever the split.
  EXPECT_TRUE(JobSpecFromJson(json{{"command", {"a", k64.substr(1)}}}).ok());
  EXPECT_EQ(JsonError(json{{"command", {"a", k64}}}),
            "command: at most 65536 bytes in all arguments together, got 65537");
  EXPECT_EQ(JsonError(json{{"command", std::vector<std::string>(1000, std::string(100, 'x'))}}),
            "command: at most 65536 bytes in all arguments together, got 100000");
  // env: 32 KiB per value, 256 KiB in all.
  EXPECT_TRUE(JobSpecFromJson(json{{"run", "x"}, {"env", {{"A", k32}}}}).ok());
  EXPECT_EQ(JsonError(json{{"run", "x"}, {"env", {{"A", k32 + "b"}}}}),
            "env.A: at most 32768 bytes, got 32769");
  json env = json::object();
  for (int i = 0; i < 9; ++i) env["V" + std::to_string(i)] = k32;
  EXPECT_EQ(JsonError(json{{"run", "x"}, {"env", env}}),
            "env: at most 262144 bytes in names and values together, got 294930");
  // name and group: 128 characters.
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"name", std::string(129, 'n')}}),
              HasSubstr("name: must be 1 to 128 characters"));
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"group", std::string(129, 'g')}}),
              HasSubstr("group: must be 1 to 128 characters"));
  // Labels: names 128 characters (named by their start), values 256.
  EXPECT_EQ(JsonError(json{{"run", "x"},
                           {"resources", {{"node_labels", {{std::string(200, 'k'), "v"}}}}}}),
            "resources.node_labels: label name \"" + std::string(64, 'k') +
                "...\" is 200 characters long, at most 128");
  EXPECT_THAT(JsonError(json{{"run", "x"},
                             {"resources", {{"node_labels", {{"k", std::string(257, 'v')}}}}}}),
              HasSubstr("resources.node_labels.k: at most 256 characters"));
  EXPECT_EQ(JsonError(json{{"run", "x"}, {"workdir", std::string(4097, 'w')}}),
            "workdir: at most 4096 bytes, got 4097");
  EXPECT_EQ(JsonError(json{{"run", "x"}, {"workdir", std::string("a\0b", 3)}}),
            "workdir: must not contain a NUL byte");
  EXPECT_THAT(JsonError(json{{"run", "x"}, {"image", "docker://" + std::string(2000, 'i')}}),
              HasSubstr("image: "));
}

// The same limits hold for specs built in memory (gpupool submit -- cmd).
TEST(JobSpecFromJson, StoredLimitsAcceptWhatEarlierReleasesAccepted) {
  json env = json::object();
  for (int i = 0; i < 300; ++i) env["V" + std::to_string(i)] = std::string(40 * 1024, 'x');
  json spec = {{"run", std::string(100 * 1024, 'r')}, {"env", env}};
  EXPECT_FALSE(JobSpecFromJson(spec).ok());
  auto stored = JobSpecFromJson(spec, kStoredLimits);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->env.size(), 300u);
  env["V300"] = "one too many";
  for (int i = 301; i <= 1024; ++i) env["V" + std::to_string(i)] = "";
  EXPECT_EQ(JobSpecFromJson(json{{"run", "x"}, {"env", env}}, kStoredLimits).status().message(),
            "env: at most 1024 entries, got 1025");
}

TEST(ValidateJobSpec, LimitsOnSizes) {
  auto error = [](void (*mutate)(JobSpec&)) {
    JobSpec s;
    s.name = "job";
    s.group = "default";
    s.run = "x";
    mutate(s);
    Status st = ValidateJobSpec(s);
    EXPECT_FALSE(st.ok());
    return st.message();
  };
  EXPECT_EQ(error([](JobSpec& s) { s.run = std::string(70'000, 'r'); }),
            "run: at most 65536 bytes, got 70000");
  EXPECT_EQ(error([](JobSpec& s) {
              s.run.clear();
              s.command.assign(2000, "a");
            }),
            "command: at most 1024 arguments, got 2000");
  EXPECT_EQ(error([](JobSpec& s) {
              s.run.clear();
              s.command = {"a", std::string(70'000, 'c')};
            }),
            "command: at most 65536 bytes in all arguments together, got 70001");
  EXPECT_EQ(error([](JobSpec& s) {
              for (int i = 0; i < 300; ++i) s.env["V" + std::to_string(i)] = "x";
            }),
            "env: at most 256 entries, got 300");
  EXPECT_EQ(error([](JobSpec& s) { s.env["A"] = std::string(40'000, 'v'); }),
            "env.A: at most 32768 bytes, got 40000");
}

// YAML specs go through the same checks, with the line.
TEST(ParseJobSpec, LimitsOnSizes) {
  EXPECT_THAT(ParseError("run: " + std::string(70'000, 'r') + "\n"),
              HasSubstr("run (line 1): at most 65536 bytes, got 70000"));
  std::string env = "run: x\nenv:\n";
  for (int i = 0; i < 257; ++i) env += "  V" + std::to_string(i) + ": x\n";
  EXPECT_THAT(ParseError(env), HasSubstr("env (line 2): at most 256 entries, got 257"));
  EXPECT_THAT(ParseError("run: x\n" + std::string(2 << 20, '#')), HasSubstr("spec too large"));
}

// ---------------------------------------------------------------------------
// ValidateJobSpec on specs built directly.

TEST(ValidateJobSpec, AcceptsBasic) { EXPECT_TRUE(ValidateJobSpec(Basic()).ok()); }

TEST(ValidateJobSpec, RejectsBadStructs) {
  struct Case {
    void (*mutate)(JobSpec&);
    const char* message;
  };
  const Case cases[] = {
      {[](JobSpec& s) { s.name.clear(); }, "name: must be 1 to 128 characters"},
      {[](JobSpec& s) { s.run.clear(); }, "run/command: one of run or command is required"},
      {[](JobSpec& s) { s.command = {"ls"}; }, "run/command: give run or command, not both"},
      {[](JobSpec& s) { s.executor = "vm"; }, "executor: unknown executor \"vm\""},
      {[](JobSpec& s) { s.image = "docker://"; }, "image: image \"docker://\""},
      {[](JobSpec& s) { s.resources.gpus = -1; },
       "resources.gpus: must be a whole number of GPUs from 0 to 64 or a share of one GPU such "
       "as 0.5 or \"500m\", got -1"},
      {[](JobSpec& s) { s.resources.gpus = 65; }, "resources.gpus: must be a whole number"},
      {[](JobSpec& s) { s.resources.gpu_milli = 1000; },
       "resources.gpus: a share of a GPU must be from 0.001 to 0.999 (1m to 999m), got 1000m"},
      {[](JobSpec& s) {
         s.resources.gpus = 1;
         s.resources.gpu_milli = 500;
       },
       "resources.gpus: either whole GPUs or a share of one GPU, not both"},
      {[](JobSpec& s) { s.resources.min_compute_capability = 5; },
       "resources.min_compute_capability: must be from 1.0 to 99.9"},
      {[](JobSpec& s) {
         s.resources.node_labels = {{"bad key", "x"}};
       },
       "resources.node_labels.bad key: invalid label name"},
      {[](JobSpec& s) { s.resources.prefer_wait_ms = 1000; },
       "resources.prefer.models: is required with resources.prefer.wait"},
      {[](JobSpec& s) {
         s.resources.gpu_models = {"A100"};
         s.resources.preferred_models = {"T4"};
         s.resources.prefer_wait_ms = 1000;
       },
       "resources.prefer.models[0]: \"T4\" is not one of resources.gpu_models"},
      {[](JobSpec& s) { s.group = ""; }, "group: must be 1 to 128 characters"},
      {[](JobSpec& s) { s.priority = static_cast<JobPriority>(7); },
       "priority: must be interactive, normal or opportunistic"},
      {[](JobSpec& s) {
         s.checkpoint = CheckpointSpec{1000, 30'000, "SIGUSR1"};
       },
       "checkpoint.interval: must be from 10s to 7d, got 1s"},
      {[](JobSpec& s) {
         s.checkpoint = CheckpointSpec{0, 0, "SIGUSR1"};
       },
       "checkpoint.grace: must be from 1s to 1h, got 0s"},
      {[](JobSpec& s) {
         s.checkpoint = CheckpointSpec{0, 30'000, "SIGKILL"};
       },
       "checkpoint.signal: unknown signal \"SIGKILL\" (one of: none, SIGUSR1"},
      {[](JobSpec& s) { s.resources.gpu_memory_mib = -1; },
       "resources.gpu_memory: must not be negative"},
      {[](JobSpec& s) { s.resources.gpu_memory_mib = (int64_t{1} << 20) + 1; },
       "resources.gpu_memory: must be at most 1 TiB"},
      {[](JobSpec& s) { s.resources.memory_mib = -5; }, "resources.memory: must not be negative"},
      {[](JobSpec& s) { s.resources.cpu_milli = -1; }, "resources.cpus: must be from 0 to 1024"},
      {[](JobSpec& s) { s.resources.cpu_milli = 1'024'001; },
       "resources.cpus: must be from 0 to 1024, got 1024.001"},
      {[](JobSpec& s) {
         s.resources.gpu_models = {"A100", " "};
       },
       "resources.gpu_models[1]: must not be empty"},
      {[](JobSpec& s) { s.max_runtime_ms = -1; }, "max_runtime: must not be negative"},
      {[](JobSpec& s) { s.max_runtime_ms = int64_t{366} * 86'400'000; },
       "max_runtime: must be at most 365d"},
      {[](JobSpec& s) { s.env["GPUPOOL_X"] = "1"; }, "env.GPUPOOL_X: reserved variable name"},
      {[](JobSpec& s) { s.env["A B"] = "1"; }, "env.A B: invalid variable name"},
      {[](JobSpec& s) { s.env["A"] = std::string("x\0y", 3); }, "env.A: must not contain a NUL"},
      {[](JobSpec& s) { s.env["A"] = std::string(200'000, 'x'); }, "env.A: at most"},
      {[](JobSpec& s) { s.env["A"] = "\xff"; }, "env.A: must be valid UTF-8"},
      {[](JobSpec& s) { s.run = "echo \xc3"; }, "run: must be valid UTF-8"},
      {[](JobSpec& s) { s.resources.gpu_models = {"\x80"}; },
       "resources.gpu_models[0]: must be valid UTF-8"},
      {[](JobSpec& s) {
         s.run.clear();
         s.command = {"a", std::string("b\0", 2)};
       },
       "command[1]: must not contain a NUL byte"},
  };
  for (const Case& c : cases) {
    JobSpec s = Basic();
    c.mutate(s);
    Status st = ValidateJobSpec(s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(st.message(), HasSubstr(c.message));
  }
}

// ---------------------------------------------------------------------------
// Canonical JSON and round trips.

TEST(JobSpecToJson, CanonicalForm) {
  JobSpec s = Basic();
  s.env = {{"A", "1"}};
  s.resources.gpus = 1;
  s.resources.gpu_memory_mib = 80 * 1024;
  s.resources.gpu_models = {"A100"};
  s.resources.cpu_milli = 500;
  s.resources.memory_mib = 1536;
  s.max_runtime_ms = 5'400'000;
  json expected = json::parse(R"({
    "name": "train", "run": "python train.py", "env": {"A": "1"},
    "resources": {"gpus": 1, "gpu_memory": "80 GiB", "gpu_models": ["A100"], "cpus": "0.5",
                  "memory": "1.5 GiB"},
    "max_runtime": "1h30m"})");
  EXPECT_EQ(JobSpecToJson(s), expected);
}

TEST(JobSpecToJson, OmitsZeroAndEmpty) {
  JobSpec s;
  s.name = "n";
  s.command = {"ls", "-l"};
  EXPECT_EQ(JobSpecToJson(s), json::parse(R"({"name": "n", "command": ["ls", "-l"],
                                               "resources": {"gpus": 0}})"));
}

TEST(JobSpecToJson, ExactWhenDisplayFormIsRounded) {
  JobSpec s = Basic();
  s.resources.memory_mib = 1500;      // "1.5 GiB" would be 1536
  s.resources.gpu_memory_mib = 1025;  // "1.0 GiB" would be 1024
  s.max_runtime_ms = 61'500;          // "1m1s" would lose the half second
  json j = JobSpecToJson(s);
  EXPECT_EQ(j["resources"]["memory"], "1500 MiB");
  EXPECT_EQ(j["resources"]["gpu_memory"], "1025 MiB");
  EXPECT_EQ(j["max_runtime"], "1m1.5s");
  ExpectRoundTrip(s);
}

TEST(JobSpecRoundTrip, Basic) { ExpectRoundTrip(Basic()); }

TEST(JobSpecRoundTrip, EveryField) {
  JobSpec s;
  s.name = "a.b_c-1";
  s.command = {"python", "-c", "print('hi \"there\"')", "", "ünïcode"};
  s.env = {{"EMPTY", ""}, {"NUM", "007"}, {"SPACES", "  a  "}, {"NL", "a\nb"}};
  s.resources.gpus = 64;
  s.resources.gpu_memory_mib = int64_t{1} << 20;
  s.resources.gpu_models = {"A100", "H100 80GB"};
  s.resources.cpu_milli = 1'024'000;
  s.resources.memory_mib = int64_t{64} << 20;
  s.resources.min_compute_capability = 999;
  s.resources.node_labels = {{"zone", "eu-1"}, {"a/b.c_d-e", ""}};
  s.resources.preferred_models = {"H100 80GB"};
  s.resources.prefer_wait_ms = 7LL * 86'400'000;
  s.priority = JobPriority::kOpportunistic;
  s.group = std::string(128, 'g');
  s.checkpoint = CheckpointSpec{7LL * 86'400'000, 3'600'000, "SIGWINCH"};
  s.max_runtime_ms = int64_t{365} * 86'400'000;
  s.image = "docker://ghcr.io/lab/train:1.2";
  s.executor = "podman";
  s.network = NetworkMode::kNone;
  s.resources.disk_mib = 50 * 1024;
  ExpectRoundTrip(s);
  s.network = NetworkMode::kHost;
  ExpectRoundTrip(s);
}

TEST(JobSpecFromJson, ImageJobsMayLeaveOutTheCommand) {
  auto spec = ParseJobSpec(
      "image: oci:/srv/layout:v1\nexecutor: sandbox\nnetwork: false\n"
      "resources: {disk: 20GiB}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->image, "oci:/srv/layout:v1");
  EXPECT_EQ(spec->executor, "sandbox");
  EXPECT_EQ(spec->network, NetworkMode::kNone);
  EXPECT_EQ(spec->resources.disk_mib, 20 * 1024);
  EXPECT_TRUE(spec->run.empty());
  EXPECT_TRUE(spec->command.empty());
  // The defaults: the host system, the node's executor, with network.
  auto plain = ParseJobSpec("run: echo hi");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->image, "");
  EXPECT_EQ(plain->executor, "");
  EXPECT_EQ(plain->network, NetworkMode::kPrivate);
  auto yes = ParseJobSpec("run: echo hi\nnetwork: true");
  ASSERT_TRUE(yes.ok());
  EXPECT_EQ(yes->network, NetworkMode::kPrivate);
  auto host = ParseJobSpec("run: echo hi\nnetwork: host");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->network, NetworkMode::kHost);
  EXPECT_EQ(JobSpecToJson(*host)["network"], "host");
}

TEST(JobSpecRoundTrip, Memories) {
  for (int64_t mib :
       {int64_t{1}, int64_t{2}, int64_t{512}, int64_t{1000}, int64_t{1023}, int64_t{1024},
        int64_t{1025}, int64_t{1500}, int64_t{1536}, int64_t{1600}, int64_t{15'360},
        int64_t{81'559}, int64_t{81'920}, int64_t{1} << 20, (int64_t{1} << 20) - 1,
        (int64_t{1} << 20) + 512, int64_t{64} << 20, (int64_t{64} << 20) - 1}) {
    SCOPED_TRACE(mib);
    JobSpec s = Basic();
    s.resources.memory_mib = mib;
    s.resources.gpu_memory_mib = std::min<int64_t>(mib, int64_t{1} << 20);
    ExpectRoundTrip(s);
  }
}

TEST(JobSpecRoundTrip, Durations) {
  for (int64_t ms :
       {int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{1500}, int64_t{1550}, int64_t{59'999},
        int64_t{60'000}, int64_t{61'500}, int64_t{3'600'000}, int64_t{5'400'000},
        int64_t{86'400'000}, int64_t{86'405'000}, int64_t{90'061'001},
        int64_t{365} * 86'400'000 - 1, int64_t{365} * 86'400'000}) {
    SCOPED_TRACE(ms);
    JobSpec s = Basic();
    s.max_runtime_ms = ms;
    ExpectRoundTrip(s);
  }
}

TEST(JobSpecRoundTrip, Cpus) {
  for (int64_t milli : {1, 10, 100, 250, 500, 999, 1000, 1001, 1500, 123'456, 1'024'000}) {
    SCOPED_TRACE(milli);
    JobSpec s = Basic();
    s.resources.cpu_milli = milli;
    ExpectRoundTrip(s);
  }
}

TEST(JobSpecRoundTrip, FromParsedYaml) {
  JobSpec s = MustParse(R"(
name: x
command: [a, b]
env: {K: v}
resources: {gpus: 3, gpu_memory: 1.5G, cpus: 0.125, memory: 3Ki, gpu_models: t4}
max_runtime: 1d1s
)");
  ExpectRoundTrip(s);
}

}  // namespace
}  // namespace gpupool

namespace gpupool {
namespace {

TEST(ParseJobSpec, MigAsksForOneInstance) {
  JobSpec s = MustParse("run: x\nresources:\n  mig: 3g.40gb\n");
  EXPECT_EQ(s.resources.mig.slices, 3);
  EXPECT_EQ(s.resources.mig.memory_gb, 40);
  EXPECT_EQ(s.resources.gpus, 1);  // the instance is the job's one GPU
  EXPECT_TRUE(s.resources.WantsMig());
  ExpectRoundTrip(s);
  EXPECT_EQ(JobSpecToJson(s)["resources"]["mig"], "3g.40gb");
  // gpus: 1 may be said as well.
  EXPECT_EQ(MustParse("run: x\nresources: {gpus: 1, mig: 3g.40gb}\n").resources, s.resources);
  EXPECT_FALSE(MustParse("run: x\nresources: {gpus: 1}\n").resources.WantsMig());
}

TEST(ParseJobSpec, MigProfileIsStrict) {
  for (const char* bad :
       {"3g", "3g.40", "3g40gb", "3G.40GB", " 3g.40gb", "3g.40gb ", "0g.10gb", "1g.0gb", "03g.40gb",
        "65g.10gb", "1g.5000gb", "1g.10gb+me", "2c.3g.20gb", "-1g.10gb", "1.5g.10gb", ""}) {
    std::string spec = std::string("run: x\nresources:\n  mig: \"") + bad + "\"\n";
    std::string e = ParseError(spec);
    EXPECT_THAT(e, HasSubstr("resources.mig")) << bad;
    EXPECT_THAT(e, HasSubstr("invalid MIG profile")) << bad;
  }
  EXPECT_THAT(ParseError("run: x\nresources: {mig: 3}\n"), HasSubstr("must be a string"));
}

TEST(ParseJobSpec, MigIsNotCombinedWithOtherGpuAmounts) {
  EXPECT_THAT(ParseError("run: x\nresources: {mig: 3g.40gb, gpus: 2}\n"),
              HasSubstr("resources.mig (line 2): asks for exactly one MIG instance per node; it "
                        "cannot be combined with gpus: 2"));
  EXPECT_THAT(ParseError("run: x\nresources: {mig: 3g.40gb, gpus: 0}\n"),
              HasSubstr("combined with gpus: 0"));
  EXPECT_THAT(
      ParseError("run: x\nresources: {mig: 3g.40gb, gpus: 0.5}\n"),
      HasSubstr(
          "resources.mig (line 2): a MIG instance is taken whole; it cannot be combined with a "
          "share of a GPU (gpus: 0.5)"));
  EXPECT_THAT(ParseError("run: x\nresources: {mig: 3g.40gb, gpu_memory: 20GiB}\n"),
              HasSubstr("resources.mig (line 2): the profile names the instance's memory; it "
                        "cannot be combined with gpu_memory"));
  // A spec built in code is held to the same.
  JobSpec s = MustParse("run: x\nresources: {mig: 1g.10gb}\n");
  s.resources.gpus = 3;
  EXPECT_THAT(ValidateJobSpec(s).message(), HasSubstr("resources.mig"));
  s.resources.gpus = 1;
  s.resources.gpu_memory_mib = 1024;
  EXPECT_THAT(ValidateJobSpec(s).message(), HasSubstr("gpu_memory"));
}

}  // namespace
}  // namespace gpupool

namespace gpupool {
namespace {

TEST(JobSpecTest, MaxCostIsCreditsExactly) {
  auto spec = ParseJobSpec("run: train\nmax_cost: 12.5\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->max_cost_micros, 12'500'000);
  EXPECT_EQ(JobSpecToJson(*spec)["max_cost"], "12.50");
  EXPECT_EQ(ParseJobSpec("run: train\nmax_cost: \"0.000001\"\n")->max_cost_micros, 1);
  EXPECT_EQ(ParseJobSpec("run: train\nmax_cost: 50\n")->max_cost_micros, 50'000'000);
  for (const char* bad : {"max_cost: 0", "max_cost: -1", "max_cost: abc", "max_cost: [1]",
                          "max_cost: 1e30", "max_cost: 0.0000001"}) {
    auto r = ParseJobSpec(std::string("run: train\n") + bad + "\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("max_cost"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace gpupool
