// The tables of MemoryStore (store/memory_store.h), their indexes, the undo
// journal every change goes through, and MemoryTx, whose methods are
// defined per facet in memory_<facet>.cpp. Internal to the memory store.
//
// Rule for the .cpp files: a table or index is only ever changed through
// the Journal (Put, Erase, Insert, Remove, Set, or Record with the inverse
// step), so that Transact can undo a failed transaction exactly.
//
// Threading: as MemoryStore.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/store.h"

namespace gpupool {

// Undo steps of the running transaction, replayed backwards on rollback.
class Journal {
 public:
  void Record(std::function<void()> undo) { steps_.push_back(std::move(undo)); }
  void Commit() { steps_.clear(); }
  void Rollback() {
    while (!steps_.empty()) {
      auto step = std::move(steps_.back());
      steps_.pop_back();
      step();
    }
  }

  // Inserts or replaces m[k].
  template <typename M, typename K, typename V>
  void Put(M& m, const K& k, V&& v) {
    auto it = m.find(k);
    if (it == m.end()) {
      Record([&m, k] { m.erase(k); });
      m.emplace(k, std::forward<V>(v));
    } else {
      Record([&m, k, old = it->second]() mutable { m.find(k)->second = std::move(old); });
      it->second = std::forward<V>(v);
    }
  }
  // Erases m[k] if present; whether it was.
  template <typename M, typename K>
  bool Erase(M& m, const K& k) {
    auto it = m.find(k);
    if (it == m.end()) return false;
    Record([&m, k, old = std::move(it->second)]() mutable { m.emplace(k, std::move(old)); });
    m.erase(it);
    return true;
  }
  // Set insert and remove.
  template <typename S, typename K>
  void Insert(S& s, const K& k) {
    if (s.insert(k).second) Record([&s, k] { s.erase(k); });
  }
  template <typename S, typename K>
  void Remove(S& s, const K& k) {
    if (s.erase(k) > 0) Record([&s, k] { s.insert(k); });
  }
  // A plain value (a counter, a struct).
  template <typename T>
  void Set(T& var, T v) {
    Record([&var, old = var]() mutable { var = std::move(old); });
    var = std::move(v);
  }

 private:
  std::vector<std::function<void()>> steps_;
};

// One job's logs (log_jobs and its chunks, in SQLite's terms).
struct MemoryJobLogs {
  std::vector<LogLine> lines;  // by cursor
  int64_t lines_count = 0;     // stored, including lines already freed after removal
  int64_t bytes = 0;
  int64_t stored_bytes = 0;
  int64_t finished_ms = 0;  // set by ListEndedJobLogs once the job is seen ended
  int64_t removed_ms = 0;
  std::string removed_reason;
  bool freed = false;
};

// What one manifest named by one holder counts (storage_refs).
struct MemoryStorageRef {
  int64_t bytes = 0;
  int64_t refs = 0;
};

struct MemoryState {
  Journal journal;
  bool in_tx = false;

  // Jobs facet.
  int64_t last_job_id = 0;
  std::map<int64_t, Job> jobs;
  std::map<JobState, std::set<int64_t>> jobs_by_state;
  std::map<std::string, std::set<int64_t>> jobs_by_owner;
  using AttemptKey = std::tuple<int64_t, int32_t, std::string>;  // job id, number, id
  std::unordered_map<std::string, Attempt> attempts;
  std::set<AttemptKey> attempt_order;                             // every attempt
  std::set<AttemptKey> live_attempts;                             // scheduled or running
  std::map<std::string, std::set<AttemptKey>> attempts_by_node;   // by Attempt::node_id
  std::set<std::pair<std::string, std::string>> attempt_nodes;    // a gang's (node, attempt)
  std::map<std::pair<int64_t, int64_t>, Checkpoint> checkpoints;  // by job id, number
  std::unordered_map<int64_t, int64_t> checkpoint_seq;            // last number per job
  std::map<std::string, int64_t> checkpoint_manifests;            // manifest -> checkpoints
  std::map<std::string, GroupUsage> group_usage;
  std::map<std::pair<std::string, std::string>, int64_t> submit_keys;  // (owner, key) -> job

  // Nodes facet.
  std::map<std::string, Node> nodes;                // by id
  std::map<std::string, std::string> node_by_name;  // name -> id
  int64_t last_node_event = 0;
  std::map<int64_t, NodeEvent> node_events;
  std::set<std::pair<std::string, int64_t>> node_events_by_node;
  std::map<std::string, AgentCredential> credentials;
  std::unordered_map<std::string, int64_t> outbox_seq;
  std::map<std::pair<std::string, int64_t>, OutboxMessage> outbox;

  // Identity facet.
  std::map<std::string, TokenRecord> tokens;
  std::map<std::string, UserRecord> users;
  std::map<std::string, GroupRecord> groups;
  int64_t last_audit_id = 0;
  std::map<int64_t, AuditEntry> audit;

  // Logs facet.
  int64_t last_log_cursor = 0;
  std::map<int64_t, MemoryJobLogs> log_jobs;
  std::map<std::pair<std::string, int32_t>, LogStream> log_streams;
  std::set<std::tuple<int64_t, std::string, int32_t>> log_streams_by_job;
  std::set<int64_t> log_jobs_unfreed;  // removed, chunks not yet freed
  LogTotals log_totals;                // of the jobs whose logs are not removed

  // Storage facet.
  std::map<StorageHolder, std::map<std::string, MemoryStorageRef>> storage_refs;
  std::map<StorageHolder, StorageQuota> storage_quotas;

  // Accounting facet.
  std::vector<accounting::PriceVersion> prices;               // by id
  std::map<int64_t, accounting::LedgerEntry> ledger;          // by id
  std::map<std::string, int64_t> ledger_keys;                 // key -> id
  std::map<std::pair<std::string, int32_t>, int64_t> posted;  // (attempt, rank) -> PostedTo
  std::map<std::string, accounting::AccountBalance> balances;
  std::map<int64_t, accounting::Micros> job_spend;  // job id -> its charges' sum
  std::map<std::string, accounting::Budget> budgets;

  // Meta facet.
  std::map<std::string, std::string> meta;
};

class MemoryTx : public Tx {
 public:
  explicit MemoryTx(MemoryState& s) : s_(s), j_(s.journal) {}

  // Jobs (memory_jobs.cpp).
  Result<int64_t> InsertJob(const Job& job) override;
  Status UpdateJob(const Job& job) override;
  Result<std::optional<Job>> GetJob(int64_t id) override;
  Result<std::vector<Job>> ListJobs(const JobQuery& q) override;
  Result<int64_t> CountJobs(const JobQuery& q) override;
  Result<std::optional<int64_t>> FindSubmitKey(const std::string& owner,
                                               const std::string& key) override;
  Status PutSubmitKey(const std::string& owner, const std::string& key, int64_t job_id) override;
  Status PutAttempt(const Attempt& a) override;
  Result<std::optional<Attempt>> GetAttempt(const std::string& id) override;
  Result<std::vector<Attempt>> ListAttempts(const AttemptQuery& q) override;
  Result<Checkpoint> AddCheckpoint(const Checkpoint& c) override;
  Result<std::vector<Checkpoint>> ListCheckpoints(int64_t job_id) override;
  Result<std::optional<Checkpoint>> GetCheckpoint(int64_t job_id, int64_t number) override;
  Result<std::optional<Checkpoint>> LatestCheckpoint(int64_t job_id) override;
  Status DeleteCheckpoint(int64_t job_id, int64_t number) override;
  Status PutGroupUsage(const GroupUsage& u) override;
  Result<std::optional<GroupUsage>> GetGroupUsage(const std::string& group) override;
  Result<std::vector<GroupUsage>> ListGroupUsage() override;

  // Nodes (memory_nodes.cpp).
  Status PutNode(const Node& n) override;
  Result<std::optional<Node>> GetNode(const std::string& id) override;
  Result<std::optional<Node>> GetNodeByName(const std::string& name) override;
  Result<std::vector<Node>> ListNodes() override;
  Result<int64_t> AppendNodeEvent(const NodeEvent& event) override;
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

  // Identity and meta (memory_identity.cpp).
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

  // Logs (memory_logs.cpp).
  Status AppendLogs(int64_t job_id, const std::vector<LogLine>& lines) override;
  Result<std::vector<LogLine>> ReadLogs(int64_t job_id, int64_t after_cursor,
                                        int32_t limit) override;
  Result<int64_t> LastLogOffset(const std::string& attempt_id, int32_t rank) override;
  Result<std::optional<LogStream>> GetLogStream(const std::string& attempt_id,
                                                int32_t rank) override;
  Result<std::vector<LogStream>> ListLogStreams(int64_t job_id) override;
  Status SkipLogs(const LogSkip& skip) override;
  Result<LogTotals> GetLogTotals() override;
  Result<std::vector<JobLogSize>> ListEndedJobLogs(int32_t limit) override;
  Status RemoveJobLogs(int64_t job_id, int64_t now_ms, const std::string& reason) override;
  Result<std::optional<LogRemoval>> GetLogRemoval(int64_t job_id) override;
  Result<int64_t> DeleteRemovedLogChunks(int64_t max_chunks) override;

  // Storage (memory_storage.cpp).
  Result<std::vector<std::string>> ListCheckpointManifests() override;
  Result<std::vector<std::string>> ListActiveJobInputs() override;
  Result<StorageUsage> StorageUsed(const StorageHolder& holder) override;
  Result<std::vector<StorageUsage>> ListStorageUsage() override;
  Result<std::vector<std::pair<std::string, int64_t>>> StorageByAccount() override;
  Status PutStorageQuota(const StorageQuota& q) override;
  Status DeleteStorageQuota(const StorageHolder& holder) override;
  Result<std::optional<StorageQuota>> GetStorageQuota(const StorageHolder& holder) override;
  Result<std::vector<StorageQuota>> ListStorageQuotas() override;

  // Accounting (memory_accounting.cpp).
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

  // Storage bookkeeping the jobs facet calls (memory_storage.cpp): one
  // more or one less reference from `job`'s owner and group to `manifest`.
  void AddStorageRef(const Job& job, const std::string& manifest, int64_t bytes);
  void DropStorageRef(const Job& job, const std::string& manifest);

 private:
  // Gives the job its log record if it has none; nullptr when its logs were
  // removed; NotFound without such a job (memory_logs.cpp).
  Result<MemoryJobLogs*> OpenJobLogs(int64_t job_id);
  // Replaces a log stream, keeping the by-job index.
  void PutLogStream(const LogStream& s);
  // Indexes of one job or attempt (memory_jobs.cpp).
  void IndexJob(const Job& job, bool add);
  void IndexAttempt(const Attempt& a, bool add);
  bool JobMatches(const Job& job, const JobQuery& q) const;

  MemoryState& s_;
  Journal& j_;
};

}  // namespace gpupool
