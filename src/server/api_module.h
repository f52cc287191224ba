// ApiModule: one area of the REST API with its own endpoints (identities,
// blobs and checkpoints, storage quotas, database backups, the dashboard's
// static files, ...), plugged into Api (server/api.h) so that new areas do
// not grow Api itself.
//
// A module adds its routes to the API's one table (server/route_table.h),
// each with who may call it and the action it needs; Api authenticates,
// rate-limits and authorizes as each route declares, then calls its
// handler. A handler must answer through `respond` exactly once, now or
// later (from a worker thread too: net::Responder allows it); it may move
// from `req` (an upload's body). Handlers are called on the event loop.
#pragma once

#include <functional>
#include <memory>

#include "net/http_server.h"
#include "server/authz.h"
#include "server/route_table.h"

namespace gpupool::server {

using Respond = std::shared_ptr<net::Responder>;
// A route's handler; `params` are its pattern's named segments. A public
// route's `who` is an empty Principal.
using RouteHandler = std::function<void(net::HttpRequest& req, const Principal& who,
                                        const PathParams& params, Respond respond)>;
using ApiRoutes = RouteTable<RouteHandler>;

class ApiModule {
 public:
  virtual ~ApiModule() = default;
  // Adds the module's routes; the handlers may keep `this`.
  virtual void AddRoutes(ApiRoutes& routes) = 0;
};

}  // namespace gpupool::server
