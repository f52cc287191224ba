// Fuzz target: the container image documents the agent reads around a pull
// (src/model/oci_image.h): a manifest or index (`skopeo inspect --raw`),
// `skopeo inspect`'s summary, an OCI layout's index.json and the image
// config. Each parser must accept or reject cleanly (no crash, no sanitizer
// report, no overflow); declared sizes come out non-negative; an accepted
// config survives ImageConfigToJson -> ParseImageConfig unchanged.
// Seeds: tests/fuzz/corpus/oci_image.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "model/oci_image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto m = ParseImageManifest(text); m.ok()) {
    FUZZ_CHECK(!m->bytes || *m->bytes >= 0, "negative size " + std::to_string(*m->bytes));
    FUZZ_CHECK(m->layers >= -1, "layers " + std::to_string(m->layers));
    FUZZ_CHECK(!m->is_index || !m->bytes, "an index with a size");
    FUZZ_CHECK(m->is_index || m->layers >= 0, "a manifest without a layer count");
    std::string hex = DigestHex(m->config_digest);
    FUZZ_CHECK(hex.empty() || hex.size() == 64, "digest hex " + hex);
  }
  if (auto s = ParseSkopeoInspect(text); s.ok()) {
    FUZZ_CHECK(!s->bytes || *s->bytes >= 0, "negative size " + std::to_string(*s->bytes));
    FUZZ_CHECK(s->layers >= 0, "layers " + std::to_string(s->layers));
  }
  if (auto d = TaggedManifestDigest(text, "latest"); !d.ok()) {
    FUZZ_CHECK(d.status().code() == StatusCode::kNotFound ||
                   d.status().code() == StatusCode::kInvalidArgument,
               d.status().ToString());
  }
  if (auto c = ParseImageConfig(text); c.ok()) {
    const std::string again =
        nlohmann::json{{"config", ImageConfigToJson(*c)}}.dump();  // throws on bad UTF-8
    auto back = ParseImageConfig(again);
    FUZZ_CHECK(back.ok(), back.status().ToString() + "\n" + again);
    FUZZ_CHECK(*back == *c, "the config changed in the round trip: " + again);
  }
  return 0;
}
