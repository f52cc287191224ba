// Fuzz target: what the server decodes from API request bodies with code
// outside src/server. Every input goes through each decoder:
//   POST /v1/jobs                      ParseJsonObject + JobSpecFromJson
//   POST /v1/blobs/chunks/{missing,fetch}  {"chunks": [id, ...]} read as
//                                      blob_api.cpp reads it (JsonReader)
//   POST /v1/jobs/{id}/checkpoints     {"attempt": ..., "manifest": ...}
//   PUT  /v1/blobs/manifests/{id}      DecodeManifest
//   POST /v1/blobs/chunks              DecodeChunkRecords (binary records)
// with the round trips that must hold: a spec through JobSpecToJson, a
// manifest through EncodeManifest, chunk records re-encoded byte for byte
// (the format has one encoding per body). Seeds: tests/fuzz/corpus/api_json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "blob/chunk_records.h"
#include "blob/manifest.h"
#include "common/ids.h"
#include "common/json_reader.h"
#include "fuzz_check.h"
#include "job_spec_round_trip.h"
#include "model/job.h"
#include "model/job_spec.h"

namespace {

using namespace gpupool;

void ChunkList(const nlohmann::json& body) {
  JsonReader r(body, "");
  std::vector<std::string> ids = r.StrList("chunks", true, 100'000);
  if (!r.Finish().ok()) return;
  for (const std::string& id : ids) (void)IsSha256Hex(id);
}

void CheckpointRequest(const nlohmann::json& body) {
  JsonReader r(body, "");
  std::string attempt = r.Str("attempt");
  std::string manifest = r.Str("manifest");
  if (!r.Finish().ok()) return;
  if (auto a = ParseAttemptId(attempt); a.ok()) {
    FUZZ_CHECK(MakeAttemptId(a->first, a->second) == attempt,
               "attempt id " + attempt + " reads as " + MakeAttemptId(a->first, a->second));
  }
  (void)IsSha256Hex(manifest);
}

void Manifest(std::string_view text) {
  auto m = blob::DecodeManifest(text);
  if (!m.ok()) return;
  std::string encoded = blob::EncodeManifest(*m);
  auto back = blob::DecodeManifest(encoded);
  FUZZ_CHECK(back.ok(), back.status().ToString() + "\n" + encoded);
  FUZZ_CHECK(*back == *m, "the manifest changed: " + encoded);
}

void ChunkRecords(std::string_view body) {
  auto records = blob::DecodeChunkRecords(body);
  if (!records.ok()) return;
  std::string encoded = blob::EncodeChunkRecords(*records);
  FUZZ_CHECK(encoded == body, "chunk records re-encode differently");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ChunkRecords(text);
  Manifest(text);
  auto body = ParseJsonObject(text, "request body");
  if (!body.ok()) return 0;
  if (auto spec = JobSpecFromJson(*body); spec.ok()) fuzz::CheckJobSpecRoundTrip(*spec);
  ChunkList(*body);
  CheckpointRequest(*body);
  return 0;
}
