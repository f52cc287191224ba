// Fuzz target: the chunk manifest (src/blob/manifest.h). DecodeManifest must
// reject or accept cleanly; what it accepts must pass ValidateManifest,
// re-encode to a manifest that decodes to the same entries, keep its id
// stable, and sum its sizes without overflow. Seeds: tests/fuzz/corpus/manifest.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "blob/chunk_store.h"
#include "blob/manifest.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  using namespace gpupool::blob;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = DecodeManifest(text);
  if (!m.ok()) return 0;
  Status valid = ValidateManifest(*m);
  FUZZ_CHECK(valid.ok(), "a decoded manifest does not validate: " + valid.ToString());
  std::string encoded = EncodeManifest(*m);
  auto back = DecodeManifest(encoded);
  FUZZ_CHECK(back.ok(), back.status().ToString() + "\n" + encoded);
  FUZZ_CHECK(*back == *m, "the manifest changed in the round trip: " + encoded);
  FUZZ_CHECK(EncodeManifest(*back) == encoded, "the encoding is not stable: " + encoded);
  FUZZ_CHECK(IsChunkId(ManifestId(encoded)), "ManifestId is not a chunk id");
  FUZZ_CHECK(m->TotalBytes() >= 0, "negative total " + std::to_string(m->TotalBytes()));
  for (const ChunkId& id : m->ChunkIds()) FUZZ_CHECK(IsChunkId(id), "bad chunk id " + id);
  return 0;
}
