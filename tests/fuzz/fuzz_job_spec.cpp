// Fuzz target: the job spec parsers. Every input is read twice, as the API
// reads a request body (ParseJsonObject + JobSpecFromJson) and as the CLI
// reads job.yaml (ParseJobSpec: YAML, of which JSON is a subset); whatever
// either accepts must survive the JSON round trip unchanged. Seeds:
// tests/fuzz/corpus/job_spec (README.md beside this file).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/json_reader.h"
#include "job_spec_round_trip.h"
#include "model/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto j = ParseJsonObject(text, "request body"); j.ok()) {
    if (auto spec = JobSpecFromJson(*j); spec.ok()) fuzz::CheckJobSpecRoundTrip(*spec);
  }
  if (auto spec = ParseJobSpec(text); spec.ok()) fuzz::CheckJobSpecRoundTrip(*spec);
  return 0;
}
