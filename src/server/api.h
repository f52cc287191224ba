// Api: the REST/JSON interface under /v1 (see docs/api.md).
//
// Routes a request to the Pool and renders the answer; every error goes
// through ErrorResponse (server/http_errors.h). The blob store and
// checkpoint endpoints go to the BlobApi (server/blob_api.h), the only ones
// the agent join token may call besides the agent channel. Long polls (`wait` on a job,
// `wait` on logs) park the Responder until the job changes or the wait runs
// out. Members see only their own jobs; admins see all.
//
// Single-threaded: runs on the server's event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "common/clock.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "server/auth.h"
#include "server/blob_api.h"
#include "server/pool.h"

namespace gpupool::server {

class Api {
 public:
  // `blobs` may be null (no blob store: its endpoints are not found).
  Api(net::EventLoop& loop, Pool& pool, Auth& auth, const Clock& clock, BlobApi* blobs = nullptr)
      : loop_(loop), pool_(pool), auth_(auth), clock_(clock), blobs_(blobs) {}
  ~Api();

  void Handle(net::HttpRequest req, net::Responder respond);

  // Pool hook: wakes long polls waiting on this job.
  void JobChanged(int64_t job_id);

 private:
  using Respond = std::shared_ptr<net::Responder>;
  // Returns true once it has responded. Called with timed_out = true when the
  // wait ran out, and must respond then.
  using Probe = std::function<bool(bool timed_out)>;

  void Route(const net::HttpRequest& req, const Principal& who, Respond respond);
  void SubmitJob(const net::HttpRequest& req, const Principal& who, Respond respond);
  void GetJob(const net::HttpRequest& req, const Principal& who, int64_t id, Respond respond);
  void ListJobs(const net::HttpRequest& req, const Principal& who, Respond respond);
  void CancelJob(const Principal& who, int64_t id, Respond respond);
  void JobLogs(const net::HttpRequest& req, const Principal& who, int64_t id, Respond respond);
  void ListNodes(Respond respond, const std::string& only);
  // The provider event log of one node, or of every node when `node` is "".
  void NodeEvents(const net::HttpRequest& req, const std::string& node, Respond respond);
  void Queue(const Principal& who, Respond respond);
  void Groups(Respond respond);

  // Checks that `who` may see job `id`; NotFound otherwise (no existence leak).
  Result<JobDetail> VisibleJob(const Principal& who, int64_t id);
  // Runs `probe` now and again on every change of `job_id` until it
  // responds; after `wait_ms` runs it a last time with timed_out = true.
  void WaitOn(int64_t job_id, int64_t wait_ms, Probe probe);

  struct Waiter {
    Probe probe;
    net::EventLoop::TimerId timer;
  };

  net::EventLoop& loop_;
  Pool& pool_;
  Auth& auth_;
  const Clock& clock_;
  BlobApi* blobs_;
  uint64_t next_waiter_ = 1;
  std::map<int64_t, std::map<uint64_t, Waiter>> waiters_;  // job id -> waiter id -> waiter
};

}  // namespace gpupool::server
