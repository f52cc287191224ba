// Fetch: one blocking HTTP/1.1 exchange on a connection's private
// io_context, written as a coroutine; the deadline covers resolve, connect,
// TLS handshake, write and read. The exchange itself is a template over the
// stream (TCP or TLS). KeepAliveClient keeps connections (each with its
// io_context and stream) between exchanges.
#include "net/http_client.h"

#include "net/server_list.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <cctype>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "common/clock.h"
#include "net/tls_internal.h"

namespace gpupool::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr uint64_t kMaxResponseBody = uint64_t{1} << 30;
constexpr size_t kReadBufferBytes = 64 * 1024;

struct Exchange {
  const HttpCall& call;
  const Url& url;
  std::string target;
  std::shared_ptr<internal::ClientTls> tls;  // for https
  std::optional<Result<HttpResponse>> result;
  bool keep_alive = false;  // ask to keep the connection (KeepAliveClient)
  // Set by the exchange: the request was written, and whether any of the
  // response arrived; whether the connection may carry another exchange.
  bool sent = false;
  bool answered = false;
  bool reusable = false;
};

}  // namespace

// A connection: its own io_context and, once connected, its stream.
// Declared in this order so the streams go before the context.
struct HttpConnection {
  asio::io_context ioc{1};
  std::string base_url;
  // The TLS settings it was checked with (null for http); outlives the
  // TLS stream, whose context it holds.
  std::shared_ptr<internal::ClientTls> tls_config;
  std::optional<beast::tcp_stream> tcp;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  int64_t idle_since_ms = 0;
  bool connected() const { return tcp.has_value() || tls.has_value(); }
};

namespace {

template <typename Stream>
asio::awaitable<void> Converse(Exchange& x, Stream& stream);

// Connects `c` (and for https shakes hands) for `x`; sets x.result on a failure.
asio::awaitable<void> Connect(Exchange& x, HttpConnection& c) {
  auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  beast::error_code connect_ec;
  beast::error_code not_ip;
  auto address = asio::ip::make_address(x.url.host, not_ip);
  if (!not_ip) {
    // An IP address: no resolver, whose thread would cost more than the call.
    std::tie(connect_ec) =
        co_await stream.async_connect(tcp::endpoint(address, x.url.port), kTuple);
  } else {
    tcp::resolver resolver(executor);
    auto [resolve_ec, endpoints] =
        co_await resolver.async_resolve(x.url.host, std::to_string(x.url.port), kTuple);
    if (resolve_ec) {
      x.result = Status::Unavailable("cannot resolve " + x.url.host + ": " + resolve_ec.message());
      co_return;
    }
    std::tie(connect_ec, std::ignore) = co_await stream.async_connect(endpoints, kTuple);
  }
  if (connect_ec) {
    x.result =
        Status::Unavailable("cannot connect to " + x.call.base_url + ": " + connect_ec.message());
    co_return;
  }
  beast::error_code ignored;
  stream.socket().set_option(tcp::no_delay(true), ignored);
  if (!x.tls) {
    c.tcp.emplace(std::move(stream));
    co_return;
  }
  beast::ssl_stream<beast::tcp_stream> tls_stream(std::move(stream), x.tls->context());
  SSL* ssl = tls_stream.native_handle();
  if (Status prepared = x.tls->Prepare(ssl, x.url.host); !prepared.ok()) {
    x.result = std::move(prepared);
    co_return;
  }
  auto [handshake_ec] = co_await tls_stream.async_handshake(asio::ssl::stream_base::client, kTuple);
  if (handshake_ec) {
    // A server that fails to prove who it is will not do better on a retry.
    std::string why = x.tls->HandshakeFailure(ssl, x.call.base_url, handshake_ec);
    x.result = SSL_get_verify_result(ssl) != X509_V_OK ? Status::Unauthenticated(std::move(why))
                                                       : Status::Unavailable(std::move(why));
    co_return;
  }
  c.tls.emplace(std::move(tls_stream));
}

// One exchange on `c`, connecting it first when it is not.
asio::awaitable<void> Run(Exchange& x, HttpConnection& c) {
  if (!c.connected()) {
    co_await Connect(x, c);
    if (x.result) co_return;
  }
  if (c.tls) {
    co_await Converse(x, *c.tls);
  } else {
    co_await Converse(x, *c.tcp);
  }
}

// Writes the request and reads the response on a connected stream. A
// connection not kept is shut down: no TLS close_notify, the socket just
// closes.
template <typename Stream>
asio::awaitable<void> Converse(Exchange& x, Stream& stream) {
  http::request<http::string_body> req;
  req.version(11);
  req.method_string(x.call.method);
  req.target(x.target);
  std::string host =
      x.url.host.find(':') == std::string::npos ? x.url.host : "[" + x.url.host + "]";
  req.set(http::field::host, host + ":" + std::to_string(x.url.port));
  req.set(http::field::user_agent, "gpupool");
  if (!x.call.body.empty()) req.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : x.call.headers) req.set(name, value);
  req.keep_alive(x.keep_alive);
  req.body() = x.call.body;
  req.prepare_payload();

  auto [write_ec, written] = co_await http::async_write(stream, req, kTuple);
  if (write_ec) {
    x.result = Status::Unavailable("cannot send the request to " + x.call.base_url + ": " +
                                   internal::DescribeTlsError(write_ec));
    co_return;
  }
  x.sent = true;

  beast::flat_buffer buffer;
  // Beast reads at most the buffer's free capacity per call (at least 512
  // bytes): room for large reads keeps big bodies from costing a syscall per
  // kilobyte (16 MiB: 250 MB/s -> 1+ GB/s on loopback).
  buffer.reserve(kReadBufferBytes);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBody);
  parser.skip(req.method() == http::verb::head);  // no body follows
  auto [read_ec, read] = co_await http::async_read(stream, buffer, parser, kTuple);
  x.answered = read > 0 || buffer.size() > 0 || parser.got_some();
  if (read_ec) {
    x.result = Status::Unavailable("no response from " + x.call.base_url + ": " +
                                   internal::DescribeTlsError(read_ec));
    co_return;
  }
  // Kept only when both sides said so and nothing is left unread.
  x.reusable = x.keep_alive && parser.keep_alive() && buffer.size() == 0;
  if (!x.reusable) {
    beast::error_code ignored;
    beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  auto res = parser.release();
  HttpResponse out;
  out.status = static_cast<int>(res.result_int());
  out.content_type.clear();
  for (const auto& field : res) {
    auto [it, inserted] =
        out.headers.emplace(AsciiLower(field.name_string()), std::string(field.value()));
    if (!inserted) {
      it->second += ", ";
      it->second.append(field.value().data(), field.value().size());
    }
  }
  if (auto it = out.headers.find("content-type"); it != out.headers.end()) {
    out.content_type = it->second;
  }
  out.body = std::move(res.body());
  x.result = std::move(out);
}

}  // namespace

namespace {

// Checks the call and finds its TLS context.
Result<std::pair<Url, std::shared_ptr<internal::ClientTls>>> Prepare(const HttpCall& call) {
  auto url = ParseUrl(call.base_url);
  if (!url || (url->scheme != "http" && url->scheme != "https")) {
    return Status::InvalidArgument("invalid server URL \"" + call.base_url +
                                   "\" (want http://host:port or https://host:port)");
  }
  if (!call.target.empty() && call.target.front() != '/') {
    return Status::InvalidArgument("request target must start with '/': \"" + call.target + "\"");
  }
  std::shared_ptr<internal::ClientTls> tls;
  if (url->scheme == "https") {
    GP_ASSIGN_OR_RETURN(tls, internal::GetClientTls(call.tls));
  }
  return std::pair{*std::move(url), std::move(tls)};
}

Exchange MakeExchange(const HttpCall& call, const Url& url,
                      std::shared_ptr<internal::ClientTls> tls, bool keep_alive) {
  Exchange x{call, url, url.path + (call.target.empty() ? "/" : call.target), std::move(tls),
             std::nullopt};
  if (x.target.empty()) x.target = "/";
  x.keep_alive = keep_alive;
  return x;
}

// Runs exchange `x` on `c` (connecting it when it is not), within the call's
// deadline.
Result<HttpResponse> RunOn(Exchange& x, HttpConnection& c) {
  c.ioc.restart();
  asio::co_spawn(c.ioc, Run(x, c), [&x](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& err) {
      x.result = Status::Internal(std::string("http client: ") + err.what());
    }
  });
  const int64_t timeout_ms = x.call.timeout_ms < 0 ? 0 : x.call.timeout_ms;
  c.ioc.run_for(std::chrono::milliseconds(timeout_ms));
  if (!x.result) {
    return Status::DeadlineExceeded(x.call.method + " " + x.call.base_url + x.target +
                                    ": no response within " + std::to_string(x.call.timeout_ms) +
                                    " ms");
  }
  return std::move(*x.result);
}

// The idle connections' clock.
const RealClock kClock;

}  // namespace

Result<HttpResponse> Fetch(const HttpCall& call) {
  return FetchFromServerList(call, [](const HttpCall& one) -> Result<HttpResponse> {
    GP_ASSIGN_OR_RETURN(auto prepared, Prepare(one));
    HttpConnection c;
    Exchange x = MakeExchange(one, prepared.first, std::move(prepared.second), false);
    return RunOn(x, c);
  });
}

KeepAliveClient::KeepAliveClient() = default;
KeepAliveClient::~KeepAliveClient() = default;

std::unique_ptr<HttpConnection> KeepAliveClient::TakeIdle(
    const std::string& base_url, const std::shared_ptr<internal::ClientTls>& tls) {
  std::lock_guard lock(mu_);
  const int64_t now = kClock.MonoMs();
  std::unique_ptr<HttpConnection> out;
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (now - (*it)->idle_since_ms > kMaxIdleMs) {
      it = idle_.erase(it);  // the server may be about to close it
    } else if (!out && (*it)->base_url == base_url && (*it)->tls_config == tls) {
      // The same server checked the same way: a call with other TLS
      // settings (another pin) never rides a connection checked otherwise.
      out = std::move(*it);
      it = idle_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void KeepAliveClient::GiveBack(std::unique_ptr<HttpConnection> c) {
  std::lock_guard lock(mu_);
  if (idle_.size() >= kMaxIdleConnections) return;
  c->idle_since_ms = kClock.MonoMs();
  idle_.push_back(std::move(c));
}

Result<HttpResponse> KeepAliveClient::Fetch(const HttpCall& call) {
  return FetchFromServerList(call, [this](const HttpCall& one) { return FetchOne(one); });
}

Result<HttpResponse> KeepAliveClient::FetchOne(const HttpCall& call) {
  GP_ASSIGN_OR_RETURN(auto prepared, Prepare(call));
  const bool idempotent = call.method == "GET" || call.method == "HEAD" || call.method == "PUT" ||
                          call.method == "DELETE";
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<HttpConnection> c = TakeIdle(call.base_url, prepared.second);
    const bool reused = c != nullptr;
    if (!c) {
      c = std::make_unique<HttpConnection>();
      c->base_url = call.base_url;
      c->tls_config = prepared.second;
      opened_++;
    }
    Exchange x = MakeExchange(call, prepared.first, prepared.second, true);
    auto r = RunOn(x, *c);
    if (r.ok()) {
      if (x.reusable) GiveBack(std::move(c));
      return r;
    }
    // A kept connection the server closed meanwhile fails before any
    // answer: a request that may be repeated goes again on a new one; one
    // that may not (a POST the server may have acted on) fails.
    const bool stale = reused && !x.answered && r.status().code() == StatusCode::kUnavailable;
    if (!stale || attempt > 0 || (x.sent && !idempotent)) return r;
  }
}

int64_t KeepAliveClient::connections_opened() const { return opened_.load(); }

}  // namespace gpupool::net
