// SqlTx's identity and meta facets (store/sql_tx.h): tokens, users,
// groups, the audit log, named values.

#include <string>
#include <utility>
#include <vector>

#include "store/sql_rows.h"
#include "store/sql_tx.h"

namespace gpupool {
namespace {

using namespace ::gpupool::sql_rows;  // NOLINT: the store's row codecs

constexpr const char* kTokenColumns =
    "hash, subject, role, created_ms, expires_ms, revoked, name, scopes";
constexpr const char* kUserColumns = "name, role, password_hash, disabled, created_ms";
constexpr const char* kGroupColumns = "name, members, shared_jobs, created_ms";

}  // namespace

Status SqlTx::PutToken(const TokenRecord& t) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(UpsertSql("tokens", kTokenColumns, "hash")));
  q.Bind(1, t.hash).Bind(2, t.subject).Bind(3, t.role).Bind(4, t.created_ms);
  q.Bind(5, t.expires_ms).Bind(6, int64_t{t.revoked ? 1 : 0}).Bind(7, t.name).Bind(8, t.scopes);
  return q.Run();
}

Result<std::optional<TokenRecord>> SqlTx::GetToken(const std::string& hash) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kTokenColumns) +
                                             " FROM tokens WHERE hash = ?1"));
  q.Bind(1, hash);
  return ReadOne<TokenRecord>(q, ReadToken);
}

Result<std::vector<TokenRecord>> SqlTx::ListTokens(const std::string& subject) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kTokenColumns) +
                                             " FROM tokens WHERE (?1 = '' OR subject = ?1) "
                                             "ORDER BY created_ms, hash"));
  q.Bind(1, subject);
  return ReadAll<TokenRecord>(q, ReadToken);
}

Status SqlTx::PutUser(const UserRecord& u) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(UpsertSql("users", kUserColumns, "name")));
  q.Bind(1, u.name).Bind(2, u.role).Bind(3, u.password_hash);
  q.Bind(4, int64_t{u.disabled ? 1 : 0}).Bind(5, u.created_ms);
  return q.Run();
}

Result<std::optional<UserRecord>> SqlTx::GetUser(const std::string& name) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kUserColumns) +
                                             " FROM users WHERE name = ?1"));
  q.Bind(1, name);
  return ReadOne<UserRecord>(q, ReadUser);
}

Result<std::vector<UserRecord>> SqlTx::ListUsers() {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("SELECT " + std::string(kUserColumns) + " FROM users ORDER BY name"));
  return ReadAll<UserRecord>(q, ReadUser);
}

Status SqlTx::PutGroup(const GroupRecord& g) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(UpsertSql("user_groups", kGroupColumns, "name")));
  q.Bind(1, g.name).Bind(2, Dump(json(g.members))).Bind(3, int64_t{g.shared_jobs ? 1 : 0});
  q.Bind(4, g.created_ms);
  return q.Run();
}

Result<std::optional<GroupRecord>> SqlTx::GetGroup(const std::string& name) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kGroupColumns) +
                                             " FROM user_groups WHERE name = ?1"));
  q.Bind(1, name);
  return ReadOne<GroupRecord>(q, ReadGroup);
}

Result<std::vector<GroupRecord>> SqlTx::ListGroups() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kGroupColumns) +
                                             " FROM user_groups ORDER BY name"));
  return ReadAll<GroupRecord>(q, ReadGroup);
}

Result<int64_t> SqlTx::AppendAudit(const AuditEntry& e) {
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare("INSERT INTO audit (ts_ms, actor, action, target, detail, "
                                    "peer, ok) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id"));
  q.Bind(1, e.ts_ms).Bind(2, e.actor).Bind(3, e.action).Bind(4, e.target).Bind(5, e.detail);
  q.Bind(6, e.peer).Bind(7, int64_t{e.ok ? 1 : 0});
  return RunReturningId(q);
}

Result<std::vector<AuditEntry>> SqlTx::ListAudit(int64_t after_id, int64_t before_id,
                                                 int32_t limit) {
  if (limit <= 0) return std::vector<AuditEntry>();
  GP_ASSIGN_OR_RETURN(
      Query q,
      conn_.Prepare(before_id == 0 ? "SELECT id, ts_ms, actor, action, target, detail, peer, ok "
                                     "FROM audit WHERE id > ?1 AND ?3 = 0 ORDER BY id LIMIT ?2"
                                   : "SELECT id, ts_ms, actor, action, target, detail, peer, ok "
                                     "FROM audit WHERE id > ?1 AND id < ?3 ORDER BY id DESC "
                                     "LIMIT ?2"));
  q.Bind(1, after_id).Bind(2, static_cast<int64_t>(limit)).Bind(3, before_id);
  return ReadAll<AuditEntry>(q, ReadAudit);
}

Result<std::optional<std::string>> SqlTx::GetMeta(const std::string& key) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT value FROM meta WHERE key = ?1"));
  q.Bind(1, key);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(q.Text(0));
}

Status SqlTx::PutMeta(const std::string& key, const std::string& value) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO meta (key, value) VALUES (?1, ?2) "
                                             "ON CONFLICT (key) DO UPDATE SET value = "
                                             "excluded.value"));
  q.Bind(1, key).Bind(2, value);
  return q.Run();
}

}  // namespace gpupool
