// A test fixture serving the whole REST API (Api, BlobApi, IdentityApi, and
// the QuotaApi and BackupApi modules with storage quotas) on
// a real HTTP server and event loop thread, over a real SQLite store and
// blob directory, with a cast of principals: the admin, two members (alice
// and bob), a provider (pat), an enrolled agent (node "a") and the join
// token. For server tests only.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/ids.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "server/accounting_api.h"
#include "server/agent_hub.h"
#include "server/api.h"
#include "server/backup_api.h"
#include "server/blob_api.h"
#include "server/blob_service.h"
#include "server/blob_testing.h"
#include "server/identity_api.h"
#include "server/metrics_api.h"
#include "server/pool.h"
#include "server/quota_api.h"
#include "server/selftest_api.h"
#include "server/servers_api.h"
#include "server/session_gateway.h"
#include "server/storage_quotas.h"
#include "store/sqlite_store.h"

namespace gpupool::server {

// The hello of node "a", the fixture's enrolled agent: 8 CPUs, 32 GiB, one A100.
inline proto::Hello NodeAHello() {
  proto::Hello h;
  h.node_name = "a";
  h.agent_instance = "i1";
  h.cpu_milli = 8000;
  h.memory_mib = 32768;
  h.gpus.push_back({0, "a-gpu0", "A100", 81920, 8, 0, true});
  return h;
}

class ApiTestServer : public ::testing::Test {
 protected:
  void SetUp() override { Start(Options()); }
  void TearDown() override { Stop(); }
  virtual PoolOptions Options() { return {}; }
  virtual AgentHubOptions HubOpts() { return {}; }
  virtual StorageQuotasOptions QuotaOpts() { return {}; }
  virtual ApiOptions ApiOpts() {
    ApiOptions o;
    o.per_token = {};  // no rate limit unless a test asks for one
    return o;
  }

  // Runs `fn` on the loop thread (where the Pool lives) and returns its value.
  template <typename F>
  auto OnLoop(F fn) {
    std::promise<decltype(fn())> done;
    loop_.Post([&] { done.set_value(fn()); });
    return done.get_future().get();
  }

  // A user with a token of all its role's scopes.
  std::string AddUser(const std::string& name, Role role) {
    EXPECT_TRUE(auth_->AddUser(name, role, "").ok());
    auto t = auth_->CreateToken(name, role, "test", kAllScopes, 0);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? t->secret : "";
  }

  void Start(PoolOptions pool_options) {
    clock_.SetMs(RealClock().NowMs());  // blob ages are file times
    store_ = *SqliteStore::Open(dir_.path() + "/state.db");
    auth_ = std::make_unique<Auth>(*store_, clock_);
    auto boot = auth_->Bootstrap(dir_.path(), "");
    ASSERT_TRUE(boot.ok()) << boot.status().ToString();
    admin_ = boot->admin_token;
    join_ = boot->join_token;
    alice_ = AddUser("alice", Role::kMember);
    bob_ = AddUser("bob", Role::kMember);
    pat_ = AddUser("pat", Role::kProvider);
    auto agent = auth_->EnrollAgent("a", "", "", "");
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    agent_ = agent->secret;
    BlobServiceOptions bo;
    bo.dir = dir_.path() + "/blobs";
    bo.fsync = false;
    blobs_ = *BlobService::Open(bo);
    quotas_ = std::make_unique<StorageQuotas>(*store_, clock_, QuotaOpts());
    PoolHooks hooks;
    hooks.manifest_stored = [this](const std::string& id) { return blobs_->HasManifest(id); };
    hooks.outbox_ready = [this](const std::string& node) {
      if (hub_) hub_->OutboxReady(node);
    };
    hooks.within_quota = [this](Tx& tx, const std::string& owner, const std::string& group,
                                std::string_view what, const std::function<Status()>& change) {
      return quotas_->Guard(tx, owner, group, what, change);
    };
    hooks.job_changed = [this](int64_t job) {
      if (api_) api_->JobChanged(job);
      if (gateway_) gateway_->JobChanged(job);
    };
    hooks.counted = [this](const PoolCounts& counts) {
      if (metrics_api_) metrics_api_->Counted(counts);
    };
    pool_ = std::make_unique<Pool>(*store_, clock_, pool_options, hooks);
    agent_blobs_ = std::make_unique<AgentBlobScope>(*store_, *blobs_, clock_);
    blob_api_ =
        std::make_unique<BlobApi>(loop_, *pool_, *blobs_, clock_, BlobApiOptions{},
                                  BlobApiAgents{agent_blobs_.get(), auth_.get()}, quotas_.get());
    identity_ =
        std::make_unique<IdentityApi>(loop_, *auth_, clock_, IdentityApiOptions{},
                                      [this](const std::string& node, const std::string& reason) {
                                        revoked_.push_back(node);
                                        EXPECT_TRUE(pool_->RevokeNode(node, reason).ok());
                                      });
    ApiOptions api_options = ApiOpts();
    api_options.observe = [this](std::string_view route, std::string_view method, int status,
                                 double seconds) {
      metrics_.ApiRequest(route, method, status, seconds);
    };
    api_ = std::make_unique<Api>(loop_, *pool_, *auth_, clock_, api_options, blob_api_.get(),
                                 identity_.get());
    metrics_api_ = std::make_unique<MetricsApi>(*pool_, *auth_, clock_, metrics_, blob_api_.get());
    api_->AddModule(*metrics_api_);
    quota_api_ = std::make_unique<QuotaApi>(*auth_, *quotas_);
    api_->AddModule(*quota_api_);
    accounting_ = std::make_unique<AccountingService>(*store_, clock_, AccountingOptions{});
    budgets_ = std::make_unique<BudgetKeeper>(*store_, clock_, *accounting_, BudgetHooks{});
    accounting_api_ =
        std::make_unique<AccountingApi>(*auth_, *accounting_, *budgets_, *store_, clock_);
    api_->AddModule(*accounting_api_);
    BackupApiOptions backups;
    backups.db_path = dir_.path() + "/state.db";
    backups.backup_dir = dir_.path() + "/backups";
    backup_api_ = std::make_unique<BackupApi>(*auth_, clock_, backups);
    api_->AddModule(*backup_api_);
    servers_api_ = std::make_unique<ServersApi>(OneServer("test:1:00", &base_, 1));
    api_->AddModule(*servers_api_);
    api_->AddModule(selftest_api_);
    // The agent channel and the session gateway, routed as the server does.
    AgentHubOptions hub_options = HubOpts();
    hub_options.blob_scope = agent_blobs_.get();
    hub_ = std::make_unique<AgentHub>(loop_, *pool_, *auth_, 60'000, false, hub_options);
    gateway_ = std::make_unique<SessionGateway>(loop_, *pool_, *auth_, *hub_, clock_);
    net::HttpHandlers handlers;
    handlers.on_request = [this](net::HttpRequest req, net::Responder r) {
      if (SessionGateway::Handles(req.path)) return r(gateway_->Handle(req));
      api_->Handle(std::move(req), std::move(r));
    };
    handlers.on_upgrade = [this](const net::HttpRequest& req)
        -> std::variant<std::shared_ptr<net::WsHandler>, net::HttpResponse> {
      if (SessionGateway::Handles(req.path)) return gateway_->Upgrade(req);
      return hub_->Upgrade(req);
    };
    auto http = net::HttpServer::Start(loop_, net::HttpServerOptions{}, handlers);
    ASSERT_TRUE(http.ok()) << http.status().ToString();
    http_ = *std::move(http);
    base_ = "http://127.0.0.1:" + std::to_string(http_->port());
    // The sessions' own origin, as --sessions-listen.
    auto sessions =
        net::HttpServer::Start(loop_, net::HttpServerOptions{}, gateway_->SessionsOriginHandlers());
    ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
    sessions_http_ = *std::move(sessions);
    gateway_->ServeSessionsAt({.url = "", .tls = false, .port = sessions_http_->port()});
    sessions_base_ = "http://127.0.0.1:" + std::to_string(sessions_http_->port());
    thread_ = std::thread([this] { loop_.Run(); });
  }

  void Stop() {
    if (!thread_.joinable()) return;
    OnLoop([this] {
      hub_->CloseAll();
      http_->Close();
      sessions_http_->Close();
      return 0;
    });
    loop_.Stop();
    thread_.join();
    gateway_.reset();
    hub_.reset();
    api_.reset();
    metrics_api_.reset();
    backup_api_.reset();
    servers_api_.reset();
    quota_api_.reset();
    identity_.reset();
    blob_api_.reset();
    pool_.reset();
    agent_blobs_.reset();
    quotas_.reset();
  }

  net::HttpResponse Call(const std::string& method, const std::string& target,
                         const std::string& token, std::string body = "",
                         const std::string& content_type = "",
                         const std::map<std::string, std::string>& headers = {}) {
    net::HttpCall c;
    c.base_url = base_;
    c.method = method;
    c.target = target;
    c.body = std::move(body);
    c.headers = headers;
    if (!token.empty()) c.headers["authorization"] = "Bearer " + token;
    if (!content_type.empty()) c.headers["content-type"] = content_type;
    auto r = net::Fetch(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : net::HttpResponse{};
  }
  static nlohmann::json Json(const net::HttpResponse& r) {
    return nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  }
  static std::string ErrorMessage(const net::HttpResponse& r) {
    nlohmann::json j = Json(r);
    return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
  }

  // A node "a" with one GPU and job 1 of alice placed on it (attempt 1.1):
  // the whole GPU, or the share `spec` asks (resources.gpu_milli).
  std::string PlaceJob(JobSpec spec = {}) {
    if (spec.run.empty()) spec.run = "train";
    spec.name = "j";
    if (spec.resources.gpu_milli == 0) spec.resources.gpus = 1;
    return OnLoop([&] {
      auto node = pool_->AgentHello(NodeAHello());
      EXPECT_TRUE(node.ok());
      EXPECT_TRUE(pool_->Submit(spec, "alice").ok());
      EXPECT_EQ(*pool_->Schedule(), 1);
      return node->node_id;
    });
  }
  net::HttpResponse PostCheckpoint(int64_t job, const std::string& attempt,
                                   const std::string& manifest, const std::string& token) {
    return Call("POST", "/v1/jobs/" + std::to_string(job) + "/checkpoints", token,
                nlohmann::json{{"attempt", attempt}, {"manifest", manifest}}.dump());
  }

  testing::TempDir dir_;
  FakeClock clock_;
  net::EventLoop loop_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Auth> auth_;
  std::unique_ptr<BlobService> blobs_;
  std::unique_ptr<AgentBlobScope> agent_blobs_;
  std::unique_ptr<StorageQuotas> quotas_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<BlobApi> blob_api_;
  std::unique_ptr<QuotaApi> quota_api_;
  std::unique_ptr<AccountingService> accounting_;
  std::unique_ptr<BudgetKeeper> budgets_;
  std::unique_ptr<AccountingApi> accounting_api_;
  std::unique_ptr<BackupApi> backup_api_;
  std::unique_ptr<ServersApi> servers_api_;
  SelftestApi selftest_api_;
  std::unique_ptr<IdentityApi> identity_;
  std::unique_ptr<Api> api_;
  metrics::ServerMetrics metrics_;
  std::unique_ptr<MetricsApi> metrics_api_;
  std::unique_ptr<AgentHub> hub_;
  std::unique_ptr<SessionGateway> gateway_;
  std::unique_ptr<net::HttpServer> http_;
  std::unique_ptr<net::HttpServer> sessions_http_;
  std::thread thread_;
  std::string base_, sessions_base_;
  std::string admin_, join_, agent_, alice_, bob_, pat_;
  std::vector<std::string> revoked_;
};

}  // namespace gpupool::server
