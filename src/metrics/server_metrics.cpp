#include "metrics/server_metrics.h"

#include <algorithm>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace gpupool::metrics {

namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Histogram;

// Seconds. An API call is mostly under a millisecond; a long poll waits up
// to a minute.
const Histogram::BucketBoundaries kRequestBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const Histogram::BucketBoundaries kPassBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,    0.25,  0.5,    1,     2.5,  5,     10};
// From an idle pool's milliseconds to a busy campus's days.
const Histogram::BucketBoundaries kWaitBuckets = {
    0.01, 0.1,  1,    5,        10,        30,    60,        300,
    900,  1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400};

constexpr std::string_view kMethods[] = {"GET",   "POST", "PUT",    "DELETE",
                                         "PATCH", "HEAD", "OPTIONS"};

std::string_view BoundedMethod(std::string_view method) {
  return std::find(std::begin(kMethods), std::end(kMethods), method) != std::end(kMethods)
             ? method
             : "other";
}

bool Has(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

std::string_view ReclaimCause(std::string_view reason) {
  if (Has(reason, "reclaimed by the owner")) return "command";
  if (Has(reason, "availability windows")) return "window";
  if (Has(reason, "owner runs process") || Has(reason, "in use by its owner") ||
      Has(reason, "not yet idle") || Has(reason, "utilization cannot be read") ||
      Has(reason, "no utilization sample")) {
    return "owner_activity";
  }
  return "other";
}

struct ServerMetrics::Families {
  prometheus::Registry registry;
  Family<Counter>& requests = prometheus::BuildCounter()
                                  .Name("gpupool_api_requests_total")
                                  .Help(
                                      "API requests answered, by route pattern, method and "
                                      "HTTP status code.")
                                  .Register(registry);
  Family<Histogram>& request_seconds =
      prometheus::BuildHistogram()
          .Name("gpupool_api_request_duration_seconds")
          .Help(
              "Time from a request's arrival to its answer, by route pattern and method "
              "(long polls included).")
          .Register(registry);
  Histogram& pass_seconds = prometheus::BuildHistogram()
                                .Name("gpupool_scheduling_pass_duration_seconds")
                                .Help(
                                    "Duration of a scheduling pass, applying its decisions "
                                    "included.")
                                .Register(registry)
                                .Add({}, kPassBuckets);
  Counter& placements = prometheus::BuildCounter()
                            .Name("gpupool_scheduling_placements_total")
                            .Help("Attempts placed by scheduling passes.")
                            .Register(registry)
                            .Add({});
  Counter& preemptions = prometheus::BuildCounter()
                             .Name("gpupool_scheduling_preemptions_total")
                             .Help("Attempts ordered to stop to make room for another job.")
                             .Register(registry)
                             .Add({});
  Histogram& queue_wait = prometheus::BuildHistogram()
                              .Name("gpupool_queue_wait_seconds")
                              .Help(
                                  "Time a job waited in the queue before it was placed, from "
                                  "its submission or its last requeue.")
                              .Register(registry)
                              .Add({}, kWaitBuckets);
  Counter& checkpoints = prometheus::BuildCounter()
                             .Name("gpupool_checkpoint_uploads_total")
                             .Help("Checkpoints that attempts uploaded and the server accepted.")
                             .Register(registry)
                             .Add({});
  Counter& checkpoint_bytes = prometheus::BuildCounter()
                                  .Name("gpupool_checkpoint_upload_bytes_total")
                                  .Help("Size of the accepted checkpoints (all their files).")
                                  .Register(registry)
                                  .Add({});
  Counter& migrations = prometheus::BuildCounter()
                            .Name("gpupool_migrations_total")
                            .Help(
                                "Jobs restarted from a checkpoint on another node than their "
                                "previous attempt's.")
                            .Register(registry)
                            .Add({});
  Family<Counter>& reclaims = prometheus::BuildCounter()
                                  .Name("gpupool_reclaims_total")
                                  .Help("Provider reclaims (GPUs taken back), by cause.")
                                  .Register(registry);
};

ServerMetrics::ServerMetrics() : f_(std::make_unique<Families>()) {
  for (std::string_view cause : kReclaimCauses) f_->reclaims.Add({{"cause", std::string(cause)}});
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::ApiRequest(std::string_view route, std::string_view method, int status,
                               double seconds) {
  const std::string r = route.empty() ? "unmatched" : std::string(route);
  const std::string m(BoundedMethod(method));
  const std::string code = status >= 100 && status <= 599 ? std::to_string(status) : "other";
  f_->requests.Add({{"route", r}, {"method", m}, {"code", code}}).Increment();
  f_->request_seconds.Add({{"route", r}, {"method", m}}, kRequestBuckets)
      .Observe(std::max(0.0, seconds));
}

void ServerMetrics::SchedulingPass(double seconds) {
  f_->pass_seconds.Observe(std::max(0.0, seconds));
}

void ServerMetrics::Placed(int64_t placements, int64_t preemptions) {
  if (placements > 0) f_->placements.Increment(static_cast<double>(placements));
  if (preemptions > 0) f_->preemptions.Increment(static_cast<double>(preemptions));
}

void ServerMetrics::QueueWait(double seconds) { f_->queue_wait.Observe(std::max(0.0, seconds)); }

void ServerMetrics::CheckpointsUploaded(int64_t count, int64_t bytes) {
  if (count > 0) f_->checkpoints.Increment(static_cast<double>(count));
  if (bytes > 0) f_->checkpoint_bytes.Increment(static_cast<double>(bytes));
}

void ServerMetrics::Migrations(int64_t count) {
  if (count > 0) f_->migrations.Increment(static_cast<double>(count));
}

void ServerMetrics::Reclaim(std::string_view reason) {
  f_->reclaims.Add({{"cause", std::string(ReclaimCause(reason))}}).Increment();
}

std::vector<prometheus::MetricFamily> ServerMetrics::Collect() const {
  return f_->registry.Collect();
}

}  // namespace gpupool::metrics
