#include "model/oci_image.h"

#include <algorithm>
#include <limits>

#include "common/json_reader.h"

namespace gpupool {
namespace {

using nlohmann::json;

// Image documents are shallow but may hold long strings (a history entry's
// command line, a long Env value).
JsonLimits ImageJsonLimits() {
  JsonLimits l;
  l.max_depth = 32;
  l.max_string_bytes = 1 << 20;
  l.max_values = size_t{1} << 20;
  return l;
}

Result<json> ParseImageJson(std::string_view text, std::string_view what) {
  if (text.size() > kMaxImageJsonBytes) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(text.size()) +
                                   " bytes, more than " + std::to_string(kMaxImageJsonBytes));
  }
  return ParseJsonObject(text, what, ImageJsonLimits());
}

Status FieldError(const std::string& field, const std::string& why) {
  return Status::InvalidArgument(field + ": " + why);
}

// A declared size: a non-negative integer that fits in int64.
Result<int64_t> SizeOf(const json& v, const std::string& field) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(field, "is too large");
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) return FieldError(field, "must be a non-negative integer");
    return i;
  }
  return FieldError(field, "must be a non-negative integer");
}

Status AddSize(int64_t& total, int64_t size, const std::string& field) {
  if (total > std::numeric_limits<int64_t>::max() - size) {
    return FieldError(field, "the sizes add up past what can be counted");
  }
  total += size;
  return Status::Ok();
}

// The list `key` of `obj` (absent or null: none), each element an object.
Result<const json*> ObjectList(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  if (!it->is_array()) return FieldError(where + key, "must be a list");
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_object()) {
      return FieldError(where + key + "[" + std::to_string(i) + "]", "must be an object");
    }
  }
  return &*it;
}

int CountOf(const json& list) {
  return static_cast<int>(std::min<size_t>(list.size(), std::numeric_limits<int>::max()));
}

Status ReadStringList(const json& obj, const char* key, const std::string& where,
                      std::vector<std::string>& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return FieldError(where + key, "must be a list");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_string()) {
      return FieldError(where + key + "[" + std::to_string(i) + "]", "must be a string");
    }
    out.push_back(v.get<std::string>());
  }
  return Status::Ok();
}

Status ReadString(const json& obj, const char* key, const std::string& where, std::string& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return FieldError(where + key, "must be a string");
  out = it->get<std::string>();
  return Status::Ok();
}

}  // namespace

std::string DigestHex(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (!digest.starts_with(kPrefix)) return "";
  std::string_view hex = digest.substr(kPrefix.size());
  bool ok = hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
              return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            });
  return ok ? std::string(hex) : "";
}

Result<ImageManifestInfo> ParseImageManifest(std::string_view text) {
  GP_ASSIGN_OR_RETURN(json j, ParseImageJson(text, "image manifest"));
  ImageManifestInfo info;
  GP_ASSIGN_OR_RETURN(const json* layers, ObjectList(j, "layers", ""));
  if (layers != nullptr) {
    info.layers = CountOf(*layers);
    int64_t total = 0;
    for (size_t i = 0; i < layers->size(); ++i) {
      const std::string field = "layers[" + std::to_string(i) + "].size";
      const json& layer = (*layers)[i];
      if (!layer.contains("size")) return FieldError(field, "is missing");
      GP_ASSIGN_OR_RETURN(int64_t size, SizeOf(layer["size"], field));
      GP_RETURN_IF_ERROR(AddSize(total, size, field));
    }
    auto config = j.find("config");
    if (config != j.end() && !config->is_null()) {
      if (!config->is_object()) return FieldError("config", "must be an object");
      if (config->contains("size")) {
        GP_ASSIGN_OR_RETURN(int64_t size, SizeOf((*config)["size"], "config.size"));
        GP_RETURN_IF_ERROR(AddSize(total, size, "config.size"));
      }
      std::string digest;
      GP_RETURN_IF_ERROR(ReadString(*config, "digest", "config.", digest));
      info.config_digest = digest;
    }
    info.bytes = total;
    return info;
  }
  GP_ASSIGN_OR_RETURN(const json* fs_layers, ObjectList(j, "fsLayers", ""));
  if (fs_layers != nullptr) {  // schema 1: no sizes
    info.layers = CountOf(*fs_layers);
    return info;
  }
  GP_ASSIGN_OR_RETURN(const json* manifests, ObjectList(j, "manifests", ""));
  if (manifests != nullptr) {
    info.is_index = true;
    return info;
  }
  return Status::InvalidArgument(
      "image manifest: neither a manifest (layers) nor an index "
      "(manifests)");
}

Result<ImageManifestInfo> ParseSkopeoInspect(std::string_view text) {
  GP_ASSIGN_OR_RETURN(json j, ParseImageJson(text, "skopeo inspect"));
  ImageManifestInfo info;
  std::vector<std::string> layers;
  GP_RETURN_IF_ERROR(ReadStringList(j, "Layers", "", layers));
  info.layers = static_cast<int>(std::min<size_t>(layers.size(), std::numeric_limits<int>::max()));
  GP_ASSIGN_OR_RETURN(const json* data, ObjectList(j, "LayersData", ""));
  if (data != nullptr) {
    int64_t total = 0;
    for (size_t i = 0; i < data->size(); ++i) {
      const std::string field = "LayersData[" + std::to_string(i) + "].Size";
      const json& layer = (*data)[i];
      if (!layer.contains("Size")) return FieldError(field, "is missing");
      GP_ASSIGN_OR_RETURN(int64_t size, SizeOf(layer["Size"], field));
      GP_RETURN_IF_ERROR(AddSize(total, size, field));
    }
    info.bytes = total;
    info.layers = std::max(info.layers, CountOf(*data));
  }
  return info;
}

Result<std::string> TaggedManifestDigest(std::string_view index_text, std::string_view tag) {
  GP_ASSIGN_OR_RETURN(json j, ParseImageJson(index_text, "index.json"));
  GP_ASSIGN_OR_RETURN(const json* manifests, ObjectList(j, "manifests", ""));
  std::optional<std::string> found;
  if (manifests != nullptr) {
    for (size_t i = 0; i < manifests->size(); ++i) {
      const json& m = (*manifests)[i];
      auto annotations = m.find("annotations");
      if (annotations == m.end() || !annotations->is_object()) continue;
      auto name = annotations->find("org.opencontainers.image.ref.name");
      if (name == annotations->end() || !name->is_string() || name->get<std::string>() != tag) {
        continue;
      }
      std::string digest;
      GP_RETURN_IF_ERROR(ReadString(m, "digest", "manifests[" + std::to_string(i) + "].", digest));
      found = digest;
    }
  }
  if (!found) return Status::NotFound("no manifest tagged \"" + std::string(tag) + "\"");
  return *found;
}

Result<ImageConfig> ImageConfigFromJson(const json& config, std::string_view what) {
  ImageConfig c;
  if (config.is_null()) return c;
  const std::string where = std::string(what) + ".";
  if (!config.is_object()) return FieldError(std::string(what), "must be an object");
  GP_RETURN_IF_ERROR(ReadStringList(config, "Env", where, c.env));
  GP_RETURN_IF_ERROR(ReadString(config, "WorkingDir", where, c.working_dir));
  GP_RETURN_IF_ERROR(ReadStringList(config, "Entrypoint", where, c.entrypoint));
  GP_RETURN_IF_ERROR(ReadStringList(config, "Cmd", where, c.cmd));
  GP_RETURN_IF_ERROR(ReadString(config, "User", where, c.user));
  return c;
}

Result<ImageConfig> ParseImageConfig(std::string_view text) {
  GP_ASSIGN_OR_RETURN(json j, ParseImageJson(text, "image config"));
  auto it = j.find("config");
  return ImageConfigFromJson(it == j.end() ? json() : *it, "config");
}

json ImageConfigToJson(const ImageConfig& c) {
  return json{{"Env", c.env},
              {"WorkingDir", c.working_dir},
              {"Entrypoint", c.entrypoint},
              {"Cmd", c.cmd},
              {"User", c.user}};
}

}  // namespace gpupool
