// SqlTx's storage facet (store/sql_tx.h): the manifests blob garbage
// collection keeps, what each user and group stores (kept by the schema's
// storage_refs triggers, sqlite_schema.cpp), and their quotas.

#include <string>
#include <utility>
#include <vector>

#include "store/sql_rows.h"
#include "store/sql_tx.h"

namespace gpupool {
namespace {

using namespace ::gpupool::sql_rows;  // NOLINT: the store's row codecs

Result<std::vector<std::string>> ReadStrings(Query& q) {
  std::vector<std::string> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(q.Text(0));
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> SqlTx::ListCheckpointManifests() {
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare("SELECT DISTINCT manifest FROM checkpoints ORDER BY manifest"));
  return ReadStrings(q);
}

Result<std::vector<std::string>> SqlTx::ListActiveJobInputs() {
  // Non-terminal states are few and small; the inputs live in the spec.
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare("SELECT DISTINCT inputs FROM (SELECT " +
                                    SqlJsonText(conn_.dialect(), "spec", "inputs") +
                                    " AS inputs FROM jobs WHERE state IN (?1, ?2, ?3)) AS t "
                                    "WHERE inputs IS NOT NULL AND inputs <> '' ORDER BY inputs"));
  q.Bind(1, JobStateName(JobState::kPending));
  q.Bind(2, JobStateName(JobState::kScheduled));
  q.Bind(3, JobStateName(JobState::kRunning));
  return ReadStrings(q);
}

Result<StorageUsage> SqlTx::StorageUsed(const StorageHolder& h) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT coalesce(sum(bytes), 0), count(*) FROM "
                                             "storage_refs WHERE kind = ?1 AND name = ?2"));
  q.Bind(1, StorageHolderKindName(h.kind)).Bind(2, h.name);
  StorageUsage u;
  u.holder = h;
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (row) {
    u.bytes = q.Int(0);
    u.manifests = q.Int(1);
  }
  return u;
}

Result<std::vector<std::pair<std::string, int64_t>>> SqlTx::StorageByAccount() {
  GP_ASSIGN_OR_RETURN(
      Query q,
      conn_.Prepare(
          "SELECT 'group:' || name AS a, sum(bytes) FROM storage_refs WHERE kind = 'group' "
          "AND name IN (SELECT name FROM user_groups) GROUP BY name HAVING sum(bytes) > "
          "0 UNION ALL SELECT 'user:' || u.name, sum(u.bytes) FROM storage_refs u "
          "WHERE u.kind = 'user' AND NOT EXISTS (SELECT 1 FROM storage_refs g WHERE "
          "g.kind = 'group' AND g.manifest = u.manifest AND g.name IN (SELECT name FROM "
          "user_groups)) GROUP BY u.name HAVING sum(u.bytes) > 0 ORDER BY a"));
  using Paid = std::pair<std::string, int64_t>;
  return ReadAll<Paid>(q, [](const Query& row) -> Result<Paid> {
    return Paid{row.Text(0), row.Int(1)};
  });
}

Result<std::vector<StorageUsage>> SqlTx::ListStorageUsage() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT kind, name, sum(bytes), count(*) FROM "
                                             "storage_refs GROUP BY kind, name "
                                             "ORDER BY kind DESC, name"));
  std::vector<StorageUsage> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    StorageUsage u;
    GP_ASSIGN_OR_RETURN(u.holder.kind, ReadHolderKind(q.Text(0), "storage_refs"));
    u.holder.name = q.Text(1);
    u.bytes = q.Int(2);
    u.manifests = q.Int(3);
    out.push_back(std::move(u));
  }
  return out;
}

Status SqlTx::PutStorageQuota(const StorageQuota& quota) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql_rows::UpsertSql(
                                   "storage_quotas", "kind, name, bytes, set_ms", "kind, name")));
  q.Bind(1, StorageHolderKindName(quota.holder.kind)).Bind(2, quota.holder.name);
  q.Bind(3, quota.bytes).Bind(4, quota.set_ms);
  return q.Run();
}

Status SqlTx::DeleteStorageQuota(const StorageHolder& h) {
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare("DELETE FROM storage_quotas WHERE kind = ?1 AND name = ?2"));
  q.Bind(1, StorageHolderKindName(h.kind)).Bind(2, h.name);
  return q.Run();
}

Result<std::optional<StorageQuota>> SqlTx::GetStorageQuota(const StorageHolder& h) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT kind, name, bytes, set_ms FROM "
                                             "storage_quotas WHERE kind = ?1 AND name = ?2"));
  q.Bind(1, StorageHolderKindName(h.kind)).Bind(2, h.name);
  return ReadOne<StorageQuota>(q, ReadStorageQuota);
}

Result<std::vector<StorageQuota>> SqlTx::ListStorageQuotas() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT kind, name, bytes, set_ms FROM "
                                             "storage_quotas ORDER BY kind DESC, name"));
  return ReadAll<StorageQuota>(q, ReadStorageQuota);
}

}  // namespace gpupool
