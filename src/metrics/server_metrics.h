// ServerMetrics: what the server counts as it happens, between scrapes:
// API requests, scheduling passes, time waited in the queue, checkpoint
// uploads, migrations and reclaims. A prometheus-cpp registry holds them;
// every method is thread-safe (API handlers answer from worker threads too).
//
// Label values are bounded here, whatever the caller passes: a route is a
// pattern of the API's route table or "unmatched", a method one of the
// HTTP methods the API serves or "other", a reclaim cause one of
// kReclaimCauses. A client or agent cannot grow the number of series.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <prometheus/metric_family.h>

namespace gpupool::metrics {

// The reclaim causes, from the reason a provider's agent gave: "command"
// (its owner ran `gpupool provider reclaim`), "window" (an availability
// window closed), "owner_activity" (the owner's own processes on the GPU,
// or no sign that it is idle yet), "other".
inline constexpr std::string_view kReclaimCauses[] = {"command", "window", "owner_activity",
                                                      "other"};
std::string_view ReclaimCause(std::string_view reason);

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // An API request answered with `status` after `seconds`; `route` is the
  // matched pattern ("/v1/jobs/{id}"), empty when none matched.
  void ApiRequest(std::string_view route, std::string_view method, int status, double seconds);
  void SchedulingPass(double seconds);
  // Attempts placed, and attempts ordered to stop to make room for others.
  void Placed(int64_t placements, int64_t preemptions);
  // A job placed after waiting `seconds` since it was submitted or requeued.
  void QueueWait(double seconds);
  void CheckpointsUploaded(int64_t count, int64_t bytes);
  // Jobs restored from a checkpoint on another node than their last attempt's.
  void Migrations(int64_t count);
  // A provider reclaimed GPUs for `reason` (its agent's words).
  void Reclaim(std::string_view reason);

  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

}  // namespace gpupool::metrics
