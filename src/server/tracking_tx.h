// TrackingTx: a Tx that forwards every call to another Tx and records
// which jobs, attempts and nodes it wrote (InsertJob, UpdateJob, PutAttempt,
// PutNode: the only calls that change those rows). PoolQueue
// (server/pool_queue.h) wraps each of the Pool's transactions in one, so that
// its copy of the queue re-reads exactly the rows the transaction touched.
//
// Contract: behaves exactly as the wrapped Tx (same results, same errors);
// a write is recorded even when it failed, so that nothing it may have done
// is missed. A new Tx method must be forwarded here (the build fails until
// it is); one that writes jobs, attempts or nodes must also record them.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "store/store.h"

namespace gpupool::server {

// The rows a transaction wrote, by id.
struct TouchedRows {
  std::set<int64_t> jobs;
  std::set<std::string> attempts;
  std::set<std::string> nodes;
  bool empty() const { return jobs.empty() && attempts.empty() && nodes.empty(); }
};

class TrackingTx final : public Tx {
 public:
  explicit TrackingTx(Tx& in) : in_(in) {}
  const TouchedRows& touched() const { return touched_; }
  Tx& inner() { return in_; }

  Result<int64_t> InsertJob(const Job& job) override {
    Result<int64_t> id = in_.InsertJob(job);
    if (id.ok()) touched_.jobs.insert(*id);
    return id;
  }
  Status UpdateJob(const Job& job) override {
    touched_.jobs.insert(job.id);
    return in_.UpdateJob(job);
  }
  Result<std::optional<Job>> GetJob(int64_t id) override { return in_.GetJob(id); }
  Result<std::vector<Job>> ListJobs(const JobQuery& q) override { return in_.ListJobs(q); }
  Result<int64_t> CountJobs(const JobQuery& q) override { return in_.CountJobs(q); }
  Result<std::optional<int64_t>> FindSubmitKey(const std::string& owner,
                                               const std::string& key) override {
    return in_.FindSubmitKey(owner, key);
  }
  Status PutSubmitKey(const std::string& owner, const std::string& key, int64_t job_id) override {
    return in_.PutSubmitKey(owner, key, job_id);
  }
  Status PutAttempt(const Attempt& a) override {
    touched_.attempts.insert(a.id);
    return in_.PutAttempt(a);
  }
  Result<std::optional<Attempt>> GetAttempt(const std::string& id) override {
    return in_.GetAttempt(id);
  }
  Result<std::vector<Attempt>> ListAttempts(const AttemptQuery& q) override {
    return in_.ListAttempts(q);
  }
  Result<Checkpoint> AddCheckpoint(const Checkpoint& c) override { return in_.AddCheckpoint(c); }
  Result<std::vector<Checkpoint>> ListCheckpoints(int64_t job_id) override {
    return in_.ListCheckpoints(job_id);
  }
  Result<std::optional<Checkpoint>> GetCheckpoint(int64_t job_id, int64_t number) override {
    return in_.GetCheckpoint(job_id, number);
  }
  Result<std::optional<Checkpoint>> LatestCheckpoint(int64_t job_id) override {
    return in_.LatestCheckpoint(job_id);
  }
  Status DeleteCheckpoint(int64_t job_id, int64_t number) override {
    return in_.DeleteCheckpoint(job_id, number);
  }
  Status PutGroupUsage(const GroupUsage& u) override { return in_.PutGroupUsage(u); }
  Result<std::optional<GroupUsage>> GetGroupUsage(const std::string& group) override {
    return in_.GetGroupUsage(group);
  }
  Result<std::vector<GroupUsage>> ListGroupUsage() override { return in_.ListGroupUsage(); }
  Status PutNode(const Node& n) override {
    touched_.nodes.insert(n.id);
    return in_.PutNode(n);
  }
  Result<std::optional<Node>> GetNode(const std::string& id) override { return in_.GetNode(id); }
  Result<std::optional<Node>> GetNodeByName(const std::string& name) override {
    return in_.GetNodeByName(name);
  }
  Result<std::vector<Node>> ListNodes() override { return in_.ListNodes(); }
  Result<int64_t> AppendNodeEvent(const NodeEvent& event) override {
    return in_.AppendNodeEvent(event);
  }
  Result<std::vector<NodeEvent>> ListNodeEvents(const std::string& node_id, int64_t after_id,
                                                int64_t before_id, int32_t limit) override {
    return in_.ListNodeEvents(node_id, after_id, before_id, limit);
  }
  Status PutAgentCredential(const AgentCredential& c) override { return in_.PutAgentCredential(c); }
  Result<std::optional<AgentCredential>> GetAgentCredential(const std::string& node) override {
    return in_.GetAgentCredential(node);
  }
  Result<std::vector<AgentCredential>> ListAgentCredentials() override {
    return in_.ListAgentCredentials();
  }
  Result<int64_t> PushOutbox(const std::string& node_id, const std::string& type,
                             const std::string& body) override {
    return in_.PushOutbox(node_id, type, body);
  }
  Result<std::vector<OutboxMessage>> ListOutbox(const std::string& node_id,
                                                int64_t after_seq) override {
    return in_.ListOutbox(node_id, after_seq);
  }
  Status AckOutbox(const std::string& node_id, int64_t upto_seq) override {
    return in_.AckOutbox(node_id, upto_seq);
  }
  Status PutToken(const TokenRecord& t) override { return in_.PutToken(t); }
  Result<std::optional<TokenRecord>> GetToken(const std::string& hash) override {
    return in_.GetToken(hash);
  }
  Result<std::vector<TokenRecord>> ListTokens(const std::string& subject) override {
    return in_.ListTokens(subject);
  }
  Status PutUser(const UserRecord& u) override { return in_.PutUser(u); }
  Result<std::optional<UserRecord>> GetUser(const std::string& name) override {
    return in_.GetUser(name);
  }
  Result<std::vector<UserRecord>> ListUsers() override { return in_.ListUsers(); }
  Status PutGroup(const GroupRecord& g) override { return in_.PutGroup(g); }
  Result<std::optional<GroupRecord>> GetGroup(const std::string& name) override {
    return in_.GetGroup(name);
  }
  Result<std::vector<GroupRecord>> ListGroups() override { return in_.ListGroups(); }
  Result<int64_t> AppendAudit(const AuditEntry& e) override { return in_.AppendAudit(e); }
  Result<std::vector<AuditEntry>> ListAudit(int64_t after_id, int64_t before_id,
                                            int32_t limit) override {
    return in_.ListAudit(after_id, before_id, limit);
  }
  Status AppendLogs(int64_t job_id, const std::vector<LogLine>& lines) override {
    return in_.AppendLogs(job_id, lines);
  }
  Result<std::vector<LogLine>> ReadLogs(int64_t job_id, int64_t after_cursor,
                                        int32_t limit) override {
    return in_.ReadLogs(job_id, after_cursor, limit);
  }
  Result<int64_t> LastLogOffset(const std::string& attempt_id, int32_t rank) override {
    return in_.LastLogOffset(attempt_id, rank);
  }
  Result<std::optional<LogStream>> GetLogStream(const std::string& attempt_id,
                                                int32_t rank) override {
    return in_.GetLogStream(attempt_id, rank);
  }
  Result<std::vector<LogStream>> ListLogStreams(int64_t job_id) override {
    return in_.ListLogStreams(job_id);
  }
  Status SkipLogs(const LogSkip& skip) override { return in_.SkipLogs(skip); }
  Result<LogTotals> GetLogTotals() override { return in_.GetLogTotals(); }
  Result<std::vector<JobLogSize>> ListEndedJobLogs(int32_t limit) override {
    return in_.ListEndedJobLogs(limit);
  }
  Status RemoveJobLogs(int64_t job_id, int64_t now_ms, const std::string& reason) override {
    return in_.RemoveJobLogs(job_id, now_ms, reason);
  }
  Result<std::optional<LogRemoval>> GetLogRemoval(int64_t job_id) override {
    return in_.GetLogRemoval(job_id);
  }
  Result<int64_t> DeleteRemovedLogChunks(int64_t max_chunks) override {
    return in_.DeleteRemovedLogChunks(max_chunks);
  }
  Result<std::vector<std::string>> ListCheckpointManifests() override {
    return in_.ListCheckpointManifests();
  }
  Result<std::vector<std::string>> ListActiveJobInputs() override {
    return in_.ListActiveJobInputs();
  }
  Result<std::vector<std::pair<std::string, int64_t>>> StorageByAccount() override {
    return in_.StorageByAccount();
  }
  Result<StorageUsage> StorageUsed(const StorageHolder& holder) override {
    return in_.StorageUsed(holder);
  }
  Result<std::vector<StorageUsage>> ListStorageUsage() override { return in_.ListStorageUsage(); }
  Status PutStorageQuota(const StorageQuota& q) override { return in_.PutStorageQuota(q); }
  Status DeleteStorageQuota(const StorageHolder& holder) override {
    return in_.DeleteStorageQuota(holder);
  }
  Result<std::optional<StorageQuota>> GetStorageQuota(const StorageHolder& holder) override {
    return in_.GetStorageQuota(holder);
  }
  Result<std::vector<StorageQuota>> ListStorageQuotas() override { return in_.ListStorageQuotas(); }
  Result<int64_t> AddPrice(const accounting::PriceVersion& v) override { return in_.AddPrice(v); }
  Result<std::vector<accounting::PriceVersion>> ListPrices() override { return in_.ListPrices(); }
  Result<bool> PostEntry(const accounting::LedgerEntry& e) override { return in_.PostEntry(e); }
  Result<std::vector<accounting::LedgerEntry>> ListLedger(const LedgerQuery& q) override {
    return in_.ListLedger(q);
  }
  Result<int64_t> PostedTo(const std::string& attempt_id, int32_t rank) override {
    return in_.PostedTo(attempt_id, rank);
  }
  Result<std::vector<accounting::AccountBalance>> ListBalances() override {
    return in_.ListBalances();
  }
  Result<accounting::AccountBalance> GetBalance(const std::string& account) override {
    return in_.GetBalance(account);
  }
  Result<std::vector<UsageRow>> SumUsage(const UsageQuery& q) override { return in_.SumUsage(q); }
  Result<accounting::Micros> JobSpend(int64_t job_id) override { return in_.JobSpend(job_id); }
  Result<std::vector<AccountFlow>> AccountFlows(const std::string& account, int64_t since_ms,
                                                int64_t until_ms) override {
    return in_.AccountFlows(account, since_ms, until_ms);
  }
  Status PutBudget(const accounting::Budget& b) override { return in_.PutBudget(b); }
  Status DeleteBudget(const std::string& account) override { return in_.DeleteBudget(account); }
  Result<std::vector<accounting::Budget>> ListBudgets() override { return in_.ListBudgets(); }
  Result<std::optional<std::string>> GetMeta(const std::string& key) override {
    return in_.GetMeta(key);
  }
  Status PutMeta(const std::string& key, const std::string& value) override {
    return in_.PutMeta(key, value);
  }

 private:
  Tx& in_;
  TouchedRows touched_;
};

}  // namespace gpupool::server
