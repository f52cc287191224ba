#include "server/http_errors.h"

#include <charconv>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/units.h"

namespace gpupool::server {

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kInternal:
    case StatusCode::kDataLoss:
      return 500;
  }
  return 500;
}

net::HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  net::HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

net::HttpResponse ErrorResponse(const Status& status) {
  net::HttpResponse r;
  r.status = HttpStatusFor(status.code());
  r.body = nlohmann::json{{"error",
                           {{"code", std::string(StatusCodeName(status.code()))},
                            {"message", status.message()}}}}
               .dump();
  if (r.status == 401) r.headers["www-authenticate"] = "Bearer";
  return r;
}

std::string PeerHost(const std::string& peer) {
  size_t colon = peer.rfind(':');
  std::string host = colon == std::string::npos ? peer : peer.substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

Result<int64_t> QueryInt(const net::HttpRequest& req, const std::string& name, int64_t fallback,
                         int64_t min, int64_t max) {
  auto it = req.query.find(name);
  if (it == req.query.end() || it->second.empty()) return fallback;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || p != it->second.data() + it->second.size() || v < min || v > max) {
    return Status::InvalidArgument("query parameter " + name + ": must be an integer from " +
                                   std::to_string(min) + " to " + std::to_string(max));
  }
  return v;
}

nlohmann::json OffsetPage::Json(const char* key, int64_t total,
                                const std::function<nlohmann::json(int64_t)>& item) const {
  nlohmann::json arr = nlohmann::json::array();
  for (int64_t i = From(total); i < To(total); ++i) arr.push_back(item(i));
  return {{key, std::move(arr)}, {"total", total}, {"offset", From(total)}};
}

Result<OffsetPage> QueryOffsetPage(const net::HttpRequest& req) {
  GP_ASSIGN_OR_RETURN(int64_t offset, QueryInt(req, "offset", 0, 0, INT64_MAX));
  GP_ASSIGN_OR_RETURN(int64_t limit, QueryInt(req, "limit", INT64_MAX, 1, INT64_MAX));
  return OffsetPage{offset, limit};
}

Result<int64_t> QueryNewestBefore(const net::HttpRequest& req) {
  GP_ASSIGN_OR_RETURN(int64_t before, QueryInt(req, "before", 0, 1, INT64_MAX));
  GP_ASSIGN_OR_RETURN(int64_t newest, QueryInt(req, "newest", 0, 0, 1));
  return before > 0 ? before : (newest == 1 ? INT64_MAX : 0);
}

void AddNextPage(nlohmann::json& body, int64_t after, int64_t below, int64_t limit,
                 size_t page_size, int64_t last_id) {
  if (below > 0) {
    if (static_cast<int64_t>(page_size) == limit) body["next_before"] = last_id;
  } else {
    body["next_after"] = page_size == 0 ? after : last_id;
  }
}

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
// days_from_civil); no time zone involved.
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "YYYY-MM" or "YYYY-MM-DD" with digits where digits go; false otherwise.
bool ParseYmd(std::string_view t, int64_t* y, int64_t* m, int64_t* d) {
  auto num = [&](size_t at, size_t len, int64_t* out) {
    if (t.size() < at + len) return false;
    auto [p, ec] = std::from_chars(t.data() + at, t.data() + at + len, *out);
    return ec == std::errc() && p == t.data() + at + len;
  };
  *d = 1;
  if (t.size() != 7 && t.size() != 10) return false;
  if (t[4] != '-' || !num(0, 4, y) || !num(5, 2, m) || *m < 1 || *m > 12) return false;
  if (t.size() == 10) {
    static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (t[7] != '-' || !num(8, 2, d) || *d < 1 || *d > kDays[*m - 1]) return false;
    bool leap = (*y % 4 == 0 && *y % 100 != 0) || *y % 400 == 0;
    if (*m == 2 && *d == 29 && !leap) return false;
  }
  return *y >= 1970 && *y <= 9999;
}

constexpr int64_t kMsPerDay = 86'400'000;

}  // namespace

Result<int64_t> QueryTime(const net::HttpRequest& req, const char* name, int64_t now,
                          int64_t fallback) {
  auto it = req.query.find(name);
  if (it == req.query.end() || it->second.empty()) return fallback;
  const std::string& v = it->second;
  int64_t y = 0, m = 0, d = 0;
  if (v.find_first_not_of("0123456789") == std::string::npos) {
    int64_t ms = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
    if (ec == std::errc() && p == v.data() + v.size()) return ms;
  } else if (v.size() == 10 && ParseYmd(v, &y, &m, &d)) {
    return DaysFromCivil(y, m, d) * kMsPerDay;
  } else if (auto back = ParseDurationMs(v); back.ok()) {
    return now - *back;
  }
  return Status::InvalidArgument(std::string("query parameter ") + name +
                                 ": expected milliseconds since the epoch, a date such as "
                                 "2026-11-01, or a duration back from now such as 24h, got \"" +
                                 v + "\"");
}

Result<std::pair<int64_t, int64_t>> ParseMonth(std::string_view text, std::string_view what) {
  int64_t y = 0, m = 0, d = 0;
  if (text.size() != 7 || !ParseYmd(text, &y, &m, &d)) {
    return Status::InvalidArgument(std::string(what) + ": \"" + std::string(text) +
                                   "\" is not a month such as 2026-11");
  }
  int64_t from = DaysFromCivil(y, m, 1) * kMsPerDay;
  int64_t to = (m == 12 ? DaysFromCivil(y + 1, 1, 1) : DaysFromCivil(y, m + 1, 1)) * kMsPerDay;
  return std::make_pair(from, to);
}

}  // namespace gpupool::server
