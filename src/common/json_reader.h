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
//
// ParseJsonObject parses untrusted text (API bodies, agent messages, job
// specs, manifests) under JsonLimits, checked while parsing: the parse
// stops at the first value past a limit, before anything deep or large is
// built, so no input can exhaust the stack (nesting) and none can make the
// tree much larger than the text. Thread-safe (pure function).
#pragma once

#include <cstddef>
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
  // Integers above INT64_MAX are an error, not a wrapped negative number.
  int64_t Int(const char* key, bool required = true, int64_t fallback = 0);
  // An integer from `min` to `max`, else an error naming the range (for
  // fields stored in narrower types: no silent truncation).
  int64_t IntIn(const char* key, int64_t min, int64_t max, bool required = true,
                int64_t fallback = 0);
  bool Bool(const char* key, bool required = true, bool fallback = false);
  // Lists and maps of more than `max_items` entries are an error ("at most
  // 256 entries, got 300"), checked before any entry is read.
  std::vector<std::string> StrList(const char* key, bool required = true,
                                   size_t max_items = SIZE_MAX);
  std::map<std::string, std::string> StrMap(const char* key, bool required = true,
                                            size_t max_items = SIZE_MAX);
  std::map<std::string, int64_t> IntMap(const char* key, bool required = true,
                                        size_t max_items = SIZE_MAX);
  // The raw value of `key` (null when absent and optional).
  const nlohmann::json* Raw(const char* key, bool required = true);
  // Calls `fn(element, path)` for each element of the array `key`; `fn`
  // returns a Status whose error stops the walk.
  void Each(const char* key, bool required,
            const std::function<Status(const nlohmann::json&, const std::string&)>& fn);
  void Each(const char* key, bool required, size_t max_items,
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
  // False (and an error) when `v` holds more than `max_items` entries.
  bool CheckCount(const char* key, const nlohmann::json& v, size_t max_items);

  const nlohmann::json& j_;
  std::string path_;
  Status status_;
  std::set<std::string> seen_;
};

// What ParseJsonObject accepts at most. The defaults suit request bodies and
// messages; a caller with other needs passes its own (a manifest has many
// values, all of them short).
struct JsonLimits {
  // Levels of nested arrays and objects; the root object is level 1.
  int max_depth = 32;
  // Bytes of each string and object key, as decoded.
  size_t max_string_bytes = 64 * 1024;
  // Values in the whole document: every object, array and scalar.
  size_t max_values = size_t{1} << 20;
};

// Parses `text` as a JSON object, or InvalidArgument prefixed with `what`:
// the parser's message for malformed JSON ("request body: invalid JSON:
// ...parse error at line 1, column 9..."), or the limit that was passed
// ("request body: JSON nested deeper than 32 levels (at a.b[0])",
// "request body: env.A: JSON string of 70000 bytes, more than 65536").
Result<nlohmann::json> ParseJsonObject(std::string_view text, std::string_view what,
                                       const JsonLimits& limits = {});

}  // namespace gpupool
