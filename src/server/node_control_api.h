// NodeControlApi: a machine's owner takes it back, or lends it again, from
// anywhere (the dashboard's My machines, a script):
//
//   POST /v1/nodes/{name}/pause     no new work starts there; running work goes on
//   POST /v1/nodes/{name}/resume    lending again (not past a hold made on the machine)
//   POST /v1/nodes/{name}/reclaim   {"gpus": ["0"], "now": false}: the GPUs
//                                   (every one when absent) are taken back,
//                                   their jobs checkpointed and requeued
//
// For the provider who enrolled the node, and admins. The server does not
// change the lending itself: it sends the command to the node's agent
// (Pool::SendOwnerCommand), which enforces it as it enforces `gpupool agent
// pause|resume|reclaim` and reports what it did as node events. The answer
// is 202 once the command is on its way; 503 when the agent is not
// connected. Audited ("node.pause", "node.resume", "node.reclaim").
// Single-threaded: the server's event loop.
#pragma once

#include "server/api_module.h"
#include "server/auth.h"
#include "server/pool.h"

namespace gpupool::server {

class NodeControlApi : public ApiModule {
 public:
  NodeControlApi(Auth& auth, Pool& pool) : auth_(auth), pool_(pool) {}

  void AddRoutes(ApiRoutes& routes) override;

 private:
  void Command(const net::HttpRequest& req, const Principal& who, const std::string& node,
               const std::string& command, Respond respond);

  Auth& auth_;
  Pool& pool_;
};

}  // namespace gpupool::server
