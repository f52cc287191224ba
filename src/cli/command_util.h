// Small helpers the command implementations share: connecting with the
// global flags, reading fields of the server's JSON answers, parsing a job
// id. For src/cli only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/client.h"
#include "cli/commands.h"
#include "common/status.h"

namespace gpupool::cli {

// The endpoint fields the global flags set (the rest empty).
Endpoint FlagsEndpoint(const GlobalFlags& g);
Result<ApiClient> Connect(const GlobalFlags& g);

// A field as text ("" when absent or null; non-strings as JSON).
std::string Str(const nlohmann::json& j, const char* key);
// An integer field, 0 when absent or not an integer.
int64_t Int(const nlohmann::json& j, const char* key);

// "42" -> 42; InvalidArgument for anything but a positive number.
Result<int64_t> ParseJobId(const std::string& id);

}  // namespace gpupool::cli
