// The round trip every accepted job spec must survive: what the server
// stores and sends (JobSpecToJson, as JSON text) parses back, through the
// same limits, to the same spec. Shared by the job_spec and api_json
// targets.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/json_reader.h"
#include "fuzz_check.h"
#include "model/job_spec.h"

namespace gpupool::fuzz {

inline void CheckJobSpecRoundTrip(const JobSpec& spec) {
  Status valid = ValidateJobSpec(spec);
  FUZZ_CHECK(valid.ok(), "an accepted spec does not validate: " + valid.ToString());
  std::string text = JobSpecToJson(spec).dump();
  auto j = ParseJsonObject(text, "round trip");
  FUZZ_CHECK(j.ok(), j.status().ToString() + "\n" + text);
  auto back = JobSpecFromJson(*j);
  FUZZ_CHECK(back.ok(), back.status().ToString() + "\n" + text);
  FUZZ_CHECK(*back == spec,
             "the spec changed: " + text + "\nbecame " + JobSpecToJson(*back).dump());
}

}  // namespace gpupool::fuzz
