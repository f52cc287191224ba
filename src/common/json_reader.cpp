#include "common/json_reader.h"

namespace gpupool {

using nlohmann::json;

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
  return v->get<int64_t>();
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

std::vector<std::string> JsonReader::StrList(const char* key, bool required) {
  std::vector<std::string> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_array()) {
    Fail(key, "must be a list of strings");
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      Fail(std::string(key) + "[" + std::to_string(i) + "]", "must be a string");
      return {};
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::map<std::string, std::string> JsonReader::StrMap(const char* key, bool required) {
  std::map<std::string, std::string> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_object()) {
    Fail(key, "must be an object of strings");
    return out;
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_string()) {
      Fail(std::string(key) + "." + it.key(), "must be a string");
      return {};
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

std::map<std::string, int64_t> JsonReader::IntMap(const char* key, bool required) {
  std::map<std::string, int64_t> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_object()) {
    Fail(key, "must be an object of integers");
    return out;
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_integer()) {
      Fail(std::string(key) + "." + it.key(), "must be an integer");
      return {};
    }
    out[it.key()] = it.value().get<int64_t>();
  }
  return out;
}

const json* JsonReader::Raw(const char* key, bool required) { return Get(key, required); }

void JsonReader::Each(const char* key, bool required,
                      const std::function<Status(const json&, const std::string&)>& fn) {
  const json* v = Get(key, required);
  if (!v) return;
  if (!v->is_array()) {
    Fail(key, "must be a list");
    return;
  }
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

Result<json> ParseJsonObject(std::string_view text, std::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions only to get the parser's position message.
    try {
      [[maybe_unused]] json again = json::parse(text);
    } catch (const json::parse_error& e) {
      return Status::InvalidArgument(std::string(what) + ": invalid JSON: " + e.what());
    }
    return Status::InvalidArgument(std::string(what) + ": invalid JSON");
  }
  if (!j.is_object()) return Status::InvalidArgument(std::string(what) + ": must be a JSON object");
  return j;
}

}  // namespace gpupool
