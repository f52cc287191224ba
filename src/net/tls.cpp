// OpenSSL contexts for net/: server contexts with optional client
// certificates, client contexts with CA pinning, a cache of client contexts,
// and readable TLS error texts.
//
// Pinning (kPinned): a cert verify callback replaces OpenSSL's chain
// building. It looks for the pinned fingerprint among the certificates the
// server sent, then verifies the leaf with that certificate as the only
// trust anchor (X509_V_FLAG_PARTIAL_CHAIN, so an intermediate may be
// pinned too) and the sslserver purpose. Failures are left in the SSL's
// verify result, where HandshakeFailure reads them:
// X509_V_ERR_APPLICATION_VERIFICATION means the pin was not in the chain.
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <boost/asio/ssl/error.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "net/openssl_util.h"
#include "net/pki.h"
#include "net/tls_internal.h"

namespace gpupool::net::internal {

namespace {

namespace ssl = boost::asio::ssl;

int NoPassword(char*, int, int, void*) { return 0; }

// "TLS: cannot read <file>: <errno text>", or OK when the file is readable.
Status CheckReadable(const std::string& file, const std::string& what) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) {
    return Status::InvalidArgument("TLS: cannot read the " + what + " \"" + file +
                                   "\": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("TLS: the " + what + " \"" + file + "\" is not a file");
  }
  return Status::Ok();
}

Status LoadError(const std::string& what, const std::string& file) {
  return Status::InvalidArgument("TLS: cannot load the " + what + " \"" + file +
                                 "\": " + OpenSslErrors());
}

// Certificate chain and key into `ctx`, checked to belong together.
Status LoadCertAndKey(SSL_CTX* ctx, const std::string& cert_file, const std::string& key_file,
                      const std::string& what) {
  GP_RETURN_IF_ERROR(CheckReadable(cert_file, what + " certificate file"));
  GP_RETURN_IF_ERROR(CheckReadable(key_file, what + " key file"));
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return LoadError(what + " certificate chain", cert_file);
  }
  auto mismatch = [&] {
    ERR_clear_error();
    return Status::InvalidArgument("TLS: the key in \"" + key_file +
                                   "\" does not belong to the certificate in \"" + cert_file +
                                   "\"");
  };
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    unsigned long last = ERR_peek_last_error();
    if (ERR_GET_LIB(last) == ERR_LIB_X509 && ERR_GET_REASON(last) == X509_R_KEY_VALUES_MISMATCH) {
      return mismatch();
    }
    return LoadError(what + " key (unencrypted PEM wanted)", key_file);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return mismatch();
  return Status::Ok();
}

void CommonSetup(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_default_passwd_cb(ctx, NoPassword);  // never prompt on a terminal
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
}

// Index of the SSL ex_data slot where the server notes the first
// verification error of a client certificate it let through (optional
// client certificates).
int UnverifiedIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Optional client certificates: a certificate that does not verify does not
// fail the handshake; it is only noted, and the request carries no identity.
int NoteUnverified(int preverify_ok, X509_STORE_CTX* store_ctx) {
  if (preverify_ok != 1) {
    auto* ssl = static_cast<SSL*>(
        X509_STORE_CTX_get_ex_data(store_ctx, SSL_get_ex_data_X509_STORE_CTX_idx()));
    int err = X509_STORE_CTX_get_error(store_ctx);
    if (ssl != nullptr && SSL_get_ex_data(ssl, UnverifiedIndex()) == nullptr) {
      SSL_set_ex_data(ssl, UnverifiedIndex(),
                      reinterpret_cast<void*>(static_cast<intptr_t>(err == 0 ? -1 : err)));
    }
  }
  return 1;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string VerifyErrorText(long code) {
  return X509_verify_cert_error_string(code) + std::string(" (X509 error ") + std::to_string(code) +
         ")";
}

}  // namespace

// ---- server --------------------------------------------------------------

Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(const TlsServerConfig& config) {
  if (config.cert_chain_file.empty() || config.key_file.empty()) {
    return Status::InvalidArgument("TLS: the server needs cert_chain_file and key_file");
  }
  if (config.require_client_cert && config.client_ca_file.empty()) {
    return Status::InvalidArgument("TLS: require_client_cert needs client_ca_file");
  }
  ERR_clear_error();
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* h = ctx->native_handle();
  CommonSetup(h);
  SSL_CTX_set_options(h, SSL_OP_CIPHER_SERVER_PREFERENCE);
  // Our clients do not resume sessions: no tickets, no cache (a full
  // handshake each time, and no session id context to manage).
  SSL_CTX_set_num_tickets(h, 0);
  SSL_CTX_set_session_cache_mode(h, SSL_SESS_CACHE_OFF);
  GP_RETURN_IF_ERROR(LoadCertAndKey(h, config.cert_chain_file, config.key_file, "server"));
  if (!config.client_ca_file.empty()) {
    GP_RETURN_IF_ERROR(CheckReadable(config.client_ca_file, "client CA file"));
    if (SSL_CTX_load_verify_locations(h, config.client_ca_file.c_str(), nullptr) != 1) {
      return LoadError("client CA file", config.client_ca_file);
    }
    // Tells clients which CA their certificate should come from.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(config.client_ca_file.c_str());
    if (names == nullptr) return LoadError("client CA file", config.client_ca_file);
    SSL_CTX_set_client_CA_list(h, names);
    if (config.require_client_cert) {
      SSL_CTX_set_verify(h, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    } else {
      SSL_CTX_set_verify(h, SSL_VERIFY_PEER, NoteUnverified);
    }
  }
  return ctx;
}

ClientCertCheck CheckClientCert(SSL* ssl) {
  ClientCertCheck out;
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return out;
  out.presented = true;
  long result = SSL_get_verify_result(ssl);
  auto noted = reinterpret_cast<intptr_t>(SSL_get_ex_data(ssl, UnverifiedIndex()));
  if (noted != 0) {
    out.problem = VerifyErrorText(noted);
    return out;
  }
  if (result != X509_V_OK) {
    out.problem = VerifyErrorText(result);
    return out;
  }
  out.verified = true;
  out.fingerprint = FingerprintOf(cert);
  out.common_name = CommonNameOf(cert);
  out.serial = SerialHexOf(cert);
  return out;
}

// ---- client --------------------------------------------------------------

ClientTls::ClientTls(Mode mode, std::string pin)
    : mode_(mode), pin_(std::move(pin)), ctx_(ssl::context::tls_client) {}

int ClientTls::VerifyPinned(X509_STORE_CTX* store_ctx, void* arg) {
  const auto* self = static_cast<const ClientTls*>(arg);
  X509* leaf = X509_STORE_CTX_get0_cert(store_ctx);
  STACK_OF(X509)* chain = X509_STORE_CTX_get0_untrusted(store_ctx);
  X509* anchor = nullptr;
  if (leaf != nullptr && FingerprintOf(leaf) == self->pin_) anchor = leaf;
  for (int i = 0; anchor == nullptr && i < sk_X509_num(chain); ++i) {
    X509* cert = sk_X509_value(chain, i);
    if (FingerprintOf(cert) == self->pin_) anchor = cert;
  }
  if (leaf == nullptr || anchor == nullptr) {
    X509_STORE_CTX_set_error(store_ctx, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
  }
  X509StorePtr store(X509_STORE_new());
  X509StoreCtxPtr verify(X509_STORE_CTX_new());
  if (!store || !verify || X509_STORE_add_cert(store.get(), anchor) != 1 ||
      X509_STORE_CTX_init(verify.get(), store.get(), leaf, chain) != 1) {
    ERR_clear_error();
    X509_STORE_CTX_set_error(store_ctx, X509_V_ERR_OUT_OF_MEM);
    return 0;
  }
  X509_VERIFY_PARAM_set_flags(X509_STORE_CTX_get0_param(verify.get()), X509_V_FLAG_PARTIAL_CHAIN);
  X509_STORE_CTX_set_purpose(verify.get(), X509_PURPOSE_SSL_SERVER);
  bool ok = X509_verify_cert(verify.get()) == 1;
  int err = ok ? X509_V_OK : X509_STORE_CTX_get_error(verify.get());
  if (!ok && err == X509_V_OK) err = X509_V_ERR_UNSPECIFIED;
  ERR_clear_error();
  X509_STORE_CTX_set_error(store_ctx, err);
  return ok ? 1 : 0;
}

Result<std::shared_ptr<ClientTls>> MakeClientTls(const TlsClientConfig& config) {
  using Mode = ClientTls::Mode;
  if (config.insecure && (!config.ca_fingerprint.empty() || !config.ca_file.empty())) {
    return Status::InvalidArgument(
        "TLS: insecure cannot be combined with ca_fingerprint or ca_file");
  }
  if (!config.ca_fingerprint.empty() && !config.ca_file.empty()) {
    return Status::InvalidArgument("TLS: set ca_fingerprint or ca_file, not both");
  }
  if (config.client_cert_file.empty() != config.client_key_file.empty()) {
    return Status::InvalidArgument("TLS: client_cert_file and client_key_file go together");
  }
  Mode mode = config.insecure                  ? Mode::kInsecure
              : !config.ca_fingerprint.empty() ? Mode::kPinned
              : !config.ca_file.empty()        ? Mode::kCaFile
                                               : Mode::kSystemRoots;
  std::string pin;
  if (mode == Mode::kPinned) {
    auto normalized = NormalizeFingerprint(config.ca_fingerprint);
    if (!normalized.ok()) return normalized.status().WithContext("TLS: ca_fingerprint");
    pin = *std::move(normalized);
  }
  ERR_clear_error();
  auto tls = std::make_shared<ClientTls>(mode, std::move(pin));
  SSL_CTX* h = tls->context().native_handle();
  CommonSetup(h);
  switch (mode) {
    case Mode::kPinned:
      SSL_CTX_set_verify(h, SSL_VERIFY_PEER, nullptr);
      SSL_CTX_set_cert_verify_callback(h, &ClientTls::VerifyPinned, tls.get());
      break;
    case Mode::kCaFile:
      GP_RETURN_IF_ERROR(CheckReadable(config.ca_file, "CA file"));
      if (SSL_CTX_load_verify_locations(h, config.ca_file.c_str(), nullptr) != 1) {
        return LoadError("CA file", config.ca_file);
      }
      SSL_CTX_set_verify(h, SSL_VERIFY_PEER, nullptr);
      break;
    case Mode::kSystemRoots:
      if (SSL_CTX_set_default_verify_paths(h) != 1) {
        return Status::Internal("TLS: cannot load the system's CA roots: " + OpenSslErrors());
      }
      SSL_CTX_set_verify(h, SSL_VERIFY_PEER, nullptr);
      break;
    case Mode::kInsecure:
      SSL_CTX_set_verify(h, SSL_VERIFY_NONE, nullptr);
      break;
  }
  if (!config.client_cert_file.empty()) {
    GP_RETURN_IF_ERROR(
        LoadCertAndKey(h, config.client_cert_file, config.client_key_file, "client"));
  }
  return tls;
}

Status ClientTls::Prepare(SSL* ssl, const std::string& host) const {
  bool ip = IsIpLiteral(host);
  if (!ip && SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    return Status::InvalidArgument("TLS: cannot use \"" + host + "\" as SNI: " + OpenSslErrors());
  }
  if (mode_ == Mode::kCaFile || mode_ == Mode::kSystemRoots) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    int ok = 0;
    if (ip) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      ok = X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    }
    if (ok != 1) {
      return Status::InvalidArgument("TLS: cannot verify against host \"" + host +
                                     "\": " + OpenSslErrors());
    }
  }
  return Status::Ok();
}

std::string ClientTls::HandshakeFailure(SSL* ssl, const std::string& url,
                                        const boost::system::error_code& ec) const {
  long result = SSL_get_verify_result(ssl);
  if (mode_ == Mode::kPinned && result == X509_V_ERR_APPLICATION_VERIFICATION) {
    return "TLS: the server's certificate chain does not contain the pinned CA " + pin_ +
           "; refusing to connect to " + url;
  }
  if (mode_ == Mode::kPinned && result != X509_V_OK) {
    return "TLS: the server's certificate does not verify against the pinned CA " + pin_ + ": " +
           VerifyErrorText(result) + "; refusing to connect to " + url;
  }
  if (result != X509_V_OK) {
    return "TLS: cannot verify the certificate of " + url + ": " + VerifyErrorText(result);
  }
  return "TLS handshake with " + url + " failed: " + DescribeTlsError(ec);
}

namespace {

// Size and modification time of a file named in a config, so that a
// rewritten certificate or CA file makes a new context.
std::string FileStamp(const std::string& file) {
  if (file.empty()) return "-";
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return "?";
  return std::to_string(st.st_size) + "/" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + "/" + std::to_string(st.st_ino);
}

}  // namespace

Result<std::shared_ptr<ClientTls>> GetClientTls(const TlsClientConfig& config) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<ClientTls>> cache;  // guarded by mu
  constexpr size_t kMaxEntries = 32;
  std::string key;
  for (const std::string* file :
       {&config.ca_file, &config.client_cert_file, &config.client_key_file}) {
    key += *file + '\0' + FileStamp(*file) + '\0';
  }
  key += config.ca_fingerprint + '\0' + (config.insecure ? "1" : "0");
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  GP_ASSIGN_OR_RETURN(std::shared_ptr<ClientTls> tls, MakeClientTls(config));
  std::lock_guard lock(mu);
  if (cache.size() >= kMaxEntries) cache.clear();  // live connections keep theirs
  return cache.emplace(key, std::move(tls)).first->second;
}

// ---- both ----------------------------------------------------------------

std::string DescribeTlsError(const boost::system::error_code& ec, TlsSide side) {
  if (ec == ssl::error::stream_truncated) {
    return "the peer closed the connection without a TLS close_notify (stream truncated)";
  }
  if (ec.category() != boost::asio::error::get_ssl_category()) return ec.message();
  auto code = static_cast<unsigned long>(ec.value());
  int reason = ERR_GET_REASON(code);
  if (ERR_GET_LIB(code) == ERR_LIB_SSL && reason >= SSL_AD_REASON_OFFSET) {
    // An alert from the peer.
    if (side == TlsSide::kServer) return "the client rejected the TLS handshake: " + ec.message();
    std::string text = "TLS: the server refused the connection: " + ec.message();
    int alert = reason - SSL_AD_REASON_OFFSET;
    if (alert == SSL_AD_CERTIFICATE_REQUIRED || alert == SSL_AD_BAD_CERTIFICATE ||
        alert == SSL_AD_UNKNOWN_CA || alert == SSL_AD_UNSUPPORTED_CERTIFICATE ||
        alert == SSL_AD_CERTIFICATE_EXPIRED || alert == SSL_AD_CERTIFICATE_UNKNOWN) {
      text += "; it wants a valid client certificate from its CA";
    }
    return text;
  }
  if (ERR_GET_LIB(code) == ERR_LIB_SSL &&
      (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
       reason == SSL_R_HTTP_REQUEST)) {
    return ec.message() + " (is the peer speaking plain HTTP?)";
  }
  return ec.message();
}

}  // namespace gpupool::net::internal
