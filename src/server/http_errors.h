// The one place where Status codes become HTTP statuses and JSON error
// bodies: {"error": {"code": "INVALID_ARGUMENT", "message": "..."}}; JSON
// answers (invalid UTF-8 in them is replaced, never an exception); and
// integer query parameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::server {

int HttpStatusFor(StatusCode code);
net::HttpResponse ErrorResponse(const Status& status);
net::HttpResponse JsonResponse(int status, const nlohmann::json& body);

// The address part of a peer "host:port" or "[v6]:port".
std::string PeerHost(const std::string& peer);

// The integer query parameter `name` (`fallback` when absent or empty);
// InvalidArgument naming the range when it is not an integer in [min, max].
Result<int64_t> QueryInt(const net::HttpRequest& req, const std::string& name, int64_t fallback,
                         int64_t min, int64_t max);

// The time query parameter `name`: milliseconds since the epoch (digits
// only), a UTC date ("2026-11-01", its midnight), or a duration back from
// `now` ("24h", "7d"); `fallback` when absent or empty. InvalidArgument
// names the parameter and the forms it takes.
Result<int64_t> QueryTime(const net::HttpRequest& req, const char* name, int64_t now,
                          int64_t fallback);

// "2026-11" -> [its first millisecond, the next month's) in UTC;
// InvalidArgument naming `what` otherwise.
Result<std::pair<int64_t, int64_t>> ParseMonth(std::string_view text, std::string_view what);

// A page of a list held whole in memory (the queue, the nodes):
// `?offset=N&limit=M`, by default all of it. [From, To) of `total` items.
struct OffsetPage {
  int64_t offset = 0;
  int64_t limit = INT64_MAX;
  int64_t From(int64_t total) const { return std::min(offset, total); }
  int64_t To(int64_t total) const {
    return total - From(total) > limit ? From(total) + limit : total;
  }
  // The answer: {key: [item(i) for each i of the page], "total": total,
  // "offset": the first's}.
  nlohmann::json Json(const char* key, int64_t total,
                      const std::function<nlohmann::json(int64_t)>& item) const;
};
Result<OffsetPage> QueryOffsetPage(const net::HttpRequest& req);

// Paging a log newest first: `newest=1` (the latest page) or `before=ID`
// (the page below ID). 0 when neither is given (ascending from `after`),
// else the exclusive upper bound to read down from.
Result<int64_t> QueryNewestBefore(const net::HttpRequest& req);

// Sets the answer's cursor for the next page of a log read with
// QueryNewestBefore's `below` and `after`: `next_before` (only while pages
// remain: this one was full) or `next_after`. `last_id`: the page's last id.
void AddNextPage(nlohmann::json& body, int64_t after, int64_t below, int64_t limit,
                 size_t page_size, int64_t last_id);

}  // namespace gpupool::server
