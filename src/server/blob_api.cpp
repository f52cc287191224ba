#include "server/blob_api.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/ids.h"
#include "common/json_reader.h"
#include "common/log.h"
#include "server/http_errors.h"
#include "server/job_access.h"

namespace gpupool::server {

using nlohmann::json;

namespace {

json CheckpointToJson(const Checkpoint& c) {
  return {{"job", c.job_id},        {"number", c.number},         {"attempt", c.attempt_id},
          {"manifest", c.manifest}, {"created_ms", c.created_ms}, {"bytes", c.bytes},
          {"files", c.files}};
}

json GcStatsToJson(const GcStats& s) {
  return {{"manifests_removed", s.manifests_removed},
          {"chunks_removed", s.chunks_removed},
          {"bytes_freed", s.bytes_freed},
          {"chunks_kept", s.chunks_kept}};
}

json LogGcStatsToJson(const LogGcStats& s) {
  return {{"jobs_removed", s.jobs_removed},   {"by_retention", s.by_retention},
          {"by_budget", s.by_budget},         {"lines_removed", s.lines_removed},
          {"bytes_removed", s.bytes_removed}, {"chunks_freed", s.chunks_freed},
          {"jobs_kept", s.kept.jobs},         {"bytes_kept", s.kept.stored_bytes}};
}

Result<int64_t> ParsePositive(std::string_view text, std::string_view what) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v <= 0) {
    return Status::InvalidArgument("invalid " + std::string(what) + " \"" + std::string(text) +
                                   "\"");
  }
  return v;
}

// {"chunks": ["<id>", ...]}: at most `max` ids, each a chunk id.
Result<std::vector<std::string>> ParseChunkList(std::string_view body, size_t max) {
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(body, "request body"));
  JsonReader r(j, "");
  std::vector<std::string> ids = r.StrList("chunks");
  GP_RETURN_IF_ERROR(r.Finish());
  if (ids.size() > max) {
    return Status::InvalidArgument("chunks: at most " + std::to_string(max) +
                                   " ids per request, got " + std::to_string(ids.size()));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!IsSha256Hex(ids[i])) {
      return Status::InvalidArgument("chunks[" + std::to_string(i) +
                                     "]: must be a chunk id (64 lowercase hex digits)");
    }
  }
  return ids;
}

// Whether a request body is declared as chunk records (or not declared).
bool IsRecordsBody(const net::HttpRequest& req) {
  std::string type = req.Header("content-type");
  if (type.empty()) return true;
  std::string_view media = std::string_view(type).substr(0, type.find(';'));
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  return media == blob::kChunkRecordsContentType;
}

void Fail(const Respond& respond, const Status& s) { (*respond)(ErrorResponse(s)); }

}  // namespace

BlobApi::BlobApi(net::EventLoop& loop, Pool& pool, BlobService& blobs, const Clock& clock,
                 BlobApiOptions options, BlobApiAgents agents, StorageQuotas* quotas)
    : loop_(loop),
      pool_(pool),
      blobs_(blobs),
      clock_(clock),
      options_(options),
      agents_(agents),
      quotas_(quotas),
      workers_(options.worker_threads) {}

Result<std::optional<std::set<std::string>>> BlobApi::AgentReadable(const Principal& who) {
  if (who.role != Role::kAgent) return std::optional<std::set<std::string>>();
  if (agents_.scope == nullptr) {
    return Status::PermissionDenied("agents may not read blobs on this server");
  }
  GP_ASSIGN_OR_RETURN(auto readable, agents_.scope->Readable(who.subject));
  return std::optional<std::set<std::string>>(std::move(readable));
}

void BlobApi::RefuseAgent(const Principal& who, const std::string& peer, const std::string& action,
                          const std::string& target, const Status& why) {
  GP_LOG(kWarn) << "refused agent " << who.subject << " (" << action << " " << target
                << "): " << why.message();
  if (agents_.audit != nullptr)
    agents_.audit->Audit("node:" + who.subject, action, target, why.message(), peer, false);
}

void BlobApi::AddRoutes(ApiRoutes& t) {
  using R = net::HttpRequest;
  using P = PathParams;
  // The body can be large (chunks, 8 MiB): it is moved, never copied, into
  // the request the worker threads share.
  auto shared = [](R& req) { return std::make_shared<const R>(std::move(req)); };
  constexpr Access kFirst = Access::kAuthorizedFirst, kInHandler = Access::kHandlerAuthorizes;
  t.Add("POST", "/v1/blobs/missing", kFirst, Action::kBlobWrite,
        [this, shared](R& req, const Principal&, const P&, Respond respond) {
          Missing(shared(req), respond);
        });
  t.Add("POST", "/v1/blobs/chunks", kFirst, Action::kBlobWrite,
        [this, shared](R& req, const Principal& who, const P&, Respond respond) {
          PutChunks(shared(req), who, respond);
        });
  t.Add("PUT", "/v1/blobs/manifests/{id}", kFirst, Action::kBlobWrite,
        [this, shared](R& req, const Principal& who, const P& params, Respond respond) {
          PutManifest(shared(req), who, params.find("id")->second, respond);
        });
  t.Add("POST", "/v1/blobs/chunks/fetch", kFirst, Action::kBlobRead,
        [this, shared](R& req, const Principal& who, const P&, Respond respond) {
          // Agents read only their own node's blobs (agent_blob_scope.h).
          auto readable = AgentReadable(who);
          if (!readable.ok()) {
            RefuseAgent(who, req.peer, "agent.blob_read", "fetch", readable.status());
            return Fail(respond, readable.status());
          }
          FetchChunks(shared(req), who, *std::move(readable), respond);
        });
  t.Add("GET", "/v1/blobs/manifests/{id}", kFirst, Action::kBlobRead,
        [this](R& req, const Principal& who, const P& params, Respond respond) {
          ReadManifest(req, who, params.find("id")->second, respond);
        });
  // A job's checkpoints: each handler authorizes against the job (its owner
  // and group) or, for an agent, the node its attempt runs on.
  auto with_job = [](auto handle) {
    return [handle](R& req, const Principal& who, const P& params, Respond respond) {
      auto job = ParsePositive(params.find("job")->second, "job id");
      if (!job.ok()) return Fail(respond, job.status());
      auto which = params.find("which");
      handle(req, who, *job, which == params.end() ? std::string("all") : which->second, respond);
    };
  };
  t.Add("POST", "/v1/jobs/{job}/checkpoints", kInHandler, Action::kCheckpointWrite,
        with_job(
            [this, shared](R& req, const Principal& who, int64_t job, const std::string&,
                           Respond respond) { PostCheckpoint(shared(req), who, job, respond); }));
  t.Add("GET", "/v1/jobs/{job}/checkpoints", kInHandler, Action::kJobRead,
        with_job([this](R&, const Principal& who, int64_t job, const std::string&,
                        Respond respond) { ListCheckpoints(who, job, respond); }));
  t.Add("GET", "/v1/jobs/{job}/checkpoints/{which}", kInHandler, Action::kJobRead,
        with_job([this](R&, const Principal& who, int64_t job, const std::string& which,
                        Respond respond) { GetCheckpoint(who, job, which, respond); }));
  for (const char* pattern : {"/v1/jobs/{job}/checkpoints", "/v1/jobs/{job}/checkpoints/{which}"}) {
    t.Add("DELETE", pattern, kInHandler, Action::kJobCancel,
          with_job([this](R&, const Principal& who, int64_t job, const std::string& which,
                          Respond respond) { DeleteCheckpoints(who, job, which, respond); }));
  }
  t.Add("POST", "/v1/admin/gc", kFirst, Action::kAdminister,
        [this](R&, const Principal& who, const P&, Respond respond) { AdminGc(who, respond); });
}

void BlobApi::ReadManifest(const net::HttpRequest& req, const Principal& who, const std::string& id,
                           Respond respond) {
  // Agents read only their own node's blobs (agent_blob_scope.h).
  auto readable = AgentReadable(who);
  if (!readable.ok()) {
    RefuseAgent(who, req.peer, "agent.blob_read", id, readable.status());
    return Fail(respond, readable.status());
  }
  if (*readable && !(*readable)->count(id)) {
    Status s = Status::PermissionDenied(
        "manifest " + id +
        " belongs to no job running on this node: agents read only their own attempts' "
        "inputs and checkpoints");
    RefuseAgent(who, req.peer, "agent.blob_read", id, s);
    return Fail(respond, s);
  }
  GetManifest(id, respond);
}

// ------------------------------------------------------------------- chunks

void BlobApi::Missing(Request req, Respond respond) {
  workers_.Submit([this, req, respond] {
    auto ids = ParseChunkList(req->body, options_.max_ids);
    if (!ids.ok()) return Fail(respond, ids.status());
    auto missing = blobs_.Missing(*ids);
    if (!missing.ok()) return Fail(respond, missing.status());
    (*respond)(JsonResponse(200, {{"missing", *missing}}));
  });
}

Result<UploadAllowance> BlobApi::AllowanceFor(const net::HttpRequest& req, const Principal& who) {
  auto allowance = AllowanceOf(req, who);
  if (!allowance.ok() && who.role == Role::kAgent &&
      allowance.status().code() == StatusCode::kPermissionDenied) {
    // An agent uploading for another node's attempt: refused and audited.
    auto it = req.query.find("attempt");
    RefuseAgent(who, req.peer, "agent.upload", it == req.query.end() ? "" : it->second,
                allowance.status());
  }
  return allowance;
}

Result<UploadAllowance> BlobApi::AllowanceOf(const net::HttpRequest& req, const Principal& who) {
  if (quotas_ == nullptr) return UploadAllowance{};
  if (who.role != Role::kAgent) return quotas_->Allowance(who.subject, "");
  // An agent uploads checkpoints: charged to the job of the attempt it
  // names, which must run on its own node.
  auto it = req.query.find("attempt");
  if (it == req.query.end() || it->second.empty()) {
    UploadAllowance none;
    none.refuse_new = Status::InvalidArgument(
        "query parameter attempt: an agent names the attempt it uploads a checkpoint for "
        "(?attempt=JOB.N)");
    return none;
  }
  GP_ASSIGN_OR_RETURN(auto ids, ParseAttemptId(it->second));
  GP_ASSIGN_OR_RETURN(std::string node, pool_.AttemptNodeName(it->second));
  if (node != who.subject) {
    return Status::PermissionDenied("node " + who.subject + " may not upload for attempt " +
                                    it->second + ", which runs on another node");
  }
  GP_ASSIGN_OR_RETURN(JobDetail d, pool_.GetJob(ids.first));
  return quotas_->Allowance(d.job.owner, d.job.spec.group);
}

void BlobApi::PutChunks(Request req, const Principal& who, Respond respond) {
  if (!IsRecordsBody(*req)) {
    return Fail(respond, Status::InvalidArgument("Content-Type must be " +
                                                 std::string(blob::kChunkRecordsContentType)));
  }
  auto allowance = AllowanceFor(*req, who);
  if (!allowance.ok()) return Fail(respond, allowance.status());
  workers_.Submit([this, req, respond, allowance = *std::move(allowance)] {
    auto stored = blobs_.PutChunks(req->body, [&](int64_t bytes) {
      return quotas_ == nullptr ? Status::Ok() : quotas_->Admit(allowance, bytes);
    });
    if (!stored.ok()) return Fail(respond, stored.status());
    (*respond)(JsonResponse(200, {{"stored", *stored}}));
  });
}

void BlobApi::FetchChunks(Request req, const Principal& who,
                          std::optional<std::set<std::string>> readable, Respond respond) {
  workers_.Submit([this, req, who, respond, readable = std::move(readable)] {
    auto ids = ParseChunkList(req->body, options_.max_ids);
    if (!ids.ok()) return Fail(respond, ids.status());
    if (readable && agents_.scope != nullptr) {
      if (Status s = agents_.scope->CheckChunks(*readable, *ids); !s.ok()) {
        // The audit log lives in the store, which the loop owns.
        loop_.Post(
            [this, req, who, s] { RefuseAgent(who, req->peer, "agent.blob_read", "chunks", s); });
        return Fail(respond, s);
      }
    }
    auto body = blobs_.FetchChunks(*ids, options_.max_fetch_bytes);
    if (!body.ok()) return Fail(respond, body.status());
    net::HttpResponse r;
    r.content_type = std::string(blob::kChunkRecordsContentType);
    r.body = *std::move(body);
    (*respond)(std::move(r));
  });
}

// ---------------------------------------------------------------- manifests

void BlobApi::PutManifest(Request req, const Principal& who, std::string id, Respond respond) {
  auto allowance = AllowanceFor(*req, who);
  if (!allowance.ok()) return Fail(respond, allowance.status());
  workers_.Submit([this, req, id, respond, allowance = *std::move(allowance)] {
    auto summary = blobs_.PutManifest(id, req->body, [&](int64_t bytes) {
      return quotas_ == nullptr ? Status::Ok() : quotas_->Admit(allowance, bytes);
    });
    if (!summary.ok()) return Fail(respond, summary.status());
    (*respond)(JsonResponse(summary->created ? 201 : 200, {{"id", summary->id},
                                                           {"bytes", summary->bytes},
                                                           {"files", summary->files},
                                                           {"chunks", summary->chunks}}));
  });
}

void BlobApi::GetManifest(std::string id, Respond respond) {
  workers_.Submit([this, id, respond] {
    auto text = blobs_.GetManifest(id);
    if (!text.ok()) return Fail(respond, text.status());
    net::HttpResponse r;
    r.body = *std::move(text);
    (*respond)(std::move(r));
  });
}

// -------------------------------------------------------------- checkpoints

Status BlobApi::CheckJobVisible(const Principal& who, int64_t job) {
  return VisibleJob(pool_, who, job, Action::kJobRead).status();
}

void BlobApi::PostCheckpoint(Request req, const Principal& who, int64_t job, Respond respond) {
  auto body = ParseJsonObject(req->body, "request body");
  if (!body.ok()) return Fail(respond, body.status());
  JsonReader r(*body, "");
  CheckpointRequest c;
  c.job_id = job;
  c.attempt_id = r.Str("attempt");
  c.manifest = r.Str("manifest");
  if (Status s = r.Finish(); !s.ok()) return Fail(respond, s);
  if (auto a = ParseAttemptId(c.attempt_id); !a.ok()) return Fail(respond, a.status());
  // Only the agent running the attempt (or an admin) registers its checkpoints.
  auto node = pool_.AttemptNodeName(c.attempt_id);
  if (!node.ok()) {
    if (who.role == Role::kAgent)
      RefuseAgent(who, req->peer, "agent.checkpoint", c.attempt_id, node.status());
    return Fail(respond, node.status());
  }
  if (Status s = Authorize(who, Action::kCheckpointWrite, {*node}); !s.ok()) {
    if (who.role == Role::kAgent && s.code() == StatusCode::kPermissionDenied) {
      s = Status::PermissionDenied("attempt " + c.attempt_id + " of job " + std::to_string(job) +
                                   " does not run on node " + who.subject +
                                   ": an agent posts checkpoints only for its own attempts");
      RefuseAgent(who, req->peer, "agent.checkpoint", c.attempt_id, s);
    }
    return Fail(respond, s);
  }
  if (!IsSha256Hex(c.manifest)) {
    return Fail(respond, Status::InvalidArgument(
                             "manifest: must be a manifest id (64 lowercase hex digits)"));
  }
  // The manifest's size is read on a worker; the pool is changed on the loop.
  workers_.Submit([this, c, respond]() mutable {
    auto summary = blobs_.DescribeManifest(c.manifest);
    if (!summary.ok()) {
      Status s = summary.status();
      if (s.code() == StatusCode::kNotFound) {
        s = Status::FailedPrecondition("manifest " + c.manifest +
                                       " is not stored: PUT /v1/blobs/manifests/" + c.manifest +
                                       " first");
      }
      return Fail(respond, s);
    }
    c.bytes = summary->bytes;
    c.files = summary->files;
    loop_.Post([this, c, respond] {
      auto added = pool_.AddCheckpoint(c);
      if (!added.ok()) return Fail(respond, added.status());
      (*respond)(JsonResponse(added->created ? 201 : 200, CheckpointToJson(added->checkpoint)));
    });
  });
}

void BlobApi::ListCheckpoints(const Principal& who, int64_t job, Respond respond) {
  if (Status s = CheckJobVisible(who, job); !s.ok()) return Fail(respond, s);
  auto list = pool_.ListCheckpoints(job);
  if (!list.ok()) return Fail(respond, list.status());
  json arr = json::array();
  for (const Checkpoint& c : *list) arr.push_back(CheckpointToJson(c));
  (*respond)(JsonResponse(200, {{"checkpoints", arr}}));
}

void BlobApi::GetCheckpoint(const Principal& who, int64_t job, std::string_view which,
                            Respond respond) {
  int64_t number = 0;  // latest
  if (which != "latest") {
    auto n = ParsePositive(which, "checkpoint number (a number or \"latest\")");
    if (!n.ok()) return Fail(respond, n.status());
    number = *n;
  }
  if (Status s = CheckJobVisible(who, job); !s.ok()) return Fail(respond, s);
  auto c = pool_.GetCheckpoint(job, number);
  if (!c.ok()) return Fail(respond, c.status());
  (*respond)(JsonResponse(200, CheckpointToJson(*c)));
}

void BlobApi::DeleteCheckpoints(const Principal& who, int64_t job, std::string_view which,
                                Respond respond) {
  int64_t number = 0;  // all
  if (which != "all") {
    auto n = ParsePositive(which, "checkpoint number");
    if (!n.ok()) return Fail(respond, n.status());
    number = *n;
  }
  // Deleting is the owner's, like cancelling.
  auto d = pool_.GetJob(job);
  if (!d.ok()) return Fail(respond, d.status());
  Resource object{d->job.owner, d->job.spec.group};
  if (Decide(who, Action::kJobRead, object) == Decision::kNotYours)
    return Fail(respond, Status::NotFound("job " + std::to_string(job) + " does not exist"));
  if (Status s = Authorize(who, Action::kJobCancel, object); !s.ok()) return Fail(respond, s);
  auto deleted = pool_.DeleteCheckpoints(job, number);
  if (!deleted.ok()) return Fail(respond, deleted.status());
  json arr = json::array();
  int64_t bytes = 0;
  for (const Checkpoint& c : *deleted) {
    arr.push_back(CheckpointToJson(c));
    bytes += c.bytes;
  }
  (*respond)(JsonResponse(200, {{"deleted", arr}, {"bytes", bytes}}));
}

// ----------------------------------------------------- garbage collection

void BlobApi::AdminGc(const Principal& who, Respond respond) {
  if (Status s = Authorize(who, Action::kAdminister); !s.ok()) return Fail(respond, s);
  CollectGarbage([this, respond](Result<GcStats> stats) {
    if (!stats.ok()) return Fail(respond, stats.status());
    json out = GcStatsToJson(*stats);
    if (!options_.collect_logs) return (*respond)(JsonResponse(200, out));
    options_.collect_logs([respond, out](Result<LogGcStats> logs) mutable {
      if (!logs.ok()) return Fail(respond, logs.status());
      out["logs"] = LogGcStatsToJson(*logs);
      (*respond)(JsonResponse(200, out));
    });
  });
}

void BlobApi::DescribeManifest(const std::string& id,
                               std::function<void(Result<ManifestSummary>)> done) {
  workers_.Submit([this, id, done = std::move(done)] {
    auto summary = blobs_.DescribeManifest(id);
    loop_.Post([done, summary = std::move(summary)] { done(summary); });
  });
}

void BlobApi::CollectGarbage(std::function<void(Result<GcStats>)> done) {
  auto reachable = pool_.ReachableManifests();
  if (!reachable.ok()) return done(reachable.status());
  const int64_t now = clock_.NowMs();
  workers_.Submit([this, reachable = *std::move(reachable), now, done = std::move(done)] {
    auto stats = blobs_.CollectGarbage(reachable, now, options_.gc_grace_ms);
    if (stats.ok()) {
      GP_LOG(kInfo) << "blob gc: removed " << stats->manifests_removed << " manifests and "
                    << stats->chunks_removed << " chunks (" << stats->bytes_freed
                    << " bytes), kept " << stats->chunks_kept << " chunks";
    }
    loop_.Post([this, done, stats = std::move(stats)] {
      if (stats.ok()) last_gc_ = *stats;
      done(stats);
    });
  });
}

}  // namespace gpupool::server
