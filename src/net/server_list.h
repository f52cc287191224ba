// A pool reached through several servers (one leads, the others stand by,
// server/standby.h): its address is a comma-separated list of their URLs,
// "https://a:8470,https://b:8470,https://c:8470", wherever a server URL is
// taken (the CLI's --server and config, an agent's --server). Fetch and
// KeepAliveClient::Fetch (net/http_client.h) take such a list as base_url:
//  - they try the servers in turn, starting with the one that answered last
//    (per list, process-wide), and go on to the next when one cannot be
//    reached (any failure for GET and HEAD; for other methods only a
//    failure to connect, so that a request a server may have received is
//    never sent twice), or answers 503 (a standby with no leader yet);
//  - a 307 to a URL of the list (a standby naming the leader) is followed
//    once; a redirect anywhere else is returned as it is, so that the
//    token a request carries goes only to the servers the caller named.
// One URL behaves as before.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http.h"

namespace gpupool::net {

struct HttpCall;

// The URLs of a list ("" items and spaces around commas are ignored).
std::vector<std::string> SplitServerList(std::string_view list);

// The URL of the list's server that answered last in this process (the
// first before any did): where a WebSocket to the leader goes (the CLI's
// tunnels, after an API call found the leader). A single URL is itself.
std::string LastAnswered(std::string_view list);

// Runs `one` (a single-server fetch) for `call` as described above.
Result<HttpResponse> FetchFromServerList(
    const HttpCall& call, const std::function<Result<HttpResponse>(const HttpCall&)>& one);

}  // namespace gpupool::net
