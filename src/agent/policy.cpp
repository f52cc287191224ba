#include "agent/policy.h"

#include <date/tz.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "model/yaml.h"

namespace gpupool::agent {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::minutes;

constexpr const char* kPolicyFields[] = {"gpus",
                                         "gpu_memory",
                                         "fractional",
                                         "sharing",
                                         "windows",
                                         "idle_only",
                                         "users",
                                         "groups",
                                         "max_runtime",
                                         "reclaim_grace",
                                         "allow_host_network",
                                         "max_job_output"};
constexpr const char* kWindowsFields[] = {"timezone", "weekly"};
constexpr const char* kWeeklyFields[] = {"days", "from", "to"};
constexpr const char* kIdleFields[] = {"max_utilization", "for"};
constexpr const char* kAllowDenyFields[] = {"allow", "deny"};
constexpr const char* kDayNames[] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};
constexpr int64_t kMaxDurationMs = 365LL * 24 * 3600 * 1000;
constexpr size_t kMaxListItems = 1024;

Result<std::vector<std::string>> TextList(const json& v, const std::string& path) {
  return StringList(v, path, kMaxListItems);
}

Result<int64_t> Duration(const json& v, const std::string& path, int64_t max_ms) {
  if (!v.is_string()) {
    return FieldError(path, "must be a duration such as \"10m\", got " + DescribeValue(v));
  }
  auto ms = ParseDurationMs(v.get_ref<const std::string&>());
  if (!ms.ok()) return ms.status().WithContext(path);
  if (*ms < 0 || *ms > max_ms) {
    return FieldError(
        path, "must be from 0 to " + FormatDurationMs(max_ms) + ", got " + FormatDurationMs(*ms));
  }
  return *ms;
}

// "19:00" -> 1140; "24:00" -> 1440 (the end of the day).
Result<int> MinuteOfDay(const json& v, const std::string& path) {
  auto bad = [&] {
    return FieldError(path, "must be a time of day such as \"19:00\", got " + DescribeValue(v));
  };
  if (!v.is_string()) return bad();
  const std::string& t = v.get_ref<const std::string&>();
  if (t.size() != 5 || t[2] != ':' || !std::isdigit(static_cast<unsigned char>(t[0])) ||
      !std::isdigit(static_cast<unsigned char>(t[1])) ||
      !std::isdigit(static_cast<unsigned char>(t[3])) ||
      !std::isdigit(static_cast<unsigned char>(t[4]))) {
    return bad();
  }
  int h = (t[0] - '0') * 10 + (t[1] - '0');
  int m = (t[3] - '0') * 10 + (t[4] - '0');
  if (m > 59 || h > 24 || (h == 24 && m != 0)) return bad();
  return h * 60 + m;
}

Status ParseAllowDeny(const json& v, const std::string& path, std::set<std::string>& allow,
                      std::set<std::string>& deny) {
  if (!v.is_object()) {
    return FieldError(
        path, "expected a mapping such as {allow: [a], deny: [b]}, got " + DescribeValue(v));
  }
  GP_RETURN_IF_ERROR(CheckKnownFields(v, path + ".", kAllowDenyFields));
  if (const json* f = FieldOrNull(v, "allow")) {
    GP_ASSIGN_OR_RETURN(auto list, TextList(*f, path + ".allow"));
    allow.insert(list.begin(), list.end());
  }
  if (const json* f = FieldOrNull(v, "deny")) {
    GP_ASSIGN_OR_RETURN(auto list, TextList(*f, path + ".deny"));
    deny.insert(list.begin(), list.end());
  }
  return Status::Ok();
}

Status ParseWindows(const json& v, ProviderPolicy& p) {
  const std::string path = "policy.windows";
  if (!v.is_object()) return FieldError(path, "expected a mapping, got " + DescribeValue(v));
  GP_RETURN_IF_ERROR(CheckKnownFields(v, path + ".", kWindowsFields));
  if (const json* f = FieldOrNull(v, "timezone")) {
    GP_ASSIGN_OR_RETURN(p.timezone, NonEmptyString(*f, path + ".timezone"));
    try {
      (void)date::locate_zone(p.timezone);
    } catch (const std::exception&) {
      return FieldError(path + ".timezone", "unknown time zone " + QuoteForError(p.timezone) +
                                                " (an IANA name such as Europe/Berlin)");
    }
  }
  const json* weekly = FieldOrNull(v, "weekly");
  if (weekly == nullptr) return FieldError(path + ".weekly", "is required");
  if (!weekly->is_array() || weekly->empty()) {
    return FieldError(path + ".weekly",
                      "must be a non-empty list of windows, got " + DescribeValue(*weekly));
  }
  for (size_t i = 0; i < weekly->size(); ++i) {
    const json& w = (*weekly)[i];
    std::string wp = path + ".weekly[" + std::to_string(i) + "]";
    if (!w.is_object()) {
      return FieldError(wp,
                        "expected a mapping such as {days: [mon], from: \"19:00\", to: "
                        "\"08:00\"}, got " +
                            DescribeValue(w));
    }
    GP_RETURN_IF_ERROR(CheckKnownFields(w, wp + ".", kWeeklyFields));
    WeeklyWindow window;
    const json* days = FieldOrNull(w, "days");
    if (days == nullptr) return FieldError(wp + ".days", "is required");
    GP_ASSIGN_OR_RETURN(auto names, TextList(*days, wp + ".days"));
    if (names.empty()) return FieldError(wp + ".days", "must name at least one day");
    for (size_t d = 0; d < names.size(); ++d) {
      auto it = std::find(std::begin(kDayNames), std::end(kDayNames), names[d]);
      if (it == std::end(kDayNames)) {
        return FieldError(
            wp + ".days[" + std::to_string(d) + "]",
            "unknown day " + QuoteForError(names[d]) + " (mon, tue, wed, thu, fri, sat, sun)");
      }
      window.days.insert(static_cast<int>(it - std::begin(kDayNames)));
    }
    if (const json* f = FieldOrNull(w, "from")) {
      GP_ASSIGN_OR_RETURN(window.from_minute, MinuteOfDay(*f, wp + ".from"));
    }
    if (const json* f = FieldOrNull(w, "to")) {
      GP_ASSIGN_OR_RETURN(window.to_minute, MinuteOfDay(*f, wp + ".to"));
    }
    if (window.from_minute == 1440) {
      return FieldError(wp + ".from", "must be before 24:00");
    }
    p.windows.push_back(std::move(window));
  }
  return Status::Ok();
}

int64_t ToMs(date::sys_time<milliseconds> t) { return t.time_since_epoch().count(); }

// A local wall-clock time as a point in time: the first occurrence when it
// is ambiguous, the end of the gap when it does not exist (DST).
date::sys_time<milliseconds> ToSys(const date::time_zone* zone,
                                   date::local_time<milliseconds> local) {
  auto info = zone->get_info(date::floor<std::chrono::seconds>(local));
  switch (info.result) {
    case date::local_info::unique:
      return date::sys_time<milliseconds>{local.time_since_epoch() - info.first.offset};
    case date::local_info::ambiguous:
      return date::sys_time<milliseconds>{local.time_since_epoch() - info.first.offset};
    case date::local_info::nonexistent:
    default:
      return date::floor<milliseconds>(info.first.end);
  }
}

}  // namespace

Result<ProviderPolicy> ParseProviderPolicy(const json& j) {
  ProviderPolicy p;
  if (!j.is_object()) return FieldError("policy", "expected a mapping, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "policy.", kPolicyFields));
  if (const json* f = FieldOrNull(j, "gpus")) {
    GP_ASSIGN_OR_RETURN(p.gpus, TextList(*f, "policy.gpus"));
    if (p.gpus.empty()) {
      return FieldError("policy.gpus", "must name at least one GPU (leave it out to lend all)");
    }
  }
  if (const json* f = FieldOrNull(j, "gpu_memory")) {
    if (!f->is_string()) {
      return FieldError(
          "policy.gpu_memory",
          "must be a size such as \"40GiB\" or a share such as \"50%\", got " + DescribeValue(*f));
    }
    const std::string& t = f->get_ref<const std::string&>();
    if (!t.empty() && t.back() == '%') {
      int pct = 0;
      bool ok = t.size() >= 2 && t.size() <= 4;
      for (size_t i = 0; ok && i + 1 < t.size(); ++i) {
        ok = std::isdigit(static_cast<unsigned char>(t[i])) != 0;
        pct = pct * 10 + (t[i] - '0');
      }
      if (!ok || pct < 1 || pct > 100) {
        return FieldError("policy.gpu_memory",
                          "a share must be from 1% to 100%, got " + QuoteForError(t));
      }
      p.gpu_memory_percent = pct;
    } else {
      auto mib = ParseMebibytes(t);
      if (!mib.ok()) return mib.status().WithContext("policy.gpu_memory");
      if (*mib <= 0) return FieldError("policy.gpu_memory", "must be more than 0");
      p.gpu_memory_mib = *mib;
    }
  }
  if (const json* f = FieldOrNull(j, "fractional")) {
    if (!f->is_boolean()) {
      return FieldError("policy.fractional", "must be true or false, got " + DescribeValue(*f));
    }
    if (!f->get<bool>()) p.sharing = GpuSharing::kNone;
  }
  if (const json* f = FieldOrNull(j, "sharing")) {
    if (FieldOrNull(j, "fractional") != nullptr) {
      return FieldError("policy.sharing",
                        "give sharing or its older spelling fractional, not both");
    }
    if (!f->is_string()) {
      return FieldError("policy.sharing",
                        "must be none, interposer or mps, got " + DescribeValue(*f));
    }
    auto sharing = ParseGpuSharing(f->get_ref<const std::string&>());
    if (!sharing.ok()) return FieldError("policy.sharing", sharing.status().message());
    p.sharing = *sharing;
  }
  if (const json* f = FieldOrNull(j, "allow_host_network")) {
    if (!f->is_boolean()) {
      return FieldError("policy.allow_host_network",
                        "must be true or false, got " + DescribeValue(*f));
    }
    p.allow_host_network = f->get<bool>();
  }
  if (const json* f = FieldOrNull(j, "windows")) GP_RETURN_IF_ERROR(ParseWindows(*f, p));
  if (const json* f = FieldOrNull(j, "idle_only")) {
    if (!f->is_object()) {
      return FieldError(
          "policy.idle_only",
          "expected a mapping such as {max_utilization: 10, for: 10m}, got " + DescribeValue(*f));
    }
    GP_RETURN_IF_ERROR(CheckKnownFields(*f, "policy.idle_only.", kIdleFields));
    if (const json* u = FieldOrNull(*f, "max_utilization")) {
      if (!u->is_number_integer() || u->get<int64_t>() < 0 || u->get<int64_t>() > 100) {
        return FieldError("policy.idle_only.max_utilization",
                          "must be a whole percent from 0 to 100, got " + DescribeValue(*u));
      }
      p.idle_max_utilization = u->get<int>();
    }
    const json* dur = FieldOrNull(*f, "for");
    if (dur == nullptr) return FieldError("policy.idle_only.for", "is required");
    GP_ASSIGN_OR_RETURN(p.idle_for_ms, Duration(*dur, "policy.idle_only.for", kMaxDurationMs));
    if (p.idle_for_ms == 0) p.idle_for_ms = 1;  // "0s": idle at the first quiet sample
  }
  if (const json* f = FieldOrNull(j, "users")) {
    GP_RETURN_IF_ERROR(ParseAllowDeny(*f, "policy.users", p.allow_users, p.deny_users));
  }
  if (const json* f = FieldOrNull(j, "groups")) {
    GP_RETURN_IF_ERROR(ParseAllowDeny(*f, "policy.groups", p.allow_groups, p.deny_groups));
  }
  if (const json* f = FieldOrNull(j, "max_runtime")) {
    GP_ASSIGN_OR_RETURN(p.max_runtime_ms, Duration(*f, "policy.max_runtime", kMaxDurationMs));
  }
  if (const json* f = FieldOrNull(j, "reclaim_grace")) {
    GP_ASSIGN_OR_RETURN(p.reclaim_grace_ms,
                        Duration(*f, "policy.reclaim_grace", int64_t{3600} * 1000));
  }
  if (const json* f = FieldOrNull(j, "max_job_output")) {
    if (!f->is_string()) {
      return FieldError("policy.max_job_output",
                        "must be a size such as \"100MiB\", got " + DescribeValue(*f));
    }
    auto bytes = ParseBytes(f->get_ref<const std::string&>());
    if (!bytes.ok()) return bytes.status().WithContext("policy.max_job_output");
    if (*bytes <= 0) return FieldError("policy.max_job_output", "must be more than 0");
    p.max_job_output_bytes = *bytes;
  }
  return p;
}

nlohmann::json PolicyToJson(const ProviderPolicy& p) {
  auto hhmm = [](int minute) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%02d:%02d", minute / 60 % 24, minute % 60);
    return std::string(minute == 1440 ? "24:00" : buf);
  };
  json j;
  j["gpus"] = p.gpus.empty() ? json("all") : json(p.gpus);
  j["gpu_memory"] = p.gpu_memory_percent > 0 ? json(std::to_string(p.gpu_memory_percent) + "%")
                    : p.gpu_memory_mib > 0   ? json(FormatMebibytes(p.gpu_memory_mib))
                                             : json("all");
  j["sharing"] = p.sharing ? json(std::string(GpuSharingName(*p.sharing)))
                           : json("default (interposer where libgpushare.so is usable)");
  if (p.windows.empty()) {
    j["windows"] = "always";
  } else {
    json weekly = json::array();
    for (const WeeklyWindow& w : p.windows) {
      json days = json::array();
      for (int d : w.days) days.push_back(kDayNames[d]);
      weekly.push_back({{"days", days}, {"from", hhmm(w.from_minute)}, {"to", hhmm(w.to_minute)}});
    }
    j["windows"] = {{"timezone", p.timezone}, {"weekly", weekly}};
  }
  j["idle_only"] = p.idle_for_ms > 0 ? json{{"max_utilization", p.idle_max_utilization},
                                            {"for", FormatDurationMs(p.idle_for_ms)}}
                                     : json(false);
  j["users"] = {{"allow", p.allow_users}, {"deny", p.deny_users}};
  j["groups"] = {{"allow", p.allow_groups}, {"deny", p.deny_groups}};
  j["max_runtime"] = p.max_runtime_ms > 0 ? json(FormatDurationMs(p.max_runtime_ms)) : json("any");
  j["reclaim_grace"] = FormatDurationMs(p.reclaim_grace_ms);
  j["allow_host_network"] = p.allow_host_network;
  j["max_job_output"] =
      p.max_job_output_bytes > 0 ? json(FormatBytes(p.max_job_output_bytes)) : json("the server's");
  return j;
}

GpuSharing EffectiveSharing(const ProviderPolicy& policy, bool interposer_usable) {
  if (!interposer_usable) return GpuSharing::kNone;
  return policy.sharing.value_or(GpuSharing::kInterposer);
}

WindowState EvaluateWindows(const ProviderPolicy& policy, int64_t now_ms) {
  WindowState state;
  if (policy.windows.empty()) return state;
  const date::time_zone* zone = date::locate_zone(policy.timezone);
  date::sys_time<milliseconds> now{milliseconds(now_ms)};
  auto local_now = zone->to_local(now);
  date::local_days today = date::floor<date::days>(local_now);
  // The windows' intervals from yesterday (one may run into today) to a
  // week and a day ahead, as points in time, merged.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int d = -1; d <= 8; ++d) {
    date::local_days day = today + date::days(d);
    int weekday = static_cast<int>(date::weekday(day).iso_encoding()) - 1;  // 0 = Monday
    for (const WeeklyWindow& w : policy.windows) {
      if (!w.days.count(weekday)) continue;
      int end_minute = w.to_minute > w.from_minute ? w.to_minute : w.to_minute + 1440;
      auto from = date::local_time<milliseconds>(day) + minutes(w.from_minute);
      auto to = date::local_time<milliseconds>(day) + minutes(end_minute);
      int64_t s = ToMs(ToSys(zone, from)), e = ToMs(ToSys(zone, to));
      if (e > s) spans.emplace_back(s, e);
    }
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& span : spans) {
    if (!merged.empty() && span.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, span.second);
    } else {
      merged.push_back(span);
    }
  }
  // Spans reaching the end of the range are open for over a week from now:
  // no change is known (every day, all day).
  const int64_t range_end =
      ToMs(ToSys(zone, date::local_time<milliseconds>(today + date::days(9))));
  state.open = false;
  for (const auto& [s, e] : merged) {
    if (s <= now_ms && now_ms < e) {
      state.open = true;
      if (e < range_end) state.next_change_ms = e;
      return state;
    }
    if (s > now_ms) {
      state.next_change_ms = s;
      return state;
    }
  }
  return state;  // closed, and no window opens within the next week
}

bool Lends(const ProviderPolicy& policy, const GpuInfo& gpu) {
  if (policy.gpus.empty()) return true;
  std::string index = std::to_string(gpu.index);
  return std::any_of(policy.gpus.begin(), policy.gpus.end(),
                     [&](const std::string& g) { return g == index || g == gpu.uuid; });
}

int64_t LentMemoryMib(const ProviderPolicy& policy, const GpuInfo& gpu) {
  if (policy.gpu_memory_percent > 0) return gpu.memory_mib * policy.gpu_memory_percent / 100;
  if (policy.gpu_memory_mib > 0) return std::min(policy.gpu_memory_mib, gpu.memory_mib);
  return gpu.memory_mib;
}

IdleTracker::Verdict IdleTracker::Observe(int64_t now_ms,
                                          const std::vector<GpuTelemetry>& telemetry,
                                          const std::set<int64_t>& pool_pids,
                                          const std::set<std::string>& pool_gpus) {
  Verdict v;
  for (const GpuTelemetry& t : telemetry) {
    if (idle_for_ms_ <= 0) {
      v.lendable.insert(t.uuid);
      continue;
    }
    State& s = state_[t.uuid];
    auto foreign = std::find_if(t.processes.begin(), t.processes.end(),
                                [&](const GpuProcess& p) { return !pool_pids.count(p.pid); });
    if (foreign != t.processes.end()) {
      s.idle_since_ms = -1;
      v.why_not[t.uuid] = "its owner runs process " + std::to_string(foreign->pid) + " on it";
      continue;
    }
    // The pool's own work does not count against lending: while it holds
    // the GPU, the GPU counts as idle all along.
    bool pool = pool_gpus.count(t.uuid) > 0 || !t.processes.empty();
    if (pool) {
      s.idle_since_ms = now_ms - idle_for_ms_;
      v.lendable.insert(t.uuid);
      continue;
    }
    // Unknown utilization (-1) counts as busy.
    if (t.utilization_percent < 0 || t.utilization_percent > max_utilization_) {
      s.idle_since_ms = -1;
      v.why_not[t.uuid] =
          t.utilization_percent < 0
              ? "its utilization cannot be read, so it never counts as idle"
              : "in use by its owner (utilization over " + std::to_string(max_utilization_) + "%)";
      continue;
    }
    if (s.idle_since_ms < 0) s.idle_since_ms = now_ms;
    if (now_ms - s.idle_since_ms >= idle_for_ms_) {
      v.lendable.insert(t.uuid);
    } else {
      // Stable text: a changed lending is sent to the server.
      v.why_not[t.uuid] =
          "not yet idle for the " + FormatDurationMs(idle_for_ms_) + " idle-only lending asks";
    }
  }
  return v;
}

}  // namespace gpupool::agent
