// Private to net/: OpenSSL contexts for the HTTP/WebSocket server and
// clients, CA pinning, and the texts of TLS errors. Never include this from
// outside src/net/.
//
// Threading: a ClientTls is immutable once made and shared by connections on
// any thread (OpenSSL allows SSL_new on a shared SSL_CTX); GetClientTls is
// thread-safe. Each connection keeps its ClientTls alive while it lives, as
// the pinning callback points to it.
#pragma once

#include <openssl/ssl.h>
#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>

#include "common/status.h"
#include "net/tls.h"

namespace gpupool::net::internal {

// ---- server --------------------------------------------------------------

// A TLS 1.2+ server context: the chain and key from `config` (read now),
// and client certificates checked against client_ca_file when set.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeServerTlsContext(
    const TlsServerConfig& config);

// What a server learns about the client's certificate after a handshake.
struct ClientCertCheck {
  bool presented = false;
  bool verified = false;  // chains up to client_ca_file with EKU clientAuth
  std::string problem;    // why a presented certificate did not verify
  // Set when verified:
  std::string fingerprint;  // "sha256:<hex>"
  std::string common_name;
  std::string serial;  // lower-case hex
};
ClientCertCheck CheckClientCert(SSL* ssl);

// ---- client --------------------------------------------------------------

class ClientTls {
 public:
  enum class Mode { kPinned, kCaFile, kSystemRoots, kInsecure };

  // Use GetClientTls, which caches; public for make_shared.
  ClientTls(Mode mode, std::string pin);
  ClientTls(const ClientTls&) = delete;
  ClientTls& operator=(const ClientTls&) = delete;

  boost::asio::ssl::context& context() { return ctx_; }

  // Before the handshake of a new connection to `host`: SNI for host names,
  // and the name (or IP address) the certificate must match in kCaFile and
  // kSystemRoots modes.
  Status Prepare(SSL* ssl, const std::string& host) const;

  // The error message for a failed client handshake with `url`, naming the
  // reason (pin mismatch, verification error, alert from the server, ...).
  std::string HandshakeFailure(SSL* ssl, const std::string& url,
                               const boost::system::error_code& ec) const;

 private:
  friend Result<std::shared_ptr<ClientTls>> MakeClientTls(const TlsClientConfig& config);
  static int VerifyPinned(X509_STORE_CTX* store_ctx, void* arg);

  Mode mode_;
  std::string pin_;  // "sha256:<hex>" in kPinned mode
  boost::asio::ssl::context ctx_;
};

// The context for `config`, made on first use (files read then) and cached
// while the files named in it keep their size and modification time.
Result<std::shared_ptr<ClientTls>> GetClientTls(const TlsClientConfig& config);

// ---- both ----------------------------------------------------------------

// `ec`'s message, made clearer for TLS errors: an alert from the peer
// ("TLS: the server refused the connection: <alert>; it wants a valid client
// certificate from its CA" on the client side), a plain-HTTP peer, a
// truncated stream. Other errors: ec.message().
enum class TlsSide { kClient, kServer };
std::string DescribeTlsError(const boost::system::error_code& ec, TlsSide side = TlsSide::kClient);

}  // namespace gpupool::net::internal
