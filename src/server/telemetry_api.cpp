#include "server/telemetry_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/log.h"
#include "common/units.h"
#include "server/gpu_readings.h"
#include "server/http_errors.h"
#include "server/job_access.h"
#include "server/pool_rules.h"

namespace gpupool::server {

namespace {

using nlohmann::json;

constexpr int64_t kDefaultRangeMs = 3'600'000;  // the last hour
constexpr int64_t kDefaultPoints = 500;

json Num(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

const json kGpuFields = {"t_ms",
                         "samples",
                         "utilization",
                         "utilization_max",
                         "memory_used_mib",
                         "memory_used_max_mib",
                         "memory_total_mib",
                         "temperature_c",
                         "power_w",
                         "energy_j",
                         "allocated"};
const json kPoolFields = {"t_ms",           "samples",         "gpus",    "gpus_reporting",
                          "allocated_gpus", "utilization_sum", "power_w", "jobs_running",
                          "jobs_pending",   "nodes_connected"};

json GpuPoints(const std::vector<telemetry::GpuPoint>& points) {
  json out = json::array();
  for (const telemetry::GpuPoint& p : points) {
    out.push_back({p.t_ms, p.samples, Num(p.utilization), Num(p.utilization_max),
                   Num(p.memory_used_mib), Num(p.memory_used_max_mib), Num(p.memory_total_mib),
                   Num(p.temperature_c), Num(p.power_w), Num(p.energy_j), Num(p.allocated)});
  }
  return out;
}

// Series of GPUs: [{"gpu", "points"}]; `step`, when given, gets the step
// they were read at (`asked` when there are none).
json GpuSeriesJson(const std::vector<GpuSeries>& series, int64_t asked, int64_t* step = nullptr) {
  json out = json::array();
  if (step) *step = asked;
  for (const GpuSeries& s : series) {
    if (step) *step = s.step_ms;
    out.push_back({{"gpu", s.gpu}, {"points", GpuPoints(s.points)}});
  }
  return out;
}

json PoolPoints(const std::vector<telemetry::PoolPoint>& points) {
  json out = json::array();
  for (const telemetry::PoolPoint& p : points) {
    out.push_back({p.t_ms, p.samples, Num(p.gpus), Num(p.gpus_reporting), Num(p.allocated_gpus),
                   Num(p.utilization_sum), Num(p.power_w), Num(p.jobs_running), Num(p.jobs_pending),
                   Num(p.nodes_connected)});
  }
  return out;
}

struct Range {
  int64_t since_ms = 0, until_ms = 0, step_ms = 0;
};

Result<Range> RangeParams(const net::HttpRequest& req, int64_t now, int64_t finest_step) {
  Range r;
  GP_ASSIGN_OR_RETURN(r.until_ms, QueryTime(req, "until", now, now));
  GP_ASSIGN_OR_RETURN(r.since_ms, QueryTime(req, "since", now, r.until_ms - kDefaultRangeMs));
  if (auto it = req.query.find("step"); it != req.query.end() && !it->second.empty()) {
    auto step = ParseDurationMs(it->second);
    if (!step.ok()) return step.status().WithContext("query parameter step");
    r.step_ms = *step;
  } else {
    r.step_ms =
        std::max(finest_step, (r.until_ms - r.since_ms + kDefaultPoints - 1) / kDefaultPoints);
  }
  return r;
}

}  // namespace

Result<std::vector<telemetry::Tier>> ParseTiers(std::string_view text) {
  std::vector<telemetry::Tier> tiers;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
    const size_t colon = item.find(':');
    auto step = ParseDurationMs(item.substr(0, colon));
    auto keep = colon == std::string_view::npos
                    ? Result<int64_t>(Status::InvalidArgument("no KEEP"))
                    : ParseDurationMs(item.substr(colon + 1));
    const std::string what = "telemetry tier \"" + std::string(item) + "\"";
    if (!step.ok() || !keep.ok() || *step <= 0)
      return Status::InvalidArgument(what + ": expected STEP:KEEP such as 10s:1d");
    if (*keep < *step) return Status::InvalidArgument(what + ": keeps less than one step");
    if (!tiers.empty() && (*step <= tiers.back().step_ms || *step % tiers.back().step_ms != 0)) {
      return Status::InvalidArgument(what + ": its step must be a multiple of the previous tier's");
    }
    tiers.push_back({*step, *keep});
  }
  if (tiers.empty()) return Status::InvalidArgument("telemetry tiers: none given");
  return tiers;
}

TelemetryApi::TelemetryApi(net::EventLoop& loop, Pool& pool, const Clock& clock,
                           HistoryStore& store, TelemetryOptions options)
    : loop_(loop),
      pool_(pool),
      clock_(clock),
      store_(store),
      options_(std::move(options)),
      downsampler_(options_.tiers),
      last_prune_ms_(clock.NowMs()) {}

TelemetryApi::~TelemetryApi() {
  if (started_) loop_.Cancel(timer_);
}

void TelemetryApi::Start() {
  started_ = true;
  timer_ = loop_.RunAfter(options_.sample_ms, [this] {
    Sample();
    Start();
  });
}

void TelemetryApi::Sample() {
  const int64_t now = clock_.NowMs();
  auto nodes = pool_.ListNodes();
  if (!nodes.ok()) {
    GP_LOG(kWarn) << "telemetry: cannot list the nodes: " << nodes.status().ToString();
    return;
  }
  telemetry::PoolReading pool;
  for (const NodeStatus& st : *nodes) {
    if (!st.connected) continue;
    ++pool.nodes_connected;
    for (const GpuInfo& g : st.node.gpus) {
      const telemetry::GpuReading r = ReadingOf(st, g);
      ++pool.gpus;
      pool.allocated_gpus += r.allocated_milli / 1000.0;
      if (r.utilization_percent >= 0) {
        ++pool.gpus_reporting;
        pool.utilization_sum += r.utilization_percent / 100.0;
      }
      if (r.power_mw >= 0) pool.power_w += static_cast<double>(r.power_mw) / 1000.0;
      downsampler_.AddGpu(now, r);
    }
    // A share's own processes: a series of its own, kept with its job.
    for (const ShareUse& share : st.shares) {
      auto g = std::find_if(st.node.gpus.begin(), st.node.gpus.end(),
                            [&](const GpuInfo& gpu) { return gpu.uuid == share.gpu_uuid; });
      if (g == st.node.gpus.end()) continue;
      telemetry::GpuReading r;
      r.node = telemetry::ShareSeriesKey(share.attempt_id);
      r.gpu = g->index;
      r.memory_used_mib = share.memory_used_mib;
      r.memory_total_mib = share.memory_cap_mib;
      downsampler_.AddGpu(now, r);
    }
  }
  if (auto live = pool_.LiveJobCounts(); live.ok()) {
    for (const JobCount& c : *live) {
      if (c.state == JobState::kPending) pool.jobs_pending += c.count;
      if (c.state == JobState::kRunning) pool.jobs_running += c.count;
    }
  }
  downsampler_.AddPool(now, pool);
  telemetry::Downsampler::Flushed flushed = downsampler_.Flush(now);
  const bool prune = now - last_prune_ms_ >= options_.prune_every_ms;
  if (prune) last_prune_ms_ = now;
  if (flushed.gpus.empty() && flushed.pool.empty() && !prune) return;
  worker_.Submit([this, flushed = std::move(flushed), prune, now] {
    if (Status s = store_.Write(flushed); !s.ok())
      GP_LOG(kWarn) << "telemetry: history not written: " << s.ToString();
    if (!prune) return;
    if (Status s = store_.Prune(now); !s.ok())
      GP_LOG(kWarn) << "telemetry: history not pruned: " << s.ToString();
  });
}

void TelemetryApi::AddRoutes(ApiRoutes& routes) {
  routes.Add("GET", "/v1/nodes/{name}/telemetry", Access::kAuthorizedFirst, Action::kPoolRead,
             [this](net::HttpRequest& req, const Principal&, const PathParams& params,
                    Respond respond) { NodeHistory(req, params.find("name")->second, respond); });
  routes.Add("GET", "/v1/pool/telemetry", Access::kAuthorizedFirst, Action::kPoolRead,
             [this](net::HttpRequest& req, const Principal&, const PathParams&, Respond respond) {
               PoolHistory(req, respond);
             });
  routes.Add(
      "GET", "/v1/jobs/{id}/telemetry", Access::kHandlerAuthorizes, Action::kJobRead,
      [this](net::HttpRequest&, const Principal& who, const PathParams& params, Respond respond) {
        auto id = ParseJobId(params.find("id")->second);
        if (!id.ok()) return (*respond)(ErrorResponse(id.status()));
        JobHistory(who, *id, respond);
      });
}

void TelemetryApi::NodeHistory(const net::HttpRequest& req, const std::string& node,
                               Respond respond) {
  auto nodes = pool_.ListNodes();
  if (!nodes.ok()) return (*respond)(ErrorResponse(nodes.status()));
  auto found = std::find_if(nodes->begin(), nodes->end(), [&](const NodeStatus& st) {
    return st.node.name == node || st.node.id == node;
  });
  if (found == nodes->end()) return (*respond)(ErrorResponse(Status::NotFound("no node " + node)));
  const std::string name = found->node.name;
  auto range = RangeParams(req, clock_.NowMs(), options_.tiers.front().step_ms);
  if (!range.ok()) return (*respond)(ErrorResponse(range.status()));
  worker_.Submit([this, name, r = *range, respond] {
    auto series = store_.Gpus(name, {}, r.since_ms, r.until_ms, r.step_ms);
    if (!series.ok()) return (*respond)(ErrorResponse(series.status()));
    int64_t step = 0;
    json gpus = GpuSeriesJson(*series, r.step_ms, &step);
    (*respond)(JsonResponse(200, {{"node", name},
                                  {"since_ms", r.since_ms},
                                  {"until_ms", r.until_ms},
                                  {"step_ms", step},
                                  {"fields", kGpuFields},
                                  {"gpus", gpus}}));
  });
}

void TelemetryApi::PoolHistory(const net::HttpRequest& req, Respond respond) {
  auto range = RangeParams(req, clock_.NowMs(), options_.tiers.front().step_ms);
  if (!range.ok()) return (*respond)(ErrorResponse(range.status()));
  worker_.Submit([this, r = *range, respond] {
    auto series = store_.Pool(r.since_ms, r.until_ms, r.step_ms);
    if (!series.ok()) return (*respond)(ErrorResponse(series.status()));
    (*respond)(JsonResponse(200, {{"since_ms", r.since_ms},
                                  {"until_ms", r.until_ms},
                                  {"step_ms", series->step_ms},
                                  {"fields", kPoolFields},
                                  {"points", PoolPoints(series->points)}}));
  });
}

void TelemetryApi::JobHistory(const Principal& who, int64_t job, Respond respond) {
  auto d = VisibleJob(pool_, who, job, Action::kJobRead);
  if (!d.ok()) return (*respond)(ErrorResponse(d.status()));
  auto nodes = pool_.ListNodes();
  if (!nodes.ok()) return (*respond)(ErrorResponse(nodes.status()));
  std::map<std::string, const Node*> by_id;
  for (const NodeStatus& st : *nodes) by_id[st.node.id] = &st.node;
  // Each attempt rank's GPUs, by node name and index, over its time.
  struct Part {
    std::string attempt;
    int32_t rank = 0;
    std::string node;
    std::vector<int32_t> gpus;
    int64_t from_ms = 0, to_ms = 0;
  };
  std::vector<Part> parts;
  const int64_t now = clock_.NowMs();
  for (const Attempt& a : d->attempts) {
    if (a.started_ms == 0 && a.created_ms == 0) continue;
    const int64_t from = a.started_ms > 0 ? a.started_ms : a.created_ms;
    const int64_t to = a.finished_ms > 0 ? a.finished_ms : now;
    const std::vector<NodeHolding> holdings = HoldingsOf(a);  // rank order
    for (size_t rank = 0; rank < holdings.size(); ++rank) {
      auto node = by_id.find(holdings[rank].node_id);
      if (node == by_id.end() || holdings[rank].gpu_uuids.empty() || to <= from) continue;
      Part p{a.id, static_cast<int32_t>(rank), node->second->name, {}, from, to};
      for (const std::string& uuid : holdings[rank].gpu_uuids) {
        for (const GpuInfo& g : node->second->gpus)
          if (g.uuid == uuid) p.gpus.push_back(g.index);
      }
      if (!p.gpus.empty()) parts.push_back(std::move(p));
    }
  }
  const int64_t finest = options_.tiers.front().step_ms;
  worker_.Submit([this, parts = std::move(parts), job, finest, respond] {
    json attempts = json::array();
    for (const Part& p : parts) {
      const int64_t step =
          std::max(finest, (p.to_ms - p.from_ms + kDefaultPoints - 1) / kDefaultPoints);
      auto series = store_.Gpus(p.node, p.gpus, p.from_ms, p.to_ms, step);
      if (!series.ok()) return (*respond)(ErrorResponse(series.status()));
      int64_t used_step = 0;
      json gpus = GpuSeriesJson(*series, step, &used_step);
      json attempt = {{"attempt", p.attempt}, {"rank", p.rank},   {"node", p.node},
                      {"from_ms", p.from_ms}, {"to_ms", p.to_ms}, {"step_ms", used_step},
                      {"gpus", gpus}};
      // A share (one GPU, rank 0): what its own processes held, beside
      // its whole GPU's series.
      if (p.rank == 0) {
        auto share =
            store_.Gpus(telemetry::ShareSeriesKey(p.attempt), {}, p.from_ms, p.to_ms, step);
        if (!share.ok()) return (*respond)(ErrorResponse(share.status()));
        if (!share->empty()) attempt["share"] = GpuSeriesJson(*share, step);
      }
      attempts.push_back(std::move(attempt));
    }
    (*respond)(JsonResponse(200, {{"job", job}, {"fields", kGpuFields}, {"attempts", attempts}}));
  });
}

}  // namespace gpupool::server
