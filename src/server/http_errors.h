// The one place where Status codes become HTTP statuses and JSON error
// bodies: {"error": {"code": "INVALID_ARGUMENT", "message": "..."}}.
#pragma once

#include "common/status.h"
#include "net/http.h"

namespace gpupool::server {

int HttpStatusFor(StatusCode code);
net::HttpResponse ErrorResponse(const Status& status);

}  // namespace gpupool::server
