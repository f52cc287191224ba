#include "server/http_errors.h"

#include <charconv>
#include <nlohmann/json.hpp>

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

}  // namespace gpupool::server
