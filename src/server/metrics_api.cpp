#include "server/metrics_api.h"

#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "common/version.h"
#include "metrics/families.h"
#include "metrics/process_families.h"
#include "server/gpu_readings.h"
#include "server/http_errors.h"

namespace gpupool::server {

namespace {

// Counts keyed by (state, class, group), with groups outside `known`
// folded into "other".
std::vector<metrics::JobTally> Tally(const std::vector<JobCount>& counts,
                                     const std::set<std::string>& known) {
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> by_key;
  for (const JobCount& c : counts) {
    by_key[{std::string(JobStateName(c.state)), std::string(JobPriorityName(c.priority)),
            known.count(c.group) ? c.group : "other"}] += c.count;
  }
  std::vector<metrics::JobTally> out;
  for (const auto& [key, n] : by_key)
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), n});
  return out;
}

void AddGpus(const NodeStatus& st, std::vector<metrics::GpuSample>& out) {
  for (const GpuInfo& g : st.node.gpus) {
    metrics::GpuSample s;
    static_cast<telemetry::GpuReading&>(s) = ReadingOf(st, g);
    s.uuid = g.uuid;
    s.model = g.name;
    s.simulated = g.simulated;
    if (auto m = st.gpu_reserved_mib.find(g.uuid); m != st.gpu_reserved_mib.end())
      s.allocated_memory_mib = m->second;
    out.push_back(std::move(s));
  }
}

}  // namespace

MetricsApi::MetricsApi(Pool& pool, Auth& auth, const Clock& clock, metrics::ServerMetrics& events,
                       const BlobApi* blobs)
    : pool_(pool), auth_(auth), clock_(clock), events_(events), blobs_(blobs) {}

void MetricsApi::AddRoutes(ApiRoutes& routes) {
  routes.Add("GET", "/metrics", Access::kAuthorizedFirst, Action::kMetricsRead,
             [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
               (*respond)(Scrape());
             });
}

void MetricsApi::Counted(const PoolCounts& c) {
  events_.Placed(c.placements, c.preemptions);
  for (int64_t ms : c.queue_waits_ms) events_.QueueWait(static_cast<double>(ms) / 1000.0);
  events_.CheckpointsUploaded(c.checkpoints, c.checkpoint_bytes);
  events_.Migrations(c.migrations);
  for (const std::string& reason : c.reclaim_reasons) events_.Reclaim(reason);
}

Result<std::set<std::string>> MetricsApi::KnownGroups() {
  std::set<std::string> known{"default"};
  GP_ASSIGN_OR_RETURN(auto labs, auth_.ListGroups());
  for (const GroupRecord& g : labs) known.insert(g.name);
  for (const sched::GroupConfig& g : pool_.scheduler_config().groups) known.insert(g.name);
  return known;
}

Result<metrics::PoolSample> MetricsApi::Sample() {
  metrics::PoolSample sample;
  GP_ASSIGN_OR_RETURN(auto known, KnownGroups());
  GP_ASSIGN_OR_RETURN(auto live, pool_.LiveJobCounts());
  sample.jobs = Tally(live, known);
  sample.finished = Tally(pool_.FinishedJobCounts(), known);
  // Every class, 0 when none waits: a series that vanishes when the queue
  // empties reads as "no data", not as an empty queue.
  for (JobPriority p :
       {JobPriority::kInteractive, JobPriority::kNormal, JobPriority::kOpportunistic})
    sample.pending_by_class[std::string(JobPriorityName(p))] = 0;
  for (const JobCount& c : live) {
    if (c.state == JobState::kPending)
      sample.pending_by_class[std::string(JobPriorityName(c.priority))] += c.count;
  }
  GP_ASSIGN_OR_RETURN(auto nodes, pool_.ListNodes());
  for (const NodeStatus& st : nodes) {
    ++sample.nodes_by_status[st.status];
    if (st.connected) ++sample.agents_connected;
    AddGpus(st, sample.gpus);
  }
  if (blobs_ != nullptr && blobs_->last_gc()) sample.blob_bytes = blobs_->last_gc()->bytes_kept;
  return sample;
}

net::HttpResponse MetricsApi::Scrape() {
  auto sample = Sample();
  if (!sample.ok()) return ErrorResponse(sample.status());
  net::HttpResponse r;
  r.content_type = std::string(metrics::kTextContentType);
  r.body = metrics::RenderText(events_.Collect());
  r.body += metrics::PoolText(*sample);
  if (auto process = metrics::ReadProcessSample(); process.ok()) {
    r.body += metrics::ProcessText(*process, static_cast<double>(clock_.NowMs()) / 1000, kVersion);
  }
  return r;
}

}  // namespace gpupool::server
