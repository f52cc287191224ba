// SqlTx: the SQL stores' transaction (store/store.h Tx), written once over
// a SqlConn (store/sql_query.h) for SQLite and PostgreSQL, declared here and
// defined facet by facet: sql_tx_jobs.cpp (JobsTx), sql_tx_nodes.cpp
// (NodesTx), sql_tx_identity.cpp (IdentityTx, MetaTx), sql_tx_storage.cpp
// (StorageTx), sql_tx_accounting.cpp (AccountingTx); the logs facet (LogsTx)
// delegates to SqlLogs (store/sql_logs.h) below. Internal to the SQL
// stores: SqliteStore::Transact and PgStore::Transact make one per
// transaction.
//
// Threading: as the store; valid only inside its Transact callback.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/sql_logs.h"
#include "store/sql_query.h"
#include "store/store.h"

namespace gpupool {

class SqlTx : public Tx {
 public:
  explicit SqlTx(SqlConn& conn) : conn_(conn), logs_(conn) {}

  // ---- jobs facet (sql_tx_jobs.cpp)

  Result<int64_t> InsertJob(const Job& job) override;
  Status UpdateJob(const Job& job) override;
  Result<std::optional<Job>> GetJob(int64_t id) override;
  Result<std::vector<Job>> ListJobs(const JobQuery& jq) override;
  Result<int64_t> CountJobs(const JobQuery& jq) override;
  Result<std::optional<int64_t>> FindSubmitKey(const std::string& owner,
                                               const std::string& key) override;
  Status PutSubmitKey(const std::string& owner, const std::string& key, int64_t job_id) override;
  Status PutAttempt(const Attempt& a) override;
  Result<std::optional<Attempt>> GetAttempt(const std::string& id) override;
  Result<std::vector<Attempt>> ListAttempts(const AttemptQuery& aq) override;
  Result<Checkpoint> AddCheckpoint(const Checkpoint& c) override;
  Result<std::vector<Checkpoint>> ListCheckpoints(int64_t job_id) override;
  Result<std::optional<Checkpoint>> GetCheckpoint(int64_t job_id, int64_t number) override;
  Result<std::optional<Checkpoint>> LatestCheckpoint(int64_t job_id) override;
  Status DeleteCheckpoint(int64_t job_id, int64_t number) override;
  Status PutGroupUsage(const GroupUsage& u) override;
  Result<std::optional<GroupUsage>> GetGroupUsage(const std::string& group) override;
  Result<std::vector<GroupUsage>> ListGroupUsage() override;

  // ---- nodes facet (sql_tx_nodes.cpp)

  Status PutNode(const Node& n) override;
  Result<std::optional<Node>> GetNode(const std::string& id) override;
  Result<std::optional<Node>> GetNodeByName(const std::string& name) override;
  Result<std::vector<Node>> ListNodes() override;
  Result<int64_t> AppendNodeEvent(const NodeEvent& e) override;
  Result<std::vector<NodeEvent>> ListNodeEvents(const std::string& node_id, int64_t after_id,
                                                int64_t before_id, int32_t limit) override;
  Status PutAgentCredential(const AgentCredential& c) override;
  Result<std::optional<AgentCredential>> GetAgentCredential(const std::string& node) override;
  Result<std::vector<AgentCredential>> ListAgentCredentials() override;
  Result<int64_t> PushOutbox(const std::string& node_id, const std::string& type,
                             const std::string& body) override;
  Result<std::vector<OutboxMessage>> ListOutbox(const std::string& node_id,
                                                int64_t after_seq) override;
  Status AckOutbox(const std::string& node_id, int64_t upto_seq) override;

  // ---- identity and meta facets (sql_tx_identity.cpp)

  Status PutToken(const TokenRecord& t) override;
  Result<std::optional<TokenRecord>> GetToken(const std::string& hash) override;
  Result<std::vector<TokenRecord>> ListTokens(const std::string& subject) override;
  Status PutUser(const UserRecord& u) override;
  Result<std::optional<UserRecord>> GetUser(const std::string& name) override;
  Result<std::vector<UserRecord>> ListUsers() override;
  Status PutGroup(const GroupRecord& g) override;
  Result<std::optional<GroupRecord>> GetGroup(const std::string& name) override;
  Result<std::vector<GroupRecord>> ListGroups() override;
  Result<int64_t> AppendAudit(const AuditEntry& e) override;
  Result<std::vector<AuditEntry>> ListAudit(int64_t after_id, int64_t before_id,
                                            int32_t limit) override;
  Result<std::optional<std::string>> GetMeta(const std::string& key) override;
  Status PutMeta(const std::string& key, const std::string& value) override;

  // ---- storage facet (sql_tx_storage.cpp)

  Result<std::vector<std::string>> ListCheckpointManifests() override;
  Result<std::vector<std::string>> ListActiveJobInputs() override;
  Result<StorageUsage> StorageUsed(const StorageHolder& h) override;
  Result<std::vector<StorageUsage>> ListStorageUsage() override;
  Result<std::vector<std::pair<std::string, int64_t>>> StorageByAccount() override;
  Status PutStorageQuota(const StorageQuota& quota) override;
  Status DeleteStorageQuota(const StorageHolder& h) override;
  Result<std::optional<StorageQuota>> GetStorageQuota(const StorageHolder& h) override;
  Result<std::vector<StorageQuota>> ListStorageQuotas() override;

  // ---- accounting facet (sql_tx_accounting.cpp)

  Result<int64_t> AddPrice(const accounting::PriceVersion& v) override;
  Result<std::vector<accounting::PriceVersion>> ListPrices() override;
  Result<bool> PostEntry(const accounting::LedgerEntry& e) override;
  Result<std::vector<accounting::LedgerEntry>> ListLedger(const LedgerQuery& q) override;
  Result<int64_t> PostedTo(const std::string& attempt_id, int32_t rank) override;
  Result<std::vector<accounting::AccountBalance>> ListBalances() override;
  Result<accounting::AccountBalance> GetBalance(const std::string& account) override;
  Result<std::vector<UsageRow>> SumUsage(const UsageQuery& q) override;
  Result<accounting::Micros> JobSpend(int64_t job_id) override;
  Result<std::vector<AccountFlow>> AccountFlows(const std::string& account, int64_t since_ms,
                                                int64_t until_ms) override;
  Status PutBudget(const accounting::Budget& b) override;
  Status DeleteBudget(const std::string& account) override;
  Result<std::vector<accounting::Budget>> ListBudgets() override;

  // ---- logs facet (store/sql_logs.h)

  Status AppendLogs(int64_t job_id, const std::vector<LogLine>& lines) override {
    return logs_.Append(job_id, lines);
  }
  Result<std::vector<LogLine>> ReadLogs(int64_t job_id, int64_t after_cursor,
                                        int32_t limit) override {
    return logs_.Read(job_id, after_cursor, limit);
  }
  Result<int64_t> LastLogOffset(const std::string& attempt_id, int32_t rank) override {
    return logs_.LastOffset(attempt_id, rank);
  }
  Result<std::optional<LogStream>> GetLogStream(const std::string& attempt_id,
                                                int32_t rank) override {
    return logs_.GetStream(attempt_id, rank);
  }
  Result<std::vector<LogStream>> ListLogStreams(int64_t job_id) override {
    return logs_.ListStreams(job_id);
  }
  Status SkipLogs(const LogSkip& skip) override { return logs_.Skip(skip); }
  Result<LogTotals> GetLogTotals() override { return logs_.Totals(); }
  Result<std::vector<JobLogSize>> ListEndedJobLogs(int32_t limit) override {
    return logs_.ListEnded(limit);
  }
  Status RemoveJobLogs(int64_t job_id, int64_t now_ms, const std::string& reason) override {
    return logs_.Remove(job_id, now_ms, reason);
  }
  Result<std::optional<LogRemoval>> GetLogRemoval(int64_t job_id) override {
    return logs_.GetRemoval(job_id);
  }
  Result<int64_t> DeleteRemovedLogChunks(int64_t max_chunks) override {
    return logs_.DeleteRemovedChunks(max_chunks);
  }

 private:
  Result<int64_t> NextCheckpointNumber(int64_t job_id);

  SqlConn& conn_;
  SqlLogs logs_;
};

}  // namespace gpupool
