// YAML text to a JSON tree, strictly: the one reader behind job specs
// (model/job_spec.h) and configuration files such as the scheduler's.
//
// Plain scalars are resolved per the YAML 1.2 core schema (null, bool, int,
// float, else string); quoted scalars stay strings; duplicate keys, more than
// one document, non-scalar keys, alias bombs, deep nesting, invalid UTF-8 and
// NUL bytes are rejected with InvalidArgument naming the line and column or
// the field path. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool {

struct YamlOptions {
  std::string what = "document";  // names the input in messages ("spec too large")
  size_t max_bytes = 1 << 20;
  // Message for an empty document.
  std::string empty_message = "empty document; expected a mapping";
  // Top-level keys whose mapping's scalar values are kept as written, not
  // resolved (a job's env: "007" and 007 are both the text 007).
  std::vector<std::string> text_valued_keys;
};

// Where each field of a document starts: field path -> 1-based line. Paths
// are written as readers write them in FieldError: keys joined with "." and
// list indexes as "[i]" ("resources.gpus", "weekly[1].from"); keys are taken
// as they are, so a key with a dot in it ("env.A.B", "node_labels.a.io/x")
// reads like nesting. A mapping entry's line is its key's; a list element's
// is the line where the element begins. The root is not listed.
using YamlLines = std::map<std::string, int>;

// Parses one YAML document (JSON text works too: YAML is a superset). With
// `lines`, also fills it with the line of every field (when two paths read
// alike, the first one in the document wins).
Result<nlohmann::json> ParseYamlDocument(std::string_view text, const YamlOptions& options,
                                         YamlLines* lines = nullptr);

// Adds the line to a reader's field error: for an InvalidArgument
// "path: rest" whose path, or else its longest prefix (dropping trailing
// ".key" and "[i]" parts), is in `lines`, returns the same code with
// "path (line N): rest", N being that path's or prefix's line. A missing
// field is thus reported at the line of the mapping that lacks it. Any other
// status (other codes, syntax errors, paths without a line, messages that
// already carry one) is returned unchanged.
Status WithLine(const Status& s, const YamlLines& lines);

// For readers of parsed documents, so that every spec and config error reads
// alike. FieldError: InvalidArgument "path: message" ("(root)" for the top).
// QuoteForError: `s` in double quotes, cut after 64 bytes with "...".
// DescribeValue: a value as shown after "got": "a mapping", "a list", "null",
// a quoted string, or the JSON of other scalars ("nan", "inf" for those).
Status FieldError(std::string_view path, std::string_view message);
// Readers of config fields (agent config, provider policy):
// FieldOrNull: the value of `key` in `obj`, or nullptr when absent or null
// (an empty YAML value means "not given"). NonEmptyString: a string that is
// not empty, else FieldError. StringList: a list of them (integers are
// taken as their decimal text, for GPU indexes), at most `max_items`.
const nlohmann::json* FieldOrNull(const nlohmann::json& obj, const char* key);
Result<std::string> NonEmptyString(const nlohmann::json& v, const std::string& path);
Result<std::vector<std::string>> StringList(const nlohmann::json& v, const std::string& path,
                                            size_t max_items);
// FieldError "PREFIXkey: unknown field (known: a, b, c)" for the first key
// of the mapping `obj` that is not in `known`.
Status CheckKnownFields(const nlohmann::json& obj, std::string_view prefix,
                        std::span<const char* const> known);
std::string QuoteForError(std::string_view s);
std::string DescribeValue(const nlohmann::json& j);

// The offset of the first byte of `s` that is not part of well-formed UTF-8
// (no overlongs, surrogates or code points past U+10FFFF), or npos.
size_t InvalidUtf8Offset(std::string_view s);

}  // namespace gpupool
