// RouteTable: an API's endpoints as data. Each route names its method, its
// path pattern ("/v1/jobs/{id}/logs": literal segments and named
// parameters), the action it needs (server/authz.h) and its handler. The
// authorization is declared with the route: a route `checked_before` has its
// action authorized before its handler runs (pool-wide actions); the others
// name the action their handler authorizes against the resource it loads
// (a job's owner and group), so that the table still says what each needs.
//
// Contract: Find is pure. A path no route's pattern matches is NotFound
// ("no such endpoint: GET /v1/x"); a path some route matches with another
// method is also NotFound, naming the method, as before the table. Paths
// are compared by their non-empty segments (net::SplitPath); a literal
// segment matches itself, a parameter any one segment. Routes are
// tried in the order added; the first match wins.
#pragma once

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

template <typename Handler>
class RouteTable {
 public:
  struct Route {
    std::string method;
    std::string pattern;
    Action action;
    bool checked_before = false;  // Authorize(who, action) before the handler
    Handler handler;
  };
  struct Match {
    const Route* route = nullptr;
    PathParams params;
  };

  void Add(std::string method, std::string pattern, Action action, bool checked_before,
           Handler handler) {
    routes_.push_back(
        {std::move(method), std::move(pattern), action, checked_before, std::move(handler)});
    std::vector<std::string> segments;
    for (std::string_view part : net::SplitPath(routes_.back().pattern))
      segments.emplace_back(part);
    segments_.push_back(std::move(segments));
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
    if (pattern.size() != parts.size()) return false;
    for (size_t i = 0; i < pattern.size(); ++i) {
      const std::string& p = pattern[i];
      if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
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
