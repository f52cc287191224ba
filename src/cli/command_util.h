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

// "5m ago" for a timestamp in ms; "-" for 0.
std::string Ago(int64_t ms);
// A spec's GPUs for a table: "1", "0.5", "2xA100 (40GiB)"; "-" for none.
std::string GpusOf(const nlohmann::json& spec);
// A job's state, with its exit code once it ended: "failed (3)".
std::string StateText(const nlohmann::json& job);

// Builds a spec from submit flags (with `extra` top-level fields on top,
// e.g. a session section), uploads its work directory, and submits it;
// returns the server's answer (the job).
Result<nlohmann::json> SubmitFromFlags(ApiClient& api, const SubmitFlags& f,
                                       const nlohmann::json& extra);

// "42" -> 42; InvalidArgument for anything but a positive number.
Result<int64_t> ParseJobId(const std::string& id);

}  // namespace gpupool::cli
