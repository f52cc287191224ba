#include "server/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/files.h"
#include "common/ids.h"

namespace gpupool::server {

Result<Auth::Bootstrapped> Auth::Bootstrap(const std::string& data_dir) {
  Bootstrapped out;
  std::string join_path = data_dir + "/join.token";
  std::string admin_path = data_dir + "/admin.token";
  bool created = false;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto done, tx.GetMeta("auth/bootstrapped"));
    if (done) return Status::Ok();
    int64_t now = clock_.NowMs();
    out.admin_token = "gpa_" + RandomHex(24);
    out.join_token = "gpj_" + RandomHex(24);
    GP_RETURN_IF_ERROR(tx.PutToken({Sha256Hex(out.admin_token), "admin", "admin", now, 0, false}));
    GP_RETURN_IF_ERROR(
        tx.PutToken({Sha256Hex(out.join_token), "agent", "agent-join", now, 0, false}));
    // Files first: if writing them fails the transaction rolls back and the
    // next start tries again.
    GP_RETURN_IF_ERROR(WriteFileAtomic(admin_path, out.admin_token + "\n", {0600, true}));
    GP_RETURN_IF_ERROR(WriteFileAtomic(join_path, out.join_token + "\n", {0600, true}));
    created = true;
    return tx.PutMeta("auth/bootstrapped", "1");
  }));
  if (!created) {
    GP_ASSIGN_OR_RETURN(out.join_token, ReadFileTrimmed(join_path));
  }
  join_token_ = out.join_token;
  return out;
}

Result<Principal> Auth::Authenticate(const std::string& header) {
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty())
    return Status::Unauthenticated("missing Authorization: Bearer <token> header");
  if (header.compare(0, kBearer.size(), kBearer) != 0) {
    return Status::Unauthenticated("the Authorization header must be \"Bearer <token>\"");
  }
  std::string hash = Sha256Hex(std::string_view(header).substr(kBearer.size()));
  if (auto it = cache_.find(hash); it != cache_.end()) return it->second;
  std::optional<TokenRecord> rec;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(rec, tx.GetToken(hash));
    return Status::Ok();
  }));
  if (!rec || rec->revoked || (rec->expires_ms && rec->expires_ms < clock_.NowMs())) {
    return Status::Unauthenticated("invalid or expired token");
  }
  Principal p{rec->subject, rec->role};
  if (!rec->expires_ms) cache_[hash] = p;
  return p;
}

}  // namespace gpupool::server
