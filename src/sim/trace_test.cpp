#include "sim/trace.h"

#include <gtest/gtest.h>

namespace gpupool::sim {
namespace {

const std::string kHeader =
    R"({"type":"meta","format":"gpupool-sim-trace/1","seed":7,"generator":"hand"})"
    "\n"
    R"({"type":"group","name":"vision","weight":2,"guaranteed_gpus":8})"
    "\n"
    R"({"type":"group","name":"nlp"})"
    "\n"
    R"({"type":"node","name":"v-1","owner_group":"vision","gpus":4,"gpu_model":"A100",)"
    R"("gpu_memory":"80GiB","compute_capability":"8.0","cpus":64,"memory":"512GiB","speed":2.0})"
    "\n";

// Line 5 onwards is the caller's.
std::string WithLine(const std::string& line) { return kHeader + line + "\n"; }

std::string ErrorOf(const std::string& text) {
  auto r = ParseTrace("trace.jsonl", text);
  EXPECT_FALSE(r.ok()) << "parsed: " << text;
  return r.ok() ? "" : r.status().message();
}

TEST(TraceParse, ReadsEveryKindOfLine) {
  const std::string text =
      WithLine(
          R"({"type":"job","id":3,"submit":"1h","group":"nlp","class":"interactive","gpus":0.5,)"
          R"("gpu_memory":"12GiB","cpus":4,"memory":"16GiB","duration":1800})") +
      R"({"type":"job","id":4,"submit":90.5,"group":"vision","gpus":4,"nodes":2,)"
      R"("gpu_models":["A100"],"duration":"2h","runtime_limit":"4h","checkpoint_interval":"30m"})"
      "\n\n" +
      R"({"type":"node_leave","node":"v-1","at":3600})"
      "\n" +
      R"({"type":"node_return","node":"v-1","at":"2h"})"
      "\n";
  auto r = ParseTrace("trace.jsonl", text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Trace& t = *r;
  EXPECT_EQ(t.meta.seed, 7u);
  EXPECT_EQ(t.meta.generator, "hand");
  ASSERT_EQ(t.groups.size(), 2u);
  EXPECT_EQ(t.groups[0].weight, 2);
  EXPECT_EQ(t.groups[0].guaranteed_milli, 8000);
  EXPECT_FALSE(t.groups[1].guaranteed_milli.has_value());
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.nodes[0].gpu_memory_mib, 80 * 1024);
  EXPECT_EQ(t.nodes[0].compute_capability, 80);
  EXPECT_EQ(t.nodes[0].cpu_milli, 64000);
  EXPECT_EQ(t.nodes[0].memory_mib, 512 * 1024);
  EXPECT_DOUBLE_EQ(t.nodes[0].speed, 2.0);
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].priority, sched::PriorityClass::kInteractive);
  EXPECT_EQ(t.jobs[0].gpus, 0);
  EXPECT_EQ(t.jobs[0].gpu_milli, 500);
  EXPECT_EQ(t.jobs[0].submit_ms, 3600 * 1000);
  EXPECT_EQ(t.jobs[0].duration_ms, 1800 * 1000);
  EXPECT_EQ(t.jobs[1].submit_ms, 90500);
  EXPECT_EQ(t.jobs[1].gpus, 4);
  EXPECT_EQ(t.jobs[1].nodes, 2);
  EXPECT_EQ(t.jobs[1].GpuMilli(), 8000);
  EXPECT_EQ(t.jobs[1].priority, sched::PriorityClass::kNormal);
  EXPECT_EQ(t.jobs[1].runtime_limit_ms, 4 * 3600 * 1000);
  EXPECT_EQ(t.jobs[1].checkpoint_interval_ms, 30 * 60 * 1000);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[1].kind, NodeEventKind::kReturn);
  EXPECT_EQ(t.events[1].at_ms, 7200 * 1000);
}

TEST(TraceParse, FormatReadsBackEqual) {
  auto r = ParseTrace(
      "t", WithLine(R"({"type":"job","id":1,"submit":0.25,"group":"nlp","gpus":0.125,)"
                    R"("gpu_memory":"1536MiB","duration":61.5,"checkpoint_interval":600})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto again = ParseTrace("t", FormatTrace(*r));
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << FormatTrace(*r);
  EXPECT_EQ(*again, *r);
  EXPECT_TRUE(ValidateTrace(*r).ok());
}

TEST(TraceParse, ErrorsNameTheLineAndTheField) {
  // Unknown field.
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1,)"
                             R"("duration":5,"colour":"red"})")),
            "trace.jsonl:5: colour: unknown field");
  // Wrong type.
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":"1","submit":0,"group":"nlp","gpus":1,)"
                             R"("duration":5})")),
            "trace.jsonl:5: id: must be an integer");
  EXPECT_EQ(ErrorOf(WithLine(
                R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":"1","duration":5})")),
            "trace.jsonl:5: gpus: must be a number");
  // Bad units.
  std::string e = ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1,)"
                                   R"("gpu_memory":"12XB","duration":5})"));
  EXPECT_EQ(e.rfind("trace.jsonl:5: gpu_memory: ", 0), 0u) << e;
  EXPECT_NE(e.find("unknown unit"), std::string::npos) << e;
  e = ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1,)"
                       R"("memory":"4096","duration":5})"));
  EXPECT_EQ(e.rfind("trace.jsonl:5: memory: ", 0), 0u) << e;
  EXPECT_NE(e.find("needs a unit"), std::string::npos) << e;
  e = ErrorOf(WithLine(
      R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1,"duration":"5 parsecs"})"));
  EXPECT_EQ(e.rfind("trace.jsonl:5: duration: ", 0), 0u) << e;
  // Values out of range and bad references.
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1.5,)"
                             R"("duration":5})")),
            "trace.jsonl:5: gpus: a share must be less than 1; more than one GPU must be whole");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":0.0001,)"
                             R"("duration":5})")),
            "trace.jsonl:5: gpus: at most three decimal places");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"bio","gpus":1,)"
                             R"("duration":5})")),
            "trace.jsonl:5: group: unknown group 'bio' (declare it on an earlier line)");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1,)"
                             R"("class":"urgent","duration":5})")),
            "trace.jsonl:5: class: \"urgent\" is not interactive, normal or opportunistic");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":-3,"group":"nlp","gpus":1,)"
                             R"("duration":5})")),
            "trace.jsonl:5: submit: must not be negative");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":0.5,)"
                             R"("nodes":2,"duration":5})")),
            "trace.jsonl:5: nodes: a gang must ask for whole GPUs");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"job","id":1,"submit":0,"group":"nlp","gpus":1})")),
            "trace.jsonl:5: duration: is required");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"node","name":"n-2","gpus":2,"gpu_model":"T4",)"
                             R"("gpu_memory":"16GiB","compute_capability":"7","cpus":8,)"
                             R"("memory":"64GiB"})")),
            "trace.jsonl:5: compute_capability: \"7\" is not MAJOR.MINOR, such as \"8.0\"");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"node","name":"v-1","gpus":2,"gpu_model":"T4",)"
                             R"("gpu_memory":"16GiB","cpus":8,"memory":"64GiB"})")),
            "trace.jsonl:5: name: node 'v-1' is declared twice");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"node_leave","node":"zz","at":5})")),
            "trace.jsonl:5: node: unknown node 'zz' (declare it on an earlier line)");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"cluster"})")),
            "trace.jsonl:5: type: \"cluster\" is not one of meta, group, node, job, node_leave, "
            "node_return");
  // Not JSON, not an object, a late meta line.
  e = ErrorOf(WithLine(R"({"type":"job",)"));
  EXPECT_EQ(e.rfind("trace.jsonl:5: invalid JSON", 0), 0u) << e;
  EXPECT_EQ(ErrorOf(WithLine("[1,2]")), "trace.jsonl:5: each line must be a JSON object");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"meta","format":"gpupool-sim-trace/1"})")),
            "trace.jsonl:5: type: a meta line must come first");
  EXPECT_EQ(ErrorOf(R"({"type":"meta","format":"v0"})"),
            "trace.jsonl:1: format: \"v0\" is not gpupool-sim-trace/1");
}

TEST(TraceParse, DuplicateJobIdNamesTheSecondLine) {
  const std::string job = R"({"type":"job","id":9,"submit":0,"group":"nlp","gpus":1,"duration":5})";
  EXPECT_EQ(ErrorOf(kHeader + job + "\n\n" + job + "\n"), "trace.jsonl:7: id: job 9 appears twice");
}

TEST(TraceParse, ProviderEventsMustAlternate) {
  // Listed out of order but alternating in time: fine.
  auto ok = ParseTrace("trace.jsonl", WithLine(R"({"type":"node_return","node":"v-1","at":20})") +
                                          R"({"type":"node_leave","node":"v-1","at":10})"
                                          "\n");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"node_return","node":"v-1","at":20})")),
            "trace.jsonl:5: type: node 'v-1' returns without having left");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"node_leave","node":"v-1","at":10})") +
                    R"({"type":"node_leave","node":"v-1","at":30})"
                    "\n"),
            "trace.jsonl:6: type: node 'v-1' leaves again without having returned");
  EXPECT_EQ(ErrorOf(WithLine(R"({"type":"node_leave","node":"v-1","at":10})") +
                    R"({"type":"node_return","node":"v-1","at":10})"
                    "\n"),
            "trace.jsonl:6: at: node 'v-1' has two events at the same time");
}

TEST(TraceParse, OwnedGpus) {
  auto r = ParseTrace("t", kHeader);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(OwnedGpuMilli(*r, "vision"), 4000);
  EXPECT_EQ(OwnedGpuMilli(*r, "nlp"), 0);
}

}  // namespace
}  // namespace gpupool::sim
