// The one place where Status codes become HTTP statuses and JSON error
// bodies: {"error": {"code": "INVALID_ARGUMENT", "message": "..."}}; JSON
// answers (invalid UTF-8 in them is replaced, never an exception); and
// integer query parameters.
#pragma once

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

}  // namespace gpupool::server
