#include "cli/command_util.h"

namespace gpupool::cli {

using nlohmann::json;

Endpoint FlagsEndpoint(const GlobalFlags& g) {
  Endpoint e{g.server, g.token, {}};
  e.tls.ca_fingerprint = g.ca_fingerprint;
  e.tls.ca_file = g.ca_file;
  e.tls.insecure = g.insecure;
  return e;
}

Result<ApiClient> Connect(const GlobalFlags& g) {
  GP_ASSIGN_OR_RETURN(Endpoint e, ResolveEndpoint(FlagsEndpoint(g)));
  return ApiClient(std::move(e));
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

Result<int64_t> ParseJobId(const std::string& id) {
  try {
    size_t used = 0;
    long long v = std::stoll(id, &used);
    if (used == id.size() && v > 0) return static_cast<int64_t>(v);
  } catch (...) {
  }
  return Status::InvalidArgument("invalid job id \"" + id + "\": expected a number such as 42");
}

}  // namespace gpupool::cli
