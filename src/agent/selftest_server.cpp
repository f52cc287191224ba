// `gpupool agent selftest`: the checks of the server (agent/selftest.h).
#include <chrono>
#include <cstdio>
#include <ctime>

#include "agent/enrollment.h"
#include "agent/selftest.h"
#include "common/clock.h"
#include "net/http_client.h"
#include "net/server_list.h"

namespace gpupool::agent {

namespace {

int64_t MonotonicUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.1f ms" : "%.0f ms", ms);
  return buf;
}

}  // namespace

Result<int64_t> ClockOffsetMs(std::string_view date, int64_t sent_ms, int64_t received_ms) {
  // RFC 9110's IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
  std::tm tm{};
  const std::string text(date);
  const char* end = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') {
    return Status::InvalidArgument("not an HTTP date: \"" + text + "\"");
  }
  const int64_t server_ms = static_cast<int64_t>(::timegm(&tm)) * 1000;
  // The date is whole seconds, taken somewhere in the request: its middle
  // second, on average half a second after the whole second it names.
  const int64_t middle = sent_ms + (received_ms - sent_ms) / 2;
  return server_ms + 500 - middle;
}

SelftestCheck ClockCheck(int64_t offset_ms) {
  const int64_t off = offset_ms < 0 ? -offset_ms : offset_ms;
  // offset_ms is the server's clock minus ours.
  SelftestCheck c{"clock", CheckResult::kPass,
                  "this machine's clock is " + Ms(static_cast<double>(off)) +
                      (offset_ms > 0 ? " behind" : " ahead of") + " the server's (within 1 s)",
                  ""};
  const std::string fix = "keep the clock synchronized: `timedatectl set-ntp true` (or chrony)";
  if (off > 60'000) {
    c.result = CheckResult::kFail;
    c.fix = "certificates and tokens are checked against the clock: " + fix;
  } else if (off > 2'500) {
    c.result = CheckResult::kWarn;
    c.fix = "job times and usage are recorded by the server's clock, logs by this one's: " + fix;
  }
  return c;
}

void CheckServer(const SelftestOptions& o, SelftestReport& report) {
  const std::vector<std::string> servers = net::SplitServerList(o.agent.server_url);
  if (servers.empty()) {
    for (const char* name : {"server", "pool CA", "clock", "bandwidth"}) {
      report.checks.push_back({name, CheckResult::kSkip, "no --server given", ""});
    }
    return;
  }
  const std::string& url = servers.front();
  const bool tls = url.starts_with("https://");
  JoinToken join;
  if (!o.agent.join_token.empty()) {
    auto parsed = ParseJoinToken(o.agent.join_token);
    if (!parsed.ok()) {
      report.checks.push_back({"server", CheckResult::kFail, parsed.status().message(),
                               "copy the join token again from `gpupool admin join-token`"});
      return;
    }
    join = *parsed;
  }
  net::HttpCall call;
  call.base_url = url;
  call.target = "/healthz";
  call.timeout_ms = 10'000;
  call.tls.ca_file = o.agent.ca_file;
  call.tls.insecure = o.agent.insecure_tls;
  if (o.agent.ca_file.empty() && !o.agent.insecure_tls)
    call.tls.ca_fingerprint = join.ca_fingerprint;

  // The round trip: the best of three.
  Result<net::HttpResponse> answer = Status::Unavailable("not asked");
  int64_t best_us = -1, sent_ms = 0, received_ms = 0;
  for (int i = 0; i < 3; ++i) {
    const int64_t t0 = MonotonicUs(), w0 = RealClock().NowMs();
    answer = net::Fetch(call);
    if (!answer.ok()) break;
    const int64_t took = MonotonicUs() - t0;
    if (best_us < 0 || took < best_us) {
      best_us = took;
      sent_ms = w0;
      received_ms = RealClock().NowMs();
    }
  }
  if (!answer.ok()) {
    // Reachable without the pin? Then it is the CA that is wrong.
    net::HttpCall plain = call;
    plain.tls = {};
    plain.tls.insecure = true;
    const bool reachable = tls && !call.tls.insecure && net::Fetch(plain).ok();
    if (reachable) {
      report.checks.push_back({"server", CheckResult::kPass, url + " answers", ""});
      report.checks.push_back(
          {"pool CA", CheckResult::kFail, answer.status().message(),
           "the server's certificate does not chain to the CA the join token (or --ca-file) "
           "names: get a fresh join token from `gpupool admin join-token`; if it is fresh, "
           "something between here and the server presents another certificate"});
    } else {
      report.checks.push_back({"server", CheckResult::kFail, answer.status().message(),
                               "check the URL and port, DNS, and that a firewall lets this "
                               "machine reach the server (the agent connects out; nothing "
                               "connects in)"});
    }
    return;
  }
  if (answer->status != 200) {
    report.checks.push_back({"server", CheckResult::kFail,
                             url + "/healthz answered HTTP " + std::to_string(answer->status),
                             "is this a gpupool server? (its URL, e.g. https://HOST:8470)"});
    return;
  }
  report.checks.push_back(
      {"server", CheckResult::kPass, url + " answers; round trip " + Ms(best_us / 1000.0), ""});
  if (!tls) {
    report.checks.push_back({"pool CA", CheckResult::kWarn, "plain HTTP: no TLS",
                             "anyone on the path can read and change the traffic: use the "
                             "server's https:// URL"});
  } else if (call.tls.insecure) {
    report.checks.push_back({"pool CA", CheckResult::kWarn, "not checked (--insecure)",
                             "for development only: give the join token (it pins the pool CA)"});
  } else {
    report.checks.push_back(
        {"pool CA", CheckResult::kPass,
         call.tls.ca_fingerprint.empty()
             ? "the server's certificate verifies against " +
                   (o.agent.ca_file.empty() ? std::string("the system's CAs") : o.agent.ca_file)
             : "the server's certificate chains to the pool CA the join token names (" +
                   call.tls.ca_fingerprint.substr(0, 23) + "...)",
         ""});
  }
  auto date = answer->headers.find("date");
  auto offset = date == answer->headers.end()
                    ? Result<int64_t>(Status::NotFound("the server sent no Date header"))
                    : ClockOffsetMs(date->second, sent_ms, received_ms);
  report.checks.push_back(offset.ok() ? ClockCheck(*offset)
                                      : SelftestCheck{"clock", CheckResult::kWarn,
                                                      offset.status().message(),
                                                      "cannot compare the clocks"});

  if (join.secret.empty()) {
    report.checks.push_back(
        {"bandwidth", CheckResult::kSkip, "needs the join token (--join-token)", ""});
    return;
  }
  net::HttpCall download = call;
  download.target = "/v1/selftest/bytes?n=" + std::to_string(o.download_bytes);
  download.headers["Authorization"] = "Bearer " + join.secret;
  download.timeout_ms = 60'000;
  const int64_t t0 = MonotonicUs();
  auto bytes = net::Fetch(download);
  const double seconds = static_cast<double>(MonotonicUs() - t0) / 1e6;
  if (!bytes.ok() || bytes->status != 200 ||
      static_cast<int64_t>(bytes->body.size()) != o.download_bytes) {
    report.checks.push_back(
        {"bandwidth", CheckResult::kWarn,
         bytes.ok() ? "HTTP " + std::to_string(bytes->status) + ": " + bytes->body.substr(0, 200)
                    : bytes.status().message(),
         "could not measure the bandwidth to the server"});
    return;
  }
  const double mbit = static_cast<double>(o.download_bytes) * 8 / 1e6 / seconds;
  char detail[96];
  std::snprintf(detail, sizeof detail, "%.0f Mbit/s from the server (%lld MiB in %.2f s)", mbit,
                static_cast<long long>(o.download_bytes >> 20), seconds);
  SelftestCheck c{"bandwidth", CheckResult::kPass, detail, ""};
  if (mbit < 100) {
    c.result = CheckResult::kWarn;
    c.fix =
        "under 100 Mbit/s, job inputs, images and checkpoints move slowly: jobs start "
        "late and migrate slowly";
  }
  report.checks.push_back(c);
}

}  // namespace gpupool::agent
