#include "cli/commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "cli/command_util.h"
#include "cli/table.h"
#include "cli/workdir_upload.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/units.h"
#include "model/job_spec.h"
#include "net/http.h"

namespace gpupool::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

int ExitCodeFor(const Status& s) { return s.code() == StatusCode::kInvalidArgument ? 2 : 1; }

// "3" for a pending job the scheduler has ordered, else "-".
std::string PositionOf(const json& job) {
  auto it = job.find("position");
  return it != job.end() && it->is_number_integer() ? it->dump() : "-";
}

// "1.5" GPUs from milli.
std::string GpuAmount(int64_t milli) { return FormatMilli(milli); }

// A share's GPU memory: "1.5 GiB of 4 GiB cap" (used -1: not known).
std::string ShareMemoryText(int64_t cap_mib, int64_t used_mib) {
  return (used_mib >= 0 ? FormatMebibytes(used_mib) + " of " : "") + FormatMebibytes(cap_mib) +
         " cap";
}

// `path` made absolute against `base` (itself relative to the current
// directory; empty: the current directory).
std::string AbsolutePath(const std::string& path, const fs::path& base) {
  std::error_code ec;
  fs::path b = base.empty() ? fs::current_path(ec) : fs::absolute(base, ec);
  std::string out =
      (fs::path(path).is_absolute() ? fs::path(path) : b / path).lexically_normal().string();
  if (out.size() > 1 && out.back() == '/') out.pop_back();  // "dir/." -> "dir"
  return out;
}

// Uploads the spec's workdir and sets its inputs to the upload's manifest.
Status UploadInputs(const ApiClient& api, const SubmitFlags& f, JobSpec& spec) {
  std::error_code ec;
  if (!fs::is_directory(spec.workdir, ec)) {
    return Status::InvalidArgument("workdir: " + spec.workdir + " is not a directory");
  }
  bool progress = !f.quiet && ::isatty(STDERR_FILENO);
  GP_ASSIGN_OR_RETURN(WorkdirUpload u, UploadWorkdir(api.endpoint(), spec.workdir, progress));
  if (!f.quiet) std::cerr << UploadSummary(u) << "\n";
  spec.inputs = u.manifest;
  return Status::Ok();
}

// Builds the spec from a file and/or flags, with `extra` fields on top;
// validation errors name the field.
Result<JobSpec> BuildSpec(const SubmitFlags& f, const json& extra) {
  json j = json::object();
  if (!f.file.empty()) {
    auto read = ReadFile(f.file);
    if (!read.ok()) return Status::InvalidArgument(read.status().message());
    std::string text = *std::move(read);
    auto spec = ParseJobSpec(text);
    if (!spec.ok()) return spec.status().WithContext(f.file);
    j = JobSpecToJson(*spec);
    // A relative workdir is relative to the spec file, not to where gpupool runs.
    if (!spec->workdir.empty()) {
      j["workdir"] = AbsolutePath(spec->workdir, fs::path(f.file).parent_path());
    }
  }
  if (!f.workdir.empty()) j["workdir"] = AbsolutePath(f.workdir, fs::current_path());
  if (!f.command.empty()) {
    j.erase("run");
    j["command"] = f.command;
  }
  if (!f.name.empty()) j["name"] = f.name;
  json& r = j["resources"];
  if (r.is_null()) r = json::object();
  if (!f.gpus.empty()) r["gpus"] = f.gpus;
  if (!f.gpu_memory.empty()) r["gpu_memory"] = f.gpu_memory;
  if (!f.gpu_models.empty()) r["gpu_models"] = f.gpu_models;
  if (!f.cpus.empty()) r["cpus"] = f.cpus;
  if (!f.memory.empty()) r["memory"] = f.memory;
  if (!f.max_runtime.empty()) j["max_runtime"] = f.max_runtime;
  if (!f.priority.empty()) j["priority"] = f.priority;
  if (!f.group.empty()) j["group"] = f.group;
  if (!f.image.empty()) j["image"] = f.image;
  if (!f.executor.empty()) j["executor"] = f.executor;
  if (!f.disk.empty()) r["disk"] = f.disk;
  if (!f.mig.empty()) r["mig"] = f.mig;
  if (f.nodes > 0) r["nodes"] = f.nodes;
  if (f.max_restarts >= 0) j["max_restarts"] = f.max_restarts;
  if (!f.distributed.empty()) j["distributed"] = f.distributed;
  if (f.no_network) j["network"] = false;
  if (f.host_network) j["network"] = "host";
  for (const std::string& kv : f.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument("--env " + kv + ": expected KEY=VALUE");
    }
    j["env"][kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (j["resources"].empty()) j.erase("resources");
  for (const auto& [key, value] : extra.items()) j[key] = value;
  return JobSpecFromJson(j);
}

// Prints one page of the job's output from `*cursor` on and advances it;
// returns whether the job's output is complete. `rank` >= 0 prints only that
// rank's lines; otherwise a multi-node job's lines get "[rank R] " prefixes.
Result<bool> PrintLogs(ApiClient& api, int64_t id, int64_t* cursor, const std::string& wait,
                       int rank = -1) {
  std::string target = "/v1/jobs/" + std::to_string(id) + "/logs?after=" + std::to_string(*cursor);
  if (!wait.empty()) target += "&wait=" + wait;
  if (rank >= 0) target += "&rank=" + std::to_string(rank);
  GP_ASSIGN_OR_RETURN(json page, api.Get(target, 90'000));
  const bool prefix = rank < 0 && page.value("nodes", 1) > 1;
  for (const auto& l : page["lines"]) {
    std::string stream = Str(l, "stream");
    std::string tag = prefix ? "[rank " + std::to_string(Int(l, "rank")) + "] " : "";
    if (stream == "event") {  // the pool's own news about the job, not its output
      std::cerr << "[gpupool] " << tag << Str(l, "text") << "\n";
      continue;
    }
    std::ostream& out = stream == "stderr" ? std::cerr : std::cout;
    out << tag << Str(l, "text") << "\n";
  }
  std::cout.flush();
  *cursor = Int(page, "next_cursor");
  return page.value("complete", false);
}

// What the job printed: its size, each attempt rank whose output limit was
// reached (the event it got), or that retention removed it.
void AddOutputRows(Table& kv, const json& output, bool ranks) {
  if (!output.is_object() || !output.contains("lines")) return;  // an older server
  std::string size =
      std::to_string(Int(output, "lines")) + " lines, " + FormatBytes(Int(output, "bytes"));
  const json& removed = output.value("removed", json());
  if (removed.is_object()) {
    kv.Add({"Output:", size + ", removed " + FormatTimestampMs(Int(removed, "removed_ms")) + ": " +
                           Str(removed, "reason")});
    return;
  }
  kv.Add({"Output:", size});
  for (const auto& l : output.value("limit_reached", json::array())) {
    std::string where = "attempt " + Str(l, "attempt_id");
    if (ranks) where += " rank " + std::to_string(Int(l, "rank"));
    kv.Add({"", Str(l, "event") + " (" + where + ", " + FormatTimestampMs(Int(l, "ts_ms")) + ")"});
  }
}

}  // namespace

std::string Ago(int64_t ms) {
  if (ms <= 0) return "-";
  int64_t d = RealClock().NowMs() - ms;
  if (d < 1000) return "just now";
  return FormatDurationMs(d / 1000 * 1000) + " ago";
}

std::string GpusOf(const json& spec) {
  const json& r = spec.value("resources", json::object());
  std::string s;
  auto g = r.find("gpus");
  if (g == r.end() || g->is_null() || (g->is_number() && g->get<double>() == 0)) return "-";
  // A share is a fraction (0.5); whole GPUs an integer.
  s = g->is_string() ? g->get<std::string>() : g->dump();
  if (r.contains("gpu_models")) {
    std::string models;
    for (const auto& m : r["gpu_models"])
      models += (models.empty() ? "" : "|") + m.get<std::string>();
    s += "x" + models;
  }
  if (r.contains("gpu_memory")) s += " (" + r["gpu_memory"].get<std::string>() + ")";
  if (r.contains("mig") && r["mig"].is_string()) {
    s += " MIG instance of at least " + r["mig"].get<std::string>();
  }
  return s;
}

// The MIG profile of every MIG instance among the attempts' GPUs, by UUID,
// as the nodes report them now (empty when none is a MIG instance, or the
// node list cannot be read: the UUIDs alone are still shown).
std::map<std::string, std::string> MigProfiles(ApiClient& api, const json& attempts) {
  std::map<std::string, std::string> out;
  bool any = false;
  for (const auto& a : attempts) {
    for (const auto& u : a.value("gpus", json::array())) {
      any = any || (u.is_string() && u.get<std::string>().starts_with("MIG-"));
    }
  }
  if (!any) return out;
  auto nodes = api.Get("/v1/nodes");
  if (!nodes.ok()) return out;
  for (const auto& n : nodes->value("nodes", json::array())) {
    for (const auto& gpu : n.value("gpus", json::array())) {
      if (gpu.value("mig", json()).is_object()) out[Str(gpu, "uuid")] = Str(gpu["mig"], "profile");
    }
  }
  return out;
}

std::string StateText(const json& job) {
  std::string s = Str(job, "state");
  if ((s == "succeeded" || s == "failed") && job.contains("exit_code") &&
      !job["exit_code"].is_null()) {
    s += " (" + job["exit_code"].dump() + ")";
  }
  return s;
}

Result<json> SubmitFromFlags(ApiClient& api, const SubmitFlags& f, const json& extra) {
  GP_ASSIGN_OR_RETURN(JobSpec spec, BuildSpec(f, extra));
  if (!spec.workdir.empty()) GP_RETURN_IF_ERROR(UploadInputs(api, f, spec));
  return api.Post("/v1/jobs", JobSpecToJson(spec));
}

namespace {

// "costs 2.50 credits per hour; at most 5.00 in its max_runtime of 2h", from
// POST /v1/prices/quote's answer.
std::string QuoteText(const json& quote) {
  auto credits = [&](const char* key) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f", quote.value(key, 0.0));
    return std::string(buf);
  };
  std::string text = "costs " + credits("per_hour_min");
  if (Int(quote, "per_hour_min_micros") != Int(quote, "per_hour_max_micros")) {
    text += " to " + credits("per_hour_max") + " credits per hour, by the GPUs it lands on";
  } else {
    text += " credits per hour";
  }
  if (quote.contains("most")) {
    text += "; at most " + credits("most") + " in its max_runtime of " +
            FormatDurationMs(Int(quote, "max_runtime_ms"));
  }
  return text;
}

}  // namespace

int ReportError(const Status& s) {
  std::cerr << "gpupool: " << s.message() << "\n";
  return ExitCodeFor(s);
}

int CmdSubmit(const GlobalFlags& g, const SubmitFlags& f) {
  if (f.file.empty() && f.command.empty()) {
    return ReportError(Status::InvalidArgument(
        "nothing to run: give a spec file (gpupool submit job.yaml) or a command after -- "
        "(gpupool submit --gpus 1 -- python3 train.py)"));
  }
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  if (f.dry_run) {
    auto spec = BuildSpec(f, json::object());
    if (!spec.ok()) return ReportError(spec.status());
    auto quote = api->Post("/v1/prices/quote", JobSpecToJson(*spec));
    if (!quote.ok()) return ReportError(quote.status());
    if (g.output == "json") {
      std::cout << quote->dump(2) << "\n";
    } else {
      std::cout << "not submitted (--dry-run); the job " << QuoteText(*quote) << "\n";
    }
    return 0;
  }
  auto job = SubmitFromFlags(*api, f, json::object());
  if (!job.ok()) return ReportError(job.status());
  int64_t id = Int(*job, "id");
  // What it costs, said beside the id (stdout stays the id for scripts);
  // a pool without prices, or a server without them, says nothing.
  if (!f.quiet) {
    if (auto quote = api->Post("/v1/prices/quote", (*job)["spec"]);
        quote.ok() && Int(*quote, "per_hour_max_micros") > 0) {
      std::cerr << "job " << id << " " << QuoteText(*quote) << "\n";
    }
  }
  if (!f.wait && !f.follow) {
    if (g.output == "json")
      std::cout << job->dump(2) << "\n";
    else
      std::cout << id << "\n";
    return 0;
  }
  std::cerr << "submitted job " << id << "\n";
  bool tty = ::isatty(STDERR_FILENO) && !f.follow;
  const char* frames[] = {"|", "/", "-", "\\"};
  std::string last_status;
  int64_t cursor = 0;
  for (int tick = 0;; ++tick) {
    if (f.follow) {
      auto complete = PrintLogs(*api, id, &cursor, "2s");
      if (!complete.ok()) return ReportError(complete.status());
      if (!*complete) continue;
    }
    auto cur = api->Get(
        "/v1/jobs/" + std::to_string(id) + "?until=finished&wait=" + (tty ? "1s" : "30s"), 90'000);
    if (!cur.ok()) return ReportError(cur.status());
    std::string state = Str(*cur, "state");
    std::string status = "job " + std::to_string(id) + " " + state;
    if (!Str(*cur, "reason").empty()) status += ": " + Str(*cur, "reason");
    bool done = state == "succeeded" || state == "failed" || state == "cancelled";
    if (tty) {
      std::cerr << "\r\033[K" << (done ? "" : std::string(frames[tick % 4]) + " ") << status
                << std::flush;
    } else if (status != last_status && !f.follow) {
      std::cerr << status << "\n";
    }
    last_status = status;
    if (!done) continue;
    if (tty) std::cerr << "\n";
    if (f.follow) std::cerr << status << "\n";
    if (g.output == "json") std::cout << cur->dump(2) << "\n";
    if (state == "succeeded") return 0;
    if (state == "cancelled") return 130;
    return cur->contains("exit_code") && (*cur)["exit_code"].is_number_integer() &&
                   (*cur)["exit_code"] != 0
               ? (*cur)["exit_code"].get<int>()
               : 1;
  }
}

int CmdJobs(const GlobalFlags& g, const std::string& states, int limit, bool all_users,
            bool accounting) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  std::string target = "/v1/jobs?limit=" + std::to_string(limit);
  if (!states.empty()) target += "&state=" + net::UrlEncode(states);
  (void)all_users;
  auto r = api->Get(target);
  if (!r.ok()) return ReportError(r.status());
  // The ledger's sums per job (one's own; an admin's: everyone's).
  std::map<int64_t, json> used;
  if (accounting) {
    auto u = api->Get("/v1/usage?by=job", 120'000);
    if (!u.ok()) return ReportError(u.status());
    for (const json& row : (*u)["rows"]) used[std::stoll(Str(row, "key"))] = row;
    if (g.output == "json") {
      for (json& j : (*r)["jobs"]) {
        auto it = used.find(Int(j, "id"));
        if (it != used.end()) j["usage"] = it->second;
      }
    }
  }
  if (g.output == "json") {
    std::cout << (*r)["jobs"].dump(2) << "\n";
    return 0;
  }
  std::vector<std::string> header{"ID", "NAME", "STATE", "POS", "OWNER", "GPUS", "SUBMITTED"};
  if (accounting) header.insert(header.end(), {"GPU_HOURS", "COST"});
  header.push_back("REASON");
  Table t(header);
  auto jobs = (*r)["jobs"];
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
    const json& j = *it;
    std::vector<std::string> row{std::to_string(Int(j, "id")),
                                 Str(j, "name"),
                                 StateText(j),
                                 PositionOf(j),
                                 Str(j, "owner"),
                                 GpusOf(j["spec"]),
                                 Ago(Int(j, "created_ms"))};
    if (accounting) {
      auto u = used.find(Int(j, "id"));
      char hours[32] = "-", cost[32] = "-";
      if (u != used.end()) {
        std::snprintf(hours, sizeof hours, "%.2f", u->second.value("gpu_hours", 0.0));
        std::snprintf(cost, sizeof cost, "%.2f", u->second.value("cost", 0.0));
      }
      row.insert(row.end(), {hours, cost});
    }
    row.push_back(Str(j, "reason"));
    t.Add(row);
  }
  t.Print(std::cout);
  return 0;
}

int CmdJob(const GlobalFlags& g, const std::string& id_text) {
  auto id = ParseJobId(id_text);
  if (!id.ok()) return ReportError(id.status());
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/jobs/" + std::to_string(*id));
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  const json& j = *r;
  Table kv({"Job:", std::to_string(Int(j, "id")) + " (" + Str(j, "name") + ")"});
  kv.Add({"State:", StateText(j)});
  if (PositionOf(j) != "-") kv.Add({"Position:", PositionOf(j) + " in the queue"});
  if (!Str(j, "reason").empty()) kv.Add({"Reason:", Str(j, "reason")});
  if (!Str(j, "explanation").empty()) kv.Add({"Why this place:", Str(j, "explanation")});
  kv.Add({"Owner:", Str(j, "owner")});
  kv.Add({"Group:", Str(j, "group")});
  kv.Add({"Priority:", Str(j, "priority") +
                           (j.value("preemptible", false) ? " (preemptible: checkpoints)" : "")});
  kv.Add({"Submitted:", FormatTimestampMs(Int(j, "created_ms"))});
  if (Int(j, "started_ms")) kv.Add({"Started:", FormatTimestampMs(Int(j, "started_ms"))});
  if (Int(j, "finished_ms")) kv.Add({"Finished:", FormatTimestampMs(Int(j, "finished_ms"))});
  const json& spec = j["spec"];
  const int64_t nodes = spec["resources"].value("nodes", 1);
  kv.Add({"GPUs:", GpusOf(spec) + (nodes > 1 ? " per node" : "")});
  if (nodes > 1) {
    kv.Add({"Nodes:", std::to_string(nodes) + " (" + spec.value("distributed", "torch") +
                          (spec.value("distributed", "torch") == "torch" ? ": one DDP program"
                                                                         : ": replicas") +
                          ")"});
  }
  kv.Add({"Command:", spec.contains("run") ? Str(spec, "run") : spec["command"].dump()});
  AddOutputRows(kv, j.value("output", json::object()), nodes > 1);
  if (spec.contains("max_runtime")) kv.Add({"Max runtime:", Str(spec, "max_runtime")});
  if (spec.contains("max_restarts")) {
    kv.Add({"Restarts:", std::to_string(Int(j, "restarts")) + " of " +
                             std::to_string(Int(spec, "max_restarts"))});
  }
  kv.Print(std::cout);
  if (!j["attempt_list"].empty()) {
    const std::map<std::string, std::string> mig = MigProfiles(*api, j["attempt_list"]);
    std::cout << "\nAttempts:\n";
    Table t({"ATTEMPT", "NODE", "GPUS", "STATE", "EXIT", "STARTED", "REASON"});
    for (const auto& a : j["attempt_list"]) {
      std::string gpus;
      for (const auto& u : a["gpus"]) {
        const std::string uuid = u.get<std::string>();
        gpus += (gpus.empty() ? "" : ",") + uuid;
        if (auto p = mig.find(uuid); p != mig.end()) gpus += " (MIG " + p->second + ")";
      }
      int64_t milli = Int(a, "gpu_milli");
      if (milli > 0 && milli < 1000) {
        gpus += " (" + GpuAmount(milli) + " of it";
        if (a.contains("gpu_memory_cap_mib")) {
          gpus +=
              ", " + ShareMemoryText(Int(a, "gpu_memory_cap_mib"), Int(a, "gpu_memory_used_mib"));
        } else if (Int(a, "gpu_memory_mib") > 0) {
          gpus += ", " + FormatMebibytes(Int(a, "gpu_memory_mib"));
        }
        gpus += ")";
      }
      t.Add({Str(a, "id"), Str(a, "node_id"), gpus.empty() ? "-" : gpus, Str(a, "state"),
             a["exit_code"].is_null() ? "-" : a["exit_code"].dump(),
             Int(a, "started_ms") ? FormatTimestampMs(Int(a, "started_ms")) : "-",
             Str(a, "reason") +
                 (Int(a, "lost_work_ms") > 0
                      ? " (" + FormatDurationMs(Int(a, "lost_work_ms")) + " of work to redo)"
                      : "") +
                 (a["master"].is_string() ? " (rendezvous " + Str(a, "master") + ")" : "")});
      // A multi-node attempt: a row per rank.
      for (const auto& r : a.value("ranks", json::array())) {
        std::string rank_gpus;
        for (const auto& u : r["gpus"])
          rank_gpus += (rank_gpus.empty() ? "" : ",") + u.get<std::string>();
        t.Add({"  rank " + std::to_string(Int(r, "rank")), Str(r, "node_id"),
               rank_gpus.empty() ? "-" : rank_gpus, Str(r, "state"),
               r["exit_code"].is_null() ? "-" : r["exit_code"].dump(), "", Str(r, "reason")});
      }
    }
    t.Print(std::cout);
  }
  return 0;
}

int CmdLogs(const GlobalFlags& g, const std::string& id_text, bool follow, int rank) {
  auto id = ParseJobId(id_text);
  if (!id.ok()) return ReportError(id.status());
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  int64_t cursor = 0;
  while (true) {
    int64_t before = cursor;
    auto complete = PrintLogs(*api, *id, &cursor, follow ? "30s" : "", rank);
    if (!complete.ok()) return ReportError(complete.status());
    if (*complete) return 0;
    // Without -f, print what is there now: page until nothing new comes.
    if (!follow && cursor == before) return 0;
  }
}

int CmdCancel(const GlobalFlags& g, const std::string& id_text) {
  auto id = ParseJobId(id_text);
  if (!id.ok()) return ReportError(id.status());
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Post("/v1/jobs/" + std::to_string(*id) + "/cancel", json::object());
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json")
    std::cout << r->dump(2) << "\n";
  else
    std::cout << "job " << *id << " " << Str(*r, "state") << "\n";
  return 0;
}

int CmdNodes(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/nodes");
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << (*r)["nodes"].dump(2) << "\n";
    return 0;
  }
  Table t({"NAME", "STATUS", "GPU", "MEMORY USED", "UTIL", "TEMP", "POWER", "JOB"});
  for (const auto& n : (*r)["nodes"]) {
    std::string status = Str(n, "status");
    if (status.empty()) status = Str(n, "state");  // older servers
    std::string host = "host: " + std::to_string(Int(n, "cpu_milli") / 1000) + " CPUs, " +
                       FormatMebibytes(Int(n, "memory_mib")) + " RAM, ";
    // Its last `gpupool agent selftest` (agent/selftest.h SelftestLabels).
    const json labels = n.value("labels", json::object());
    const std::string verified = Str(labels, "gpupool/verified");
    const std::string day = Str(labels, "gpupool/verified-at");
    host += verified == "true"    ? "verified " + day
            : verified == "false" ? "selftest failed " + day
                                  : "not verified";
    t.Add({Str(n, "name"), status, host, "", "", "", "", ""});
    // What the provider lends of each GPU, when it does not lend it all.
    const json lending = n.value("lending", json());
    std::string mig_parent;  // the GPU whose MIG instances are being listed
    for (const auto& gpu : n["gpus"]) {
      std::string lent;
      if (lending.is_object()) {
        const std::string uuid = Str(gpu, "uuid");
        const json gpus = lending.value("gpus", json::object());
        const json not_lent = lending.value("not_lent", json::object());
        if (!gpus.contains(uuid)) {
          lent = "not lent";
          if (not_lent.contains(uuid) && not_lent[uuid].is_string())
            lent += ": " + not_lent[uuid].get<std::string>();
        } else if (gpus[uuid].is_number_integer() &&
                   gpus[uuid].get<int64_t>() < Int(gpu, "memory_mib")) {
          lent = FormatMebibytes(gpus[uuid].get<int64_t>()) + " lent (shares only)";
        }
      }
      std::string mem = FormatMebibytes(Int(gpu, "memory_mib"));
      std::string util = "-", temp = "-", power = "-";
      if (gpu.contains("telemetry")) {
        const json& tel = gpu["telemetry"];
        if (Int(tel, "memory_used_mib") >= 0)
          mem = FormatMebibytes(Int(tel, "memory_used_mib")) + " / " + mem;
        if (Int(tel, "utilization_percent") >= 0)
          util = std::to_string(Int(tel, "utilization_percent")) + "%";
        if (Int(tel, "temperature_c") >= 0) temp = std::to_string(Int(tel, "temperature_c")) + "C";
        if (Int(tel, "power_mw") >= 0) power = std::to_string(Int(tel, "power_mw") / 1000) + "W";
      }
      std::string name = "  " + std::to_string(Int(gpu, "index")) + ": " + Str(gpu, "name") +
                         (gpu.value("simulated", false) ? " (simulated)" : "");
      if (gpu.value("mig", json()).is_object()) {
        // A MIG instance: under a row for its GPU, the first time that GPU shows.
        const json& mig = gpu["mig"];
        if (Str(mig, "parent_uuid") != mig_parent) {
          mig_parent = Str(mig, "parent_uuid");
          t.Add({"", "", name + " in MIG mode (" + mig_parent + ")", "", "", "", "", ""});
        }
        name = "    MIG " + Str(mig, "profile") + " " + Str(gpu, "uuid");
      } else {
        mig_parent.clear();
      }
      std::string jobs;
      for (const auto& a : gpu.value("attempts", json::array())) {
        jobs += (jobs.empty() ? "" : ",") + a.get<std::string>();
      }
      if (jobs.empty()) jobs = Str(gpu, "attempt");  // older servers
      int64_t used = Int(gpu, "used_milli");
      if (used > 0 && used < 1000) jobs += " (" + GpuAmount(used) + " used)";
      // Each share's memory: what it holds of its cap.
      for (const auto& s : gpu.value("shares", json::array())) {
        jobs += "; " + Str(s, "attempt") + ": " +
                ShareMemoryText(Int(s, "memory_cap_mib"), Int(s, "memory_used_mib"));
      }
      t.Add({"", lent, name, mem, util, temp, power, jobs.empty() ? "-" : jobs});
    }
  }
  t.Print(std::cout);
  return 0;
}

int CmdEvents(const GlobalFlags& g, const std::string& node, const std::string& kind, int limit) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  std::string base =
      node.empty() ? "/v1/events?" : "/v1/nodes/" + net::UrlEncode(node) + "/events?";
  if (!kind.empty()) base += "kind=" + net::UrlEncode(kind) + "&";
  // The log is read oldest first; the newest `limit` events are shown.
  constexpr int kPage = 1000;
  json events = json::array();
  for (int64_t after = 0;;) {
    auto r = api->Get(base + "limit=" + std::to_string(kPage) + "&after=" + std::to_string(after));
    if (!r.ok()) return ReportError(r.status());
    const json& page = (*r)["events"];
    for (const auto& e : page) events.push_back(e);
    if (static_cast<int>(events.size()) > limit) {
      events.erase(events.begin(), events.end() - limit);
    }
    if (page.size() < kPage || Int(*r, "next_after") <= after) break;
    after = Int(*r, "next_after");
  }
  if (g.output == "json") {
    std::cout << events.dump(2) << "\n";
    return 0;
  }
  auto join = [](const json& list) {
    std::string out;
    for (const auto& x : list) {
      if (x.is_string()) out += (out.empty() ? "" : ",") + x.get<std::string>();
    }
    return out.empty() ? "-" : out;
  };
  Table t({"TIME", "NODE", "KIND", "GPUS", "REASON", "VACATED"});
  for (const auto& e : events) {
    t.Add({FormatTimestampMs(Int(e, "ts_ms")), Str(e, "node"), Str(e, "kind"),
           join(e.value("gpus", json::array())), Str(e, "reason"),
           join(e.value("attempts", json::array()))});
  }
  t.Print(std::cout);
  return 0;
}

int CmdQueue(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/queue");
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << (*r)["jobs"].dump(2) << "\n";
    return 0;
  }
  Table t({"POS", "ID", "NAME", "OWNER", "GROUP", "CLASS", "GPUS", "WAITING", "REASON"});
  for (const auto& j : (*r)["jobs"]) {
    t.Add({PositionOf(j), std::to_string(Int(j, "id")), Str(j, "name"), Str(j, "owner"),
           Str(j, "group"), Str(j, "priority"), GpusOf(j["spec"]), Ago(Int(j, "created_ms")),
           Str(j, "reason")});
  }
  t.Print(std::cout);
  return 0;
}

int CmdGroups(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/groups");
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << (*r)["groups"].dump(2) << "\n";
    return 0;
  }
  auto percent = [](double f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", f * 100);
    return std::string(buf);
  };
  Table t({"GROUP", "WEIGHT", "GUARANTEED", "ALLOCATED", "USAGE (GPU-h)", "USAGE %", "SHARE %",
           "FAIRSHARE", "RUNNING", "PENDING"});
  for (const auto& gr : (*r)["groups"]) {
    char hours[32], factor[32];
    std::snprintf(hours, sizeof hours, "%.2f", gr.value("usage_gpu_hours", 0.0));
    std::snprintf(factor, sizeof factor, "%.3f", gr.value("fair_share_factor", 0.0));
    t.Add({Str(gr, "name") + (gr.value("configured", false) ? "" : " (not configured)"),
           std::to_string(Int(gr, "weight")), GpuAmount(Int(gr, "guaranteed_gpu_milli")),
           GpuAmount(Int(gr, "allocated_gpu_milli")), hours,
           percent(gr.value("usage_fraction", 0.0)), percent(gr.value("share_fraction", 0.0)),
           factor, std::to_string(Int(gr, "running_jobs")),
           std::to_string(Int(gr, "pending_jobs"))});
  }
  t.Print(std::cout);
  return 0;
}

int CmdJoinToken(const GlobalFlags& g, bool rotate) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = rotate ? api->Post("/v1/join-token/rotate", nlohmann::json::object())
                  : api->Get("/v1/join-token");
  if (!r.ok()) return ReportError(r.status());
  std::cout << Str(*r, "token") << "\n";
  return 0;
}

}  // namespace gpupool::cli
