// RouteTable: an API's endpoints as data. Each route names its method, its
// path pattern ("/v1/jobs/{id}/logs": literal segments and named
// parameters; a last "{rest...}" takes every remaining segment), who may
// call it (Access), the action it needs (server/authz.h) and its handler.
// The authorization is declared with the route:
//   kPublic             no token at all (login, health, the dashboard's
//                       static files); `action` is not used;
//   kAnyToken           any valid token (whoami); `action` is not used;
//   kAuthorizedFirst    the action is authorized before the handler runs
//                       (pool-wide actions);
//   kHandlerAuthorizes  the handler authorizes the action against the
//                       resource it loads (a job's owner and group, a
//                       token's owner), so the table still says what it needs.
//
// Contract: Find is pure. A path no route's pattern matches is NotFound
// ("no such endpoint: GET /v1/x"); a path some route matches with another
// method is also NotFound, naming the method. Paths are compared by their
// non-empty segments (net::SplitPath); a literal segment matches itself, a
// parameter any one segment, a rest parameter one or more (joined by "/").
// Routes are tried in the order added; the first match wins.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http.h"
#include "server/authz.h"

namespace gpupool::server {

using PathParams = std::map<std::string, std::string, std::less<>>;

enum class Access : uint8_t { kPublic, kAnyToken, kAuthorizedFirst, kHandlerAuthorizes };

template <typename Handler>
class RouteTable {
 public:
  struct Route {
    std::string method;
    std::string pattern;
    Access access = Access::kHandlerAuthorizes;
    Action action = Action::kJobRead;  // unused when kPublic or kAnyToken
    Handler handler;
  };
  struct Match {
    const Route* route = nullptr;
    PathParams params;
  };

  // A route that needs a token and `action`.
  void Add(std::string method, std::string pattern, Access access, Action action, Handler handler) {
    routes_.push_back({std::move(method), std::move(pattern), access, action, std::move(handler)});
    std::vector<std::string> segments;
    for (std::string_view part : net::SplitPath(routes_.back().pattern))
      segments.emplace_back(part);
    segments_.push_back(std::move(segments));
  }

  // A route anyone may call, without a token.
  void AddPublic(std::string method, std::string pattern, Handler handler) {
    Add(std::move(method), std::move(pattern), Access::kPublic, Action::kJobRead,
        std::move(handler));
  }

  Result<Match> Find(std::string_view method, std::string_view path) const {
    const std::vector<std::string_view> parts = net::SplitPath(path);
    for (size_t i = 0; i < routes_.size(); ++i) {
      if (routes_[i].method != method) continue;
      Match m;
      if (!MatchSegments(segments_[i], parts, m.params)) continue;
      m.route = &routes_[i];
      return m;
    }
    return Status::NotFound("no such endpoint: " + std::string(method) + " " + std::string(path));
  }

  const std::vector<Route>& routes() const { return routes_; }

 private:
  static bool MatchSegments(const std::vector<std::string>& pattern,
                            const std::vector<std::string_view>& parts, PathParams& params) {
    const bool rest = !pattern.empty() && pattern.back().ends_with("...}");
    if (rest ? parts.size() < pattern.size() : parts.size() != pattern.size()) return false;
    for (size_t i = 0; i < pattern.size(); ++i) {
      const std::string& p = pattern[i];
      if (rest && i + 1 == pattern.size()) {
        std::string joined;
        for (size_t j = i; j < parts.size(); ++j) (joined += j == i ? "" : "/") += parts[j];
        params[p.substr(1, p.size() - 5)] = std::move(joined);
      } else if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
        params[p.substr(1, p.size() - 2)] = std::string(parts[i]);
      } else if (p != parts[i]) {
        return false;
      }
    }
    return true;
  }

  std::vector<Route> routes_;
  std::vector<std::vector<std::string>> segments_;
};

}  // namespace gpupool::server
