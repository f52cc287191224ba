#include "cli/session_commands.h"

#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command_util.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/units.h"
#include "net/http_client.h"

namespace gpupool::cli {

using nlohmann::json;

namespace {

std::string Kind(const json& job) {
  const json& spec = job.value("spec", json::object());
  return spec.contains("session") ? spec["session"].value("kind", "shell") : "";
}

std::string Ports(const json& session) {
  if (session.value("any_port", false)) return "any";
  std::string out;
  for (const auto& p : session.value("ports", json::array()))
    out += (out.empty() ? "" : ",") + p.dump();
  return out.empty() ? "-" : out;
}

// How to get in, for a session that runs; `sessions` is the sessions'
// address.
void PrintHowToConnect(const json& job, const std::string& sessions) {
  std::string id = std::to_string(Int(job, "id"));
  const json& session = job["spec"]["session"];
  std::cout << "Session " << id << " runs.\n";
  if (Kind(job) == "jupyter") {
    std::cout << "  Jupyter in your browser:  gpupool session open " << id
              << "   (prints a one-time sign-in link to " << sessions << "/v1/sessions/" << id
              << "/proxy/)\n"
              << "  or on a local port:       gpupool session connect " << id << "\n";
  }
  std::cout << "  a shell:                  gpupool shell " << id << "\n"
            << "  one command:              gpupool exec " << id << " -- nvidia-smi\n";
  for (const auto& p : session.value("ports", json::array())) {
    std::cout << "  port " << p.dump() << ":"
              << std::string(p.dump().size() < 5 ? 5 - p.dump().size() : 0, ' ')
              << "               gpupool session connect " << id << " --port " << p.dump() << ":"
              << p.dump() << "\n";
  }
  std::cout << "  stop it:                  gpupool session stop " << id << "\n";
  int64_t idle_s = 0;
  if (session.contains("idle_timeout")) {
    const json& t = session["idle_timeout"];
    if (t.is_string()) {
      auto ms = ParseDurationMs(t.get<std::string>());
      if (ms.ok()) idle_s = *ms / 1000;
    }
  }
  if (idle_s > 0) {
    std::cout << "It stops after " << FormatDurationMs(idle_s * 1000)
              << " without traffic, and its GPUs go back to the pool.\n";
  }
}

// A Jupyter session's notebook server takes a moment after the job runs:
// wait until it answers through the proxy, on the sessions' own address (a
// sign-in link names it), so the links printed work at once. Gives up
// quietly at the deadline (the session still starts), and at once, saying
// why, when that address cannot be reached from here at all (a host name
// per session that this machine's DNS does not know). Returns the address
// (the API's until a link named it).
std::string WaitForJupyter(ApiClient& api, const std::string& id, int64_t deadline_ms) {
  std::string base;
  while (RealClock().NowMs() < deadline_ms) {
    if (base.empty()) {
      auto link = api.Post("/v1/sessions/" + id + "/link", json::object(), 10'000);
      const std::string url = link.ok() ? Str(*link, "url") : "";
      const size_t path = url.find("/v1/");
      if (path != std::string::npos)
        base = url.starts_with("http") ? url.substr(0, path) : api.endpoint().server;
    }
    if (!base.empty()) {
      net::HttpCall probe;  // the same token and CA: the same server
      probe.base_url = base;
      probe.target = "/v1/sessions/" + id + "/proxy/api/status";
      probe.tls = api.endpoint().tls;
      probe.headers["Authorization"] = "Bearer " + api.endpoint().token;
      probe.timeout_ms = 10'000;
      auto answer = net::Fetch(probe);
      if (!answer.ok()) {  // no HTTP answer at all: waiting will not help
        std::cerr << "gpupool: cannot reach the sessions' address " << base << " from here ("
                  << answer.status().message()
                  << "); Jupyter may need a moment after the link below\n";
        break;
      }
      if (answer->status == 200) break;
    }
    ::usleep(100'000);
  }
  return base.empty() ? api.endpoint().server : base;
}

}  // namespace

int CmdSessionStart(const GlobalFlags& g, const SessionStartFlags& f) {
  SubmitFlags sf;
  sf.name = f.name.empty() ? f.kind : f.name;
  sf.gpus = f.gpus;
  sf.cpus = f.cpus;
  sf.memory = f.memory;
  sf.gpu_memory = f.gpu_memory;
  sf.image = f.image;
  sf.executor = f.executor;
  sf.group = f.group;
  sf.max_runtime = f.max;
  sf.env = f.env;
  sf.workdir = f.workdir;
  json session = {{"kind", f.kind}};
  if (!f.idle_timeout.empty()) session["idle_timeout"] = f.idle_timeout;
  if (!f.ports.empty()) session["ports"] = f.ports;
  if (f.any_port) session["any_port"] = true;

  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto job = SubmitFromFlags(*api, sf, {{"session", session}});
  if (!job.ok()) return ReportError(job.status());
  const std::string id = std::to_string(Int(*job, "id"));
  if (f.no_wait) {
    if (g.output == "json")
      std::cout << job->dump(2) << "\n";
    else
      std::cout << id << "\n";
    return 0;
  }
  std::cerr << "session " << id << " submitted; waiting for it to start\n";
  const int64_t deadline = RealClock().NowMs() + f.wait_s * 1000;
  std::string last;
  for (;;) {
    auto cur = api->Get("/v1/jobs/" + id + "?until=running&wait=20s", 60'000);
    if (!cur.ok()) return ReportError(cur.status());
    std::string state = Str(*cur, "state");
    if (state == "running") {
      std::string sessions = api->endpoint().server;
      if (Kind(*cur) == "jupyter") sessions = WaitForJupyter(*api, id, deadline);
      if (g.output == "json") {
        std::cout << cur->dump(2) << "\n";
      } else {
        PrintHowToConnect(*cur, sessions);
      }
      return 0;
    }
    std::string status = "session " + id + " " + state +
                         (Str(*cur, "reason").empty() ? "" : ": " + Str(*cur, "reason"));
    if (state == "succeeded" || state == "failed" || state == "cancelled") {
      std::cerr << status << "\n";
      return 1;
    }
    if (status != last) std::cerr << status << "\n";
    last = status;
    if (RealClock().NowMs() > deadline) {
      std::cerr << "gpupool: session " << id << " has not started within " << f.wait_s
                << " s; it stays queued (gpupool session list; gpupool session stop " << id
                << ")\n";
      return 1;
    }
  }
}

int CmdSessionList(const GlobalFlags& g, bool all_users) {
  (void)all_users;  // the server shows admins every job, members their own
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/jobs?limit=1000&state=pending,scheduled,running");
  if (!r.ok()) return ReportError(r.status());
  json sessions = json::array();
  for (const auto& j : (*r)["jobs"]) {
    if (!Kind(j).empty()) sessions.push_back(j);
  }
  if (g.output == "json") {
    std::cout << sessions.dump(2) << "\n";
    return 0;
  }
  Table t({"ID", "KIND", "STATE", "OWNER", "GPUS", "PORTS", "IDLE TIMEOUT", "STARTED", "REASON"});
  for (const auto& j : sessions) {
    const json& s = j["spec"]["session"];
    std::string idle =
        s.contains("idle_timeout")
            ? (s["idle_timeout"].is_string() ? s["idle_timeout"].get<std::string>() : "never")
            : "-";
    if (idle == "0") idle = "never";
    t.Add({std::to_string(Int(j, "id")), Kind(j), StateText(j), Str(j, "owner"), GpusOf(j["spec"]),
           Ports(s), idle, Ago(Int(j, "started_ms")), Str(j, "reason")});
  }
  t.Print(std::cout);
  return 0;
}

int CmdSessionStop(const GlobalFlags& g, const std::string& id) { return CmdCancel(g, id); }

int CmdSessionOpen(const GlobalFlags& g, const std::string& id_text) {
  auto id = ParseJobId(id_text);
  if (!id.ok()) return ReportError(id.status());
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Post("/v1/sessions/" + std::to_string(*id) + "/link", json::object());
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  // The link is on the sessions' own address (a server before them sent a
  // path on its own).
  std::string url = Str(*r, "url");
  if (!url.starts_with("https://") && !url.starts_with("http://"))
    url = api->endpoint().server + url;
  std::cout << url << "\n";
  if (::isatty(STDERR_FILENO)) {
    std::cerr << "Open this link in your browser within " << Int(*r, "expires_in_s")
              << " s; it works once and signs that browser in to session " << *id << ".\n";
  }
  return 0;
}

}  // namespace gpupool::cli
