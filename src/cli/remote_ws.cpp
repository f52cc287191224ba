#include "cli/remote_ws.h"

#include <nlohmann/json.hpp>

#include "net/server_list.h"

namespace gpupool::cli {

Result<net::WsClientOptions> GatewayOptions(const Endpoint& e, const std::string& target) {
  std::string base = net::LastAnswered(e.server);
  while (!base.empty() && base.back() == '/') base.pop_back();
  net::WsClientOptions o;
  if (base.starts_with("https://")) {
    o.url = "wss://" + base.substr(8);
  } else if (base.starts_with("http://")) {
    o.url = "ws://" + base.substr(7);
  } else {
    return Status::InvalidArgument("server URL \"" + e.server +
                                   "\": expected http://HOST:PORT or https://HOST:PORT");
  }
  o.url += target;
  if (!e.token.empty()) o.headers["Authorization"] = "Bearer " + e.token;
  o.tls = e.tls;
  return o;
}

namespace {

// net/websocket.cpp words a refused upgrade as
// "websocket upgrade refused by URL: HTTP 403 Forbidden: BODY"; the body is
// the server's {"error":{"code","message"}}.
WsEnd ParseRefusal(const std::string& reason) {
  WsEnd end;
  end.message = reason;
  size_t at = reason.find(": HTTP ");
  if (!reason.starts_with("websocket upgrade refused") || at == std::string::npos) return end;
  size_t pos = at + 7;
  while (pos < reason.size() && reason[pos] >= '0' && reason[pos] <= '9')
    end.http_status = end.http_status * 10 + (reason[pos++] - '0');
  size_t body = reason.find(": ", pos);
  if (body == std::string::npos) return end;
  auto j = nlohmann::json::parse(reason.substr(body + 2), nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    end.message = j["error"]["message"].get<std::string>();
  }
  return end;
}

}  // namespace

WsEnd DescribeWsEnd(const std::string& reason, bool opened) {
  if (!opened) return ParseRefusal(reason);
  if (reason == "closed" || reason.starts_with("closed by peer (code 1000)")) return {};
  return WsEnd{0, reason};
}

bool SaysSessionEnded(const std::string& message) {
  return message.find("session ended") != std::string::npos ||
         message.find("reclaim") != std::string::npos;
}

}  // namespace gpupool::cli
