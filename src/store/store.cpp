#include "store/store.h"

#include <algorithm>
#include <ctime>

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

namespace {
constexpr std::pair<UsageBy, std::string_view> kUsageByNames[] = {
    {UsageBy::kJob, "job"},         {UsageBy::kUser, "user"},  {UsageBy::kGroup, "group"},
    {UsageBy::kAccount, "account"}, {UsageBy::kNode, "node"},  {UsageBy::kModel, "model"},
    {UsageBy::kDay, "day"},         {UsageBy::kMonth, "month"}};
}  // namespace

std::string_view UsageByName(UsageBy by) {
  for (const auto& [b, name] : kUsageByNames)
    if (b == by) return name;
  return "user";
}

Result<UsageBy> ParseUsageBy(std::string_view name) {
  for (const auto& [b, n] : kUsageByNames)
    if (n == name) return b;
  return Status::InvalidArgument("by: \"" + std::string(name) +
                                 "\" is not one of job, user, group, account, node, model, day, "
                                 "month");
}

std::string UsageKeyOf(const accounting::LedgerEntry& e, UsageBy by) {
  auto utc = [](int64_t ms, const char* format) {
    std::time_t t = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, format, &tm);
    return std::string(buf);
  };
  switch (by) {
    case UsageBy::kJob:
      return std::to_string(e.job_id);
    case UsageBy::kUser:
      return e.user;
    case UsageBy::kGroup:
      return e.group;
    case UsageBy::kAccount:
      return e.debit;
    case UsageBy::kNode:
      return e.node_id;
    case UsageBy::kModel:
      return e.gpu_class;
    case UsageBy::kDay:
      return utc(e.from_ms, "%Y-%m-%d");
    case UsageBy::kMonth:
      return utc(e.from_ms, "%Y-%m");
  }
  return e.user;
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
