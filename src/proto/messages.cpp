#include "proto/messages.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/ids.h"
#include "common/json_reader.h"
#include "model/job_output.h"
#include "model/job_spec.h"

namespace gpupool::proto {

using nlohmann::json;

namespace {

// Limits on what a peer may send (messages.h). Counts are far above what a
// real node sends; numbers are bounded where a wrapped or summed value
// could mislead the receiver (offsets plus lengths, times plus graces).
constexpr size_t kMaxGpus = 256;                     // per node
constexpr int64_t kMaxGangNodes = 256;               // ranks of a gang
constexpr size_t kMaxTasks = 65'536;                 // tasks in a hello
constexpr size_t kMaxProcesses = 65'536;             // processes on one GPU
constexpr size_t kMaxShares = 65'536;                // GPU shares in a heartbeat
constexpr size_t kMaxLabels = 1024;                  // node labels
constexpr size_t kMaxLogLines = 65'536;              // lines in one logs message
constexpr size_t kMaxLogOffsets = 1'000'000;         // attempts in a welcome
constexpr size_t kMaxEventItems = 65'536;            // GPUs or attempts in a node event
constexpr int64_t kMaxMib = int64_t{1} << 40;        // memory amounts, MiB (1 EiB)
constexpr int64_t kMaxCpuMilli = int64_t{1} << 40;   // a node's CPUs, milli
constexpr int64_t kMaxLogOffset = int64_t{1} << 50;  // 1 PiB of output
constexpr int64_t kMaxTimeMs = int64_t{1} << 50;     // year 37648: timestamps
constexpr int64_t kMaxGraceMs = 24LL * 3600 * 1000;  // stop grace
constexpr int64_t kMaxHeartbeatMs = 3600LL * 1000;   // heartbeat interval
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();

json GpuToJson(const GpuInfo& g) {
  json j = {{"index", g.index},         {"uuid", g.uuid},
            {"name", g.name},           {"memory_mib", g.memory_mib},
            {"cc_major", g.cc_major},   {"cc_minor", g.cc_minor},
            {"simulated", g.simulated}, {"minor_number", g.minor_number}};
  // A MIG instance only: whole GPUs are written as before the fields.
  if (g.IsMig()) {
    j["parent_uuid"] = g.parent_uuid;
    j["mig_profile"] = g.mig_profile;
    j["mig_slices"] = g.mig_slices;
    j["mig_gpu_instance"] = g.mig_gpu_instance;
    j["mig_compute_instance"] = g.mig_compute_instance;
  }
  return j;
}

// The MIG fields of a GPU (absent: a whole GPU, as from older agents).
void MigFromJson(JsonReader& r, GpuInfo* g) {
  g->parent_uuid = r.Str("parent_uuid", false);
  if (g->parent_uuid.empty()) return;
  g->mig_profile = r.Str("mig_profile");
  if (r.ok() && !MigProfileOf(g->mig_profile)) {
    r.Fail("mig_profile", "must be a MIG profile such as \"3g.40gb\"");
  }
  g->mig_slices = static_cast<int32_t>(r.IntIn("mig_slices", 1, 64));
  g->mig_gpu_instance = static_cast<int32_t>(r.IntIn("mig_gpu_instance", -1, 1024, false, -1));
  g->mig_compute_instance =
      static_cast<int32_t>(r.IntIn("mig_compute_instance", -1, 1024, false, -1));
}

Status GpuFromJson(const json& j, const std::string& path, GpuInfo* g) {
  JsonReader r(j, path);
  g->index = static_cast<int32_t>(r.IntIn("index", 0, kMaxGpus - 1));
  g->uuid = r.Str("uuid");
  g->name = r.Str("name");
  g->memory_mib = r.IntIn("memory_mib", 0, kMaxMib);
  g->cc_major = static_cast<int32_t>(r.IntIn("cc_major", 0, 99, false));
  g->cc_minor = static_cast<int32_t>(r.IntIn("cc_minor", 0, 99, false));
  g->simulated = r.Bool("simulated", false);
  // Absent from agents older than the field: not known. Linux minors have 20 bits.
  int64_t minor_number = r.Int("minor_number", false, -1);
  if (minor_number < -1 || minor_number >= (1 << 20)) {
    r.Fail("minor_number", "must be -1 (not known) or a device minor number");
  } else {
    g->minor_number = static_cast<int32_t>(minor_number);
  }
  MigFromJson(r, g);
  if (r.ok() && g->uuid.empty()) r.Fail("uuid", "must not be empty");
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
          {"energy_mj", t.energy_mj},
          {"processes", procs}};
}

Status TelemetryFromJson(const json& j, const std::string& path, GpuTelemetry* t) {
  JsonReader r(j, path);
  t->uuid = r.Str("uuid");
  // -1: not known.
  t->memory_used_mib = r.IntIn("memory_used_mib", -1, kMaxMib, false, -1);
  t->utilization_percent = static_cast<int32_t>(r.IntIn("utilization_percent", -1, 100, false, -1));
  t->temperature_c = static_cast<int32_t>(r.IntIn("temperature_c", -1, kInt32Max, false, -1));
  t->power_mw = r.IntIn("power_mw", -1, kInt32Max, false, -1);
  t->energy_mj = r.IntIn("energy_mj", -1, std::numeric_limits<int64_t>::max(), false, -1);
  r.Each("processes", false, kMaxProcesses, [&](const json& p, const std::string& ppath) {
    JsonReader pr(p, ppath);
    GpuProcess proc{pr.IntIn("pid", 0, kInt32Max), pr.IntIn("used_memory_mib", 0, kMaxMib, false)};
    t->processes.push_back(proc);
    return pr.Finish(false);
  });
  return r.Finish(false);
}

constexpr std::pair<TaskState, std::string_view> kTaskStateNames[] = {
    {TaskState::kStarting, "starting"}, {TaskState::kRunning, "running"},
    {TaskState::kExited, "exited"},     {TaskState::kFailed, "failed"},
    {TaskState::kLost, "lost"},         {TaskState::kVacated, "vacated"},
    {TaskState::kRefused, "refused"},
};

// "must be one of starting, running, ..., not \"<value>\"": the value as
// an agent sent it, cut to 64 bytes and with anything but printable ASCII
// escaped, so that a hostile agent cannot forge log lines with it.
std::string UnknownTaskState(std::string_view value) {
  std::string out = "must be one of ";
  for (size_t i = 0; i < std::size(kTaskStateNames); ++i) {
    out += i ? ", " : "";
    out += kTaskStateNames[i].second;
  }
  out += ", not \"";
  constexpr size_t kMaxShown = 64;
  for (char c : value.substr(0, kMaxShown)) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    }
  }
  out += value.size() > kMaxShown ? "...\"" : "\"";
  return out;
}

json TaskToJson(const TaskReport& t) {
  json j = {{"attempt_id", t.attempt_id}, {"state", TaskStateName(t.state)}, {"ts_ms", t.ts_ms}};
  if (t.state == TaskState::kExited) {
    j["exit_code"] = t.exit_code;
    if (t.signal) j["signal"] = t.signal;
  }
  if (!t.reason.empty()) j["reason"] = t.reason;
  if (t.master_port != 0) j["master"] = {{"addr", t.master_addr}, {"port", t.master_port}};
  return j;
}

// A rendezvous host: an address or a DNS name, nothing a shell or URL would
// read more into.
bool IsHostText(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
           c == '_' || c == '%';
  });
}

Status TaskFromJson(const json& j, const std::string& path, TaskReport* t) {
  JsonReader r(j, path);
  t->attempt_id = r.Str("attempt_id");
  std::string state = r.Str("state");
  t->exit_code = static_cast<int32_t>(r.IntIn("exit_code", kInt32Min, kInt32Max, false));
  t->signal = static_cast<int32_t>(r.IntIn("signal", 0, 255, false));
  t->reason = r.Str("reason", false);
  t->ts_ms = r.IntIn("ts_ms", 0, kMaxTimeMs, false);
  if (r.ok()) {
    if (auto parsed = ParseTaskState(state); parsed.ok()) {
      t->state = *parsed;
    } else {
      r.Fail("state", UnknownTaskState(state));
    }
  }
  if (const json* master = r.Raw("master", false); master && !master->is_object()) {
    r.Fail("master", "must be an object");
  } else if (master && r.ok()) {
    JsonReader mr(*master, path + ".master");
    t->master_addr = mr.Str("addr");
    t->master_port = static_cast<int32_t>(mr.IntIn("port", 1, 65535));
    if (mr.ok() && !IsHostText(t->master_addr)) {
      mr.Fail("addr", "must be a host name or address");
    }
    if (!mr.Finish(false).ok()) return mr.status();
  }
  if (r.ok() && t->state == TaskState::kExited && !r.Has("exit_code"))
    r.Fail("exit_code", "is required when state is exited");
  // Only an exited task has them (TaskToJson writes them for no other).
  for (const char* key : {"exit_code", "signal"}) {
    if (r.ok() && t->state != TaskState::kExited && r.Has(key))
      r.Fail(key, "only a task that exited has one");
  }
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
  int64_t version = r.Int("v");
  e.seq = r.Int("seq");
  e.ack = r.Int("ack");
  e.type = r.Str("type");
  const json* body = r.Raw("body");
  GP_RETURN_IF_ERROR(r.Finish());
  if (version != kProtocolVersion) {
    return Status::InvalidArgument("v: unsupported protocol version " + std::to_string(version) +
                                   " (this side speaks " + std::to_string(kProtocolVersion) + ")");
  }
  e.version = kProtocolVersion;
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
    m->last_server_seq = r.IntIn("last_server_seq", 0, INT64_MAX);
    m->cpu_milli = r.IntIn("cpu_milli", 0, kMaxCpuMilli, false);
    m->memory_mib = r.IntIn("memory_mib", 0, kMaxMib, false);
    r.Each("gpus", false, kMaxGpus, [&](const json& g, const std::string& path) {
      GpuInfo info;
      GP_RETURN_IF_ERROR(GpuFromJson(g, path, &info));
      m->gpus.push_back(std::move(info));
      return Status::Ok();
    });
    m->driver_version = r.Str("driver_version", false);
    m->cuda_version = r.Str("cuda_version", false);
    m->labels = r.StrMap("labels", false, kMaxLabels);
    m->owner_group = r.Str("owner_group", false);
    r.Each("tasks", false, kMaxTasks, [&](const json& t, const std::string& path) {
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
    return r.status();
  });
}

std::string Encode(const Heartbeat& m) {
  json t = json::array();
  for (const auto& g : m.telemetry) t.push_back(TelemetryToJson(g));
  json shares = json::array();
  for (const ShareUse& s : m.shares) {
    shares.push_back({{"attempt_id", s.attempt_id},
                      {"gpu_uuid", s.gpu_uuid},
                      {"memory_cap_mib", s.memory_cap_mib},
                      {"memory_used_mib", s.memory_used_mib}});
  }
  return json{{"telemetry", t}, {"running_tasks", m.running_tasks}, {"shares", shares}}.dump();
}

Result<Heartbeat> DecodeHeartbeat(std::string_view body) {
  return DecodeBody<Heartbeat>(body, [](JsonReader& r, Heartbeat* m) {
    r.Each("telemetry", false, kMaxGpus, [&](const json& g, const std::string& path) {
      GpuTelemetry t;
      GP_RETURN_IF_ERROR(TelemetryFromJson(g, path, &t));
      m->telemetry.push_back(std::move(t));
      return Status::Ok();
    });
    m->running_tasks = static_cast<int32_t>(r.IntIn("running_tasks", 0, kInt32Max, false));
    // Absent from agents that predate shares' reports.
    r.Each("shares", false, kMaxShares, [&](const json& s, const std::string& path) {
      JsonReader sr(s, path);
      ShareUse use;
      use.attempt_id = sr.Str("attempt_id");
      use.gpu_uuid = sr.Str("gpu_uuid");
      use.memory_cap_mib = sr.IntIn("memory_cap_mib", 0, kMaxMib);
      use.memory_used_mib = sr.IntIn("memory_used_mib", -1, kMaxMib, false, -1);
      m->shares.push_back(std::move(use));
      return sr.Finish(false);
    });
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

namespace {

char RecordKind(const std::string& stream) {
  return stream == "stdout" ? 'o' : stream == "stderr" ? 'e' : stream == "event" ? 'v' : '\0';
}

// Records go in strings of at most this many bytes (a peer's JSON strings
// are limited to 64 KiB: JsonLimits).
constexpr size_t kMaxRecordsString = 60 * 1024;

// The compact form of `m`, or nullopt when a line cannot be a record.
std::optional<std::string> EncodeCompact(const LogChunk& m) {
  json offsets = json::array();
  json pieces = json::array();
  std::string piece, record;
  for (const auto& l : m.lines) {
    char kind = RecordKind(l.stream);
    if (kind == '\0' || l.text.find('\n') != std::string::npos || !IsValidUtf8(l.text)) {
      return std::nullopt;
    }
    record.clear();
    record += kind;
    record += ' ';
    record += std::to_string(l.ts_ms);
    record += ' ';
    record += l.text;
    record += '\n';
    if (record.size() > kMaxRecordsString) return std::nullopt;
    if (piece.size() + record.size() > kMaxRecordsString) {
      pieces.push_back(std::move(piece));
      piece.clear();
    }
    piece += record;
    offsets.push_back(l.offset);
  }
  if (!piece.empty()) pieces.push_back(std::move(piece));
  return json{{"attempt_id", m.attempt_id}, {"offsets", std::move(offsets)}, {"records", pieces}}
      .dump();
}

// The lines of a compact logs message: `records`, the strings of its
// records list, hold one record per offset. An error names what is wrong.
Status DecodeRecords(const std::vector<int64_t>& offsets, const json& records,
                     std::vector<LogChunkLine>& lines) {
  size_t piece = 0, pos = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::string where = "body.records: record " + std::to_string(i + 1);
    while (piece < records.size() && pos == records[piece].get_ref<const std::string&>().size()) {
      ++piece;
      pos = 0;
    }
    if (piece == records.size()) return Status::InvalidArgument(where + ": missing");
    std::string_view text = records[piece].get_ref<const std::string&>();
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      return Status::InvalidArgument(where + ": does not end with a newline");
    }
    std::string_view rec = text.substr(pos, nl - pos);
    pos = nl + 1;
    size_t sp = rec.size() >= 4 && rec[1] == ' ' ? rec.find(' ', 2) : std::string_view::npos;
    int64_t ts = 0;
    auto [end, ec] = sp == std::string_view::npos
                         ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                         : std::from_chars(rec.data() + 2, rec.data() + sp, ts);
    const char* stream = rec.empty()     ? nullptr
                         : rec[0] == 'o' ? "stdout"
                         : rec[0] == 'e' ? "stderr"
                         : rec[0] == 'v' ? "event"
                                         : nullptr;
    if (stream == nullptr || ec != std::errc() || end != rec.data() + sp || ts < 0 ||
        ts > kMaxTimeMs) {
      return Status::InvalidArgument(where + ": expected \"<o|e|v> <ts_ms> <text>\"");
    }
    if (offsets[i] < 0 || offsets[i] > kMaxLogOffset) {
      return Status::InvalidArgument("body.offsets[" + std::to_string(i) + "]: out of range");
    }
    lines.push_back({offsets[i], stream, ts, std::string(rec.substr(sp + 1))});
  }
  while (piece < records.size() && pos == records[piece].get_ref<const std::string&>().size()) {
    ++piece;
    pos = 0;
  }
  if (piece != records.size()) {
    return Status::InvalidArgument("body.records: more records than offsets");
  }
  return Status::Ok();
}

}  // namespace

std::string Encode(const LogChunk& m) {
  if (m.compact) {
    if (auto compact = EncodeCompact(m)) return *compact;
  }
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
    if (const json* records = r.Raw("records", false)) {
      m->compact = true;
      const json* offsets = r.Raw("offsets");
      if (!r.ok()) return r.status();
      if (!records->is_array() || !std::all_of(records->begin(), records->end(),
                                               [](const json& p) { return p.is_string(); })) {
        r.Fail("records", "must be a list of strings");
      }
      if (r.ok() && (!offsets->is_array() || offsets->size() > kMaxLogLines)) {
        r.Fail("offsets", "must be a list of at most " + std::to_string(kMaxLogLines) + " offsets");
      }
      std::vector<int64_t> at;
      for (size_t i = 0; r.ok() && i < offsets->size(); ++i) {
        if (!(*offsets)[i].is_number_integer()) {
          r.Fail("offsets", "must be whole numbers");
        } else {
          at.push_back((*offsets)[i].get<int64_t>());
        }
      }
      if (r.ok()) {
        Status s = DecodeRecords(at, *records, m->lines);
        if (!s.ok()) return s;
      }
    } else {
      r.Each("lines", true, kMaxLogLines, [&](const json& l, const std::string& path) {
        JsonReader lr(l, path);
        LogChunkLine line{lr.IntIn("offset", 0, kMaxLogOffset), lr.Str("stream"),
                          lr.IntIn("ts_ms", 0, kMaxTimeMs, false), lr.Str("text")};
        if (lr.ok() && line.stream != "stdout" && line.stream != "stderr" &&
            line.stream != "event") {
          lr.Fail("stream", "must be stdout, stderr or event");
        }
        m->lines.push_back(std::move(line));
        return lr.Finish(false);
      });
    }
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
              {"log_offsets", m.log_offsets},
              {"attempt_lease_ms", m.attempt_lease_ms},
              {"log_records", m.log_records}}
      .dump();
}

Result<Welcome> DecodeWelcome(std::string_view body) {
  return DecodeBody<Welcome>(body, [](JsonReader& r, Welcome* m) {
    m->node_id = r.Str("node_id");
    m->last_agent_seq = r.IntIn("last_agent_seq", 0, INT64_MAX);
    m->heartbeat_ms = r.IntIn("heartbeat_ms", 1, kMaxHeartbeatMs, false, 5000);
    m->log_offsets = r.IntMap("log_offsets", false, kMaxLogOffsets);
    m->attempt_lease_ms = r.IntIn("attempt_lease_ms", 0, kMaxHeartbeatMs * 100, false);
    m->log_records = r.Bool("log_records", false, false);
    for (const auto& [attempt, offset] : m->log_offsets) {
      if (r.ok() && (offset < -1 || offset > kMaxLogOffset)) {
        r.Fail("log_offsets", "the offset of " + attempt + " must be from -1 to " +
                                  std::to_string(kMaxLogOffset) + ", got " +
                                  std::to_string(offset));
      }
    }
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
  if (m.max_output_bytes != 0) j["max_output_bytes"] = m.max_output_bytes;
  if (!m.restore_manifest.empty()) {
    j["restore"] = {{"checkpoint", m.restore_checkpoint}, {"manifest", m.restore_manifest}};
  }
  if (m.gang) {
    json g = {
        {"rank", m.gang->rank}, {"nodes", m.gang->nodes}, {"mode", DistributedName(m.gang->mode)}};
    if (m.gang->master_port != 0) {
      g["master"] = {{"addr", m.gang->master_addr}, {"port", m.gang->master_port}};
    }
    j["gang"] = std::move(g);
  }
  return j.dump();
}

Result<StartTask> DecodeStartTask(std::string_view body) {
  return DecodeBody<StartTask>(body, [](JsonReader& r, StartTask* m) {
    m->attempt_id = r.Str("attempt_id");
    m->job_id = r.IntIn("job_id", 1, INT64_MAX);
    m->owner = r.Str("owner", false);
    const json* spec = r.Raw("spec");
    m->gpu_uuids = r.StrList("gpu_uuids", false, kMaxGpus);
    m->gpu_milli = static_cast<int32_t>(r.IntIn("gpu_milli", 0, 1000, false));
    m->gpu_memory_mib = r.IntIn("gpu_memory_mib", 0, kMaxMib, false);
    m->max_output_bytes = r.IntIn("max_output_bytes", 0, INT64_MAX, false);
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
    if (const json* gang = r.Raw("gang", false); gang && !gang->is_object()) {
      r.Fail("gang", "must be an object");
    } else if (gang && r.ok()) {
      JsonReader gr(*gang, "body.gang");
      GangRank g;
      g.nodes = static_cast<int32_t>(gr.IntIn("nodes", 2, kMaxGangNodes));
      g.rank = static_cast<int32_t>(gr.IntIn("rank", 0, kMaxGangNodes - 1));
      std::string mode = gr.Str("mode");
      if (gr.ok()) {
        auto d = ParseDistributed(mode);
        if (!d.ok()) gr.Fail("mode", "must be torch or none");
        g.mode = d.ok() ? *d : Distributed::kTorch;
      }
      if (gr.ok() && g.rank >= g.nodes) gr.Fail("rank", "must be below nodes");
      if (const json* master = gr.Raw("master", false); master && !master->is_object()) {
        gr.Fail("master", "must be an object");
      } else if (master && gr.ok()) {
        JsonReader mr(*master, "body.gang.master");
        g.master_addr = mr.Str("addr");
        g.master_port = static_cast<int32_t>(mr.IntIn("port", 1, 65535));
        if (mr.ok() && !IsHostText(g.master_addr))
          mr.Fail("addr", "must be a host name or address");
        if (!mr.Finish(false).ok()) return mr.status();
      }
      if (!gr.Finish(false).ok()) return gr.status();
      m->gang = std::move(g);
    }
    if (r.ok() && m->gpu_milli > 0 && m->gpu_milli < 1000 && m->gpu_uuids.size() != 1) {
      r.Fail("gpu_uuids", "a share of a GPU names exactly one GPU");
    }
    if (r.ok()) {
      // The spec of a stored job, which may predate today's submission limits.
      auto s = JobSpecFromJson(*spec, kStoredLimits);
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
    m->grace_ms = r.IntIn("grace_ms", 0, kMaxGraceMs, false);
    m->requeue = r.Bool("requeue", false);
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

std::string Encode(const OwnerCommand& m) {
  return json{{"command", m.command}, {"gpus", m.gpus}, {"now", m.now}, {"by", m.by}}.dump();
}

Result<OwnerCommand> DecodeOwnerCommand(std::string_view body) {
  return DecodeBody<OwnerCommand>(body, [](JsonReader& r, OwnerCommand* m) {
    m->command = r.Str("command");
    m->gpus = r.StrList("gpus", false, kMaxGpus);
    m->now = r.Bool("now", false);
    m->by = r.Str("by", false);
    if (r.ok() && m->command != "pause" && m->command != "resume" && m->command != "reclaim") {
      r.Fail("command", "must be one of pause, resume, reclaim");
    }
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
    m->ts_ms = r.IntIn("ts_ms", 0, kMaxTimeMs);
    m->kind = r.Str("kind");
    m->reason = r.Str("reason", false);
    m->gpus = r.StrList("gpus", false, kMaxEventItems);
    m->attempts = r.StrList("attempts", false, kMaxEventItems);
    if (r.ok() && std::find(std::begin(kNodeEventKinds), std::end(kNodeEventKinds), m->kind) ==
                      std::end(kNodeEventKinds)) {
      r.Fail("kind", "must be one of reclaim, pause, resume, leave, policy, refused");
    }
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

std::string Encode(const Lease& m) { return json{{"sent_ms", m.sent_ms}}.dump(); }

Result<Lease> DecodeLease(std::string_view body) {
  return DecodeBody<Lease>(body, [](JsonReader& r, Lease* m) {
    m->sent_ms = r.IntIn("sent_ms", 0, INT64_MAX);
    return r.status();
  });
}

Result<AgentReport> DecodeAgentReport(std::string_view type, std::string_view body) {
  // Each alternative decodes with its own strict decoder.
  auto as_report = [](auto decoded) -> Result<AgentReport> {
    if (!decoded.ok()) return decoded.status();
    return AgentReport(std::move(*decoded));
  };
  if (type == kTaskStatus) return as_report(DecodeTaskReport(body));
  if (type == kLogs) return as_report(DecodeLogChunk(body));
  if (type == kLending) return as_report(DecodeLending(body));
  if (type == kNodeEvent) return as_report(DecodeNodeEvent(body));
  if (type == kLeave) return as_report(DecodeLeave(body));
  return Status::InvalidArgument("type: unknown reliable message type \"" + std::string(type) +
                                 "\"");
}

std::string_view TaskStateName(TaskState s) { return kTaskStateNames[static_cast<int>(s)].second; }

Result<TaskState> ParseTaskState(std::string_view name) {
  for (const auto& [state, text] : kTaskStateNames) {
    if (text == name) return state;
  }
  return Status::InvalidArgument("task state " + UnknownTaskState(name));
}

}  // namespace gpupool::proto
