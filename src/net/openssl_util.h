// Private to net/: OpenSSL helpers shared by pki.cpp and tls.cpp. Never
// include this from outside src/net/.
//
// Thread-safe: OpenSSL's error queue is per thread, and every failing helper
// here empties it, so no stale error reaches a later TLS operation.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <string_view>

namespace gpupool::net::internal {

template <auto Fn>
struct OsslDeleter {
  template <typename T>
  void operator()(T* p) const {
    Fn(p);
  }
};
using X509Ptr = std::unique_ptr<X509, OsslDeleter<X509_free>>;
using X509ReqPtr = std::unique_ptr<X509_REQ, OsslDeleter<X509_REQ_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OsslDeleter<EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, OsslDeleter<BIO_free_all>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OsslDeleter<X509_STORE_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OsslDeleter<X509_STORE_CTX_free>>;

// The reasons in this thread's OpenSSL error queue ("a; b"), emptying it;
// "unknown error" when it is empty.
std::string OpenSslErrors();

// "sha256:<64 lower-case hex>" of the certificate's DER.
std::string FingerprintOf(X509* cert);
// The serial as lower-case hex without leading zeros.
std::string SerialHexOf(X509* cert);
// The subject's first CN, or empty.
std::string CommonNameOf(X509* cert);

}  // namespace gpupool::net::internal
