// Google Benchmark of TLS in net/: what https/wss cost against http/ws on
// loopback, with an in-process HttpServer on its own EventLoop thread
// (docs/performance.md, "TLS overhead"). Certificates come from net/pki.h:
// ECDSA P-256, a private CA that the client pins (TlsClientConfig::
// ca_fingerprint), TLS 1.3 as negotiated by OpenSSL 3.
//
//   BM_Fetch/<mode>: one net::Fetch: new TCP connection, handshake (TLS
//     modes), GET, a 95-byte JSON answer, close. mode: plain (http), tls
//     (https, pinned CA), mtls (https, pinned CA, a client certificate the
//     server requires and checks).
//   BM_WsRoundTrip/<mode>: a 64-byte text message to an echoing server and
//     back, on an open WebSocket: plain (ws) or tls (wss, pinned CA and a
//     client certificate). The client's EventLoop runs on the benchmark
//     thread, so no thread hand-off is timed on the client side.
//   BM_Bulk/<mode>: one Fetch whose answer is 16 MiB (plain or tls);
//     bytes_per_second is the body's.
//   BM_SslCtxNew: building an OpenSSL client context (SSL_CTX_new and
//     loading a client certificate and key), which net/ caches per
//     TlsClientConfig.
//
// Time is wall-clock time; CPU is the CPU time of the whole process (client
// and server threads) per iteration, which a busy machine disturbs less.
// Run: build/bin/gpupool-tls-bench --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "net/event_loop.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/pki.h"
#include "net/websocket.h"

namespace {

using gpupool::net::EventLoop;
using gpupool::net::Fetch;
using gpupool::net::HttpCall;
using gpupool::net::HttpHandlers;
using gpupool::net::HttpRequest;
using gpupool::net::HttpResponse;
using gpupool::net::HttpServer;
using gpupool::net::HttpServerOptions;
using gpupool::net::Responder;
using gpupool::net::TlsClientConfig;
using gpupool::net::TlsServerConfig;
using gpupool::net::WsClientOptions;
using gpupool::net::WsConnection;
using gpupool::net::WsHandler;

constexpr size_t kBulkBytes = size_t{16} << 20;

enum Mode { kPlain = 0, kTls = 1, kMutualTls = 2 };

void Die(const std::string& what) {
  std::fprintf(stderr, "tls_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Must(gpupool::Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}

class EchoHandler : public WsHandler {
 public:
  void OnOpen(std::shared_ptr<WsConnection> conn) override { conn_ = std::move(conn); }
  void OnMessage(std::string text) override {
    if (conn_) conn_->Send(std::move(text));
  }
  void OnClose(std::string) override { conn_.reset(); }

 private:
  std::shared_ptr<WsConnection> conn_;
};

// Three servers (plain, TLS, TLS requiring a client certificate) on one
// EventLoop thread, and the client's files, for the whole run.
class Servers {
 public:
  Servers() {
    char tmpl[] = "/tmp/gpupool-tls-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
    dir_ = tmpl;
    auto ca = Must(gpupool::net::CreateCa("bench CA", 2), "CreateCa");
    auto server = Must(gpupool::net::IssueServerCert(ca, "bench", {"127.0.0.1"}, 2), "server");
    auto csr = Must(gpupool::net::CreateKeyAndCsr("bench client"), "CSR");
    auto client = Must(gpupool::net::SignClientCsr(ca, csr.cert, "bench client", 2), "client");
    Write("ca.pem", ca.cert);
    Write("server.pem", server.cert + ca.cert);
    Write("server.key", server.key);
    Write("client.pem", client);
    Write("client.key", csr.key);
    pin_ = Must(gpupool::net::CertFingerprint(ca.cert), "fingerprint");

    HttpHandlers h;
    h.on_request = [this](HttpRequest req, Responder respond) {
      HttpResponse r;
      if (req.path == "/bulk") {
        r.content_type = "application/octet-stream";
        r.body = bulk_;
      } else {
        r.body =
            R"({"id":"job-000042","state":"running","gpus":2,"node":"node-17","user":"alice"})";
        r.body += std::string(95 - r.body.size(), ' ');
      }
      respond(std::move(r));
    };
    h.on_upgrade = [](const HttpRequest&) { return std::make_shared<EchoHandler>(); };
    bulk_.assign(kBulkBytes, 'b');
    for (Mode mode : {kPlain, kTls, kMutualTls}) {
      HttpServerOptions options;
      options.max_body_bytes = 2 * kBulkBytes;
      if (mode != kPlain) {
        TlsServerConfig tls;
        tls.cert_chain_file = Path("server.pem");
        tls.key_file = Path("server.key");
        if (mode == kMutualTls) {
          tls.client_ca_file = Path("ca.pem");
          tls.require_client_cert = true;
        }
        options.tls = tls;
      }
      servers_[mode] = Must(HttpServer::Start(loop_, options, h), "HttpServer::Start");
    }
    thread_ = std::thread([this] { loop_.Run(); });
  }

  ~Servers() {
    std::promise<void> done;
    loop_.Post([&] {
      for (auto& s : servers_) s.reset();
      done.set_value();
    });
    done.get_future().wait();
    loop_.Stop();
    thread_.join();
    std::filesystem::remove_all(dir_);
  }

  std::string Url(Mode mode, const std::string& scheme) const {
    return scheme + (mode == kPlain ? "" : "s") +
           "://127.0.0.1:" + std::to_string(servers_[mode]->port());
  }

  TlsClientConfig ClientTls(Mode mode) const {
    TlsClientConfig tls;
    tls.ca_fingerprint = pin_;
    if (mode == kMutualTls) {
      tls.client_cert_file = Path("client.pem");
      tls.client_key_file = Path("client.key");
    }
    return tls;
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary) << text;
  }

  std::string dir_;
  std::string pin_;
  std::string bulk_;
  EventLoop loop_;
  std::unique_ptr<HttpServer> servers_[3];
  std::thread thread_;
};

Servers* servers = nullptr;

HttpCall Call(Mode mode, std::string target) {
  HttpCall call;
  call.base_url = servers->Url(mode, "http");
  call.target = std::move(target);
  call.tls = servers->ClientTls(mode);
  return call;
}

void BM_Fetch(benchmark::State& state) {
  auto mode = static_cast<Mode>(state.range(0));
  HttpCall call = Call(mode, "/v1/jobs/42");
  Must(Fetch(call), "warm-up Fetch");  // makes the cached client context
  for (auto _ : state) {
    auto res = Fetch(call);
    if (!res.ok() || res->status != 200) Die("Fetch: " + res.status().ToString());
    benchmark::DoNotOptimize(res->body.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Fetch)->ArgName("mode")->Arg(kPlain)->Arg(kTls)->Arg(kMutualTls)->UseRealTime()->MeasureProcessCPUTime();

void BM_Bulk(benchmark::State& state) {
  auto mode = static_cast<Mode>(state.range(0));
  HttpCall call = Call(mode, "/bulk");
  for (auto _ : state) {
    auto res = Fetch(call);
    if (!res.ok() || res->body.size() != kBulkBytes) Die("bulk Fetch: " + res.status().ToString());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBulkBytes));
}
BENCHMARK(BM_Bulk)->ArgName("mode")->Arg(kPlain)->Arg(kTls)->UseRealTime()->MeasureProcessCPUTime();

// The client side of BM_WsRoundTrip: each callback stops the client loop,
// so the benchmark thread runs the loop until the next event.
class RoundTripClient : public WsHandler {
 public:
  explicit RoundTripClient(EventLoop& loop) : loop_(loop) {}
  void OnOpen(std::shared_ptr<WsConnection> conn) override {
    conn_ = std::move(conn);
    loop_.Stop();
  }
  void OnMessage(std::string text) override {
    last_ = std::move(text);
    loop_.Stop();
  }
  void OnClose(std::string reason) override {
    closed_ = true;
    reason_ = std::move(reason);
    conn_.reset();
    loop_.Stop();
  }

  std::shared_ptr<WsConnection> conn_;
  std::string last_;
  bool closed_ = false;
  std::string reason_;

 private:
  EventLoop& loop_;
};

void BM_WsRoundTrip(benchmark::State& state) {
  auto mode = static_cast<Mode>(state.range(0));
  EventLoop loop;
  auto client = std::make_shared<RoundTripClient>(loop);
  WsClientOptions options;
  options.url = servers->Url(mode == kPlain ? kPlain : kMutualTls, "ws") + "/v1/agent";
  options.tls = servers->ClientTls(mode == kPlain ? kPlain : kMutualTls);
  WsConnect(loop, options, client);
  loop.Run();
  if (!client->conn_) Die("WsConnect: " + client->reason_);
  const std::string message(64, 'm');
  for (auto _ : state) {
    client->conn_->Send(message);
    loop.Run();
    if (client->closed_ || client->last_.size() != message.size()) Die("echo: " + client->reason_);
  }
  state.SetItemsProcessed(state.iterations());
  client->conn_->Close("done");
  loop.Run();
}
BENCHMARK(BM_WsRoundTrip)->ArgName("mode")->Arg(kPlain)->Arg(kTls)->UseRealTime()->MeasureProcessCPUTime();

void BM_SslCtxNew(benchmark::State& state) {
  std::string cert = servers->Path("client.pem");
  std::string key = servers->Path("client.key");
  for (auto _ : state) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      Die("SSL_CTX setup");
    }
    SSL_CTX_free(ctx);
  }
}
BENCHMARK(BM_SslCtxNew)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  servers = new Servers();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  delete servers;
  return 0;
}
