// SelftestApi: what `gpupool agent selftest` measures against the server
// (agent/selftest.h):
//
//   GET /v1/selftest/bytes?n=N   N bytes (at most 64 MiB) of incompressible
//                                data, application/octet-stream: the
//                                bandwidth from the server to a machine
//
// For any valid token, the join token included (a machine checks itself
// before it enrolls); the API's rate limit per token applies.
//
// Threading: on the event loop.
#pragma once

#include <cstdint>
#include <string>

#include "server/api_module.h"

namespace gpupool::server {

class SelftestApi : public ApiModule {
 public:
  static constexpr int64_t kMaxBytes = int64_t{64} << 20;
  void AddRoutes(ApiRoutes& routes) override;
};

}  // namespace gpupool::server
