#include "blob/http_chunk_store.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "blob/read_ahead.h"
#include "net/http.h"
#include "net/http_client.h"

namespace gpupool::blob {

using nlohmann::json;

namespace {

constexpr char kJson[] = "application/json";

// The server's error body as a Status, with a hint for a refused token.
Status ErrorFrom(const net::HttpResponse& r, const std::string& what) {
  Status s = net::ErrorStatus(r, what);
  if (r.status != 401) return s;
  return Status(s.code(), s.message() + " (check --token or GPUPOOL_TOKEN)");
}

Result<json> ParseJson(const std::string& body, const std::string& what) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return Status::Internal(what + ": the server sent invalid JSON");
  return j;
}

json IdList(const std::vector<ChunkId>& ids, size_t begin, size_t end) {
  json list = json::array();
  for (size_t i = begin; i < end; ++i) list.push_back(ids[i]);
  return json{{"chunks", std::move(list)}};
}

}  // namespace

HttpChunkStore::HttpChunkStore(HttpChunkStoreOptions options) : options_(std::move(options)) {}

std::string HttpChunkStore::UploadQuery() const {
  if (options_.for_attempt.empty()) return "";
  return "?attempt=" + net::UrlEncode(options_.for_attempt);
}

Result<HttpChunkStore::Answer> HttpChunkStore::Call(const std::string& method,
                                                    const std::string& target, std::string body,
                                                    const std::string& content_type) {
  net::HttpCall call;
  call.base_url = options_.server;
  call.method = method;
  call.target = target;
  call.body = std::move(body);
  call.timeout_ms = options_.timeout_ms;
  call.tls = options_.tls;
  if (!call.body.empty()) call.headers["Content-Type"] = content_type;
  if (!options_.token.empty()) call.headers["Authorization"] = "Bearer " + options_.token;
  GP_ASSIGN_OR_RETURN(net::HttpResponse r, net::Fetch(call));
  if (r.status < 200 || r.status > 299) return ErrorFrom(r, method + " " + target);
  return Answer{r.status, std::move(r.content_type), std::move(r.body)};
}

Result<std::vector<ChunkId>> HttpChunkStore::Missing(const std::vector<ChunkId>& ids) {
  std::vector<ChunkId> missing;
  const size_t step = std::max<size_t>(1, options_.max_ids_per_request);
  for (size_t begin = 0; begin < ids.size(); begin += step) {
    size_t end = std::min(ids.size(), begin + step);
    GP_ASSIGN_OR_RETURN(Answer a,
                        Call("POST", "/v1/blobs/missing", IdList(ids, begin, end).dump(), kJson));
    GP_ASSIGN_OR_RETURN(json j, ParseJson(a.body, "POST /v1/blobs/missing"));
    if (!j.contains("missing") || !j["missing"].is_array()) {
      return Status::Internal("POST /v1/blobs/missing: the answer has no \"missing\" list");
    }
    for (const json& id : j["missing"]) {
      if (!id.is_string() || !IsChunkId(id.get<std::string>())) {
        return Status::Internal("POST /v1/blobs/missing: the answer lists an invalid chunk id");
      }
      missing.push_back(id.get<std::string>());
    }
  }
  return missing;
}

Status HttpChunkStore::Put(const ChunkId& id, std::string_view compressed) {
  return PutMany({{id, std::string(compressed)}});
}

Status HttpChunkStore::UploadBody(std::string body, size_t frame_bytes) {
  GP_RETURN_IF_ERROR(Call("POST", "/v1/blobs/chunks" + UploadQuery(), std::move(body),
                          std::string(kChunkRecordsContentType))
                         .status());
  int64_t sent = bytes_sent_ += static_cast<int64_t>(frame_bytes);
  if (options_.on_upload) options_.on_upload(sent);
  return Status::Ok();
}

Status HttpChunkStore::PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) {
  std::string body;
  size_t frame_bytes = 0;
  for (const auto& [id, frame] : frames) {
    if (!IsChunkId(id)) {
      return Status::InvalidArgument("chunk id must be 64 lowercase hex digits, got \"" +
                                     id.substr(0, 80) + "\"");
    }
    if (frame.empty()) return Status::InvalidArgument("chunk " + id.substr(0, 12) + ": no frame");
    // A full body goes out before it would pass the limit; a lone frame
    // larger than the limit still goes alone (the server judges it).
    if (!body.empty() && body.size() + ChunkRecordBytes(frame.size()) > options_.max_upload_bytes) {
      GP_RETURN_IF_ERROR(UploadBody(std::move(body), frame_bytes));
      body.clear();
      frame_bytes = 0;
    }
    AppendChunkRecord(body, id, frame);
    frame_bytes += frame.size();
  }
  if (!body.empty()) GP_RETURN_IF_ERROR(UploadBody(std::move(body), frame_bytes));
  return Status::Ok();
}

Result<size_t> HttpChunkStore::FetchSome(const std::vector<ChunkId>& ids, size_t begin, size_t end,
                                         const ChunkSink& sink) {
  const std::string what = "POST /v1/blobs/chunks/fetch";
  GP_ASSIGN_OR_RETURN(
      Answer a, Call("POST", "/v1/blobs/chunks/fetch", IdList(ids, begin, end).dump(), kJson));
  if (a.content_type.rfind(kChunkRecordsContentType, 0) != 0) {
    return Status::Internal(what + ": expected " + std::string(kChunkRecordsContentType) +
                            ", got \"" + a.content_type + "\"");
  }
  GP_ASSIGN_OR_RETURN(std::vector<ChunkFrame> records, DecodeChunkRecords(a.body));
  a.body.clear();
  if (records.empty()) return Status::Internal(what + ": the server sent no chunks");
  if (records.size() > end - begin) {
    return Status::Internal(what + ": the server sent more chunks than asked for");
  }
  for (size_t i = 0; i < records.size(); ++i) {
    auto& [id, frame] = records[i];
    if (id != ids[begin + i]) {
      return Status::DataLoss(what + ": " + ChunkRecordName(i, id) +
                              " is not the chunk asked for (" + ids[begin + i].substr(0, 12) + ")");
    }
    GP_ASSIGN_OR_RETURN(std::string bytes, OpenChunk(id, frame));
    GP_RETURN_IF_ERROR(sink({id, std::move(frame), std::move(bytes)}));
  }
  return records.size();
}

Status HttpChunkStore::FetchMany(const std::vector<ChunkId>& ids, const ChunkSink& sink) {
  // The server answers at most ~8 MiB per request, about 500 chunks of
  // 16 KiB: asking for all the rest each time would make it check (and the
  // request carry) the whole remaining list again and again.
  constexpr size_t kFetchWindow = 2048;
  const size_t step = std::clamp<size_t>(options_.max_ids_per_request, 1, kFetchWindow);
  for (size_t begin = 0; begin < ids.size();) {
    size_t end = std::min(ids.size(), begin + step);
    GP_ASSIGN_OR_RETURN(size_t got, FetchSome(ids, begin, end, sink));
    begin += got;
  }
  return Status::Ok();
}

Result<std::string> HttpChunkStore::Get(const ChunkId& id) {
  if (!IsChunkId(id)) {
    return Status::InvalidArgument("chunk id must be 64 lowercase hex digits, got \"" +
                                   id.substr(0, 80) + "\"");
  }
  std::string out;
  GP_RETURN_IF_ERROR(FetchMany({id}, [&out](VerifiedChunk c) {
    out = std::move(c.frame);
    return Status::Ok();
  }));
  return out;
}

Status HttpChunkStore::ReadChunks(const std::vector<ChunkId>& ids, const ChunkSink& sink) {
  // Two fetchers take turns at windows of the list, so that two requests
  // are in flight (the server answers each on a worker thread of its own)
  // and two threads verify what arrives, while the caller's sink writes.
  constexpr size_t kWindow = 256;  // ids: about 4.5 MiB of 16 KiB chunks
  constexpr size_t kFetchers = 2;
  const size_t windows = (ids.size() + kWindow - 1) / kWindow;
  auto window = [&](size_t w) {
    return std::vector<ChunkId>(
        ids.begin() + static_cast<ptrdiff_t>(w * kWindow),
        ids.begin() + static_cast<ptrdiff_t>(std::min(ids.size(), (w + 1) * kWindow)));
  };
  std::vector<std::unique_ptr<ChunkReadAhead>> fetchers;
  for (size_t f = 0; f < std::min(kFetchers, windows); ++f) {
    fetchers.push_back(std::make_unique<ChunkReadAhead>(
        [&, f](const ChunkSink& push) {
          for (size_t w = f; w < windows; w += kFetchers) {
            GP_RETURN_IF_ERROR(FetchMany(window(w), push));
          }
          return Status::Ok();
        },
        size_t{32} << 20));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    GP_ASSIGN_OR_RETURN(VerifiedChunk c, fetchers[(i / kWindow) % kFetchers]->Next());
    GP_RETURN_IF_ERROR(sink(std::move(c)));
  }
  return Status::Ok();
}

Status HttpChunkStore::Remove(const ChunkId& id) {
  return Status::FailedPrecondition("cannot remove chunk " + id.substr(0, 12) +
                                    ": the HTTP blob API has no removal (the server collects "
                                    "garbage itself: POST /v1/admin/gc)");
}

Result<std::vector<ChunkId>> HttpChunkStore::List() {
  return Status::FailedPrecondition("the HTTP blob API does not list chunks");
}

Result<StoredManifest> HttpChunkStore::PutManifest(const std::string& encoded) {
  ChunkId id = ManifestId(encoded);
  const std::string target = "/v1/blobs/manifests/" + id + UploadQuery();
  GP_ASSIGN_OR_RETURN(Answer a, Call("PUT", target, encoded, kJson));
  GP_ASSIGN_OR_RETURN(json j, ParseJson(a.body, "PUT " + target));
  StoredManifest m;
  m.id = id;
  m.bytes = j.value("bytes", int64_t{0});
  m.files = j.value("files", int64_t{0});
  m.chunks = j.value("chunks", int64_t{0});
  m.created = a.status == 201;
  return m;
}

Result<Manifest> HttpChunkStore::GetManifest(const ChunkId& id) {
  if (!IsChunkId(id)) {
    return Status::InvalidArgument("manifest id must be 64 lowercase hex digits, got \"" +
                                   id.substr(0, 80) + "\"");
  }
  GP_ASSIGN_OR_RETURN(Answer a, Call("GET", "/v1/blobs/manifests/" + id, "", kJson));
  if (ManifestId(a.body) != id) {
    return Status::DataLoss("manifest " + id.substr(0, 12) +
                            ": the text the server sent does not match its id");
  }
  auto m = DecodeManifest(a.body);
  if (!m.ok()) return m.status().WithContext("manifest " + id.substr(0, 12));
  return m;
}

}  // namespace gpupool::blob
