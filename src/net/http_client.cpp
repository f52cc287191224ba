// Fetch: one blocking HTTP/1.1 exchange on a private io_context, written as
// a coroutine; the deadline covers resolve, connect, TLS handshake, write
// and read. The exchange itself is a template over the stream (TCP or TLS).
#include "net/http_client.h"

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
#include <optional>
#include <tuple>

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
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <typename Stream>
asio::awaitable<void> Converse(Exchange& x, Stream& stream);

asio::awaitable<void> Run(Exchange& x) {
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
    co_await Converse(x, stream);
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
  co_await Converse(x, tls_stream);
}

// Writes the request and reads the response on a connected stream. The
// connection is not reused: no TLS close_notify, the socket just closes.
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
  req.keep_alive(false);
  req.body() = x.call.body;
  req.prepare_payload();

  auto [write_ec, written] = co_await http::async_write(stream, req, kTuple);
  if (write_ec) {
    x.result = Status::Unavailable("cannot send the request to " + x.call.base_url + ": " +
                                   internal::DescribeTlsError(write_ec));
    co_return;
  }

  beast::flat_buffer buffer;
  // Beast reads at most the buffer's free capacity per call (at least 512
  // bytes): room for large reads keeps big bodies from costing a syscall per
  // kilobyte (16 MiB: 250 MB/s -> 1+ GB/s on loopback).
  buffer.reserve(kReadBufferBytes);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBody);
  parser.skip(req.method() == http::verb::head);  // no body follows
  auto [read_ec, read] = co_await http::async_read(stream, buffer, parser, kTuple);
  if (read_ec) {
    x.result = Status::Unavailable("no response from " + x.call.base_url + ": " +
                                   internal::DescribeTlsError(read_ec));
    co_return;
  }
  beast::error_code ignored;
  beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignored);

  auto res = parser.release();
  HttpResponse out;
  out.status = static_cast<int>(res.result_int());
  out.content_type.clear();
  for (const auto& field : res) {
    auto [it, inserted] =
        out.headers.emplace(Lower(field.name_string()), std::string(field.value()));
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

Result<HttpResponse> Fetch(const HttpCall& call) {
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
  Exchange x{call, *url, url->path + (call.target.empty() ? "/" : call.target), std::move(tls),
             std::nullopt};
  if (x.target.empty()) x.target = "/";

  asio::io_context ioc{1};
  asio::co_spawn(ioc, Run(x), [&x](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& err) {
      x.result = Status::Internal(std::string("http client: ") + err.what());
    }
  });
  ioc.run_for(std::chrono::milliseconds(call.timeout_ms < 0 ? 0 : call.timeout_ms));
  if (!x.result) {
    return Status::DeadlineExceeded(call.method + " " + call.base_url + x.target +
                                    ": no response within " + std::to_string(call.timeout_ms) +
                                    " ms");
  }
  return std::move(*x.result);
}

}  // namespace gpupool::net
