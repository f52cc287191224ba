// A small PKI for a pool: a private CA, server certificates for the pool's
// endpoints, and client certificates issued from certificate signing
// requests. Keys are ECDSA P-256, signatures SHA-256; everything goes in and
// out as PEM text (keys unencrypted PKCS#8), so callers need no OpenSSL.
//
// Serials are 128 random bits. Certificates are valid from 5 minutes before
// they are made (clock skew between machines) for `days` days.
//
// Pure functions over their inputs (plus the OpenSSL random generator);
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::net {

struct PemPair {
  std::string cert;  // PEM certificate (or CSR, from CreateKeyAndCsr)
  std::string key;   // PEM private key
};

struct CertInfo {
  std::string common_name;
  std::string serial;        // hex as `openssl x509 -serial` prints it, lower-cased
  std::string fingerprint;   // "sha256:" + 64 lower-case hex digits of the DER
  int64_t not_after_ms = 0;  // Unix epoch milliseconds
  bool is_ca = false;        // basicConstraints CA:TRUE
};

// A self-signed CA: basicConstraints CA:TRUE (critical), keyUsage keyCertSign
// and cRLSign (critical), subject and issuer CN=common_name.
Result<PemPair> CreateCa(const std::string& common_name, int days);

// A server certificate signed by `ca`: EKU serverAuth only, keyUsage
// digitalSignature, not a CA. Each of `sans` that is an IPv4 or IPv6 literal
// becomes an IP SAN, anything else a DNS SAN (letters, digits, '-', '.', and
// a leading "*." wildcard).
Result<PemPair> IssueServerCert(const PemPair& ca, const std::string& common_name,
                                const std::vector<std::string>& sans, int days);

// A new P-256 key and a CSR for it with subject CN=common_name: .cert holds
// the CSR PEM ("CERTIFICATE REQUEST"), .key the key PEM. Runs on the client
// (agent, CLI user) so the key never leaves it.
Result<PemPair> CreateKeyAndCsr(const std::string& common_name);

// Signs a client's CSR with `ca` after checking the CSR's self-signature
// (the requester holds the key). The certificate's subject is
// CN=common_name whatever the CSR asked for; EKU clientAuth only, not a CA.
// Returns the certificate PEM.
Result<std::string> SignClientCsr(const PemPair& ca, std::string_view csr_pem,
                                  const std::string& common_name, int days);

// Facts about the first certificate in `pem`. InvalidArgument for anything
// that is not a PEM certificate.
Result<CertInfo> ReadCert(std::string_view pem);

// "sha256:<hex>" of the DER of the first certificate in `pem`.
Result<std::string> CertFingerprint(std::string_view pem);

// Canonical "sha256:<64 lower-case hex>" from "sha256:<hex>", bare hex, or
// the colon-separated form `openssl x509 -fingerprint -sha256` prints
// ("AB:CD:..."); any case. InvalidArgument otherwise.
Result<std::string> NormalizeFingerprint(std::string_view text);

}  // namespace gpupool::net
