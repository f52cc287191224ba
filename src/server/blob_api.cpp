#include "server/blob_api.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/ids.h"
#include "common/json_reader.h"
#include "common/log.h"
#include "server/http_errors.h"

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

void Fail(const BlobApi::Respond& respond, const Status& s) { (*respond)(ErrorResponse(s)); }

}  // namespace

BlobApi::BlobApi(net::EventLoop& loop, Pool& pool, BlobService& blobs, const Clock& clock,
                 BlobApiOptions options)
    : loop_(loop),
      pool_(pool),
      blobs_(blobs),
      clock_(clock),
      options_(options),
      workers_(options.worker_threads) {}

bool BlobApi::Serves(std::string_view path) {
  auto parts = net::SplitPath(path);
  if (parts.size() < 2 || parts[0] != "v1") return false;
  if (parts[1] == "blobs") return true;
  if (parts[1] == "jobs") return parts.size() >= 4 && parts[3] == "checkpoints";
  return parts[1] == "admin" && parts.size() == 3 && parts[2] == "gc";
}

void BlobApi::Handle(net::HttpRequest req, const Principal& who, Respond respond) {
  auto shared = std::make_shared<const net::HttpRequest>(std::move(req));
  auto parts = net::SplitPath(shared->path);
  const std::string& m = shared->method;
  const size_t n = parts.size();
  if (parts[1] == "blobs") {
    bool write = m == "PUT" || (m == "POST" && !(n == 4 && parts[3] == "fetch"));
    if (Status s = Authorize(who, write ? Action::kBlobWrite : Action::kBlobRead); !s.ok())
      return Fail(respond, s);
    if (n == 3 && parts[2] == "missing" && m == "POST") return Missing(shared, respond);
    if (n == 3 && parts[2] == "chunks" && m == "POST") return PutChunks(shared, respond);
    if (n == 4 && parts[2] == "chunks" && parts[3] == "fetch" && m == "POST")
      return FetchChunks(shared, respond);
    if (n == 4 && parts[2] == "manifests" && m == "PUT")
      return PutManifest(shared, std::string(parts[3]), respond);
    if (n == 4 && parts[2] == "manifests" && m == "GET")
      return GetManifest(std::string(parts[3]), respond);
  } else if (parts[1] == "jobs") {
    auto job = ParsePositive(parts[2], "job id");
    if (!job.ok()) return Fail(respond, job.status());
    if (n == 4 && m == "POST") return PostCheckpoint(shared, who, *job, respond);
    if (n == 4 && m == "GET") return ListCheckpoints(who, *job, respond);
    if (n == 5 && m == "GET") return GetCheckpoint(who, *job, parts[4], respond);
  } else if (parts[1] == "admin" && m == "POST") {
    return AdminGc(who, respond);
  }
  Fail(respond, Status::NotFound("no such endpoint: " + m + " " + shared->path));
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

void BlobApi::PutChunks(Request req, Respond respond) {
  if (!IsRecordsBody(*req)) {
    return Fail(respond, Status::InvalidArgument("Content-Type must be " +
                                                 std::string(blob::kChunkRecordsContentType)));
  }
  workers_.Submit([this, req, respond] {
    auto stored = blobs_.PutChunks(req->body);
    if (!stored.ok()) return Fail(respond, stored.status());
    (*respond)(JsonResponse(200, {{"stored", *stored}}));
  });
}

void BlobApi::FetchChunks(Request req, Respond respond) {
  workers_.Submit([this, req, respond] {
    auto ids = ParseChunkList(req->body, options_.max_ids);
    if (!ids.ok()) return Fail(respond, ids.status());
    auto body = blobs_.FetchChunks(*ids, options_.max_fetch_bytes);
    if (!body.ok()) return Fail(respond, body.status());
    net::HttpResponse r;
    r.content_type = std::string(blob::kChunkRecordsContentType);
    r.body = *std::move(body);
    (*respond)(std::move(r));
  });
}

// ---------------------------------------------------------------- manifests

void BlobApi::PutManifest(Request req, std::string id, Respond respond) {
  workers_.Submit([this, req, id, respond] {
    auto summary = blobs_.PutManifest(id, req->body);
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
  auto d = pool_.GetJob(job);
  if (!d.ok()) return d.status();
  Resource object{d->job.owner, d->job.spec.group};
  if (Decide(who, Action::kJobRead, object) == Decision::kNotYours)
    return Status::NotFound("job " + std::to_string(job) + " does not exist");
  return Authorize(who, Action::kJobRead, object);
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
  if (!node.ok()) return Fail(respond, node.status());
  if (Status s = Authorize(who, Action::kCheckpointWrite, {*node}); !s.ok())
    return Fail(respond, s);
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
    loop_.Post([done, stats = std::move(stats)] { done(stats); });
  });
}

}  // namespace gpupool::server
