// Tests of net/pki.h: issued certificates checked with OpenSSL's own
// verifier (purposes, CA flags, SANs), CSR checks, errors on garbage, and
// fingerprints and serials compared with the `openssl` command line tool.
#include "net/pki.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <gtest/gtest.h>

namespace gpupool::net {
namespace {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

X509Ptr Parse(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509Ptr cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return cert;
}

// X509_verify_cert of `leaf` against `ca` as the only trust anchor, for
// `purpose`; returns the X509 error (X509_V_OK when it verifies).
int Verify(const std::string& leaf_pem, const std::string& ca_pem, int purpose) {
  X509Ptr leaf = Parse(leaf_pem);
  X509Ptr ca = Parse(ca_pem);
  EXPECT_TRUE(leaf && ca);
  if (!leaf || !ca) return -1;
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx, purpose);
  int ok = X509_verify_cert(ctx);
  int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  if (ok == 1) {
    EXPECT_EQ(err, X509_V_OK);
  }
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  ERR_clear_error();
  return err;
}

// Runs `openssl x509 <args>` on `pem` and returns its output.
std::string OpensslX509(const std::string& pem, const std::string& args) {
  std::string path = std::filesystem::temp_directory_path() /
                     ("gpupool-pki-test-" + std::to_string(getpid()) + ".pem");
  std::ofstream(path) << pem;
  std::string out;
  FILE* p = popen(("openssl x509 -in " + path + " -noout " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return "popen failed";
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  std::filesystem::remove(path);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

class PkiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = *CreateCa("gpupool test CA", 365);
    other_ca_ = *CreateCa("another CA", 365);
  }
  static inline PemPair ca_;
  static inline PemPair other_ca_;
};

TEST_F(PkiTest, CaIsASelfSignedCa) {
  auto info = ReadCert(ca_.cert);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->common_name, "gpupool test CA");
  EXPECT_TRUE(info->is_ca);
  EXPECT_EQ(info->fingerprint.size(), 7u + 64u);
  EXPECT_EQ(info->fingerprint.rfind("sha256:", 0), 0u);
  int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  EXPECT_NEAR(static_cast<double>(info->not_after_ms - now_ms), 365.0 * 86'400'000, 120'000);

  X509Ptr ca = Parse(ca_.cert);
  ASSERT_TRUE(ca);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);
  uint32_t usage = X509_get_key_usage(ca.get());
  EXPECT_TRUE(usage & KU_KEY_CERT_SIGN);
  EXPECT_TRUE(usage & KU_CRL_SIGN);
  int crit = -1;
  auto* bc = static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(ca.get(), NID_basic_constraints, &crit, nullptr));
  ASSERT_NE(bc, nullptr);
  EXPECT_TRUE(bc->ca);
  EXPECT_EQ(crit, 1);
  BASIC_CONSTRAINTS_free(bc);
  EXPECT_EQ(X509_check_issued(ca.get(), ca.get()), X509_V_OK);
  EVP_PKEY* pub = X509_get0_pubkey(ca.get());
  EXPECT_EQ(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(pub), 256);
  EXPECT_EQ(X509_get_signature_nid(ca.get()), NID_ecdsa_with_SHA256);
  // The CA verifies as its own anchor for any purpose it is used for.
  EXPECT_EQ(Verify(ca_.cert, ca_.cert, X509_PURPOSE_ANY), X509_V_OK);
}

TEST_F(PkiTest, SerialsAreRandom128Bit) {
  std::set<std::string> serials;
  for (int i = 0; i < 5; ++i) {
    PemPair ca = *CreateCa("ca " + std::to_string(i), 1);
    std::string serial = ReadCert(ca.cert)->serial;
    EXPECT_GE(serial.size(), 30u);  // 16 bytes, rarely a leading zero byte fewer
    EXPECT_LE(serial.size(), 32u);
    serials.insert(serial);
  }
  EXPECT_EQ(serials.size(), 5u);
}

TEST_F(PkiTest, ServerCertVerifiesForServersOnly) {
  auto server = IssueServerCert(ca_, "pool.example.org",
                                {"127.0.0.1", "::1", "localhost", "pool.example.org"}, 30);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ(Verify(server->cert, ca_.cert, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(Verify(server->cert, ca_.cert, X509_PURPOSE_SSL_CLIENT), X509_V_ERR_INVALID_PURPOSE);
  EXPECT_NE(Verify(server->cert, other_ca_.cert, X509_PURPOSE_SSL_SERVER), X509_V_OK);

  auto info = ReadCert(server->cert);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->is_ca);
  EXPECT_EQ(info->common_name, "pool.example.org");

  X509Ptr cert = Parse(server->cert);
  ASSERT_TRUE(cert);
  EXPECT_EQ(X509_check_host(cert.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_host(cert.get(), "pool.example.org", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_host(cert.get(), "other.example.org", 0, 0, nullptr), 0);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "::1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "10.0.0.1", 0), 0);
  // IPs are IP SANs, not DNS names.
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  ASSERT_NE(names, nullptr);
  int ips = 0, dns = 0;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    int type = sk_GENERAL_NAME_value(names, i)->type;
    ips += type == GEN_IPADD;
    dns += type == GEN_DNS;
  }
  GENERAL_NAMES_free(names);
  EXPECT_EQ(ips, 2);
  EXPECT_EQ(dns, 2);
  std::string text = OpensslX509(server->cert, "-ext subjectAltName");
  EXPECT_NE(text.find("IP Address:127.0.0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("DNS:localhost"), std::string::npos) << text;
  // The key that came with it is the certificate's.
  BIO* bio = BIO_new_mem_buf(server->key.data(), static_cast<int>(server->key.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert.get(), key), 1);
  EVP_PKEY_free(key);
}

TEST_F(PkiTest, ClientCertFromCsrVerifiesForClientsOnly) {
  auto csr = CreateKeyAndCsr("the name the client asks for");
  ASSERT_TRUE(csr.ok()) << csr.status().ToString();
  EXPECT_NE(csr->cert.find("BEGIN CERTIFICATE REQUEST"), std::string::npos);
  EXPECT_NE(csr->key.find("BEGIN PRIVATE KEY"), std::string::npos);
  auto cert = SignClientCsr(ca_, csr->cert, "agent-7", 30);
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_EQ(Verify(*cert, ca_.cert, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  EXPECT_EQ(Verify(*cert, ca_.cert, X509_PURPOSE_SSL_SERVER), X509_V_ERR_INVALID_PURPOSE);
  EXPECT_NE(Verify(*cert, other_ca_.cert, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  auto info = ReadCert(*cert);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, "agent-7");  // not what the CSR asked for
  EXPECT_FALSE(info->is_ca);
  EXPECT_EQ(OpensslX509(*cert, "-subject"), "subject=CN = agent-7");
  // The certificate carries the CSR's key.
  X509Ptr x = Parse(*cert);
  BIO* bio = BIO_new_mem_buf(csr->key.data(), static_cast<int>(csr->key.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(x.get(), key), 1);
  EVP_PKEY_free(key);
}

TEST_F(PkiTest, CsrWithABadSignatureIsRejected) {
  // A CSR carrying one key but signed with another.
  EVP_PKEY* carried = EVP_EC_gen("P-256");
  EVP_PKEY* signer = EVP_EC_gen("P-256");
  X509_REQ* req = X509_REQ_new();
  X509_NAME_add_entry_by_txt(X509_REQ_get_subject_name(req), "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("mallory"), -1, -1, 0);
  X509_REQ_set_pubkey(req, carried);
  ASSERT_GT(X509_REQ_sign(req, signer, EVP_sha256()), 0);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(bio, req);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_REQ_free(req);
  EVP_PKEY_free(carried);
  EVP_PKEY_free(signer);

  auto cert = SignClientCsr(ca_, pem, "mallory", 30);
  ASSERT_FALSE(cert.ok());
  EXPECT_EQ(cert.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cert.status().message().find("signature does not verify"), std::string::npos)
      << cert.status().message();
  EXPECT_EQ(ERR_peek_error(), 0u);  // no stale OpenSSL error left behind
}

TEST_F(PkiTest, WeakCsrKeyIsRejected) {
  EVP_PKEY* weak = EVP_RSA_gen(1024);
  ASSERT_NE(weak, nullptr);
  X509_REQ* req = X509_REQ_new();
  X509_REQ_set_pubkey(req, weak);
  ASSERT_GT(X509_REQ_sign(req, weak, EVP_sha256()), 0);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(bio, req);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_REQ_free(req);
  EVP_PKEY_free(weak);
  auto cert = SignClientCsr(ca_, pem, "x", 30);
  ASSERT_FALSE(cert.ok());
  EXPECT_NE(cert.status().message().find("RSA 1024"), std::string::npos) << cert.status().message();
}

TEST_F(PkiTest, GarbageGivesErrorsNotCrashes) {
  const std::string truncated = ca_.cert.substr(0, ca_.cert.size() / 2);
  const std::string bad_base64 =
      "-----BEGIN CERTIFICATE-----\n!!!!notbase64!!!!\n-----END CERTIFICATE-----\n";
  const std::string wrong_der =
      "-----BEGIN CERTIFICATE-----\nAAAAAAAAAAAAAAAA\n-----END CERTIFICATE-----\n";
  for (const std::string& garbage : {std::string(), std::string("garbage"), truncated, bad_base64,
                                     wrong_der, std::string(1 << 20, 'x'), ca_.key}) {
    auto info = ReadCert(garbage);
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(info.status().message().find("not a PEM certificate"), std::string::npos)
        << info.status().message();
    EXPECT_EQ(CertFingerprint(garbage).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(SignClientCsr(ca_, garbage, "x", 1).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(IssueServerCert({garbage, ca_.key}, "x", {}, 1).status().code(),
              StatusCode::kInvalidArgument);
    if (garbage != ca_.key) {
      EXPECT_EQ(IssueServerCert({ca_.cert, garbage}, "x", {}, 1).status().code(),
                StatusCode::kInvalidArgument);
    }
    EXPECT_EQ(ERR_peek_error(), 0u);
  }
}

TEST_F(PkiTest, BadInputsAreInvalidArgument) {
  // The CA's key must match its certificate, and the CA must be a CA.
  auto s = IssueServerCert({ca_.cert, other_ca_.key}, "x", {}, 1).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not belong"), std::string::npos) << s.message();
  PemPair leaf = *IssueServerCert(ca_, "leaf", {}, 1);
  s = IssueServerCert(leaf, "x", {}, 1).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is not a CA"), std::string::npos) << s.message();

  s = IssueServerCert(ca_, "x", {"bad name!"}, 1).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bad name!"), std::string::npos) << s.message();
  EXPECT_EQ(IssueServerCert(ca_, "x", {"a,DNS:evil"}, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(IssueServerCert(ca_, "x", {"*.pool.example.org"}, 1).ok());

  EXPECT_EQ(CreateCa("", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCa(std::string(65, 'a'), 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCa("ca", 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateKeyAndCsr("").status().code(), StatusCode::kInvalidArgument);
  auto csr = *CreateKeyAndCsr("a");
  EXPECT_EQ(SignClientCsr(ca_, csr.cert, "", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SignClientCsr(ca_, csr.cert, "a", -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ERR_peek_error(), 0u);
}

TEST_F(PkiTest, FingerprintAndSerialMatchTheOpensslTool) {
  PemPair server = *IssueServerCert(ca_, "s", {"127.0.0.1"}, 1);
  for (const std::string& pem : {ca_.cert, server.cert}) {
    // "sha256 Fingerprint=AB:CD:..." (the label's case varies by version).
    std::string out = OpensslX509(pem, "-fingerprint -sha256");
    size_t eq = out.find('=');
    ASSERT_NE(eq, std::string::npos) << out;
    std::string tool = out.substr(eq + 1);
    EXPECT_EQ(tool.size(), 95u) << out;
    auto ours = CertFingerprint(pem);
    ASSERT_TRUE(ours.ok());
    EXPECT_EQ(*NormalizeFingerprint(tool), *ours);
    std::string expected = "sha256:";
    for (char c : tool) {
      if (c != ':') expected.push_back(static_cast<char>(std::tolower(c)));
    }
    EXPECT_EQ(*ours, expected);
    EXPECT_EQ(ReadCert(pem)->fingerprint, *ours);

    // "serial=0A1B..."
    std::string serial = OpensslX509(pem, "-serial");
    ASSERT_EQ(serial.rfind("serial=", 0), 0u) << serial;
    serial = serial.substr(7);
    for (char& c : serial) c = static_cast<char>(std::tolower(c));
    EXPECT_EQ(ReadCert(pem)->serial, serial);
  }
  // The fingerprint is of the first certificate of a chain.
  EXPECT_EQ(*CertFingerprint(server.cert + ca_.cert), *CertFingerprint(server.cert));
}

TEST(FingerprintTest, Normalize) {
  const std::string hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  const std::string canonical = "sha256:" + hex;
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  std::string colons;
  for (size_t i = 0; i < upper.size(); i += 2) {
    if (i > 0) colons += ':';
    colons += upper.substr(i, 2);
  }
  EXPECT_EQ(*NormalizeFingerprint(canonical), canonical);
  EXPECT_EQ(*NormalizeFingerprint(hex), canonical);
  EXPECT_EQ(*NormalizeFingerprint(upper), canonical);
  EXPECT_EQ(*NormalizeFingerprint("SHA256:" + upper), canonical);
  EXPECT_EQ(*NormalizeFingerprint(colons), canonical);
  EXPECT_EQ(*NormalizeFingerprint("sha256:" + colons), canonical);
  EXPECT_EQ(*NormalizeFingerprint("  " + canonical + "\n"), canonical);
  for (const std::string& bad :
       {std::string(), std::string("sha256:"), hex.substr(1), hex + "0", "sha1:" + hex,
        "sha256:" + hex.substr(0, 63) + "g", colons.substr(0, 94) + ":",
        std::string("md5:") + colons, std::string(colons).replace(2, 1, "-")}) {
    auto r = NormalizeFingerprint(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_NE(NormalizeFingerprint("nope").status().message().find("sha256:<64 hex digits>"),
            std::string::npos);
}

}  // namespace
}  // namespace gpupool::net
