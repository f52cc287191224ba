// Api: the REST/JSON interface under /v1 (see docs/api.md).
//
// Every endpoint is a route of one table (server/route_table.h): Api's own
// (jobs, queue, nodes, groups, events), and those of its modules
// (server/api_module.h): identities, blobs and checkpoints (the only ones
// the agent join token may call besides the agent channel), quotas,
// backups, static files. Api authenticates, rate-limits and authorizes each
// request as its route declares, then calls the route's handler; every
// error goes through ErrorResponse (server/http_errors.h). Long polls (`wait` on a job,
// `wait` on logs) park the Responder until the job changes or the wait runs
// out. Who may do what is decided by server/authz.h; members see only their
// own jobs (and their job-sharing labs'), admins see all.
//
// Single-threaded: runs on the server's event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "server/api_module.h"
#include "server/auth.h"
#include "server/blob_api.h"
#include "server/identity_api.h"
#include "server/pool.h"
#include "server/rate_limiter.h"
#include "server/route_table.h"

namespace gpupool::server {

struct ApiOptions {
  // What GET /healthz says of this server: "" for a server alone on SQLite;
  // "leader" (with its epoch) for the leader of several on PostgreSQL
  // (server/standby.h answers for the standbys).
  std::string role;
  int64_t epoch = 0;
  // Requests per token (agents excepted): a burst, then this many a second.
  RateLimit per_token{50, 200};
  // Requests per agent (its node token): far above what moving checkpoints
  // takes (8 MiB a request), but a bound on what a broken or hostile agent
  // can make the server do.
  RateLimit per_agent{2000, 4000};
  // Reverse-proxy single sign-on (off when empty): a request without a
  // token whose peer address is in `proxy_trusted` acts as the user this
  // header names (a member, created on first sight).
  std::string proxy_user_header;
  std::vector<std::string> proxy_trusted;
  // Called once for every request answered: the route's pattern ("" when
  // no route matched), the method, the status and the seconds it took
  // (the server's metrics, server/metrics_api.h). May be called from a
  // worker thread.
  std::function<void(std::string_view route, std::string_view method, int status, double seconds)>
      observe;
};

// The job spec in a request's body: JSON, or YAML with a YAML Content-Type
// (`application/yaml`, as the dashboard sends a pasted spec), read by the
// CLI's own reader so its errors are the CLI's, with the line.
// InvalidArgument says what was wrong and where.
Result<JobSpec> JobSpecFromRequest(const net::HttpRequest& req);

class Api {
 public:
  // `blobs` and `identity` may be null (their endpoints are then not found).
  Api(net::EventLoop& loop, Pool& pool, Auth& auth, const Clock& clock, ApiOptions options = {},
      BlobApi* blobs = nullptr, IdentityApi* identity = nullptr);
  ~Api();

  void Handle(net::HttpRequest req, net::Responder respond);

  // Adds an area of endpoints (server/api_module.h): its routes go after
  // those already in the table. The module must outlive the Api.
  void AddModule(ApiModule& module) { module.AddRoutes(routes_); }

  // Pool hook: wakes long polls waiting on this job.
  void JobChanged(int64_t job_id);

 private:
  // Returns true once it has responded. Called with timed_out = true when the
  // wait ran out, and must respond then.
  using Probe = std::function<bool(bool timed_out)>;

  // The endpoints Api serves itself, with the action each needs.
  void AddOwnRoutes();
  void SubmitJob(const net::HttpRequest& req, const Principal& who, Respond respond);
  void GetJob(const net::HttpRequest& req, const Principal& who, int64_t id, Respond respond);
  void ListJobs(const net::HttpRequest& req, const Principal& who, Respond respond);
  void CancelJob(const Principal& who, int64_t id, Respond respond);
  void JobLogs(const net::HttpRequest& req, const Principal& who, int64_t id, Respond respond);
  void ListNodes(const net::HttpRequest& req, Respond respond);
  void GetNode(Respond respond, const std::string& id_or_name);
  // The provider event log of one node, or of every node when `node` is "".
  void NodeEvents(const net::HttpRequest& req, const std::string& node, Respond respond);
  void Queue(const net::HttpRequest& req, const Principal& who, Respond respond);
  void Groups(Respond respond);

  // The principal of a request: its bearer token, or the reverse proxy's
  // user header where that is configured.
  Result<Principal> Authenticate(const net::HttpRequest& req);
  // Job `id` if `who` may do `action` to it: NotFound when `who` may not even
  // read it (no existence leak), PermissionDenied otherwise.
  Result<JobDetail> VisibleJob(const Principal& who, int64_t id, Action action);
  // Runs `probe` now and again on every change of `job_id` until it
  // responds; after `wait_ms` runs it a last time with timed_out = true.
  void WaitOn(int64_t job_id, int64_t wait_ms, Probe probe);

  struct Waiter {
    Probe probe;
    net::EventLoop::TimerId timer;
  };

  ApiRoutes routes_;
  net::EventLoop& loop_;
  Pool& pool_;
  Auth& auth_;
  const Clock& clock_;
  ApiOptions options_;
  BlobApi* blobs_;
  RateLimiter limiter_;
  RateLimiter agent_limiter_;
  uint64_t next_waiter_ = 1;
  std::map<int64_t, std::map<uint64_t, Waiter>> waiters_;  // job id -> waiter id -> waiter
};

}  // namespace gpupool::server
