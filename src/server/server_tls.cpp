#include "server/server_tls.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>

#include "common/files.h"

namespace gpupool::server {

namespace {

constexpr int kCaDays = 3650;
constexpr int kServerCertDays = 397;

Result<net::PemPair> LoadOrCreateCa(const std::string& dir) {
  const std::string cert_path = dir + "/ca.crt";
  const std::string key_path = dir + "/ca.key";
  if (std::filesystem::exists(cert_path) && std::filesystem::exists(key_path)) {
    net::PemPair ca;
    GP_ASSIGN_OR_RETURN(ca.cert, ReadFile(cert_path));
    GP_ASSIGN_OR_RETURN(ca.key, ReadFile(key_path));
    GP_ASSIGN_OR_RETURN(auto info, net::ReadCert(ca.cert));
    if (!info.is_ca) return Status::InvalidArgument(cert_path + ": not a CA certificate");
    return ca;
  }
  GP_ASSIGN_OR_RETURN(net::PemPair ca, net::CreateCa("gpupool pool CA", kCaDays));
  // The key first: a crash between the two leaves no CA without its key.
  GP_RETURN_IF_ERROR(WriteFileAtomic(key_path, ca.key, {0600, true}));
  GP_RETURN_IF_ERROR(WriteFileAtomic(cert_path, ca.cert, {0644, true}));
  return ca;
}

Result<std::pair<std::string, std::string>> SharedCa(Store& store) {
  std::pair<std::string, std::string> ca;
  GP_RETURN_IF_ERROR(store.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto cert, tx.GetMeta("tls/ca_cert"));
    GP_ASSIGN_OR_RETURN(auto key, tx.GetMeta("tls/ca_key"));
    if (cert && key) ca = {*cert, *key};
    return Status::Ok();
  }));
  return ca;
}

}  // namespace

Status ShareCaThroughStore(Store& store, const std::string& data_dir) {
  const std::string dir = data_dir + "/tls";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  GP_ASSIGN_OR_RETURN(auto shared, SharedCa(store));
  if (shared.first.empty()) {
    // The first server: its own CA becomes the pool's. Two first servers at
    // once both store theirs; both then read back the one that stayed.
    GP_ASSIGN_OR_RETURN(net::PemPair mine, LoadOrCreateCa(dir));
    GP_RETURN_IF_ERROR(store.Transact([&](Tx& tx) -> Status {
      GP_RETURN_IF_ERROR(tx.PutMeta("tls/ca_key", mine.key));
      return tx.PutMeta("tls/ca_cert", mine.cert);
    }));
    GP_ASSIGN_OR_RETURN(shared, SharedCa(store));
  }
  GP_ASSIGN_OR_RETURN(auto info, net::ReadCert(shared.first));
  if (!info.is_ca) return Status::DataLoss("the database's pool CA is not a CA certificate");
  // The key first: a crash between the two leaves no CA without its key.
  GP_RETURN_IF_ERROR(WriteFileAtomic(dir + "/ca.key", shared.second, {0600, true}));
  return WriteFileAtomic(dir + "/ca.crt", shared.first, {0644, true});
}

Result<ServerTls> SetUpServerTls(const std::string& data_dir, std::vector<std::string> sans,
                                 const std::string& cert_file, const std::string& key_file) {
  const std::string dir = data_dir + "/tls";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  ServerTls out;
  GP_ASSIGN_OR_RETURN(out.ca, LoadOrCreateCa(dir));
  out.config.client_ca_file = dir + "/ca.crt";
  if (!cert_file.empty()) {
    out.config.cert_chain_file = cert_file;
    out.config.key_file = key_file;
    return out;
  }
  GP_ASSIGN_OR_RETURN(out.ca_fingerprint, net::CertFingerprint(out.ca.cert));
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host) == 0 && host[0] != '\0') sans.push_back(host);
  for (const char* always : {"localhost", "127.0.0.1", "::1"}) sans.push_back(always);
  std::sort(sans.begin(), sans.end());
  sans.erase(std::unique(sans.begin(), sans.end()), sans.end());
  GP_ASSIGN_OR_RETURN(net::PemPair server,
                      net::IssueServerCert(out.ca, "gpupool server", sans, kServerCertDays));
  out.config.cert_chain_file = dir + "/server.crt";
  out.config.key_file = dir + "/server.key";
  GP_RETURN_IF_ERROR(WriteFileAtomic(out.config.key_file, server.key, {0600, true}));
  // The chain includes the CA, so that agents pinning it find it.
  GP_RETURN_IF_ERROR(
      WriteFileAtomic(out.config.cert_chain_file, server.cert + out.ca.cert, {0644, true}));
  return out;
}

}  // namespace gpupool::server
