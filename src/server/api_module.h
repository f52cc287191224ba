// ApiModule: one area of the REST API with its own endpoints (storage
// quotas, database backups, ...), plugged into Api (server/api.h) so that
// new areas do not grow Api itself.
//
// Api calls Serves() for every authenticated request after rate limiting,
// in the order the modules were added, and Handle() on the first that
// serves it. Handle must answer through `respond` exactly once, now or
// later (from a worker thread too: net::Responder allows it), and decide
// who may call (server/authz.h). Both are called on the event loop.
#pragma once

#include <memory>
#include <string_view>

#include "net/http_server.h"
#include "server/authz.h"

namespace gpupool::server {

class ApiModule {
 public:
  virtual ~ApiModule() = default;
  virtual bool Serves(std::string_view method, std::string_view path) const = 0;
  virtual void Handle(const net::HttpRequest& req, const Principal& who,
                      std::shared_ptr<net::Responder> respond) = 0;
};

}  // namespace gpupool::server
