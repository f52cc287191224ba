#include "proto/messages.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/json_reader.h"
#include "model/job_spec.h"

namespace gpupool::proto {

using nlohmann::json;

namespace {

json GpuToJson(const GpuInfo& g) {
  return {{"index", g.index},         {"uuid", g.uuid},
          {"name", g.name},           {"memory_mib", g.memory_mib},
          {"cc_major", g.cc_major},   {"cc_minor", g.cc_minor},
          {"simulated", g.simulated}, {"minor_number", g.minor_number}};
}

Status GpuFromJson(const json& j, const std::string& path, GpuInfo* g) {
  JsonReader r(j, path);
  g->index = static_cast<int32_t>(r.Int("index"));
  g->uuid = r.Str("uuid");
  g->name = r.Str("name");
  g->memory_mib = r.Int("memory_mib");
  g->cc_major = static_cast<int32_t>(r.Int("cc_major", false));
  g->cc_minor = static_cast<int32_t>(r.Int("cc_minor", false));
  g->simulated = r.Bool("simulated", false);
  // Absent from agents older than the field: not known. Linux minors have 20 bits.
  int64_t minor_number = r.Int("minor_number", false, -1);
  if (minor_number < -1 || minor_number >= (1 << 20)) {
    r.Fail("minor_number", "must be -1 (not known) or a device minor number");
  } else {
    g->minor_number = static_cast<int32_t>(minor_number);
  }
  if (r.ok() && g->uuid.empty()) r.Fail("uuid", "must not be empty");
  if (r.ok() && g->memory_mib < 0) r.Fail("memory_mib", "must not be negative");
  return r.Finish(false);
}

json TelemetryToJson(const GpuTelemetry& t) {
  json procs = json::array();
  for (const auto& p : t.processes)
    procs.push_back({{"pid", p.pid}, {"used_memory_mib", p.used_memory_mib}});
  return {{"uuid", t.uuid},
          {"memory_used_mib", t.memory_used_mib},
          {"utilization_percent", t.utilization_percent},
          {"temperature_c", t.temperature_c},
          {"power_mw", t.power_mw},
          {"processes", procs}};
}

Status TelemetryFromJson(const json& j, const std::string& path, GpuTelemetry* t) {
  JsonReader r(j, path);
  t->uuid = r.Str("uuid");
  t->memory_used_mib = r.Int("memory_used_mib", false, -1);
  t->utilization_percent = static_cast<int32_t>(r.Int("utilization_percent", false, -1));
  t->temperature_c = static_cast<int32_t>(r.Int("temperature_c", false, -1));
  t->power_mw = r.Int("power_mw", false, -1);
  r.Each("processes", false, [&](const json& p, const std::string& ppath) {
    JsonReader pr(p, ppath);
    GpuProcess proc{pr.Int("pid"), pr.Int("used_memory_mib", false)};
    t->processes.push_back(proc);
    return pr.Finish(false);
  });
  return r.Finish(false);
}

json TaskToJson(const TaskReport& t) {
  json j = {{"attempt_id", t.attempt_id}, {"state", t.state}, {"ts_ms", t.ts_ms}};
  if (t.state == "exited") {
    j["exit_code"] = t.exit_code;
    if (t.signal) j["signal"] = t.signal;
  }
  if (!t.reason.empty()) j["reason"] = t.reason;
  return j;
}

Status TaskFromJson(const json& j, const std::string& path, TaskReport* t) {
  JsonReader r(j, path);
  t->attempt_id = r.Str("attempt_id");
  t->state = r.Str("state");
  t->exit_code = static_cast<int32_t>(r.Int("exit_code", false));
  t->signal = static_cast<int32_t>(r.Int("signal", false));
  t->reason = r.Str("reason", false);
  t->ts_ms = r.Int("ts_ms", false);
  if (r.ok() && t->state != "running" && t->state != "exited" && t->state != "failed" &&
      t->state != "lost" && t->state != "vacated" && t->state != "refused") {
    r.Fail("state", "must be one of running, exited, failed, lost, vacated, refused");
  }
  if (r.ok() && t->state == "exited" && !r.Has("exit_code"))
    r.Fail("exit_code", "is required when state is exited");
  if (r.ok()) {
    auto id = ParseAttemptId(t->attempt_id);
    if (!id.ok()) r.Fail("attempt_id", id.status().message());
  }
  return r.Finish(false);
}

// Decodes a body with `fill`, prefixing errors with "body".
template <typename T>
Result<T> DecodeBody(std::string_view text, const std::function<Status(JsonReader&, T*)>& fill) {
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(text, "body"));
  JsonReader r(j, "body");
  T out;
  Status s = fill(r, &out);
  if (!s.ok()) return s;
  GP_RETURN_IF_ERROR(r.Finish(false));
  return out;
}

}  // namespace

std::string EncodeEnvelope(const Envelope& e) {
  // The body is already JSON text; splice it in rather than re-parsing it.
  std::string out = "{\"v\":" + std::to_string(e.version) + ",\"seq\":" + std::to_string(e.seq) +
                    ",\"ack\":" + std::to_string(e.ack) + ",\"type\":" + json(e.type).dump() +
                    ",\"body\":" + (e.body.empty() ? std::string("{}") : e.body) + "}";
  return out;
}

Result<Envelope> DecodeEnvelope(std::string_view text) {
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(text, "message"));
  JsonReader r(j, "");
  Envelope e;
  e.version = static_cast<int>(r.Int("v"));
  e.seq = r.Int("seq");
  e.ack = r.Int("ack");
  e.type = r.Str("type");
  const json* body = r.Raw("body");
  GP_RETURN_IF_ERROR(r.Finish());
  if (e.version != kProtocolVersion) {
    return Status::InvalidArgument("v: unsupported protocol version " + std::to_string(e.version) +
                                   " (this side speaks " + std::to_string(kProtocolVersion) + ")");
  }
  if (e.seq < 0 || e.ack < 0) return Status::InvalidArgument("seq/ack: must not be negative");
  if (!body->is_object()) return Status::InvalidArgument("body: must be an object");
  e.body = body->dump();
  return e;
}

std::string Encode(const Hello& m) {
  json gpus = json::array(), tasks = json::array();
  for (const auto& g : m.gpus) gpus.push_back(GpuToJson(g));
  for (const auto& t : m.tasks) tasks.push_back(TaskToJson(t));
  json j = {{"node_name", m.node_name},
            {"agent_instance", m.agent_instance},
            {"agent_version", m.agent_version},
            {"last_server_seq", m.last_server_seq},
            {"cpu_milli", m.cpu_milli},
            {"memory_mib", m.memory_mib},
            {"gpus", gpus},
            {"driver_version", m.driver_version},
            {"cuda_version", m.cuda_version},
            {"labels", m.labels},
            {"owner_group", m.owner_group},
            {"tasks", tasks}};
  if (m.lending) j["lending"] = NodeLendingToJson(*m.lending);
  return j.dump();
}

Result<Hello> DecodeHello(std::string_view body) {
  return DecodeBody<Hello>(body, [](JsonReader& r, Hello* m) {
    m->node_name = r.Str("node_name");
    m->agent_instance = r.Str("agent_instance");
    m->agent_version = r.Str("agent_version", false);
    m->last_server_seq = r.Int("last_server_seq");
    m->cpu_milli = r.Int("cpu_milli", false);
    m->memory_mib = r.Int("memory_mib", false);
    r.Each("gpus", false, [&](const json& g, const std::string& path) {
      GpuInfo info;
      GP_RETURN_IF_ERROR(GpuFromJson(g, path, &info));
      m->gpus.push_back(std::move(info));
      return Status::Ok();
    });
    m->driver_version = r.Str("driver_version", false);
    m->cuda_version = r.Str("cuda_version", false);
    m->labels = r.StrMap("labels", false);
    m->owner_group = r.Str("owner_group", false);
    r.Each("tasks", false, [&](const json& t, const std::string& path) {
      TaskReport report;
      GP_RETURN_IF_ERROR(TaskFromJson(t, path, &report));
      m->tasks.push_back(std::move(report));
      return Status::Ok();
    });
    if (const json* lending = r.Raw("lending", false); lending && !lending->is_null()) {
      auto l = NodeLendingFromJson(*lending, r.PathOf("lending"));
      if (!l.ok()) return l.status();
      m->lending = *std::move(l);
    }
    if (r.ok() && m->node_name.empty()) r.Fail("node_name", "must not be empty");
    if (r.ok() && (m->cpu_milli < 0 || m->memory_mib < 0))
      r.Fail("cpu_milli", "must not be negative");
    return r.status();
  });
}

std::string Encode(const Heartbeat& m) {
  json t = json::array();
  for (const auto& g : m.telemetry) t.push_back(TelemetryToJson(g));
  return json{{"telemetry", t}, {"running_tasks", m.running_tasks}}.dump();
}

Result<Heartbeat> DecodeHeartbeat(std::string_view body) {
  return DecodeBody<Heartbeat>(body, [](JsonReader& r, Heartbeat* m) {
    r.Each("telemetry", false, [&](const json& g, const std::string& path) {
      GpuTelemetry t;
      GP_RETURN_IF_ERROR(TelemetryFromJson(g, path, &t));
      m->telemetry.push_back(std::move(t));
      return Status::Ok();
    });
    m->running_tasks = static_cast<int32_t>(r.Int("running_tasks", false));
    return r.status();
  });
}

std::string Encode(const TaskReport& m) { return TaskToJson(m).dump(); }

Result<TaskReport> DecodeTaskReport(std::string_view body) {
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(body, "body"));
  TaskReport t;
  GP_RETURN_IF_ERROR(TaskFromJson(j, "body", &t));
  return t;
}

std::string Encode(const LogChunk& m) {
  json lines = json::array();
  for (const auto& l : m.lines) {
    lines.push_back(
        {{"offset", l.offset}, {"stream", l.stream}, {"ts_ms", l.ts_ms}, {"text", l.text}});
  }
  // Job output may hold invalid UTF-8: replace it rather than fail.
  return json{{"attempt_id", m.attempt_id}, {"lines", lines}}.dump(-1, ' ', false,
                                                                   json::error_handler_t::replace);
}

Result<LogChunk> DecodeLogChunk(std::string_view body) {
  return DecodeBody<LogChunk>(body, [](JsonReader& r, LogChunk* m) {
    m->attempt_id = r.Str("attempt_id");
    r.Each("lines", true, [&](const json& l, const std::string& path) {
      JsonReader lr(l, path);
      LogChunkLine line{lr.Int("offset"), lr.Str("stream"), lr.Int("ts_ms", false), lr.Str("text")};
      if (lr.ok() && line.offset < 0) lr.Fail("offset", "must not be negative");
      if (lr.ok() && line.stream != "stdout" && line.stream != "stderr" && line.stream != "event") {
        lr.Fail("stream", "must be stdout, stderr or event");
      }
      m->lines.push_back(std::move(line));
      return lr.Finish(false);
    });
    if (r.ok()) {
      auto id = ParseAttemptId(m->attempt_id);
      if (!id.ok()) r.Fail("attempt_id", id.status().message());
    }
    return r.status();
  });
}

std::string Encode(const Welcome& m) {
  return json{{"node_id", m.node_id},
              {"last_agent_seq", m.last_agent_seq},
              {"heartbeat_ms", m.heartbeat_ms},
              {"log_offsets", m.log_offsets}}
      .dump();
}

Result<Welcome> DecodeWelcome(std::string_view body) {
  return DecodeBody<Welcome>(body, [](JsonReader& r, Welcome* m) {
    m->node_id = r.Str("node_id");
    m->last_agent_seq = r.Int("last_agent_seq");
    m->heartbeat_ms = r.Int("heartbeat_ms", false, 5000);
    m->log_offsets = r.IntMap("log_offsets", false);
    if (r.ok() && m->heartbeat_ms <= 0) r.Fail("heartbeat_ms", "must be positive");
    return r.status();
  });
}

std::string Encode(const StartTask& m) {
  json j = {{"attempt_id", m.attempt_id},
            {"job_id", m.job_id},
            {"owner", m.owner},
            {"spec", JobSpecToJson(m.spec)},
            {"gpu_uuids", m.gpu_uuids}};
  if (m.gpu_milli != 0) j["gpu_milli"] = m.gpu_milli;
  if (m.gpu_memory_mib != 0) j["gpu_memory_mib"] = m.gpu_memory_mib;
  if (!m.restore_manifest.empty()) {
    j["restore"] = {{"checkpoint", m.restore_checkpoint}, {"manifest", m.restore_manifest}};
  }
  return j.dump();
}

Result<StartTask> DecodeStartTask(std::string_view body) {
  return DecodeBody<StartTask>(body, [](JsonReader& r, StartTask* m) {
    m->attempt_id = r.Str("attempt_id");
    m->job_id = r.Int("job_id");
    m->owner = r.Str("owner", false);
    const json* spec = r.Raw("spec");
    m->gpu_uuids = r.StrList("gpu_uuids", false);
    m->gpu_milli = static_cast<int32_t>(r.Int("gpu_milli", false));
    m->gpu_memory_mib = r.Int("gpu_memory_mib", false);
    if (const json* restore = r.Raw("restore", false); restore && !restore->is_object()) {
      r.Fail("restore", "must be an object");
    } else if (restore) {
      JsonReader rr(*restore, "body.restore");
      m->restore_checkpoint = rr.Int("checkpoint");
      m->restore_manifest = rr.Str("manifest");
      if (rr.ok() && m->restore_checkpoint <= 0) rr.Fail("checkpoint", "must be positive");
      if (rr.ok() && !IsSha256Hex(m->restore_manifest)) {
        rr.Fail("manifest", "must be 64 lowercase hex digits");
      }
      if (!rr.ok()) return rr.status();
    }
    if (r.ok() && (m->gpu_milli < 0 || m->gpu_milli > 1000)) {
      r.Fail("gpu_milli", "must be from 0 to 1000");
    }
    if (r.ok() && m->gpu_memory_mib < 0) r.Fail("gpu_memory_mib", "must not be negative");
    if (r.ok() && m->gpu_milli > 0 && m->gpu_milli < 1000 && m->gpu_uuids.size() != 1) {
      r.Fail("gpu_uuids", "a share of a GPU names exactly one GPU");
    }
    if (r.ok()) {
      auto s = JobSpecFromJson(*spec);
      if (!s.ok()) return s.status().WithContext("body.spec");
      m->spec = *std::move(s);
    }
    return r.status();
  });
}

std::string Encode(const StopTask& m) {
  json j = {{"attempt_id", m.attempt_id}, {"reason", m.reason}};
  if (m.grace_ms != 0) j["grace_ms"] = m.grace_ms;
  if (m.requeue) j["requeue"] = true;
  return j.dump();
}

Result<StopTask> DecodeStopTask(std::string_view body) {
  return DecodeBody<StopTask>(body, [](JsonReader& r, StopTask* m) {
    m->attempt_id = r.Str("attempt_id");
    m->reason = r.Str("reason", false);
    m->grace_ms = r.Int("grace_ms", false);
    m->requeue = r.Bool("requeue", false);
    if (r.ok() && m->grace_ms < 0) r.Fail("grace_ms", "must not be negative");
    return r.status();
  });
}

std::string Encode(const StageCheckpoint& m) {
  return json{{"job_id", m.job_id}, {"checkpoint", m.checkpoint}, {"manifest", m.manifest}}.dump();
}

Result<StageCheckpoint> DecodeStageCheckpoint(std::string_view body) {
  return DecodeBody<StageCheckpoint>(body, [](JsonReader& r, StageCheckpoint* m) {
    m->job_id = r.Int("job_id");
    m->checkpoint = r.Int("checkpoint");
    m->manifest = r.Str("manifest");
    if (r.ok() && m->job_id <= 0) r.Fail("job_id", "must be positive");
    if (r.ok() && m->checkpoint <= 0) r.Fail("checkpoint", "must be positive");
    if (r.ok() && !IsSha256Hex(m->manifest)) r.Fail("manifest", "must be 64 lowercase hex digits");
    return r.status();
  });
}

std::string Encode(const NodeLending& m) { return NodeLendingToJson(m).dump(); }

Result<NodeLending> DecodeLending(std::string_view body) {
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(body, "body"));
  return NodeLendingFromJson(j, "body");
}

std::string Encode(const NodeEvent& m) {
  return json{{"ts_ms", m.ts_ms},
              {"kind", m.kind},
              {"reason", m.reason},
              {"gpus", m.gpus},
              {"attempts", m.attempts}}
      .dump();
}

Result<NodeEvent> DecodeNodeEvent(std::string_view body) {
  return DecodeBody<NodeEvent>(body, [](JsonReader& r, NodeEvent* m) {
    m->ts_ms = r.Int("ts_ms");
    m->kind = r.Str("kind");
    m->reason = r.Str("reason", false);
    m->gpus = r.StrList("gpus", false);
    m->attempts = r.StrList("attempts", false);
    if (r.ok() && std::find(std::begin(kNodeEventKinds), std::end(kNodeEventKinds), m->kind) ==
                      std::end(kNodeEventKinds)) {
      r.Fail("kind", "must be one of reclaim, pause, resume, leave, policy");
    }
    if (r.ok() && m->ts_ms < 0) r.Fail("ts_ms", "must not be negative");
    return r.status();
  });
}

std::string Encode(const Leave& m) { return json{{"reason", m.reason}}.dump(); }

Result<Leave> DecodeLeave(std::string_view body) {
  return DecodeBody<Leave>(body, [](JsonReader& r, Leave* m) {
    m->reason = r.Str("reason", false);
    return r.status();
  });
}

}  // namespace gpupool::proto
