#include "proto/messages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gpupool::proto {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MessagesTest, EnvelopeRoundTrip) {
  Envelope e{1, 7, 3, "logs", "{\"x\":1}"};
  auto d = DecodeEnvelope(EncodeEnvelope(e));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->seq, 7);
  EXPECT_EQ(d->ack, 3);
  EXPECT_EQ(d->type, "logs");
  EXPECT_EQ(d->body, "{\"x\":1}");
}

TEST(MessagesTest, EnvelopeErrorsNameTheField) {
  EXPECT_THAT(DecodeEnvelope("not json").status().message(), HasSubstr("invalid JSON"));
  EXPECT_THAT(DecodeEnvelope("[1]").status().message(), HasSubstr("must be a JSON object"));
  EXPECT_THAT(
      DecodeEnvelope(R"({"v":1,"seq":"x","ack":0,"type":"a","body":{}})").status().message(),
      HasSubstr("seq: must be an integer"));
  EXPECT_THAT(DecodeEnvelope(R"({"v":2,"seq":1,"ack":0,"type":"a","body":{}})").status().message(),
              HasSubstr("unsupported protocol version 2"));
  EXPECT_THAT(DecodeEnvelope(R"({"v":1,"seq":1,"ack":0,"type":"a","body":{},"extra":1})")
                  .status()
                  .message(),
              HasSubstr("extra: unknown field"));
  EXPECT_THAT(DecodeEnvelope(R"({"v":1,"seq":1,"ack":0,"type":"a"})").status().message(),
              HasSubstr("body: is required"));
}

TEST(MessagesTest, HelloRoundTrip) {
  Hello h;
  h.node_name = "lab-a";
  h.agent_instance = "i-1";
  h.agent_version = "0.1.0";
  h.last_server_seq = 12;
  h.cpu_milli = 8000;
  h.memory_mib = 32768;
  h.gpus = {{0, "GPU-1", "NVIDIA T4", 15360, 7, 5, false, /*minor_number=*/2},
            {1, "GPU-SIM-2", "A100", 81920, 8, 0, true, /*minor_number=*/-1}};
  h.driver_version = "550.54.15";
  h.cuda_version = "12.4";
  h.labels = {{"room", "b12"}};
  h.owner_group = "vision";
  h.tasks = {{"4.1", TaskState::kRunning, 0, 0, "", 100},
             {"5.2", TaskState::kExited, 3, 0, "", 200},
             {"6.1", TaskState::kExited, 137, 9, "", 300},
             {"7.1", TaskState::kFailed, 0, 0, "max_runtime 1s exceeded", 400}};
  auto d = DecodeHello(Encode(h));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, h);
}

TEST(MessagesTest, HelloRejectsBadGpu) {
  std::string body =
      R"({"node_name":"a","agent_instance":"i","last_server_seq":0,"gpus":[{"index":0,"uuid":"G","name":"T4","memory_mib":1},{"index":1,"uuid":"H","name":"T4","memory_mib":"lots"}]})";
  EXPECT_THAT(DecodeHello(body).status().message(),
              HasSubstr("body.gpus[1].memory_mib: must be an integer"));
}

TEST(MessagesTest, HelloGpuMinorNumberIsOptional) {
  // Agents older than the field do not send it: not known.
  std::string body =
      R"({"node_name":"a","agent_instance":"i","last_server_seq":0,"gpus":[{"index":0,"uuid":"G","name":"T4","memory_mib":1}]})";
  auto d = DecodeHello(body);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->gpus.size(), 1u);
  EXPECT_EQ(d->gpus[0].minor_number, -1);

  std::string bad =
      R"({"node_name":"a","agent_instance":"i","last_server_seq":0,"gpus":[{"index":0,"uuid":"G","name":"T4","memory_mib":1,"minor_number":-2}]})";
  EXPECT_THAT(DecodeHello(bad).status().message(), HasSubstr("body.gpus[0].minor_number: must be"));
}

TEST(MessagesTest, HelloCarriesMigInstances) {
  Hello h;
  h.node_name = "lab-a";
  h.agent_instance = "i-1";
  GpuInfo mig{0, "MIG-1", "NVIDIA A100-SXM4-80GB", 40192, 8, 0, false, 3};
  mig.parent_uuid = "GPU-1";
  mig.mig_profile = "3g.40gb";
  mig.mig_slices = 3;
  mig.mig_gpu_instance = 2;
  mig.mig_compute_instance = 0;
  h.gpus = {mig, {1, "GPU-2", "NVIDIA T4", 15360, 7, 5, false, 1}};
  auto d = DecodeHello(Encode(h));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, h);
  // A whole GPU is written without the MIG fields, as older agents did.
  EXPECT_EQ(Encode(h).find("parent_uuid", Encode(h).find("GPU-2")), std::string::npos);

  // A hostile agent's MIG claims are checked like the rest.
  std::string head =
      R"({"node_name":"a","agent_instance":"i","last_server_seq":0,"gpus":[{"index":0,"uuid":"M","name":"A100","memory_mib":1,"parent_uuid":"G")";
  EXPECT_THAT(DecodeHello(head + R"(,"mig_profile":"huge","mig_slices":1}]})").status().message(),
              HasSubstr("body.gpus[0].mig_profile: must be a MIG profile"));
  EXPECT_THAT(
      DecodeHello(head + R"(,"mig_profile":"1g.10gb","mig_slices":100}]})").status().message(),
      HasSubstr("body.gpus[0].mig_slices"));
  EXPECT_THAT(DecodeHello(head + R"(,"mig_slices":1}]})").status().message(),
              HasSubstr("body.gpus[0].mig_profile"));
}

TEST(MessagesTest, TaskReportValidation) {
  EXPECT_THAT(DecodeTaskReport(R"({"attempt_id":"4.1","state":"weird"})").status().message(),
              HasSubstr("body.state: must be one of"));
  EXPECT_THAT(DecodeTaskReport(R"({"attempt_id":"4","state":"running"})").status().message(),
              HasSubstr("body.attempt_id: invalid attempt id"));
  EXPECT_THAT(DecodeTaskReport(R"({"attempt_id":"4.1","state":"exited"})").status().message(),
              HasSubstr("body.exit_code: is required"));
  // An exit code on a running task did not survive the round trip of the
  // agent_proto fuzz target (tests/fuzz/regressions/agent_proto).
  EXPECT_EQ(DecodeTaskReport(R"({"attempt_id":"4.1","state":"running","exit_code":5})")
                .status()
                .message(),
            "body.exit_code: only a task that exited has one");
  EXPECT_EQ(
      DecodeTaskReport(R"({"attempt_id":"4.1","state":"failed","signal":9})").status().message(),
      "body.signal: only a task that exited has one");
}

// One name table encodes and decodes task states; a name outside it is a
// protocol error that names the field and the value, never another state.
TEST(MessagesTest, TaskStatesHaveOneNameTable) {
  for (TaskState s : kAllTaskStates) {
    auto parsed = ParseTaskState(TaskStateName(s));
    ASSERT_TRUE(parsed.ok()) << TaskStateName(s);
    EXPECT_EQ(*parsed, s);
    TaskReport r{"4.1", s};
    auto decoded = DecodeTaskReport(Encode(r));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->state, s);
  }
  EXPECT_EQ(ParseTaskState("lost").value(), TaskState::kLost);
  EXPECT_THAT(ParseTaskState("gone").status().message(),
              HasSubstr("task state must be one of starting, running, exited, failed, lost, "
                        "vacated, refused, not \"gone\""));
}

TEST(MessagesTest, AHostileTaskStateIsRefusedNamingFieldAndValue) {
  auto error = [](const std::string& state_json) {
    return DecodeTaskReport(R"({"attempt_id":"4.1","state":)" + state_json + "}").status();
  };
  EXPECT_EQ(error(R"("pwned")").code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(error(R"("pwned")").message(),
              HasSubstr("body.state: must be one of starting, running, exited, failed, lost, "
                        "vacated, refused, not \"pwned\""));
  EXPECT_THAT(error(R"("")").message(), HasSubstr("body.state: must be one of"));
  EXPECT_THAT(error(R"("")").message(), HasSubstr("not \"\""));
  // Names are exact: no case folding, no padding.
  EXPECT_THAT(error(R"("Running")").message(), HasSubstr("not \"Running\""));
  EXPECT_THAT(error(R"("running ")").message(), HasSubstr("body.state"));
  EXPECT_THAT(error("5").message(), HasSubstr("body.state: must be a string"));
  EXPECT_THAT(error("null").message(), HasSubstr("body.state"));
  // The value is shown escaped and cut short: it cannot forge a log line.
  std::string forged = error(R"("x\nERROR forged\u0000")").message();
  EXPECT_THAT(forged, HasSubstr(R"(not "x\x0aERROR forged\x00")"));
  EXPECT_EQ(forged.find('\n'), std::string::npos);
  std::string long_state = error('"' + std::string(10'000, 'a') + '"').message();
  EXPECT_LT(long_state.size(), 300u);
  EXPECT_THAT(long_state, HasSubstr("...\""));
  // In a hello too: the whole hello is malformed.
  EXPECT_THAT(
      DecodeHello(
          R"({"node_name":"a","agent_instance":"i","last_server_seq":0,"tasks":[{"attempt_id":"1.1","state":"pwned"}]})")
          .status()
          .message(),
      HasSubstr("body.tasks[0].state: must be one of"));
}

TEST(MessagesTest, HeartbeatAndLogsRoundTrip) {
  Heartbeat hb;
  hb.telemetry = {{"GPU-1", 1024, 55, 61, 150000, 7'200'000'000, {{42, 1000}, {43, 24}}}};
  hb.running_tasks = 2;
  hb.shares = {{"9.1", "GPU-1", 4096, 1000}, {"9.2", "GPU-1", 2048, -1}};
  auto d = DecodeHeartbeat(Encode(hb));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, hb);

  LogChunk c{"9.1",
             {{0, "stdout", 5, "hello"},
              {6, "stderr", 6, "wörld \"quoted\""},
              {30, "event", 7, "pulling image 1/3 layers"}}};
  auto dc = DecodeLogChunk(Encode(c));
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  EXPECT_EQ(*dc, c);
  EXPECT_THAT(
      DecodeLogChunk(R"({"attempt_id":"9.1","lines":[{"offset":0,"stream":"tty","text":""}]})")
          .status()
          .message(),
      HasSubstr("body.lines[0].stream: must be stdout, stderr or event"));
}

TEST(MessagesTest, CompactLogsRoundTripAndFallBackWhereARecordCannotCarryALine) {
  LogChunk c{"9.1",
             {{0, "stdout", 5, "hello"},
              {6, "stderr", 1'700'000'000'000, "w\xC3\xB6rld \"quoted\" \t tab"},
              {30, "event", 7, "pulling image 1/3 layers"},
              {40, "stdout", 8, ""}},
             true};
  std::string body = Encode(c);
  EXPECT_THAT(body, HasSubstr("\"records\""));
  EXPECT_THAT(body, Not(HasSubstr("\"lines\"")));
  auto dc = DecodeLogChunk(body);
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  EXPECT_EQ(*dc, c);
  // A newline or invalid UTF-8 in a line: the whole message goes as lines.
  for (const std::string& text : {std::string("two\nlines"), std::string("bad \xff byte")}) {
    LogChunk odd{"9.1", {{0, "stdout", 5, "fine"}, {5, "stdout", 6, text}}, true};
    std::string b = Encode(odd);
    EXPECT_THAT(b, HasSubstr("\"lines\""));
    auto d = DecodeLogChunk(b);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->compact);
    EXPECT_EQ(d->lines.size(), 2u);
  }
  // What a peer may not send.
  auto bad = [](const std::string& body) { return DecodeLogChunk(body).status().message(); };
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0,5],"records":["o 1 a\n"]})"),
              HasSubstr("body.records: record 2: missing"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0],"records":["o 1 a\n","o 2 b\n"]})"),
              HasSubstr("more records than offsets"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0],"records":["x 1 a\n"]})"),
              HasSubstr("body.records: record 1: expected"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0],"records":["o -1 a\n"]})"),
              HasSubstr("body.records: record 1: expected"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0],"records":["o1 a\n"]})"),
              HasSubstr("body.records: record 1: expected"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[-1],"records":["o 1 a\n"]})"),
              HasSubstr("body.offsets[0]: out of range"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":["0"],"records":["o 1 a\n"]})"),
              HasSubstr("body.offsets: must be whole numbers"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","records":["o 1 a\n"]})"), HasSubstr("body.offsets"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0],"records":"o 1 a\n"})"),
              HasSubstr("body.records: must be a list of strings"));
  EXPECT_THAT(bad(R"({"attempt_id":"9.1","offsets":[0],"records":["o 1 a"]})"),
              HasSubstr("body.records: record 1: does not end with a newline"));
  // Records may be split anywhere between them, across several strings.
  auto split = DecodeLogChunk(R"({"attempt_id":"9.1","offsets":[0,3,9],)"
                              R"("records":["","o 1 a\no 2 b\n","","e 3 c\n",""]})");
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_EQ(split->lines.size(), 3u);
  EXPECT_EQ(split->lines[2], (LogChunkLine{9, "stderr", 3, "c"}));
  // A message larger than one string holds: split, and back whole.
  LogChunk big{"9.1", {}, true};
  for (int i = 0; i < 3000; ++i) big.lines.push_back({i * 100, "stdout", i, std::string(80, 'z')});
  auto back = DecodeLogChunk(Encode(big));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, big);
}

TEST(MessagesTest, InvalidUtf8InLogsIsReplacedNotFatal) {
  LogChunk c{"9.1", {{0, "stdout", 5, std::string("bad \xff byte")}}};
  auto dc = DecodeLogChunk(Encode(c));
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  EXPECT_THAT(dc->lines[0].text, HasSubstr("bad "));
}

TEST(MessagesTest, StartStopWelcomeRoundTrip) {
  StartTask s;
  s.attempt_id = "3.2";
  s.job_id = 3;
  s.spec.name = "train";
  s.spec.name = "train";
  s.spec.run = "python3 train.py";
  s.spec.env = {{"A", "1"}};
  s.spec.resources.gpus = 2;
  s.spec.max_runtime_ms = 60000;
  s.gpu_uuids = {"GPU-1", "GPU-2"};
  s.max_output_bytes = int64_t{1} << 30;
  auto ds = DecodeStartTask(Encode(s));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(*ds, s);
  // From a server older than the output limit: none (the agent's default).
  s.max_output_bytes = 0;
  EXPECT_EQ(*DecodeStartTask(Encode(s)), s);
  EXPECT_THAT(DecodeStartTask(R"({"attempt_id":"1.1","job_id":1,"spec":{"run":"x"},)"
                              R"("max_output_bytes":-1})")
                  .status()
                  .message(),
              HasSubstr("body.max_output_bytes: must be from 0"));

  StopTask st{"3.2", "cancelled"};
  EXPECT_EQ(*DecodeStopTask(Encode(st)), st);

  Welcome w{"n-1", 9, 5000, {{"3.2", 120}}};
  EXPECT_EQ(*DecodeWelcome(Encode(w)), w);
  w.log_records = true;
  EXPECT_EQ(*DecodeWelcome(Encode(w)), w);
  // From a server older than compact logs: none.
  EXPECT_FALSE(DecodeWelcome(R"({"node_id":"n","last_agent_seq":0})")->log_records);
  EXPECT_THAT(
      DecodeWelcome(R"({"node_id":"n","last_agent_seq":0,"heartbeat_ms":0})").status().message(),
      HasSubstr("heartbeat_ms: must be from 1 to 3600000, got 0"));
}

TEST(MessagesTest, StartTaskCarriesAGpuShareAndStopItsGrace) {
  StartTask s;
  s.attempt_id = "4.1";
  s.job_id = 4;
  s.spec.name = "share";
  s.spec.run = "true";
  s.spec.resources.gpu_milli = 500;
  s.spec.resources.gpu_memory_mib = 10240;
  s.spec.checkpoint = CheckpointSpec{60'000, 5'000, "SIGUSR2"};
  s.gpu_uuids = {"GPU-1"};
  s.gpu_milli = 500;
  s.gpu_memory_mib = 10240;
  auto ds = DecodeStartTask(Encode(s));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(*ds, s);
  // A share names exactly one GPU.
  s.gpu_uuids = {"GPU-1", "GPU-2"};
  EXPECT_THAT(DecodeStartTask(Encode(s)).status().message(),
              HasSubstr("body.gpu_uuids: a share of a GPU names exactly one GPU"));
  EXPECT_THAT(DecodeStartTask(R"({"attempt_id":"1.1","job_id":1,"spec":{"run":"x"},)"
                              R"("gpu_milli":1001})")
                  .status()
                  .message(),
              HasSubstr("body.gpu_milli: must be from 0 to 1000"));

  StopTask st{"4.1", "preempted for interactive job 9", 5000, true};
  EXPECT_EQ(*DecodeStopTask(Encode(st)), st);
  EXPECT_FALSE(DecodeStopTask(R"({"attempt_id":"4.1"})")->requeue);
  EXPECT_EQ(DecodeStopTask(R"({"attempt_id":"4.1"})")->grace_ms, 0);  // older servers
  EXPECT_THAT(DecodeStopTask(R"({"attempt_id":"4.1","grace_ms":-1})").status().message(),
              HasSubstr("body.grace_ms: must be from 0 to 86400000, got -1"));
}

TEST(MessagesTest, StartTaskCarriesItsRestorePoint) {
  StartTask s;
  s.attempt_id = "7.2";
  s.job_id = 7;
  s.spec.name = "train";
  s.spec.run = "python3 train.py";
  s.spec.checkpoint = CheckpointSpec{};
  s.restore_checkpoint = 3;
  s.restore_manifest = std::string(64, 'a');
  auto ds = DecodeStartTask(Encode(s));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(*ds, s);
  std::string head = R"({"attempt_id":"7.2","job_id":7,"spec":{"run":"x"},"restore":)";
  EXPECT_THAT(DecodeStartTask(head + R"({"checkpoint":3,"manifest":"xyz"}})").status().message(),
              HasSubstr("body.restore.manifest: must be 64 lowercase hex digits"));
  EXPECT_THAT(
      DecodeStartTask(head + R"({"checkpoint":0,"manifest":")" + std::string(64, 'a') + R"("}})")
          .status()
          .message(),
      HasSubstr("body.restore.checkpoint: must be positive"));
  EXPECT_THAT(DecodeStartTask(head + "7}").status().message(),
              HasSubstr("body.restore: must be an object"));
}

TEST(MessagesTest, GangRanksAndTheirRendezvousRoundTripAndAreChecked) {
  StartTask s;
  s.attempt_id = "8.1";
  s.job_id = 8;
  s.spec.name = "ddp";
  s.spec.run = "python3 train.py";
  s.spec.resources.nodes = 3;
  s.gang = GangRank{2, 3, Distributed::kTorch, "fd00::5", 29533};
  auto ds = DecodeStartTask(Encode(s));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(*ds, s);
  s.gang = GangRank{0, 3, Distributed::kNone, "", 0};  // rank 0: no master yet
  ds = DecodeStartTask(Encode(s));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(*ds, s);

  std::string head = R"({"attempt_id":"8.1","job_id":8,"spec":{"run":"x"},"gang":)";
  auto error = [&](const std::string& gang) {
    return DecodeStartTask(head + gang + "}").status().message();
  };
  EXPECT_THAT(error(R"({"rank":3,"nodes":3,"mode":"torch"})"),
              HasSubstr("body.gang.rank: must be below nodes"));
  EXPECT_THAT(error(R"({"rank":0,"nodes":1,"mode":"torch"})"), HasSubstr("body.gang.nodes"));
  EXPECT_THAT(error(R"({"rank":0,"nodes":2,"mode":"mpi"})"),
              HasSubstr("body.gang.mode: must be torch or none"));
  EXPECT_THAT(error(R"({"rank":1,"nodes":2,"mode":"torch","master":{"addr":"a b","port":1}})"),
              HasSubstr("body.gang.master.addr: must be a host name or address"));
  EXPECT_THAT(error(R"({"rank":1,"nodes":2,"mode":"torch","master":{"addr":"h","port":70000}})"),
              HasSubstr("body.gang.master.port"));
  EXPECT_THAT(error("[]"), HasSubstr("body.gang: must be an object"));

  // Rank 0's report of its rendezvous.
  TaskReport r("8.1", TaskState::kStarting);
  r.master_addr = "10.0.0.5";
  r.master_port = 29533;
  auto dr = DecodeTaskReport(Encode(r));
  ASSERT_TRUE(dr.ok()) << dr.status().ToString();
  EXPECT_EQ(*dr, r);
  EXPECT_THAT(DecodeTaskReport(
                  R"j({"attempt_id":"8.1","state":"running","master":{"addr":"$(x)","port":5}})j")
                  .status()
                  .message(),
              HasSubstr("master.addr: must be a host name or address"));

  Welcome w;
  w.node_id = "n-1";
  w.attempt_lease_ms = 30'000;
  auto dw = DecodeWelcome(Encode(w));
  ASSERT_TRUE(dw.ok()) << dw.status().ToString();
  EXPECT_EQ(dw->attempt_lease_ms, 30'000);
}

TEST(MessagesTest, LeaseRoundTripAndStrictStamp) {
  Lease l{123'456'789};
  auto back = DecodeLease(Encode(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);
  EXPECT_THAT(DecodeLease(R"({"sent_ms":-5})").status().message(), HasSubstr("sent_ms"));
  EXPECT_THAT(DecodeLease(R"({"sent_ms":"soon"})").status().message(), HasSubstr("sent_ms"));
  EXPECT_FALSE(DecodeLease("{}").ok());
}

TEST(MessagesTest, StartTaskWithBadSpecNamesTheSpecField) {
  std::string body =
      R"({"attempt_id":"1.1","job_id":1,"spec":{"run":"x","resources":{"gpus":-1}}})";
  EXPECT_THAT(DecodeStartTask(body).status().message(), HasSubstr("body.spec: resources.gpus"));
}

TEST(MessagesTest, LendingSharingAndTheRecordsFromBeforeIt) {
  NodeLending mps;
  mps.sharing = GpuSharing::kMps;
  nlohmann::json j = NodeLendingToJson(mps);
  EXPECT_EQ(j["sharing"], "mps");
  EXPECT_EQ(j["fractional"], true);  // for servers that predate sharing
  EXPECT_EQ(NodeLendingFromJson(j, "lending")->sharing, GpuSharing::kMps);
  // An older record: fractional alone.
  j.erase("sharing");
  EXPECT_EQ(NodeLendingFromJson(j, "lending")->sharing, GpuSharing::kInterposer);
  j["fractional"] = false;
  EXPECT_EQ(NodeLendingFromJson(j, "lending")->sharing, GpuSharing::kNone);
  j.erase("fractional");
  EXPECT_EQ(NodeLendingFromJson(j, "lending")->sharing, GpuSharing::kInterposer);
  j["sharing"] = "everything";
  auto bad = NodeLendingFromJson(j, "lending");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lending.sharing"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("must be none, interposer or mps"), std::string::npos)
      << bad.status().message();
  j["sharing"] = 3;
  EXPECT_FALSE(NodeLendingFromJson(j, "lending").ok());
}

TEST(MessagesTest, LendingEventsAndLeaveRoundTrip) {
  NodeLending l;
  l.mode = "paused";
  l.gpus = {{"GPU-a", 40960}};
  l.not_lent = {{"GPU-b", "its owner runs process 42 on it"}};
  l.sharing = GpuSharing::kNone;
  l.allow_users = {"alice"};
  l.deny_groups = {"robotics"};
  l.max_runtime_ms = 3'600'000;
  l.next_change_ms = 1'700'000'000'000;
  auto back = DecodeLending(Encode(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, l);

  Hello h;
  h.node_name = "n1";
  h.agent_instance = "i";
  h.lending = l;
  auto hb = DecodeHello(Encode(h));
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ(hb->lending, l);
  h.lending.reset();
  auto without = DecodeHello(Encode(h));
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_FALSE(without->lending.has_value());

  NodeEvent e{0, "", 1234, "reclaim", "the window closed", {"GPU-a"}, {"7.1"}};
  auto eb = DecodeNodeEvent(Encode(e));
  ASSERT_TRUE(eb.ok());
  EXPECT_EQ(*eb, e);
  EXPECT_EQ(DecodeLeave(Encode(Leave{"owner left"}))->reason, "owner left");

  StartTask st;
  st.attempt_id = "3.1";
  st.job_id = 3;
  st.owner = "bob";
  st.spec.name = "j";
  st.spec.run = "true";
  auto stb = DecodeStartTask(Encode(st));
  ASSERT_TRUE(stb.ok()) << stb.status().ToString();
  EXPECT_EQ(stb->owner, "bob");
}

TEST(MessagesTest, LendingAndEventsAreValidated) {
  auto bad_mode = DecodeLending(R"({"mode":"sleeping"})");
  ASSERT_FALSE(bad_mode.ok());
  EXPECT_NE(bad_mode.status().message().find("body.mode"), std::string::npos);
  EXPECT_FALSE(DecodeLending(R"({"mode":"lending","gpus":{"GPU-a":-1}})").ok());
  EXPECT_FALSE(DecodeLending(R"({"mode":"lending","gpus":{"GPU-a":"all"}})").ok());
  auto bad_hello = DecodeHello(
      R"({"node_name":"n","agent_instance":"i","last_server_seq":0,"lending":{"mode":1}})");
  ASSERT_FALSE(bad_hello.ok());
  EXPECT_NE(bad_hello.status().message().find("body.lending.mode"), std::string::npos);
  auto bad_kind = DecodeNodeEvent(R"({"ts_ms":1,"kind":"explode"})");
  ASSERT_FALSE(bad_kind.ok());
  EXPECT_NE(bad_kind.status().message().find("body.kind"), std::string::npos);
  EXPECT_TRUE(DecodeTaskReport(R"({"attempt_id":"1.1","state":"vacated","reason":"r"})").ok());
  EXPECT_TRUE(DecodeTaskReport(R"({"attempt_id":"1.1","state":"refused","reason":"r"})").ok());
}

TEST(MessagesTest, OwnerCommandRoundTripsAndRefusesOtherCommands) {
  OwnerCommand m{"reclaim", {"0", "GPU-abc"}, true, "alice"};
  EXPECT_EQ(*DecodeOwnerCommand(Encode(m)), m);
  OwnerCommand pause{"pause", {}, false, ""};
  EXPECT_EQ(*DecodeOwnerCommand(Encode(pause)), pause);
  // The server may only ask for what the owner could ask on the machine.
  EXPECT_THAT(DecodeOwnerCommand(R"({"command":"leave"})").status().message(),
              HasSubstr("body.command: must be one of pause, resume, reclaim"));
  EXPECT_THAT(DecodeOwnerCommand(R"({"command":"policy","yaml":"x"})").status().message(),
              HasSubstr("command"));
  EXPECT_THAT(DecodeOwnerCommand(R"({"command":"reclaim","gpus":[1]})").status().message(),
              HasSubstr("body.gpus"));
  EXPECT_FALSE(DecodeOwnerCommand(R"({"command":"pause","now":"yes"})").ok());
}

TEST(MessagesTest, StageCheckpointRoundTripsAndChecksItsFields) {
  StageCheckpoint m{12, 4, std::string(64, 'a')};
  EXPECT_EQ(*DecodeStageCheckpoint(Encode(m)), m);
  EXPECT_THAT(
      DecodeStageCheckpoint(R"({"job_id":0,"checkpoint":1,"manifest":"x"})").status().message(),
      HasSubstr("job_id: must be positive"));
  EXPECT_THAT(
      DecodeStageCheckpoint(R"({"job_id":1,"checkpoint":1,"manifest":"ABC"})").status().message(),
      HasSubstr("manifest: must be 64 lowercase hex digits"));
  EXPECT_THAT(DecodeStageCheckpoint(R"({"job_id":1,"manifest":"x"})").status().message(),
              HasSubstr("checkpoint"));
}

// Numbers that would wrap in the field's type, negative or absurd amounts,
// and huge lists are rejected, naming the field.
TEST(MessagesTest, LimitsOnNumbersAndCounts) {
  auto error = [](const Status& s) {
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  // A version that wraps to 1 as an int is still unsupported.
  EXPECT_THAT(
      error(DecodeEnvelope(R"({"v":4294967297,"seq":1,"ack":0,"type":"a","body":{}})").status()),
      HasSubstr("unsupported protocol version 4294967297"));
  EXPECT_THAT(
      error(DecodeEnvelope(R"({"v":1,"seq":18446744073709551615,"ack":0,"type":"a","body":{}})")
                .status()),
      HasSubstr("seq: must be an integer of at most 9223372036854775807"));
  // 2^32 + 500 once passed as a share of 500m.
  EXPECT_EQ(error(DecodeStartTask(R"({"attempt_id":"1.1","job_id":1,"spec":{"run":"x"},)"
                                  R"("gpu_uuids":["G"],"gpu_milli":4294967796})")
                      .status()),
            "body.gpu_milli: must be from 0 to 1000, got 4294967796");
  EXPECT_EQ(
      error(DecodeStartTask(R"({"attempt_id":"1.1","job_id":-1,"spec":{"run":"x"}})").status()),
      "body.job_id: must be from 1 to 9223372036854775807, got -1");
  EXPECT_EQ(
      error(DecodeTaskReport(R"({"attempt_id":"1.1","state":"exited","exit_code":2147483648})")
                .status()),
      "body.exit_code: must be from -2147483648 to 2147483647, got 2147483648");
  EXPECT_EQ(
      error(DecodeTaskReport(R"({"attempt_id":"1.1","state":"exited","exit_code":1,"signal":-9})")
                .status()),
      "body.signal: must be from 0 to 255, got -9");
  EXPECT_EQ(
      error(DecodeStopTask(R"({"attempt_id":"4.1","grace_ms":9223372036854775807})").status()),
      "body.grace_ms: must be from 0 to 86400000, got 9223372036854775807");
  // Offsets stay far from overflowing when a line's length is added.
  EXPECT_EQ(error(DecodeLogChunk(R"({"attempt_id":"9.1","lines":[{"offset":9223372036854775807,)"
                                 R"("stream":"stdout","text":"x"}]})")
                      .status()),
            "body.lines[0].offset: must be from 0 to 1125899906842624, got 9223372036854775807");
  EXPECT_EQ(
      error(
          DecodeWelcome(R"({"node_id":"n","last_agent_seq":0,"log_offsets":{"1.1":-2}})").status()),
      "body.log_offsets: the offset of 1.1 must be from -1 to 1125899906842624, got -2");
  EXPECT_EQ(error(DecodeHello(R"({"node_name":"n","agent_instance":"i","last_server_seq":0,)"
                              R"("gpus":[{"index":0,"uuid":"G","name":"T4","memory_mib":-1}]})")
                      .status()),
            "body.gpus[0].memory_mib: must be from 0 to 1099511627776, got -1");
  EXPECT_EQ(error(DecodeHello(R"({"node_name":"n","agent_instance":"i","last_server_seq":0,)"
                              R"("cpu_milli":-1})")
                      .status()),
            "body.cpu_milli: must be from 0 to 1099511627776, got -1");
  EXPECT_EQ(
      error(DecodeHeartbeat(R"({"telemetry":[{"uuid":"G","utilization_percent":300}]})").status()),
      "body.telemetry[0].utilization_percent: must be from -1 to 100, got 300");
  EXPECT_EQ(error(DecodeHeartbeat(R"({"shares":[{"attempt_id":"9.1","gpu_uuid":"G",)"
                                  R"("memory_cap_mib":-5}]})")
                      .status()),
            "body.shares[0].memory_cap_mib: must be from 0 to 1099511627776, got -5");
  // Agents that predate the report send none.
  EXPECT_TRUE(DecodeHeartbeat(R"({"telemetry":[]})").ok());

  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < 257; ++i) {
    gpus.push_back({{"index", 0}, {"uuid", "G"}, {"name", "T4"}, {"memory_mib", 1}});
  }
  nlohmann::json hello = {
      {"node_name", "n"}, {"agent_instance", "i"}, {"last_server_seq", 0}, {"gpus", gpus}};
  EXPECT_EQ(error(DecodeHello(hello.dump()).status()), "body.gpus: at most 256 entries, got 257");
  nlohmann::json event = {
      {"ts_ms", 1}, {"kind", "reclaim"}, {"attempts", std::vector<std::string>(70'000, "1.1")}};
  EXPECT_EQ(error(DecodeNodeEvent(event.dump()).status()),
            "body.attempts: at most 65536 entries, got 70000");
  nlohmann::json lending = {{"mode", "lending"},
                            {"allow_users", std::vector<std::string>(5000, "u")}};
  EXPECT_EQ(error(DecodeLending(lending.dump()).status()),
            "body.allow_users: at most 4096 entries, got 5000");
}

TEST(MessagesTest, HostileJsonIsRejectedBeforeItIsBuilt) {
  std::string deep =
      R"({"v":1,"seq":1,"ack":0,"type":"a","body":{"x":)" + std::string(1'000'000, '[');
  EXPECT_THAT(DecodeEnvelope(deep).status().message(),
              HasSubstr("message: JSON nested deeper than 32 levels (at body.x"));
  EXPECT_EQ(DecodeLeave(R"({"reason":")" + std::string(70'000, 'r') + R"("})").status().message(),
            "body: reason: JSON string of 70000 bytes, more than 65536");
}

// The hub decodes a reliable message once, into the alternative its type
// names; anything else is an error that names the type or the field.
TEST(MessagesTest, AgentReportsDecodeIntoTheirTypes) {
  TaskReport report{"7.1", TaskState::kExited, 3};
  auto decoded = DecodeAgentReport(kTaskStatus, Encode(report));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(std::holds_alternative<TaskReport>(*decoded));
  EXPECT_EQ(std::get<TaskReport>(*decoded), report);
  Leave leave;
  leave.reason = "owner left";
  decoded = DecodeAgentReport(kLeave, Encode(leave));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<Leave>(*decoded).reason, "owner left");

  auto unknown = DecodeAgentReport("heartbeat", "{}");  // not a reliable message
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("\"heartbeat\""));
  auto bad_state = DecodeAgentReport(kTaskStatus, R"({"attempt_id":"7.1","state":"gone"})");
  EXPECT_EQ(bad_state.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_state.status().message(), HasSubstr("state"));
}

}  // namespace
}  // namespace gpupool::proto
