// TLS in net/ over real handshakes on 127.0.0.1: https Fetch with a pinned
// CA, a CA file or no verification; client certificates (mutual TLS); wss;
// slow clients over TLS. The certificates come from net/pki.h and are
// written once to a temporary directory for the whole suite.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "net/event_loop.h"
#include "net/http.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net/net_test_util.h"
#include "net/pki.h"
#include "net/websocket.h"

namespace gpupool::net {
namespace {

using namespace std::chrono_literals;
using test::kWait;
using test::OnLoop;
using test::RawClient;
using test::Recorder;
using Clock = std::chrono::steady_clock;

// A blocking TLS client on OpenSSL that verifies nothing, to send exact
// bytes (pipelining, a slow header) over TLS.
class RawTlsClient {
 public:
  explicit RawTlsClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{static_cast<time_t>(std::chrono::seconds(kWait).count()), 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    ok_ = SSL_connect(ssl_) == 1;
    ERR_clear_error();
  }
  ~RawTlsClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) close(fd_);
    ERR_clear_error();
  }
  bool ok() const { return ok_; }
  bool Send(std::string_view data) {
    return SSL_write(ssl_, data.data(), static_cast<int>(data.size())) ==
           static_cast<int>(data.size());
  }
  // A TLS close_notify, then the TCP close.
  void CloseNotifyAndClose() {
    SSL_shutdown(ssl_);
    close(fd_);
    fd_ = -1;
  }
  // Reads until `n` complete responses (with Content-Length) are buffered.
  std::vector<std::string> ReadResponses(size_t n) {
    std::vector<std::string> out;
    while (out.size() < n) {
      size_t head_end = buf_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t cl = buf_.find("Content-Length: ");
        size_t len =
            cl == std::string::npos || cl > head_end ? 0 : std::stoul(buf_.substr(cl + 16));
        if (buf_.size() >= head_end + 4 + len) {
          out.push_back(buf_.substr(0, head_end + 4 + len));
          buf_.erase(0, head_end + 4 + len);
          continue;
        }
      }
      if (ReadMore() != kData) break;
    }
    return out;
  }
  // True when the server closed the connection within the timeout.
  bool WaitForClose() {
    while (true) {
      Event e = ReadMore();
      if (e != kData) return e == kClosed;
    }
  }

 private:
  enum Event { kData, kClosed, kTimeout };
  Event ReadMore() {
    char tmp[4096];
    int n = SSL_read(ssl_, tmp, sizeof tmp);
    if (n > 0) {
      buf_.append(tmp, static_cast<size_t>(n));
      return kData;
    }
    int err = SSL_get_error(ssl_, n);
    bool timeout = err == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK);
    ERR_clear_error();
    return timeout ? kTimeout : kClosed;
  }

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool ok_ = false;
  std::string buf_;
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    signal(SIGPIPE, SIG_IGN);  // OpenSSL writes to sockets the server closed
    char tmpl[] = "/tmp/gpupool-tls-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ca_ = *CreateCa("pool CA", 30);
    other_ca_ = *CreateCa("other CA", 30);
    Write("ca.pem", ca_.cert);
    Write("other_ca.pem", other_ca_.cert);
    // The server sends its CA after its certificate, for pinning clients.
    PemPair server = *IssueServerCert(ca_, "pool server", {"127.0.0.1", "localhost"}, 30);
    Write("server.pem", server.cert + ca_.cert);
    Write("server.key", server.key);
    Write("server_leaf_only.pem", server.cert);
    server_cert_ = server.cert;
    PemPair no_ip = *IssueServerCert(ca_, "pool server", {"pool.example.org"}, 30);
    Write("no_ip.pem", no_ip.cert + ca_.cert);
    Write("no_ip.key", no_ip.key);
    PemPair csr = *CreateKeyAndCsr("whatever the client asks");
    client_cert_ = *SignClientCsr(ca_, csr.cert, "agent-7", 30);
    Write("client.pem", client_cert_);
    Write("client.key", csr.key);
    // A client certificate used as a server's: EKU clientAuth only.
    Write("client_chain.pem", client_cert_ + ca_.cert);
    PemPair other_csr = *CreateKeyAndCsr("agent-7");
    Write("other_client.pem", *SignClientCsr(other_ca_, other_csr.cert, "agent-7", 30));
    Write("other_client.key", other_csr.key);
  }

  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static void Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary | std::ios::trunc) << text;
  }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }

  static TlsServerConfig ServerTls(std::string cert = "server.pem",
                                   std::string key = "server.key") {
    TlsServerConfig c;
    c.cert_chain_file = Path(cert);
    c.key_file = Path(key);
    return c;
  }
  static TlsServerConfig MutualTls(bool require) {
    TlsServerConfig c = ServerTls();
    c.client_ca_file = Path("ca.pem");
    c.require_client_cert = require;
    return c;
  }
  static TlsClientConfig Pinned(const PemPair& ca = ca_) {
    TlsClientConfig c;
    c.ca_fingerprint = *CertFingerprint(ca.cert);
    return c;
  }
  static TlsClientConfig WithClientCert(TlsClientConfig c, const std::string& name = "client") {
    c.client_cert_file = Path(name + ".pem");
    c.client_key_file = Path(name + ".key");
    return c;
  }

  // A server whose answer lists what it knows of the client:
  // "tls=1 cn=... serial=... fp=...".
  void StartServer(TlsServerConfig tls, HttpServerOptions options = {}) {
    options.tls = std::move(tls);
    HttpHandlers h;
    h.on_request = [](HttpRequest req, Responder respond) {
      HttpResponse r;
      r.content_type = "text/plain";
      r.body = Describe(req);
      respond(std::move(r));
    };
    StartServer(std::move(h), std::move(options));
  }

  void StartServer(HttpHandlers handlers, HttpServerOptions options) {
    auto server = HttpServer::Start(loop_, std::move(options), std::move(handlers));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    thread_ = std::thread([this] { loop_.Run(); });
  }

  void TearDown() override {
    if (thread_.joinable()) {
      OnLoop(loop_, [this] { server_.reset(); });
      loop_.Stop();
      thread_.join();
    }
  }

  static std::string Describe(const HttpRequest& req) {
    return std::string("tls=") + (req.tls ? "1" : "0") + " cn=" + req.client_cert_cn +
           " serial=" + req.client_cert_serial + " fp=" + req.client_cert_fingerprint;
  }

  std::string Url(const std::string& scheme = "https", const std::string& host = "127.0.0.1") {
    return scheme + "://" + host + ":" + std::to_string(server_->port());
  }

  HttpCall Call(TlsClientConfig tls, std::string base_url = "") {
    HttpCall c;
    c.base_url = base_url.empty() ? Url() : std::move(base_url);
    c.target = "/v1/whoami";
    c.tls = std::move(tls);
    c.timeout_ms = 10'000;
    return c;
  }

  static inline std::string dir_;
  static inline PemPair ca_;
  static inline PemPair other_ca_;
  static inline std::string client_cert_;
  static inline std::string server_cert_;

  EventLoop loop_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

constexpr char kAnonymous[] = "tls=1 cn= serial= fp=";

// ---- server and pinning ------------------------------------------------

TEST_F(TlsTest, FetchWithThePinnedCa) {
  StartServer(ServerTls());
  for (int i = 0; i < 3; ++i) {  // the second and third reuse the cached context
    auto res = Fetch(Call(Pinned()));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, kAnonymous);
  }
  // Any spelling of the fingerprint pins the same CA.
  TlsClientConfig upper = Pinned();
  upper.ca_fingerprint = upper.ca_fingerprint.substr(7);
  for (char& c : upper.ca_fingerprint) c = static_cast<char>(std::toupper(c));
  auto res = Fetch(Call(upper));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  // A host name instead of the IP: no host name check when pinning.
  res = Fetch(Call(Pinned(), Url("https", "localhost")));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
}

// A kept connection carries later calls without a new handshake.
TEST_F(TlsTest, AKeepAliveClientShakesHandsOnce) {
  StartServer(ServerTls());
  KeepAliveClient client;
  for (int i = 0; i < 3; ++i) {
    auto res = client.Fetch(Call(Pinned()));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(res->body, kAnonymous);
  }
  EXPECT_EQ(client.connections_opened(), 1);
  // A call with another pin never rides the connection the first pin
  // checked: it shakes hands itself, and is refused.
  TlsClientConfig wrong = Pinned();
  wrong.ca_fingerprint = "sha256:" + std::string(64, '0');
  auto refused = client.Fetch(Call(wrong));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
  EXPECT_EQ(client.connections_opened(), 2);
}

TEST_F(TlsTest, WrongPinIsRefusedWithThePinInTheMessage) {
  StartServer(ServerTls());
  auto call = Call(Pinned(other_ca_));
  auto res = Fetch(call);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(res.status().message(),
            "TLS: the server's certificate chain does not contain the pinned CA " +
                call.tls.ca_fingerprint + "; refusing to connect to " + call.base_url);
}

TEST_F(TlsTest, PinNeedsTheServerToSendItsCa) {
  StartServer(ServerTls("server_leaf_only.pem"));
  auto res = Fetch(Call(Pinned()));
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("does not contain the pinned CA"), std::string::npos)
      << res.status().message();
  // Pinning the leaf itself works: it is in the chain.
  TlsClientConfig leaf;
  leaf.ca_fingerprint = *CertFingerprint(server_cert_);
  res = Fetch(Call(leaf));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
}

TEST_F(TlsTest, PinnedLeafMustBeAServerCertificate) {
  // The server presents a client certificate (EKU clientAuth) from the
  // pinned CA: the chain holds the pin, but the purpose check fails.
  StartServer(ServerTls("client_chain.pem", "client.key"));
  auto res = Fetch(Call(Pinned()));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(res.status().message().find(
                "TLS: the server's certificate does not verify against the pinned CA"),
            std::string::npos)
      << res.status().message();
  EXPECT_NE(res.status().message().find("unsuitable certificate purpose"), std::string::npos)
      << res.status().message();
}

TEST_F(TlsTest, CaFileModeChecksTheIpAddress) {
  StartServer(ServerTls());
  TlsClientConfig tls;
  tls.ca_file = Path("ca.pem");
  auto res = Fetch(Call(tls));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, kAnonymous);
  res = Fetch(Call(tls, Url("https", "localhost")));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  // Trusting another CA fails.
  tls.ca_file = Path("other_ca.pem");
  res = Fetch(Call(tls));
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("TLS: cannot verify the certificate of https://127.0.0.1:"),
            std::string::npos)
      << res.status().message();
}

TEST_F(TlsTest, CaFileModeRefusesACertificateWithoutTheIp) {
  StartServer(ServerTls("no_ip.pem", "no_ip.key"));
  TlsClientConfig tls;
  tls.ca_file = Path("ca.pem");
  auto res = Fetch(Call(tls));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(res.status().message().find("IP address mismatch"), std::string::npos)
      << res.status().message();
  // The same certificate is fine for a pinning client (no name check).
  res = Fetch(Call(Pinned()));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
}

TEST_F(TlsTest, SystemRootsDoNotTrustThePoolCa) {
  StartServer(ServerTls());
  auto res = Fetch(Call(TlsClientConfig{}));
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("TLS: cannot verify the certificate of"), std::string::npos)
      << res.status().message();
}

TEST_F(TlsTest, InsecureAcceptsAnything) {
  StartServer(ServerTls("no_ip.pem", "no_ip.key"));
  TlsClientConfig tls;
  tls.insecure = true;
  auto res = Fetch(Call(tls));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, kAnonymous);
}

TEST_F(TlsTest, PlainAndTlsMismatchFailsClearly) {
  StartServer(ServerTls());
  // http:// to a TLS port: the server fails the handshake and closes.
  auto res = Fetch(Call(TlsClientConfig{}, Url("http")));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);

  // https:// to a plain server.
  EventLoop plain_loop;
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
  auto plain = HttpServer::Start(plain_loop, {}, std::move(h));
  ASSERT_TRUE(plain.ok());
  std::thread t([&] { plain_loop.Run(); });
  res = Fetch(Call(Pinned(), "https://127.0.0.1:" + std::to_string((*plain)->port())));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(res.status().message().find("TLS handshake with https://127.0.0.1:"), std::string::npos)
      << res.status().message();
  EXPECT_NE(res.status().message().find("plain HTTP"), std::string::npos) << res.status().message();
  OnLoop(plain_loop, [&] { plain->reset(); });
  plain_loop.Stop();
  t.join();
}

TEST_F(TlsTest, StartFailsClearlyOnBadFiles) {
  HttpHandlers h;
  h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
  auto start = [&](TlsServerConfig tls) {
    HttpServerOptions options;
    options.tls = std::move(tls);
    return HttpServer::Start(loop_, options, h).status();
  };
  Status s = start(ServerTls("missing.pem"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing.pem"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.message();

  s = start(ServerTls("server.pem", "no_ip.key"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not belong to the certificate"), std::string::npos)
      << s.message();

  Write("garbage.pem", "not a certificate\n");
  s = start(ServerTls("garbage.pem"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot load the server certificate chain"), std::string::npos)
      << s.message();

  TlsServerConfig tls = ServerTls();
  tls.require_client_cert = true;
  s = start(tls);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("client_ca_file"), std::string::npos) << s.message();

  tls = MutualTls(false);
  tls.client_ca_file = Path("garbage.pem");
  s = start(tls);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("client CA file"), std::string::npos) << s.message();
}

TEST_F(TlsTest, BadClientConfigIsInvalidArgument) {
  auto fetch = [&](TlsClientConfig tls) {
    return Fetch(Call(std::move(tls), "https://127.0.0.1:1")).status();
  };
  TlsClientConfig tls = Pinned();
  tls.ca_fingerprint = "sha256:abcd";
  Status s = fetch(tls);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ca_fingerprint"), std::string::npos) << s.message();

  tls = WithClientCert(Pinned(), "nobody");
  s = fetch(tls);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nobody.pem"), std::string::npos) << s.message();

  tls = Pinned();
  tls.client_cert_file = Path("client.pem");
  s = fetch(tls);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

  tls = Pinned();
  tls.insecure = true;
  EXPECT_EQ(fetch(tls).code(), StatusCode::kInvalidArgument);

  tls = WithClientCert(Pinned());
  tls.client_key_file = Path("other_client.key");
  s = fetch(tls);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not belong"), std::string::npos) << s.message();
}

TEST_F(TlsTest, RewrittenCaFileIsReadAgain) {
  StartServer(ServerTls());
  Write("rotating_ca.pem", other_ca_.cert);
  TlsClientConfig tls;
  tls.ca_file = Path("rotating_ca.pem");
  ASSERT_FALSE(Fetch(Call(tls)).ok());
  Write("rotating_ca.pem", ca_.cert);
  auto res = Fetch(Call(tls));
  EXPECT_TRUE(res.ok()) << res.status().ToString();
}

// ---- client certificates -------------------------------------------------

TEST_F(TlsTest, ClientCertificateFromTheCaGivesIdentity) {
  StartServer(MutualTls(false));
  CertInfo info = *ReadCert(client_cert_);
  auto res = Fetch(Call(WithClientCert(Pinned())));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body,
            "tls=1 cn=agent-7 serial=" + info.serial + " fp=" + *CertFingerprint(client_cert_));
  // Without a certificate: served, without identity.
  res = Fetch(Call(Pinned()));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, kAnonymous);
}

TEST_F(TlsTest, ClientCertificateFromAnotherCaIsNotVerified) {
  StartServer(MutualTls(false));
  auto res = Fetch(Call(WithClientCert(Pinned(), "other_client")));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, kAnonymous);
}

TEST_F(TlsTest, ServerCertificateIsNotAcceptedAsClientCertificate) {
  StartServer(MutualTls(false));
  auto res = Fetch(Call(WithClientCert(Pinned(), "server")));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, kAnonymous);
}

TEST_F(TlsTest, RequiredClientCertificate) {
  StartServer(MutualTls(true));
  auto res = Fetch(Call(WithClientCert(Pinned())));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_NE(res->body.find("cn=agent-7"), std::string::npos);

  for (const char* bad : {"", "other_client", "server"}) {
    SCOPED_TRACE(bad);
    TlsClientConfig tls = *bad ? WithClientCert(Pinned(), bad) : Pinned();
    res = Fetch(Call(tls));
    ASSERT_FALSE(res.ok()) << res->body;
    EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(res.status().message().find("TLS: the server refused the connection"),
              std::string::npos)
        << res.status().message();
  }
}

// ---- long polls, pipelining and slow clients over TLS ----------------

TEST_F(TlsTest, LongPollAndPipelining) {
  HttpHandlers h;
  h.on_request = [this](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.body = "resp:" + req.path;
    if (req.path == "/slow") {
      auto shared = std::make_shared<Responder>(std::move(respond));
      loop_.RunAfter(150, [shared, r] { (*shared)(r); });
    } else {
      respond(std::move(r));
    }
  };
  HttpServerOptions options;
  options.tls = ServerTls();
  StartServer(std::move(h), options);

  auto res = Fetch(Call(Pinned(), Url() + "/slow"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, "resp:/slow/v1/whoami");

  RawTlsClient client(server_->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(
      client.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto responses = client.ReadResponses(2);
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_NE(responses[0].find("resp:/slow"), std::string::npos) << responses[0];
  EXPECT_NE(responses[1].find("resp:/fast"), std::string::npos) << responses[1];
  ASSERT_TRUE(client.Send("GET /third HTTP/1.1\r\nHost: x\r\n\r\n"));
  responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].find("resp:/third"), std::string::npos);
}

TEST_F(TlsTest, ResponderOfAVanishedClientIsHarmless) {
  HttpHandlers h;
  std::shared_ptr<Responder> held;
  std::promise<void> got_request;
  h.on_request = [&](HttpRequest, Responder respond) {
    held = std::make_shared<Responder>(std::move(respond));
    got_request.set_value();
  };
  HttpServerOptions options;
  options.tls = ServerTls();
  StartServer(std::move(h), options);
  {
    RawTlsClient client(server_->port());
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE(client.Send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_EQ(got_request.get_future().wait_for(kWait), std::future_status::ready);
    client.CloseNotifyAndClose();
  }
  auto deadline = Clock::now() + kWait;
  while (OnLoop(loop_, [&] { return held->pending(); })) {
    ASSERT_LT(Clock::now(), deadline);
    std::this_thread::sleep_for(10ms);
  }
  OnLoop(loop_, [&] {
    (*held)(HttpResponse{});
    held.reset();
  });
}

TEST_F(TlsTest, SlowClientsAreCutOffWithoutStallingOthers) {
  HttpServerOptions options;
  options.header_timeout_ms = 500;
  StartServer(ServerTls(), options);
  auto start = Clock::now();
  // One never finishes its TLS handshake, one its request header.
  RawClient slow_handshake(server_->port());
  ASSERT_TRUE(slow_handshake.ok());
  RawTlsClient slow_header(server_->port());
  ASSERT_TRUE(slow_header.ok());
  std::atomic<bool> stop{false};
  std::atomic<bool> dribbled_all{false};
  std::thread dribbler([&] {
    const std::string hello = "\x16\x03\x01\x01\x00\x01\x00\x00\xfc\x03\x03";
    // A minute's worth of bytes: only the timeouts, not the end of the
    // dribble, can close them.
    const std::string header =
        "GET /slow HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(260, 'p') + "\r\n\r\n";
    for (size_t i = 0; !stop && i < header.size(); ++i) {
      if (i < hello.size()) slow_handshake.Send(hello.substr(i, 1));
      slow_header.Send(header.substr(i, 1));
      std::this_thread::sleep_for(200ms);
    }
    dribbled_all = !stop;
  });
  for (int i = 0; i < 4; ++i) {
    auto res = Fetch(Call(Pinned()));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
  }
  EXPECT_TRUE(slow_handshake.WaitForClose());
  EXPECT_TRUE(slow_header.WaitForClose());
  EXPECT_FALSE(dribbled_all.load()) << "closed only once the header was complete";
  // Not before its time (a lower bound holds on any machine).
  EXPECT_GE(Clock::now() - start, 450ms);
  stop = true;
  dribbler.join();
}

// ---- takeover over TLS ------------------------------------------------------

TEST_F(TlsTest, TakeoverRelaysRawBytesOverTls) {
  auto relay = std::make_shared<test::RawRecorder>();
  auto held = std::make_shared<test::RawRecorder>();
  std::vector<std::string> seen;  // loop thread
  HttpHandlers h;
  h.on_request = [](HttpRequest req, Responder respond) {
    HttpResponse r;
    r.content_type = "text/plain";
    r.body = Describe(req);
    respond(std::move(r));
  };
  h.on_takeover = [&](const HttpRequest& req) -> std::shared_ptr<RawHandler> {
    seen.push_back(req.method + " " + req.path + " body=" + req.body + " " + Describe(req));
    if (req.path == "/relay") return relay;
    if (req.path == "/held") return held;
    return nullptr;
  };
  // Answers with a response it writes itself once the bytes sent after the
  // request arrived, then closes (TLS close_notify).
  relay->on_data = [&](RawConnection& c, std::string_view) {
    if (relay->data.find("EXTRA") == std::string::npos) return;
    std::string body = "got:" + relay->data;
    c.Write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
            body);
    c.Close();
  };
  held->on_data = [](RawConnection& c, std::string_view bytes) {
    c.Write("echo:" + std::string(bytes));
  };
  HttpServerOptions options;
  options.tls = ServerTls();
  options.header_timeout_ms = options.body_timeout_ms = options.idle_timeout_ms = 150;
  StartServer(std::move(h), options);

  RawTlsClient client(server_->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(
      client.Send("POST /relay HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhelloEXTRA"));
  auto responses = client.ReadResponses(1);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0], "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ngot:EXTRA");
  EXPECT_TRUE(client.WaitForClose());
  client.CloseNotifyAndClose();  // the server's side waits (up to 2 s) for it
  ASSERT_TRUE(relay->WaitClosed());
  EXPECT_EQ(relay->close_reason, "closed");

  // A declined request is served as usual.
  auto res = Fetch(Call(Pinned()));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, kAnonymous);

  // A taken-over connection outlives the timeouts and ends with the server.
  RawTlsClient other(server_->port());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other.Send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(test::WaitUntil(loop_, [&] { return held->opened; }));
  std::this_thread::sleep_for(400ms);
  ASSERT_TRUE(other.Send("ping"));
  ASSERT_TRUE(test::WaitUntil(loop_, [&] { return held->sent > 0 || held->closed; }));
  OnLoop(loop_, [&] {
    EXPECT_EQ(held->data, "ping");
    EXPECT_FALSE(held->closed) << held->close_reason;
    server_->Close();
    EXPECT_EQ(held->close_reason, "server shutting down");
    EXPECT_EQ(seen, (std::vector<std::string>{"POST /relay body=hello " + std::string(kAnonymous),
                                              "GET /v1/whoami body= " + std::string(kAnonymous),
                                              "GET /held body= " + std::string(kAnonymous)}));
  });
  EXPECT_TRUE(other.WaitForClose());
}

// ---- WebSocket over TLS ---------------------------------------------------

class WssTest : public TlsTest {
 protected:
  // Upgrades at /v1/agent get an echoing handler; the upgrade requests are
  // kept (loop thread only).
  void StartWssServer(TlsServerConfig tls) {
    HttpHandlers h;
    h.on_request = [](HttpRequest, Responder respond) { respond(HttpResponse{}); };
    h.on_upgrade =
        [this](const HttpRequest& req) -> std::variant<std::shared_ptr<WsHandler>, HttpResponse> {
      upgrades_.push_back(Describe(req));
      auto r = std::make_shared<Recorder>();
      r->on_message = [](WsConnection& c, const std::string& text) { c.Send("echo:" + text); };
      return r;
    };
    HttpServerOptions options;
    options.tls = std::move(tls);
    StartServer(std::move(h), options);
  }

  WsClientOptions ClientOptions(TlsClientConfig tls) {
    WsClientOptions o;
    o.url = Url("wss") + "/v1/agent";
    o.tls = std::move(tls);
    o.connect_timeout_ms = 10'000;
    return o;
  }

  std::vector<std::string> upgrades_;
};

TEST_F(WssTest, EchoWithPinAndClientCertificate) {
  StartWssServer(MutualTls(true));
  constexpr int kCount = 200;
  auto client = std::make_shared<Recorder>();
  client->expect_messages = kCount;
  client->on_open = [](WsConnection& c) {
    for (int i = 0; i < kCount; ++i) c.Send(std::to_string(i));
  };
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(WithClientCert(Pinned())), client); });
  ASSERT_TRUE(client->WaitOpen()) << client->close_reason;
  ASSERT_TRUE(client->WaitMessages());
  OnLoop(loop_, [&] {
    for (int i = 0; i < kCount; ++i) EXPECT_EQ(client->messages[i], "echo:" + std::to_string(i));
    ASSERT_EQ(upgrades_.size(), 1u);
    EXPECT_EQ(upgrades_[0], "tls=1 cn=agent-7 serial=" + ReadCert(client_cert_)->serial +
                                " fp=" + *CertFingerprint(client_cert_));
    client->conn_->Close("client done");
  });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_EQ(client->close_reason, "client done");
}

TEST_F(WssTest, ServerCloseReachesTheClient) {
  StartWssServer(ServerTls());
  auto client = std::make_shared<Recorder>();
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(Pinned()), client); });
  ASSERT_TRUE(client->WaitOpen()) << client->close_reason;
  OnLoop(loop_, [&] {
    EXPECT_EQ(upgrades_.at(0), kAnonymous);
    server_->Close();
  });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_EQ(client->close_reason, "server shutting down");
}

TEST_F(WssTest, WrongPinIsReportedInOnClose) {
  StartWssServer(ServerTls());
  auto client = std::make_shared<Recorder>();
  auto options = ClientOptions(Pinned(other_ca_));
  OnLoop(loop_, [&] { WsConnect(loop_, options, client); });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_EQ(client->close_reason,
            "TLS: the server's certificate chain does not contain the pinned CA " +
                options.tls.ca_fingerprint + "; refusing to connect to " + options.url);
  EXPECT_EQ(client->conn_, nullptr);
  OnLoop(loop_, [&] { EXPECT_TRUE(upgrades_.empty()); });
}

TEST_F(WssTest, MissingClientCertificateIsReportedInOnClose) {
  StartWssServer(MutualTls(true));
  auto client = std::make_shared<Recorder>();
  OnLoop(loop_, [&] { WsConnect(loop_, ClientOptions(Pinned()), client); });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_NE(client->close_reason.find("TLS: the server refused the connection"), std::string::npos)
      << client->close_reason;
  OnLoop(loop_, [&] { EXPECT_TRUE(upgrades_.empty()); });
}

TEST_F(WssTest, BadTlsConfigIsReportedInOnClose) {
  StartWssServer(ServerTls());
  auto client = std::make_shared<Recorder>();
  OnLoop(loop_,
         [&] { WsConnect(loop_, ClientOptions(WithClientCert(Pinned(), "nobody")), client); });
  ASSERT_TRUE(client->WaitClosed());
  EXPECT_NE(client->close_reason.find("nobody.pem"), std::string::npos) << client->close_reason;
}

}  // namespace
}  // namespace gpupool::net
