// What `session connect`, `exec` and `shell` share about their WebSockets
// to the server's session gateway (server/session_gateway.h): the URL and
// headers from the CLI's endpoint, and reading why a WebSocket ended.
//
// Pure functions; thread-safe. For src/cli only.
#pragma once

#include <cstdint>
#include <string>

#include "cli/client.h"
#include "common/status.h"
#include "net/websocket.h"

namespace gpupool::cli {

// Options for a WebSocket to `target` ("/v1/jobs/7/exec") on the endpoint's
// server (of a list, the one that answered the last API call: the leader):
// http(s):// becomes ws(s)://, the token goes in Authorization and
// the TLS settings carry over. InvalidArgument for a server URL that is
// neither http:// nor https://.
Result<net::WsClientOptions> GatewayOptions(const Endpoint& e, const std::string& target);

// Why a gateway WebSocket ended, as net::WsHandler::OnClose reported it.
struct WsEnd {
  // The server refused the upgrade (HTTP status; 0 when it did not answer
  // at all, e.g. no route to it). Only meaningful before the open.
  int http_status = 0;
  // For the user: the server's own message for a refusal ("port 9 is not
  // one job 7 declared ..."), the close reason, or "" for a clean end.
  std::string message;
};
// `opened`: whether OnOpen came first. A close reason of "closed" (the
// server's Close("")) or a peer's close without a reason is a clean end.
WsEnd DescribeWsEnd(const std::string& reason, bool opened);

// True when a close reason says the session (or the job) is over, e.g.
// "session ended: the provider reclaimed the GPU".
bool SaysSessionEnded(const std::string& message);

}  // namespace gpupool::cli
