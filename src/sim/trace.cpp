#include "sim/trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_reader.h"
#include "common/units.h"

namespace gpupool::sim {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Reads the fields of one line. Every getter records the first error on the
// underlying JsonReader as "FIELD: what"; the caller adds "SOURCE:LINE: ".
class LineFields {
 public:
  explicit LineFields(const json& j) : r_(j, "") {}
  JsonReader& reader() { return r_; }

  // A number of GPUs or CPUs ("1", "0.5"): a JSON number with at most three
  // decimals, returned in milli.
  int64_t Milli(const char* key, bool required, int64_t fallback) {
    const json* v = r_.Raw(key, required);
    if (!v) return fallback;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t{1} << 40)) {
        r_.Fail(key, "too large");
        return fallback;
      }
      return v->get<int64_t>() * 1000;
    }
    if (!v->is_number_float()) {
      r_.Fail(key, "must be a number");
      return fallback;
    }
    const double x = v->get<double>() * 1000.0;
    if (!std::isfinite(x) || std::fabs(x) > 1e15) {
      r_.Fail(key, "out of range");
      return fallback;
    }
    const double rounded = std::round(x);
    if (std::fabs(x - rounded) > 1e-6) {
      r_.Fail(key, "at most three decimal places");
      return fallback;
    }
    return static_cast<int64_t>(rounded);
  }

  // A size with a unit ("80GiB", "512 MiB", "16GB"), in MiB.
  int64_t Mebibytes(const char* key, bool required) {
    const json* v = r_.Raw(key, required);
    if (!v) return 0;
    if (!v->is_string()) {
      r_.Fail(key, "must be a string with a unit, such as \"24GiB\"");
      return 0;
    }
    const std::string s = v->get<std::string>();
    if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.back()))) {
      r_.Fail(key, "\"" + s + "\" needs a unit (MiB, GiB, TiB, MB, GB, TB)");
      return 0;
    }
    auto mib = ParseMebibytes(s);
    if (!mib.ok()) {
      r_.Fail(key, mib.status().message());
      return 0;
    }
    return *mib;
  }

  // A time: a number of seconds (3600, 1.5) or a string with units ("1h30m").
  int64_t DurationMs(const char* key, bool required) {
    const json* v = r_.Raw(key, required);
    if (!v) return 0;
    if (v->is_number()) {
      const double s = v->get<double>();
      if (!std::isfinite(s) || s < 0) {
        r_.Fail(key, "must not be negative");
        return 0;
      }
      if (s > 1e12) {
        r_.Fail(key, "too large");
        return 0;
      }
      return static_cast<int64_t>(std::llround(s * 1000.0));
    }
    if (!v->is_string()) {
      r_.Fail(key, "must be a number of seconds or a string such as \"1h30m\"");
      return 0;
    }
    auto ms = ParseDurationMs(v->get<std::string>());
    if (!ms.ok()) {
      r_.Fail(key, ms.status().message());
      return 0;
    }
    return *ms;
  }

  double Number(const char* key, bool required, double fallback) {
    const json* v = r_.Raw(key, required);
    if (!v) return fallback;
    if (!v->is_number()) {
      r_.Fail(key, "must be a number");
      return fallback;
    }
    return v->get<double>();
  }

 private:
  JsonReader r_;
};

std::string Where(std::string_view source, int line) {
  return std::string(source) + ":" + std::to_string(line) + ": ";
}

Status LineError(std::string_view source, int line, const std::string& field,
                 const std::string& what) {
  return Status::InvalidArgument(Where(source, line) + field + ": " + what);
}

// "8.0" -> 80.
Result<int32_t> ParseComputeCapability(const std::string& s) {
  if (s.size() != 3 || !std::isdigit(static_cast<unsigned char>(s[0])) || s[1] != '.' ||
      !std::isdigit(static_cast<unsigned char>(s[2]))) {
    return Status::InvalidArgument("\"" + s + "\" is not MAJOR.MINOR, such as \"8.0\"");
  }
  return (s[0] - '0') * 10 + (s[2] - '0');
}

ordered_json SecondsJson(int64_t ms) {
  if (ms % 1000 == 0) return ordered_json(ms / 1000);
  return ordered_json(static_cast<double>(ms) / 1000.0);
}

ordered_json MilliJson(int64_t milli) {
  if (milli % 1000 == 0) return ordered_json(milli / 1000);
  return ordered_json(static_cast<double>(milli) / 1000.0);
}

std::string MebibytesText(int64_t mib) {
  if (mib % (1024 * 1024) == 0) return std::to_string(mib / (1024 * 1024)) + "TiB";
  if (mib % 1024 == 0) return std::to_string(mib / 1024) + "GiB";
  return std::to_string(mib) + "MiB";
}

}  // namespace

Result<Trace> ParseTrace(std::string_view source, std::string_view text) {
  Trace trace;
  std::map<std::string, size_t> group_index;
  std::map<std::string, size_t> node_index;
  std::set<int64_t> job_ids;
  std::vector<int> event_lines;
  bool meta_allowed = true;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (std::all_of(line.begin(), line.end(),
                    [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
      continue;
    }
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      try {
        [[maybe_unused]] json again = json::parse(line);
      } catch (const json::parse_error& e) {
        return Status::InvalidArgument(Where(source, line_no) + "invalid JSON: " + e.what());
      }
      return Status::InvalidArgument(Where(source, line_no) + "invalid JSON");
    }
    if (!j.is_object()) {
      return Status::InvalidArgument(Where(source, line_no) + "each line must be a JSON object");
    }
    LineFields f(j);
    JsonReader& r = f.reader();
    const std::string type = r.Str("type");
    if (!r.ok()) return Status::InvalidArgument(Where(source, line_no) + r.status().message());
    auto finish = [&]() -> Status {
      Status s = r.Finish();
      if (!s.ok()) return Status::InvalidArgument(Where(source, line_no) + s.message());
      return Status::Ok();
    };

    if (type == "meta") {
      if (!meta_allowed) {
        return LineError(source, line_no, "type", "a meta line must come first");
      }
      const std::string format = r.Str("format");
      if (r.ok() && format != kTraceFormat) {
        r.Fail("format", "\"" + format + "\" is not " + std::string(kTraceFormat));
      }
      if (r.Has("seed")) {
        const json* seed = r.Raw("seed");
        if (seed && !seed->is_number_unsigned() &&
            !(seed->is_number_integer() && seed->get<int64_t>() >= 0)) {
          r.Fail("seed", "must be a non-negative integer");
        } else if (seed) {
          trace.meta.seed = seed->get<uint64_t>();
        }
      }
      trace.meta.generator = r.Str("generator", false);
      if (const json* params = r.Raw("params", false)) {
        if (!params->is_object()) {
          r.Fail("params", "must be an object");
        } else {
          trace.meta.params = params->dump();
        }
      }
      GP_RETURN_IF_ERROR(finish());
      meta_allowed = false;
      continue;
    }
    meta_allowed = false;

    if (type == "group") {
      TraceGroup g;
      g.name = r.Str("name");
      g.weight = r.Int("weight", false, 1);
      if (r.Has("guaranteed_gpus")) g.guaranteed_milli = f.Milli("guaranteed_gpus", false, 0);
      GP_RETURN_IF_ERROR(finish());
      if (g.name.empty()) return LineError(source, line_no, "name", "must not be empty");
      if (g.weight <= 0) return LineError(source, line_no, "weight", "must be at least 1");
      if (g.guaranteed_milli && *g.guaranteed_milli < 0) {
        return LineError(source, line_no, "guaranteed_gpus", "must not be negative");
      }
      if (group_index.count(g.name)) {
        return LineError(source, line_no, "name", "group '" + g.name + "' is declared twice");
      }
      group_index[g.name] = trace.groups.size();
      trace.groups.push_back(std::move(g));
    } else if (type == "node") {
      TraceNode n;
      n.name = r.Str("name");
      n.owner_group = r.Str("owner_group", false);
      const int64_t gpus = r.Int("gpus");
      n.gpu_model = r.Str("gpu_model");
      n.gpu_memory_mib = f.Mebibytes("gpu_memory", true);
      const std::string cc = r.Str("compute_capability", false);
      n.cpu_milli = f.Milli("cpus", true, 0);
      n.memory_mib = f.Mebibytes("memory", true);
      n.speed = f.Number("speed", false, 1.0);
      n.allow_groups = r.StrList("allow_groups", false);
      n.deny_groups = r.StrList("deny_groups", false);
      GP_RETURN_IF_ERROR(finish());
      if (n.name.empty()) return LineError(source, line_no, "name", "must not be empty");
      if (node_index.count(n.name)) {
        return LineError(source, line_no, "name", "node '" + n.name + "' is declared twice");
      }
      if (!n.owner_group.empty() && !group_index.count(n.owner_group)) {
        return LineError(source, line_no, "owner_group",
                         "unknown group '" + n.owner_group + "' (declare it on an earlier line)");
      }
      if (gpus < 1 || gpus > 64) return LineError(source, line_no, "gpus", "must be 1 to 64");
      n.gpus = static_cast<int32_t>(gpus);
      if (n.gpu_model.empty()) return LineError(source, line_no, "gpu_model", "must not be empty");
      if (n.gpu_memory_mib <= 0) {
        return LineError(source, line_no, "gpu_memory", "must be more than 0");
      }
      if (!cc.empty()) {
        auto parsed = ParseComputeCapability(cc);
        if (!parsed.ok()) {
          return LineError(source, line_no, "compute_capability", parsed.status().message());
        }
        n.compute_capability = *parsed;
      }
      if (n.cpu_milli <= 0) return LineError(source, line_no, "cpus", "must be more than 0");
      if (n.memory_mib <= 0) return LineError(source, line_no, "memory", "must be more than 0");
      if (!(n.speed > 0) || n.speed > 1000) {
        return LineError(source, line_no, "speed", "must be more than 0 (1.0 = reference)");
      }
      for (const char* field : {"allow_groups", "deny_groups"}) {
        for (const auto& g : field[0] == 'a' ? n.allow_groups : n.deny_groups) {
          if (!group_index.count(g)) {
            return LineError(source, line_no, field,
                             "unknown group '" + g + "' (declare it on an earlier line)");
          }
        }
      }
      node_index[n.name] = trace.nodes.size();
      trace.nodes.push_back(std::move(n));
    } else if (type == "job") {
      TraceJob job;
      job.id = r.Int("id");
      job.submit_ms = f.DurationMs("submit", true);
      job.group = r.Str("group");
      const std::string cls = r.Str("class", false, "normal");
      const int64_t gpus_milli = f.Milli("gpus", true, 0);
      job.gpu_memory_mib = f.Mebibytes("gpu_memory", false);
      job.gpu_models = r.StrList("gpu_models", false);
      const int64_t nodes = r.Int("nodes", false, 1);
      job.cpu_milli = f.Milli("cpus", false, 0);
      job.memory_mib = f.Mebibytes("memory", false);
      job.duration_ms = f.DurationMs("duration", true);
      job.runtime_limit_ms = f.DurationMs("runtime_limit", false);
      job.checkpoint_interval_ms = f.DurationMs("checkpoint_interval", false);
      GP_RETURN_IF_ERROR(finish());
      if (job.id <= 0) return LineError(source, line_no, "id", "must be at least 1");
      if (job_ids.count(job.id)) {
        return LineError(source, line_no, "id", "job " + std::to_string(job.id) + " appears twice");
      }
      if (!group_index.count(job.group)) {
        return LineError(source, line_no, "group",
                         "unknown group '" + job.group + "' (declare it on an earlier line)");
      }
      auto priority = sched::ParsePriorityClass(cls);
      if (!priority.ok()) {
        return LineError(source, line_no, "class",
                         "\"" + cls + "\" is not interactive, normal or opportunistic");
      }
      job.priority = *priority;
      if (gpus_milli <= 0) return LineError(source, line_no, "gpus", "must be more than 0");
      if (gpus_milli < 1000) {
        job.gpu_milli = static_cast<int32_t>(gpus_milli);
      } else if (gpus_milli % 1000 != 0) {
        return LineError(source, line_no, "gpus",
                         "a share must be less than 1; more than one GPU must be whole");
      } else if (gpus_milli > 64000) {
        return LineError(source, line_no, "gpus", "at most 64 per node");
      } else {
        job.gpus = static_cast<int32_t>(gpus_milli / 1000);
      }
      if (nodes < 1 || nodes > 1024) {
        return LineError(source, line_no, "nodes", "must be 1 to 1024");
      }
      job.nodes = static_cast<int32_t>(nodes);
      if (job.nodes > 1 && job.gpus == 0) {
        return LineError(source, line_no, "nodes", "a gang must ask for whole GPUs");
      }
      for (const auto& m : job.gpu_models) {
        if (m.empty()) return LineError(source, line_no, "gpu_models", "empty model name");
      }
      if (job.duration_ms <= 0) {
        return LineError(source, line_no, "duration", "must be more than 0");
      }
      job_ids.insert(job.id);
      trace.jobs.push_back(std::move(job));
    } else if (type == "node_leave" || type == "node_return") {
      TraceNodeEvent e;
      e.kind = type == "node_leave" ? NodeEventKind::kLeave : NodeEventKind::kReturn;
      e.node = r.Str("node");
      e.at_ms = f.DurationMs("at", true);
      GP_RETURN_IF_ERROR(finish());
      if (!node_index.count(e.node)) {
        return LineError(source, line_no, "node",
                         "unknown node '" + e.node + "' (declare it on an earlier line)");
      }
      event_lines.push_back(line_no);
      trace.events.push_back(std::move(e));
    } else {
      return LineError(
          source, line_no, "type",
          "\"" + type + "\" is not one of meta, group, node, job, node_leave, node_return");
    }
  }

  // Per node, events in time order must alternate leave, return, leave, ...
  std::vector<size_t> order(trace.events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& ea = trace.events[a];
    const auto& eb = trace.events[b];
    if (ea.node != eb.node) return ea.node < eb.node;
    return ea.at_ms < eb.at_ms;
  });
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& e = trace.events[order[k]];
    const bool first = k == 0 || trace.events[order[k - 1]].node != e.node;
    const NodeEventKind expected =
        first || trace.events[order[k - 1]].kind == NodeEventKind::kReturn ? NodeEventKind::kLeave
                                                                           : NodeEventKind::kReturn;
    if (!first && trace.events[order[k - 1]].at_ms == e.at_ms) {
      return LineError(source, event_lines[order[k]], "at",
                       "node '" + e.node + "' has two events at the same time");
    }
    if (e.kind != expected) {
      return LineError(source, event_lines[order[k]], "type",
                       expected == NodeEventKind::kLeave
                           ? "node '" + e.node + "' returns without having left"
                           : "node '" + e.node + "' leaves again without having returned");
    }
  }
  return trace;
}

std::string FormatTrace(const Trace& trace) {
  std::string out;
  auto emit = [&](const ordered_json& j) {
    out += j.dump();
    out += '\n';
  };
  {
    ordered_json m = {{"type", "meta"}, {"format", std::string(kTraceFormat)}};
    if (trace.meta.seed) m["seed"] = *trace.meta.seed;
    if (!trace.meta.generator.empty()) m["generator"] = trace.meta.generator;
    if (!trace.meta.params.empty()) {
      m["params"] = ordered_json::parse(trace.meta.params, nullptr, false);
      if (m["params"].is_discarded()) m.erase("params");
    }
    emit(m);
  }
  for (const auto& g : trace.groups) {
    ordered_json j = {{"type", "group"}, {"name", g.name}, {"weight", g.weight}};
    if (g.guaranteed_milli) j["guaranteed_gpus"] = MilliJson(*g.guaranteed_milli);
    emit(j);
  }
  for (const auto& n : trace.nodes) {
    ordered_json j = {{"type", "node"}, {"name", n.name}};
    if (!n.owner_group.empty()) j["owner_group"] = n.owner_group;
    j["gpus"] = n.gpus;
    j["gpu_model"] = n.gpu_model;
    j["gpu_memory"] = MebibytesText(n.gpu_memory_mib);
    if (n.compute_capability > 0) {
      j["compute_capability"] = std::to_string(n.compute_capability / 10) + "." +
                                std::to_string(n.compute_capability % 10);
    }
    j["cpus"] = MilliJson(n.cpu_milli);
    j["memory"] = MebibytesText(n.memory_mib);
    j["speed"] = n.speed;
    if (!n.allow_groups.empty()) j["allow_groups"] = n.allow_groups;
    if (!n.deny_groups.empty()) j["deny_groups"] = n.deny_groups;
    emit(j);
  }
  for (const auto& job : trace.jobs) {
    ordered_json j = {{"type", "job"},
                      {"id", job.id},
                      {"submit", SecondsJson(job.submit_ms)},
                      {"group", job.group},
                      {"class", std::string(sched::PriorityClassName(job.priority))},
                      {"gpus", job.gpus > 0 ? ordered_json(job.gpus) : MilliJson(job.gpu_milli)}};
    if (job.gpu_memory_mib > 0) j["gpu_memory"] = MebibytesText(job.gpu_memory_mib);
    if (!job.gpu_models.empty()) j["gpu_models"] = job.gpu_models;
    if (job.nodes != 1) j["nodes"] = job.nodes;
    if (job.cpu_milli > 0) j["cpus"] = MilliJson(job.cpu_milli);
    if (job.memory_mib > 0) j["memory"] = MebibytesText(job.memory_mib);
    j["duration"] = SecondsJson(job.duration_ms);
    if (job.runtime_limit_ms > 0) j["runtime_limit"] = SecondsJson(job.runtime_limit_ms);
    if (job.checkpoint_interval_ms > 0) {
      j["checkpoint_interval"] = SecondsJson(job.checkpoint_interval_ms);
    }
    emit(j);
  }
  for (const auto& e : trace.events) {
    emit({{"type", e.kind == NodeEventKind::kLeave ? "node_leave" : "node_return"},
          {"node", e.node},
          {"at", SecondsJson(e.at_ms)}});
  }
  return out;
}

Status ValidateTrace(const Trace& trace) {
  // The same rules as a file: format it and read it back.
  auto parsed = ParseTrace("(generated trace)", FormatTrace(trace));
  if (!parsed.ok()) return parsed.status();
  if (!(*parsed == trace)) {
    return Status::Internal("(generated trace): does not survive a write and a read");
  }
  return Status::Ok();
}

int64_t OwnedGpuMilli(const Trace& trace, std::string_view group) {
  int64_t milli = 0;
  for (const auto& n : trace.nodes) {
    if (n.owner_group == group) milli += int64_t{n.gpus} * 1000;
  }
  return milli;
}

}  // namespace gpupool::sim
