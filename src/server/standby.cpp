#include "server/standby.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "server/http_errors.h"
#include "store/pg_store.h"

namespace gpupool::server {
namespace {

net::HttpResponse SendOn(const LeaderView& view, const net::HttpRequest& req) {
  if (view.leader_address.empty()) {
    net::HttpResponse r = ErrorResponse(
        Status::Unavailable("this server is a standby and no server leads yet; try again"));
    r.headers["Retry-After"] = "1";
    return r;
  }
  net::HttpResponse r = JsonResponse(
      307, {{"error", "this server is a standby: the leader is at " + view.leader_address},
            {"leader", view.leader_address}});
  r.headers["Location"] = view.leader_address + req.target;
  return r;
}

int64_t MonotonicMs() { return RealClock().MonoMs(); }

}  // namespace

std::string ServerProcessId() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + RandomHex(4);
}

Result<Led> LeadWhenElected(PgLeader& leader, const StandbyOptions& options,
                            const std::string& store_url) {
  GP_ASSIGN_OR_RETURN(Led led, StandBy(leader, options));
  GP_RETURN_IF_ERROR(PgStore::Open(store_url).status());
  return led;
}

std::string ApiUrl(bool tls, const std::string& host, uint16_t port) {
  return std::string(tls ? "https://" : "http://") +
         (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

Result<Led> StandBy(PgLeader& leader, const StandbyOptions& options) {
  net::EventLoop loop;
  LeaderView view;
  net::HttpHandlers handlers;
  handlers.on_request = [&](net::HttpRequest req, net::Responder r) {
    if (req.method == "GET" && req.path == "/healthz") {
      return r(JsonResponse(200, {{"status", "ok"},
                                  {"role", "standby"},
                                  {"leader", view.leader_address},
                                  {"epoch", view.epoch}}));
    }
    r(SendOn(view, req));
  };
  handlers.on_upgrade = [&](const net::HttpRequest& req)
      -> std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> {
    return SendOn(view, req);
  };
  net::HttpServerOptions opts;
  opts.host = options.host;
  opts.port = options.port;
  opts.tls = options.tls;
  opts.max_body_bytes = 1 << 20;
  GP_ASSIGN_OR_RETURN(auto http, net::HttpServer::Start(loop, opts, handlers));
  const uint16_t port = http->port();
  leader.set_address(ApiUrl(options.tls.has_value(), options.host, port));
  Status failed = Status::Ok();
  bool said = false;
  std::function<void()> tick = [&] {
    auto v = leader.Tick();
    if (v.ok()) {
      view = *v;
      if (view.leading) return loop.Stop();
      if (!said) {
        GP_LOG(kInfo) << "standing by on port " << port << ": the leader is "
                      << (view.leader_address.empty() ? "(none yet)" : view.leader_address)
                      << " (epoch " << view.epoch << ")";
        said = true;
      }
    } else {
      GP_LOG(kWarn) << "standby: " << v.status().ToString();
    }
    loop.RunAfter(std::max<int64_t>(100, options.lease_ms / 3), tick);
  };
  tick();
  if (!view.leading) loop.Run();
  http.reset();
  GP_LOG(kInfo) << "leading in epoch " << view.epoch;
  return Led{port, view.epoch};
}

LeaseKeeper::LeaseKeeper(PgLeader& leader, int64_t epoch, int64_t lease_ms)
    : leader_(leader), epoch_(epoch), lease_ms_(lease_ms), renewed_ms_(MonotonicMs()) {
  thread_ = std::thread([this] { Run(); });
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void LeaseKeeper::Run() {
  int64_t wait_ms = std::max<int64_t>(100, lease_ms_ / 3);
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(wait_ms), [this] { return stop_; })) {
    lock.unlock();
    wait_ms = Renew();
    lock.lock();
  }
}

int64_t LeaseKeeper::Renew() {
  // The lease runs from when the database took the renewal, which is after
  // this: counting from here errs on the early side.
  const int64_t started = MonotonicMs();
  auto v = leader_.Tick();
  if (v.ok() && v->leading && v->epoch == epoch_) {
    renewed_ms_ = started;
    return std::max<int64_t>(100, lease_ms_ / 3);
  }
  if (v.ok()) {
    GP_LOG(kError) << "lost the leadership of epoch " << epoch_ << " to "
                   << (v->leader_address.empty() ? "(none)" : v->leader_address) << " (epoch "
                   << v->epoch << "): stopping; started again, this server stands by";
    std::_Exit(3);
  }
  if (MonotonicMs() - renewed_ms_ >= lease_ms_) {
    GP_LOG(kError) << "could not renew the lease of epoch " << epoch_ << " before it ran out ("
                   << v.status().ToString() << "): stopping";
    std::_Exit(3);
  }
  GP_LOG(kWarn) << "lease renewal failed: " << v.status().ToString();
  return std::max<int64_t>(50, lease_ms_ / 10);
}

}  // namespace gpupool::server
