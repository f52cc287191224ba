// See yaml.h. yaml-cpp builds the node tree; this file resolves scalars per
// the YAML 1.2 core schema (yaml-cpp leaves them as text) and enforces the
// limits.
#include "model/yaml.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

namespace gpupool {
namespace {

using nlohmann::json;

constexpr size_t kMaxYamlNodes = 100'000;  // after alias expansion
constexpr int kMaxYamlDepth = 64;

// YAML to JSON.

bool IsDigits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = base == 8    ? (c >= '0' && c <= '7')
              : base == 10 ? (c >= '0' && c <= '9')
                           : std::isxdigit(static_cast<unsigned char>(c)) != 0;
    if (!ok) return false;
  }
  return true;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t whole = digits();
  size_t frac = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    frac = digits();
  }
  if (whole == 0 && frac == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// Resolves a plain scalar per the YAML 1.2 core schema: null, bool, int,
// float, else string.
Result<json> ResolvePlainScalar(const std::string& s, std::string_view path) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return json(nullptr);
  if (s == "true" || s == "True" || s == "TRUE") return json(true);
  if (s == "false" || s == "False" || s == "FALSE") return json(false);

  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  int base = 0;
  if (IsDigits(body, 10)) {
    base = 10;
  } else if (s.starts_with("0o") && IsDigits(s.substr(2), 8)) {
    base = 8;
    body = std::string_view(s).substr(2);
  } else if (s.starts_with("0x") && IsDigits(s.substr(2), 16)) {
    base = 16;
    body = std::string_view(s).substr(2);
  }
  if (base != 0) {
    uint64_t u = 0;
    auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), u, base);
    if (ec == std::errc() && ptr == body.data() + body.size()) {
      constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (!negative) return u <= kMax ? json(static_cast<int64_t>(u)) : json(u);
      if (u <= kMax + 1) return json(static_cast<int64_t>(0 - u));
    }
    if (base != 10) return FieldError(path, "integer " + QuoteForError(s) + " out of range");
    // Decimal integers too large for 64 bits become floats, so range checks
    // report them instead of a type error.
  }

  if (IsCoreFloat(s)) {
    std::string_view f = s;
    if (f[0] == '+') f.remove_prefix(1);
    double d = 0;
    auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), d);
    if (ec == std::errc::result_out_of_range) {
      // Overflow becomes infinity (rejected by range checks), underflow zero.
      bool tiny = f.find("e-") != std::string_view::npos || f.find("E-") != std::string_view::npos;
      d = tiny ? 0.0 : negative ? -HUGE_VAL : HUGE_VAL;
    } else if (ec != std::errc() || ptr != f.data() + f.size()) {
      return json(s);
    }
    return json(d);
  }
  std::string_view abs = s;
  if (!abs.empty() && (abs[0] == '-' || abs[0] == '+')) abs.remove_prefix(1);
  if (abs == ".inf" || abs == ".Inf" || abs == ".INF") {
    return json(negative ? -std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::infinity());
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    return json(std::numeric_limits<double>::quiet_NaN());
  }
  return json(s);
}

class YamlToJson {
 public:
  YamlToJson(const std::vector<std::string>& text_keys, YamlLines* lines)
      : text_keys_(text_keys), lines_(lines) {}

  // `values_as_text`: the scalar values of this mapping are kept as written
  // (used for env, whose values are text whatever they look like).
  Result<json> Convert(const YAML::Node& node, const std::string& path, int depth,
                       bool values_as_text) {
    if (++nodes_ > kMaxYamlNodes) return FieldError("", "spec too large (too many values)");
    if (depth > kMaxYamlDepth) return FieldError(path, "nested too deeply");
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return json(nullptr);
      case YAML::NodeType::Scalar:
        return ConvertScalar(node, path);
      case YAML::NodeType::Sequence: {
        json arr = json::array();
        size_t i = 0;
        for (const auto& child : node) {
          std::string child_path = path + "[" + std::to_string(i) + "]";
          Record(child_path, child.Mark());
          GP_ASSIGN_OR_RETURN(json v, Convert(child, child_path, depth + 1, false));
          arr.push_back(std::move(v));
          ++i;
        }
        return arr;
      }
      case YAML::NodeType::Map: {
        json obj = json::object();
        for (const auto& kv : node) {
          if (!kv.first.IsScalar()) {
            return FieldError(path, "mapping keys must be plain text, not lists or mappings");
          }
          const std::string& key = kv.first.Scalar();
          std::string child_path = path.empty() ? key : path + "." + key;
          if (obj.contains(key)) return FieldError(child_path, "duplicate key");
          Record(child_path, kv.first.Mark());
          json value;
          if (values_as_text && kv.second.IsScalar()) {
            value = kv.second.Scalar();
          } else {
            bool text = depth == 0 &&
                        std::find(text_keys_.begin(), text_keys_.end(), key) != text_keys_.end();
            GP_ASSIGN_OR_RETURN(value, Convert(kv.second, child_path, depth + 1, text));
          }
          obj[key] = std::move(value);
        }
        return obj;
      }
    }
    return FieldError(path, "unsupported YAML node");
  }

 private:
  void Record(const std::string& path, const YAML::Mark& mark) {
    if (lines_ != nullptr && mark.line >= 0) lines_->emplace(path, mark.line + 1);
  }

  Result<json> ConvertScalar(const YAML::Node& node, const std::string& path) {
    const std::string& tag = node.Tag();
    const std::string& s = node.Scalar();
    constexpr std::string_view kCore = "tag:yaml.org,2002:";
    if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(s);
    if (tag == "?" || tag.empty()) return ResolvePlainScalar(s, path);
    if (tag.starts_with(kCore)) {
      std::string_view type = std::string_view(tag).substr(kCore.size());
      GP_ASSIGN_OR_RETURN(json v, ResolvePlainScalar(s, path));
      bool match = (type == "int" && v.is_number_integer()) || (type == "float" && v.is_number()) ||
                   (type == "bool" && v.is_boolean()) || (type == "null" && v.is_null());
      if (!match)
        return FieldError(path, QuoteForError(s) + " is not a valid !!" + std::string(type));
      if (type == "float") return json(v.get<double>());
      return v;
    }
    return FieldError(path, "unsupported tag " + QuoteForError(tag));
  }

  const std::vector<std::string>& text_keys_;
  YamlLines* lines_;  // may be null
  size_t nodes_ = 0;
};

// Counts the documents of a YAML stream without building them. yaml-cpp 0.7's
// LoadAll loops forever, allocating, on a stray top-level token such as ","
// (jbeder/yaml-cpp#1040, fixed upstream by #1319): every pass yields another
// empty document. Counting stops after a few, and the first event's position
// says where the junk is.
class DocumentCounter final : public YAML::EventHandler {
 public:
  struct Summary {
    int documents = 0;  // capped at kMaxCounted
    bool first_only_null = false;
    YAML::Mark first_mark;  // of the first document's first node
  };
  static constexpr int kMaxCounted = 3;

  static Summary Count(const std::string& text) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (counter.summary_.documents < kMaxCounted && parser.HandleNextDocument(counter)) {
      ++counter.summary_.documents;
    }
    return counter.summary_;
  }

  void OnDocumentStart(const YAML::Mark&) override { events_ = 0; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Event(mark, true); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Event(mark, false); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Event(mark, false);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Event(mark, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Event(mark, false);
  }
  void OnMapEnd() override {}

 private:
  void Event(const YAML::Mark& mark, bool null) {
    if (summary_.documents == 0 && events_++ == 0) {
      summary_.first_mark = mark;
      summary_.first_only_null = null;
    }
  }

  Summary summary_;
  int events_ = 0;
};

std::string Position(const YAML::Mark& mark) {
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

}  // namespace

size_t InvalidUtf8Offset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80           ? 1
                 : (b >> 5) == 0x6  ? 2
                 : (b >> 4) == 0xE  ? 3
                 : (b >> 3) == 0x1E ? 4
                                    : 0;
    if (len == 0 || i + len > s.size()) return i;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

Result<json> ParseYamlDocument(std::string_view text, const YamlOptions& options,
                               YamlLines* lines) {
  if (text.size() > options.max_bytes) {
    return FieldError("", options.what + " too large: " + std::to_string(text.size()) +
                              " bytes, at most " + std::to_string(options.max_bytes));
  }
  if (size_t bad = InvalidUtf8Offset(text); bad != std::string_view::npos) {
    // yaml-cpp would pass bad bytes through (or stop at a NUL byte).
    size_t line_start = text.rfind('\n', bad == 0 ? 0 : bad - 1);
    line_start = line_start == std::string_view::npos || bad == 0 ? 0 : line_start + 1;
    size_t line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(bad), '\n');
    return Status::InvalidArgument("line " + std::to_string(line) + ", column " +
                                   std::to_string(bad - line_start + 1) + ": not valid UTF-8");
  }
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return FieldError("", options.what + " contains a NUL byte at offset " + std::to_string(nul));
  }
  const std::string str(text);
  json j;
  try {
    DocumentCounter::Summary docs = DocumentCounter::Count(str);
    if (docs.documents > 1) {
      // An empty first document stops at the next "---"; anything else
      // there is junk the parser skipped.
      const YAML::Mark& at = docs.first_mark;
      if (docs.first_only_null && !at.is_null() && at.pos >= 0 &&
          static_cast<size_t>(at.pos) < str.size() &&
          str.compare(static_cast<size_t>(at.pos), 3, "---") != 0 &&
          str.compare(static_cast<size_t>(at.pos), 3, "...") != 0) {
        return Status::InvalidArgument(Position(at) + ": unexpected content; expected a mapping");
      }
      return FieldError("", "expected one YAML document, got " +
                                std::string(docs.documents >= DocumentCounter::kMaxCounted
                                                ? "more than 2"
                                                : std::to_string(docs.documents)));
    }
    YAML::Node root = YAML::Load(str);
    if (docs.documents == 0 || root.IsNull()) {
      return FieldError("", options.empty_message);
    }
    YamlToJson converter(options.text_valued_keys, lines);
    GP_ASSIGN_OR_RETURN(j, converter.Convert(root, "", 0, false));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return Status::InvalidArgument("invalid YAML: " + e.msg);
    return Status::InvalidArgument(Position(e.mark) + ": " + e.msg);
  }
  return j;
}

Status WithLine(const Status& s, const YamlLines& lines) {
  if (s.code() != StatusCode::kInvalidArgument) return s;
  const std::string& message = s.message();
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return s;
  const std::string path = message.substr(0, colon);
  if (path.find(" (line ") != std::string::npos) return s;
  // The path, then its prefixes: "a.b[2].c", "a.b[2]", "a.b", "a".
  for (std::string p = path; !p.empty();) {
    if (auto it = lines.find(p); it != lines.end()) {
      return {s.code(),
              path + " (line " + std::to_string(it->second) + ")" + message.substr(colon)};
    }
    const size_t cut = p.ends_with(']') ? p.rfind('[') : p.rfind('.');
    p.resize(cut == std::string::npos ? 0 : cut);
  }
  return s;
}

Status FieldError(std::string_view path, std::string_view message) {
  std::string m(path.empty() ? "(root)" : path);
  m += ": ";
  m += message;
  return Status::InvalidArgument(std::move(m));
}

const nlohmann::json* FieldOrNull(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Result<std::string> NonEmptyString(const nlohmann::json& v, const std::string& path) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
    return FieldError(path, "must be a non-empty string, got " + DescribeValue(v));
  }
  return v.get<std::string>();
}

Result<std::vector<std::string>> StringList(const nlohmann::json& v, const std::string& path,
                                            size_t max_items) {
  if (!v.is_array()) return FieldError(path, "must be a list, got " + DescribeValue(v));
  if (v.size() > max_items) {
    return FieldError(path, "at most " + std::to_string(max_items) + " items");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].is_number_unsigned() || v[i].is_number_integer()) {
      out.push_back(v[i].dump());
      continue;
    }
    GP_ASSIGN_OR_RETURN(std::string s, NonEmptyString(v[i], path + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(s));
  }
  return out;
}

Status CheckKnownFields(const nlohmann::json& obj, std::string_view prefix,
                        std::span<const char* const> known) {
  for (const auto& [key, value] : obj.items()) {
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (found) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    return FieldError(std::string(prefix) + key, "unknown field (known: " + list + ")");
  }
  return Status::Ok();
}

std::string QuoteForError(std::string_view s) {
  constexpr size_t kMaxShown = 64;
  std::string out = "\"";
  out += s.size() > kMaxShown ? std::string(s.substr(0, kMaxShown)) + "..." : std::string(s);
  out += "\"";
  return out;
}

std::string DescribeValue(const nlohmann::json& j) {
  if (j.is_object()) return "a mapping";
  if (j.is_array()) return "a list";
  if (j.is_null()) return "null";
  if (j.is_string()) return QuoteForError(j.get_ref<const std::string&>());
  if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    const double d = j.get<double>();
    return std::isnan(d) ? "nan" : d < 0 ? "-inf" : "inf";
  }
  return j.dump();
}

}  // namespace gpupool
