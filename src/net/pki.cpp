// The pool's PKI on OpenSSL 3: keys from EVP_EC_gen, certificates built
// with the X509 API, extensions from X509V3 config strings (fixed ones) or
// built as GENERAL_NAMES (SANs, which come from the caller).
#include "net/pki.h"

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <cctype>
#include <climits>
#include <ctime>

#include "net/openssl_util.h"

namespace gpupool::net {

namespace internal {

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    if (!out.empty()) out += "; ";
    const char* reason = ERR_reason_error_string(e);
    if (reason != nullptr) {
      out += reason;
    } else {
      char buf[256];
      ERR_error_string_n(e, buf, sizeof buf);
      out += buf;
    }
  }
  return out.empty() ? "unknown error" : out;
}

namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kHex[data[i] >> 4]);
    out.push_back(kHex[data[i] & 15]);
  }
  return out;
}

}  // namespace

std::string FingerprintOf(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (X509_digest(cert, EVP_sha256(), md, &n) != 1) {
    ERR_clear_error();
    return {};
  }
  return "sha256:" + Hex(md, n);
}

std::string SerialHexOf(X509* cert) {
  std::unique_ptr<BIGNUM, OsslDeleter<BN_free>> bn(
      ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr));
  if (!bn) {
    ERR_clear_error();
    return {};
  }
  char* hex = BN_bn2hex(bn.get());
  if (hex == nullptr) {
    ERR_clear_error();
    return {};
  }
  std::string out(hex);
  OPENSSL_free(hex);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string CommonNameOf(X509* cert) {
  X509_NAME* name = X509_get_subject_name(cert);
  int idx = name == nullptr ? -1 : X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (idx < 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) {
    ERR_clear_error();
    return {};
  }
  std::string out(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
  OPENSSL_free(utf8);
  return out;
}

}  // namespace internal

namespace {

using internal::BioPtr;
using internal::EvpPkeyPtr;
using internal::OpenSslErrors;
using internal::OsslDeleter;
using internal::X509Ptr;
using internal::X509ReqPtr;

constexpr int kMaxDays = 100 * 366;
constexpr long kBackdateSeconds = 300;  // clock skew between machines

// Never prompt on a terminal for the password of an encrypted key.
int NoPassword(char*, int, int, void*) { return 0; }

Status OpenSslFailure(const std::string& what) {
  return Status::Internal(what + ": " + OpenSslErrors());
}

Status CheckCommonName(const std::string& cn) {
  // RFC 5280's upper bound for a CN (ub-common-name).
  if (cn.empty() || cn.size() > 64) {
    return Status::InvalidArgument("common name must be 1 to 64 bytes, got " +
                                   std::to_string(cn.size()));
  }
  return Status::Ok();
}

Status CheckDays(int days) {
  if (days < 1 || days > kMaxDays) {
    return Status::InvalidArgument("validity must be 1 to " + std::to_string(kMaxDays) +
                                   " days, got " + std::to_string(days));
  }
  return Status::Ok();
}

BioPtr MemBio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

Result<X509Ptr> ParseCert(std::string_view pem, const std::string& what) {
  if (pem.size() > INT_MAX) return Status::InvalidArgument(what + " is too large");
  BioPtr bio = MemBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassword, nullptr));
  if (!cert) {
    return Status::InvalidArgument(what + " is not a PEM certificate (" + OpenSslErrors() + ")");
  }
  return cert;
}

Result<EvpPkeyPtr> ParseKey(std::string_view pem, const std::string& what) {
  if (pem.size() > INT_MAX) return Status::InvalidArgument(what + " is too large");
  BioPtr bio = MemBio(pem);
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr));
  if (!key) {
    return Status::InvalidArgument(what + " is not an unencrypted PEM private key (" +
                                   OpenSslErrors() + ")");
  }
  return key;
}

Result<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return OpenSslFailure("PEM_write_X509");
  return BioText(bio.get());
}

Result<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslFailure("PEM_write_PrivateKey");
  }
  return BioText(bio.get());
}

Result<EvpPkeyPtr> NewKey() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslFailure("cannot generate a P-256 key");
  return key;
}

Status AddCommonName(X509_NAME* name, const std::string& cn) {
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.data()),
                                 static_cast<int>(cn.size()), -1, 0) != 1) {
    return Status::InvalidArgument("invalid common name \"" + cn + "\": " + OpenSslErrors());
  }
  return Status::Ok();
}

// A v3 certificate with a random 128-bit serial, the validity window, the
// subject CN and `key`'s public half; issuer and extensions still to set.
Result<X509Ptr> NewCert(const std::string& cn, int days, EVP_PKEY* key) {
  GP_RETURN_IF_ERROR(CheckCommonName(cn));
  GP_RETURN_IF_ERROR(CheckDays(days));
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) return OpenSslFailure("X509_new");
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return OpenSslFailure("RAND_bytes");
  bytes[sizeof bytes - 1] |= 1;  // never zero
  std::unique_ptr<BIGNUM, OsslDeleter<BN_free>> bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return OpenSslFailure("serial number");
  }
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), long{days} * 86400) == nullptr) {
    return OpenSslFailure("validity");
  }
  GP_RETURN_IF_ERROR(AddCommonName(X509_get_subject_name(cert.get()), cn));
  if (X509_set_pubkey(cert.get(), key) != 1) return OpenSslFailure("X509_set_pubkey");
  return cert;
}

// Adds an extension from its OpenSSL config text (fixed strings only).
Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return OpenSslFailure(std::string("extension ") + OBJ_nid2sn(nid));
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return OpenSslFailure(std::string("extension ") + OBJ_nid2sn(nid));
  return Status::Ok();
}

bool IsDnsName(std::string_view name) {
  if (name.starts_with("*.")) name.remove_prefix(2);
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.front() == '-') {
    return false;
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return name.find("..") == std::string_view::npos;
}

Status AddSans(X509* cert, const std::vector<std::string>& sans) {
  if (sans.empty()) return Status::Ok();
  using GeneralNames = std::unique_ptr<GENERAL_NAMES, OsslDeleter<GENERAL_NAMES_free>>;
  GeneralNames names(sk_GENERAL_NAME_new_null());
  if (!names) return OpenSslFailure("subjectAltName");
  for (const std::string& san : sans) {
    GENERAL_NAME* gen = GENERAL_NAME_new();
    if (gen == nullptr) return OpenSslFailure("subjectAltName");
    if (ASN1_OCTET_STRING* ip = a2i_IPADDRESS(san.c_str())) {
      GENERAL_NAME_set0_value(gen, GEN_IPADD, ip);
    } else {
      ERR_clear_error();
      ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
      if (!IsDnsName(san) || dns == nullptr ||
          ASN1_STRING_set(dns, san.data(), static_cast<int>(san.size())) != 1) {
        ASN1_IA5STRING_free(dns);
        GENERAL_NAME_free(gen);
        ERR_clear_error();
        return Status::InvalidArgument("SAN \"" + san +
                                       "\" is neither an IP address nor a DNS name");
      }
      GENERAL_NAME_set0_value(gen, GEN_DNS, dns);
    }
    if (sk_GENERAL_NAME_push(names.get(), gen) == 0) {
      GENERAL_NAME_free(gen);
      return OpenSslFailure("subjectAltName");
    }
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return OpenSslFailure("subjectAltName");
  }
  return Status::Ok();
}

Status Sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) return OpenSslFailure("signing the certificate");
  return Status::Ok();
}

struct Ca {
  X509Ptr cert;
  EvpPkeyPtr key;
};

Result<Ca> LoadCa(const PemPair& pem) {
  GP_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(pem.cert, "the CA certificate"));
  GP_ASSIGN_OR_RETURN(EvpPkeyPtr key, ParseKey(pem.key, "the CA key"));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("the CA key does not belong to the CA certificate");
  }
  if ((X509_get_extension_flags(cert.get()) & EXFLAG_CA) == 0) {
    return Status::InvalidArgument("the CA certificate \"" + internal::CommonNameOf(cert.get()) +
                                   "\" is not a CA (no basicConstraints CA:TRUE)");
  }
  return Ca{std::move(cert), std::move(key)};
}

// Issuer, end-entity extensions and the CA's signature for a leaf.
Status FinishLeaf(X509* cert, const Ca& ca, const char* eku) {
  if (X509_set_issuer_name(cert, X509_get_subject_name(ca.cert.get())) != 1) {
    return OpenSslFailure("X509_set_issuer_name");
  }
  X509* issuer = ca.cert.get();
  GP_RETURN_IF_ERROR(AddExtension(cert, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  GP_RETURN_IF_ERROR(AddExtension(cert, issuer, NID_key_usage, "critical,digitalSignature"));
  GP_RETURN_IF_ERROR(AddExtension(cert, issuer, NID_ext_key_usage, eku));
  GP_RETURN_IF_ERROR(AddExtension(cert, issuer, NID_subject_key_identifier, "hash"));
  GP_RETURN_IF_ERROR(AddExtension(cert, issuer, NID_authority_key_identifier, "keyid"));
  return Sign(cert, ca.key.get());
}

// Keys a client may ask a certificate for.
Status CheckClientKey(EVP_PKEY* key) {
  int type = EVP_PKEY_get_base_id(key);
  int bits = EVP_PKEY_get_bits(key);
  if (type == EVP_PKEY_EC && bits >= 256) return Status::Ok();
  if (type == EVP_PKEY_RSA && bits >= 2048) return Status::Ok();
  if (type == EVP_PKEY_ED25519) return Status::Ok();
  std::string name = type == EVP_PKEY_RSA ? "RSA" : type == EVP_PKEY_EC ? "EC" : OBJ_nid2sn(type);
  return Status::InvalidArgument(
      "the CSR's key is not accepted (want EC P-256 or larger, RSA 2048+ or Ed25519; got " + name +
      " " + std::to_string(bits) + " bits)");
}

}  // namespace

Result<PemPair> CreateCa(const std::string& common_name, int days) {
  GP_ASSIGN_OR_RETURN(EvpPkeyPtr key, NewKey());
  GP_ASSIGN_OR_RETURN(X509Ptr cert, NewCert(common_name, days, key.get()));
  X509* c = cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) {
    return OpenSslFailure("X509_set_issuer_name");
  }
  GP_RETURN_IF_ERROR(AddExtension(c, c, NID_basic_constraints, "critical,CA:TRUE"));
  GP_RETURN_IF_ERROR(AddExtension(c, c, NID_key_usage, "critical,keyCertSign,cRLSign"));
  GP_RETURN_IF_ERROR(AddExtension(c, c, NID_subject_key_identifier, "hash"));
  GP_RETURN_IF_ERROR(AddExtension(c, c, NID_authority_key_identifier, "keyid:always"));
  GP_RETURN_IF_ERROR(Sign(c, key.get()));
  PemPair out;
  GP_ASSIGN_OR_RETURN(out.cert, CertPem(c));
  GP_ASSIGN_OR_RETURN(out.key, KeyPem(key.get()));
  return out;
}

Result<PemPair> IssueServerCert(const PemPair& ca, const std::string& common_name,
                                const std::vector<std::string>& sans, int days) {
  GP_ASSIGN_OR_RETURN(Ca issuer, LoadCa(ca));
  GP_ASSIGN_OR_RETURN(EvpPkeyPtr key, NewKey());
  GP_ASSIGN_OR_RETURN(X509Ptr cert, NewCert(common_name, days, key.get()));
  GP_RETURN_IF_ERROR(AddSans(cert.get(), sans));
  GP_RETURN_IF_ERROR(FinishLeaf(cert.get(), issuer, "serverAuth"));
  PemPair out;
  GP_ASSIGN_OR_RETURN(out.cert, CertPem(cert.get()));
  GP_ASSIGN_OR_RETURN(out.key, KeyPem(key.get()));
  return out;
}

Result<PemPair> CreateKeyAndCsr(const std::string& common_name) {
  GP_RETURN_IF_ERROR(CheckCommonName(common_name));
  GP_ASSIGN_OR_RETURN(EvpPkeyPtr key, NewKey());
  X509ReqPtr req(X509_REQ_new());
  if (!req || X509_REQ_set_version(req.get(), X509_REQ_VERSION_1) != 1) {
    return OpenSslFailure("X509_REQ_new");
  }
  GP_RETURN_IF_ERROR(AddCommonName(X509_REQ_get_subject_name(req.get()), common_name));
  if (X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) {
    return OpenSslFailure("signing the CSR");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req.get()) != 1) {
    return OpenSslFailure("PEM_write_X509_REQ");
  }
  PemPair out;
  out.cert = BioText(bio.get());
  GP_ASSIGN_OR_RETURN(out.key, KeyPem(key.get()));
  return out;
}

Result<std::string> SignClientCsr(const PemPair& ca, std::string_view csr_pem,
                                  const std::string& common_name, int days) {
  if (csr_pem.size() > INT_MAX) return Status::InvalidArgument("the CSR is too large");
  BioPtr bio = MemBio(csr_pem);
  X509ReqPtr req(PEM_read_bio_X509_REQ(bio.get(), nullptr, NoPassword, nullptr));
  if (!req) {
    return Status::InvalidArgument("not a PEM certificate signing request (" + OpenSslErrors() +
                                   ")");
  }
  EVP_PKEY* pub = X509_REQ_get0_pubkey(req.get());
  if (pub == nullptr) {
    ERR_clear_error();
    return Status::InvalidArgument("the CSR has no usable public key");
  }
  if (X509_REQ_verify(req.get(), pub) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument(
        "the CSR's signature does not verify: it was not signed with the key it carries");
  }
  GP_RETURN_IF_ERROR(CheckClientKey(pub));
  GP_ASSIGN_OR_RETURN(Ca issuer, LoadCa(ca));
  GP_ASSIGN_OR_RETURN(X509Ptr cert, NewCert(common_name, days, pub));
  GP_RETURN_IF_ERROR(FinishLeaf(cert.get(), issuer, "clientAuth"));
  return CertPem(cert.get());
}

Result<CertInfo> ReadCert(std::string_view pem) {
  GP_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(pem, "the text"));
  CertInfo info;
  info.common_name = internal::CommonNameOf(cert.get());
  info.serial = internal::SerialHexOf(cert.get());
  info.fingerprint = internal::FingerprintOf(cert.get());
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("the certificate's notAfter time is invalid");
  }
  info.not_after_ms = static_cast<int64_t>(timegm(&tm)) * 1000;
  info.is_ca = (X509_get_extension_flags(cert.get()) & EXFLAG_CA) != 0;
  if (info.fingerprint.empty()) return OpenSslFailure("certificate digest");
  return info;
}

Result<std::string> CertFingerprint(std::string_view pem) {
  GP_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(pem, "the text"));
  std::string fp = internal::FingerprintOf(cert.get());
  if (fp.empty()) return OpenSslFailure("certificate digest");
  return fp;
}

Result<std::string> NormalizeFingerprint(std::string_view text) {
  auto invalid = [&] {
    std::string shown(text.substr(0, 120));
    return Status::InvalidArgument("\"" + shown +
                                   "\" is not a SHA-256 fingerprint (want sha256:<64 hex digits>)");
  };
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  if (t.size() >= 7) {
    std::string prefix(t.substr(0, 7));
    for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (prefix == "sha256:") t.remove_prefix(7);
  }
  bool colons = t.size() == 32 * 3 - 1;
  if (!colons && t.size() != 64) return invalid();
  std::string out = "sha256:";
  for (size_t i = 0; i < t.size(); ++i) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(t[i])));
    if (colons && i % 3 == 2) {
      if (c != ':') return invalid();
      continue;
    }
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return invalid();
    out.push_back(c);
  }
  return out;
}

}  // namespace gpupool::net
