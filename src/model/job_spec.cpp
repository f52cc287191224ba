// JobSpec parsing, validation and JSON mapping. See job_spec.h for the
// accepted fields.
//
// One code path: YAML text is first turned into a nlohmann::json tree
// (model/yaml.h: plain scalars resolved per the YAML 1.2 core schema, quoted
// scalars kept as strings), then JobSpecFromJson converts and checks it
// exactly as it checks an API request body, and finally ValidateJobSpec
// checks the invariants.
#include "model/job_spec.h"

#include "common/money.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "common/ids.h"
#include "common/units.h"
#include "model/image_ref.h"
#include "model/job_spec_resources.h"
#include "model/spec_fields.h"
#include "model/yaml.h"

namespace gpupool {
namespace {

using nlohmann::json;
using namespace spec_fields;  // NOLINT: the spec's shared field helpers

// Limits (the table in docs/user-guide.md). Anything beyond them is a typo
// or an attack, not a real job; together they keep a job's argv and
// environment far below Linux's ARG_MAX (2 MiB with an 8 MiB stack).
constexpr size_t kMaxSpecBytes = 1 << 20;  // YAML/JSON text
constexpr size_t kMaxNameChars = 128;
constexpr size_t kMaxWorkdirBytes = 4096;
constexpr size_t kMaxEnvNameChars = 256;
constexpr int64_t kMaxRuntimeSeconds = 365LL * 24 * 3600;
constexpr int64_t kMinCheckpointIntervalSeconds = 10;
constexpr int64_t kMaxCheckpointIntervalSeconds = 7LL * 24 * 3600;
constexpr int64_t kMaxGraceSeconds = 3600;
constexpr int32_t kMaxRestarts = 100;
// What the agent sets for each rank of a torch gang (torchrun's names).
constexpr const char* kTorchRendezvousEnv[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                               "RANK",        "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                               "NODE_RANK",   "GROUP_RANK"};

constexpr const char* kTopFields[] = {
    "name",       "run",      "command", "env",         "resources",    "max_runtime",
    "max_cost",   "priority", "group",   "image",       "executor",     "network",
    "checkpoint", "workdir",  "inputs",  "distributed", "max_restarts", "session"};
constexpr const char* kCheckpointFields[] = {"interval", "grace", "signal", "standby"};
constexpr const char* kSessionFields[] = {"kind", "idle_timeout", "ports", "any_port",
                                          "jupyter_token"};
constexpr int64_t kMaxSessionIdleSeconds = 30 * 86'400;
constexpr size_t kMaxSessionPorts = 32;
constexpr size_t kMaxJupyterTokenBytes = 256;
// Signals a job may ask to receive as its checkpoint request (SIGKILL and
// SIGSTOP cannot be caught, so they could never request anything).
constexpr const char* kCheckpointSignals[] = {"SIGUSR1", "SIGUSR2", "SIGHUP",  "SIGINT",
                                              "SIGQUIT", "SIGTERM", "SIGALRM", "SIGWINCH"};

std::string Join(const char* const* begin, const char* const* end) {
  std::string s;
  for (auto it = begin; it != end; ++it) {
    if (!s.empty()) s += ", ";
    s += *it;
  }
  return s;
}

// ---------------------------------------------------------------------------
// Numbers.

// ---------------------------------------------------------------------------
// Range checks shared by JobSpecFromJson and ValidateJobSpec.

Status CheckRuntimeMs(int64_t ms) {
  if (ms < 0) return FieldError("max_runtime", "must not be negative, got " + FormatDurationMs(ms));
  if (ms > kMaxRuntimeSeconds * 1000) {
    return FieldError("max_runtime", "must be at most " +
                                         FormatDurationMs(kMaxRuntimeSeconds * 1000) + ", got " +
                                         FormatDurationMs(ms));
  }
  return Status::Ok();
}

// Size limits, shared by the parsers and ValidateJobSpec so that both say
// the same.
Status AtMost(std::string_view path, size_t got, size_t max, std::string_view what) {
  if (got <= max) return Status::Ok();
  return FieldError(path, "at most " + std::to_string(max) + " " + std::string(what) + ", got " +
                              std::to_string(got));
}
Status CheckRunBytes(size_t n, const SpecLimits& l) {
  return AtMost("run", n, l.run_bytes, "bytes");
}
Status CheckCommandArgs(size_t n, const SpecLimits& l) {
  return AtMost("command", n, l.command_args, "arguments");
}
Status CheckCommandBytes(size_t n, const SpecLimits& l) {
  return AtMost("command", n, l.command_bytes, "bytes in all arguments together");
}
Status CheckEnvCount(size_t n, const SpecLimits& l) {
  return AtMost("env", n, l.env_vars, "entries");
}
Status CheckEnvValueBytes(std::string_view name, size_t n, const SpecLimits& l) {
  return AtMost("env." + std::string(name), n, l.env_value_bytes, "bytes");
}
Status CheckEnvBytes(size_t n, const SpecLimits& l) {
  return AtMost("env", n, l.env_bytes, "bytes in names and values together");
}

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameChars) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status CheckEnvName(std::string_view name) {
  if (name.size() > kMaxEnvNameChars) {
    // Named by its start: the whole name would swamp the message.
    return FieldError("env", "variable name " + QuoteForError(name) + " is " +
                                 std::to_string(name.size()) + " bytes long, at most " +
                                 std::to_string(kMaxEnvNameChars));
  }
  std::string path = "env." + std::string(name);
  bool ok = !name.empty();
  for (size_t i = 0; ok && i < name.size(); ++i) {
    char c = name[i];
    ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
         (i > 0 && c >= '0' && c <= '9');
  }
  if (!ok) return FieldError(path, "invalid variable name (must match [A-Za-z_][A-Za-z0-9_]*)");
  if (name.starts_with("GPUPOOL_") || name == "CUDA_VISIBLE_DEVICES") {
    return FieldError(
        path, "reserved variable name (GPUPOOL_* and CUDA_VISIBLE_DEVICES are set by the agent)");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Canonical text forms that parse back to exactly the same integer.

// ---------------------------------------------------------------------------
// Field conversion.

Status ParseCheckpoint(const json& v, CheckpointSpec& out) {
  if (!v.is_object()) {
    return FieldError("checkpoint", "expected a mapping such as {interval: 30m, grace: 60s}, got " +
                                        DescribeValue(v));
  }
  GP_RETURN_IF_ERROR(CheckKnownFields(v, "checkpoint.", kCheckpointFields));
  if (const json* i = Field(v, "interval")) {
    GP_ASSIGN_OR_RETURN(out.interval_ms,
                        DurationField(*i, "checkpoint.interval", kMaxCheckpointIntervalSeconds));
  }
  if (const json* g = Field(v, "grace")) {
    GP_ASSIGN_OR_RETURN(out.grace_ms, DurationField(*g, "checkpoint.grace", kMaxGraceSeconds));
  }
  if (const json* s = Field(v, "signal")) {
    GP_ASSIGN_OR_RETURN(out.signal, StringField(*s, "checkpoint.signal"));
    // "USR1" is SIGUSR1.
    if (out.signal != "none" && !out.signal.starts_with("SIG")) out.signal = "SIG" + out.signal;
  }
  if (const json* s = Field(v, "standby")) {
    if (!s->is_boolean()) {
      return FieldError("checkpoint.standby", "must be true or false, got " + DescribeValue(*s));
    }
    out.standby = s->get<bool>();
  }
  return Status::Ok();
}

Status ParseSession(const json& v, SessionSpec& out) {
  if (!v.is_object()) {
    return FieldError(
        "session",
        "expected a mapping such as {kind: jupyter, idle_timeout: 30m}, got " + DescribeValue(v));
  }
  GP_RETURN_IF_ERROR(CheckKnownFields(v, "session.", kSessionFields));
  if (const json* k = Field(v, "kind")) {
    GP_ASSIGN_OR_RETURN(std::string text, StringField(*k, "session.kind"));
    auto kind = ParseSessionKind(text);
    if (!kind.ok())
      return FieldError("session.kind", "must be shell or jupyter, got " + QuoteForError(text));
    out.kind = *kind;
  }
  if (const json* t = Field(v, "idle_timeout")) {
    GP_ASSIGN_OR_RETURN(out.idle_timeout_ms,
                        DurationField(*t, "session.idle_timeout", kMaxSessionIdleSeconds));
  }
  if (const json* p = Field(v, "ports")) {
    if (!p->is_array()) {
      return FieldError("session.ports",
                        "must be a list of TCP ports such as [6006], got " + DescribeValue(*p));
    }
    if (p->size() > kMaxSessionPorts) {
      return FieldError("session.ports", "at most " + std::to_string(kMaxSessionPorts) +
                                             " ports, got " + std::to_string(p->size()));
    }
    for (size_t i = 0; i < p->size(); ++i) {
      const json& port = (*p)[i];
      if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535) {
        return FieldError("session.ports[" + std::to_string(i) + "]",
                          "must be a TCP port from 1 to 65535, got " + DescribeValue(port));
      }
      out.ports.push_back(static_cast<int>(port.get<int64_t>()));
    }
  }
  if (const json* a = Field(v, "any_port")) {
    if (!a->is_boolean()) {
      return FieldError("session.any_port", "must be true or false, got " + DescribeValue(*a));
    }
    out.any_port = a->get<bool>();
  }
  if (const json* t = Field(v, "jupyter_token")) {
    GP_ASSIGN_OR_RETURN(out.jupyter_token, StringField(*t, "session.jupyter_token"));
  }
  return Status::Ok();
}

Status ParseEnv(const json& j, std::map<std::string, std::string>& out, const SpecLimits& limits) {
  if (!j.is_object())
    return FieldError("env", "expected a mapping of NAME: value, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckEnvCount(j.size(), limits));
  size_t total = 0;
  for (const auto& [name, value] : j.items()) {
    GP_RETURN_IF_ERROR(CheckEnvName(name));
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      text = value.dump();
    } else {
      return FieldError("env." + name,
                        "must be a string, number or boolean, got " + DescribeValue(value));
    }
    GP_RETURN_IF_ERROR(CheckEnvValueBytes(name, text.size(), limits));
    total += name.size() + text.size();
    out[name] = std::move(text);
  }
  return CheckEnvBytes(total, limits);
}

}  // namespace

Result<JobSpec> ParseJobSpec(std::string_view text) {
  YamlOptions options;
  options.what = "spec";
  options.max_bytes = kMaxSpecBytes;
  options.empty_message = "empty spec; expected a mapping with run or command";
  options.text_valued_keys = {"env"};
  YamlLines lines;
  GP_ASSIGN_OR_RETURN(json j, ParseYamlDocument(text, options, &lines));
  auto spec = JobSpecFromJson(j);
  if (!spec.ok()) return WithLine(spec.status(), lines);
  return spec;
}

Result<JobSpec> JobSpecFromJson(const json& j, const SpecLimits& limits) {
  if (!j.is_object()) return FieldError("", "expected a mapping, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "", kTopFields));
  JobSpec spec;
  spec.name = "job";
  if (const json* v = Field(j, "name")) {
    GP_ASSIGN_OR_RETURN(spec.name, StringField(*v, "name"));
  }
  const json* run = Field(j, "run");
  const json* command = Field(j, "command");
  if (run && command) return FieldError("run/command", "give run or command, not both");
  if (run) {
    GP_ASSIGN_OR_RETURN(spec.run, StringField(*run, "run"));
    if (spec.run.empty()) return FieldError("run", "must not be empty");
  }
  if (command) {
    if (!command->is_array()) {
      return FieldError("command", "must be a list of strings (use run for a shell command), got " +
                                       DescribeValue(*command));
    }
    if (command->empty()) return FieldError("command", "must not be empty");
    GP_RETURN_IF_ERROR(CheckCommandArgs(command->size(), limits));
    size_t total = 0;
    for (const json& arg : *command)
      total += arg.is_string() ? arg.get_ref<const std::string&>().size() : 0;
    GP_RETURN_IF_ERROR(CheckCommandBytes(total, limits));
    for (size_t i = 0; i < command->size(); ++i) {
      GP_ASSIGN_OR_RETURN(std::string arg,
                          StringField((*command)[i], "command[" + std::to_string(i) + "]"));
      spec.command.push_back(std::move(arg));
    }
  }
  if (const json* v = Field(j, "env")) GP_RETURN_IF_ERROR(ParseEnv(*v, spec.env, limits));
  if (const json* v = Field(j, "image")) {
    GP_ASSIGN_OR_RETURN(spec.image, StringField(*v, "image"));
  }
  if (const json* v = Field(j, "executor")) {
    GP_ASSIGN_OR_RETURN(spec.executor, StringField(*v, "executor"));
  }
  if (const json* v = Field(j, "network")) {
    if (v->is_boolean()) {
      spec.network = v->get<bool>() ? NetworkMode::kPrivate : NetworkMode::kNone;
    } else if (v->is_string() && v->get<std::string>() == "host") {
      spec.network = NetworkMode::kHost;
    } else {
      return FieldError("network", "must be true, false or \"host\", got " + DescribeValue(*v));
    }
  }
  if (const json* v = Field(j, "resources")) GP_RETURN_IF_ERROR(ParseResources(*v, spec.resources));
  if (const json* v = Field(j, "max_runtime")) {
    if (v->is_string()) {
      auto ms = ParseDurationMs(v->get_ref<const std::string&>());
      if (!ms.ok()) return ms.status().WithContext("max_runtime");
      spec.max_runtime_ms = *ms;
      GP_RETURN_IF_ERROR(CheckRuntimeMs(spec.max_runtime_ms));
    } else if (v->is_number()) {
      GP_ASSIGN_OR_RETURN(spec.max_runtime_ms,
                          NumberToMilli(*v, "max_runtime", kMaxRuntimeSeconds,
                                        "must be a number of seconds from 0 to " +
                                            std::to_string(kMaxRuntimeSeconds) + " (365d)"));
    } else {
      return FieldError(
          "max_runtime",
          "must be a duration such as \"2h\" or a number of seconds, got " + DescribeValue(*v));
    }
  }
  if (const json* v = Field(j, "max_cost")) {
    // Credits: a number (50, 12.5) or the same as a string ("12.50").
    std::string text;
    if (v->is_string()) {
      text = v->get_ref<const std::string&>();
    } else if (v->is_number_integer()) {
      text = std::to_string(v->get<int64_t>());
    } else if (v->is_number_float()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6f", v->get<double>());
      text = buf;
    } else {
      return FieldError("max_cost",
                        "must be a number of credits such as 50, got " + DescribeValue(*v));
    }
    GP_ASSIGN_OR_RETURN(spec.max_cost_micros, accounting::ParseCredits(text, "max_cost"));
    if (spec.max_cost_micros == 0) {
      return FieldError("max_cost", "must be more than zero (leave it out for no limit)");
    }
  }
  if (const json* v = Field(j, "priority")) {
    GP_ASSIGN_OR_RETURN(std::string text, StringField(*v, "priority"));
    auto p = ParseJobPriority(text);
    if (!p.ok()) return p.status().WithContext("priority");
    spec.priority = *p;
  }
  if (const json* v = Field(j, "group")) {
    GP_ASSIGN_OR_RETURN(spec.group, StringField(*v, "group"));
  }
  if (const json* v = Field(j, "checkpoint")) {
    CheckpointSpec checkpoint;
    GP_RETURN_IF_ERROR(ParseCheckpoint(*v, checkpoint));
    spec.checkpoint = std::move(checkpoint);
  }
  if (const json* v = Field(j, "workdir")) {
    GP_ASSIGN_OR_RETURN(spec.workdir, StringField(*v, "workdir"));
    if (spec.workdir.empty()) return FieldError("workdir", "must not be empty");
  }
  if (const json* v = Field(j, "inputs")) {
    GP_ASSIGN_OR_RETURN(spec.inputs, StringField(*v, "inputs"));
  }
  if (const json* v = Field(j, "max_restarts")) {
    bool ok = v->is_number_unsigned()  ? v->get<uint64_t>() <= uint64_t{kMaxRestarts}
              : v->is_number_integer() ? v->get<int64_t>() >= 0 && v->get<int64_t>() <= kMaxRestarts
                                       : false;
    if (!ok) {
      return FieldError("max_restarts", "must be a whole number from 0 to " +
                                            std::to_string(kMaxRestarts) + ", got " +
                                            DescribeValue(*v));
    }
    spec.max_restarts = static_cast<int32_t>(v->get<int64_t>());
  }
  if (const json* v = Field(j, "distributed")) {
    GP_ASSIGN_OR_RETURN(std::string text, StringField(*v, "distributed"));
    auto d = ParseDistributed(text);
    if (!d.ok())
      return FieldError("distributed", "must be torch or none, got " + QuoteForError(text));
    spec.distributed = *d;
  }
  if (const json* v = Field(j, "session")) {
    SessionSpec session;
    GP_RETURN_IF_ERROR(ParseSession(*v, session));
    spec.session = std::move(session);
    // A session waits for its user: it is interactive unless it says.
    if (!Field(j, "priority")) spec.priority = JobPriority::kInteractive;
    if (spec.run.empty() && spec.command.empty()) spec.run = DefaultSessionCommand(*spec.session);
  }
  GP_RETURN_IF_ERROR(ValidateJobSpec(spec, limits));
  return spec;
}

std::string DefaultSessionCommand(const SessionSpec& session) {
  if (session.kind == SessionKind::kJupyter) {
    // The agent gives the socket and the token (GPUPOOL_JUPYTER_SOCKET,
    // JUPYTER_TOKEN); the server's proxy serves it under base_url.
    return "exec jupyter notebook --no-browser --sock=\"$GPUPOOL_JUPYTER_SOCKET\" "
           "--NotebookApp.base_url=\"/v1/sessions/$GPUPOOL_JOB_ID/proxy/\" "
           "--NotebookApp.allow_remote_access=True";
  }
  // A shell session's own process only keeps it alive; users come in with
  // gpupool shell and exec.
  return "while :; do sleep 3600; done";
}

Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits) {
  if (!IsValidName(spec.name)) {
    return FieldError("name", "must be 1 to " + std::to_string(kMaxNameChars) +
                                  " characters of A-Z, a-z, 0-9, '.', '_' and '-', got " +
                                  QuoteForError(spec.name));
  }
  bool has_run = !spec.run.empty();
  bool has_command = !spec.command.empty();
  if (has_run && has_command) return FieldError("run/command", "give run or command, not both");
  if (!has_run && !has_command && spec.image.empty()) {
    return FieldError("run/command",
                      "one of run or command is required (only a job with an image may leave "
                      "both out, to run the image's own command)");
  }
  if (!spec.image.empty()) {
    auto ref = ParseImageRef(spec.image);
    if (!ref.ok()) return ref.status().WithContext("image");
  }
  if (!spec.executor.empty() && std::find(std::begin(kExecutorNames), std::end(kExecutorNames),
                                          spec.executor) == std::end(kExecutorNames)) {
    return FieldError("executor", "unknown executor " + QuoteForError(spec.executor) +
                                      " (one of: sandbox, process, docker, podman)");
  }
  if (spec.executor == "process" && !spec.image.empty()) {
    return FieldError("executor", "the process executor cannot run an image (use sandbox)");
  }
  if ((spec.executor == "docker" || spec.executor == "podman") && spec.image.empty()) {
    return FieldError("image",
                      "the " + spec.executor + " executor needs an image (image: docker://...)");
  }
  if (has_run) {
    if (spec.run.find_first_not_of(" \t\r\n") == std::string::npos) {
      return FieldError("run", "must not be blank");
    }
    GP_RETURN_IF_ERROR(CheckRunBytes(spec.run.size(), limits));
    GP_RETURN_IF_ERROR(CheckText("run", spec.run));
  }
  if (has_command) {
    GP_RETURN_IF_ERROR(CheckCommandArgs(spec.command.size(), limits));
    size_t total = 0;
    for (const std::string& arg : spec.command) total += arg.size();
    GP_RETURN_IF_ERROR(CheckCommandBytes(total, limits));
    if (spec.command[0].empty()) return FieldError("command[0]", "the program must not be empty");
    for (size_t i = 0; i < spec.command.size(); ++i) {
      GP_RETURN_IF_ERROR(CheckText("command[" + std::to_string(i) + "]", spec.command[i]));
    }
  }
  GP_RETURN_IF_ERROR(CheckEnvCount(spec.env.size(), limits));
  size_t env_bytes = 0;
  for (const auto& [name, value] : spec.env) {
    GP_RETURN_IF_ERROR(CheckEnvName(name));
    GP_RETURN_IF_ERROR(CheckEnvValueBytes(name, value.size(), limits));
    GP_RETURN_IF_ERROR(CheckText("env." + name, value));
    env_bytes += name.size() + value.size();
  }
  GP_RETURN_IF_ERROR(CheckEnvBytes(env_bytes, limits));
  GP_RETURN_IF_ERROR(ValidateResources(spec.resources));
  GP_RETURN_IF_ERROR(CheckRuntimeMs(spec.max_runtime_ms));
  const Resources& r = spec.resources;
  if (spec.max_restarts < 0 || spec.max_restarts > kMaxRestarts) {
    return FieldError("max_restarts", "must be from 0 to " + std::to_string(kMaxRestarts) +
                                          ", got " + std::to_string(spec.max_restarts));
  }
  if (r.nodes > 1 && spec.network == NetworkMode::kNone) {
    return FieldError("network",
                      "a multi-node job needs the network: its ranks talk to each other");
  }
  if (r.nodes > 1 && spec.distributed == Distributed::kTorch) {
    for (const char* name : kTorchRendezvousEnv) {
      if (spec.env.count(name)) {
        return FieldError("env." + std::string(name),
                          "reserved in a multi-node torch job (the agent sets the rendezvous)");
      }
    }
  }
  if (static_cast<int>(spec.distributed) < 0 || static_cast<int>(spec.distributed) > 1) {
    return FieldError("distributed", "must be torch or none");
  }
  if (static_cast<int>(spec.priority) < 0 || static_cast<int>(spec.priority) > 2) {
    return FieldError("priority", "must be interactive, normal or opportunistic");
  }
  if (!IsValidName(spec.group)) {
    return FieldError("group", "must be 1 to " + std::to_string(kMaxNameChars) +
                                   " characters of A-Z, a-z, 0-9, '.', '_' and '-', got " +
                                   QuoteForError(spec.group));
  }
  if (spec.workdir.size() > kMaxWorkdirBytes) {
    return FieldError("workdir", "at most " + std::to_string(kMaxWorkdirBytes) + " bytes, got " +
                                     std::to_string(spec.workdir.size()));
  }
  // A path: a NUL would cut it short in every system call.
  GP_RETURN_IF_ERROR(CheckText("workdir", spec.workdir));
  if (!spec.inputs.empty() && !IsSha256Hex(spec.inputs)) {
    return FieldError("inputs", "must be a manifest id (64 lowercase hex digits), got " +
                                    QuoteForError(spec.inputs));
  }
  if (spec.session) {
    const SessionSpec& ss = *spec.session;
    if (r.nodes > 1) return FieldError("session", "a session runs on one node");
    if (ss.kind != SessionKind::kShell && ss.kind != SessionKind::kJupyter)
      return FieldError("session.kind", "must be shell or jupyter");
    if (ss.idle_timeout_ms != 0) {
      GP_RETURN_IF_ERROR(
          CheckDurationMs("session.idle_timeout", ss.idle_timeout_ms, 1, kMaxSessionIdleSeconds));
    }
    if (ss.ports.size() > kMaxSessionPorts) {
      return FieldError("session.ports", "at most " + std::to_string(kMaxSessionPorts) +
                                             " ports, got " + std::to_string(ss.ports.size()));
    }
    for (size_t i = 0; i < ss.ports.size(); ++i) {
      if (ss.ports[i] < 1 || ss.ports[i] > 65535) {
        return FieldError("session.ports[" + std::to_string(i) + "]",
                          "must be a TCP port from 1 to 65535, got " + std::to_string(ss.ports[i]));
      }
    }
    if (ss.jupyter_token.size() > kMaxJupyterTokenBytes) {
      return FieldError("session.jupyter_token",
                        "at most " + std::to_string(kMaxJupyterTokenBytes) + " bytes");
    }
    GP_RETURN_IF_ERROR(CheckText("session.jupyter_token", ss.jupyter_token));
  }
  if (spec.checkpoint) {
    const CheckpointSpec& c = *spec.checkpoint;
    if (c.interval_ms != 0) {
      GP_RETURN_IF_ERROR(CheckDurationMs("checkpoint.interval", c.interval_ms,
                                         kMinCheckpointIntervalSeconds,
                                         kMaxCheckpointIntervalSeconds));
    }
    GP_RETURN_IF_ERROR(CheckDurationMs("checkpoint.grace", c.grace_ms, 1, kMaxGraceSeconds));
    bool known = c.signal == "none";
    for (const char* sig : kCheckpointSignals) known = known || c.signal == sig;
    if (!known) {
      return FieldError("checkpoint.signal",
                        "unknown signal " + QuoteForError(c.signal) + " (one of: none, " +
                            Join(std::begin(kCheckpointSignals), std::end(kCheckpointSignals)) +
                            ")");
    }
  }
  return Status::Ok();
}

nlohmann::json JobSpecToJson(const JobSpec& spec) {
  json j = json::object();
  j["name"] = spec.name;
  if (!spec.run.empty()) j["run"] = spec.run;
  if (!spec.command.empty()) j["command"] = spec.command;
  if (!spec.env.empty()) j["env"] = spec.env;
  if (!spec.image.empty()) j["image"] = spec.image;
  if (!spec.executor.empty()) j["executor"] = spec.executor;
  if (spec.network == NetworkMode::kNone) j["network"] = false;
  if (spec.network == NetworkMode::kHost) j["network"] = "host";
  j["resources"] = ResourcesToJson(spec.resources);
  if (spec.max_runtime_ms != 0) j["max_runtime"] = ExactDuration(spec.max_runtime_ms);
  if (spec.max_cost_micros != 0) j["max_cost"] = accounting::FormatCredits(spec.max_cost_micros);
  if (spec.priority != JobPriority::kNormal) j["priority"] = JobPriorityName(spec.priority);
  if (spec.group != "default") j["group"] = spec.group;
  if (spec.checkpoint) {
    json c = json::object();
    if (spec.checkpoint->interval_ms != 0) {
      c["interval"] = ExactDuration(spec.checkpoint->interval_ms);
    }
    c["grace"] = ExactDuration(spec.checkpoint->grace_ms);
    c["signal"] = spec.checkpoint->signal;
    if (spec.checkpoint->standby) c["standby"] = true;
    j["checkpoint"] = std::move(c);
  }
  if (!spec.workdir.empty()) j["workdir"] = spec.workdir;
  if (!spec.inputs.empty()) j["inputs"] = spec.inputs;
  if (spec.distributed != Distributed::kTorch) j["distributed"] = DistributedName(spec.distributed);
  if (spec.max_restarts != 0) j["max_restarts"] = spec.max_restarts;
  if (spec.session) {
    const SessionSpec& ss = *spec.session;
    json sj = {{"kind", SessionKindName(ss.kind)},
               {"idle_timeout",
                ss.idle_timeout_ms == 0 ? json(0) : json(ExactDuration(ss.idle_timeout_ms))}};
    if (!ss.ports.empty()) sj["ports"] = ss.ports;
    if (ss.any_port) sj["any_port"] = true;
    if (!ss.jupyter_token.empty()) sj["jupyter_token"] = ss.jupyter_token;
    j["session"] = std::move(sj);
    // Written out, so that reading it back keeps a priority set otherwise.
    j["priority"] = JobPriorityName(spec.priority);
  }
  return j;
}

}  // namespace gpupool
