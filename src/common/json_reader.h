// JsonReader: strict, non-throwing extraction of fields from a JSON object,
// keeping the first error with the field's path ("body.gpus[1].uuid: must be
// a string"). Used by decoders that must reject malformed input clearly.
//
//   JsonReader r(j, "body");
//   std::string name = r.Str("node_name");
//   int64_t n = r.Int("cpu_milli", /*required=*/false);
//   GP_RETURN_IF_ERROR(r.Finish());   // also rejects unknown fields
//
// Not thread-safe; one reader per decode.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool {

class JsonReader {
 public:
  // `path` names `j` in error messages ("" for the root).
  JsonReader(const nlohmann::json& j, std::string path);

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  bool Has(const char* key) const;
  std::string Str(const char* key, bool required = true, std::string fallback = "");
  int64_t Int(const char* key, bool required = true, int64_t fallback = 0);
  bool Bool(const char* key, bool required = true, bool fallback = false);
  std::vector<std::string> StrList(const char* key, bool required = true);
  std::map<std::string, std::string> StrMap(const char* key, bool required = true);
  std::map<std::string, int64_t> IntMap(const char* key, bool required = true);
  // The raw value of `key` (null when absent and optional).
  const nlohmann::json* Raw(const char* key, bool required = true);
  // Calls `fn(element, path)` for each element of the array `key`; `fn`
  // returns a Status whose error stops the walk.
  void Each(const char* key, bool required,
            const std::function<Status(const nlohmann::json&, const std::string&)>& fn);

  // The path of a field: "body.gpus".
  std::string PathOf(const std::string& key) const;
  // Records an error for `key` unless one is already recorded.
  void Fail(const std::string& key, const std::string& why);

  // OK, or the first error; with `strict`, also an error for any field that
  // was never read.
  Status Finish(bool strict = true);

 private:
  const nlohmann::json* Get(const char* key, bool required);

  const nlohmann::json& j_;
  std::string path_;
  Status status_;
  std::set<std::string> seen_;
};

// Parses `text` as a JSON object, or InvalidArgument with the parser's message.
Result<nlohmann::json> ParseJsonObject(std::string_view text, std::string_view what);

}  // namespace gpupool
