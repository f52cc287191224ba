#include "common/json_reader.h"

#include <limits>
#include <utility>

namespace gpupool {

using nlohmann::json;

namespace {

// An unsigned JSON integer that int64_t cannot hold.
bool PastInt64(const json& v) {
  return v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

std::string TooLarge(const json& v) {
  return "must be an integer of at most " + std::to_string(std::numeric_limits<int64_t>::max()) +
         ", got " + v.dump();
}

}  // namespace

JsonReader::JsonReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) {
    status_ = Status::InvalidArgument((path_.empty() ? "(root)" : path_) + ": must be an object");
  }
}

std::string JsonReader::PathOf(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonReader::Fail(const std::string& key, const std::string& why) {
  if (status_.ok()) status_ = Status::InvalidArgument(PathOf(key) + ": " + why);
}

bool JsonReader::Has(const char* key) const { return j_.is_object() && j_.contains(key); }

const json* JsonReader::Get(const char* key, bool required) {
  if (!status_.ok()) return nullptr;
  seen_.insert(key);
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) {
    if (required) Fail(key, "is required");
    return nullptr;
  }
  return &*it;
}

std::string JsonReader::Str(const char* key, bool required, std::string fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_string()) {
    Fail(key, "must be a string");
    return fallback;
  }
  return v->get<std::string>();
}

int64_t JsonReader::Int(const char* key, bool required, int64_t fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_number_integer()) {
    Fail(key, "must be an integer");
    return fallback;
  }
  if (PastInt64(*v)) {
    Fail(key, TooLarge(*v));
    return fallback;
  }
  return v->get<int64_t>();
}

int64_t JsonReader::IntIn(const char* key, int64_t min, int64_t max, bool required,
                          int64_t fallback) {
  if (!status_.ok()) return fallback;
  int64_t v = Int(key, required, fallback);
  if (!status_.ok()) return fallback;
  if (v < min || v > max) {
    Fail(key, "must be from " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
                  std::to_string(v));
    return fallback;
  }
  return v;
}

bool JsonReader::Bool(const char* key, bool required, bool fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    Fail(key, "must be true or false");
    return fallback;
  }
  return v->get<bool>();
}

bool JsonReader::CheckCount(const char* key, const json& v, size_t max_items) {
  if (v.size() <= max_items) return true;
  Fail(key, "at most " + std::to_string(max_items) + " entries, got " + std::to_string(v.size()));
  return false;
}

std::vector<std::string> JsonReader::StrList(const char* key, bool required, size_t max_items) {
  std::vector<std::string> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_array()) {
    Fail(key, "must be a list of strings");
    return out;
  }
  if (!CheckCount(key, *v, max_items)) return out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      Fail(std::string(key) + "[" + std::to_string(i) + "]", "must be a string");
      return {};
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::map<std::string, std::string> JsonReader::StrMap(const char* key, bool required,
                                                      size_t max_items) {
  std::map<std::string, std::string> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_object()) {
    Fail(key, "must be an object of strings");
    return out;
  }
  if (!CheckCount(key, *v, max_items)) return out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_string()) {
      Fail(std::string(key) + "." + it.key(), "must be a string");
      return {};
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

std::map<std::string, int64_t> JsonReader::IntMap(const char* key, bool required,
                                                  size_t max_items) {
  std::map<std::string, int64_t> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_object()) {
    Fail(key, "must be an object of integers");
    return out;
  }
  if (!CheckCount(key, *v, max_items)) return out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_integer()) {
      Fail(std::string(key) + "." + it.key(), "must be an integer");
      return {};
    }
    if (PastInt64(it.value())) {
      Fail(std::string(key) + "." + it.key(), TooLarge(it.value()));
      return {};
    }
    out[it.key()] = it.value().get<int64_t>();
  }
  return out;
}

const json* JsonReader::Raw(const char* key, bool required) { return Get(key, required); }

void JsonReader::Each(const char* key, bool required,
                      const std::function<Status(const json&, const std::string&)>& fn) {
  Each(key, required, SIZE_MAX, fn);
}

void JsonReader::Each(const char* key, bool required, size_t max_items,
                      const std::function<Status(const json&, const std::string&)>& fn) {
  const json* v = Get(key, required);
  if (!v) return;
  if (!v->is_array()) {
    Fail(key, "must be a list");
    return;
  }
  if (!CheckCount(key, *v, max_items)) return;
  for (size_t i = 0; i < v->size() && status_.ok(); ++i) {
    Status s = fn((*v)[i], PathOf(key) + "[" + std::to_string(i) + "]");
    if (!s.ok()) status_ = s;
  }
}

Status JsonReader::Finish(bool strict) {
  if (status_.ok() && strict && j_.is_object()) {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!seen_.count(it.key())) Fail(it.key(), "unknown field");
    }
  }
  return status_;
}

namespace {

// Builds the tree for json::sax_parse like nlohmann's own DOM builder, and
// enforces JsonLimits on the way: each event is checked before the value is
// added, and the first one past a limit stops the parse. The parse itself
// is iterative and so is the tree's destruction, so the depth limit is what
// keeps later recursive walks (dump, copy, comparison) off a deep tree.
class LimitedTreeBuilder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  LimitedTreeBuilder(std::string_view what, const JsonLimits& limits)
      : what_(what), limits_(limits) {}

  json& root() { return root_; }
  const Status& status() const { return status_; }

  bool null() { return Add(nullptr) != nullptr; }
  bool boolean(bool v) { return Add(v) != nullptr; }
  bool number_integer(number_integer_t v) { return Add(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return Add(v) != nullptr; }
  bool number_float(number_float_t v, const string_t& /*text*/) { return Add(v) != nullptr; }
  bool string(string_t& v) {
    if (v.size() > limits_.max_string_bytes) {
      return Fail(Path(true), "JSON string of " + std::to_string(v.size()) + " bytes, more than " +
                                  std::to_string(limits_.max_string_bytes));
    }
    return Add(std::move(v)) != nullptr;
  }
  bool binary(binary_t& v) { return Add(json::binary(std::move(v))) != nullptr; }

  bool start_object(std::size_t /*elements*/) { return Open(json::object()); }
  bool key(string_t& k) {
    if (k.size() > limits_.max_string_bytes) {
      return Fail(Path(false), "JSON object key of " + std::to_string(k.size()) +
                                   " bytes, more than " + std::to_string(limits_.max_string_bytes));
    }
    Frame& top = stack_.back();
    top.key = std::move(k);
    top.slot = &(*top.node)[top.key];
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t /*elements*/) { return Open(json::array()); }
  bool end_array() { return Close(); }

  template <typename Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const Exception& e) {
    status_ = Status::InvalidArgument(std::string(what_) + ": invalid JSON: " + e.what());
    return false;
  }

 private:
  // An open array or object, and where its next value goes.
  struct Frame {
    json* node = nullptr;
    json* slot = nullptr;  // objects: the value of the last key
    size_t index = 0;      // arrays: the number of elements so far
    std::string key;       // objects: the last key
  };

  // Adds a value where the parse is; null after a limit stopped it.
  json* Add(json&& v) {
    if (++values_ > limits_.max_values) {
      Fail("", "more than " + std::to_string(limits_.max_values) + " JSON values");
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.node->is_array()) {
      ++top.index;
      top.node->push_back(std::move(v));
      return &top.node->back();
    }
    *top.slot = std::move(v);
    return top.slot;
  }

  bool Open(json&& container) {
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      return Fail("", "JSON nested deeper than " + std::to_string(limits_.max_depth) +
                          " levels (at " + Path(true) + ")");
    }
    json* node = Add(std::move(container));
    if (node == nullptr) return false;
    stack_.emplace_back();
    stack_.back().node = node;
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  bool Fail(const std::string& path, const std::string& why) {
    status_ = Status::InvalidArgument(std::string(what_) + ": " +
                                      (path.empty() ? "" : path + ": ") + why);
    return false;
  }

  // The path of the value about to be added ("env.A", "gpus[1]"), or with
  // `with_slot` false of the innermost open container; "(root)" for the
  // top. At most 200 bytes are kept: a deep path of long keys is cut.
  std::string Path(bool with_slot) const {
    constexpr size_t kMaxShown = 200;
    std::string path;
    size_t frames = with_slot ? stack_.size() : (stack_.empty() ? 0 : stack_.size() - 1);
    for (size_t i = 0; i < frames && path.size() <= kMaxShown; ++i) {
      const Frame& f = stack_[i];
      if (f.node->is_array()) {
        // An open child counts already; the value about to be added does not.
        size_t index = i + 1 == stack_.size() ? f.index : f.index - 1;
        path += "[" + std::to_string(index) + "]";
      } else {
        if (!path.empty()) path += ".";
        path += f.key;
      }
    }
    if (path.size() > kMaxShown) path = path.substr(0, kMaxShown) + "...";
    return path.empty() ? "(root)" : path;
  }

  std::string_view what_;
  const JsonLimits& limits_;
  json root_;
  std::vector<Frame> stack_;
  size_t values_ = 0;
  Status status_;
};

}  // namespace

Result<json> ParseJsonObject(std::string_view text, std::string_view what,
                             const JsonLimits& limits) {
  LimitedTreeBuilder builder(what, limits);
  if (!json::sax_parse(text, &builder)) {
    if (!builder.status().ok()) return builder.status();
    return Status::InvalidArgument(std::string(what) + ": invalid JSON");
  }
  if (!builder.root().is_object()) {
    return Status::InvalidArgument(std::string(what) + ": must be a JSON object");
  }
  return std::move(builder.root());
}

}  // namespace gpupool
