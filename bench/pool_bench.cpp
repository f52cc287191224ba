// gpupool-pool-bench: end-to-end measurements against a running pool over
// the public HTTP API (docs/performance.md).
//
//   gpupool-pool-bench latency --jobs 200
//     One job at a time: POST /v1/jobs, then GET /v1/jobs/{id}?until=running
//     (long poll). The figure is the wall time from just before the POST to
//     the answer that shows the job running (the agent reported its process
//     started) or already finished. Each job is waited for until it finishes
//     before the next is submitted, so only one job is in the pool at a time.
//     Also reported: submit to finished, which for a short command ("true")
//     includes everything its executor does to start and end it.
//
//   gpupool-pool-bench --executor process latency --jobs 200
//     The same with jobs asking for an executor (sandbox, process) or an
//     image (--image oci-archive:/path): the executor's start cost.
//
//   gpupool-pool-bench throughput --jobs 2000 --concurrency 8
//     Submits the jobs from --concurrency threads as fast as the server takes
//     them, waits until none is pending, scheduled or running, and reports
//     jobs / (last finished_ms - first submit). Jobs ask for 0 GPUs by
//     default, so GPU count does not cap how many run at once.
//
// The server, the token and how the server's certificate is checked are
// resolved as the CLI resolves them (cli::ResolveEndpoint): --server,
// --token, --ca-fingerprint (pin the pool CA), --ca-file (trust a CA bundle),
// else GPUPOOL_SERVER, GPUPOOL_TOKEN, GPUPOOL_CA_FINGERPRINT, GPUPOOL_CA_FILE,
// else the CLI's config file. Verification is never switched off here (an
// `insecure` stored in the config file is ignored): a TLS pool needs its CA
// pinned or trusted (`gpupool dev --env-file` writes GPUPOOL_CA_FINGERPRINT;
// the server's CA is <data-dir>/tls/ca.crt). HTTP calls share connections
// kept open (net::KeepAliveClient), as a program that makes many calls
// would; --new-connections gives each call its own (net::Fetch), as the CLI
// does (the figures before issue 21's keep-alive). The last line of output is
// "RESULT <mode> key=value ...", for scripts.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/client.h"
#include "net/http_client.h"

namespace gpupool::bench {
namespace {

using json = nlohmann::json;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double SteadyMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Common {
  cli::Endpoint endpoint;  // resolved as the CLI does (see the top)
  int jobs = 0;
  std::string run;
  int gpus = 0;
  std::string executor;  // "" = the node's default
  std::string image;     // "" = the host system
  double timeout_s = 300;
  bool new_connections = false;  // a connection per call instead of kept ones
};

cli::ApiClient MakeApi(const Common& c) { return cli::ApiClient(c.endpoint, !c.new_connections); }

json JobSpec(const Common& c) {
  json spec = {{"run", c.run}, {"resources", {{"gpus", c.gpus}}}};
  if (!c.executor.empty()) spec["executor"] = c.executor;
  if (!c.image.empty()) spec["image"] = c.image;
  return spec;
}

// Nearest-rank percentile of sorted values.
double Pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

bool IsFinished(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

int Latency(const Common& c, bool wait_finished) {
  cli::ApiClient api = MakeApi(c);
  std::vector<double> total, post, server_side, finished;
  int timeouts = 0, errors = 0;
  double deadline = SteadyMs() + c.timeout_s * 1000;
  for (int i = 0; i < c.jobs; ++i) {
    if (SteadyMs() > deadline) {
      std::cerr << "latency: stopping after " << i << " jobs: --timeout-s reached\n";
      break;
    }
    double t0 = SteadyMs();
    auto posted = api.Post("/v1/jobs", JobSpec(c));
    if (!posted.ok()) {
      std::cerr << "latency: POST /v1/jobs: " << posted.status().ToString() << "\n";
      if (++errors > 5) return 1;
      continue;
    }
    double t_post = SteadyMs();
    int64_t id = posted->value("id", int64_t{0});
    std::string target = "/v1/jobs/" + std::to_string(id);
    auto got = api.Get(target + "?until=running&wait=30s", 40'000);
    if (!got.ok()) {
      std::cerr << "latency: GET " << target << ": " << got.status().ToString() << "\n";
      if (++errors > 5) return 1;
      continue;
    }
    json job = *std::move(got);
    double t1 = SteadyMs();
    std::string state = job.value("state", "");
    if (state != "running" && !IsFinished(state)) {
      ++timeouts;
      std::cerr << "latency: job " << id << " still " << state
                << " after 30s: " << job.value("reason", "") << "\n";
      continue;
    }
    total.push_back(t1 - t0);
    post.push_back(t_post - t0);
    int64_t created = job.value("created_ms", int64_t{0}),
            started = job.value("started_ms", int64_t{0});
    if (created > 0 && started >= created)
      server_side.push_back(static_cast<double>(started - created));
    if (wait_finished && !IsFinished(state)) {
      for (int k = 0; k < 10 && !IsFinished(job.value("state", "")); ++k) {
        auto done = api.Get(target + "?until=finished&wait=30s", 40'000);
        if (!done.ok()) {
          std::cerr << "latency: GET " << target << ": " << done.status().ToString() << "\n";
          break;
        }
        job = *std::move(done);
      }
    }
    if (IsFinished(job.value("state", ""))) finished.push_back(SteadyMs() - t0);
  }
  if (total.empty()) {
    std::cerr << "latency: no job reached running\n";
    return 1;
  }
  for (auto* v : {&total, &post, &server_side, &finished}) std::sort(v->begin(), v->end());
  double mean = 0;
  for (double v : total) mean += v;
  mean /= static_cast<double>(total.size());
  std::cout << "latency: " << total.size() << " jobs (\"" << c.run << "\", " << c.gpus << " GPU)"
            << ", submit to running, ms: p50 " << Fmt(Pct(total, 50)) << "  p90 "
            << Fmt(Pct(total, 90)) << "  p99 " << Fmt(Pct(total, 99)) << "  max "
            << Fmt(total.back()) << "  mean " << Fmt(mean) << "\n"
            << "  POST alone, ms: p50 " << Fmt(Pct(post, 50)) << "  p99 " << Fmt(Pct(post, 99))
            << "; server's created_ms to started_ms: p50 " << Fmt(Pct(server_side, 50)) << "  p99 "
            << Fmt(Pct(server_side, 99)) << "\n"
            << "  submit to finished (the command has run and its result is in), ms: p50 "
            << Fmt(Pct(finished, 50)) << "  p99 " << Fmt(Pct(finished, 99)) << "\n";
  std::cout << "RESULT latency jobs=" << total.size() << " p50_ms=" << Fmt(Pct(total, 50))
            << " p90_ms=" << Fmt(Pct(total, 90)) << " p99_ms=" << Fmt(Pct(total, 99))
            << " max_ms=" << Fmt(total.back()) << " mean_ms=" << Fmt(mean)
            << " post_p50_ms=" << Fmt(Pct(post, 50))
            << " server_p50_ms=" << Fmt(Pct(server_side, 50))
            << " server_p99_ms=" << Fmt(Pct(server_side, 99))
            << " finished_p50_ms=" << Fmt(Pct(finished, 50)) << " timeouts=" << timeouts
            << " errors=" << errors << std::endl;
  return timeouts == 0 && errors == 0 ? 0 : 1;
}

int Throughput(const Common& c, int concurrency) {
  cli::ApiClient api = MakeApi(c);
  std::atomic<int> next{0};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::vector<int64_t> ids;
  ids.reserve(c.jobs);
  const json spec = JobSpec(c);
  int64_t first_submit_ms = WallMs();
  double t_start = SteadyMs();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < c.jobs; i = next++) {
        auto job = api.Post("/v1/jobs", spec);
        if (!job.ok()) {
          if (errors++ < 5)
            std::cerr << "throughput: POST /v1/jobs: " << job.status().ToString() << "\n";
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        ids.push_back(job->value("id", int64_t{0}));
      }
    });
  }
  for (auto& t : threads) t.join();
  double t_submitted = SteadyMs();
  std::cout << "throughput: submitted " << ids.size() << " jobs in "
            << Fmt((t_submitted - t_start) / 1000.0) << " s ("
            << Fmt(static_cast<double>(ids.size()) * 1000.0 / (t_submitted - t_start))
            << " submits/s, " << concurrency << " submitters), " << errors.load() << " errors"
            << std::endl;
  if (ids.empty()) return 1;

  // Wait until nothing is pending, scheduled or running.
  double deadline = t_start + c.timeout_s * 1000;
  bool drained = false;
  while (SteadyMs() < deadline) {
    auto r = api.Get("/v1/jobs?state=pending,scheduled,running&limit=1");
    if (r.ok()) {
      if (r->contains("jobs") && (*r)["jobs"].empty()) {
        drained = true;
        break;
      }
    } else {
      std::cerr << "throughput: " << r.status().ToString() << "\n";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  double t_drained = SteadyMs();
  if (!drained)
    std::cerr << "throughput: jobs still live after --timeout-s " << c.timeout_s << "\n";

  // Read every job back (ascending pages from the first id).
  std::sort(ids.begin(), ids.end());
  std::set<int64_t> mine(ids.begin(), ids.end());
  std::map<std::string, int> states;
  int64_t last_finished = 0, seen = 0;
  int64_t after = ids.front() - 1;
  while (seen < static_cast<int64_t>(mine.size())) {
    auto page = api.Get("/v1/jobs?after=" + std::to_string(after) + "&limit=1000");
    if (!page.ok()) {
      std::cerr << "throughput: " << page.status().ToString() << "\n";
      return 1;
    }
    json r = *std::move(page);
    if (!r.contains("jobs") || r["jobs"].empty()) break;
    for (const json& j : r["jobs"]) {
      int64_t id = j.value("id", int64_t{0});
      after = std::max(after, id);
      if (!mine.count(id)) continue;
      ++seen;
      ++states[j.value("state", "?")];
      last_finished = std::max(last_finished, j.value("finished_ms", int64_t{0}));
    }
  }
  double span_s = static_cast<double>(last_finished - first_submit_ms) / 1000.0;
  double rate = span_s > 0 ? static_cast<double>(mine.size()) / span_s : 0;
  std::cout << "throughput: " << mine.size() << " jobs (\"" << c.run << "\", " << c.gpus
            << " GPU) from first submit to last"
            << " finished in " << Fmt(span_s) << " s: " << Fmt(rate)
            << " jobs/s (client saw the pool drained after " << Fmt((t_drained - t_start) / 1000.0)
            << " s)\n  states:";
  for (const auto& [s, n] : states) std::cout << " " << s << "=" << n;
  std::cout << "\n";
  int succeeded = states.count("succeeded") ? states["succeeded"] : 0;
  std::cout << "RESULT throughput jobs=" << mine.size() << " jobs_per_s=" << Fmt(rate)
            << " span_s=" << Fmt(span_s) << " submit_s=" << Fmt((t_submitted - t_start) / 1000.0)
            << " succeeded=" << succeeded << " errors=" << errors.load() << std::endl;
  bool ok = drained && errors == 0 && succeeded == c.jobs;
  if (!ok) std::cerr << "throughput: not every job succeeded\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace gpupool::bench

int main(int argc, char** argv) {
  gpupool::bench::Common c;
  gpupool::cli::Endpoint flags;
  CLI::App app{
      "gpupool-pool-bench: submit-to-running latency and job throughput of a running pool"};
  app.require_subcommand(1);
  app.add_option("--server", flags.server, "server URL (or GPUPOOL_SERVER)");
  app.add_option("--token", flags.token, "API token (or GPUPOOL_TOKEN)");
  app.add_option("--ca-fingerprint", flags.tls.ca_fingerprint,
                 "pin the pool CA: sha256:<hex> (or GPUPOOL_CA_FINGERPRINT)");
  app.add_option("--ca-file", flags.tls.ca_file,
                 "trust this CA bundle, e.g. the server's <data-dir>/tls/ca.crt (or "
                 "GPUPOOL_CA_FILE)");
  app.add_option("--timeout-s", c.timeout_s, "give up after this long")->capture_default_str();
  app.add_option("--executor", c.executor, "the executor jobs ask for (default: the node's)");
  app.add_option("--image", c.image, "the image jobs run in (default: the host system)");
  app.add_flag("--new-connections", c.new_connections,
               "a new connection (and TLS handshake) for every call, as the CLI makes");

  auto* lat = app.add_subcommand("latency", "submit-to-running latency, one job at a time");
  int lat_jobs = 200;
  std::string lat_run = "sleep 0.05";
  int lat_gpus = 1;
  bool no_wait = false;
  lat->add_option("--jobs", lat_jobs, "jobs to time")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  lat->add_option("--run", lat_run, "the job's command")->capture_default_str();
  lat->add_option("--gpus", lat_gpus, "GPUs each job asks for")->capture_default_str();
  lat->add_flag("--no-wait-finished", no_wait, "submit the next job as soon as one is running");

  auto* thr = app.add_subcommand("throughput", "jobs per second through the pool");
  int thr_jobs = 2000, concurrency = 8;
  std::string thr_run = "true";
  int thr_gpus = 0;
  thr->add_option("--jobs", thr_jobs, "jobs to run")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  thr->add_option("--concurrency", concurrency, "submitting threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  thr->add_option("--run", thr_run, "the job's command")->capture_default_str();
  thr->add_option("--gpus", thr_gpus, "GPUs each job asks for")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto endpoint = gpupool::cli::ResolveEndpoint(flags);
  if (!endpoint.ok() || endpoint->token.empty()) {
    std::cerr << "gpupool-pool-bench: "
              << (endpoint.ok() ? "no token" : endpoint.status().message())
              << ": set --server and --token (or GPUPOOL_SERVER and GPUPOOL_TOKEN)\n";
    return 2;
  }
  c.endpoint = *std::move(endpoint);
  c.endpoint.tls.insecure = false;  // never without verification (see the top)
  if (c.endpoint.server.starts_with("https:") && c.endpoint.tls.ca_fingerprint.empty() &&
      c.endpoint.tls.ca_file.empty()) {
    std::cerr << "gpupool-pool-bench: note: " << c.endpoint.server
              << " is checked against the system's CAs; for a pool with its own CA pass "
                 "--ca-fingerprint (GPUPOOL_CA_FINGERPRINT) or --ca-file\n";
  }
  if (lat->parsed()) {
    c.jobs = lat_jobs;
    c.run = lat_run;
    c.gpus = lat_gpus;
    return gpupool::bench::Latency(c, !no_wait);
  }
  c.jobs = thr_jobs;
  c.run = thr_run;
  c.gpus = thr_gpus;
  return gpupool::bench::Throughput(c, concurrency);
}
