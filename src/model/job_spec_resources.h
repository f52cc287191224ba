// The `resources` part of a job spec: parsing it from JSON, checking its
// invariants, and its canonical JSON form. job_spec.h lists the accepted
// fields; JobSpecFromJson, ValidateJobSpec and JobSpecToJson call these.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "model/resources.h"

namespace gpupool {

// `j` is the value of `resources`; errors name the field ("resources.gpus: ...").
Status ParseResources(const nlohmann::json& j, Resources& out);

// The invariants of a Resources built by any means (the parser or code).
Status ValidateResources(const Resources& r);

// Canonical form: ParseResources(ResourcesToJson(r)) gives back r.
nlohmann::json ResourcesToJson(const Resources& r);

}  // namespace gpupool
