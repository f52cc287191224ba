#include "net/server_list.h"

#include <map>
#include <mutex>
#include <string>

#include "net/http_client.h"

namespace gpupool::net {
namespace {

std::mutex sticky_mu;
std::map<std::string, size_t>& Sticky() {
  static auto* m = new std::map<std::string, size_t>();
  return *m;
}

bool SafeToRetry(const HttpCall& call, const Status& st) {
  if (call.method == "GET" || call.method == "HEAD") {
    return st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded;
  }
  // Nothing was sent: the connection was never made.
  return st.code() == StatusCode::kUnavailable &&
         (st.message().starts_with("cannot connect") || st.message().starts_with("cannot resolve"));
}

// The index of the server `location` points into, or npos.
size_t ServerOf(const std::vector<std::string>& servers, const std::string& location) {
  for (size_t i = 0; i < servers.size(); ++i) {
    const std::string& s = servers[i];
    if (location.starts_with(s) && (location.size() == s.size() || location[s.size()] == '/')) {
      return i;
    }
  }
  return std::string::npos;
}

}  // namespace

std::vector<std::string> SplitServerList(std::string_view list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(at, end - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '/')) item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    at = end + 1;
  }
  return out;
}

std::string LastAnswered(std::string_view list) {
  if (list.find(',') == std::string_view::npos) return std::string(list);
  const std::vector<std::string> servers = SplitServerList(list);
  if (servers.empty()) return std::string(list);
  std::lock_guard lock(sticky_mu);
  auto it = Sticky().find(std::string(list));
  return servers[it == Sticky().end() ? 0 : it->second % servers.size()];
}

Result<HttpResponse> FetchFromServerList(
    const HttpCall& call, const std::function<Result<HttpResponse>(const HttpCall&)>& one) {
  if (call.base_url.find(',') == std::string::npos) return one(call);
  const std::vector<std::string> servers = SplitServerList(call.base_url);
  if (servers.empty()) return Status::InvalidArgument("no server URL in \"" + call.base_url + "\"");
  size_t start;
  {
    std::lock_guard lock(sticky_mu);
    start = Sticky()[call.base_url] % servers.size();
  }
  Result<HttpResponse> last = Status::Unavailable("no server of " + call.base_url + " answered");
  bool followed = false;
  for (size_t k = 0; k < servers.size(); ++k) {
    size_t i = (start + k) % servers.size();
    HttpCall c = call;
    c.base_url = servers[i];
    last = one(c);
    if (last.ok() && last->status == 307 && !followed) {
      auto loc = last->headers.find("location");
      size_t to = loc == last->headers.end() ? std::string::npos : ServerOf(servers, loc->second);
      if (to != std::string::npos) {
        followed = true;
        c.base_url = servers[to];
        i = to;
        last = one(c);
      }
    }
    if (!last.ok() ? !SafeToRetry(call, last.status()) : last->status != 503) {
      if (last.ok() && last->status != 307) {
        std::lock_guard lock(sticky_mu);
        Sticky()[call.base_url] = i;
      }
      return last;
    }
  }
  return last;
}

}  // namespace gpupool::net
