// The one place where Status codes become HTTP statuses and JSON error
// bodies: {"error": {"code": "INVALID_ARGUMENT", "message": "..."}}; and
// JSON answers (invalid UTF-8 in them is replaced, never an exception).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::server {

int HttpStatusFor(StatusCode code);
net::HttpResponse ErrorResponse(const Status& status);
net::HttpResponse JsonResponse(int status, const nlohmann::json& body);

}  // namespace gpupool::server
