#include "server/api.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/json_reader.h"
#include "common/units.h"
#include "model/job_spec.h"
#include "sched/wait_reason.h"
#include "server/browser_session.h"
#include "server/http_errors.h"
#include "server/job_access.h"

namespace gpupool::server {

using nlohmann::json;

namespace {

json JobToJson(const Job& j, const std::optional<QueueInfo>& queue) {
  json out = {{"id", j.id},
              {"name", j.spec.name},
              {"owner", j.owner},
              {"state", JobStateName(j.state)},
              {"reason", j.reason},
              {"priority", JobPriorityName(j.spec.priority)},
              {"group", j.spec.group},
              {"preemptible", j.spec.preemptible()},
              {"attempts", j.attempts},
              {"restarts", j.restarts},
              {"current_attempt", j.current_attempt},
              {"created_ms", j.created_ms},
              {"updated_ms", j.updated_ms},
              {"started_ms", j.started_ms},
              {"finished_ms", j.finished_ms},
              {"spec", JobSpecToJson(j.spec)}};
  // Only the server's proxy needs it.
  if (j.spec.session && !j.spec.session->jupyter_token.empty())
    out["spec"]["session"].erase("jupyter_token");
  out["exit_code"] = j.exit_code ? json(*j.exit_code) : json(nullptr);
  out["last_preempted_ms"] = j.last_preempted_ms ? json(*j.last_preempted_ms) : json(nullptr);
  // Where a pending job stands after the last scheduling pass.
  bool queued = queue && j.state == JobState::kPending;
  out["position"] = queued ? json(queue->position) : json(nullptr);
  out["explanation"] = queued ? queue->explanation : "";
  out["unsatisfiable"] = queued && queue->unsatisfiable;
  out["reserved_start_ms"] =
      queued && queue->reserved_start_ms > 0 ? json(queue->reserved_start_ms) : json(nullptr);
  out["wait"] = queued ? sched::WaitingToJson(queue->wait, queue->entry) : json(nullptr);
  return out;
}

json RemovalToJson(const LogRemoval& r) {
  return {{"removed_ms", r.removed_ms},
          {"reason", r.reason},
          {"lines", r.lines},
          {"bytes", r.bytes},
          {"stored_bytes", r.stored_bytes}};
}

// What the job printed (server/job_logs.h): its size, the attempt ranks
// whose output limit was reached (the event each got), and its removal.
json OutputToJson(const JobOutput& o) {
  json limited = json::array();
  for (const LogStream& s : o.limited) {
    limited.push_back({{"attempt_id", s.attempt_id},
                       {"rank", s.rank},
                       {"ts_ms", s.limit_reached_ms},
                       {"event", s.limit_event}});
  }
  return {{"lines", o.lines},
          {"bytes", o.bytes},
          {"stored_bytes", o.stored_bytes},
          {"limit_reached", std::move(limited)},
          {"removed", o.removed ? RemovalToJson(*o.removed) : json(nullptr)}};
}

// `names`: node id -> name ("node" is "" for a node that is gone).
json AttemptToJson(const Attempt& a, const std::map<std::string, std::string>& names) {
  auto name_of = [&](const std::string& id) {
    auto it = names.find(id);
    return it == names.end() ? std::string() : it->second;
  };
  json out = {{"id", a.id},
              {"job_id", a.job_id},
              {"number", a.number},
              {"node_id", a.node_id},
              {"node", name_of(a.node_id)},
              {"gpus", a.gpu_uuids},
              {"gpu_milli", a.gpu_milli},
              {"gpu_memory_mib", a.gpu_memory_mib},
              {"state", AttemptStateName(a.state)},
              {"reason", a.reason},
              {"created_ms", a.created_ms},
              {"started_ms", a.started_ms},
              {"finished_ms", a.finished_ms}};
  out["exit_code"] = a.exit_code ? json(*a.exit_code) : json(nullptr);
  out["preempted_for_job"] = a.preempt_for_job > 0 ? json(a.preempt_for_job) : json(nullptr);
  out["preempt_ms"] = a.preempt_ms > 0 ? json(a.preempt_ms) : json(nullptr);
  out["lost_work_ms"] = LostWorkMs(a);
  if (!a.ranks.empty()) {
    json ranks = json::array();
    for (const AttemptRank& r : a.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"node_id", r.node_id},
                       {"node", name_of(r.node_id)},
                       {"gpus", r.gpu_uuids},
                       {"state", AttemptStateName(r.state)},
                       {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
                       {"reason", r.reason},
                       {"finished_ms", r.finished_ms}});
    }
    out["ranks"] = std::move(ranks);
  }
  out["master"] = a.master_port > 0 ? json(a.MasterEndpoint()) : json(nullptr);
  return out;
}

json GroupToJson(const GroupStatus& g) {
  return {{"name", g.name},
          {"configured", g.configured},
          {"weight", g.weight},
          {"guaranteed_gpu_milli", g.guaranteed_milli},
          {"allocated_gpu_milli", g.allocated_milli},
          {"usage_gpu_milli_ms", g.usage_milli_ms},
          {"usage_gpu_hours", static_cast<double>(g.usage_milli_ms) / 3.6e9},
          {"usage_fraction", g.usage_fraction},
          {"share_fraction", g.share_fraction},
          {"fair_share_factor", g.fair_share_factor},
          {"running_jobs", g.running_jobs},
          {"pending_jobs", g.pending_jobs}};
}

json NodeToJson(const NodeStatus& s) {
  const Node& n = s.node;
  json gpus = json::array();
  for (const GpuInfo& g : n.gpus) {
    json gj = {
        {"index", g.index},
        {"uuid", g.uuid},
        {"name", g.name},
        {"memory_mib", g.memory_mib},
        {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
        {"simulated", g.simulated},
        {"description", DescribeGpu(g)}};
    // A MIG instance: its parent GPU and profile; null for a whole GPU.
    gj["mig"] = g.IsMig() ? json{{"parent_uuid", g.parent_uuid},
                                 {"profile", g.mig_profile},
                                 {"slices", g.mig_slices},
                                 {"gpu_instance", g.mig_gpu_instance},
                                 {"compute_instance", g.mig_compute_instance}}
                          : json(nullptr);
    auto used = s.gpu_attempts.find(g.uuid);
    bool in_use = used != s.gpu_attempts.end() && !used->second.empty();
    // "attempt": the first attempt using it (kept for older clients);
    // "attempts": all of them (several shares may use one GPU).
    gj["attempt"] = in_use ? json(used->second.front()) : json(nullptr);
    gj["attempts"] = in_use ? json(used->second) : json::array();
    auto milli = s.gpu_used_milli.find(g.uuid);
    gj["used_milli"] = milli == s.gpu_used_milli.end() ? 0 : milli->second;
    json shares = json::array();
    for (const ShareUse& u : s.shares) {
      if (u.gpu_uuid != g.uuid) continue;
      shares.push_back({{"attempt", u.attempt_id},
                        {"memory_cap_mib", u.memory_cap_mib},
                        {"memory_used_mib", u.memory_used_mib}});
    }
    gj["shares"] = std::move(shares);
    for (const GpuTelemetry& t : s.telemetry) {
      if (t.uuid != g.uuid) continue;
      json procs = json::array();
      for (const auto& p : t.processes)
        procs.push_back({{"pid", p.pid}, {"used_memory_mib", p.used_memory_mib}});
      gj["telemetry"] = {{"memory_used_mib", t.memory_used_mib},
                         {"utilization_percent", t.utilization_percent},
                         {"temperature_c", t.temperature_c},
                         {"power_mw", t.power_mw},
                         {"energy_mj", t.energy_mj},
                         {"processes", procs}};
    }
    gpus.push_back(std::move(gj));
  }
  return {{"id", n.id},
          {"name", n.name},
          {"state", NodeStateName(n.state)},
          {"status", s.status},
          {"lending", n.lending ? NodeLendingToJson(*n.lending) : json(nullptr)},
          {"connected", s.connected},
          {"gpus", gpus},
          {"cpu_milli", n.cpu_milli},
          {"memory_mib", n.memory_mib},
          {"driver_version", n.driver_version},
          {"cuda_version", n.cuda_version},
          {"agent_version", n.agent_version},
          {"labels", n.labels},
          {"owner_group", n.owner_group},
          {"registered_ms", n.registered_ms},
          {"last_seen_ms", n.last_seen_ms},
          {"running_tasks", s.running_tasks}};
}

json NodeEventToJson(const NodeEventEntry& e) {
  return {{"id", e.event.id},       {"node_id", e.event.node_id},  {"node", e.node_name},
          {"ts_ms", e.event.ts_ms}, {"kind", e.event.kind},        {"reason", e.event.reason},
          {"gpus", e.event.gpus},   {"attempts", e.event.attempts}};
}

// "wait=30s" -> 30000 ms, capped at a minute so proxies and clients never
// see a request hang longer than they expect.
Result<int64_t> QueryWaitMs(const net::HttpRequest& req) {
  auto it = req.query.find("wait");
  if (it == req.query.end() || it->second.empty()) return 0;
  auto ms = ParseDurationMs(it->second);
  if (!ms.ok()) return ms.status().WithContext("query parameter wait");
  return std::min<int64_t>(*ms, 60'000);
}

bool IsYaml(const std::string& content_type) {
  std::string_view t = content_type;
  t = t.substr(0, t.find(';'));
  return t == "application/yaml" || t == "application/x-yaml" || t == "text/yaml";
}

}  // namespace

Result<JobSpec> JobSpecFromRequest(const net::HttpRequest& req) {
  if (IsYaml(req.Header("content-type"))) return ParseJobSpec(req.body);
  GP_ASSIGN_OR_RETURN(auto body, ParseJsonObject(req.body, "request body"));
  return JobSpecFromJson(body);
}

Api::~Api() {
  for (auto& [job, waiters] : waiters_) {
    for (auto& [id, w] : waiters) loop_.Cancel(w.timer);
  }
}

Api::Api(net::EventLoop& loop, Pool& pool, Auth& auth, const Clock& clock, ApiOptions options,
         BlobApi* blobs, IdentityApi* identity)
    : loop_(loop),
      pool_(pool),
      auth_(auth),
      clock_(clock),
      options_(std::move(options)),
      blobs_(blobs),
      limiter_(clock, options_.per_token),
      agent_limiter_(clock, options_.per_agent) {
  AddOwnRoutes();
  if (identity != nullptr) identity->AddRoutes(routes_);
  if (blobs != nullptr) blobs->AddRoutes(routes_);
}

Result<Principal> Api::Authenticate(const net::HttpRequest& req) {
  std::string header = req.Header("authorization");
  if (header.empty() && !options_.proxy_user_header.empty()) {
    // Single sign-on through a reverse proxy: only the proxy's own address
    // may name the user; the header from anyone else is ignored.
    std::string user = req.Header(options_.proxy_user_header);
    std::string host = PeerHost(req.peer);
    bool trusted = std::find(options_.proxy_trusted.begin(), options_.proxy_trusted.end(), host) !=
                   options_.proxy_trusted.end();
    if (!user.empty() && trusted) return auth_.PrincipalForProxyUser(user, req.peer);
  }
  // A token, or the web dashboard's session cookie.
  GP_ASSIGN_OR_RETURN(std::string credentials, RequestCredentials(req));
  return auth_.Authenticate(credentials);
}

void Api::Handle(net::HttpRequest req, net::Responder responder) {
  auto found = routes_.Find(req.method, req.path);
  if (options_.observe) {
    responder.Observe([observe = options_.observe, method = req.method,
                       route = found.ok() ? found->route->pattern : std::string(),
                       start = std::chrono::steady_clock::now()](const net::HttpResponse& r) {
      observe(route, method, r.status,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    });
  }
  auto respond = std::make_shared<net::Responder>(std::move(responder));
  if (found.ok() && found->route->access == Access::kPublic) {
    return found->route->handler(req, Principal{}, found->params, respond);
  }
  // Anything else needs a token first: an unknown path is not found only
  // for those who may call the API at all.
  auto who = Authenticate(req);
  if (!who.ok()) {
    (*respond)(ErrorResponse(who.status()));
    return;
  }
  // Agents move checkpoints in many requests: they have a bucket of their
  // own, far larger; every other token shares its bucket across all its
  // requests.
  const bool agent = who->role == Role::kAgent;
  if (int64_t wait_ms = (agent ? agent_limiter_ : limiter_).Take(who->token_id); wait_ms > 0) {
    const RateLimit& limit = agent ? options_.per_agent : options_.per_token;
    net::HttpResponse r = ErrorResponse(Status::ResourceExhausted(
        "rate limit: this token made more than " +
        std::to_string(static_cast<int64_t>(limit.burst)) +
        " requests in a burst; retry after the Retry-After header's seconds"));
    r.headers["retry-after"] = std::to_string((wait_ms + 999) / 1000);
    (*respond)(std::move(r));
    return;
  }
  if (!found.ok()) return (*respond)(ErrorResponse(found.status()));
  const auto& route = *found->route;
  if (route.access == Access::kAuthorizedFirst) {
    if (Status s = Authorize(*who, route.action); !s.ok()) return (*respond)(ErrorResponse(s));
  }
  route.handler(req, *who, found->params, respond);
}

void Api::AddOwnRoutes() {
  ApiRoutes& t = routes_;
  t.AddPublic("GET", "/healthz",
              [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
                nlohmann::json j = {{"status", "ok"}};
                if (!options_.role.empty()) {
                  j["role"] = options_.role;
                  j["epoch"] = options_.epoch;
                }
                (*respond)(JsonResponse(200, j));
              });
  // A job's routes authorize against the job they load (VisibleJob: its
  // owner and group, and not found when it may not even be read).
  auto with_job = [](auto handle) {
    return [handle](net::HttpRequest& req, const Principal& who, const PathParams& params,
                    Respond respond) {
      auto id = ParseJobId(params.find("id")->second);
      if (!id.ok()) return (*respond)(ErrorResponse(id.status()));
      handle(req, who, *id, respond);
    };
  };
  constexpr Access kFirst = Access::kAuthorizedFirst, kInHandler = Access::kHandlerAuthorizes;
  t.Add("POST", "/v1/jobs", kInHandler, Action::kJobSubmit,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          SubmitJob(req, who, respond);
        });
  t.Add("GET", "/v1/jobs", kInHandler, Action::kJobRead,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          ListJobs(req, who, respond);
        });
  t.Add("GET", "/v1/jobs/{id}", kInHandler, Action::kJobRead,
        with_job([this](net::HttpRequest& req, const Principal& who, int64_t id, Respond respond) {
          GetJob(req, who, id, respond);
        }));
  t.Add("POST", "/v1/jobs/{id}/cancel", kInHandler, Action::kJobCancel,
        with_job([this](net::HttpRequest&, const Principal& who, int64_t id, Respond respond) {
          CancelJob(who, id, respond);
        }));
  t.Add("GET", "/v1/jobs/{id}/logs", kInHandler, Action::kJobRead,
        with_job([this](net::HttpRequest& req, const Principal& who, int64_t id, Respond respond) {
          JobLogs(req, who, id, respond);
        }));
  t.Add("GET", "/v1/queue", kInHandler, Action::kJobRead,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          Queue(req, who, respond);
        });
  t.Add("GET", "/v1/groups", kFirst, Action::kPoolRead,
        [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
          Groups(respond);
        });
  t.Add("GET", "/v1/nodes", kFirst, Action::kPoolRead,
        [this](net::HttpRequest& req, const Principal&, const PathParams&, Respond respond) {
          ListNodes(req, respond);
        });
  t.Add("GET", "/v1/nodes/{node}", kFirst, Action::kPoolRead,
        [this](net::HttpRequest&, const Principal&, const PathParams& params, Respond respond) {
          GetNode(respond, params.find("node")->second);
        });
  t.Add("GET", "/v1/nodes/{node}/events", kFirst, Action::kPoolRead,
        [this](net::HttpRequest& req, const Principal&, const PathParams& params, Respond respond) {
          NodeEvents(req, params.find("node")->second, respond);
        });
  t.Add("GET", "/v1/events", kFirst, Action::kPoolRead,
        [this](net::HttpRequest& req, const Principal&, const PathParams&, Respond respond) {
          auto node = req.query.find("node");
          NodeEvents(req, node == req.query.end() ? "" : node->second, respond);
        });
}

namespace {

// The Idempotency-Key header of a submission: "" without one.
Result<std::string> SubmitKey(const net::HttpRequest& req) {
  if (req.headers.count("idempotency-key") == 0) return std::string();
  std::string key = req.Header("idempotency-key");
  const bool ok =
      !key.empty() && key.size() <= 200 && std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
               c == '-';
      });
  if (!ok) {
    return Status::InvalidArgument(
        "header Idempotency-Key: 1 to 200 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'");
  }
  return key;
}

}  // namespace

void Api::SubmitJob(const net::HttpRequest& req, const Principal& who, Respond respond) {
  Result<JobSpec> spec = JobSpecFromRequest(req);
  if (!spec.ok()) return (*respond)(ErrorResponse(spec.status()));
  // A job is charged to its group: only a lab's members may use the lab's
  // name (groups that are not labs are open to all).
  auto lab = auth_.IsLab(spec->group);
  if (!lab.ok()) return (*respond)(ErrorResponse(lab.status()));
  Status allowed = Authorize(who, Action::kJobSubmit, {who.subject, *lab ? spec->group : ""});
  if (!allowed.ok()) {
    return (*respond)(ErrorResponse(allowed.WithContext("group " + spec->group)));
  }
  // The proxy presents this token to the session's Jupyter; users never
  // need it (they sign in to the proxy instead).
  if (spec->session && spec->session->kind == SessionKind::kJupyter &&
      spec->session->jupyter_token.empty()) {
    spec->session->jupyter_token = RandomHex(24);
  }
  auto key = SubmitKey(req);
  if (!key.ok()) return (*respond)(ErrorResponse(key.status()));
  auto submit = [this, respond, owner = who.subject, key = *key](const JobSpec& spec,
                                                                 int64_t input_bytes) {
    bool replayed = false;
    auto job = pool_.Submit(spec, owner, {.input_bytes = input_bytes, .key = key}, &replayed);
    if (!job.ok()) return (*respond)(ErrorResponse(job.status()));
    net::HttpResponse r = JsonResponse(replayed ? 200 : 201, JobToJson(*job, std::nullopt));
    if (replayed) r.headers["Idempotent-Replayed"] = "true";
    (*respond)(std::move(r));
  };
  if (spec->inputs.empty() || blobs_ == nullptr || !IsSha256Hex(spec->inputs)) {
    return submit(*spec, 0);
  }
  // The inputs' size counts toward storage quotas; reading it is file I/O.
  const std::string inputs = spec->inputs;
  blobs_->DescribeManifest(
      inputs, [submit, respond, spec = *std::move(spec)](Result<ManifestSummary> summary) {
        // A manifest that is not stored is refused by the pool, naming it.
        if (!summary.ok() && summary.status().code() != StatusCode::kNotFound) {
          return (*respond)(ErrorResponse(summary.status().WithContext("inputs")));
        }
        submit(spec, summary.ok() ? summary->bytes : 0);
      });
}

Result<JobDetail> Api::VisibleJob(const Principal& who, int64_t id, Action action) {
  return server::VisibleJob(pool_, who, id, action);
}

void Api::GetJob(const net::HttpRequest& req, const Principal& who, int64_t id, Respond respond) {
  auto wait_ms = QueryWaitMs(req);
  if (!wait_ms.ok()) return (*respond)(ErrorResponse(wait_ms.status()));
  std::string until = req.query.count("until") ? req.query.at("until") : "";
  if (!until.empty() && until != "running" && until != "finished") {
    return (*respond)(ErrorResponse(
        Status::InvalidArgument("query parameter until: must be running or finished")));
  }
  WaitOn(id, until.empty() ? 0 : *wait_ms, [this, who, id, until, respond](bool timed_out) {
    auto d = VisibleJob(who, id, Action::kJobRead);
    if (!d.ok()) {
      (*respond)(ErrorResponse(d.status()));
      return true;
    }
    JobState s = d->job.state;
    bool reached =
        until.empty() || IsTerminal(s) || (until == "running" && s == JobState::kRunning);
    if (!reached && !timed_out) return false;
    json out = JobToJson(d->job, d->queue);
    json attempts = json::array();
    int64_t lost = 0;
    for (const Attempt& a : d->attempts) {
      json aj = AttemptToJson(a, d->node_names);
      // A running share: its cap and use, as its agent last reported them.
      if (auto use = pool_.ShareUseOf(a.node_id, a.id); use && IsLive(a.state)) {
        aj["gpu_memory_cap_mib"] = use->memory_cap_mib;
        aj["gpu_memory_used_mib"] = use->memory_used_mib;
      }
      attempts.push_back(std::move(aj));
      lost += LostWorkMs(a);
    }
    out["attempt_list"] = attempts;
    out["lost_work_ms"] = lost;
    out["output"] = OutputToJson(d->output);
    (*respond)(JsonResponse(200, out));
    return true;
  });
}

void Api::ListJobs(const net::HttpRequest& req, const Principal& who, Respond respond) {
  JobQuery q;
  auto limit = QueryInt(req, "limit", 100, 1, 10000);
  auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
  auto before = QueryInt(req, "before", 0, 0, INT64_MAX);
  if (!limit.ok()) return (*respond)(ErrorResponse(limit.status()));
  if (!after.ok()) return (*respond)(ErrorResponse(after.status()));
  if (!before.ok()) return (*respond)(ErrorResponse(before.status()));
  q.limit = static_cast<int32_t>(*limit);
  q.after_id = *after;
  q.before_id = *before;
  q.newest_first = !req.query.count("after");
  if (auto it = req.query.find("state"); it != req.query.end() && !it->second.empty()) {
    std::string_view rest = it->second;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      auto state = ParseJobState(rest.substr(0, comma));
      if (!state.ok())
        return (*respond)(ErrorResponse(state.status().WithContext("query parameter state")));
      q.states.push_back(*state);
      rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    }
  }
  if (Status s = Authorize(who, Action::kJobRead, {who.subject}); !s.ok())
    return (*respond)(ErrorResponse(s));
  if (Decide(who, Action::kJobRead) != Decision::kAllowed) {
    // Members, providers: their own jobs and their job-sharing labs'.
    q.owner = who.subject;
    q.or_groups = who.shared_groups;
  } else if (auto it = req.query.find("owner"); it != req.query.end() && !it->second.empty()) {
    q.owner = it->second;
  }
  auto jobs = pool_.ListJobs(q);
  if (!jobs.ok()) return (*respond)(ErrorResponse(jobs.status()));
  json arr = json::array();
  for (const Job& j : *jobs) arr.push_back(JobToJson(j, pool_.QueueInfoFor(j.id)));
  (*respond)(JsonResponse(200, {{"jobs", arr}}));
}

void Api::CancelJob(const Principal& who, int64_t id, Respond respond) {
  auto d = VisibleJob(who, id, Action::kJobCancel);
  if (!d.ok()) return (*respond)(ErrorResponse(d.status()));
  auto job = pool_.Cancel(id);
  if (!job.ok()) return (*respond)(ErrorResponse(job.status()));
  (*respond)(JsonResponse(200, JobToJson(*job, std::nullopt)));
}

void Api::Queue(const net::HttpRequest& req, const Principal& who, Respond respond) {
  // A page of the queue (default: all of it).
  auto page = QueryOffsetPage(req);
  if (!page.ok()) return (*respond)(ErrorResponse(page.status()));
  // Members see their own jobs, with their places in the whole queue.
  if (Status s = Authorize(who, Action::kJobRead, {who.subject}); !s.ok())
    return (*respond)(ErrorResponse(s));
  std::optional<std::string> owner;
  if (Decide(who, Action::kJobRead) != Decision::kAllowed) owner = who.subject;
  auto queue = pool_.Queue(owner);
  if (!queue.ok()) return (*respond)(ErrorResponse(queue.status()));
  (*respond)(JsonResponse(
      200, page->Json("jobs", static_cast<int64_t>(queue->size()),
                      [&](int64_t i) { return JobToJson((*queue)[i].job, (*queue)[i].queue); })));
}

void Api::Groups(Respond respond) {
  auto groups = pool_.Groups();
  if (!groups.ok()) return (*respond)(ErrorResponse(groups.status()));
  json arr = json::array();
  for (const GroupStatus& g : *groups) arr.push_back(GroupToJson(g));
  (*respond)(JsonResponse(200, {{"groups", arr}}));
}

void Api::JobLogs(const net::HttpRequest& req, const Principal& who, int64_t id, Respond respond) {
  auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
  auto limit = QueryInt(req, "limit", 1000, 1, 10000);
  auto wait_ms = QueryWaitMs(req);
  // One rank of a multi-node job; -1 = all.
  auto rank = QueryInt(req, "rank", -1, 0, 255);
  for (const Status& s : {after.status(), limit.status(), wait_ms.status(), rank.status()}) {
    if (!s.ok()) return (*respond)(ErrorResponse(s));
  }
  int64_t cursor = *after;
  int32_t max = static_cast<int32_t>(*limit);
  int32_t only_rank = static_cast<int32_t>(*rank);
  WaitOn(id, *wait_ms, [this, who, id, cursor, max, only_rank, respond](bool timed_out) {
    auto d = VisibleJob(who, id, Action::kJobRead);
    if (!d.ok()) {
      (*respond)(ErrorResponse(d.status()));
      return true;
    }
    // Read the state before the lines: a job that was finished before the
    // read has all its lines stored (agents send output before the exit).
    bool finished = IsTerminal(d->job.state);
    auto page = pool_.ReadLogs(id, cursor, max);
    if (!page.ok()) {
      (*respond)(ErrorResponse(page.status()));
      return true;
    }
    if (page->removed) {  // retention removed them: say so, whatever the cursor
      (*respond)(JsonResponse(
          410, {{"error", {{"code", "GONE"}, {"message", DescribeRemoval(*page->removed)}}},
                {"removed", RemovalToJson(*page->removed)}}));
      return true;
    }
    const std::vector<LogLine>* lines = &page->lines;
    if (lines->empty() && !finished && !timed_out) return false;
    json arr = json::array();
    int64_t next = cursor;
    for (const LogLine& l : *lines) {
      // The cursor moves past other ranks' lines too, so paging goes on.
      next = l.cursor;
      if (only_rank >= 0 && l.rank != only_rank) continue;
      arr.push_back({{"cursor", l.cursor},
                     {"attempt_id", l.attempt_id},
                     {"rank", l.rank},
                     {"stream", l.stream},
                     {"ts_ms", l.ts_ms},
                     {"text", l.text}});
    }
    bool complete = finished && static_cast<int32_t>(lines->size()) < max;
    (*respond)(JsonResponse(200, {{"lines", arr},
                                  {"next_cursor", next},
                                  {"complete", complete},
                                  {"state", JobStateName(d->job.state)},
                                  {"nodes", d->job.spec.resources.nodes}}));
    return true;
  });
}

// A page of the nodes, in the pool's order: `limit` from `offset`
// (default: all of them), with how many there are.
void Api::ListNodes(const net::HttpRequest& req, Respond respond) {
  auto page = QueryOffsetPage(req);
  if (!page.ok()) return (*respond)(ErrorResponse(page.status()));
  auto nodes = pool_.ListNodes();
  if (!nodes.ok()) return (*respond)(ErrorResponse(nodes.status()));
  (*respond)(JsonResponse(200, page->Json("nodes", static_cast<int64_t>(nodes->size()),
                                          [&](int64_t i) { return NodeToJson((*nodes)[i]); })));
}

void Api::GetNode(Respond respond, const std::string& id_or_name) {
  auto nodes = pool_.ListNodes();
  if (!nodes.ok()) return (*respond)(ErrorResponse(nodes.status()));
  for (const NodeStatus& n : *nodes) {
    if (n.node.id == id_or_name || n.node.name == id_or_name)
      return (*respond)(JsonResponse(200, NodeToJson(n)));
  }
  (*respond)(ErrorResponse(Status::NotFound("node " + id_or_name + " does not exist")));
}

void Api::NodeEvents(const net::HttpRequest& req, const std::string& node, Respond respond) {
  auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
  auto below = QueryNewestBefore(req);
  auto limit = QueryInt(req, "limit", 100, 1, 10000);
  for (const Status& s : {after.status(), below.status(), limit.status()}) {
    if (!s.ok()) return (*respond)(ErrorResponse(s));
  }
  auto kind = req.query.find("kind");
  auto events = pool_.NodeEvents(node, kind == req.query.end() ? "" : kind->second, *after, *below,
                                 static_cast<int32_t>(*limit));
  if (!events.ok()) return (*respond)(ErrorResponse(events.status()));
  json arr = json::array();
  for (const NodeEventEntry& e : *events) arr.push_back(NodeEventToJson(e));
  json body = {{"events", arr}};
  AddNextPage(body, *after, *below, *limit, events->size(),
              events->empty() ? 0 : events->back().event.id);
  (*respond)(JsonResponse(200, body));
}

void Api::WaitOn(int64_t job_id, int64_t wait_ms, Probe probe) {
  if (probe(wait_ms <= 0)) return;
  uint64_t id = next_waiter_++;
  auto timer = loop_.RunAfter(wait_ms, [this, job_id, id] {
    auto job = waiters_.find(job_id);
    if (job == waiters_.end()) return;
    auto it = job->second.find(id);
    if (it == job->second.end()) return;
    Probe last = std::move(it->second.probe);
    job->second.erase(it);
    if (job->second.empty()) waiters_.erase(job);
    last(true);
  });
  waiters_[job_id][id] = Waiter{std::move(probe), timer};
}

void Api::JobChanged(int64_t job_id) {
  auto job = waiters_.find(job_id);
  if (job == waiters_.end()) return;
  // A probe responds at most once; those that do are forgotten.
  for (auto it = job->second.begin(); it != job->second.end();) {
    if (it->second.probe(false)) {
      loop_.Cancel(it->second.timer);
      it = job->second.erase(it);
    } else {
      ++it;
    }
  }
  if (job->second.empty()) waiters_.erase(job);
}

}  // namespace gpupool::server
