// The JSON documents of a container image that the agent reads around a
// pull: the manifest `skopeo inspect --raw` prints (OCI or Docker schema 2,
// schema 1's layer list, or an index of per-platform manifests), the
// summary `skopeo inspect` prints, the index.json of an OCI layout, and the
// image config blob.
//
// They come from anyone's registry or archive, so parsing is strict and
// bounded: the text is at most kMaxImageJsonBytes and is parsed under
// JsonLimits (no input can exhaust the stack or memory); every input gives
// a value or InvalidArgument naming the field ("layers[2].size: must be a
// non-negative integer"), never a crash; declared sizes are summed with
// overflow checks. Pure functions, thread-safe. Fuzzed by
// tests/fuzz/fuzz_oci_image.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool {

// The largest image document read (registries cap manifests at 4 MiB; a
// config with a long history is well under this).
inline constexpr size_t kMaxImageJsonBytes = 8 << 20;

// From the image's OCI config (its "config" object).
struct ImageConfig {
  std::vector<std::string> env;  // "KEY=VALUE"
  std::string working_dir;       // "" = not set
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string user;  // "" = not set
  friend bool operator==(const ImageConfig&, const ImageConfig&) = default;
};

// What a manifest declares about the image it describes.
struct ImageManifestInfo {
  // An index (manifest list): it names per-platform manifests and has no
  // layers of its own; `layers` and `bytes` are then unknown.
  bool is_index = false;
  int layers = -1;  // -1: unknown
  // Compressed bytes of the config and the layers, as declared; nullopt
  // when the manifest does not say (schema 1, an index).
  std::optional<int64_t> bytes;
  std::string config_digest;  // "sha256:<hex>"; "" when the manifest has none
};

// `skopeo inspect --raw` output.
Result<ImageManifestInfo> ParseImageManifest(std::string_view text);

// `skopeo inspect` (without --raw) output: "Layers" and, where skopeo
// gives it, "LayersData" with each layer's size. Used for an index, where
// this is the manifest skopeo would copy for this platform.
Result<ImageManifestInfo> ParseSkopeoInspect(std::string_view text);

// An OCI layout's index.json: the digest of the manifest whose
// "org.opencontainers.image.ref.name" annotation is `tag` (the last one if
// several are). NotFound when no manifest has it.
Result<std::string> TaggedManifestDigest(std::string_view index_text, std::string_view tag);

// The image config blob: its "config" object (absent or null: an empty
// config). Errors name the field ("config.Env[1]: must be a string").
Result<ImageConfig> ParseImageConfig(std::string_view text);

// The config as the image cache stores it ({"Env": [...], ...}) and back.
nlohmann::json ImageConfigToJson(const ImageConfig& c);
Result<ImageConfig> ImageConfigFromJson(const nlohmann::json& config, std::string_view what);

// "sha256:<64 lowercase hex>" -> the hex; "" for any other form.
std::string DigestHex(std::string_view digest);

}  // namespace gpupool
