// The server's TLS material in DATA_DIR/tls: the pool CA (made on first
// start, kept), and a server certificate issued from it at every start for
// the names the server is reached by. An operator may give their own
// certificate and key instead; the pool CA still signs agents' client
// certificates.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "net/pki.h"
#include "net/tls.h"
#include "store/store.h"

namespace gpupool::server {

struct ServerTls {
  net::TlsServerConfig config;  // for HttpServerOptions::tls
  net::PemPair ca;              // signs agents' client certificates
  // What the join token carries for agents to pin: the pool CA's fingerprint,
  // or "" with an operator's certificate (agents then check it like any
  // client, against the system's CAs or --ca-file).
  std::string ca_fingerprint;
};

// The servers of one pool on PostgreSQL share its CA: the first to start
// keeps its CA (DATA_DIR/tls/ca.crt and ca.key, made if missing) in the
// database (meta tls/ca_cert, tls/ca_key); every server then writes the
// database's to its DATA_DIR/tls before SetUpServerTls, and issues its own
// certificate from it. So an agent or user that pins the CA trusts every
// server of the pool. (Whoever can read the database can sign as the pool:
// keep it as private as the CA key.) `store` must not be fenced: a standby
// runs this too.
Status ShareCaThroughStore(Store& store, const std::string& data_dir);

// `sans`: extra DNS names or IP addresses for the server certificate
// (localhost, 127.0.0.1, ::1 and this host's name are always included).
// `cert_file`/`key_file`: the operator's own, or "" for the pool's.
Result<ServerTls> SetUpServerTls(const std::string& data_dir, std::vector<std::string> sans,
                                 const std::string& cert_file, const std::string& key_file);

}  // namespace gpupool::server
