#include "store/store.h"

#include <algorithm>

namespace gpupool {

std::string_view StorageHolderKindName(StorageHolderKind k) {
  return k == StorageHolderKind::kGroup ? "group" : "user";
}

Result<StorageHolderKind> ParseStorageHolderKind(std::string_view name) {
  if (name == "user") return StorageHolderKind::kUser;
  if (name == "group") return StorageHolderKind::kGroup;
  return Status::InvalidArgument("must be \"user\" or \"group\", got \"" + std::string(name) +
                                 "\"");
}

LogStream SkippedStream(std::optional<LogStream> stored, const LogSkip& skip) {
  LogStream s;
  if (stored) {
    s = *std::move(stored);
  } else {
    s.attempt_id = skip.attempt_id;
    s.rank = skip.rank;
  }
  s.job_id = skip.job_id;
  s.last_offset = std::max(s.last_offset, skip.upto_offset);
  if (!skip.limit_event.empty() && s.limit_reached_ms == 0) {
    s.limit_reached_ms = std::max<int64_t>(skip.ts_ms, 1);
    s.limit_event = skip.limit_event;
  }
  return s;
}

}  // namespace gpupool
