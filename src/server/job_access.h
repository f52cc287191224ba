// Jobs as API modules reach them: a job id in a path, and who may see a
// job, in one place for every module. VisibleJob: job `id` if `who`
// may do `action` to it. NotFound when `who` may not even read it (so that
// ids reveal nothing about others' jobs), PermissionDenied naming what is
// missing otherwise (server/authz.h decides).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/authz.h"
#include "server/pool.h"

namespace gpupool::server {

// A job id from a path: a positive decimal number.
inline Result<int64_t> ParseJobId(std::string_view text) {
  int64_t id = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || p != text.data() + text.size() || id <= 0) {
    return Status::InvalidArgument("invalid job id \"" + std::string(text) + "\"");
  }
  return id;
}

inline Result<JobDetail> VisibleJob(Pool& pool, const Principal& who, int64_t id, Action action) {
  auto d = pool.GetJob(id);
  if (!d.ok()) return d;
  Resource job{d->job.owner, d->job.spec.group};
  if (Decide(who, Action::kJobRead, job) == Decision::kNotYours)
    return Status::NotFound("job " + std::to_string(id) + " does not exist");
  GP_RETURN_IF_ERROR(Authorize(who, action, job));
  return d;
}

}  // namespace gpupool::server
