// TLS settings of the HTTP/WebSocket server and clients, as plain values:
// no OpenSSL or Asio types, so code outside net/ can fill them in.
//
// Server: HttpServerOptions::tls (net/http_server.h). Clients: HttpCall::tls
// (net/http_client.h, used for https:// URLs) and WsClientOptions::tls
// (net/websocket.h, used for wss:// URLs).
//
// Certificates and keys are read from PEM files when a server starts or when
// a client first connects with a given configuration; net/pki.h makes them.
#pragma once

#include <string>

namespace gpupool::net {

struct TlsServerConfig {
  // PEM: the server certificate, then its chain. Include the CA: pinning
  // clients look for it in the chain the server presents.
  std::string cert_chain_file;
  std::string key_file;  // PEM private key of the server certificate
  // When set, clients may present a certificate; it counts as verified only
  // if it chains up to a CA in this PEM file and has the clientAuth EKU.
  // Then HttpRequest::client_cert_* are filled in. A certificate that does
  // not verify is ignored (the connection goes on without client identity)
  // unless require_client_cert is set.
  std::string client_ca_file;
  // The handshake fails for a client without a valid certificate (needs
  // client_ca_file).
  bool require_client_cert = false;
};

// How a client checks the server. With none of ca_fingerprint, ca_file and
// insecure set, the system's default roots are trusted and the URL's host
// name (or IP address) must match the server certificate.
struct TlsClientConfig {
  // "sha256:<hex>" (net::NormalizeFingerprint forms are accepted): pins a
  // CA. The chain the server presents must contain a certificate with this
  // SHA-256 fingerprint, and the leaf must verify up to it, as the only trust
  // anchor, with the serverAuth purpose. No host name check in this mode: the
  // pinned CA is private to the pool.
  std::string ca_fingerprint;
  // A PEM bundle of CAs to trust instead of the system roots; the URL's host
  // name or IP address is checked against the server certificate's SANs.
  std::string ca_file;
  // A client certificate (PEM; the chain may follow the leaf) and its key,
  // for servers that ask for one (mutual TLS).
  std::string client_cert_file;
  std::string client_key_file;
  // No verification of the server at all. Development only.
  bool insecure = false;
};

}  // namespace gpupool::net
