// JobSpec parsing, validation and JSON mapping.
//
// A spec arrives as YAML or JSON text (the CLI reads job.yaml; the API takes
// JSON). Parsing is strict: unknown fields, wrong types, negative or absurd
// amounts and bad units are rejected with InvalidArgument naming the field
// path and the reason, e.g. "resources.gpu_memory: invalid size \"24XB\":
// unknown unit \"XB\"". Pure functions; thread-safe.
//
// Accepted fields (all optional except one of run/command):
//   name: string, 1-128 chars of [A-Za-z0-9._-]      (default "job")
//   run: string, a shell command run with /bin/sh -c
//   command: [string, ...], an argv list (non-empty)
//   env: {NAME: string}   names match [A-Za-z_][A-Za-z0-9_]*; values are strings,
//                         numbers or booleans (converted to text)
//   resources:
//     gpus: integer 0..64
//     gpu_memory: size ("24GiB"), per GPU, at most 1 TiB
//     gpu_models: [string] or a single string
//     cpus: number ("2", 0.5, "500m"), at most 1024
//     memory: size, at most 64 TiB
//   max_runtime: duration ("2h", "90s", or a number of seconds), at most 365d
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string_view>

#include "common/status.h"
#include "model/job.h"

namespace gpupool {

// Parses YAML (a superset of JSON, so JSON text works too).
Result<JobSpec> ParseJobSpec(std::string_view text);

// From an already parsed JSON value (the API's request body).
Result<JobSpec> JobSpecFromJson(const nlohmann::json& j);

// Canonical JSON form; JobSpecFromJson(JobSpecToJson(s)) == s.
nlohmann::json JobSpecToJson(const JobSpec& spec);

// Checks the invariants of an already built spec (used by the parsers and by
// code that builds specs directly, such as `gpupool submit -- cmd`).
Status ValidateJobSpec(const JobSpec& spec);

}  // namespace gpupool
